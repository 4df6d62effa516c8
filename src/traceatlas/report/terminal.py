"""The report in the terminal (rich): the efficiency tree with colour and the top findings,
in one screen (``MAX_LINES``). The HTML report has the plots.

Every piece of text is a ``rich.text.Text`` built from ``literal(...)``: names, paths and
commands are never read as markup or emoji codes, and characters that would act on the
terminal (ESC, CR, ...) are shown escaped."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.text import Text

from traceatlas.advisor.causes import cause_words
from traceatlas.literal import literal
from traceatlas.report import baseline, compare
from traceatlas.report.critical import summary as critical_summary
from traceatlas.report.memory import cost_text
from traceatlas.report.svg import fmt_ns

if TYPE_CHECKING:
    from traceatlas.report.data import EfficiencyNode, Finding, ReportData, RunReport

MAX_LINES = 40
"""The terminal report fits in this many lines."""
MAX_TREE = 16
"""Efficiency metrics shown at most (deeper levels are cut first)."""
GOOD, FAIR = 0.8, 0.6
"""POP practice: >= 0.8 is good, below deserves attention; below 0.6 is poor."""
BAR = 12
MIN_FINDINGS = 3
"""Findings always shown whole, even past ``MAX_LINES`` in a narrow terminal."""
LABEL_WIDTH = 42
"""Columns for a metric label and its indent ("communication and transfers efficiency")."""


def colour(value: float | None) -> str:
    """Rich style of an efficiency value."""
    if value is None:
        return "dim"
    return "green" if value >= GOOD else "yellow" if value >= FAIR else "red"


def metric_label(node: EfficiencyNode) -> str:
    """``device_load_balance`` -> ``load balance``."""
    if node.label:
        return node.label
    name = node.metric
    if name.startswith(node.side + "_"):
        name = name[len(node.side) + 1:]
    return name.replace("_", " ")


def tree_lines(nodes: list[EfficiencyNode], limit: int = MAX_TREE) -> list[Text]:
    """The efficiency tree as indented lines (children under their parent), at most
    ``limit`` metric lines; the deepest levels are dropped first when it is too long."""
    depth = max((n.level for n in nodes), default=0)
    while depth > 0 and sum(n.level <= depth for n in nodes) > limit:
        depth -= 1
    kept = [n for n in nodes if n.level <= depth][:limit]
    lines: list[Text] = []
    for side in dict.fromkeys(n.side for n in kept):
        lines.append(Text(literal(f"{side} side"), style="bold"))
        for node in ordered(n for n in kept if n.side == side):
            value = "   n/a" if node.value is None else f"{node.value:6.2f}"
            filled = 0 if node.value is None else round(max(0.0, min(1.0, node.value)) * BAR)
            line = Text("  " + "  " * node.level)
            line.append(literal(f"{metric_label(node):<{LABEL_WIDTH - 2 * node.level}}"))
            line.append(value + " ", style=f"bold {colour(node.value)}")
            line.append("█" * filled, style=colour(node.value))
            line.append("░" * (BAR - filled), style="dim")
            lines.append(line)
    return lines


def ordered(nodes: object) -> list[EfficiencyNode]:
    """Depth-first order: each node followed by its children, in table order."""
    items: list[EfficiencyNode] = list(nodes)  # type: ignore[call-overload]
    names = {n.metric for n in items}
    out: list[EfficiencyNode] = []

    def visit(parent: str | None) -> None:
        for n in items:
            if (n.parent if n.parent in names else None) == parent and n not in out:
                out.append(n)
                visit(n.metric)

    visit(None)
    return out + [n for n in items if n not in out]


def ranks_text(ranks: list[int]) -> str:
    """``; rank 2`` / ``; ranks 0, 3`` (empty when the finding names no rank)."""
    if not ranks:
        return ""
    return f"; rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, sorted(ranks)))}"


WIDTH = 100
"""Columns assumed when the caller does not say (``to_text``)."""
_MEASURE = Console(file=io.StringIO(), width=1000, markup=False, emoji=False, highlight=False)


def wrapped(text: Text, width: int, indent: int, first: str = "") -> list[Text]:
    """``text`` word-wrapped to ``width - indent`` columns (a word longer than a line is
    folded, never cut): the first line starts with ``first``, the others with ``indent``
    spaces."""
    avail = max(width - indent, 10)
    lines = list(text.wrap(_MEASURE, avail, overflow="fold"))
    out = []
    for i, line in enumerate(lines):
        head = Text(first if i == 0 else " " * indent, style=text.style)
        head.append_text(line)
        head.rstrip()
        out.append(head)
    return out


def command_lines(label: str, command: str, style: str, width: int) -> list[Text]:
    """``     <label> <command>`` when it fits ``width``; else the label on its own line and
    the command alone on the next, unindented and never broken: the terminal folds it, a
    copy of it is the command (no newline, no ellipsis inside)."""
    line = Text(f"     {label} ", style="dim", overflow="ignore", no_wrap=True)
    line.append(literal(command), style=style)
    if line.cell_len <= width:
        return [line]
    alone = Text(literal(command), style=style, overflow="ignore", no_wrap=True)
    return [Text(f"     {label} (one line):", style="dim"), alone]


def rows_taken(lines: list[Text], width: int) -> int:
    """Terminal rows ``lines`` take at ``width`` (a long command folds)."""
    return sum(max(1, -(-line.cell_len // width)) for line in lines)


def finding_block(f: Finding, width: int) -> list[Text]:
    """One finding: statement (wrapped), command, viewer command, next step (wrapped)."""
    head = Text()
    head.append("HIGH " if f.severity == "high" else "info ",
                style="bold red" if f.severity == "high" else "cyan")
    if f.cause:
        head.append(f"[{literal(cause_words(f.cause))}] ", style="magenta")
    head.append(literal(f.statement))
    head.append(f"  ({cost_text(f)}{ranks_text(f.ranks)})", style="dim")
    lines = wrapped(head, width, 4, f"{f.rank:>2}. ")
    if f.command:  # never cropped nor broken: a cut command cannot be pasted
        lines += command_lines("->", f.command, "bold blue", width)
    if f.view:  # opens the viewer where the finding points
        lines += command_lines("see", f.view, "blue", width)
    lines += wrapped(Text(literal(f.next_step), style="dim"), width, 8, " " * 8)
    return lines


def finding_lines(run: RunReport, budget: int, width: int = WIDTH) -> list[Text]:
    """Top findings, each whole (statement and next step wrapped to ``width``, commands on
    one line each): the first ``MIN_FINDINGS`` always, then as many as fit in ``budget``
    terminal rows; a last line says how many more the JSON and HTML reports hold."""
    lines: list[Text] = []
    for i, f in enumerate(run.findings):
        block = finding_block(f, width)
        left = len(run.findings) - i - 1
        if i >= MIN_FINDINGS and rows_taken(lines + block, width) + (left > 0) > budget:
            more = len(run.findings) - i
            lines.append(Text(f"    {more} more finding(s): add -o report.html or "
                              "--format json", style="dim"))
            break
        lines += block
    return lines


def run_lines(run: RunReport, budget: int, width: int = WIDTH) -> list[Text]:
    """Header, efficiency tree and findings of one run in ``budget`` lines."""
    head = Text(literal(run.name), style="bold")
    head.append(literal(f"  {run.source_format}, {len(run.ranks)} rank(s), span "
                        f"{fmt_ns(run.span_ns)}"), style="dim")
    lines = wrapped(head, width, 2)
    lines.append(Text("Efficiency (POP: >= 0.80 good)", style="bold underline"))
    if run.efficiency:
        lines += tree_lines(run.efficiency, min(MAX_TREE, budget // 2))
    else:
        lines.append(Text(literal(f"  not available: {run.missing.get('efficiency', '')}"),
                          "dim"))
    if run.critical is not None:  # one line: what bounds the typical step's path
        lines.append(Text(literal(critical_summary(run.critical)), style="dim"))
    lines.append(Text("Top findings", style="bold underline"))
    if run.findings:
        lines += finding_lines(run, budget - len(lines) - 1, width)
    else:
        reason = run.missing.get("findings")
        lines.append(Text(literal(f"  not available: {reason}") if reason else
                          "  none: no finding costs more than the advisor's threshold "
                          "(1% of the run)", "dim"))
    return lines


def renderable(data: ReportData, max_lines: int = MAX_LINES, *,
               html_hint: bool = True, width: int = WIDTH) -> RenderableType:
    """The terminal report for a ``width``-column terminal, in ``max_lines`` rows: text
    wrapped, never cut; commands whole on their own line. ``html_hint``: end with how to
    get the HTML report (off when it is being written)."""
    parts: list[RenderableType] = []
    budget = max_lines - 2
    if data.baseline is not None:
        lines = baseline.terminal_lines(data.baseline)
        parts += lines
        budget -= len(lines)
    if len(data.runs) > 1:
        if "scalability" in data.missing:
            parts.append(Text("scalability: not available: "
                              + literal(data.missing.get("scalability", "")), style="dim"))
            budget -= 1
        parts += compare.terminal(data)  # every run named in full, numbers side by side
        budget -= compare.terminal_lines(data)
    parts += run_lines(data.runs[-1], budget, width)
    if html_hint:
        parts.append(Text("Full report with plots: add -o report.html", style="dim"))
    return Group(*parts)


def run_summary(run: RunReport) -> Text:
    """One line: the run and its top-level efficiencies."""
    line = Text(literal(f"{run.name}: {len(run.ranks)} rank(s), {fmt_ns(run.span_ns)}"))
    for node in run.efficiency:
        if node.level == 0:
            line.append(literal(f"  {node.metric} "))
            line.append("n/a" if node.value is None else f"{node.value:.2f}",
                        style=colour(node.value))
    return line


def to_text(data: ReportData, width: int = WIDTH, color: bool = False) -> str:
    """The terminal report as text (ANSI colours when ``color``), as ``report`` prints it
    in a ``width``-column terminal (long command lines kept whole on one line)."""
    console = Console(file=io.StringIO(), width=width, force_terminal=color,
                      color_system="standard" if color else None, record=True,
                      markup=False, emoji=False, highlight=False)
    console.print(renderable(data, width=width), crop=False, soft_wrap=False)
    return console.export_text(styles=color)
