"""``traceatlas summary PATH -o baseline.json``: the compact baseline summary of a run
(``traceatlas.compare.summary``) that ``diff`` reads instead of the whole trace.

Registered on the ``app`` of ``traceatlas.cli.main`` when that module is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import traceatlas
from traceatlas.cli import output
from traceatlas.cli.options import EngineOpt, _guard, app, writing
from traceatlas.cli.outputs import refuse_inputs
from traceatlas.compare.summary import summarize, write_summary
from traceatlas.tempfiles import replaceable_file


@app.command("summary")
@_guard
def summary_command(
    path: Annotated[Path, typer.Argument(
        help="One run: a trace file, a directory of rank files, or a store.")],
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Summary file to write (JSON; gzip-compressed when the name "
        "ends in .gz).")],
    engine: EngineOpt = "local",
) -> None:
    """Write the compact baseline summary of a run (per step, annotation, op, kernel and
    category times per iteration and rank; efficiency model) for `traceatlas diff` and CI."""
    from traceatlas.cli.analyze import analysis_engine
    from traceatlas.engine import LocalEngine

    replaceable_file(out, hint="-o names the summary file to write")  # before any work
    refuse_inputs(out, [path])
    eng = analysis_engine(engine)  # an unknown engine fails before any ingest
    try:
        with output.progress(f"ingest {path.name}") as bar:
            trace = traceatlas.open(str(path), engine=engine if isinstance(
                eng, LocalEngine) else eng, progress=bar)
        summary = summarize(trace, engine=eng)  # rank batches on the engine
    finally:
        eng.close()
    with writing(out):
        write_summary(summary, out)
    output.stderr.print(
        f"wrote {out}: {len(summary['ranks'])} rank(s), "
        f"{len(summary['iterations']['labels'])} iteration(s) "
        f"({summary['iterations']['source']})", highlight=False)
