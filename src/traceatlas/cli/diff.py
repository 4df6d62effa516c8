"""``traceatlas diff BASE NEW``: what got slower or faster between two runs, whether it is
beyond the noise, and the ``--fail-on`` gate for CI (``traceatlas.compare.diff``).

Exit codes: 0 no rule violated (or none given), 1 a rule violated by a significant change,
2 bad input. Registered on the ``app`` of ``traceatlas.cli.main`` when imported.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

import traceatlas
from traceatlas.cli import output
from traceatlas.cli.options import EngineOpt, _guard, app, writing
from traceatlas.cli.outputs import refuse_inputs
from traceatlas.compare.summary import read_summary, summarize
from traceatlas.errors import InputError
from traceatlas.literal import literal
from traceatlas.tempfiles import replaceable_file, write_text_atomic

if TYPE_CHECKING:
    from traceatlas.compare.diff import DiffResult

DIFF_FORMATS = ("table", "json", "markdown", "junit")
EXIT_VIOLATION = 1


def _side(path: Path, engine: str) -> dict[str, Any] | traceatlas.Trace:
    """A baseline summary file as is; a trace or store opened (ingested if need be)."""
    from traceatlas.compare.diff import is_summary_file

    if is_summary_file(path):
        return read_summary(path)
    if not path.exists():
        raise InputError(path, "no such file or directory")
    with output.progress(f"ingest {path.name}") as bar:
        return traceatlas.open(str(path), engine=engine, progress=bar)


def _sides(base: Path, new: Path, engine: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both sides as summaries: files read, traces opened one after the other (ingest
    has its own workers and progress bar), then summarised at the same time in two
    threads (Polars and DuckDB release the GIL: on a free machine the two summaries
    overlap)."""
    from concurrent.futures import ThreadPoolExecutor

    opened = [_side(base, engine), _side(new, engine)]
    traces = [x for x in opened if not isinstance(x, dict)]
    if len(traces) == 2:
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = list(pool.map(summarize, traces))
    else:
        done = [summarize(t) for t in traces]
    it = iter(done)
    b, n = (x if isinstance(x, dict) else next(it) for x in opened)
    return b, n


@app.command("diff")
@_guard
def diff_command(
    base: Annotated[Path, typer.Argument(
        help="The reference run: a trace, a store, or a baseline from `traceatlas summary`.")],
    new: Annotated[Path, typer.Argument(help="The run to check, same kinds of input.")],
    fail_on: Annotated[list[str] | None, typer.Option(
        "--fail-on", help="Exit 1 when a significant change passes this threshold: "
        "KIND[:NAME]:+N% (step, annotation, op, kernel, op_device, annotation_device, "
        "category, rank) or "
        "efficiency.METRIC:-X. Repeatable.")] = None,
    alpha: Annotated[float, typer.Option(
        "--alpha", help="Significance level after Holm's correction.")] = 0.05,
    fmt: Annotated[str, typer.Option(
        "--format", "-f", help="table | json | markdown | junit")] = "table",
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Write the output (in --format) to this file instead of stdout.")
    ] = None,
    engine: EngineOpt = "local",
) -> None:
    """Compare two runs by step, annotation, op, kernel, category and rank (Mann-Whitney
    over iterations and ranks, Holm-corrected), list added/removed entities and put the
    efficiency model side by side; gate CI with --fail-on."""
    # Imported here: the compare modules (numpy statistics, polars summaries) are only
    # needed by this command.
    from traceatlas.compare import diff_format
    from traceatlas.compare.diff import diff_summaries
    from traceatlas.compare.gate import parse_rule

    if fmt not in DIFF_FORMATS:
        raise InputError("--format", f"{fmt!r} is not one of {', '.join(DIFF_FORMATS)}")
    if not 0.0 < alpha < 1.0:
        raise InputError("--alpha", f"{alpha:g} is not between 0 and 1")
    rules = [parse_rule(text) for text in fail_on or []]  # before any work
    if out is not None:
        replaceable_file(out, hint="-o names the file to write")
        refuse_inputs(out, [base, new])
    result = diff_summaries(*_sides(base, new, engine), alpha=alpha)
    result.gate(rules)
    for rule in result.unmatched:
        output.note(f"--fail-on {rule.text!r} matches nothing in either run")
    text = _render(result, fmt)
    if out is None:
        sys.stdout.write(text)
    else:
        with writing(out):
            write_text_atomic(replaceable_file(out), text)
        output.say(f"wrote {out}")
        output.say(diff_format.verdict_line(result))
    if result.violations:
        raise typer.Exit(EXIT_VIOLATION)


def _render(result: DiffResult, fmt: str) -> str:
    from traceatlas.compare import diff_format

    if fmt == "json":
        return diff_format.to_json(result)
    if fmt == "markdown":
        return diff_format.to_markdown(result)
    if fmt == "junit":
        return diff_format.to_junit(result)
    return _table_text(result)



def _cell(value: str) -> Text:
    return Text(literal(value))


def _table_text(result: DiffResult) -> str:
    """The terminal rendering: top changes, added/removed, efficiency, notes, headline."""
    from traceatlas.compare import diff_format

    tty = sys.stdout.isatty()
    console = output.LiteralConsole(file=io.StringIO(), record=True,
                                    width=None if tty else 160,
                                    force_terminal=tty)
    table = Table(title=_cell("changes (significant regressions first)"))
    for name in ("kind", "name", "base median", "new median", "change", "rel",
                 "adjusted p", "signif."):
        table.add_column(_cell(name), overflow="fold")
    for c in diff_format.ordered(result)[:diff_format.TOP]:
        style = ("red" if c.abs_change_ns > 0 else "green") if c.significant else ""
        table.add_row(*map(_cell, (
            c.kind, c.key, diff_format.ns_text(c.base_median_ns),
            diff_format.ns_text(c.new_median_ns), diff_format.ns_text(c.abs_change_ns),
            diff_format.rel_text(c), diff_format.p_text(c.p_adjusted),
            "yes" if c.significant else "no")), style=style)
    console.print(table)
    if len(result.changes) > diff_format.TOP:
        console.print(_cell(f"{len(result.changes) - diff_format.TOP} more change(s): "
                            "--format json lists them all"))
    for title, items in (("added (NEW only)", result.added),
                         ("removed (BASE only)", result.removed)):
        if items:
            extra = Table(title=_cell(title))
            for name in ("kind", "name", "total"):
                extra.add_column(_cell(name), overflow="fold")
            for p in items[:diff_format.TOP]:
                extra.add_row(*map(_cell, (p.kind, p.key, diff_format.ns_text(p.total_ns))))
            console.print(extra)
            if len(items) > diff_format.TOP:
                console.print(_cell(f"{len(items) - diff_format.TOP} more: --format json"))
    if result.efficiency:
        eff = Table(title=_cell("efficiency model"))
        for name in ("side", "metric", "base", "new", "delta"):
            eff.add_column(_cell(name))
        for e in result.efficiency:
            eff.add_row(*map(_cell, (e.side, "  " * e.level + e.label,
                                     "" if e.base is None else f"{e.base:.3f}",
                                     "" if e.new is None else f"{e.new:.3f}",
                                     "" if e.delta is None else f"{e.delta:+.3f}")))
        console.print(eff)
    for note in result.notes:
        console.print(_cell(f"note: {note}"))
    for line in diff_format.headline(result):
        console.print(_cell(line))
    return console.export_text(styles=tty)
