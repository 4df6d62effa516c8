"""``traceatlas export`` and ``traceatlas filter``: stores into other formats / smaller stores.

Registered on the ``app`` of ``traceatlas.cli.main`` when that module is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from traceatlas.cli import output
from traceatlas.cli.options import EngineOpt, _guard, _open, app, writing
from traceatlas.cli.outputs import refuse_inputs
from traceatlas.errors import InputError
from traceatlas.export.registry import EXPORTERS, export_params, get_exporter
from traceatlas.model.vocab import CATEGORIES
from traceatlas.ops.select import (
    DURATION_HELP,
    PSEUDO_CATEGORIES,
    parse_duration,
    parse_rank_spans,
    parse_window,
    selection_from,
)

PathsArg = Annotated[list[Path], typer.Argument(help="A store, or trace files / directories.")]


@app.command()
@_guard
def export(
    path: PathsArg,
    to: Annotated[str, typer.Option("--to", help=" | ".join(EXPORTERS))],
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write (a directory with "
                                      "--split-ranks).")],
    split_ranks: Annotated[bool, typer.Option(
        "--split-ranks", help="chrome: one rank-<r>.json.gz per rank in the directory OUT "
        "(without it, OUT must not be a directory)")] = False,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="KEY=VALUE for the format, e.g. folded: value=host|device; "
        "chrome: critical_path=true (the critical path marked: args and flow arrows)")
    ] = None,
    step: Annotated[int | None, typer.Option(
        "--step", help="chrome -p critical_path=true: the path of this step (default: "
        "the whole trace); the whole trace is written either way")] = None,
    engine: EngineOpt = "local",
) -> None:
    """Write a trace in another tool's format: chrome (Perfetto JSON; gzip if OUT ends .gz), paraver, folded, speedscope."""  # noqa: E501
    exporter = get_exporter(to)
    options: dict[str, Any] = dict(export_params(to, exporter, param or []))
    if step is not None:
        if options.get("critical_path") != "true":
            raise InputError("--step", "export uses --step only with --to chrome -p "
                             "critical_path=true (traceatlas filter --step cuts a step out)")
        options["step"] = step
    if not split_ranks and out.is_dir():  # a file may be overwritten, a directory never
        raise InputError(out, "is a directory; choose another -o" + (
            " (or --split-ranks to write one file per rank into it)" if to == "chrome" else ""))
    refuse_inputs(out, path, directory=split_ranks)
    trace = _open(path, engine)
    if split_ranks:
        from traceatlas.export.chrome import ChromeExporter

        if not isinstance(exporter, ChromeExporter):
            raise InputError("--split-ranks", f"only for --to chrome, not {to}")
        with writing(out):
            files = exporter.write(trace, out, split_ranks=True, **options)
    else:
        with writing(out):
            files = getattr(exporter, "write")(trace, out, **options)  # noqa: B009
    output.say(f"wrote {len(files)} file(s): {', '.join(map(str, files))}")


FILTER_HELP = (
    "Write a smaller store with the rows that match every condition given.\n\n"
    "Intervals: rank, category, name, min duration, and overlap with the window or step "
    "span (whole intervals are kept, never clipped). Instants and counters: rank and "
    "window / step span. Flows: rank and window / step span of their two ends. Messages: "
    "either side in the ranks, and overlap with the window. Tracks and metadata: every "
    "row of the kept ranks. The new manifest records filtered_from and filter."
)


@app.command("filter", help=FILTER_HELP)
@_guard
def filter_command(
    path: PathsArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="Store directory to write.")],
    category: Annotated[list[str] | None, typer.Option(
        "--category", "-c", help="Canonical categories, repeatable or comma-separated: "
        + ", ".join((*CATEGORIES, *PSEUDO_CATEGORIES)) + " (counter and message select "
        "those tables' rows; without them a category list drops counters and messages).")
    ] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="Regex searched in interval, instant and counter names (Rust regex "
        "syntax; (?i) for case-insensitive).")] = None,
    min_dur: Annotated[str | None, typer.Option(
        "--min-dur", help=f"Keep intervals at least this long ({DURATION_HELP}); drops "
        "instants and counters (no duration).")] = None,
    ranks: Annotated[str | None, typer.Option("--ranks", help="Ranks, e.g. 0,3-5.")] = None,
    window: Annotated[str | None, typer.Option(
        "--window", help="START:END, inclusive, either side may be empty. Durations "
        "relative to the trace start (earliest event of all ranks), e.g. 1.5s:2s or :500ms; "
        "'@' + integer epoch ns for absolute times, e.g. "
        "@1700000000000000000:@1700000000500000000.")] = None,
    step: Annotated[int | None, typer.Option(
        "--step", help="One iteration: per rank, the span of its ProfilerStep (step) "
        "intervals numbered N; intervals overlapping it or whose step is N.")] = None,
    engine: EngineOpt = "local",
) -> None:
    """Write a smaller store (see FILTER_HELP)."""
    from traceatlas.model.trace import Trace  # here: the CLI starts without Arrow
    from traceatlas.ops.filter_store import filter_store

    spec: dict[str, Any] = {k: v for k, v in (
        ("category", category), ("name", name), ("min_dur", min_dur), ("ranks", ranks),
        ("window", window), ("step", step)) if v is not None}
    min_dur_ns = parse_duration(min_dur, "--min-dur") if min_dur is not None else None
    if window is not None:
        parse_window(window)  # a bad window or rank list fails before any ingest
    if ranks is not None:
        parse_rank_spans(ranks)
    trace = _open(path, engine)
    selection = selection_from(trace, ranks=ranks, step=step, window=window,
                               categories=category or None, name=name,
                               min_dur_ns=min_dur_ns)
    with writing(out):
        store = filter_store(trace, selection, out, spec=spec)
    kept = Trace(store)
    intervals = kept.intervals.select("rank").collect().height
    output.say(f"wrote {store}: {len(kept.ranks)} rank(s), {intervals:,} intervals")
