"""``export --to chrome -p critical_path=true``: the path's events marked and joined by
flow arrows, on traces built here whose path is known by construction (see
tests/unit/test_critical_path.py for the hand derivations of the paths)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.errors import InputError
from traceatlas.export.chrome import ChromeExporter
from traceatlas.testing.builder import Collective, TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000


def _cpu_loop(tmp_path: Path) -> traceatlas.Trace:
    """Launch calls [1k,6k], [11k,16k], [21k,26k]; kernels k0..k2 of 1 us 6 us after their
    call. Path: call 1, untraced gap, call 2, untraced gap, k2 (launch 6k + gpu 1k)."""
    b = TraceBuilder(rank=0, profiler_markers=False)
    for i in range(3):
        b.launch(f"k{i}", 1_000 + 10_000 * i, 5_000, 7_000 + 10_000 * i, 1_000)
    return traceatlas.open(b.write(tmp_path / "rank0.json"))


def _allreduce_pair(tmp_path: Path) -> traceatlas.Trace:
    """Rank 1 arrives late at both allreduces; the path ends on rank 0 (its allreduce
    kernel then its tail kernel)."""
    ar = Collective("allreduce", 1024, 1024, group_ranks=(0, 1))
    builders = []
    for r in range(2):
        b = TraceBuilder(rank=r, world_size=2, profiler_markers=False)
        work, dur = ("fast_kernel", 2_000) if r == 0 else ("slow_kernel", 6_000)
        for it in range(2):
            base = 10_000 * it
            b.launch(work, 400 * it, 100, base + 1_000, dur)
            b.launch("ncclKernel_AllReduce_RING_LL_Sum_float", 200 + 400 * it, 100,
                     base + 1_000 + dur, 8_000 - dur, collective=ar)
        if r == 0:
            b.launch("tail", 800, 100, 19_000, 1_000)
        builders.append(b)
    write_multi_rank(tmp_path / "run", builders)
    return traceatlas.open(tmp_path / "run")


def _ns(doc: dict[str, Any], us: float) -> int:
    return round(us * 1000) + int(doc.get("baseTimeNanoseconds", 0))


def _export(trace: traceatlas.Trace, out: Path, **kw: Any) -> dict[str, Any]:
    ChromeExporter().write(trace, out, critical_path="true", **kw)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _marked(doc: dict[str, Any]) -> dict[tuple[int, str, int, int], dict[str, Any]]:
    return {(e["pid"], e["name"], _ns(doc, e["ts"]), _ns(doc, e["ts"] + e["dur"])): e["args"]
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and (e.get("args") or {}).get("on_critical_path")}


def _enclosing(doc: dict[str, Any], pid: int, tid: int, ts_ns: int) -> tuple[Any, ...]:
    """The slice Perfetto binds a flow end to: the innermost X on (pid, tid) open at ts."""
    best = None
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e["pid"] != pid or e["tid"] != tid:
            continue
        lo, hi = _ns(doc, e["ts"]), _ns(doc, e["ts"] + e["dur"])
        if lo <= ts_ns <= hi and (best is None or hi - lo < best[3] - best[2]):
            best = (pid, e["name"], lo, hi)
    assert best is not None, f"no slice at {ts_ns} on {pid}/{tid}"
    return best


def _arrows(doc: dict[str, Any]) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """(source slice, destination slice) per critical_path flow id, in id order."""
    ends: dict[int, dict[str, dict[str, Any]]] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "critical_path":
            assert e["ph"] in ("s", "f") and e["name"] == "critical_path"
            assert e["ph"] == "s" or e["bp"] == "e"
            ends.setdefault(e["id"], {})[e["ph"]] = e
    out = []
    for fid in sorted(ends):
        s, f = ends[fid]["s"], ends[fid]["f"]
        out.append((_enclosing(doc, s["pid"], s["tid"], _ns(doc, s["ts"])),
                    _enclosing(doc, f["pid"], f["tid"], _ns(doc, f["ts"]))))
    return out


def test_cpu_loop_marks_and_arrows_by_construction(tmp_path: Path) -> None:
    doc = _export(_cpu_loop(tmp_path), tmp_path / "out.json")
    call1 = (0, "cudaLaunchKernel", BASE + 1_000, BASE + 6_000)
    call2 = (0, "cudaLaunchKernel", BASE + 11_000, BASE + 16_000)
    k2 = (0, "k2", BASE + 27_000, BASE + 28_000)
    marked = _marked(doc)
    assert set(marked) == {call1, call2, k2}
    # on-path time: each call 5 us of cpu; k2 6 us launch + 1 us gpu of a 27 us region
    assert marked[call1]["critical_path_ns"] == 5_000
    assert marked[k2]["critical_path_ns"] == 7_000
    assert marked[k2]["critical_path_bound"] == "launch"
    assert marked[k2]["critical_path_share"] == pytest.approx(7 / 27, abs=1e-6)
    # the untraced gaps carry no arrow end: call 1 -> call 2 -> k2 (host -> stream)
    assert _arrows(doc) == [(call1, call2), (call2, k2)]
    # the original args survive (the kernel's correlation from the builder)
    assert "correlation" in marked[k2]


def test_marks_are_exactly_the_path_rows_across_ranks(tmp_path: Path) -> None:
    trace = _allreduce_pair(tmp_path)
    doc = _export(trace, tmp_path / "out.json")
    path = analysis.run("critical_path", trace).table
    rows = [(r["rank"], r["name"], r["event_start_ns"], r["event_end_ns"])
            for r in path.iter_rows(named=True) if r["event_start_ns"] is not None]
    assert set(_marked(doc)) == set(rows)
    # consecutive distinct events of the path, in order, one arrow each
    chain = [k for i, k in enumerate(rows) if i == 0 or k != rows[i - 1]]
    arrows = _arrows(doc)
    assert arrows == list(itertools.pairwise(chain))
    # by construction the path starts on the late rank 1 and ends on rank 0's tail
    assert chain[0][0] == 1 and chain[-1][:2] == (0, "tail")
    assert any(a[0] == 1 and b[0] == 0 for a, b in arrows)  # an arrow across ranks


def test_step_region_and_cli(tmp_path: Path) -> None:
    """Step 2's region ends with kernel b (25 us, after the step's own end at 20 us), so
    b is on its path; step 1's kernel a is outside the region."""
    b = TraceBuilder(rank=0, profiler_markers=False)
    b.step(1, 0, 10_000)
    b.launch("a", 1_000, 1_000, 2_500, 5_000)
    b.step(2, 10_000, 20_000)
    b.launch("b", 11_000, 1_000, 12_500, 12_500)  # ends after step 2: on its path
    path = b.write(tmp_path / "rank0.json")
    out = tmp_path / "cp.json"
    res = CliRunner().invoke(app, ["export", str(path), "--to", "chrome", "-p",
                                   "critical_path=true", "--step", "2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    names = {k[1] for k in _marked(json.loads(out.read_text()))}
    assert "b" in names and "a" not in names  # step 2's kernel, not step 1's
    bad = CliRunner().invoke(app, ["export", str(path), "--to", "chrome", "--step", "2",
                                   "-o", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and not (tmp_path / "x.json").exists()
    with pytest.raises(InputError):
        ChromeExporter().write(traceatlas.open(path), tmp_path / "y.json", step=2)


def test_plain_export_has_no_marks(tmp_path: Path) -> None:
    trace = _cpu_loop(tmp_path)
    ChromeExporter().write(trace, tmp_path / "plain.json")
    doc = json.loads((tmp_path / "plain.json").read_text())
    assert not _marked(doc)
    assert not [e for e in doc["traceEvents"] if e.get("cat") == "critical_path"]
