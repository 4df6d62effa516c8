"""The fast .prv body parse (io/paraver_fields.py) against the original one
(``paraver_body.Body.parse``, kept as the oracle), on hand-made damage of every kind the
reader's tests cover, on random mixes of good and damaged lines cut into tiny blocks, and
on values worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.errors import CorruptTraceError
from traceatlas.io.paraver_body import (
    BAD_FIELDS,
    INCOMPLETE,
    NOT_INTEGER,
    STATE_REVERSED,
    TIME_RANGE,
    UNKNOWN_OBJECT,
    Body,
    parse_header,
)
from traceatlas.io.paraver_fields import parse_body
from traceatlas.testing.mpi import write_mpi_trace

HEADER = b"#Paraver (01/01/2024 at 00:00):1000_ns:1(2):2:2(1:1,2:1),1(1:1)\n"
GOOD = [
    b"1:1:1:1:1:0:100:1",
    b"1:1:1:2:2:10:20:3",
    b"2:1:1:1:1:5:60000019:3",
    b"2:1:1:2:1:7:60000019:0:42000050:12",
    b"2:1:2:1:1:9:50000002:4:50000001:0:50000003:7",
    b"3:1:1:1:1:10:11:1:1:2:1:12:13:64:7",
    b"4:1:1:1:1:10:1:2:3",
    b"# a comment: with \"quotes\"",
    b"c:1:1:2:1:2",
    b"",
]
DAMAGED = [
    b"1:1:1:1:1:0:100",  # wrong number of fields
    b"2:1:1:1:1:5:60000019",  # odd field count
    b"3:1:1:1:1:10:11:1:1:2:1:12:13:64",  # 14 fields
    b"1:1:1:1:1:0:1x0:1",  # not an integer
    b"1:1:1:1:1: 0:100:1",  # leading space in a field
    b"2:1:1:1:1:5:60000019:",  # empty last field
    b"2:1:1:1:1::60000019:3",  # empty field
    "2:1:1:1:1:5:60000019:\u00e9".encode(),  # non-ASCII
    b"2:1:1:1:1:5:\xff:3",  # not UTF-8
    b"1:1:1:1:1:0:100:1 \t",  # trailing whitespace (kept)
    b"1:1:1:1:1:0:100:1\r",  # CRLF line (kept)
    b"1:1:1:1:1:-5:100:1",  # time out of range
    b"2:1:1:1:1:99999999999999999:1:1",  # time out of range
    b"1:1:3:1:1:0:100:1",  # unknown application
    b"1:1:1:3:1:0:100:1",  # unknown task
    b"2:1:1:1:2:5:1:1",  # unknown thread (task 1 has one)
    b"3:1:1:1:1:10:11:1:9:1:1:12:13:64:7",  # unknown receiver task
    b"1:1:1:1:1:50:40:1",  # state ending before it begins
    b"garbage line",
    b"5:1:1",
    b"\r",
]


def _compare(data: bytes, *, block_bytes: int, threads: int = 2) -> Body | None:
    """The fast parse equals the oracle's (or both refuse the file with one message)."""
    header, at = parse_header(data, "t.prv")
    try:
        old = Body.parse(data, at, header, "t.prv")
    except CorruptTraceError as exc:
        with pytest.raises(CorruptTraceError) as got:
            parse_body(data, at, header, "t.prv", threads=threads, block_bytes=block_bytes)
        assert str(got.value) == str(exc)
        return None
    new = parse_body(data, at, header, "t.prv", threads=threads, block_bytes=block_bytes)
    assert new.counts == old.counts
    assert list(new.drops.count.items()) == list(old.drops.count.items())
    assert new.drops.first == old.drops.first
    assert (new.origin_ns, new.received_before_sent) == (old.origin_ns, old.received_before_sent)
    for name in ("states", "state_lines", "ev_fields", "ev_lines", "pairs", "comms"):
        a, b = getattr(old, name), getattr(new, name)
        assert a.shape == b.shape, name
        assert np.array_equal(a, b), name
    return new


@pytest.mark.parametrize("block_bytes", [1, 40, 1 << 20])
def test_every_damage_kind_matches_the_oracle(block_bytes: int) -> None:
    lines = GOOD + DAMAGED + GOOD
    data = HEADER + b"# traceatlas time_origin_ns=1000\n" + b"\n".join(lines) + b"\n"
    body = _compare(data, block_bytes=block_bytes)
    assert body is not None
    assert set(body.drops.count) == {BAD_FIELDS, NOT_INTEGER, TIME_RANGE, UNKNOWN_OBJECT,
                                     STATE_REVERSED}
    assert body.origin_ns == 1000


