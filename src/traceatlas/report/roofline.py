"""The report's roofline card: op groups (``roofline`` analysis, ``by=op``) as points on
log-log axes (x: arithmetic intensity, flop/byte; y: achieved TFLOP/s) under the device's
roofs: the memory slope (peak TB/s x intensity) and one compute ceiling per peak kind
(dtype) the plotted groups use, each labelled with its value; the peaks' source under it.

Points: area proportional to device time (radius at least ``R_MIN`` px), colour by bound
(``memory`` / ``compute`` at the group's own ceiling), the ``LABELLED`` groups that lose
the most time (device time - time at the roof) named beside their point; the full name
in each point's ``<title>``. Groups without FLOPs (copies) or without a peak cannot sit
on log axes: counted in the caption, listed in the table. One plot per device model.
Times in ns; intensities in flop/byte; rates in TFLOP/s and TB/s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from traceatlas.names import display_name
from traceatlas.report import svg
from traceatlas.report.results import Unavailable

if TYPE_CHECKING:
    from traceatlas.report.results import Results

MAX_POINTS = 400
"""Groups drawn at most per device (by device time); the rest are counted."""
TOP_ROWS = 12
"""Groups in the table under the plot (by device time)."""
LABELLED = 5
"""Points named on the plot: the groups with the most lost time."""
R_MAX, R_MIN = 18.0, 2.0
"""Point radius (px) of the group with the most device time; the smallest drawn."""
BOUND_COLOURS = {"memory": "#4c78a8", "compute": "#e45756"}
ROOF_COLOUR = "#3b4252"
CHAR_W = 6.2
"""Approximate width (px) of one 11 px label character."""
Box = tuple[float, float, float, float]
"""x0, y0, x1, y1 (px)."""
W, H = 760, 420
LEFT, RIGHT, TOP, BOTTOM = 58, 20, 28, 46
"""Plot size and margins (px)."""


@dataclass
class RoofGroup:
    """One op group: shapes and dtypes as recorded; ``pct_of_roof`` = 100 x achieved /
    attainable at its intensity (above 100 when caches serve part of the bytes)."""

    op: str
    input_dims: str
    dtype: str
    peak_kind: str
    bound: str
    count: int
    device_ns: int
    share_pct: float
    intensity: float | None
    achieved_tflops: float
    achieved_tbps: float
    attainable_tflops: float | None
    pct_of_roof: float | None
    lost_ns: int | None


@dataclass
class RooflinePlot:
    """One device model: its memory roof, compute ceilings (peak kind -> TFLOP/s), the
    peaks' source, the groups (by device time) and how many of them cannot be drawn."""

    device: str
    gpu: str
    peak_tbps: float
    ceilings: dict[str, float]
    source: str
    groups: list[RoofGroup] = field(default_factory=list)
    unplotted: int = 0
    """Groups with no FLOPs (copies) or no peak: in the table, not on the log axes."""
    beyond: int = 0
    """Drawable groups left out past ``MAX_POINTS``."""


@dataclass
class RooflineSection:
    """The plots, plus the analysis' coverage and convention notes."""

    plots: list[RooflinePlot]
    notes: list[str] = field(default_factory=list)


def build(results: Results) -> RooflineSection:
    """The section from the shared ``roofline`` result; ``Unavailable`` with the
    analysis' reason when it does not apply (no shapes, no kernels, unknown device)."""
    import polars as pl

    try:
        result = results.get("roofline")
    except Unavailable as exc:  # the analysis' own words (the advisor notes them)
        said = [str(n).removeprefix("skipped: ").removeprefix("roofline: ")
                for n in results.context.notes if "roofline: " in str(n)]
        raise Unavailable(said[-1] if said else exc.reason) from None
    table, peaks = result.table, result.extra.get("peaks")
    known = table.filter(pl.col("peak_tflops").is_not_null()
                         & pl.col("peak_tbps").is_not_null())
    if table.height == 0 or known.height == 0 or peaks is None:
        said = [n for n in result.notes if "known-GPU table" in n]
        raise Unavailable(said[0] if said else
                          "no op group has a FLOP model and a known device peak")
    plots = []
    for device in sorted(set(known["device"].to_list())):
        part = table.filter(pl.col("device") == device)
        dev_peaks = peaks.filter(pl.col("device_name") == device)
        plots.append(_plot(device, part, dev_peaks))
    notes = [n for n in result.notes if not n.startswith("rank ")]
    return RooflineSection(plots, notes)


