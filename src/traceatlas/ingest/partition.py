"""Ingest of one source file: the function engines map over partitions."""

from __future__ import annotations

import multiprocessing
import os
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from traceatlas.io.reading import RankData
from traceatlas.io.registry import detect
from traceatlas.io.sources import Source
from traceatlas.io.time_outliers import set_aside_far
from traceatlas.model.schema import TABLES, empty_table
from traceatlas.store.parts import take_records
from traceatlas.store.writer import write_part

STAGING = "_staging"


@dataclass(frozen=True)
class PartitionJob:
    """One file to ingest into the (temporary) store directory ``store``."""

    index: int
    source: Source
    store: str
    threads: int = 1
    sources: int = 0
    """Sources of the whole ingest (0: not told). With 1, the ranks of this source's
    partitions are decided here, by ``assign_ranks`` over them alone as ingest does
    later, so parts without a rank are written in place instead of staged."""


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
    parts: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    """Manifest records of the parts written (relative path -> (inode, record)), made as
    they were written (``store.parts.take_records``); with the first result."""
    placed: bool = False
    """Rank unknown to the reader, but the parts were written under the rank ingest
    assigns (``PartitionJob.sources`` = 1): nothing staged."""

    @property
    def key(self) -> tuple[int, int]:
        """(source index, rank index within the source): unique within one ingest."""
        return (self.index, self.sub)

    @property
    def staged(self) -> bool:
        """True when the rank was unknown and parts wait in the staging area."""
        return self.rank is None and not self.placed

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
        results = [
            PartitionResult(
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
                rows={},
                seconds=0.0,
            )
            for sub, rank_data in enumerate(ranks)
        ]
        places = _places(results) if job.sources == 1 else {}
        for result in results:
            result.placed = result.rank is None and result.key in places
        try:
            _write(Path(job.store), results, ranks, places, job.threads)
        finally:
            written = take_records(Path(job.store))
    if results:
        results[0].parts = written
        results[0].seconds = time.perf_counter() - t0
        results[0].warnings = [(w.category.__name__, str(w.message)) for w in caught]
    return results


def _places(results: list[PartitionResult]) -> dict[tuple[int, int], int]:
    """Partition key -> rank, as ``assign_ranks`` decides when these are every result of
    the ingest (its warnings left to ingest, which calls it again); {} on a conflict
    (ingest reports it)."""
    from traceatlas.errors import RankConflictError
    from traceatlas.ingest.ranks import assign_ranks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return assign_ranks(results)
        except RankConflictError:
            return {}


def _write(store: Path, results: list[PartitionResult], ranks: list[RankData],
           places: dict[tuple[int, int], int], threads: int) -> None:
    """Write every rank's tables (ranks in ``places`` under that rank, unknown ones
    staged), ``threads`` parts at a time; fills each result's ``rows``. Each rank's
    tables are let go once handed over, so memory is freed as parts are written."""
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
    futures: list[Future[int]] = []
    try:
        for result, rank_data in zip(results, ranks, strict=True):
            rank = rank_data.rank if rank_data.rank is not None else places.get(result.key)
            for name in TABLES:
                found = rank_data.tables.get(name)
                # an empty part where the reader gave none: each table has files to scan
                table = found if found is not None else empty_table(name).drop_columns(["rank"])
                result.rows[name] = table.num_rows
                if rank is None:
                    _stage(store / STAGING / result.staging_dir / f"{name}.arrows", table)
                elif pool is None:
                    write_part(store, name, rank, table)
                else:
                    futures.append(pool.submit(write_part, store, name, rank, table))
            rank_data.tables.clear()  # free each rank's tables once written
        for future in futures:
            future.result()
    finally:
        if pool is not None:  # on an error (or a signal) nothing queued starts
            pool.shutdown(wait=True, cancel_futures=True)


def _stage(path: Path, table: pa.Table) -> None:
    """Stage a part as an uncompressed Arrow IPC stream: read back once by ``unstage``,
    so Parquet encoding and compression would only cost time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)


def unstage(store: Path, result: PartitionResult, rank: int) -> None:
    """Move a staged partition into place under ``rank``."""
    staged = store / STAGING / result.staging_dir
    for path in sorted(staged.glob("*.arrows")):
        with pa.OSFile(str(path), "rb") as source:
            table = pa.ipc.open_stream(source).read_all()
        write_part(store, path.stem, rank, table)
