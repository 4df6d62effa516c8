"""The report's "Critical path" card: what bounds the typical step's critical path.

The region is the advisor's (``advisor.critical_path.step_path``: the median step, else
the whole trace; one ``critical_path`` run shared with the advisor rule; memory: every
rank's intervals of that one step, the path crossing ranks). Shown: the
breakdown by bound as one stacked bar, and the top on-path events (name, bound, on-path
ns, share of the path). Terminal: one line. Absent (``missing``) when the analysis does
not apply (no intervals, no steps and a trace too big for a whole-trace path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from traceatlas.report import svg
from traceatlas.report.results import Unavailable

if TYPE_CHECKING:
    from traceatlas.report.results import Results

TOP_EVENTS = 10
BOUND_COLOURS = {
    "cpu": "#4c78a8", "gpu_compute": "#54a24b", "gpu_comm": "#e45756", "launch": "#f58518",
    "kernel_gap": "#b279a2", "sync": "#ff9da6", "data_load": "#9d755d", "wait": "#bab0ac",
    "comm": "#72b7b2",
}
"""Bound -> colour of its segment in the bar (unknown bounds: grey)."""


@dataclass
class CriticalEvent:
    """One event on the path: its on-path ns over the region and the share of the path."""

    name: str
    bound: str
    rank: int
    on_path_ns: int
    share: float


@dataclass
class CriticalSection:
    """The critical path of ``step`` (None: the whole trace): length, bounds, top events."""

    step: int | None
    length_ns: int
    bounds: list[tuple[str, int, float]] = field(default_factory=list)
    """(bound, ns, share) with ns > 0, largest first."""
    events: list[CriticalEvent] = field(default_factory=list)


def build(results: Results) -> CriticalSection:
    """The section from the shared advisor context; ``Unavailable`` when it cannot run."""
    import polars as pl

    from traceatlas.advisor.critical_path import step_path

    found = step_path(results.context)
    if found is None:
        said = [str(n) for n in results.context.notes if "critical_path" in str(n)]
        reason = said[-1] if said else "no critical path in the region (no intervals)"
        for prefix in ("skipped: ", "critical_path: ", "critical_path: "):
            reason = reason.removeprefix(prefix)
        raise Unavailable(reason)
    step, _, result = found
    path = result.table
    length = int(path["on_path_ns"].sum())
    bounds = [(str(b), int(n), float(s)) for b, n, s in
              result.extra["by_bound"].filter(pl.col("ns") > 0).iter_rows()]
    top = (path.filter(pl.col("event_start_ns").is_not_null())
           .group_by("name", "bound", "rank").agg(pl.col("on_path_ns").sum())
           .sort(["on_path_ns", "name", "bound", "rank"],
                 descending=[True, False, False, False]).head(TOP_EVENTS))
    events = [CriticalEvent(str(n), str(b), int(r), int(ns), ns / length if length else 0.0)
              for n, b, r, ns in top.select("name", "bound", "rank", "on_path_ns")
              .iter_rows()]
    return CriticalSection(step, length, bounds, events)


def region_words(section: CriticalSection) -> str:
    """``step 4`` or ``the whole trace``."""
    return f"step {section.step}" if section.step is not None else "the whole trace"


def summary(section: CriticalSection) -> str:
    """One line: ``critical path of step 1 (28 us): 75% cpu, 21% launch, 4% gpu_compute``."""
    shares = ", ".join(f"{s:.0%} {b}" for b, _, s in section.bounds[:3] if s >= 0.005)
    return (f"critical path of {region_words(section)} ({svg.fmt_ns(section.length_ns)}): "
            f"{shares}")


def bar_svg(section: CriticalSection, width: int = 760) -> str:
    """The breakdown by bound as one horizontal stacked bar (ns)."""
    series = [(b, BOUND_COLOURS.get(b, "#999999")) for b, _, _ in section.bounds]
    return svg.stacked_bars([(region_words(section), [float(n) for _, n, _ in
                                                      section.bounds])],
                            series, "critical path by bound", width)


def html(section: CriticalSection | None, reason: str, short: Any) -> str:
    """The inner HTML of the card (``short``: the report's name shortener)."""
    if section is None:
        return f'<p class="na">not available: {escape(reason)}</p>'
    rows = "".join(
        f'<tr><td title="{escape(e.name)}">{escape(short(e.name))}</td>'
        f"<td>{escape(e.bound)}</td><td>{e.rank}</td>"
        f'<td class="num">{escape(svg.fmt_ns(e.on_path_ns))}</td>'
        f'<td class="num">{e.share:.1%}</td></tr>' for e in section.events)
    table = ("<table><thead><tr><th>event on the path</th><th>bound</th><th>rank</th>"
             "<th>on-path time</th><th>share</th></tr></thead><tbody>"
             f"{rows}</tbody></table>") if rows else ""
    return f"<p>{escape(summary(section))}</p>{bar_svg(section)}{table}"
