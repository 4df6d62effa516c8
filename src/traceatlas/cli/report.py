"""``traceatlas report`` (the answer for one or several runs: terminal, HTML, JSON) and
``traceatlas demo`` (the report on the shipped sample).

Registered on the ``app`` of ``traceatlas.cli.main`` when that module is imported.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

import traceatlas
from traceatlas.cli import output
from traceatlas.cli.options import EngineOpt, _check_format, _guard, app, writing
from traceatlas.cli.outputs import refuse_inputs
from traceatlas.errors import InputError
from traceatlas.tempfiles import replaceable_file, staging_prefix, write_text_atomic

if TYPE_CHECKING:  # the engine package starts process pools: imported when a run needs it
    from traceatlas.engine.base import Engine

REPO_SAMPLE = Path(traceatlas.__file__).resolve().parents[2] / "examples" / "sample_trace"
"""The sample in a source checkout (``examples/sample_trace``); absent from a wheel."""


def _open_run(path: Path, engine: str | Engine) -> traceatlas.Trace:
    with output.progress(f"ingest {path.name}") as bar:
        return traceatlas.open(str(path), engine=engine, progress=bar)


def _baseline_summary(path: Path, engine: str | Engine) -> dict[str, Any]:
    """The baseline as ``diff`` accepts it: a summary file as is, a trace or a store
    summarised (``InputError`` naming it when it is none of these)."""
    from traceatlas.compare.diff import is_summary_file
    from traceatlas.compare.summary import read_summary, summarize

    if is_summary_file(path):
        return read_summary(path)
    if not path.exists():
        raise InputError(path, "no such file or directory (the --baseline run)")
    return summarize(_open_run(path, engine),  # rank batches; on a Dask engine when given
                     engine=None if isinstance(engine, str) else engine)


def _report(paths: list[Path], out: Path | None, fmt: str, engine: str,
            baseline: Path | None = None) -> None:
    from traceatlas.report import data as report_data  # here: the CLI starts without them
    from traceatlas.report import html, terminal

    if baseline is not None and len(paths) != 1:
        raise InputError("--baseline", f"compares one run with its baseline; got {len(paths)} "
                         "runs")
    if out is not None:  # a regular file may be replaced; a directory, device, input never
        replaceable_file(out, hint="-o names the HTML file to write")
        refuse_inputs(out, paths + ([baseline] if baseline is not None else []))
    from traceatlas.cli.analyze import analysis_engine
    from traceatlas.engine import LocalEngine

    eng = analysis_engine(engine)  # an unknown engine fails before any ingest
    try:
        ingest_with: str | Engine = engine if isinstance(eng, LocalEngine) else eng
        base = (None if baseline is None
                else _baseline_summary(baseline, ingest_with))  # fails first
        from traceatlas.store.remote import remote_url  # s3:/b (pathlib's) shown as s3://b

        runs = [(remote_url(p) or str(p), _open_run(p, ingest_with)) for p in paths]
        data = report_data.build(runs, engine=eng)  # per-rank analyses in rank batches
    finally:
        eng.close()
    if baseline is not None and base is not None:
        from traceatlas.report.baseline import compare

        data.baseline = compare(str(baseline), base, runs[0][1])
    if fmt == "json":
        sys.stdout.write(json.dumps(data.to_dict()) + "\n")
    else:
        output.stdout.print(terminal.renderable(data, html_hint=out is None,
                                                width=output.stdout.width), crop=False)
    if out is not None:
        with writing(out):
            write_text_atomic(replaceable_file(out), html.render(data))
        output.stderr.print(f"wrote {out}", highlight=False)



OutOpt = Annotated[Path | None, typer.Option(
    "--out", "-o", help="Write the HTML report (one self-contained file) here.")]
ReportFormatOpt = Annotated[str, typer.Option("--format", "-f", help="table | json")]


@app.command("report")
@_guard
def report_command(
    paths: Annotated[list[Path], typer.Argument(
        help="One run per argument: a trace file, a directory of rank files, or a store. "
        "Several runs add the scalability table.")],
    out: OutOpt = None,
    fmt: ReportFormatOpt = "table",
    engine: EngineOpt = "local",
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", help="Compare the run with this baseline (a trace, a store or a "
        "`traceatlas summary` file, as `diff` accepts): regressions first.")] = None,
) -> None:
    """The answer: efficiency tree and top findings here, plots with -o report.html."""
    _check_format(fmt, ("table", "json"))
    _report(paths, out, fmt, engine, baseline)


@app.command("demo")
@_guard
def demo_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write.")] = Path(
        "demo-report.html"),
    fmt: ReportFormatOpt = "table",
) -> None:
    """Run the report on the sample that ships with the project; writes demo-report.html."""
    _check_format(fmt, ("table", "json"))
    sample, origin = demo_sample()
    output.stderr.print(f"sample: {sample} ({origin})", highlight=False)
    _report([sample], out, fmt, "local")


def demo_sample() -> tuple[Path, str]:
    """The sample the demo reports on, and where it comes from: the repository's
    ``examples/sample_trace``, else a copy generated once into the cache directory
    (``cache_root()/sample-<version>/sample_trace``), where it stays so that the commands
    the report suggests keep working after the demo exits."""
    from traceatlas.store.cache import cache_root
    from traceatlas.testing.sample import WORLD, write_sample

    if (REPO_SAMPLE / "rank-0.json.gz").is_file():
        return REPO_SAMPLE, "from the repository"
    target = cache_root() / f"sample-{traceatlas.__version__}" / "sample_trace"
    files = [target / f"rank-{r}.json.gz" for r in range(WORLD)]
    if all(f.is_file() for f in files):
        return target, "generated earlier, kept in the cache directory"
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix("demo"), dir=target.parent))
    try:
        write_sample(staging)
        if target.exists():  # an incomplete earlier copy
            shutil.rmtree(target)
        staging.rename(target)
    except OSError:
        if not all(f.is_file() for f in files):  # not a concurrent demo that won the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target, "generated now, kept in the cache directory"
