"""The report as one self-contained HTML file: inline CSS (``assets/report.css``) and inline
SVG plots; no scripts, fonts or images from anywhere else, so it works offline."""

from __future__ import annotations

from html import escape
from importlib import resources
from typing import TYPE_CHECKING

from traceatlas.advisor.causes import cause_words
from traceatlas.advisor.view_link import view_url
from traceatlas.names import display_name
from traceatlas.report import baseline, compare, critical, flame, memory, svg
from traceatlas.report import roofline as roofline_report
from traceatlas.report.memory import cost_text
from traceatlas.report.terminal import FAIR, GOOD, metric_label, ordered, ranks_text

if TYPE_CHECKING:
    from traceatlas.report.data import EfficiencyNode, ReportData, RunReport

BAR_SERIES = (("useful", "#54a24b"), ("communication", "#4c78a8"),
              ("transfers", "#f58518"), ("idle", "#d3d8de"))
"""Per-rank bar segments and colours: communication (NCCL kernels, MPI) and memory
transfers (memcpy/memset, host-device copies included) apart."""
OPEN_FINDINGS = 5
"""Findings shown open; the rest sit in a collapsed ``<details>``."""
MAX_STEP_LINES = 8
"""Runs with more ranks show the mean step time and the min-max band instead of a line
per rank."""


def css() -> str:
    """The report's stylesheet."""
    return (resources.files("traceatlas.report") / "assets" / "report.css").read_text("utf-8")


def render(data: ReportData) -> str:
    """The whole HTML document."""
    names = ", ".join(r.name for r in data.runs)
    body = [f"<header><h1>traceatlas report</h1><p>{escape(names)}</p></header><main>"]
    if data.baseline is not None:
        body.append(baseline.html_section(data.baseline))
    if len(data.runs) > 1:
        body.append(_scalability(data))
    for i, run in enumerate(data.runs):
        body.append(_run(run, i, f"run {i + 1}: " if len(data.runs) > 1 else ""))
    body.append(f"</main><footer>traceatlas {escape(data.version)}: efficiency model after "
                f"POP (>= {GOOD:.2f} good, < {FAIR:.2f} poor); times in the unit shown on "
                f"each axis.</footer>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>traceatlas report: {escape(names)}</title><style>{css()}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")


def _card(cls: str, title: str, inner: str, hint: str = "") -> str:
    hint_html = f'<p class="hint">{escape(hint)}</p>' if hint else ""
    return f'<section class="card {cls}"><h3>{escape(title)}</h3>{hint_html}{inner}</section>'


def _na(run: RunReport, section: str) -> str:
    reason = run.missing.get(section, "no data")
    return f'<p class="na">not available: {escape(reason)}</p>'


def _run(run: RunReport, i: int, prefix: str = "") -> str:
    meta = (f"{escape(run.source_format)} &middot; {len(run.ranks)} rank(s) &middot; span "
            f"{escape(svg.fmt_ns(run.span_ns))} &middot; store <code>{escape(run.store)}</code>")
    top = ('<div class="grid">'
           + _card("efficiency", "Efficiency", _tree(run), "POP model; each value is the "
                   "product of the values under it")
           + f"<div>{_bars(run)}{_timeline(run)}</div></div>")
    findings = _card("findings-card", "Findings", _findings(run),
                     "ranked by the time they cost; memory findings (bytes) after them")
    return (f'<section class="run" id="run-{i}"><h2>{escape(prefix + run.name)}</h2>'
            f'<p class="meta">{meta}</p>{top}{findings}{_kernels(run)}{_roofline(run)}'
            f"{_steps(run)}{_critical(run)}{_memory(run)}{_flame(run)}</section>")


def _cls(value: float | None) -> str:
    if value is None:
        return ""
    return "good" if value >= GOOD else "fair" if value >= FAIR else "poor"


def _tree(run: RunReport) -> str:
    if not run.efficiency:
        return _na(run, "efficiency")
    out = ['<ul class="efftree">']
    for side in dict.fromkeys(n.side for n in run.efficiency):
        nodes = ordered(n for n in run.efficiency if n.side == side)
        out.append(f'<li class="side">{escape(side)} side</li>')
        out.append(_subtree(nodes, None, {n.metric for n in nodes}))
    out.append("</ul>")
    return "".join(out)


