"""Renderings of a ``DiffResult``: JSON, GitHub-flavoured Markdown, JUnit XML, and the plain
text lines (change, verdict, efficiency factor) the terminal table shares. Pure functions
returning strings; the CLI prints or writes them."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

from traceatlas.compare.diff import DiffResult, EntityChange

TOP = 20
"""Changes a Markdown or terminal table shows (JSON has them all)."""


def ns_text(value: float | None) -> str:
    """``1234567`` -> ``1.235 ms`` (signed values keep their sign)."""
    if value is None or not math.isfinite(value):
        return ""
    size = abs(value)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if size >= scale:
            return f"{value / scale:,.3f} {unit}"
    return f"{value:,.0f} ns"


def rel_text(change: EntityChange) -> str:
    """``+30.0%``; ``from 0`` when the BASE median is 0."""
    if change.rel_change is None:
        return "from 0" if change.abs_change_ns else "0"
    return f"{change.rel_change * 100:+.1f}%"


def p_text(p: float | None) -> str:
    """``p < 0.001``, ``p = 0.03``; ``untested`` for None."""
    if p is None:
        return "untested"
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def change_text(change: EntityChange) -> str:
    """One line: ``kernel gemm: +30.0% (+1.500 ms per sample, adjusted p < 0.001)``."""
    shift = ns_text(change.abs_change_ns)
    if change.abs_change_ns > 0:
        shift = "+" + shift
    return (f"{change.kind} {change.key}: {rel_text(change)} ({shift} per sample, adjusted "
            f"{p_text(change.p_adjusted)})")


def headline(result: DiffResult) -> list[str]:
    """The step change, the largest significant change, the efficiency factor that moved
    most, and the verdict: the lines a terminal ends with and Markdown starts with."""
    lines = []
    step = next((c for c in result.changes if c.kind == "step"), None)
    if step is not None:
        lines.append("step time " + change_text(step).split(": ", 1)[1]
                     + ("" if step.significant else " (not significant)"))
    top = next((c for c in result.changes if c.significant and c.kind != "step"), None)
    if top is not None:
        launcher = result.launcher_text(top)
        lines.append("largest significant change: " + change_text(top)
                     + (f", {launcher}" if launcher else ""))
    elif not any(c.significant for c in result.changes):
        lines.append(f"no significant change (alpha {result.alpha:g}, {result.correction} "
                     "correction)")
    moved = result.moved_most()
    if moved is not None and moved.base is not None and moved.new is not None:
        lines.append(f"efficiency factor that moved most: {moved.label} ({moved.metric}) "
                     f"{moved.base:.3f} -> {moved.new:.3f} ({moved.delta:+.3f})")
    lines.append(verdict_line(result))
    return lines


def verdict_line(result: DiffResult) -> str:
    """``verdict: pass`` / ``verdict: FAIL (n rule(s) violated): <first>``."""
    if not result.violations:
        checked = f" ({len(result.rules)} rule(s) checked)" if result.rules else \
            " (no --fail-on rule)"
        return "verdict: pass" + checked
    first = result.violations[0].describe()
    return f"verdict: FAIL ({len(result.violations)} violation(s)): {first}"


def to_json(result: DiffResult) -> str:
    """The ``--format json`` text (one object, one line, newline-terminated)."""
    return json.dumps(result.to_dict(), allow_nan=False, default=_no_nan) + "\n"


def _no_nan(value: object) -> object:
    raise TypeError(f"not JSON: {value!r}")


def _md(text: str) -> str:
    """A Markdown table cell: pipes escaped, backticks kept out of code spans."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def ordered(result: DiffResult) -> list[EntityChange]:
    """Significant regressions first, then significant improvements, then the rest."""
    sig = [c for c in result.changes if c.significant]
    return ([c for c in sig if c.abs_change_ns > 0] + [c for c in sig if c.abs_change_ns <= 0]
            + [c for c in result.changes if not c.significant])


def to_markdown(result: DiffResult, *, top: int = TOP) -> str:
    """A GitHub-flavoured report: headline lines, the top changes, added/removed,
    efficiency side by side, notes."""
    out = [f"**{_md(line)}**  " if line.startswith("verdict") else f"{_md(line)}  "
           for line in headline(result)]
    out += ["", "| kind | name | base median | new median | change | rel | adjusted p | "
                "significant |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for c in ordered(result)[:top]:
        out.append(f"| {c.kind} | {_md(c.key)} | {ns_text(c.base_median_ns)} | "
                   f"{ns_text(c.new_median_ns)} | {ns_text(c.abs_change_ns)} | "
                   f"{rel_text(c)} | {p_text(c.p_adjusted)} | "
                   f"{'yes' if c.significant else 'no'} |")
    if len(result.changes) > top:
        out.append(f"\n{len(result.changes) - top} more change(s) in `--format json`.")
    for title, items in (("Added (NEW only)", result.added), ("Removed (BASE only)",
                                                              result.removed)):
        if items:
            out += ["", f"**{title}**", "", "| kind | name | total |", "|---|---|---:|"]
            out += [f"| {p.kind} | {_md(p.key)} | {ns_text(p.total_ns)} |" for p in items[:top]]
    if result.efficiency:
        out += ["", "**Efficiency**", "", "| metric | base | new | delta |", "|---|---:|---:|---:|"]
        out += [f"| {_md(e.side + ' ' + e.label)} | {_num(e.base)} | {_num(e.new)} | "
                f"{_num(e.delta, sign=True)} |" for e in result.efficiency]
    if result.notes:
        out += ["", "Notes:", *(f"- {_md(n)}" for n in result.notes)]
    return "\n".join(out) + "\n"


def _num(value: float | None, *, sign: bool = False) -> str:
    if value is None:
        return ""
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def to_junit(result: DiffResult) -> str:
    """JUnit XML: one testcase per ``--fail-on`` rule (a ``failure`` per violated rule,
    ``skipped`` when the rule names nothing in either run); one passing testcase when no
    rule was given."""
    suite = ET.Element("testsuite", name="traceatlas diff")
    cases = 0
    failures = skipped = 0
    for rule in result.rules:
        case = ET.SubElement(suite, "testcase", classname="traceatlas.diff", name=rule.text)
        cases += 1
        hits = [v for v in result.violations if v.rule.text == rule.text]
        if hits:
            failures += 1
            failure = ET.SubElement(case, "failure", message=hits[0].describe(),
                                    type="regression")
            failure.text = "\n".join(v.describe() for v in hits)
        elif rule in result.unmatched:
            skipped += 1
            ET.SubElement(case, "skipped", message="the rule names nothing in either run")
    if not result.rules:
        ET.SubElement(suite, "testcase", classname="traceatlas.diff", name="no --fail-on rule")
        cases += 1
    out = ET.SubElement(suite, "system-out")
    out.text = "\n".join(headline(result))
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    suite.set("errors", "0")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
