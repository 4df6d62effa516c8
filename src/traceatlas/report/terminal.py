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
from traceatlas.report.svg import fmt_ns

if TYPE_CHECKING:
    from traceatlas.report.data import EfficiencyNode, ReportData, RunReport

MAX_LINES = 40
"""The terminal report fits in this many lines."""
MAX_TREE = 16
"""Efficiency metrics shown at most (deeper levels are cut first)."""
GOOD, FAIR = 0.8, 0.6
"""POP practice: >= 0.8 is good, below deserves attention; below 0.6 is poor."""
BAR = 12
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


def finding_lines(run: RunReport, budget: int) -> list[Text]:
    """Top findings, three or four lines each (statement, command, viewer command, next
    step), within ``budget`` lines. Commands are printed whole on one line (the terminal
    wraps them, no newline is inserted), so they paste as one command; the others are cut
    to the width."""
    lines: list[Text] = []
    for f in run.findings:
        if len(lines) + 2 + bool(f.command) + bool(f.view) > budget:
            break
        head = Text(f"{f.rank:>2}. ")
        head.append("HIGH " if f.severity == "high" else "info ",
                    style="bold red" if f.severity == "high" else "cyan")
        if f.cause:
            head.append(f"[{literal(cause_words(f.cause))}] ", style="magenta")
        head.append(literal(f.statement))
        head.append(f"  (costs {fmt_ns(f.cost_ns)}{ranks_text(f.ranks)})", style="dim")
        lines.append(head)
        if f.command:  # never cropped nor broken: a cut command cannot be pasted
            command = Text("     -> ", style="dim", overflow="ignore", no_wrap=True)
            command.append(literal(f.command), style="bold blue")
            lines.append(command)
        if f.view:  # opens the viewer where the finding points
            view = Text("     see ", style="dim", overflow="ignore", no_wrap=True)
            view.append(literal(f.view), style="blue")
            lines.append(view)
        lines.append(Text("        " + literal(f.next_step), style="dim"))
    return lines


def run_lines(run: RunReport, budget: int) -> list[Text]:
    """Header, efficiency tree and findings of one run in ``budget`` lines."""
    head = Text(literal(run.name), style="bold")
    head.append(literal(f"  {run.source_format}, {len(run.ranks)} rank(s), span "
                        f"{fmt_ns(run.span_ns)}"), style="dim")
    lines = [head, Text("Efficiency (POP: >= 0.80 good)", style="bold underline")]
    if run.efficiency:
        lines += tree_lines(run.efficiency, min(MAX_TREE, budget // 2))
    else:
        lines.append(Text(literal(f"  not available: {run.missing.get('efficiency', '')}"),
                          "dim"))
    lines.append(Text("Top findings", style="bold underline"))
    if run.findings:
        lines += finding_lines(run, budget - len(lines) - 1)
    else:
        reason = run.missing.get("findings")
        lines.append(Text(literal(f"  not available: {reason}") if reason else
                          "  none: no finding costs more than the advisor's threshold "
                          "(1% of the run)", "dim"))
    return lines


def renderable(data: ReportData, max_lines: int = MAX_LINES, *,
               html_hint: bool = True) -> RenderableType:
    """The terminal report; fits in ``max_lines`` lines at 100 columns or more.
    ``html_hint``: end with how to get the HTML report (off when it is being written)."""
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
    parts += run_lines(data.runs[-1], budget)
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


def to_text(data: ReportData, width: int = 100, color: bool = False) -> str:
    """The terminal report as text (ANSI colours when ``color``)."""
    console = Console(file=io.StringIO(), width=width, force_terminal=color,
                      color_system="standard" if color else None, record=True,
                      markup=False, emoji=False, highlight=False)
    console.print(renderable(data), crop=True, overflow="ellipsis", soft_wrap=False,
                  no_wrap=True)
    return console.export_text(styles=color)