def _subtree(nodes: list[EfficiencyNode], parent: str | None, names: set[str]) -> str:
    kids = [n for n in nodes if (n.parent if n.parent in names else None) == parent]
    if not kids:
        return ""
    items = []
    for n in kids:
        value = "n/a" if n.value is None else f"{n.value:.2f}"
        width = 0 if n.value is None else max(0.0, min(1.0, n.value)) * 100
        items.append(
            f'<li><div class="node" title="{escape(_tip(n))}"><span class="name">'
            f"{escape(metric_label(n))}</span><span class=\"meter\"><span class=\"{_cls(n.value)}"
            f'" style="width:{width:.1f}%"></span></span><span class="val {_cls(n.value)}">'
            f"{value}</span></div>{_subtree(nodes, n.metric, names)}</li>")
    return f"<ul>{''.join(items)}</ul>"


def _tip(node: EfficiencyNode) -> str:
    """Hover text of a tree node: the metric's name and what it measures."""
    return f"{node.metric}: {node.description}" if node.description else node.metric


def _findings(run: RunReport) -> str:
    if not run.findings:
        return _na(run, "findings") if "findings" in run.missing else \
            '<p class="na">no findings: nothing costs enough to report</p>'
    items = []
    for n, f in enumerate(run.findings):
        if n == OPEN_FINDINGS:
            items.append(f"</ol><details><summary>{len(run.findings) - n} more findings"
                         f'</summary><ol class="findings" start="{n + 1}">')
        command = f" <code>{escape(f.command)}</code>" if f.command else ""
        url = view_url(f.view) if f.view else ""
        view = (f'<div class="view">See it on the map: <code>{escape(f.view)}</code>'
                + (f' <a href="{escape(url)}">open in the viewer</a> (works while '
                   "<code>traceatlas view</code> runs)" if url else "") + "</div>"
                if f.view else "")
        items.append(
            f'<li class="{escape(f.severity)}"><span class="badge">{escape(f.severity)}</span>'
            + (f'<span class="cause">{escape(cause_words(f.cause))}</span>' if f.cause else "")
            + f'<span class="stmt">{escape(f.statement)}</span><span class="cost">'
            f'{escape(cost_text(f))}{escape(ranks_text(f.ranks))}</span>'
            f'<div class="ev">{escape(f.evidence)}</div>'
            f'<div class="next">Next: {escape(f.next_step)}{command}</div>{view}</li>')
    tail = "</details>" if len(run.findings) > OPEN_FINDINGS else ""
    return f'<ol class="findings">{"".join(items)}</ol>{tail}'


def _bars(run: RunReport) -> str:
    if not run.rank_bars:
        return _card("rank-bars", "Time per rank", _na(run, "rank_bars"))
    rows = [(b.label, (b.useful_ns, b.comm_ns, b.transfer_ns, b.idle_ns))
            for b in run.rank_bars]
    plot = svg.stacked_bars(rows, BAR_SERIES,
                            "useful, communication, transfers and idle time per rank")
    return _card("rank-bars", "Time per rank", plot, run.rank_bars_source)


def _timeline(run: RunReport) -> str:
    t = run.timeline
    if t is None:
        return _card("timeline", "Timeline overview", _na(run, "timeline"))
    plot = svg.heatmap(t.rows, t.values, t.bin_ns, "busy fraction per rank over time")
    return _card("timeline", "Timeline overview", plot,
                 f"colour = fraction of each column's time that is {t.kind}")


