"""Shortcuts of the Paraver reader against the general code they bypass (kept as the
oracle): the alternating begin/end pairing against the clipped-depth LIFO pairing, and
the device-only thread test on Arrow kernels against the numpy-object version it
replaced."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.io.paraver import _alternating, _Assembler, _pair_lifo, pair_regions
from traceatlas.model.schema import DEVICE_CATEGORIES


def _same_pairs(group: np.ndarray, opens: np.ndarray) -> None:
    got = pair_regions(group, opens)
    want = _pair_lifo(group, opens)
    for a, b in zip(got, want, strict=True):
        assert a.tolist() == b.tolist()  # same pairs in the same order


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(0, 6), max_size=12))
def test_alternating_groups_pair_like_the_lifo_oracle(sizes: list[int]) -> None:
    """Groups of (begin, end) pairs: the shortcut is taken and equals the general path."""
    group = np.repeat(np.arange(len(sizes), dtype=np.int64), [2 * s for s in sizes])
    opens = np.tile([True, False], len(group) // 2).astype(bool)
    assert _alternating(group, opens)
    _same_pairs(group, opens)


@settings(max_examples=120, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=40))
def test_any_sequence_pairs_like_the_lifo_oracle(events: list[tuple[int, bool]]) -> None:
    """Nested, unclosed, unmatched or split groups: same result as the general path."""
    events = sorted(events, key=lambda e: e[0])
    group = np.asarray([g for g, _ in events], dtype=np.int64)
    opens = np.asarray([o for _, o in events], dtype=bool)
    _same_pairs(group, opens)


def test_a_pair_split_across_groups_is_not_alternating() -> None:
    group = np.asarray([0, 1, 1, 1], dtype=np.int64)
    opens = np.asarray([True, False, True, False])
    assert not _alternating(group, opens)
    o, c, u, m = pair_regions(group, opens)
    assert (o.tolist(), c.tolist(), u.tolist(), m.tolist()) == ([2], [3], [0], [1])


def _device_only_numpy(cat: list[str | None], rank: np.ndarray, track: np.ndarray,
                       t_rank: np.ndarray, t_thread: np.ndarray) -> np.ndarray:
    """The numpy version the reader used before (object array of strings)."""
    c = np.asarray(cat, dtype=object)
    key = rank * (1 << 32) + track
    dev = np.isin(c, list(DEVICE_CATEGORIES))
    other = (c != "state") & ~dev
    tk = t_rank * (1 << 32) + t_thread
    return np.isin(tk, key[dev]) & ~np.isin(tk, key[other])


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2),
                               st.sampled_from(["state", "kernel", "memcpy", "memset",
                                                "cpu_op", "other", None])),
                     min_size=1, max_size=30))
def test_device_only_threads_like_the_numpy_version(
        rows: list[tuple[int, int, str | None]]) -> None:
    rank = np.asarray([r for r, _, _ in rows], dtype=np.int64)
    track = np.asarray([t for _, t, _ in rows], dtype=np.int64)
    cat = [c for _, _, c in rows]
    t_rank = np.repeat(np.arange(3, dtype=np.int64), 2)
    t_thread = np.tile(np.asarray([1, 2], dtype=np.int64), 3)
    intervals = {"rank": rank, "track_id": track, "category": pa.array(cat, pa.string())}
    got = _Assembler.device_only_threads(None, intervals, t_rank, t_thread)  # type: ignore[arg-type]
    want = _device_only_numpy(cat, rank, track, t_rank, t_thread)
    assert got.tolist() == want.tolist()


HEADER = b"#Paraver (01/01/2024 at 00:00):1000_ns:1(2):1:2(1:1,1:1)\n"


def test_zero_led_cast_keeps_the_sliced_values() -> None:
    """Leading zeros, 19-digit values, negative values (the block falls back to sliced
    fields), an empty field and a value past int64: the fast parse equals the oracle."""
    from traceatlas.io.paraver_body import Body, parse_header
    from traceatlas.io.paraver_fields import parse_body

    bodies = [
        b"2:1:1:1:1:5:0060000019:007\n2:1:1:2:1:9:9223372036854775807:1\n",
        b"2:1:1:1:1:5:60000019:-3\n2:1:1:2:1:9:50000002:4\n",
        b"2:1:1:1:1:5:60000019:\n2:1:1:2:1:9:50000002:4\n",
        b"2:1:1:1:1:5:60000019:9223372036854775808\n2:1:1:2:1:9:50000002:0\n",
        b"1:1:1:1:1:0:10:1\n3:1:1:1:1:1:2:1:1:2:1:3:4:64:0\n2:1:1:1:1:5:1:1\n",
    ]
    for body in bodies:
        data = HEADER + body
        header, at = parse_header(data, "t.prv")
        old = Body.parse(data, at, header, "t.prv")
        new = parse_body(data, at, header, "t.prv", threads=1)
        assert new.counts == old.counts and new.drops == old.drops
        for name in ("states", "ev_fields", "ev_lines", "pairs", "comms"):
            assert np.array_equal(getattr(old, name), getattr(new, name)), (body, name)
    header, at = parse_header(HEADER + bodies[0], "t.prv")
    first = parse_body(HEADER + bodies[0], at, header, "t.prv")
    assert first.pairs[:, 1:3].tolist() == [[60000019, 7], [9223372036854775807, 1]]


def test_malloc_retain_does_not_change_the_tables(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """glibc's reuse of freed memory during read() (``allocator.malloc_retain``) is an allocator
    setting only: the tables equal those of a read with the setting left alone (the
    helper replaced by a no-op), and a read after it was set back equals the first."""
    import warnings

    import traceatlas.io.paraver as paraver
    from traceatlas.io import allocator
    from traceatlas.io.sources import Source
    from traceatlas.testing.mpi import write_mpi_trace

    path = tmp_path / "mpi.prv"
    write_mpi_trace(path, ranks=4, iterations=20, imbalance=0.5,
                    message_bytes=(1024, 4096, 65536))

    def tables() -> list[dict[str, pa.Table]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [r.tables for r in paraver.ParaverReader().read(Source(str(path)), threads=2)]

    retained = tables()
    again = tables()
    monkeypatch.setattr(allocator, "malloc_retain", lambda on: False)
    plain = tables()
    assert len(retained) == len(plain) == 4
    for a, b, c in zip(retained, again, plain, strict=True):
        assert a.keys() == c.keys()
        for name in a:
            assert a[name].equals(c[name]) and b[name].equals(c[name]), name
    assert sum(t["intervals"].num_rows for t in plain) > 0


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(0, 2),
                               st.integers(0, 6)), max_size=60), monotone=st.booleans())
def test_region_order_of_every_event_equals_the_five_key_lexsort(
        rows: list[tuple[int, int, int, int]], monotone: bool) -> None:
    """Every event a region (the path without gathers): same order and groups as the
    five-key lexsort and a group id per (rank, thread, type) change."""
    from traceatlas.io.paraver import _region_order

    a = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    rank, thread, etype, time = a[:, 0], a[:, 1], a[:, 2] + 50_000_001, a[:, 3]
    if monotone:
        time = np.sort(time)
    order = np.arange(len(a), dtype=np.int64) * 2
    ridx = np.arange(len(a), dtype=np.int64)
    sort, group = _region_order(ridx, rank, thread, etype, time, order)
    want = np.lexsort((order, time, etype, thread, rank))
    assert sort.tolist() == want.tolist()
    groups, ids = {}, []
    for i in want.tolist():  # ids by first appearance of (rank, thread, type)
        ids.append(groups.setdefault((rank[i], thread[i], etype[i]), len(groups)))
    assert group.tolist() == ids
