"""Clock alignment across ranks recorded on different clocks (hosts, or relative times).

Readers put each rank on the unix epoch when the source gives an absolute session start
(``baseTimeNanoseconds``, ``TARGET_INFO_SESSION_START_TIME``, OTF2 ``realtime_timestamp``).
Host clocks still differ (NTP keeps nodes within 0.1-10 ms), so this module refines the
offsets with events that all ranks leave together: the end of NCCL collective kernels
and of synchronising MPI calls (``MPI_Init``, ``MPI_Barrier``, ``MPI_All*``).

Ranks that share a clock form a *clock domain*: the ranks of one source file (an OTF2
archive, a Paraver trace, one nsys report) and ranks on the same named host. Offsets are
estimated per domain, as the median over matched events of ``end_ref - end_rank`` (ns),
chained from the domain of the lowest rank. Policies:

- ``auto`` (default): apply an estimated offset when the domain has no absolute start,
  or when the offset exceeds ``AUTO_MIN_OFFSET_NS`` and the spread of the evidence. On one
  node (8-rank DLRM set in shared/traces) NCCL kernel ends agree within 5 us while their
  starts differ by up to 157 us: ends are the evidence, and a 20 us floor leaves a shared
  clock untouched.
- ``events``: apply every estimated offset.
- ``start``: session starts only (no refinement).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceatlas.store.layout import part_path, table_parts
from traceatlas.store.writer import write_part

POLICIES: tuple[str, ...] = ("auto", "events", "start")
AUTO_MIN_OFFSET_NS = 20_000
"""Smallest offset (ns) ``auto`` applies between domains that both have an absolute start."""

SYNC_MPI_RE = re.compile(
    r"^P?MPI_(Init|Init_thread|Barrier|Allreduce|Allgather|Allgatherv|Alltoall|Alltoallv|"
    r"Reduce_scatter|Reduce_scatter_block)$",
    re.IGNORECASE,
)
"""MPI calls every participant leaves at (nearly) the same time."""

_TIME_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "intervals": ("start_ns", "end_ns"),
    "instants": ("ts_ns",),
    "counters": ("ts_ns",),
    "flows": ("src_ts_ns", "dst_ts_ns"),
}
"""Per-rank time columns shifted by the rank's offset (messages are handled apart)."""