def _kernels(run: RunReport) -> str:
    if not run.kernels:
        return _card("kernels", "Kernels", _na(run, "kernels"))
    figs = "".join(
        f'<figure><figcaption title="{escape(h.name)}">{escape(_short(h.name))}</figcaption>'
        f"{svg.log_histogram(h.bins, 'duration histogram of ' + h.name)}</figure>"
        for h in run.histograms)
    head = ("<tr><th class=\"name\">kernel</th><th>count</th><th>total</th><th>mean</th>"
            "<th>p50</th><th>p95</th><th>% of device busy</th><th>bimodal</th></tr>")
    rows = "".join(
        f'<tr><td class="name" title="{escape(k.name)}">{escape(_short(k.name))}</td>'
        f"<td>{k.count:,}</td><td>{svg.fmt_ns(k.total_ns)}</td><td>{svg.fmt_ns(k.mean_ns)}</td>"
        f"<td>{svg.fmt_ns(k.p50_ns)}</td><td>{svg.fmt_ns(k.p95_ns)}</td>"
        f"<td>{k.share_pct:.1f}</td><td>{'yes' if k.bimodal else ''}</td></tr>"
        for k in run.kernels)
    inner = (f'<div class="hists">{figs}</div><h3 style="margin-top:14px">Top kernels</h3>'
             f'<table class="data">{head}{rows}</table>')
    return _card("kernels", "Kernel durations", inner,
                 "log-binned durations of the kernels with the most total time, all ranks")


def _short(name: str, limit: int = 90) -> str:
    """Demangled, templates shortened, cut to ``limit`` (the raw name is the title)."""
    return display_name(name, width=limit)


def _steps(run: RunReport) -> str:
    if not run.steps:
        return _card("steps", "Step durations", _na(run, "steps"))
    by_rank: dict[int, list[tuple[int, int]]] = {}
    for s in run.steps:
        by_rank.setdefault(s.rank, []).append((s.step, s.dur_ns))
    if len(by_rank) <= MAX_STEP_LINES:
        series = [(f"rank {r}", [float(x) for x, _ in pts], [float(y) for _, y in pts])
                  for r, pts in sorted(by_rank.items())]
        plot = svg.line_chart(series, "step duration per rank", "step")
        return _card("steps", "Step durations", plot, "duration of each iteration per rank")
    per_step: dict[int, list[int]] = {}
    for s in run.steps:
        per_step.setdefault(s.step, []).append(s.dur_ns)
    xs = sorted(per_step)
    mean = [sum(per_step[x]) / len(per_step[x]) for x in xs]
    lo = [float(min(per_step[x])) for x in xs]
    hi = [float(max(per_step[x])) for x in xs]
    plot = svg.line_chart([("mean over ranks", [float(x) for x in xs], mean)],
                          "step duration", "step", band=([float(x) for x in xs], lo, hi))
    return _card("steps", "Step durations", plot,
                 "mean step duration over ranks; shaded: fastest to slowest rank")


def _memory(run: RunReport) -> str:
    inner = memory.html(run.memory, run.missing.get("memory", "no data"), run.start_ns,
                        run.span_ns, _short)
    return _card("memory", "Memory", inner, "allocated and reserved bytes per device over "
                 "the run; the red dot is the peak of allocated memory")


def _critical(run: RunReport) -> str:
    inner = critical.html(run.critical, run.missing.get("critical", "no data"), _short)
    return _card("critical", "Critical path", inner, "what bounds the longest dependency "
                 "chain of the median step (analyze critical_path --step N)")


def _roofline(run: RunReport) -> str:
    inner = roofline_report.html(run.roofline, run.missing.get("roofline", "no data"))
    return _card("roofline", "Roofline", inner, "op groups (op, shapes, dtype) by arithmetic "
                 "intensity and achieved TFLOP/s under the device's memory and compute "
                 "roofs; hover a point for its numbers (analyze roofline)")


def _flame(run: RunReport) -> str:
    inner = flame.html(run.flame, run.missing.get("flame", "no data"))
    return _card("flame-card", "Flame graph (calling-context tree)", inner,
                 "icicle: the root on top, each box's width is its inclusive time, "
                 "children under their caller; hover a box for its full name and time")


def _scalability(data: ReportData) -> str:
    title = ("Comparison of runs" if compare.filled(data).runs_mode == "comparison"
             else "Scalability across runs")
    reason = data.missing.get("scalability")
    na = f'<p class="na">scalability not available: {escape(reason)}</p>' if reason else ""
    return _card("scalability", title, na + compare.html(data))