def _plot(device: str, part: Any, dev_peaks: Any) -> RooflinePlot:
    import polars as pl

    rows = part.sort(["device_ns", "op"], descending=[True, False])
    kinds = set(rows.filter(pl.col("intensity") > 0)["peak_kind"].drop_nulls().to_list())
    ceilings = {str(k): float(v) for k, v in dev_peaks.filter(
        pl.col("peak_kind").is_in(sorted(kinds)) & pl.col("peak_tflops").is_not_null())
        .unique("peak_kind", keep="first").select("peak_kind", "peak_tflops").iter_rows()}
    first = dev_peaks.filter(pl.col("peak_tbps").is_not_null()).row(0, named=True)
    groups = [_group(r) for r in rows.iter_rows(named=True)]
    drawable = [g for g in groups if _drawable(g) and g.peak_kind in ceilings]
    kept = drawable[:MAX_POINTS]
    return RooflinePlot(device, str(first["gpu"] or "peaks given by the user"),
                        float(first["peak_tbps"]), dict(sorted(
                            ceilings.items(), key=lambda kv: -kv[1])),
                        str(first["source"] or ""), groups,
                        unplotted=len(groups) - len(drawable),
                        beyond=len(drawable) - len(kept))


def _group(r: dict[str, Any]) -> RoofGroup:
    def num(key: str) -> float | None:
        v = r.get(key)
        return None if v is None or not math.isfinite(float(v)) else float(v)

    lost = num("lost_ns")
    dims = " ".join(str(r["input_dims"] or "").split())
    return RoofGroup(str(r["op"]), dims, str(r["dtype"] or ""),
                     str(r["peak_kind"] or ""), str(r["bound"] or ""), int(r["count"]),
                     int(r["device_ns"]), float(r["share_pct"]), num("intensity"),
                     num("achieved_tflops") or 0.0, num("achieved_tbps") or 0.0,
                     num("attainable_tflops"), num("pct_of_roof"),
                     None if lost is None else int(lost))


def _drawable(g: RoofGroup) -> bool:
    return (g.intensity is not None and g.intensity > 0 and g.achieved_tflops > 0
            and g.device_ns > 0)


# -- geometry ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Axes:
    """Log10 ranges (whole decades) and the plot box (px)."""

    x_lo: int
    x_hi: int
    y_lo: int
    y_hi: int

    def px(self, intensity: float) -> float:
        """x (px) of an intensity (flop/byte)."""
        span = W - LEFT - RIGHT
        return LEFT + (math.log10(intensity) - self.x_lo) / (self.x_hi - self.x_lo) * span

    def py(self, tflops: float) -> float:
        """y (px) of a rate (TFLOP/s)."""
        span = H - TOP - BOTTOM
        return TOP + span - (math.log10(tflops) - self.y_lo) / (self.y_hi - self.y_lo) * span


def axes(plot: RooflinePlot, points: list[RoofGroup]) -> Axes:
    """Decades holding every point, every ridge and the highest ceiling (with room)."""
    ridges = [c / plot.peak_tbps for c in plot.ceilings.values()]
    xs = [g.intensity for g in points if g.intensity] + ridges
    top = max(plot.ceilings.values())
    ys = [g.achieved_tflops for g in points] + [top, min(plot.ceilings.values())]
    x_lo = math.floor(math.log10(min(xs) / 1.5))
    x_hi = math.ceil(math.log10(max(xs) * 1.5))
    y_lo = math.floor(math.log10(min(ys) / 1.5))
    y_hi = math.ceil(math.log10(max(ys) * 1.6))
    return Axes(x_lo, max(x_hi, x_lo + 1), y_lo, max(y_hi, y_lo + 1))


def radius(device_ns: int, max_ns: int) -> float:
    """Point radius: area proportional to device time, at least ``R_MIN``."""
    return max(R_MIN, R_MAX * math.sqrt(device_ns / max_ns)) if max_ns > 0 else R_MIN


