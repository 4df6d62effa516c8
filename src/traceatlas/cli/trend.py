"""``traceatlas trend SUMMARY... | DIR``: the key figures of a series of runs and their
change points (``traceatlas.compare.trend``); ``-o trend.html`` writes the charts.

Exit codes: 0 done (change points are reported, not a failure), 2 bad input. Registered on
the ``app`` of ``traceatlas.cli.main`` when imported.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from traceatlas.cli import output
from traceatlas.cli.options import _guard, app, writing
from traceatlas.cli.outputs import refuse_inputs
from traceatlas.errors import InputError
from traceatlas.literal import literal
from traceatlas.tempfiles import replaceable_file, write_text_atomic

if TYPE_CHECKING:
    from traceatlas.compare.trend import TrendResult

TREND_FORMATS = ("table", "json", "markdown")


@app.command("trend")
@_guard
def trend_command(
    paths: Annotated[list[Path], typer.Argument(
        help="Summaries written by `traceatlas summary` (plain or .gz), oldest first; or "
        "one directory of them (ordered by file name).")],
    threshold: Annotated[str, typer.Option(
        "--threshold", help="A change point moves a figure by more than this share of "
        "the previous run's median (and is significant).")] = "5%",
    top: Annotated[int, typer.Option(
        "--top", help="Kernels, ops and annotations followed (each, by time).")] = 5,
    alpha: Annotated[float, typer.Option(
        "--alpha", help="Significance level after Holm's correction.")] = 0.05,
    fmt: Annotated[str, typer.Option(
        "--format", "-f", help="table | json | markdown")] = "table",
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Write the HTML page with one chart per figure here.")] = None,
) -> None:
    """Key figures over runs (step time, top kernels/ops/annotations, efficiency model),
    each with its change vs the previous run; flags the change points."""
    # Imported here: scipy (the statistics) is paid only by the commands that test.
    from traceatlas.compare import trend as trend_mod
    from traceatlas.compare import trend_format
    from traceatlas.compare.summary import read_summary

    if fmt not in TREND_FORMATS:
        raise InputError("--format", f"{fmt!r} is not one of {', '.join(TREND_FORMATS)}")
    if not 0.0 < alpha < 1.0:
        raise InputError("--alpha", f"{alpha:g} is not between 0 and 1")
    if top < 1:
        raise InputError("--top", f"{top} is not a positive number")
    share = trend_mod.parse_threshold(threshold)
    if out is not None:
        replaceable_file(out, hint="-o names the HTML file to write")
        refuse_inputs(out, paths)
    files, order = trend_mod.list_runs(paths)
    summaries = [(f, read_summary(f)) for f in files]
    trend_mod.check_runs(summaries)
    result = trend_mod.trend([(_label(f), s) for f, s in summaries], top=top, threshold=share,
                             alpha=alpha, order=order, paths=[str(f) for f, _ in summaries])
    if fmt == "json":
        sys.stdout.write(trend_format.to_json(result))
    elif fmt == "markdown":
        sys.stdout.write(trend_format.to_markdown(result))
    else:
        sys.stdout.write(_table_text(result))
    if out is not None:
        from traceatlas.compare import trend_plot

        with writing(out):
            write_text_atomic(replaceable_file(out), trend_plot.render(result))
        output.say(f"wrote {out}")


def _label(path: Path) -> str:
    """``run-3.json.gz`` -> ``run-3``."""
    name = path.name
    for suffix in (".json.gz", ".gz", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _cell(value: str) -> Text:
    return Text(literal(value))


def _table_text(result: TrendResult) -> str:
    """The terminal rendering: one row per figure, one column per run; change points red."""
    from traceatlas.compare import trend_format as tf

    tty = sys.stdout.isatty()
    console = output.LiteralConsole(file=io.StringIO(), record=True,
                                    width=None if tty else 200, force_terminal=tty)
    table = Table(title=_cell("key figures over runs (value, change vs the previous run)"))
    table.add_column(_cell("figure"), overflow="fold", max_width=60)
    for i, run in enumerate(result.runs):
        table.add_column(_cell(f"{i + 1}: {run.label}"), justify="right", overflow="fold")
    for f in result.figures:
        cells = [Text(literal(tf.cell_text(f, p)), style="bold red" if p.change_point else "")
                 for p in f.points]
        table.add_row(_cell(tf.short_name(f)), *cells)
        if f.kind == "step":
            table.add_row(_cell("step time IQR"), *map(_cell, tf.spread_cells(f)))
    console.print(table)
    console.print(_cell(tf.legend(result)))
    for note in result.notes:
        console.print(_cell(f"note: {note}"))
    for line in tf.headline(result):
        console.print(_cell(line))
    return console.export_text(styles=tty)
