"""Several runs side by side: the rows of the across-runs table and its terminal and HTML
renderings.

Runs with the same rank count are a *comparison* (before/after an optimisation): the
table shows each run's numbers and the change against run 1. Runs with different rank
counts are a scaling study (strong or weak, ``analysis/scalability.py``) and add its
speedup and scalability factors. Runs are numbered (run 1, run 2, ...) and named in full
once above the table, so long paths are never cut to fit a column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from traceatlas.analysis.efficiency_labels import metric_label
from traceatlas.literal import literal
from traceatlas.report.svg import fmt_ns

if TYPE_CHECKING:
    from rich.console import RenderableType

    from traceatlas.report.data import ReportData, RunReport

SCALING_COLUMNS = (("speedup", "speedup"),
                   ("computational_scalability", "computational scalability"),
                   ("global_efficiency", "global efficiency"),
                   ("instruction_scalability", "instruction scalability"),
                   ("ipc_scalability", "IPC scalability"),
                   ("frequency_scalability", "frequency scalability"))
"""Scalability-analysis columns shown in a scaling study (when any run has a value)."""
DIFF_NOTE = ("kernel-by-kernel differences between the runs: not in this version "
             "(coming: traceatlas diff)")
TERMINAL_MAX_LEVEL = 1
"""Efficiency levels shown in the terminal table (the HTML shows every level)."""


@dataclass
class Row:
    """One metric over the runs. ``unit``: ``ns`` (a time), ``count`` or ``""`` (a
    fraction or factor); ``changes[i]``: run i against run 1 (None for run 1): relative
    change for times and counts, difference for fractions."""

    metric: str
    label: str
    unit: str
    level: int
    values: list[float | None]
    changes: list[float | None]


def mode(runs: Sequence[RunReport]) -> str:
    """``comparison`` when every run has the same rank count, else ``scaling``."""
    return "comparison" if len({len(r.ranks) for r in runs}) == 1 else "scaling"


def rows(runs: Sequence[RunReport], scalability: Sequence[dict[str, Any]]) -> list[Row]:
    """Ranks, runtime, the efficiency tree of every run (union of their metrics, in the
    order of the first run that has each) and, for a scaling study, the scalability
    factors."""
    out = [_row("ranks", "ranks", "count", 0, [float(len(r.ranks)) for r in runs]),
           _row("runtime_ns", "runtime", "ns", 0, [float(r.span_ns) for r in runs])]
    seen: dict[tuple[str, str], tuple[str, int]] = {}
    for run in runs:
        for node in run.efficiency:
            seen.setdefault((node.side, node.metric),
                            (node.label or metric_label(node.metric), node.level))
    for (side, metric), (label, level) in seen.items():
        values = [next((n.value for n in run.efficiency if n.metric == metric), None)
                  for run in runs]
        out.append(_row(metric, f"{side}: {label}", "", level, values))
    if scalability and str(scalability[0].get("scaling")) != "comparison":
        by_run = {str(r["run"]): r for r in scalability}
        for key, label in SCALING_COLUMNS:
            values = [_float(by_run.get(run.name, {}).get(key)) for run in runs]
            if any(v is not None for v in values):
                out.append(_row(key, label, "", 0, values))
    elif scalability:
        by_run = {str(r["run"]): r for r in scalability}
        speedup = _row("speedup", "speedup vs run 1", "", 0,
                       [_float(by_run.get(run.name, {}).get("speedup")) for run in runs])
        speedup.changes = [None] * len(runs)  # already relative to run 1
        out.append(speedup)
    return out


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _row(metric: str, label: str, unit: str, level: int, values: list[float | None]) -> Row:
    ref = values[0]
    changes: list[float | None] = [None]
    for v in values[1:]:
        if v is None or ref is None:
            changes.append(None)
        elif unit:
            changes.append((v - ref) / ref if ref else None)
        else:
            changes.append(v - ref)
    return Row(metric, label, unit, level, values, changes)


def fmt_value(row: Row, value: float | None) -> str:
    """A value as the table shows it: times in a readable unit, fractions to 2 places."""
    if value is None:
        return "n/a"
    if row.unit == "ns":
        return fmt_ns(value)
    if row.unit == "count":
        return f"{value:,.0f}"
    return f"{value:.2f}"


def fmt_change(row: Row, change: float | None) -> str:
    """``+12.5%`` for times and counts, ``+0.07`` for fractions, ``""`` when unknown."""
    if change is None:
        return ""
    return f"{change * 100:+.1f}%" if row.unit else f"{change:+.2f}"


def filled(data: ReportData) -> ReportData:
    """``data`` with ``runs_mode`` and ``comparison`` set (from its runs and scalability
    rows when the builder did not set them)."""
    if data.comparison and data.runs_mode:
        return data
    from dataclasses import replace

    scaling = data.scalability[0].get("scaling") if data.scalability else None
    runs_mode = data.runs_mode or (str(scaling) if scaling else mode(data.runs))
    return replace(data, runs_mode=runs_mode,
                   comparison=data.comparison or rows(data.runs, data.scalability))


def title(data: ReportData) -> str:
    """The table's heading line."""
    n = len(data.runs)
    if data.runs_mode == "comparison":
        ranks = len(data.runs[0].ranks)
        return (f"Comparison of {n} runs with {ranks} rank(s) each: same rank count, so "
                "a comparison, not a scaling study; change = against run 1")
    ratio = data.scalability[0].get("scaling_ratio") if data.scalability else None
    growth = "" if ratio is None else f" (normalised work growth {float(ratio):.2f}; weak " \
        "above 0.75)"
    kind = f"{data.runs_mode} scaling" if data.runs_mode in ("strong", "weak") else "scaling"
    return f"Scalability across {n} runs: {kind}{growth}; reference = fewest ranks"