@dataclass
class RankClock:
    """What alignment needs to know about one rank."""

    rank: int
    domain_hint: str
    host: str | None
    absolute: bool
    clock: dict[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Estimate:
    """An offset estimate for one clock domain, in ns, from ``matches`` events."""

    offset_ns: int
    matches: int
    spread_ns: int
    evidence: str
    skipped: tuple[str, ...] = ()
    """Event series not used: their number of occurrences differs from the aligned
    ranks' (a profile window that starts or ends one collective apart would pair every
    event with the wrong one, an offset of one iteration with no spread at all)."""


def domains(ranks: Iterable[RankClock]) -> dict[int, str]:
    """Rank -> clock domain: ranks of one source, merged with ranks on the same host."""
    items = list(ranks)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for rc in items:
        find(rc.domain_hint)
        if rc.host:
            parent[find("host:" + rc.host)] = find(rc.domain_hint)
    return {rc.rank: find(rc.domain_hint) for rc in items}


def sync_events(store: Path) -> pa.Table:
    """Columns rank, key (event identity across ranks), end_ns, kind of sync events."""
    import polars as pl

    from traceatlas.model.trace import scan_parts

    frame = (
        scan_parts(store, "intervals")
        .filter(pl.col("category").is_in(["comm_kernel", "mpi"]))
        .select(
            "rank", "start_ns", "end_ns", pl.col("category").cast(pl.String),
            pl.col("name").cast(pl.String), pl.col("process_group").fill_null(""),
        )
        .filter(
            (pl.col("category") == "comm_kernel")
            | pl.col("name").str.contains("(?i)" + SYNC_MPI_RE.pattern)
        )
        .sort("rank", "start_ns")
        .with_columns(occ=pl.col("start_ns").cum_count().over("rank", "name", "process_group"))
        .select(
            "rank",
            pl.concat_str(["name", "process_group", "occ"], separator="\x1f").alias("key"),
            "end_ns",
            "category",
        )
        .collect()
    )
    return frame.to_arrow()


def estimate(
    events: pa.Table, dom: Mapping[int, str], ref_rank: int
) -> dict[str, Estimate | None]:
    """Offset per clock domain (ns to add), relative to the domain of ``ref_rank``.

    Aligned domains pool their (shifted) event ends; each other domain is compared with
    the pool, so a domain that shares no event with the reference can still be chained
    through one that does. A series (name, process group) is only matched by occurrence
    when the rank has as many occurrences as the pool. Linear in the number of events.
    """
    ends: dict[int, dict[str, int]] = {}
    kind: dict[str, str] = {}
    for rank, key, end, cat in zip(
        events.column("rank").to_pylist(), events.column("key").to_pylist(),
        events.column("end_ns").to_pylist(), events.column("category").to_pylist(),
        strict=True,
    ):
        ends.setdefault(rank, {})[key] = end
        kind[key] = cat
    members: dict[str, list[int]] = {}
    for rank in sorted(dom):
        members.setdefault(dom[rank], []).append(rank)
    ref = dom[ref_rank]
    out: dict[str, Estimate | None] = {d: None for d in members}
    out[ref] = Estimate(0, 0, 0, "reference")
    pool: dict[str, int] = {}
    pool_counts: dict[str, int] = {}
    _add_to_pool(pool, pool_counts, members[ref], ends, 0)
    pending = [d for d in members if d != ref]
    unmatched: dict[str, tuple[str, ...]] = {}
    progress = True
    while pending and progress:
        progress = False
        for d in list(pending):
            diffs: list[int] = []
            used: set[str] = set()
            skipped: set[str] = set()
            for b in members[d]:
                counts = _series_counts(ends.get(b, {}))
                for k, e in ends.get(b, {}).items():
                    series = _series(k)
                    if series in pool_counts and counts[series] != pool_counts[series]:
                        skipped.add(series.replace("\x1f", " in group ").rstrip())
                    elif k in pool:
                        diffs.append(pool[k] - e)
                        used.add(kind[k])
            if not diffs:
                unmatched[d] = tuple(sorted(skipped))
                continue
            med = int(statistics.median_low(diffs))
            spread = int(statistics.median_low([abs(x - med) for x in diffs]))
            label = " and ".join(_EVIDENCE[k] for k in sorted(used))
            out[d] = Estimate(med, len(diffs), spread, label, tuple(sorted(skipped)))
            _add_to_pool(pool, pool_counts, members[d], ends, med)
            pending.remove(d)
            progress = True
    for d in pending:  # no usable evidence; keep what was skipped, for the warning
        if unmatched.get(d):
            out[d] = Estimate(0, 0, 0, "none", unmatched[d])
    return out


def _series(key: str) -> str:
    """``name<sep>group`` of an event key ``name<sep>group<sep>occurrence``."""
    return key.rsplit("\x1f", 1)[0]


def _series_counts(rank_ends: Mapping[str, int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for k in rank_ends:
        counts[_series(k)] = counts.get(_series(k), 0) + 1
    return counts


def _add_to_pool(
    pool: dict[str, int], pool_counts: dict[str, int], ranks: list[int],
    ends: Mapping[int, Mapping[str, int]], off: int,
) -> None:
    for r in ranks:
        for series, n in _series_counts(ends.get(r, {})).items():
            pool_counts.setdefault(series, n)
        for k, e in ends.get(r, {}).items():
            pool.setdefault(k, e + off)


_EVIDENCE = {"comm_kernel": "NCCL collective kernel ends", "mpi": "MPI synchronising call ends"}


def decide(est: Estimate, absolute: bool, policy: str) -> bool:
    """Whether ``policy`` applies the estimate to a domain (see the module docstring)."""
    if policy == "start" or est.evidence == "reference":
        return False
    if policy == "events" or not absolute:
        return True
    return abs(est.offset_ns) > max(AUTO_MIN_OFFSET_NS, 4 * est.spread_ns)


def align(store: Path, ranks: list[RankClock], policy: str = "auto") -> list[str]:
    """Estimate and apply per-domain offsets in ``store``; update each ``RankClock.clock``.

    Returns warnings (ranks left without any clock evidence) for the caller to emit.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown alignment policy {policy!r}; choose from {POLICIES}")
    dom = domains(ranks)
    by_rank = {rc.rank: rc for rc in ranks}
    for rc in ranks:
        rc.clock.setdefault("offset_ns", 0)
        rc.clock["domain"] = dom[rc.rank]
    if len(set(dom.values())) < 2:
        return _no_evidence(ranks)
    ests = estimate(sync_events(store), dom, min(by_rank))
    offsets: dict[int, int] = {}
    for rc in ranks:
        est = ests[dom[rc.rank]]
        if est is None or est.evidence == "reference":
            continue
        if est.matches == 0:
            rc.clock["unmatched_series"] = list(est.skipped)
            continue
        applied = decide(est, all(by_rank[r].absolute for r in by_rank
                                  if dom[r] == dom[rc.rank]), policy)
        rc.clock["refinement"] = {
            "evidence": est.evidence, "matches": est.matches,
            "estimated_offset_ns": est.offset_ns, "spread_ns": est.spread_ns,
            "applied": applied,
        }
        if est.skipped:
            rc.clock["refinement"]["unmatched_series"] = list(est.skipped)
        if applied and est.offset_ns:
            offsets[rc.rank] = est.offset_ns
            rc.clock["offset_ns"] = est.offset_ns
            rc.clock["method"] = f"{rc.clock.get('method', 'none')} + {est.evidence}"
    if offsets:
        shift_store(store, offsets)
    mismatched = []
    for rc in ranks:
        series = (rc.clock.get("refinement", {}).get("unmatched_series")
                  or rc.clock.get("unmatched_series"))
        if series:
            mismatched.append(
                f"{rc.source}: rank {rc.rank}: event series recorded a different number of "
                f"times than on the aligned ranks, not used for clock alignment: "
                f"{', '.join(series[:3])}")
    return mismatched + _no_evidence(ranks)


def _no_evidence(ranks: list[RankClock]) -> list[str]:
    """Ranks with neither an absolute start nor applied event evidence, when ranks differ."""
    doms = {rc.clock.get("domain") for rc in ranks}
    if len(doms) < 2:
        return []
    return [
        f"{rc.source}: rank {rc.rank} has no clock evidence (no absolute session start, "
        "no collective or MPI event matched with other ranks); its times are used as "
        "written and may not line up with other ranks"
        for rc in ranks
        if not rc.absolute and not rc.clock.get("refinement", {}).get("applied")
    ]


def shift_store(store: Path, offsets: Mapping[int, int]) -> None:
    """Add ``offsets[rank]`` ns to every time of that rank (messages: per side)."""
    for rank, off in offsets.items():
        for table, columns in _TIME_COLUMNS.items():
            path = part_path(store, table, rank)
            if path.exists():
                part = pq.read_table(path)
                if part.num_rows:
                    write_part(store, table, rank, _shift(part, columns, off))
    for path in table_parts(store, "messages"):
        part = pq.read_table(path)
        if not part.num_rows:
            continue
        rank = int(path.parent.name.split("=", 1)[1])
        part = _shift_by(part, ("send_start_ns", "send_end_ns"), "src_rank", offsets)
        part = _shift_by(part, ("recv_start_ns", "recv_end_ns"), "dst_rank", offsets)
        write_part(store, "messages", rank, part)


def _shift(table: pa.Table, columns: Iterable[str], off: int) -> pa.Table:
    for name in columns:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.add(table.column(name), pa.scalar(off, pa.int64())))
    return table


def _shift_by(
    table: pa.Table, columns: Iterable[str], rank_column: str, offsets: Mapping[int, int]
) -> pa.Table:
    """Shift ``columns`` by the offset of the rank named in ``rank_column`` of each row."""
    keys = pa.array(list(offsets), pa.int64())
    vals = pa.array(list(offsets.values()), pa.int64())
    idx = pc.index_in(table.column(rank_column).cast(pa.int64()), value_set=keys)
    shift = pc.fill_null(pc.take(vals, idx), 0)
    for name in columns:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.add(table.column(name), shift))
    return table
