"""Ingest of one source file: the function engines map over partitions."""

from __future__ import annotations

import multiprocessing
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from traceatlas.io.reading import RankData
from traceatlas.io.registry import detect
from traceatlas.io.sources import Source
from traceatlas.io.time_outliers import set_aside_far
from traceatlas.model.schema import TABLES, empty_table
from traceatlas.store.writer import write_part

STAGING = "_staging"


@dataclass(frozen=True)
class PartitionJob:
    """One file to ingest into the (temporary) store directory ``store``."""

    index: int
    source: Source
    store: str
    threads: int = 1


@dataclass
class PartitionResult:
    """What a worker reports back for one rank of a source: small, picklable."""

    index: int
    sub: int
    source: Source
    identity: dict[str, Any]
    source_format: str
    rank: int | None
    rank_source: str | None
    clock: dict[str, Any]
    world_size: int | None
    host: str | None
    rows: dict[str, int]
    seconds: float
    warnings: list[tuple[str, str]] = field(default_factory=list)

    @property
    def key(self) -> tuple[int, int]:
        """(source index, rank index within the source): unique within one ingest."""
        return (self.index, self.sub)

    @property
    def staged(self) -> bool:
        """True when the rank was unknown and parts wait in the staging area."""
        return self.rank is None

    @property
    def staging_dir(self) -> str:
        """Staging sub-directory of this partition (relative to the staging area)."""
        return f"{self.index}-{self.sub}"


def ingest_partition(job: PartitionJob) -> list[PartitionResult]:
    """Read one source and write its tables, one result per rank it holds.

    Warnings are captured and returned with the first result.

    In a worker process (not the caller's), Arrow uses the system allocator unless
    ``ARROW_DEFAULT_MEMORY_POOL`` is set: it hands freed blocks back at once, which lowered
    ingest peak memory by ~15% here. The CLI sets it for its own process too.
    """
    if multiprocessing.parent_process() is not None and (
        "ARROW_DEFAULT_MEMORY_POOL" not in os.environ
    ):
        pa.set_memory_pool(pa.system_memory_pool())
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = detect(job.source)
        ranks = reader.read(job.source, threads=job.threads)
        for rank_data in ranks:
            if rank_data.source_format != "kineto":  # Kineto sets its own aside, ts 0 too
                set_aside_far(rank_data.tables, job.source.display)
        identity = job.source.identity()
        results = []
        for sub, rank_data in enumerate(ranks):
            result = PartitionResult(
                index=job.index,
                sub=sub,
                source=job.source,
                identity=identity,
                source_format=rank_data.source_format,
                rank=rank_data.rank,
                rank_source=rank_data.rank_source,
                clock=rank_data.clock,
                world_size=rank_data.world_size,
                host=rank_data.host,
                rows=_write_rank(Path(job.store), rank_data, sub, job.index),
                seconds=0.0,
            )
            results.append(result)
            rank_data.tables.clear()  # free each rank's tables once written
    if results:
        results[0].seconds = time.perf_counter() - t0
        results[0].warnings = [(w.category.__name__, str(w.message)) for w in caught]
    return results


def _write_rank(store: Path, rank_data: RankData, sub: int, index: int) -> dict[str, int]:
    """Write every canonical table of one rank (an empty part where the reader gave none,
    so each table of a store has files to scan)."""
    rows: dict[str, int] = {}
    tables = {name: rank_data.tables.get(name) for name in TABLES}
    for name, found in tables.items():
        table = found if found is not None else empty_table(name).drop_columns(["rank"])
        if rank_data.rank is None:
            # staged as an uncompressed Arrow IPC stream: read back once by ``unstage``,
            # so Parquet encoding and compression would only cost time
            path = store / STAGING / f"{index}-{sub}" / f"{name}.arrows"
            path.parent.mkdir(parents=True, exist_ok=True)
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
                out.write_table(table)
            rows[name] = table.num_rows
        else:
            rows[name] = write_part(store, name, rank_data.rank, table)
    return rows


def unstage(store: Path, result: PartitionResult, rank: int) -> None:
    """Move a staged partition into place under ``rank``."""
    staged = store / STAGING / result.staging_dir
    for path in sorted(staged.glob("*.arrows")):
        with pa.OSFile(str(path), "rb") as source:
            table = pa.ipc.open_stream(source).read_all()
        write_part(store, path.stem, rank, table)
