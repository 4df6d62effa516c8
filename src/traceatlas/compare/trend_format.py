"""Renderings of a ``TrendResult``: JSON, GitHub-flavoured Markdown, and the cell texts the
terminal table shares (one row per figure, one column per run). Pure functions returning
strings; the CLI prints or writes them. The HTML page: ``trend_plot``."""

from __future__ import annotations

import json

from traceatlas.compare.trend import Figure, Point, TrendResult
from traceatlas.names import display_name
from traceatlas.report.svg import fmt_ns

MARK = "*"
"""Appended to a cell that is a change point."""


def value_text(figure: Figure, point: Point) -> str:
    """``1.23 ms`` / ``0.912``; ``-`` where the run lacks the figure."""
    if point.value is None:
        return "-"
    return fmt_ns(point.value) if figure.unit == "ns" else f"{point.value:.3f}"


def change_text(figure: Figure, point: Point) -> str:
    """``+20.0%`` (times) / ``-0.030`` (efficiency); empty when there is no change."""
    if point.change is None:
        return ""
    if figure.unit == "ns":
        return f"{point.change * 100 + 0.0:+.1f}%".replace("-0.0%", "+0.0%")
    return f"{point.change:+.3f}".replace("-0.000", "+0.000")


def cell_text(figure: Figure, point: Point) -> str:
    """The table cell: value, change vs the previous run, ``*`` on a change point."""
    parts = [value_text(figure, point), change_text(figure, point)]
    text = " ".join(p for p in parts if p)
    return text + (f" {MARK}" if point.change_point else "")


def spread_cells(figure: Figure) -> list[str]:
    """``IQR 1.20 ms - 1.30 ms`` per run (times only)."""
    return ["-" if p.low is None or p.high is None else f"{fmt_ns(p.low)} - {fmt_ns(p.high)}"
            for p in figure.points]


def row_name(figure: Figure) -> str:
    """``kernel gemm_kernel<float, #>``, ``step time``, ``efficiency device load balance``."""
    if figure.kind == "step":
        return figure.label
    return f"{figure.kind} {figure.label}"


def short_name(figure: Figure, width: int = 60) -> str:
    """``row_name`` with the entity demangled and cut to ``width`` (``names.display_name``)."""
    if figure.kind in ("step", "efficiency"):
        return row_name(figure)
    return f"{figure.kind} {display_name(figure.label, width=width)}"


def legend(result: TrendResult) -> str:
    """What a ``*`` means and how the runs are ordered."""
    return (f"{MARK} change point: significant vs the previous run (Mann-Whitney, "
            f"{result.correction} correction, alpha {result.alpha:g}) and past "
            f"{result.threshold * 100:g}% of its median; runs ordered {result.order}")


def headline(result: TrendResult) -> list[str]:
    """One line per change point (or one saying there is none)."""
    found = result.change_points()
    if not found:
        return [f"no change point over {len(result.runs)} runs"]
    return [f"change point at run {i + 1} ({result.runs[i].label}): {row_name(f)} "
            f"{change_text(f, p)} (adjusted p = {p.p_adjusted:.2g})" for i, f, p in found]


def to_json(result: TrendResult) -> str:
    """The ``--format json`` text (one object, one line, newline-terminated)."""
    return json.dumps(result.to_dict(), allow_nan=False) + "\n"


def _md(text: str) -> str:
    """A Markdown table cell: pipes and backslashes escaped, one line."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(result: TrendResult) -> str:
    """The table as GitHub-flavoured Markdown, the change points, the legend, notes."""
    head = "| figure | " + " | ".join(f"{i + 1}: {_md(r.label)}"
                                       for i, r in enumerate(result.runs)) + " |"
    out = [head, "|---|" + "---:|" * len(result.runs)]
    for f in result.figures:
        cells = [cell_text(f, p) for p in f.points]
        out.append(f"| {_md(row_name(f))} | " + " | ".join(_md(c) for c in cells) + " |")
        if f.kind == "step":
            out.append("| step time IQR | " + " | ".join(spread_cells(f)) + " |")
    out += ["", _md(legend(result)), ""]
    out += [f"- {_md(line)}" for line in headline(result)]
    if result.notes:
        out += ["", "Notes:", *(f"- {_md(n)}" for n in result.notes)]
    return "\n".join(out) + "\n"