def shapes_text(input_dims: str, sep: str = ", ") -> str:
    """The non-empty input shapes of a recorded ``Input Dims`` text, compact
    (``[4096,1024], [1024,4096]``); the text with its whitespace collapsed when it is not
    a JSON list of lists."""
    try:
        dims = json.loads(input_dims) if input_dims else []
    except ValueError:
        dims = None
    if not isinstance(dims, list):
        return " ".join(input_dims.split())
    return sep.join("[" + ",".join(str(d) for d in s) + "]" for s in dims
                    if isinstance(s, list) and s)


def short_op(g: RoofGroup, chars: int = 30) -> str:
    """``mm [4096,1024]x[1024,4096]`` cut to ``chars``: the op without ``aten::`` and its
    non-empty input shapes."""
    shapes = shapes_text(g.input_dims, "x")
    op = g.op.removeprefix("aten::")
    return display_name(f"{op} {shapes}" if shapes else op, width=chars)


def _tick(power: int) -> str:
    return f"{10.0 ** power:g}"


def _tip(g: RoofGroup) -> str:
    pct = "n/a" if g.pct_of_roof is None else f"{g.pct_of_roof:.1f}%"
    lost = "" if g.lost_ns is None else f", {svg.fmt_ns(g.lost_ns)} lost"
    return (f"{g.op} {g.input_dims} ({g.dtype}, {g.peak_kind} ceiling)\n"
            f"{g.count:,} calls, "
            f"{svg.fmt_ns(g.device_ns)} device time ({g.share_pct:.1f}%)\n"
            f"{g.intensity or 0:.3g} flop/byte, {g.achieved_tflops:.3g} TFLOP/s, "
            f"{g.achieved_tbps:.3g} TB/s, {pct} of the roof ({g.bound}-bound){lost}")


def plot_svg(plot: RooflinePlot) -> str:
    """The roofline of one device: axes with a tick per decade, the roofs (``data-kind``),
    one ``<circle>`` per group (``data-intensity``, ``data-tflops``, ``data-ns``,
    ``data-pct``), the top ``LABELLED`` by lost time named."""
    points = [g for g in plot.groups if _drawable(g) and g.peak_kind in plot.ceilings]
    points = points[:MAX_POINTS]
    ax = axes(plot, points)
    x0, x1, y0, y1 = LEFT, W - RIGHT, TOP, H - BOTTOM
    body = svg._legend(LEFT, 16, [(f"{b}-bound", c) for b, c in BOUND_COLOURS.items()])
    for p in range(ax.x_lo, ax.x_hi + 1):
        x = ax.px(10.0 ** p)
        body.append(f'<line x1="{x:.2f}" y1="{y0}" x2="{x:.2f}" y2="{y1}" class="gridline"/>')
        body.append(f'<text x="{x:.2f}" y="{y1 + 15}" text-anchor="middle" class="lbl" '
                    f'data-xtick="{p}">{_tick(p)}</text>')
    for p in range(ax.y_lo, ax.y_hi + 1):
        y = ax.py(10.0 ** p)
        body.append(f'<line x1="{x0}" y1="{y:.2f}" x2="{x1}" y2="{y:.2f}" class="gridline"/>')
        body.append(f'<text x="{x0 - 5}" y="{y + 4:.2f}" text-anchor="end" class="lbl" '
                    f'data-ytick="{p}">{_tick(p)}</text>')
    body.append(f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" '
                f'fill="none" class="axis"/>')
    body.append(svg._text((x0 + x1) / 2, H - 8, "arithmetic intensity (flop/byte, log)",
                          "middle", "axlbl"))
    body.append(f'<text x="12" y="{(y0 + y1) / 2:.1f}" text-anchor="middle" class="axlbl" '
                f'transform="rotate(-90 12 {(y0 + y1) / 2:.1f})">achieved TFLOP/s (log)</text>')
    roofs, taken = _roofs(plot, ax)
    body += roofs
    max_ns = max((g.device_ns for g in points), default=0)
    for g in sorted(points, key=lambda g: -g.device_ns):  # big first, small on top
        pct = "" if g.pct_of_roof is None else f' data-pct="{g.pct_of_roof:.6g}"'
        body.append(
            f'<circle cx="{ax.px(g.intensity or 1):.2f}" cy="{ax.py(g.achieved_tflops):.2f}" '
            f'r="{radius(g.device_ns, max_ns):.2f}" fill="{BOUND_COLOURS.get(g.bound, "#999")}" '
            f'class="pt" data-intensity="{g.intensity:.9g}" '
            f'data-tflops="{g.achieved_tflops:.9g}" data-ns="{g.device_ns}" '
            f'data-kind="{escape(g.peak_kind)}"{pct}><title>{escape(_tip(g))}</title>'
            "</circle>")
    body += _labels(points, ax, max_ns, taken)
    title = f"roofline of {plot.device}"
    return (f'<svg class="plot roofline" role="img" viewBox="0 0 {W} {H}" width="{W}" '
            f'height="{H}"><title>{escape(title)}</title>{"".join(body)}</svg>')


