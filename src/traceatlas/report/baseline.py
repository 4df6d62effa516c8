"""The report's comparison with a baseline (``traceatlas report NEW --baseline BASE``).

``compare`` runs ``traceatlas.compare.diff`` on the baseline's summary and the new run's
summary and keeps its JSON document as is (``DiffResult.to_dict``): the report computes no
statistic of its own. ``html_section`` and ``terminal_lines`` render it: significant
regressions first (slower), then significant improvements (faster), then added and
removed entities; the efficiency model side by side with the factor that moved most
highlighted. Names are data: escaped in HTML, ``literal`` in the terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

from rich.text import Text

from traceatlas.literal import literal
from traceatlas.names import display_name
from traceatlas.report.svg import fmt_ns

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace

TERMINAL_TOP = 5
"""Regressions the terminal report lists."""
HTML_TOP = 25
"""Rows per group (slower, faster, added, removed) in the HTML section."""


@dataclass
class BaselineDiff:
    """``base``: the baseline as the user named it; ``headline``: the diff's headline lines
    (step change, largest significant change, factor that moved most, verdict);
    ``moved``: the path of the efficiency factor that moved most (None if none);
    ``diff``: the ``traceatlas diff --format json`` document."""

    base: str
    headline: list[str]
    moved: str | None
    diff: dict[str, Any]


def compare(base: str, base_summary: dict[str, Any], new: Trace) -> BaselineDiff:
    """Diff ``base_summary`` (a ``read_summary``/``summarize`` result) against the
    summary of the opened trace ``new``."""
    from traceatlas.compare import diff_format
    from traceatlas.compare.diff import diff_summaries
    from traceatlas.compare.summary import summarize

    result = diff_summaries(base_summary, summarize(new))
    moved = result.moved_most()
    return BaselineDiff(base, diff_format.headline(result),
                        None if moved is None else moved.path, result.to_dict())


def groups(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The document's entries in report order: ``slower`` and ``faster`` (significant
    changes, in the diff's order), ``added``, ``removed``, ``other`` (not significant)."""
    changes = doc.get("changes", [])
    return {
        "slower": [c for c in changes if c["significant"] and c["abs_change_ns"] > 0],
        "faster": [c for c in changes if c["significant"] and c["abs_change_ns"] <= 0],
        "added": list(doc.get("added", [])),
        "removed": list(doc.get("removed", [])),
        "other": [c for c in changes if not c["significant"]],
    }


def _rel(c: dict[str, Any]) -> str:
    rel = c.get("rel_change")
    if rel is None:
        return "from 0" if c["abs_change_ns"] else "0"
    return f"{rel * 100:+.1f}%"


def _p(p: float | None) -> str:
    if p is None:
        return "untested"
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def _signed(ns: float) -> str:
    return ("+" if ns > 0 else "") + fmt_ns(ns)


# --- HTML --------------------------------------------------------------------------------


def _name_cell(key: str) -> str:
    return f'<td class="name" title="{escape(key)}">{escape(display_name(key, width=90))}</td>'


def _change_rows(items: list[dict[str, Any]], cls: str, tag: str) -> str:
    return "".join(
        f'<tr class="{cls}"><td class="tag">{escape(tag)}</td><td class="tag">'
        f"{escape(c['kind'])}</td>{_name_cell(c['key'])}"
        f"<td>{escape(fmt_ns(c['base_median_ns']))}</td>"
        f"<td>{escape(fmt_ns(c['new_median_ns']))}</td>"
        f"<td>{escape(_signed(c['abs_change_ns']))}</td><td>{escape(_rel(c))}</td>"
        f"<td>{escape(_p(c['p_adjusted']))}</td></tr>" for c in items[:HTML_TOP])


def _presence_rows(items: list[dict[str, Any]], cls: str, tag: str, side: str) -> str:
    return "".join(
        f'<tr class="{cls}"><td class="tag">{escape(tag)}</td><td class="tag">'
        f"{escape(p['kind'])}</td>{_name_cell(p['key'])}"
        + (f"<td></td><td>{escape(fmt_ns(p['total_ns']))} total</td>" if side == "new"
           else f"<td>{escape(fmt_ns(p['total_ns']))} total</td><td></td>")
        + "<td></td><td></td><td></td></tr>" for p in items[:HTML_TOP])


def _more(n: int) -> str:
    return (f'<tr><td colspan="8" class="tag">{n} more in <code>traceatlas report '
            "--format json</code></td></tr>") if n > 0 else ""


