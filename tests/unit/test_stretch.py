"""The planted-regression writer (traceatlas.testing.stretch): stretched durations and
stream shifts against hand-computed values on small traces built here."""

from __future__ import annotations

import gzip
import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.errors import InputError
from traceatlas.testing import TraceBuilder
from traceatlas.testing.stretch import (
    jitter_kernels,
    load_trace,
    queue_starts,
    stretch_events,
    stretch_kernel,
)

BASE = 1_700_000_000_000_000_000


def _ns(us: float) -> int:
    return round(us * 1000)


def _trace(tmp_path: Path) -> Path:
    """One stream (7): A [1000, 3000), B [3500, 4500), A [4600, 6600), C [10000, 11000);
    stream 9: A [2000, 4000) (another stream, must not move). ns from the trace start."""
    b = TraceBuilder(rank=0, base_time_ns=BASE, profiler_markers=False)
    b.step(1, 0, 20_000)
    b.annotation("fwd", 100, 900, gpu=True)
    b.launch("A", 100, 50, 1000, 2000)
    b.launch("B", 200, 50, 3500, 1000)
    b.launch("A", 300, 50, 4600, 2000)
    b.launch("A", 400, 50, 2000, 2000, stream=9)
    b.launch("C", 9000, 50, 10_000, 1000)
    return b.write(tmp_path / "t.json")