def test_by_hand_counts_lines_and_units() -> None:
    """Line numbers, units and drops worked out by hand (header unit us)."""
    data = (b"#Paraver (x):50_us:1(1):1:1(2:1)\n"   # line 1
            b"1:1:1:1:2:3:5:7\n"                    # 2 state, thread 2, 3-5 us
            b"\n"                                   # 3 blank
            b"2:1:1:1:1:4:60000019:2:42000050:9\n"  # 4 event, two pairs
            b"1:1:1:1:1:4:3:1\n"                    # 5 reversed state
            b"2:1:1:1:3:4:1:1\n"                    # 6 thread 3 of 2
            b"3:1:1:1:1:1:2:1:1:2:6:7:8:9\n"        # 7 message with 14 fields
            b"1:1:1:1:1:1:2")                       # 8 no line end
    header, at = parse_header(data, "t.prv")
    body = parse_body(data, at, header, "t.prv", block_bytes=16)
    assert body.counts["1"] == 3 and body.counts["2"] == 2 and body.counts["blank"] == 1
    assert body.states.tolist() == [[1, 1, 1, 1, 2, 3_000, 5_000, 7]]
    assert body.state_lines.tolist() == [2]
    assert body.ev_fields.tolist() == [[2, 1, 1, 1, 1, 4_000]]  # type, cpu, appl, task, thread
    assert body.pairs.tolist() == [[0, 60000019, 2, 0], [0, 42000050, 9, 1]]
    assert body.drops.count == {INCOMPLETE: 1, STATE_REVERSED: 1, UNKNOWN_OBJECT: 1,
                                BAD_FIELDS: 1}
    assert body.drops.first == {INCOMPLETE: 8, STATE_REVERSED: 5, UNKNOWN_OBJECT: 6,
                                BAD_FIELDS: 7}
    _compare(data, block_bytes=16)


@pytest.mark.parametrize("body", [b"garbage\n", b"1:1:1:1:1:0:x:1\n", b"1:1:1:1:1:0:1"])
def test_nothing_usable_is_refused_like_the_oracle(body: bytes) -> None:
    _compare(HEADER + body, block_bytes=8)


def test_empty_body_and_comments_only() -> None:
    _compare(HEADER, block_bytes=8)
    _compare(HEADER + b"# only a comment\n\n", block_bytes=8)


def test_synthetic_mpi_trace_matches(tmp_path: Path) -> None:
    trace = write_mpi_trace(tmp_path / "m.prv", ranks=6, iterations=40,
                            message_bytes=(10, 4096))
    data = trace.path.read_bytes()
    for block in (97, 4096, 1 << 20):
        body = _compare(data, block_bytes=block)
        assert body is not None
        assert len(body.comms) == trace.counts["messages"]
        assert len(body.pairs) == 2 * trace.counts["intervals"]


_LINE = st.sampled_from(GOOD + DAMAGED)


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(_LINE, max_size=40), block=st.integers(1, 300),
       end=st.booleans(), threads=st.integers(1, 3))
def test_random_mixes_match_the_oracle(lines: list[bytes], block: int, end: bool,
                                       threads: int) -> None:
    data = HEADER + b"\n".join(lines) + (b"\n" if end else b"")
    _compare(data, block_bytes=block, threads=threads)


_SMALL = st.integers(0, 3)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(_SMALL, st.integers(1, 3), _SMALL, st.integers(0, 6)),
                     max_size=60), monotone=st.booleans())
def test_region_order_equals_the_five_key_lexsort(
        rows: list[tuple[int, int, int, int]], monotone: bool) -> None:
    from traceatlas.io.paraver import _group_ids, _region_order

    a = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    rank, thread, etype, time = a[:, 0], a[:, 1], a[:, 2] + 50_000_001, a[:, 3]
    if monotone:
        time = np.sort(time)
    order = np.arange(len(a), dtype=np.int64) * 3
    ridx = np.flatnonzero(etype != 50_000_003)  # some rows are not regions
    sort, group = _region_order(ridx, rank, thread, etype, time, order)
    want = ridx[np.lexsort((order[ridx], time[ridx], etype[ridx], thread[ridx], rank[ridx]))]
    assert sort.tolist() == want.tolist()
    key = np.stack([rank[want], thread[want], etype[want]], axis=1)
    assert group.tolist() == _group_ids(key).tolist()


@settings(max_examples=80, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=50))
def test_pair_regions_equals_a_stack_per_group(events: list[tuple[int, bool]]) -> None:
    """LIFO pairing against a plain stack per group (a close on an empty stack is
    unmatched, what stays open is unclosed)."""
    from traceatlas.io.paraver import pair_regions

    events = sorted(events, key=lambda e: e[0])  # grouped, file order kept within
    group = np.asarray([g for g, _ in events], dtype=np.int64)
    opens = np.asarray([o for _, o in events], dtype=bool)
    stacks: dict[int, list[int]] = {}
    pairs, unmatched = set(), []
    for i, (g, is_open) in enumerate(events):
        stack = stacks.setdefault(g, [])
        if is_open:
            stack.append(i)
        elif stack:
            pairs.add((stack.pop(), i))
        else:
            unmatched.append(i)
    unclosed = sorted(i for s in stacks.values() for i in s)
    o, c, u, m = pair_regions(group, opens)
    assert set(zip(o.tolist(), c.tolist(), strict=True)) == pairs and len(o) == len(pairs)
    assert u.tolist() == unclosed and m.tolist() == unmatched