def legend(data: ReportData) -> list[str]:
    """``run 1  <full name> (P ranks)``, one line per run."""
    return [f"run {i + 1}  {run.name}  ({len(run.ranks)} rank(s))"
            for i, run in enumerate(data.runs)]


def terminal(data: ReportData) -> list[RenderableType]:
    """Heading, legend, table and (comparison) the note on per-kernel differences."""
    data = filled(data)
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("metric", no_wrap=True)
    for i in range(len(data.runs)):
        table.add_column(f"run {i + 1}", justify="right", no_wrap=True)
    changes = data.runs_mode == "comparison"
    if changes:
        for i in range(1, len(data.runs)):
            table.add_column(f"change {i + 1} vs 1", justify="right", no_wrap=True)
    for row in data.comparison:
        if row.level > TERMINAL_MAX_LEVEL:
            continue
        cells = [Text(literal("  " * row.level + row.label))]
        cells += [Text(fmt_value(row, v)) for v in row.values]
        if changes:
            cells += [Text(fmt_change(row, c)) for c in row.changes[1:]]
        table.add_row(*cells)
    parts: list[RenderableType] = [Text(title(data), style="bold underline")]
    parts += [Text("  " + literal(line), style="dim") for line in legend(data)]
    parts.append(table)
    if changes:
        parts.append(Text("  " + DIFF_NOTE, style="dim"))
    return parts


def terminal_lines(data: ReportData) -> int:
    """Lines ``terminal`` takes."""
    data = filled(data)
    shown = sum(row.level <= TERMINAL_MAX_LEVEL for row in data.comparison)
    return 1 + len(data.runs) + 1 + shown + (data.runs_mode == "comparison")


def html(data: ReportData) -> str:
    """The card body: legend list and the table (every efficiency level)."""
    data = filled(data)
    items = "".join(f"<li><code>{escape(run.name)}</code> ({len(run.ranks)} rank(s))</li>"
                    for run in data.runs)
    changes = data.runs_mode == "comparison"
    head = "<th class=\"name\">metric</th>" + "".join(
        f"<th>run {i + 1}</th>" for i in range(len(data.runs)))
    if changes:
        head += "".join(f"<th>change {i + 1} vs 1</th>" for i in range(1, len(data.runs)))
    body = []
    for row in data.comparison:
        pad = f' style="padding-left:{8 + 14 * row.level}px"' if row.level else ""
        cells = [f'<td class="name"{pad}>{escape(row.label)}</td>']
        cells += [f"<td>{escape(fmt_value(row, v))}</td>" for v in row.values]
        if changes:
            cells += [f"<td>{escape(fmt_change(row, c))}</td>" for c in row.changes[1:]]
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="hint">{escape(DIFF_NOTE)}</p>' if changes else ""
    return (f'<p class="hint">{escape(title(data))}</p><ol class="runs">{items}</ol>'
            f'<table class="data"><tr>{head}</tr>{"".join(body)}</table>{note}')