def html_section(b: BaselineDiff) -> str:
    """The "Compared with baseline" card."""
    g = groups(b.diff)
    head = ('<tr><th class="tag"></th><th class="tag">kind</th><th class="name">name</th>'
            "<th>baseline median</th><th>new median</th><th>change</th><th>rel</th>"
            "<th>adjusted p</th></tr>")
    rows = (_change_rows(g["slower"], "slower", "slower") + _more(len(g["slower"]) - HTML_TOP)
            + _change_rows(g["faster"], "faster", "faster") + _more(len(g["faster"]) - HTML_TOP)
            + _presence_rows(g["added"], "added", "added", "new")
            + _more(len(g["added"]) - HTML_TOP)
            + _presence_rows(g["removed"], "removed", "removed", "base")
            + _more(len(g["removed"]) - HTML_TOP))
    if not rows:
        rows = ('<tr><td colspan="8" class="tag na">no significant change, nothing added '
                "or removed</td></tr>")
    lines = [line for line in b.headline if not line.startswith("verdict")]
    verdict = next((line for line in b.headline if line.startswith("verdict")), "")
    parts = [f'<p class="verdict">{escape(verdict)}</p>' if verdict else "",
             '<ul class="headline">' + "".join(f"<li>{escape(x)}</li>" for x in lines)
             + "</ul>",
             f'<table class="data changes">{head}{rows}</table>']
    other = g["other"]
    if other:
        parts.append(f"<details><summary>{len(other)} change(s) not significant</summary>"
                     f'<table class="data changes">{head}'
                     f"{_change_rows(other, '', '')}{_more(len(other) - HTML_TOP)}"
                     "</table></details>")
    parts.append(_efficiency(b))
    notes = b.diff.get("notes", [])
    if notes:
        parts.append("<details><summary>notes</summary><ul>"
                     + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul></details>")
    title = "Compared with baseline"
    hint = (f"baseline: {b.base}; Mann-Whitney over iterations and ranks, "
            f"{b.diff.get('correction', 'holm')}-corrected, alpha {b.diff.get('alpha', 0.05):g}")
    return (f'<section class="card baseline"><h3>{escape(title)}</h3>'
            f'<p class="hint">{escape(hint)}</p>{"".join(parts)}</section>')


def _efficiency(b: BaselineDiff) -> str:
    rows = b.diff.get("efficiency", [])
    if not rows:
        return '<p class="na">efficiency model: not available on either side</p>'

    def num(v: float | None, sign: bool = False) -> str:
        return "" if v is None else f"{v:+.3f}" if sign else f"{v:.3f}"

    body = "".join(
        f'<tr class="{"moved" if e["path"] == b.moved else ""}">'
        f'<td class="name">{escape(e["side"])} {"&nbsp;&nbsp;" * int(e["level"])}'
        f'{escape(e["label"])}</td><td>{num(e["base"])}</td><td>{num(e["new"])}</td>'
        f'<td>{num(e["delta"], True)}</td></tr>' for e in rows)
    return ('<h3 style="margin-top:14px">Efficiency, baseline and new</h3>'
            '<table class="data efficiency-diff"><tr><th class="name">metric</th>'
            f"<th>baseline</th><th>new</th><th>delta</th></tr>{body}</table>")


# --- terminal ----------------------------------------------------------------------------


def terminal_lines(b: BaselineDiff, top: int = TERMINAL_TOP) -> list[Text]:
    """A short version: the headline and the top ``top`` regressions (significant,
    slower), each one line."""
    lines = [Text(literal(f"Compared with baseline {b.base}"), style="bold underline")]
    lines += [Text(literal(f"  {line}"), style="bold" if line.startswith("verdict") else "")
              for line in b.headline]
    g = groups(b.diff)
    for c in g["slower"][:top]:
        line = Text("  slower ", style="red")
        line.append(literal(f"{c['kind']} {display_name(c['key'], width=70)}: {_rel(c)} "
                            f"({fmt_ns(c['base_median_ns'])} -> {fmt_ns(c['new_median_ns'])}, "
                            f"adjusted {_p(c['p_adjusted'])})"))
        lines.append(line)
    rest = len(g["slower"]) - top
    counts = [f"{rest} more slower" if rest > 0 else "",
              f"{len(g['faster'])} faster" if g["faster"] else "",
              f"{len(g['added'])} added" if g["added"] else "",
              f"{len(g['removed'])} removed" if g["removed"] else ""]
    shown = ", ".join(c for c in counts if c)
    if shown:
        lines.append(Text(literal(f"  {shown} (HTML report: -o report.html)"), style="dim"))
    return lines