def _device(doc: dict[str, Any], rel: int) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(name, stream) -> sorted (start, end) ns relative to the trace start."""
    out: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            s = _ns(e["ts"]) - rel
            out[(e["name"], e["tid"])].append((s, s + _ns(e["dur"])))
    return {k: sorted(v) for k, v in out.items()}


def _rel(doc: dict[str, Any]) -> int:
    return int(doc["baseTimeNanoseconds"]) - BASE


def test_stretch_by_hand(tmp_path: Path) -> None:
    src = _trace(tmp_path)
    out = tmp_path / "s.json.gz"
    res = stretch_kernel(src, out, "A", 1.5)
    assert res.changed == 3 and res.streams == 2
    assert gzip.decompress(out.read_bytes())  # written compressed
    doc = load_trace(out)
    dev = _device(doc, _rel(doc))
    # stream 7 by hand: A 2000 -> 3000 ns, ends 1000 late; B: gap 500 absorbs half, starts
    # 500 late; B ends 500 late; A: gap 100, starts 400 late, 3000 long -> ends 1400 late;
    # C: gap 3400 absorbs it all.
    assert dev[("A", 7)] == [(1000, 4000), (5000, 8000)]
    assert dev[("B", 7)] == [(4000, 5000)]
    assert dev[("C", 7)] == [(10_000, 11_000)]
    assert dev[("A", 9)] == [(2000, 5000)]  # its own stream: stretched, nothing after it
    assert res.extra_ns == 3 * 1000
    assert res.max_shift_ns == 500


def test_riders_follow_their_stream(tmp_path: Path) -> None:
    """Flow ends stay on their kernel's start; the gpu annotation still encloses what
    it enclosed; host events do not move; event counts are unchanged."""
    src = _trace(tmp_path)
    before = load_trace(src)
    out = tmp_path / "s.json"
    stretch_kernel(src, out, "A", 1.5)
    after = load_trace(out)
    assert len(after["traceEvents"]) == len(before["traceEvents"])
    starts = {(e["tid"], _ns(e["ts"])) for e in after["traceEvents"]
              if e.get("cat") == "kernel"}
    flows = [e for e in after["traceEvents"] if e.get("ph") == "f"]
    assert len(flows) == 5
    assert all((f["tid"], _ns(f["ts"])) in starts for f in flows)
    ann = [e for e in after["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
    # the builder's span over stream 7's launches inside "fwd": [999, 6601) -> the map
    # puts 999 (before the first kernel) at 999 and 6601 (after A#2's end 6600, new end
    # 8000) at max(6601, 8000) = 8000.
    s7 = next(a for a in ann if a["tid"] == 7)
    assert (_ns(s7["ts"]), _ns(s7["ts"]) + _ns(s7["dur"])) == (999, 8000)
    host_b = [e for e in before["traceEvents"] if e.get("cat") in ("cpu_op", "cuda_runtime",
                                                                   "user_annotation")]
    host_a = [e for e in after["traceEvents"] if e.get("cat") in ("cpu_op", "cuda_runtime",
                                                                  "user_annotation")]
    assert host_a == host_b


def test_shrinking_never_starts_early(tmp_path: Path) -> None:
    """Jitter below 1: kernels end earlier but no device event starts before its original
    start (so never before its launch), and each stream keeps its order with no overlap."""
    src = _trace(tmp_path)
    before = _device(load_trace(src), 0)
    for seed in range(20):
        out = tmp_path / f"j{seed}.json"
        res = jitter_kernels(src, out, 0.3, seed)
        assert res.changed == 5
        after = _device(load_trace(out), 0)
        assert after.keys() == before.keys()
        for key, spans in after.items():
            assert all(a[0] >= b[0] for a, b in zip(spans, before[key], strict=True))
        by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for (_, tid), spans in after.items():
            by_stream[tid] += spans
        for spans in by_stream.values():
            spans.sort()
            assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))


def test_jitter_is_seeded_and_draws_match(tmp_path: Path) -> None:
    """Same seed, same file; the durations are the original times the seeded draws, in
    file order (draws computed here with numpy directly)."""
    src = _trace(tmp_path)
    jitter_kernels(src, tmp_path / "a.json", 0.03, 7)
    jitter_kernels(src, tmp_path / "b.json", 0.03, 7)
    jitter_kernels(src, tmp_path / "c.json", 0.03, 8)
    a, b, c = ((tmp_path / n).read_bytes() for n in ("a.json", "b.json", "c.json"))
    assert a == b != c
    draws = 1.0 + np.random.default_rng(7).normal(0.0, 0.03, size=5)
    orig = [_ns(e["dur"]) for e in load_trace(src)["traceEvents"] if e.get("cat") == "kernel"]
    got = [_ns(e["dur"]) for e in load_trace(tmp_path / "a.json")["traceEvents"]
           if e.get("cat") == "kernel"]
    assert got == [round(d * f) for d, f in zip(orig, draws.tolist(), strict=True)]


def test_factor_one_is_identity(tmp_path: Path) -> None:
    src = _trace(tmp_path)
    stretch_kernel(src, tmp_path / "same.json", "A", 1.0)
    before, after = load_trace(src), load_trace(tmp_path / "same.json")
    assert [(_ns(e["ts"]), _ns(e.get("dur", 0))) for e in after["traceEvents"] if "ts" in e] \
        == [(_ns(e["ts"]), _ns(e.get("dur", 0))) for e in before["traceEvents"] if "ts" in e]


def test_bad_input(tmp_path: Path) -> None:
    src = _trace(tmp_path)
    with pytest.raises(ValueError, match="no kernel named"):
        stretch_kernel(src, tmp_path / "x.json", "nope", 1.2)
    with pytest.raises(ValueError, match="positive"):
        stretch_events([], "A", 0.0)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="traceEvents"):
        load_trace(bad)


def test_reads_back_with_traceatlas(tmp_path: Path) -> None:
    """The stretched copy is a trace the Kineto reader takes, with A's total time
    (3 instances of 2000 ns, now 3000 ns each) as computed by hand."""
    import traceatlas

    src = _trace(tmp_path)
    stretch_kernel(src, tmp_path / "s.json", "A", 1.5)
    trace = traceatlas.open(tmp_path / "s.json")
    rows = trace.sql("SELECT name, count(*) AS n, sum(end_ns - start_ns) AS ns FROM intervals "
                     "WHERE category = 'kernel' GROUP BY name ORDER BY name").rows()
    assert rows == [("A", 3, 9000), ("B", 1, 1000), ("C", 1, 1000)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 500),
                          st.floats(0.2, 3.0)), min_size=1, max_size=30))
def test_queue_rule_properties(spec: list[tuple[int, int, float]]) -> None:
    """On a stream without overlaps: no overlap after, no start earlier than before, each
    event's delay is what a plain replay gives (start = max(own start, previous new end))."""
    starts, ends, new = [], [], []
    t = 0
    for gap, dur, f in spec:
        t += gap
        starts.append(t)
        ends.append(t + dur)
        new.append(max(1, round(dur * f)))
        t += dur
    got = queue_starts(np.array(starts), np.array(ends), np.array(new)).tolist()
    prev_end = -1
    for s, d, g in zip(starts, new, got, strict=True):
        assert g == max(s, prev_end)
        prev_end = g + d
