"""The trend as one self-contained HTML page (``traceatlas trend ... -o trend.html``): the
report's stylesheet, the table, and one small inline-SVG line chart per figure with its
change points ringed in red. No script, font or image from anywhere else. Every name is
escaped (names are data)."""

from __future__ import annotations

from html import escape

from traceatlas.compare import trend_format as tf
from traceatlas.compare.trend import Figure, TrendResult
from traceatlas.names import display_name
from traceatlas.report import svg
from traceatlas.report.html import css

NAME_WIDTH = 70
"""Characters of a figure's name shown (the full name is the hover title)."""


def render(result: TrendResult) -> str:
    """The whole HTML document."""
    title = f"traceatlas trend: {len(result.runs)} runs"
    body = [f"<header><h1>traceatlas trend</h1><p>{escape(title)}, ordered "
            f"{escape(result.order)}</p></header><main>",
            _card("trend-changes", "Change points", _changes(result), tf.legend(result)),
            _card("trend-table", "Key figures over runs", _table(result),
                  "each cell: the run's value and its change vs the previous run"),
            _card("trend-charts", "Charts", _charts(result),
                  "times: median per iteration and rank, shaded: 25th to 75th percentile; "
                  "red ring: change point"),
            _card("trend-runs", "Runs", _runs(result))]
    if result.notes:
        body.append(_card("trend-notes", "Notes", "<ul>" + "".join(
            f"<li>{escape(n)}</li>" for n in result.notes) + "</ul>"))
    body.append("</main><footer>traceatlas trend</footer>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(title)}</title><style>{css()}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")


def _card(cls: str, title: str, inner: str, hint: str = "") -> str:
    hint_html = f'<p class="hint">{escape(hint)}</p>' if hint else ""
    return f'<section class="card {cls}"><h3>{escape(title)}</h3>{hint_html}{inner}</section>'


def _name(figure: Figure) -> str:
    return (f'<span title="{escape(tf.row_name(figure))}">'
            f"{escape(tf.short_name(figure, NAME_WIDTH))}</span>")


def _changes(result: TrendResult) -> str:
    found = result.change_points()
    if not found:
        return f'<p class="na">no change point over {len(result.runs)} runs</p>'
    items = "".join(
        f'<li><span class="run-no">run {i + 1}</span> {escape(result.runs[i].label)}: '
        f"{_name(f)} <b>{escape(tf.change_text(f, p))}</b> (adjusted p = "
        f"{p.p_adjusted:.2g})</li>" for i, f, p in found)
    return f'<ul class="changes">{items}</ul>'


def _table(result: TrendResult) -> str:
    head = "<tr><th class=\"name\">figure</th>" + "".join(
        f'<th title="{escape(r.path)}">{i + 1}: {escape(display_name(r.label, width=24))}</th>'
        for i, r in enumerate(result.runs)) + "</tr>"
    rows = []
    for f in result.figures:
        cells = "".join(
            f'<td class="{"change-point" if p.change_point else ""}">'
            f"{escape(tf.value_text(f, p))}<span class=\"delta\">"
            f"{escape(tf.change_text(f, p))}</span></td>" for p in f.points)
        rows.append(f'<tr><td class="name">{_name(f)}</td>{cells}</tr>')
        if f.kind == "step":
            rows.append('<tr><td class="name">step time IQR</td>' + "".join(
                f"<td>{escape(c)}</td>" for c in tf.spread_cells(f)) + "</tr>")
    return f'<table class="data trend">{head}{"".join(rows)}</table>'


def _charts(result: TrendResult) -> str:
    figs = []
    for f in result.figures:
        values = [p.value for p in f.points]
        marks = [p.change_point for p in f.points]
        notes = [tf.change_text(f, p) for p in f.points]
        band = None if f.unit != "ns" else ([p.low for p in f.points],
                                            [p.high for p in f.points])
        plot = svg.run_chart(values, tf.row_name(f), fraction=f.unit == "fraction",
                             marks=marks, band=band, notes=notes)
        cls = ' class="flagged"' if any(marks) else ""
        figs.append(f"<figure{cls}><figcaption>{_name(f)}</figcaption>{plot}</figure>")
    return f'<div class="hists">{"".join(figs)}</div>'


def _runs(result: TrendResult) -> str:
    head = ('<tr><th>run</th><th class="name">summary</th><th>ranks</th>'
            "<th>iterations</th><th>from</th></tr>")
    rows = "".join(
        f'<tr><td>{i + 1}</td><td class="name" title="{escape(r.path)}">{escape(r.path)}</td>'
        f"<td>{r.ranks}</td><td>{r.iterations}</td><td>{escape(r.iteration_source)}</td></tr>"
        for i, r in enumerate(result.runs))
    return f'<table class="data">{head}{rows}</table>'
