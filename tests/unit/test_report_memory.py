"""The report's Memory card (``report/memory.py``): the curve's downsampling keeps the peak,
the peak and holders of a hand-built trace, the SVG's peak mark on the curve, the "not
available" text without memory events, and memory findings shown in bytes, not ns."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.report import data, html, memory, terminal
from traceatlas.report.data import Finding, ReportData, RunReport
from traceatlas.report.results import Results, Unavailable
from traceatlas.testing.builder import TraceBuilder

BASE = 1_700_000_000_000_000_000
A1, A2, A3 = 0x1000, 0x2000, 0x3000
MIB, GIB = 2**20, 2**30


def _trace(tmp_path: Path, with_memory: bool = True) -> traceatlas.Trace:
    """Steps [0, 1000) and [1000, 2000) ns after BASE; annotation fwd [50, 900) holding
    outer [100, 400) holding inner [150, 300). GPU0 allocations (time: bytes -> total):
    120: +100 A1 (in outer) -> 100; 200: +50 A2 (in inner) -> 150 (the peak);
    250: -100 A1 -> 50; 350: +30 A3 (outer) -> 80; 1200: -50 A2 -> 30."""
    b = TraceBuilder(rank=0, base_time_ns=BASE)
    b.step(1, 0, 1000)
    b.step(2, 1000, 2000)
    b.annotation("fwd", 50, 900)
    b.cpu_op("outer", 100, 400)
    b.cpu_op("inner", 150, 300)
    b.launch("gemm", 160, 20, 400, 300)
    tmp_path.mkdir(parents=True, exist_ok=True)
    if with_memory:
        for ts, nbytes, addr, total in ((120, 100, A1, 100), (200, 50, A2, 150),
                                        (250, -100, A1, 50), (350, 30, A3, 80),
                                        (1200, -50, A2, 30)):
            b.memory(ts, nbytes, addr=addr, total_allocated=total, total_reserved=1024,
                     device_id=0)
    return traceatlas.open(b.write(tmp_path / "mem.json"))


# -- downsampling ----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(-1000, 10**9)), min_size=1,
                max_size=3000), st.integers(2, 200))
def test_downsample_keeps_min_max_and_first_peak(points: list[tuple[int, int]],
                                                 max_points: int) -> None:
    pts = sorted(points, key=lambda p: p[0])
    ts = np.array([p[0] for p in pts], dtype=np.int64)
    vs = np.array([p[1] for p in pts], dtype=np.float64)
    out_t, out_v = memory.downsample(ts, vs, max_points)
    assert out_t.size <= max(max_points, 1) or out_t.size == ts.size
    assert out_v.max() == vs.max() and out_v.min() == vs.min()
    assert np.all(np.diff(out_t) >= 0)
    assert set(zip(out_t.tolist(), out_v.tolist(), strict=True)) <= set(
        zip(ts.tolist(), vs.tolist(), strict=True))
    first_peak = int(np.argmax(vs))  # the first sample at the maximum
    assert (ts[first_peak], vs[first_peak]) in set(zip(out_t.tolist(), out_v.tolist(),
                                                       strict=True))


def test_one_spike_among_many_samples_survives() -> None:
    ts = np.arange(200_000, dtype=np.int64) * 10
    vs = np.full(ts.size, 5.0 * GIB)
    vs[123_457] = 7.5 * GIB  # one sample, a single ns wide
    out_t, out_v = memory.downsample(ts, vs)
    assert out_t.size <= memory.MAX_POINTS
    assert out_v.max() == 7.5 * GIB and 1_234_570 in out_t.tolist()


# -- the section on a built trace ------------------------------------------------------------


def test_peak_and_holders_by_hand(tmp_path: Path) -> None:
    section = memory.build(Results(_trace(tmp_path)))
    (dev,) = [d for d in section.devices if d.device.replace(" ", "") == "GPU0"]
    assert (dev.rank, dev.peak_bytes, dev.peak_ns, dev.step, dev.op, dev.annotation) == \
        (0, 150, BASE + 200, 1, "inner", "fwd")
    assert dev.reserved_at_peak_bytes == 1024
    # live at t=200: A1 (100 B, outer) and A2 (50 B, inner), both under fwd
    assert [(h.op, h.annotation, h.live_bytes, h.allocations) for h in dev.holders] == \
        [("outer", "fwd", 100, 1), ("inner", "fwd", 50, 1)]
    assert [h.share for h in dev.holders] == pytest.approx([100 / 150, 50 / 150])
    # the curve is the file's Total Allocated values at their times
    assert dev.allocated == [[BASE + t for t in (120, 200, 250, 350, 1200)],
                             [100.0, 150.0, 50.0, 80.0, 30.0]]
    assert dev.reserved[1] == [1024.0] * 5


def _ys(path: str) -> list[float]:
    return [float(y) for y in re.findall(r"[MV](?:[\d.]+,)?([\d.]+)", path)]


def test_svg_marks_the_peak_on_the_curve(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    section = memory.build(Results(trace))
    dev = next(d for d in section.devices if d.device.replace(" ", "") == "GPU0")
    start, span = BASE, 2000  # the run: first start (step 1) to last end (step 2)
    root = ET.fromstring(memory.curve_svg(dev, start, span))
    circles = [c for c in root.iter() if c.tag.endswith("circle") and c.get("class") == "peak"]
    paths = {p.get("class"): p.get("d", "") for p in root.iter() if p.tag.endswith("path")}
    (peak,) = circles
    # the highest point of the allocated curve is the peak mark (smaller y is higher)
    assert float(peak.get("cy", "nan")) == min(_ys(paths["mem-allocated"]))
    # x: left margin 110 + plot width 630 * 200 / 2000
    assert float(peak.get("cx", "nan")) == pytest.approx(110 + 630 * 200 / 2000, abs=0.05)
    text = ET.tostring(root, encoding="unicode")
    assert "peak 150 B at 200 ns" in text and "inner" in text


def test_report_has_memory_card_and_says_why_without_events(tmp_path: Path) -> None:
    with_mem = data.build([("with", _trace(tmp_path / "a"))])
    page = html.render(with_mem)
    assert 'class="card memory"' in page and "Who holds the memory at the peak" in page
    without = data.build([("without", _trace(tmp_path / "b", with_memory=False))])
    assert without.runs[0].memory is None
    assert without.runs[0].missing["memory"] == memory.NO_EVENTS
    assert ("not available: no memory events (record with profile_memory=True)"
            in html.render(without))
    with pytest.raises(Unavailable, match="profile_memory=True"):
        memory.build(Results(_trace(tmp_path / "c", with_memory=False)))


# -- memory findings in bytes ----------------------------------------------------------------


def _finding(rule: str, cost_bytes: int | None, device: int | None, cost_ns: int = 0
             ) -> Finding:
    f = Finding(1, rule, "Memory grows", cost_ns, "evidence", "next", "", "info",
                ranks=[0], cost_bytes=cost_bytes)
    f.device_bytes = device
    return f


def test_cost_text() -> None:
    # 320 MiB of 8 GiB = 3.9% -> "4%"; of 80 GiB = 0.39% -> "0.4%"
    assert memory.cost_text(_finding("memory_peak", 320 * MIB, 8 * GIB)) == \
        "holds 320 MiB, 4% of GPU memory"
    assert memory.cost_text(_finding("memory_peak", 320 * MIB, 80 * GIB)) == \
        "holds 320 MiB, 0.4% of GPU memory"
    assert memory.cost_text(_finding("memory_leak", 64 * MIB, None)) == "grows 64 MiB"
    assert memory.cost_text(_finding("gpu_bound", None, None, 2_500_000)) == "costs 2.5 ms"


def test_memory_findings_never_cost_zero_ns() -> None:
    run = RunReport("r", "/tmp/s", "kineto", [0], BASE, 10**8)
    run.findings = [_finding("short_kernels", None, None, 3_000_000),
                    _finding("memory_peak", 320 * MIB, 8 * GIB)]
    report = ReportData("0", [run])
    for text in (terminal.to_text(report, width=200), html.render(report)):
        assert "costs 0 ns" not in text
        assert "holds 320 MiB, 4% of GPU memory" in text and "costs 3 ms" in text


def test_device_bytes_from_device_properties(tmp_path: Path) -> None:
    """The share's denominator is the trace's deviceProperties totalGlobalMem (the
    builder writes an H100's 84,929,347,584 bytes); time findings are left alone."""
    findings = [_finding("memory_leak", 64 * MIB, None), _finding("gpu_bound", None, None)]
    memory.device_bytes(findings, Results(_trace(tmp_path)))
    assert [f.device_bytes for f in findings] == [84_929_347_584, None]
