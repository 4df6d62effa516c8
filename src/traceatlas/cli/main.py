"""``traceatlas`` command: ingest, info, sql. Exit codes: 0 ok, 2 bad input."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

import traceatlas
from traceatlas.cli import output
from traceatlas.cli.options import (
    EXIT_BAD_INPUT,
    FORMATS,
    EngineOpt,
    FormatOpt,
    WideOpt,
    _check_format,
    _guard,
    _is_sibling,
    _open,
    app,
    os_problem,
    writing,
)

__all__ = ["EXIT_BAD_INPUT", "FORMATS", "EngineOpt", "FormatOpt", "_check_format", "_guard",
           "_is_sibling", "_open", "app", "main", "os_problem", "writing"]


@app.command()
@_guard
def ingest(
    inputs: Annotated[list[Path], typer.Argument(help="Trace files, directories or archives.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Store directory to write.")],
    engine: EngineOpt = "local",
    align: Annotated[str, typer.Option(
        "--align",
        help="Clock alignment across ranks: auto (session starts, then collective/MPI "
        "event ends where clocks disagree by > 20 us or no start is known), events "
        "(always refine), start (session starts only).",
    )] = "auto",
) -> None:
    """Read traces into a store (Parquet per table per rank + manifest.json)."""
    with output.progress("ingest") as bar, writing(out, staged=True):
        store = traceatlas.ingest(
            [str(p) for p in inputs], out, engine=engine, progress=bar, align=align
        )
    manifest = traceatlas.Trace(store).manifest
    intervals = sum(int(src["rows"]["intervals"]) for src in manifest["sources"])
    output.stderr.print(
        f"wrote {store}: {len(manifest['ranks'])} rank(s), {intervals:,} intervals",
        highlight=False,
    )


@app.command()
@_guard
def info(
    path: Annotated[list[Path], typer.Argument(help="A store, or raw trace paths.")],
    fmt: FormatOpt = "table",
    engine: EngineOpt = "local",
) -> None:
    """Ranks, event counts per category, span and tracks of a trace."""
    _check_format(fmt, ("table", "json"))
    summary = traceatlas.summarize(_open(path, engine))
    if fmt == "json":
        typer.echo(json.dumps(summary))
        return
    span_ms = summary["span_ns"] / 1e6
    output.print_kv(
        "trace",
        [
            ("store", summary["path"]),
            ("format", summary["source_format"]),
            ("ranks", ", ".join(map(str, summary["ranks"]))),
            ("span", f"{span_ms:,.3f} ms"),
            ("intervals", f"{summary['intervals']:,}"),
            *((f"  {k}", f"{v:,}") for k, v in summary["by_category"].items()),
            *((f"{k} rows", f"{v:,}") for k, v in summary["rows"].items() if k != "intervals"),
            ("tracks by kind", ", ".join(f"{k} {v}" for k, v in summary["tracks_by_kind"].items())),
            ("clock alignment", str(summary["clock_alignment"])),
            *_clock_lines(summary["clock"]),
        ],
    )


def _clock_lines(clocks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """One line per run of consecutive ranks with the same clock text."""
    lines: list[tuple[list[int], str]] = []
    for c in sorted(clocks, key=lambda c: int(c["rank"])):
        text = _clock_text(c)
        if lines and lines[-1][1] == text and lines[-1][0][-1] == c["rank"] - 1:
            lines[-1][0].append(c["rank"])
        else:
            lines.append(([c["rank"]], text))
    return [
        (f"  rank {r[0]}" if len(r) == 1 else f"  ranks {r[0]}-{r[-1]}", text)
        for r, text in lines
    ]


def _clock_text(clock: dict[str, Any]) -> str:
    """``method, offset +x.xxx us`` plus the estimate when it was not applied."""
    text = f"{clock['method']}, offset {clock['offset_ns'] / 1e3:+,.3f} us"
    if clock["applied"] is False:
        text += (f" (events suggest {clock['estimated_offset_ns'] / 1e3:+,.3f} us from "
                 f"{clock['matches']} matches; not applied)")
    return text


@app.command()
@_guard
def sql(
    path: Annotated[Path, typer.Argument(help="A store, or a raw trace path.")],
    query: Annotated[str, typer.Argument(help="DuckDB SQL over tables: " + ", ".join(
        ("tracks", "intervals", "instants", "counters", "flows", "messages", "metadata")))],
    fmt: FormatOpt = "table",
    engine: EngineOpt = "local",
    allow_files: Annotated[bool, typer.Option(
        "--allow-files", help="Let the query read files outside the store (e.g. join your "
        "own CSV); statements stay read-only.")] = False,
    wide: WideOpt = False,
) -> None:
    """Run one read-only DuckDB SQL statement over the store's tables. Sandboxed: no file
    outside the store is read (unless --allow-files) and none is written."""
    _check_format(fmt)
    from traceatlas.model import sandbox

    sandbox.check(query)  # a refused statement fails before any ingest
    frame = _open([path], engine).sql(query, allow_files=allow_files)
    output.print_frame(frame, fmt, wide=wide)


# The export and filter commands live in their own module; importing it registers them.
import traceatlas.cli.diff  # noqa: E402
import traceatlas.cli.record  # noqa: E402  (lazy: imports torch-free code only)
import traceatlas.cli.summary  # noqa: E402  (by path: `summary` is a local name in `info`)
import traceatlas.cli.trend  # noqa: E402
from traceatlas.cli import analyze, report, transform, view  # noqa: E402, F401


def main() -> None:
    """Console-script entry point.

    SIGINT (Ctrl-C), SIGTERM and SIGHUP unwind the running command: temporary files and
    directories are removed, worker processes ended; then one line on stderr and exit
    code 128 + the signal number (``traceatlas.signals``).
    """
    from traceatlas import signals

    # The CLI process is ours: the system allocator gives Arrow memory back at once,
    # which keeps ingest's peak memory lower (see bench/RESULTS.md). Arrow reads the
    # variable when it makes its default pool, so it is not imported here (start-up).
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"  # inherited by worker processes
        pa = sys.modules.get("pyarrow")
        if pa is not None:  # imported already (e.g. main() called in-process by a test)
            pa.set_memory_pool(pa.system_memory_pool())
    signals.install()
    try:
        app()
    except signals.Interrupted:
        pass
    except SystemExit:
        if signals.received() is None:
            raise
    signum = signals.received()  # also when the exception was lost in a __del__
    if signum is not None:
        sys.stderr.write(f"traceatlas: stopped by {signals.Interrupted(signum)}\n")
        sys.exit(128 + signum)


if __name__ == "__main__":
    main()
