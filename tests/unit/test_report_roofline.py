"""The report's roofline card (``report/roofline.py``): the SVG parsed back.

Expected positions come from the axis ticks the SVG draws (the pixel x of the ``1`` and
``10`` labels give the log scale) and from (intensity, TFLOP/s) computed by hand from the
shapes the test writes (2·M·K·N FLOPs for mm, one FLOP and 2 + 2 + 2 bytes per bf16
element for add) and the H100 SXM5 datasheet peaks (989.4 TFLOP/s bf16 dense, 67 TFLOP/s
fp32 vector, 3.35 TB/s) that the builder's device name selects.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.report import html as report_html
from traceatlas.report import roofline
from traceatlas.report.data import build_run
from traceatlas.report.results import Results, Unavailable
from traceatlas.testing import TraceBuilder

BF16 = "c10::BFloat16"
N = 1024
ADD = 4096 * 1024
BW, BF16_PEAK, FP32_PEAK = 3.35, 989.4, 67.0
MM_NS, ADD_NS, FAST_NS = 40_000, 50_000, 2_000


def _shapes(dims: list[object], types: list[str]) -> dict[str, object]:
    return {"Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * len(dims)}


def _builder(shapes: bool = True) -> TraceBuilder:
    """mm 1024³ bf16 twice (10 + 30 us); add on 4096x1024 bf16 (20 + 30 us); mul on the
    same shapes in 2 us: faster than HBM allows (above its roof); a copy (0 FLOPs)."""
    b = TraceBuilder(rank=0)
    mm = _shapes([[N, N], [N, N]], [BF16, BF16]) if shapes else {}
    ew = _shapes([[4096, 1024], [4096, 1024], []], [BF16, BF16, "Scalar"]) if shapes else {}
    b.cpu_op("aten::mm", 0, 50_000, args=mm)
    b.launch("sm90_gemm", 10_000, 5_000, 100_000, 10_000)
    b.cpu_op("aten::mm", 60_000, 110_000, args=mm)
    b.launch("sm90_gemm", 70_000, 5_000, 200_000, 30_000)
    b.cpu_op("aten::add", 120_000, 170_000, args=ew)
    b.launch("elementwise_a", 130_000, 5_000, 300_000, 20_000)
    b.launch("elementwise_b", 140_000, 5_000, 330_000, 30_000)
    b.cpu_op("aten::mul", 180_000, 200_000,
             args=_shapes([[4096, 1024], [4096, 1024]], [BF16, BF16]) if shapes else {})
    b.launch("mul_kernel", 185_000, 5_000, 400_000, FAST_NS)
    b.cpu_op("aten::copy_", 210_000, 230_000,
             args=_shapes([[4096, 1024], [4096, 1024], []], [BF16, BF16, "Scalar"])
             if shapes else {})
    b.launch("copy_kernel", 215_000, 5_000, 500_000, 9_000)
    return b


def _trace(tmp: Path, b: TraceBuilder, device_name: str | None = None) -> traceatlas.Trace:
    data = json.loads(b.to_json())
    if device_name is not None:
        for props in data["deviceProperties"]:
            props["name"] = device_name
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "rank-0.json"
    path.write_text(json.dumps(data))
    return traceatlas.open(traceatlas.ingest(path, tmp / "store"))


@pytest.fixture(scope="module")
def section(tmp_path_factory: pytest.TempPathFactory) -> roofline.RooflineSection:
    tmp = tmp_path_factory.mktemp("report_roofline")
    return roofline.build(Results(_trace(tmp, _builder())))


def _svg(plot: roofline.RooflinePlot) -> ET.Element:
    return ET.fromstring(roofline.plot_svg(plot))


def _scales(root: ET.Element) -> tuple[float, float, float, float]:
    """(x of log10 = 0, px per decade in x, y of log10 = 0, px per decade in y) read from
    two adjacent tick labels of each axis."""
    xt = {int(t.get("data-xtick", "")): float(t.get("x", "")) for t in root.iter("text")
          if t.get("data-xtick") is not None}
    yt = {int(t.get("data-ytick", "")): float(t.get("y", "")) - 4 for t in root.iter("text")
          if t.get("data-ytick") is not None}
    p, q = min(xt), min(yt)
    dx, dy = xt[p + 1] - xt[p], yt[q + 1] - yt[q]
    return xt[p] - p * dx, dx, yt[q] - q * dy, dy


def _circles(root: ET.Element) -> list[ET.Element]:
    return [c for c in root.iter("circle") if "pt" in (c.get("class") or "")]


def _title(el: ET.Element) -> str:
    t = el.find("title")
    return "" if t is None or t.text is None else t.text


def test_points_at_hand_computed_log_positions(section: roofline.RooflineSection) -> None:
    (plot,) = section.plots
    assert plot.peak_tbps == BW and plot.ceilings == {"bf16": BF16_PEAK, "fp32": FP32_PEAK}
    root = _svg(plot)
    x0, dx, y0, dy = _scales(root)
    hand = {  # op -> (intensity flop/B, TFLOP/s)
        "aten::mm": (2 * N**3 / (3 * N * N * 2), 2 * 2 * N**3 / (MM_NS * 1e-9) / 1e12),
        "aten::add": (ADD / (6 * ADD), ADD / (ADD_NS * 1e-9) / 1e12),
        "aten::mul": (ADD / (6 * ADD), ADD / (FAST_NS * 1e-9) / 1e12),
    }
    seen = {}
    for c in _circles(root):
        op = _title(c).split(" ", 1)[0]
        seen[op] = (float(c.get("cx", "")), float(c.get("cy", "")))
    assert set(seen) == set(hand)          # the copy (0 FLOPs) is not on the log axes
    for op, (i, t) in hand.items():
        assert seen[op][0] == pytest.approx(x0 + math.log10(i) * dx, abs=1.0), op
        assert seen[op][1] == pytest.approx(y0 + math.log10(t) * dy, abs=1.0), op
    assert dy < 0 < dx                    # up and right = larger


def test_points_relative_to_roof_as_the_analysis_says(
        section: roofline.RooflineSection) -> None:
    """Each point sits log10(pct_of_roof / 100) decades from the roof above its x (its
    own ceiling): below for mm and add, above only for mul, by 100 x (6 x ADD bytes /
    3.35 TB/s) / 2 us = 375.6 %, computed here."""
    (plot,) = section.plots
    root = _svg(plot)
    x0, dx, y0, dy = _scales(root)
    roofs = {el.get("data-kind"): el for el in root.iter() if el.get("class") == "roof"}
    # the drawn memory roof: TFLOP/s / intensity along it is 3.35 TB/s
    pts = [tuple(map(float, p.split(","))) for p in
           (roofs["memory"].get("points") or "").split()]
    for x, y in pts:
        i, t = 10 ** ((x - x0) / dx), 10 ** ((y - y0) / dy)
        assert t / i == pytest.approx(BW, rel=0.01)
    assert float(roofs["bf16"].get("y1", "")) == pytest.approx(
        y0 + math.log10(BF16_PEAK) * dy, abs=1.0)
    expected_pct = {"aten::mm": 100 * max(2 * 2 * N**3 / (BF16_PEAK * 1e12),
                                          2 * 3 * N * N * 2 / (BW * 1e12)) / (MM_NS * 1e-9),
                    "aten::add": 100 * (6 * ADD / (BW * 1e12)) / (ADD_NS * 1e-9),
                    "aten::mul": 100 * (6 * ADD / (BW * 1e12)) / (FAST_NS * 1e-9)}
    peak = {"aten::mm": BF16_PEAK, "aten::add": FP32_PEAK, "aten::mul": FP32_PEAK}
    for c in _circles(root):
        op = _title(c).split(" ", 1)[0]
        x, y = float(c.get("cx", "")), float(c.get("cy", ""))
        i = 10 ** ((x - x0) / dx)
        roof_y = y0 + math.log10(min(peak[op], i * BW)) * dy
        above_decades = (roof_y - y) / -dy
        assert float(c.get("data-pct", "")) == pytest.approx(expected_pct[op], rel=1e-4)
        assert above_decades == pytest.approx(math.log10(expected_pct[op] / 100),
                                              abs=1.0 / abs(dy)), op
        if op != "aten::mul":
            assert y >= roof_y - 1.0, op
    assert expected_pct["aten::mul"] == pytest.approx(375.6, abs=0.1)


def test_area_proportional_to_device_time(section: roofline.RooflineSection) -> None:
    root = _svg(section.plots[0])
    r = {_title(c).split(" ", 1)[0]: float(c.get("r", "")) for c in _circles(root)}
    assert r["aten::add"] == pytest.approx(roofline.R_MAX, abs=0.01)   # most time: 50 us
    assert r["aten::mm"] ** 2 / r["aten::add"] ** 2 == pytest.approx(MM_NS / ADD_NS,
                                                                     rel=0.01)
    assert r["aten::mul"] == pytest.approx(max(roofline.R_MIN, roofline.R_MAX * math.sqrt(
        FAST_NS / ADD_NS)), abs=0.01)


def test_table_and_caption(section: roofline.RooflineSection) -> None:
    out = roofline.html(section, "")
    assert "989.4 TFLOP/s" in out and "3.35 TB/s" in out and "datasheet" in out
    assert "1 group(s) without FLOPs" in out                   # the copy
    rows = ET.fromstring(out[out.index("<table"):out.index("</table>") + 8]).findall("tr")
    cells = [[(td.text or "") for td in tr.findall("td")] for tr in rows[1:]]
    by_op = {c[0]: c for c in cells}
    assert list(by_op) == ["aten::add", "aten::mm", "aten::copy_", "aten::mul"]  # by time
    mm = by_op["aten::mm"]
    assert mm[1:5] == ["[1024,1024], [1024,1024]", "bf16", "2", f"{MM_NS / 1e6:.3f}"]
    assert float(mm[5]) == pytest.approx(4 * N**3 / (MM_NS * 1e-9) / 1e12, rel=1e-2)


def _group(op: str, intensity: float, tflops: float, ns: int, lost: int,
           dims: str = "[[2, 2]]") -> roofline.RoofGroup:
    return roofline.RoofGroup(op, dims, "bf16", "bf16", "compute", 1, ns, 1.0, intensity,
                              tflops, tflops / intensity, 900.0, 50.0, lost)


def _plot(groups: list[roofline.RoofGroup], device: str = "GPU") -> roofline.RooflinePlot:
    return roofline.RooflinePlot(device, "H100 SXM5", BW, {"bf16": BF16_PEAK}, "datasheet",
                                 groups)


def test_top_five_by_lost_time_labelled_full_name_in_title() -> None:
    groups = [_group(f"aten::op{k}" + "x" * 40, 10.0 ** (k - 2), 10.0 ** (k - 3), 1000,
                     lost=k * 100) for k in range(7)]
    root = _svg(_plot(groups))
    labels = [t for t in root.iter("text") if "pt-lbl" in (t.get("class") or "")]
    assert sorted(_title(t).split(" ")[0] for t in labels) == sorted(
        g.op for g in groups[2:])                      # lost 200..600 ns: the 5 largest
    assert all(len(t.text or "") <= 30 for t in labels)   # shortened on the plot


def test_names_escaped() -> None:
    evil = 'aten::mm<script>alert("x")</script>&amp;'
    section = roofline.RooflineSection([_plot([_group(evil, 5.0, 10.0, 100, 50)],
                                              device='GPU <b>"H100"</b>')])
    out = roofline.html(section, "")
    assert "<script>" not in out and "<b>" not in out
    ET.fromstring(f"<div>{out}</div>")                 # well-formed: nothing leaked
    root = _svg(section.plots[0])
    assert evil in _title(_circles(root)[0])           # the full name, once unescaped


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-3, 1e4), st.floats(1e-4, 2e3),
                          st.integers(1, 10**9)), min_size=1, max_size=12))
def test_random_points_on_log_scale(pts: list[tuple[float, float, int]]) -> None:
    groups = [_group(f"op{k}", i, t, ns, ns // 2) for k, (i, t, ns) in enumerate(pts)]
    root = _svg(_plot(groups))
    x0, dx, y0, dy = _scales(root)
    box = next(el for el in root.iter("rect") if el.get("fill") == "none")
    bx, by = float(box.get("x", "")), float(box.get("y", ""))
    bw, bh = float(box.get("width", "")), float(box.get("height", ""))
    circles = {_title(c).split(" ", 1)[0]: c for c in _circles(root)}
    for k, (i, t, _) in enumerate(pts):
        c = circles[f"op{k}"]
        x, y = float(c.get("cx", "")), float(c.get("cy", ""))
        assert x == pytest.approx(x0 + math.log10(i) * dx, abs=1.0)
        assert y == pytest.approx(y0 + math.log10(t) * dy, abs=1.0)
        assert bx <= x <= bx + bw and by <= y <= by + bh


def test_not_available_reasons(tmp_path: Path) -> None:
    no_shapes = Results(_trace(tmp_path / "a", _builder(shapes=False)))
    with pytest.raises(Unavailable, match="record_shapes"):
        roofline.build(no_shapes)
    unknown = Results(_trace(tmp_path / "b", _builder(), device_name="Future GPU 9000"))
    with pytest.raises(Unavailable, match="not in the known-GPU table"):
        roofline.build(unknown)
    run = build_run("x", unknown)
    card = report_html._roofline(run)
    assert "not available: " in card and "Future GPU 9000" in card
    assert "peak_tflops" in card


def test_group_without_bytes_or_flops_is_not_drawn() -> None:
    """A group with 0 bytes has an infinite intensity in the analysis: kept in the table,
    never on the log axes (``_group`` maps non-finite numbers to None)."""
    row = {"op": "aten::weird", "input_dims": "[[]]", "dtype": "bf16", "peak_kind": "bf16",
           "bound": "compute", "count": 1, "device_ns": 1000, "share_pct": 1.0,
           "intensity": math.inf, "achieved_tflops": 1.0, "achieved_tbps": 0.0,
           "attainable_tflops": 989.4, "pct_of_roof": 1.0, "lost_ns": 900.0}
    g = roofline._group(row)
    assert g.intensity is None
    plot = _plot([g, _group("aten::mm", 100.0, 50.0, 1000, 10)])
    assert [_title(c).split(" ")[0] for c in _circles(_svg(plot))] == ["aten::mm"]
