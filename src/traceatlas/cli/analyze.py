"""``traceatlas analyze NAME PATH`` and ``traceatlas analyses``: the analysis registry on
the command line. Parameters, requirements and output come from each declaration."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from traceatlas.cli import output
from traceatlas.cli.options import (
    EngineOpt,
    FormatOpt,
    WideOpt,
    _check_format,
    _guard,
    _open,
    app,
)
from traceatlas.errors import InputError

if TYPE_CHECKING:  # the analyses and their data libraries load when a command runs
    from traceatlas.analysis.base import Param
    from traceatlas.engine import Engine


@app.command("analyze")
@_guard
def analyze_command(
    name: Annotated[str, typer.Argument(help="Analysis name (see `traceatlas analyses`).")],
    path: Annotated[list[Path], typer.Argument(help="A store, or trace files / directories.")],
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="Analysis parameter as key=value (repeatable); `traceatlas "
        "analyses` lists each parameter with its default and allowed range.")] = None,
    fmt: FormatOpt = "table",
    table: Annotated[str | None, typer.Option(
        "--table", help="Print this extra table of the result instead of the main one "
        "(e.g. series).")] = None,
    ranks: Annotated[str | None, typer.Option("--ranks", help="Ranks, e.g. 0,3-5.")] = None,
    step: Annotated[int | None, typer.Option("--step", help="One iteration.")] = None,
    window: Annotated[str | None, typer.Option(
        "--window", help="START:END relative to the trace start (e.g. 1.5s:2s), or "
        "'@' + epoch ns; intervals are cut to the window (time inside it).")] = None,
    category: Annotated[list[str] | None, typer.Option(
        "--category", "-c", help="Canonical categories kept (comma-separated).")] = None,
    name_regex: Annotated[str | None, typer.Option(
        "--name", help="Regex on event names kept.")] = None,
    engine: EngineOpt = "local",
    wide: WideOpt = False,
) -> None:
    """Run one analysis; `--format json` prints the main table as a JSON array of rows."""
    from traceatlas import analysis
    from traceatlas.engine import LocalEngine
    from traceatlas.ops.select import parse_rank_spans, parse_window

    _check_format(fmt)
    params = dict(_split(p) for p in param or [])
    spec = analysis.get_analysis(name)
    analysis.registry.parse_params(spec, params)  # bad parameters fail before any ingest
    if ranks is not None:
        parse_rank_spans(ranks)
    if window is not None:
        parse_window(window)
    eng = analysis_engine(engine)
    try:
        trace = _open(path, engine if isinstance(eng, LocalEngine) else eng)
        if any(v is not None for v in (ranks, step, window, category, name_regex)):
            trace = trace.select(ranks=ranks, step=step, window=window,
                                 categories=category or None, name=name_regex, clip=True)
        result = analysis.run(name, trace, params, engine=eng)
    finally:
        eng.close()
    frame = result.table
    if table is not None:
        if table not in result.extra:
            raise InputError(f"--table {table}", f"{name} has no such table (tables: "
                             f"{', '.join(result.extra) or 'none'})")
        frame = result.extra[table]
    for note in result.notes:
        output.note(note)
    output.print_frame(frame, fmt, human=True, wide=wide)


@app.command("analyses")
def analyses_command() -> None:
    """List the analyses with their parameters and what data they need."""
    from traceatlas import analysis

    rows = []
    for name in sorted(analysis.ANALYSES):
        spec = analysis.get_analysis(name)
        params = ", ".join(map(param_text, spec.params)) or "-"
        rows.append((name, spec.description, params, ", ".join(spec.requires) or "-"))
    output.print_rows(("analysis", "what", "params (defaults) [range]", "needs"), rows)


def analysis_engine(spec: str) -> Engine:
    """The engine analyses run on: ``local`` -> rank batches one after the other in this
    process (bounded memory, no process start); ``dask[:N]`` or a scheduler address ->
    batches as Dask tasks (the same engine ingests)."""
    from traceatlas.engine import LocalEngine, get_engine

    if spec == "local":
        return LocalEngine(max_workers=1)
    if (spec != "dask" and "://" not in spec and not spec.startswith("scheduler-file:")
            and not re.fullmatch(r"dask:[1-9][0-9]*", spec)):
        raise InputError("--engine", f"unknown engine {spec[:40]!r}: use local, dask, "
                         "dask:N or a scheduler address (tcp://host:port)")
    return get_engine(spec)


def param_text(param: Param) -> str:
    """``bins=50 [1..100000]``, ``by=send [send|recv]`` or ``memory=False``."""
    allowed = param.range_text() or "|".join(param.choices or ())
    return f"{param.name}={param.default}" + (f" [{allowed}]" if allowed else "")


def _split(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"--param {text}", "expected key=value")
    return key.strip(), value.strip()