def _roofs(plot: RooflinePlot, ax: Axes) -> tuple[list[str], list[Box]]:
    """Memory slope from the bottom-left to the highest ridge; each ceiling flat from its
    ridge to the right edge, labelled with its value; and the labels' boxes (px)."""
    bw = plot.peak_tbps
    top = max(plot.ceilings.values())
    lo_i = max(10.0 ** ax.x_lo, 10.0 ** ax.y_lo / bw)
    out = [f'<polyline points="{ax.px(lo_i):.2f},{ax.py(lo_i * bw):.2f} '
           f'{ax.px(top / bw):.2f},{ax.py(top):.2f}" fill="none" stroke="{ROOF_COLOUR}" '
           f'stroke-width="1.6" class="roof" data-kind="memory" data-tbps="{bw:g}"/>']
    dx = ax.px(10.0) - ax.px(1.0)
    dy = ax.py(1.0) - ax.py(10.0)
    angle = -math.degrees(math.atan2(dy, dx))
    lx, ly = ax.px(lo_i) + 8, ax.py(lo_i * bw) - 6
    text = f"memory {bw:g} TB/s"
    run, rise = len(text) * CHAR_W * math.cos(math.radians(angle)), \
        len(text) * CHAR_W * math.sin(math.radians(angle))
    boxes: list[Box] = [(lx, ly + rise - 12, lx + run, ly + 2)]
    out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" class="lbl roof-lbl" '
               f'transform="rotate({angle:.1f} {lx:.1f} {ly:.1f})">'
               f"{escape(text)}</text>")
    for i, (kind, peak) in enumerate(plot.ceilings.items()):
        xr, y = ax.px(peak / bw), ax.py(peak)
        out.append(f'<line x1="{xr:.2f}" y1="{y:.2f}" x2="{W - RIGHT}" y2="{y:.2f}" '
                   f'stroke="{ROOF_COLOUR}" stroke-width="1.6" '
                   f'stroke-dasharray="{"none" if i == 0 else "5 3"}" class="roof" '
                   f'data-kind="{escape(kind)}" data-tflops="{peak:g}"/>')
        label = f"{kind} {peak:g} TFLOP/s"
        out.append(svg._text(W - RIGHT - 4, y - 4, label, "end", "lbl roof-lbl"))
        boxes.append((W - RIGHT - 4 - len(label) * CHAR_W, y - 14, W - RIGHT - 4, y - 2))
    return out, boxes


