"""Inline SVG plots for the HTML report, generated in Python (no JavaScript): stacked
horizontal bars, a heatmap, a log-x histogram and a line chart. Each function returns one
``<svg>`` element as text with axes, units and a legend. Inputs in ns are shown in the
unit that suits their range."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

FONT = 11
"""Axis label font size (px)."""
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6",
           "#9d755d")
"""Line colours (Tableau 10)."""
HEAT = ((247, 251, 255), (198, 219, 239), (107, 174, 214), (33, 113, 181), (8, 48, 107))
"""Sequential blues from 0 (white) to 1 (dark blue)."""


def time_unit(max_ns: float) -> tuple[str, float]:
    """(unit, ns per unit) that keeps ``max_ns`` readable."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if max_ns >= scale:
            return unit, scale
    return "ns", 1.0


def fmt_ns(ns: float) -> str:
    """``1234567`` -> ``1.23 ms``."""
    unit, scale = time_unit(abs(ns))
    return f"{ns / scale:.3g} {unit}"


def nice_ticks(hi: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``hi``."""
    if hi <= 0:
        return [0.0, 1.0]
    raw = hi / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(math.ceil(hi / step - 1e-9) + 1)]


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg class="plot" role="img" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
            f"<title>{escape(title)}</title>{''.join(body)}</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", cls: str = "lbl") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{cls}">'
            f"{escape(text)}</text>")


def _legend(x: float, y: float, items: Sequence[tuple[str, str]]) -> list[str]:
    out = []
    for name, colour in items:
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" rx="2" '
                   f'fill="{colour}"/>')
        out.append(_text(x + 14, y, name))
        x += 24 + 6.5 * len(name)
    return out


def stacked_bars(rows: Sequence[tuple[str, Sequence[float]]], series: Sequence[tuple[str, str]],
                 title: str, width: int = 760) -> str:
    """Horizontal stacked bars, one per row label; values in ns, one per ``series`` entry
    (name, colour)."""
    label_w, bar_h, gap, top = 110, 16, 6, 30
    plot_w = width - label_w - 20
    total = max((sum(v) for _, v in rows), default=0) or 1
    unit, scale = time_unit(total)
    ticks = nice_ticks(total / scale)
    xmax = ticks[-1] * scale
    height = top + len(rows) * (bar_h + gap) + 34
    body = _legend(label_w, 16, series)
    for i, (label, values) in enumerate(rows):
        y = top + i * (bar_h + gap)
        body.append(_text(label_w - 6, y + bar_h - 4, label, "end"))
        x = float(label_w)
        for (name, colour), v in zip(series, values, strict=True):
            w = plot_w * v / xmax
            body.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" '
                        f'fill="{colour}"><title>{escape(label)} {escape(name)}: '
                        f"{fmt_ns(v)}</title></rect>")
            x += w
    base = top + len(rows) * (bar_h + gap)
    body += _x_axis(label_w, plot_w, base, [(t * scale / xmax, f"{t:g}") for t in ticks],
                    f"time ({unit})")
    return _svg(width, height, body, title)


def _x_axis(x0: float, w: float, y: float, ticks: Sequence[tuple[float, str]],
            label: str) -> list[str]:
    body = [f'<line x1="{x0}" y1="{y}" x2="{x0 + w}" y2="{y}" class="axis"/>']
    for frac, text in ticks:
        x = x0 + frac * w
        body.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" class="axis"/>')
        body.append(_text(x, y + 15, text, "middle"))
    body.append(_text(x0 + w / 2, y + 29, label, "middle", "axlbl"))
    return body


def heat_colour(v: float) -> str:
    """Colour of a fraction in [0, 1] on the ``HEAT`` scale."""
    v = min(1.0, max(0.0, v)) * (len(HEAT) - 1)
    i = min(int(v), len(HEAT) - 2)
    f = v - i
    rgb = (round(a + (b - a) * f) for a, b in zip(HEAT[i], HEAT[i + 1], strict=True))
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def heatmap(rows: Sequence[str], values: Sequence[Sequence[float]], bin_ns: int, title: str,
            width: int = 760) -> str:
    """Rows x time bins of fractions in [0, 1]; x axis = time since the run start."""
    label_w, top = 110, 30
    bins = len(values[0]) if values else 1
    row_h = max(4, min(18, 360 // max(1, len(rows))))
    plot_w = width - label_w - 20
    cell = plot_w / bins
    height = top + row_h * len(rows) + 34
    body = _gradient_legend(label_w, 8)
    for i, (label, row) in enumerate(zip(rows, values, strict=True)):
        y = top + i * row_h
        if row_h >= 9 or i % max(1, 10 // row_h) == 0:
            body.append(_text(label_w - 6, y + min(row_h, 12) - 2, label, "end"))
        body.extend(f'<rect x="{label_w + j * cell:.2f}" y="{y}" width="{cell + 0.3:.2f}" '
                    f'height="{row_h}" fill="{heat_colour(v)}"/>' for j, v in enumerate(row))
    total = bin_ns * bins
    unit, scale = time_unit(total)
    ticks = [t for t in nice_ticks(total / scale) if t * scale <= total]
    body += _x_axis(label_w, plot_w, top + row_h * len(rows),
                    [(t * scale / total, f"{t:g}") for t in ticks],
                    f"time since start ({unit}), {fmt_ns(bin_ns)} per column")
    return _svg(width, height, body, title)


def _gradient_legend(x: float, y: float) -> list[str]:
    stops = "".join(f'<stop offset="{i / (len(HEAT) - 1):.2f}" stop-color="{heat_colour(i / 4)}"/>'
                    for i in range(len(HEAT)))
    return [f'<defs><linearGradient id="heatgrad">{stops}</linearGradient></defs>',
            _text(x, y + 9, "0%"),
            f'<rect x="{x + 22}" y="{y}" width="120" height="10" fill="url(#heatgrad)" '
            f'stroke="#ccc"/>', _text(x + 148, y + 9, "100% busy")]


def log_histogram(bins: Sequence[Sequence[int]], title: str, width: int = 360,
                  height: int = 170) -> str:
    """Bars over log-spaced duration bins ([lo_ns, hi_ns, count]); x axis log scale."""
    left, top, bottom = 40, 12, 36
    plot_w, plot_h = width - left - 30, height - top - bottom
    pos = [b for b in bins if b[1] > 0]
    if not pos:
        return _svg(width, height, [_text(width / 2, height / 2, "no data", "middle")], title)
    lo = math.floor(math.log10(max(1, pos[0][0])))
    hi = math.ceil(math.log10(pos[-1][1]))
    hi = max(hi, lo + 1)
    ymax = max(b[2] for b in pos)
    yticks = nice_ticks(ymax, 3)

    def x(ns: float) -> float:
        return left + plot_w * (math.log10(max(ns, 1)) - lo) / (hi - lo)

    body = []
    for t in yticks:
        y = top + plot_h * (1 - t / yticks[-1])
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                    f'class="gridline"/>')
        body.append(_text(left - 4, y + 4, f"{t:g}", "end"))
    for b_lo, b_hi, count in pos:
        h = plot_h * count / yticks[-1]
        body.append(f'<rect x="{x(b_lo):.2f}" y="{top + plot_h - h:.2f}" '
                    f'width="{max(1.0, x(b_hi) - x(b_lo) - 0.6):.2f}" height="{h:.2f}" '
                    f'fill="{PALETTE[0]}"><title>{fmt_ns(b_lo)} - {fmt_ns(b_hi)}: {count}'
                    f"</title></rect>")
    body += _x_axis(left, plot_w, top + plot_h,
                    [((d - lo) / (hi - lo), fmt_ns(10 ** d)) for d in range(lo, hi + 1)],
                    "kernel duration (log scale); bars = kernel count")
    return _svg(width, height, body, title)


def line_chart(series: Sequence[tuple[str, Sequence[float], Sequence[float]]], title: str,
               x_label: str, width: int = 760, height: int = 240,
               band: tuple[Sequence[float], Sequence[float], Sequence[float]] | None = None
               ) -> str:
    """Lines of (name, xs, ys in ns) with a legend; ``band`` = (xs, low ys, high ys)
    shaded behind them."""
    left, top, bottom = 56, 26, 40
    plot_w, plot_h = width - left - 16, height - top - bottom
    xs_all = [x for _, xs, _ in series for x in xs]
    ys_all = [y for _, _, ys in series for y in ys] + (list(band[2]) if band else [])
    if not xs_all:
        return _svg(width, height, [_text(width / 2, height / 2, "no data", "middle")], title)
    x0, x1 = min(xs_all), max(xs_all)
    if x1 == x0:  # one step: a line through one point draws nothing, so bars instead
        return _bars_at_one_x(series, title, x_label, width, height, band)
    unit, scale = time_unit(max(ys_all))
    yticks = nice_ticks(max(ys_all) / scale)
    ytop = yticks[-1] * scale or 1

    def px(x: float) -> float:
        return left + plot_w * (x - x0) / (x1 - x0)

    def py(y: float) -> float:
        return top + plot_h * (1 - y / ytop)

    body = _legend(left, 14, [(name, PALETTE[i % len(PALETTE)])
                              for i, (name, _, _) in enumerate(series)])
    for t in yticks:
        body.append(f'<line x1="{left}" y1="{py(t * scale):.1f}" x2="{left + plot_w}" '
                    f'y2="{py(t * scale):.1f}" class="gridline"/>')
        body.append(_text(left - 4, py(t * scale) + 4, f"{t:g}", "end"))
    body.append(f'<text transform="translate(14 {top + plot_h / 2:.0f}) rotate(-90)" '
                f'text-anchor="middle" class="axlbl">duration ({unit})</text>')
    if band is not None:
        bx, blo, bhi = band
        pts = [f"{px(x):.1f},{py(y):.1f}" for x, y in zip(bx, bhi, strict=True)]
        pts += [f"{px(x):.1f},{py(y):.1f}" for x, y in reversed(list(zip(bx, blo, strict=True)))]
        body.append(f'<polygon points="{" ".join(pts)}" fill="{PALETTE[0]}" opacity="0.18"/>')
    for i, (name, xs, ys) in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
        body.append(f'<polyline points="{line}" fill="none" stroke="{colour}" '
                    f'stroke-width="1.6"><title>{escape(name)}</title></polyline>')
        if len(xs) <= 60:
            body.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.4" fill="{colour}">'
                        f"<title>{escape(name)} step {x:g}: {fmt_ns(y)}</title></circle>"
                        for x, y in zip(xs, ys, strict=True))
    step = [t for t in nice_ticks(x1 - x0, 6) if t <= x1 - x0]
    if all(float(x).is_integer() for x in xs_all):  # step numbers: integer ticks only
        step = [t for t in step if float(t).is_integer()]
    body += _x_axis(left, plot_w, top + plot_h,
                    [(t / (x1 - x0), f"{x0 + t:g}") for t in step], x_label)
    return _svg(width, height, body, title)


def _bars_at_one_x(series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
                   title: str, x_label: str, width: int, height: int,
                   band: tuple[Sequence[float], Sequence[float], Sequence[float]] | None
                   ) -> str:
    """``line_chart`` when every point has the same x (a run of one step): a vertical bar
    per point (ys in ns, value on top, series name below), ``band`` as a low-high whisker
    over the middle; the x axis names the one x."""
    left, top, bottom = 56, 26, 40
    plot_w, plot_h = width - left - 16, height - top - bottom
    bars = [(name, ys[j], PALETTE[i % len(PALETTE)])
            for i, (name, _, ys) in enumerate(series) for j in range(len(ys))]
    highs = [b[1] for b in bars] + (list(band[2]) if band else [])
    unit, scale = time_unit(max(highs))
    yticks = nice_ticks(max(highs) / scale)
    ytop = yticks[-1] * scale or 1
    base = top + plot_h

    def py(y: float) -> float:
        return top + plot_h * (1 - y / ytop)

    body = []
    for t in yticks:
        body.append(f'<line x1="{left}" y1="{py(t * scale):.1f}" x2="{left + plot_w}" '
                    f'y2="{py(t * scale):.1f}" class="gridline"/>')
        body.append(_text(left - 4, py(t * scale) + 4, f"{t:g}", "end"))
    body.append(f'<text transform="translate(14 {top + plot_h / 2:.0f}) rotate(-90)" '
                f'text-anchor="middle" class="axlbl">duration ({unit})</text>')
    slot = plot_w / len(bars)
    bar_w = min(60.0, slot * 0.6)
    x = series[0][1][0]
    for i, (name, y, colour) in enumerate(bars):
        cx = left + slot * (i + 0.5)
        body.append(f'<rect x="{cx - bar_w / 2:.1f}" y="{py(y):.1f}" width="{bar_w:.1f}" '
                    f'height="{base - py(y):.1f}" fill="{colour}"><title>{escape(name)} '
                    f"{escape(x_label)} {x:g}: {fmt_ns(y)}</title></rect>")
        body.append(_text(cx, py(y) - 4, fmt_ns(y), "middle"))
        if slot >= 40:
            body.append(_text(cx, base + 15, name, "middle"))
    if band is not None:
        lo, hi, cx = min(band[1]), max(band[2]), left + plot_w / 2
        body += [f'<line x1="{cx:.1f}" y1="{py(lo):.1f}" x2="{cx:.1f}" y2="{py(hi):.1f}" '
                 f'class="whisker" stroke="#333"><title>{fmt_ns(lo)} - {fmt_ns(hi)}</title>'
                 "</line>"] + [f'<line x1="{cx - 6:.1f}" y1="{py(v):.1f}" x2="{cx + 6:.1f}" '
                               f'y2="{py(v):.1f}" stroke="#333"/>' for v in (lo, hi)]
    body.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" class="axis"/>')
    body.append(_text(left + plot_w / 2, base + 29,
                      f"{x_label} {x:g}: the only one recorded, so a bar, not a line",
                      "middle", "axlbl"))
    return _svg(width, height, body, title)


def run_chart(values: Sequence[float | None], title: str, *, fraction: bool = False,
              marks: Sequence[bool] = (), band: tuple[Sequence[float | None],
                                                      Sequence[float | None]] | None = None,
              notes: Sequence[str] = (), width: int = 360, height: int = 170) -> str:
    """One small line chart of a figure over runs 1..n (x = run number): ``values`` in ns
    (or 0..1 with ``fraction``), None where a run lacks the figure (the line breaks);
    ``marks``: runs drawn as a red ring (change points); ``band``: (low, high) per run
    shaded; ``notes``: per-run hover text."""
    left, top, bottom = 48, 10, 34
    plot_w, plot_h = width - left - 14, height - top - bottom
    n = len(values)
    known = [v for v in values if v is not None]
    highs = [v for v in (band[1] if band else []) if v is not None]
    if not known:
        return _svg(width, height, [_text(width / 2, height / 2, "no data", "middle")], title)
    if fraction:
        unit, scale, yticks = "", 1.0, [0.0, 0.25, 0.5, 0.75, 1.0]
    else:
        unit, scale = time_unit(max(known + highs))
        yticks = nice_ticks(max(known + highs) / scale, 4)
    ytop = yticks[-1] * scale or 1.0

    def px(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def py(y: float) -> float:
        return top + plot_h * (1 - y / ytop)

    body = []
    for t in yticks:
        body.append(f'<line x1="{left}" y1="{py(t * scale):.1f}" x2="{left + plot_w}" '
                    f'y2="{py(t * scale):.1f}" class="gridline"/>')
        body.append(_text(left - 4, py(t * scale) + 4, f"{t:g}", "end"))
    if unit:
        body.append(f'<text transform="translate(12 {top + plot_h / 2:.0f}) rotate(-90)" '
                    f'text-anchor="middle" class="axlbl">{escape(unit)}</text>')
    if band is not None:
        for i in range(n - 1):
            lo0, hi0, lo1, hi1 = band[0][i], band[1][i], band[0][i + 1], band[1][i + 1]
            if None in (lo0, hi0, lo1, hi1):
                continue
            pts = (f"{px(i):.1f},{py(hi0 or 0):.1f} {px(i + 1):.1f},{py(hi1 or 0):.1f} "
                   f"{px(i + 1):.1f},{py(lo1 or 0):.1f} {px(i):.1f},{py(lo0 or 0):.1f}")
            body.append(f'<polygon points="{pts}" fill="{PALETTE[0]}" opacity="0.15"/>')
    runs: list[list[int]] = [[]]
    for i, v in enumerate(values):
        if v is None:
            runs.append([])
        else:
            runs[-1].append(i)
    for part in runs:
        if len(part) > 1:
            line = " ".join(f"{px(i):.1f},{py(values[i] or 0):.1f}" for i in part)
            body.append(f'<polyline points="{line}" fill="none" stroke="{PALETTE[0]}" '
                        f'stroke-width="1.6"/>')
    for i, v in enumerate(values):
        if v is None:
            continue
        shown = f"{v:.3f}" if fraction else fmt_ns(v)
        tip = f"run {i + 1}: {shown}" + (f" {notes[i]}" if i < len(notes) and notes[i] else "")
        marked = i < len(marks) and marks[i]
        if marked:
            body.append(f'<circle cx="{px(i):.1f}" cy="{py(v):.1f}" r="6" fill="none" '
                        f'stroke="#d64545" stroke-width="2" class="change-point"/>')
        body.append(f'<circle cx="{px(i):.1f}" cy="{py(v):.1f}" r="2.6" '
                    f'fill="{"#d64545" if marked else PALETTE[0]}"><title>{escape(tip)}'
                    f"</title></circle>")
    every = max(1, math.ceil(n / 12))
    ticks = [((i / (n - 1)) if n > 1 else 0.5, str(i + 1)) for i in range(0, n, every)]
    body += _x_axis(left, plot_w, top + plot_h, ticks, "run")
    return _svg(width, height, body, title)
