"""Ingest: source files -> a store directory, one partition (rank) per worker."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceatlas import errors, tempfiles
from traceatlas._version import __version__

# The workers (readers, Arrow, NumPy) and the engines are imported when ingest runs, not
# with the package: ``import traceatlas`` (and the CLI's start-up) stays light.
if TYPE_CHECKING:
    from traceatlas.engine.base import Engine
    from traceatlas.ingest.partition import PartitionResult
    from traceatlas.io.sources import Source

Progress = Callable[[int, int], None]
"""Called with (partitions done, partitions total)."""

__all__ = ["ingest", "ingest_sources"]


def ingest(
    inputs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    engine: str | Engine | None = None,
    progress: Progress | None = None,
    align: str = "auto",
) -> Path:
    """Ingest a file, a directory of per-rank files, an archive, or a list of them.

    The store is written atomically: on any error nothing is left at ``out``.
    ``align`` is the clock alignment policy (``auto``, ``events``, ``start``; see
    ``traceatlas.ingest.align``). Returns the store path.
    """
    from traceatlas.io.sources import resolve_inputs

    if isinstance(inputs, str | os.PathLike):
        inputs = [inputs]
    return ingest_sources(
        resolve_inputs(inputs), Path(out), engine=engine, progress=progress, align=align
    )


def ingest_sources(
    sources: Sequence[Source],
    out: Path,
    *,
    engine: str | Engine | None = None,
    progress: Progress | None = None,
    align: str = "auto",
) -> Path:
    """Ingest already-resolved sources into the store ``out``.

    Staging files that dead traceatlas processes left in ``$TMPDIR`` are swept first;
    the manifest, written last, records every part (``traceatlas.store.parts``).
    """
    from traceatlas.engine.base import Engine
    from traceatlas.engine.select import get_engine
    from traceatlas.ingest.align import POLICIES
    from traceatlas.ingest.partition import STAGING, PartitionJob, ingest_partition
    from traceatlas.ingest.partition import unstage as _unstage
    from traceatlas.ingest.ranks import assign_ranks
    from traceatlas.store.manifest import write_manifest
    from traceatlas.store.parts import keep_records
    from traceatlas.store.writer import atomic_directory

    if align not in POLICIES:
        raise errors.InputError("--align", f"unknown policy {align!r} (choose from "
                                f"{', '.join(POLICIES)})")
    tempfiles.sweep_staging()
    own_engine = not isinstance(engine, Engine)
    eng = get_engine(engine)
    try:
        with atomic_directory(out) as tmp:
            n = len(sources)
            threads = max(1, (os.cpu_count() or 1) // eng.workers(n))
            jobs = [PartitionJob(i, src, str(tmp), threads, n) for i, src in enumerate(sources)]
            on_done = (lambda done: progress(done, n)) if progress else None
            results = [r for rs in eng.map(ingest_partition, jobs, on_done) for r in rs]
            for res in results:  # records made by the workers: no part is read again
                keep_records(tmp, res.parts)
            _reemit_warnings(results)
            ranks = assign_ranks(results)
            for res in results:
                if res.staged:
                    _unstage(tmp, res, ranks[res.key])
            shutil.rmtree(tmp / STAGING, ignore_errors=True)
            clocks = _align_clocks(tmp, results, ranks, align)
            write_manifest(tmp, _manifest(results, ranks, eng.name, clocks, align))
    finally:
        if own_engine:
            eng.close()
    return out


def _reemit_warnings(results: list[PartitionResult]) -> None:
    for res in results:
        for category_name, message in res.warnings:
            category = getattr(errors, category_name, None)
            if not (isinstance(category, type) and issubclass(category, Warning)):
                category = UserWarning
            warnings.warn(message, category, stacklevel=4)


def _align_clocks(
    store: Path, results: list[PartitionResult], ranks: dict[tuple[int, int], int], policy: str
) -> dict[int, dict[str, Any]]:
    """Align ranks' clocks in ``store``; rank -> clock record for the manifest."""
    from traceatlas.ingest.align import RankClock
    from traceatlas.ingest.align import align as align_store

    clocks = [
        RankClock(
            rank=ranks[r.key],
            domain_hint=f"source {r.index}",
            host=r.host,
            absolute=not str(r.clock.get("method", "none")).startswith("none"),
            clock=dict(r.clock),
            source=r.source.display,
        )
        for r in results
    ]
    for message in align_store(store, clocks, policy):
        warnings.warn(message, errors.DataQualityWarning, stacklevel=4)
    return {rc.rank: rc.clock for rc in clocks}


def _manifest(
    results: list[PartitionResult],
    ranks: dict[tuple[int, int], int],
    engine: str,
    clocks: dict[int, dict[str, Any]],
    policy: str,
) -> dict[str, Any]:
    from traceatlas.model.schema import TABLES
    from traceatlas.store.layout import SCHEMA_VERSION

    formats = sorted({r.source_format for r in results})
    ordered = sorted(results, key=lambda r: ranks[r.key])
    return {
        "schema_version": SCHEMA_VERSION,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "producer": {
            "traceatlas": __version__,
            "python": sys.version.split()[0],
            "engine": engine,
        },
        "source_format": formats[0] if len(formats) == 1 else "mixed",
        "ranks": [ranks[r.key] for r in ordered],
        "tables": sorted(TABLES),
        "sources": [
            {
                **r.identity,
                "rank": ranks[r.key],
                "rank_source": r.rank_source or "assigned (next free rank)",
                "format": r.source_format,
                "world_size": r.world_size,
                "host": r.host,
                "rows": r.rows,
                "ingest_seconds": round(r.seconds, 3),
            }
            for r in ordered
        ],
        "clock": {str(ranks[r.key]): clocks[ranks[r.key]] for r in ordered},
        "clock_alignment": policy,
    }