def _labels(points: list[RoofGroup], ax: Axes, max_ns: int, taken: list[Box]
            ) -> list[str]:
    """Names of the ``LABELLED`` groups with the most lost time: at the first of a ring
    of spots around the point (nearest first) that overlaps no earlier label and stays
    in the plot, with a leader line when it is not next to the point."""
    top = sorted((g for g in points if g.lost_ns is not None),
                 key=lambda g: (-(g.lost_ns or 0), g.op))[:LABELLED]
    placed = list(taken)
    out = []
    for g in top:
        text = short_op(g)
        tw = len(text) * CHAR_W
        cx, cy = ax.px(g.intensity or 1), ax.py(g.achieved_tflops)
        r = radius(g.device_ns, max_ns)
        spots = [(cx + r + 3 + d, cy + 4 + dy) if side > 0 else (cx - r - 3 - d - tw,
                                                                   cy + 4 + dy)
                 for d in (0.0, 24.0, 60.0) for dy in (0.0, -16.0, 16.0, -32.0, 32.0)
                 for side in (1, -1)]
        x, y = spots[0]
        for sx, sy in spots:
            box = (sx, sy - 10, sx + tw, sy + 2)
            inside = (sx >= LEFT and sx + tw <= W - RIGHT and sy - 10 >= TOP
                      and sy <= H - BOTTOM)
            if inside and not any(_overlap(box, b) for b in placed):
                x, y = sx, sy
                break
        box = (x, y - 10, x + tw, y + 2)
        placed.append(box)
        tx, ty = min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3])
        dist = math.hypot(tx - cx, ty - cy)
        if dist > r + 6:
            ex, ey = cx + (tx - cx) * r / dist, cy + (ty - cy) * r / dist
            out.append(f'<line x1="{ex:.1f}" y1="{ey:.1f}" x2="{tx:.1f}" y2="{ty:.1f}" '
                       'class="leader"/>')
        out.append(f'<text x="{x:.1f}" y="{y:.1f}" class="lbl pt-lbl"><title>'
                   f"{escape(g.op + ' ' + g.input_dims)}</title>{escape(text)}</text>")
    return out


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


# -- card ----------------------------------------------------------------------------------

def _table(plot: RooflinePlot) -> str:
    head = ('<tr><th class="name">op</th><th class="name">shapes</th><th>dtype</th>'
            "<th>calls</th><th>device ms</th><th>TFLOP/s</th><th>TB/s</th><th>bound</th>"
            "<th>% of roof</th></tr>")
    rows = "".join(
        f'<tr><td class="name" title="{escape(g.op)}">{escape(display_name(g.op, width=40))}'
        f'</td><td class="name" title="{escape(g.input_dims)}">'
        f"{escape(display_name(shapes_text(g.input_dims), width=60))}</td>"
        f"<td>{escape(g.dtype)}</td>"
        f"<td>{g.count:,}</td><td>{g.device_ns / 1e6:.3f}</td>"
        f"<td>{g.achieved_tflops:.3g}</td><td>{g.achieved_tbps:.3g}</td>"
        f"<td>{escape(g.bound)}</td>"
        f"<td>{'n/a' if g.pct_of_roof is None else f'{g.pct_of_roof:.1f}'}</td></tr>"
        for g in plot.groups[:TOP_ROWS])
    return f'<table class="data roof-table">{head}{rows}</table>'


def caption(plot: RooflinePlot) -> str:
    """What the plot shows and where the peaks come from."""
    drawn = len(plot.groups) - plot.unplotted - plot.beyond
    ceilings = ", ".join(f"{k} {v:g} TFLOP/s" for k, v in plot.ceilings.items())
    parts = [f"{plot.device} ({plot.gpu}): memory {plot.peak_tbps:g} TB/s, {ceilings}; "
             f"source: {plot.source or 'user override'}",
             f"{drawn} op group(s) drawn, area proportional to device time; the "
             f"{min(LABELLED, drawn)} losing the most time against their roof are named"]
    if plot.unplotted:
        parts.append(f"{plot.unplotted} group(s) without FLOPs (copies) or a peak are in "
                     "the table only")
    if plot.beyond:
        parts.append(f"{plot.beyond} smaller group(s) not drawn")
    return "; ".join(parts)


def html(section: RooflineSection | None, reason: str) -> str:
    """The inner HTML of the roofline card."""
    if section is None:
        return f'<p class="na">not available: {escape(reason)}</p>'
    out = []
    for plot in section.plots:
        out.append(f'<figure class="roofline"><figcaption>{escape(caption(plot))}'
                   f"</figcaption>{plot_svg(plot)}</figure>")
        out.append(f'<h4 class="sub">Op groups by device time ({escape(plot.device)})</h4>'
                   if len(section.plots) > 1 else
                   '<h4 class="sub">Op groups by device time</h4>')
        out.append(_table(plot))
    if section.notes:
        out.append('<p class="hint">' + escape("; ".join(section.notes)) + "</p>")
    return "".join(out)
