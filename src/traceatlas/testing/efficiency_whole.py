"""The ``efficiency`` analysis as it was before it ran in rank batches (commit 236d108),
frozen: the oracle the partitioned analysis (``analysis/efficiency.py``, whose docstring
holds the definitions) is tested against. ``Efficiency().run(trace, params)`` reads every
rank at once. Not registered; used by tests only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.efficiency_labels import LABELS, metric_label
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.errors import InputError
from traceatlas.ops.host_activity import HOST_COLLECTIVE
from traceatlas.ops.unions import union_segments

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

OMP_SYNC = r"(?i)(barrier|wait|lock|flush|taskgroup)"
"""OpenMP constructs counted as runtime time (not useful)."""
SYNC_CALL = r"(?i)synchronize"
"""Runtime/driver calls counted as blocking (not useful)."""
ANNOTATION_CATEGORIES = ("annotation", "nvtx", "region")
RUNNING = '"state": 1}'
"""Paraver state Running in the reader's ``args`` text (``{"cpu": c, "state": 1}``)."""
PER_RANK_COLUMNS = ("scope", "side", "rank", "device", "useful_ns", "comm_ns",
                    "comm_kernel_ns", "transfer_ns", "idle_ns", "active_ns", "runtime_ns")
"""Columns of the ``per_rank`` extra table."""


@dataclass(frozen=True)
class Region:
    """Where the model applies: per-rank segments, runtime T (ns), one window or None."""

    scope: str
    segments: pl.DataFrame          # rank, start_ns, end_ns (disjoint per rank)
    runtime_ns: int
    window: tuple[int, int] | None  # the same window on every rank (replay possible)


@dataclass
class Rows:
    """Main-table rows being built."""

    scope: str
    rows: list[dict[str, Any]]

    def add(self, side: str, metric: str, value: float | None, parent: str | None = None,
            level: int = 0) -> None:
        self.rows.append({"scope": self.scope, "side": side, "metric": metric,
                          "value": None if value is None else float(value),
                          "parent": parent, "level": level})


class Efficiency:
    """POP efficiency model: host (MPI, OpenMP, GPU host) and device trees."""

    name = "efficiency_whole"
    description = ("POP efficiency model: host load balance, communication, serialisation, "
                   "transfer; device load balance, communication, orchestration")
    params = (
        Param("region", str, "", "whole run (empty), step:N, annotation:REGEX or "
              "window:START:END (select syntax, e.g. window:1.5s:2s)"),
        Param("nccl_useful", bool, False, "count NCCL/comm kernels as useful device time "
              "(TALP convention); default false: communication (nsys2prv convention)"),
    )
    requires = ("intervals",)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Efficiency rows; extra tables per_rank and per_thread."""
        import polars as pl

        region = resolve_region(trace, str(params.get("region", "")))
        view = trace if region.window is None or region.scope == "run" else trace.select(
            window=region.window)
        rows = Rows(region.scope, [])
        notes: list[str] = []
        per_rank: list[pl.DataFrame] = []
        per_thread = _host(trace, view, region, rows, notes, per_rank)
        nccl_useful = bool(params.get("nccl_useful", False))
        _device(trace, view, region, nccl_useful, rows, notes, per_rank)
        table = pl.DataFrame(rows.rows, schema={
            "scope": pl.String, "side": pl.String, "metric": pl.String,
            "value": pl.Float64, "parent": pl.String, "level": pl.Int64})
        table = table.with_columns(label=pl.Series(
            [metric_label(m, nccl_useful) if m in LABELS else None for m in table["metric"]],
            dtype=pl.String))
        ranks = pl.concat(per_rank, how="diagonal_relaxed") if per_rank else pl.DataFrame()
        return Result(table, extra={"per_rank": ranks, "per_thread": per_thread},
                      notes=notes)


# -- regions ------------------------------------------------------------------------------

def resolve_region(trace: Trace, text: str) -> Region:
    """Parse ``region`` (see the module docstring) into per-rank segments and T."""
    import polars as pl

    from traceatlas.ops import select as sel

    t0, t1 = _span(trace)
    kind, _, arg = text.partition(":")
    kind = kind.strip()
    if kind == "":
        return _same(trace, "run", t0, t1)
    if kind == "step":
        try:
            step = int(arg)
        except ValueError:
            raise InputError("--param region", f"bad step {arg!r} (use step:N)") from None
        spans = sel.step_spans(trace, step)
        return _same(trace, f"step {step}", min(s for _, s, _ in spans),
                     max(e for _, _, e in spans))
    if kind == "window":
        spec = sel.parse_window(arg, "--param region")
        lo, hi = spec.resolve(sel.trace_start_ns(trace))
        return _same(trace, "window", t0 if lo is None else lo, t1 if hi is None else hi)
    if kind == "annotation":
        sel.check_regex(arg, "--param region")
        hits = trace.intervals.filter(
            pl.col("category").cast(pl.String).is_in(ANNOTATION_CATEGORIES)
            & pl.col("name").cast(pl.String).str.contains(arg))
        segments = union_segments(hits, ["rank"]).sort("rank", "start_ns").collect()
        if segments.height == 0:
            raise InputError("--param region", f"no annotation matches {arg!r}")
        total = (segments.group_by("rank").agg((pl.col("end_ns") - pl.col("start_ns")).sum()
                                               .alias("t"))["t"].max())
        return Region(f"annotation {arg}", segments, int(total), None)  # type: ignore[arg-type]
    raise InputError("--param region", f"bad region {text!r} (use step:N, annotation:REGEX "
                     "or window:START:END)")


def _span(trace: Trace) -> tuple[int, int]:
    import polars as pl

    row = trace.intervals.select(pl.col("start_ns").min(), pl.col("end_ns").max()).collect()
    lo, hi = row.row(0)
    return (int(lo or 0), int(hi or 0))


def _same(trace: Trace, scope: str, lo: int, hi: int) -> Region:
    import polars as pl

    if hi < lo:
        raise InputError("--param region", f"empty window [{lo}, {hi}] ns")
    ranks = trace.ranks
    segments = pl.DataFrame({"rank": ranks, "start_ns": [lo] * len(ranks),
                             "end_ns": [hi] * len(ranks)},
                            schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})
    return Region(scope, segments, hi - lo, (lo, hi))


def clip(frame: pl.LazyFrame, region: Region) -> pl.LazyFrame:
    """``frame``'s intervals (start_ns, end_ns, rank, ...) cut to the region's segments;
    empty pieces dropped."""
    import polars as pl

    if region.window is not None:
        lo, hi = region.window
        return frame.with_columns(pl.col("start_ns").clip(lo, hi),
                                  pl.col("end_ns").clip(lo, hi)).filter(
            pl.col("end_ns") > pl.col("start_ns"))
    seg = region.segments.lazy().select(
        pl.col("rank").cast(pl.Int32), pl.col("start_ns").alias("_lo"),
        pl.col("end_ns").alias("_hi"))
    return (
        frame.with_columns(pl.col("rank").cast(pl.Int32)).join(seg, on="rank")
        .filter((pl.col("start_ns") < pl.col("_hi")) & (pl.col("end_ns") > pl.col("_lo")))
        .with_columns(pl.max_horizontal("start_ns", "_lo").alias("start_ns"),
                      pl.min_horizontal("end_ns", "_hi").alias("end_ns"))
        .drop("_lo", "_hi")
    )


def _lengths(frame: pl.LazyFrame, keys: list[str], region: Region, name: str
             ) -> pl.LazyFrame:
    """Union length per group of ``frame`` inside the region (union, then clip)."""
    import polars as pl

    segments = clip(union_segments(frame, keys), region)
    return segments.group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum()
                                       .alias(name))


def _rank_runtime(region: Region) -> dict[int, int]:
    import polars as pl

    frame = region.segments.group_by("rank").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("t"))
    return {int(r): int(t) for r, t in frame.iter_rows()}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _mul(*values: float | None) -> float | None:
    out = 1.0
    for v in values:
        if v is None:
            return None
        out *= v
    return out


# -- host side ------------------------------------------------------------------------------

def _host(trace: Trace, view: Trace, region: Region, rows: Rows, notes: list[str],
          per_rank: list[pl.DataFrame]) -> pl.DataFrame:
    """Host rows; returns the per_thread table."""
    import polars as pl

    keys = ["rank", "track_id"]
    host_tracks = trace.tracks.filter(pl.col("kind").cast(pl.String) == "host_thread") \
        .select(pl.col("rank").cast(pl.Int32), pl.col("track_id").cast(pl.Int32))
    threads = (trace.intervals.select(pl.col("rank").cast(pl.Int32),
                                      pl.col("track_id").cast(pl.Int32)).unique()
               .join(host_tracks, on=keys, how="semi").collect())
    empty = pl.DataFrame(schema={"rank": pl.Int32, "track_id": pl.Int32,
                                 "useful_ns": pl.Int64})
    if threads.height == 0:
        return empty
    cat = pl.col("category").cast(pl.String)
    name = pl.col("name").cast(pl.String)
    state_ranks = set(trace.intervals.filter(cat == "state").select("rank").unique()
                      .collect()["rank"].to_list())
    # args (JSON text, the widest column) is only needed to find Paraver's Running state.
    extra = [pl.col("args")] if state_ranks else []
    iv = (view.intervals.with_columns(pl.col("rank").cast(pl.Int32),
                                      pl.col("track_id").cast(pl.Int32))
          .join(host_tracks, on=keys, how="semi")
          .select(*keys, "start_ns", "end_ns", cat.alias("cat"), name.alias("name"), *extra)
          .collect().lazy())  # read once: every query below reuses it
    has_state = pl.col("rank").is_in(list(state_ranks))
    covered = iv.filter(pl.when(has_state).then(
        (pl.col("cat") == "state") & pl.col("args").str.contains(RUNNING, literal=True))
        .otherwise(pl.col("cat") != "state")) if state_ranks else iv.filter(
        pl.col("cat") != "state")
    host_comm = (pl.col("cat") == "mpi") | (
        pl.col("cat").is_in(("annotation", "cpu_op", "python", "other"))
        & pl.col("name").str.contains(HOST_COLLECTIVE))
    runtime = (host_comm | (pl.col("cat") == "sync")
               | (pl.col("cat").is_in(("runtime", "driver")) & pl.col("name").str.contains(
                   SYNC_CALL))
               | ((pl.col("cat") == "openmp") & pl.col("name").str.contains(OMP_SYNC)))
    not_useful = iv.filter(~has_state & (pl.col("cat") != "state") & runtime)
    c_seg = clip(union_segments(covered, keys), region)
    n_seg = clip(union_segments(not_useful, keys), region)
    # Threads useful at once per rank: +1/-1 over covered segments, -1/+1 over runtime
    # segments (runtime time is inside the thread's covered time).
    # A collective run by a helper thread (gloo) blocks the whole process: while it runs,
    # no thread of the rank counts as useful (b > 0), as MPI time on a one-thread rank.
    b_seg = clip(union_segments(iv.filter(host_comm & (pl.col("cat") != "mpi")), ["rank"]),
                 region)
    zero = pl.lit(0)
    events = pl.concat([
        c_seg.select("rank", pl.col("start_ns").alias("ts"), pl.lit(1).alias("d"),
                     zero.alias("b")),
        c_seg.select("rank", pl.col("end_ns").alias("ts"), pl.lit(-1).alias("d"),
                     zero.alias("b")),
        n_seg.select("rank", pl.col("start_ns").alias("ts"), pl.lit(-1).alias("d"),
                     zero.alias("b")),
        n_seg.select("rank", pl.col("end_ns").alias("ts"), pl.lit(1).alias("d"),
                     zero.alias("b")),
        b_seg.select("rank", pl.col("start_ns").alias("ts"), zero.alias("d"),
                     pl.lit(1).alias("b")),
        b_seg.select("rank", pl.col("end_ns").alias("ts"), zero.alias("d"),
                     pl.lit(-1).alias("b")),
    ])
    proc = events.map_batches(_useful_by_rank,
                              schema={"rank": pl.Int32, "useful_ns": pl.Int64})

    def total(frame: pl.LazyFrame, name: str) -> pl.LazyFrame:
        return frame.group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum()
                                        .alias(name))

    mpi_iv = iv.filter(host_comm)
    gpu_iv = iv.filter(pl.col("cat").is_in(("runtime", "driver", "sync")))
    thread = threads.lazy()
    for part in (total(c_seg, "covered_ns"), total(n_seg, "runtime_ns"),
                 _lengths(mpi_iv, keys, region, "mpi_ns"),
                 _lengths(gpu_iv, keys, region, "gpu_ns")):
        thread = thread.join(part, on=keys, how="left")
    per_t_q = (thread.with_columns(pl.exclude(keys).fill_null(0))
               .with_columns(useful_ns=pl.col("covered_ns") - pl.col("runtime_ns"))
               .sort(keys))
    # One collect_all: the segment unions are shared by the three queries (Polars'
    # common-subplan elimination) instead of being computed once per query.
    per_t, proc_df, mpi_df = pl.collect_all(
        [per_t_q, proc, _lengths(mpi_iv, ["rank"], region, "m")])
    ranks = sorted(set(per_t["rank"].to_list()))
    proc_u = dict(proc_df.iter_rows())
    rank_mpi = dict(mpi_df.iter_rows())
    t_rank = _rank_runtime(region)
    useful = [int(proc_u.get(r, 0)) for r in ranks]
    T = region.runtime_ns
    mean_u, max_u = sum(useful) / len(useful), max(useful)
    offload = int(per_t["gpu_ns"].sum()) > 0
    # GPU code (TALP's host hierarchy): load balance and communication efficiency from
    # MPI's point of view (time outside MPI; waiting for the device counts there), and
    # device offload efficiency = useful / outside-MPI time. The product is still
    # mean useful / T.
    basis = ([t_rank.get(r, T) - int(rank_mpi.get(r, 0)) for r in ranks] if offload
             else useful)
    mean_b, max_b = sum(basis) / len(basis), max(basis)
    lb, comm_e = _ratio(mean_b, max_b), _ratio(max_b, T)
    doe = _ratio(sum(useful), sum(basis)) if offload else None
    rows.add("host", "host_parallel_efficiency", _mul(lb, comm_e, doe) if offload
             else _mul(lb, comm_e))
    rows.add("host", "host_load_balance", lb, "host_parallel_efficiency", 1)
    rows.add("host", "host_communication_efficiency", comm_e, "host_parallel_efficiency", 1)
    if offload:
        rows.add("host", "device_offload_efficiency", doe, "host_parallel_efficiency", 1)
    _replay_rows(trace, view, region, ranks, max_b, rows, notes)
    _hybrid_rows(per_t, ranks, rank_mpi, t_rank, T, bool(state_ranks)
                 or _has(view, "openmp"), rows)
    rows.add("host", "host_runtime_ns", T)
    rows.add("host", "host_useful_mean_ns", mean_u)
    rows.add("host", "host_useful_max_ns", max_u)
    comm = [int(rank_mpi.get(r, 0)) for r in ranks]
    per_rank.append(pl.DataFrame({
        "scope": [region.scope] * len(ranks), "side": ["host"] * len(ranks),
        "rank": ranks, "device": [None] * len(ranks), "useful_ns": useful, "comm_ns": comm,
        "idle_ns": [max(0, t_rank.get(r, T) - u - c) for r, u, c in zip(ranks, useful, comm,
                                                                      strict=True)],
        "active_ns": [u + c for u, c in zip(useful, comm, strict=True)],
        "runtime_ns": [t_rank.get(r, T) for r in ranks],
        "comm_kernel_ns": [None] * len(ranks), "transfer_ns": [None] * len(ranks),
    }, schema_overrides={"device": pl.Int32, "rank": pl.Int32, "comm_kernel_ns": pl.Int64,
                         "transfer_ns": pl.Int64}).select(*PER_RANK_COLUMNS))
    return per_t.select(*keys, "useful_ns")


def _useful_by_rank(events: pl.DataFrame) -> pl.DataFrame:
    """Per rank (columns rank, useful_ns), the ns during which the thread level (running
    sum of ``d``) is > 0 and no helper-thread collective runs (running sum of ``b`` <= 0),
    from the +-1 events (rank, ts, d, b): one sort by (rank, ts). Each rank's ``d`` and
    ``b`` sum to 0, so one running sum over all ranks is each rank's own; events at the
    same ts add no time between them, so the level after the last of them counts."""
    import numpy as np
    import polars as pl

    rank = events["rank"].to_numpy().astype(np.int64, copy=False)
    ts = events["ts"].to_numpy().astype(np.int64, copy=False)
    order = np.lexsort((ts, rank))
    r, t = rank[order], ts[order]
    level = np.cumsum(events["d"].to_numpy()[order], dtype=np.int64)
    blocked = np.cumsum(events["b"].to_numpy()[order], dtype=np.int64)
    ok = (r[1:] == r[:-1]) & (level[:-1] > 0) & (blocked[:-1] <= 0)
    gap, rr = (t[1:] - t[:-1])[ok], r[:-1][ok]
    first = np.flatnonzero(np.r_[True, rr[1:] != rr[:-1]]) if len(rr) else np.zeros(0, int)
    return pl.DataFrame({
        "rank": pl.Series("rank", rr[first], dtype=pl.Int32),
        "useful_ns": pl.Series("useful_ns", np.add.reduceat(gap, first) if len(first)
                               else gap, dtype=pl.Int64)})


def _has(view: Trace, category: str) -> bool:
    import polars as pl

    return bool(view.intervals.filter(pl.col("category").cast(pl.String) == category)
                .select("rank").head(1).collect().height)


def _replay_rows(trace: Trace, view: Trace, region: Region, ranks: list[int], max_u: int,
                 rows: Rows, notes: list[str]) -> None:
    """Serialisation and transfer efficiency from the ideal-network replay."""
    import polars as pl

    from traceatlas.ops.replay import ideal_replay

    if not _has(view, "mpi"):
        return
    if region.window is None:
        notes.append("serialisation/transfer efficiency not computed for annotation "
                     "regions (per-rank windows differ; no common replay window)")
        return
    host_tracks = trace.tracks.filter(pl.col("kind").cast(pl.String) == "host_thread") \
        .select(pl.col("rank").cast(pl.Int32), pl.col("track_id").cast(pl.Int32))
    mpi = (view.intervals.filter(pl.col("category").cast(pl.String) == "mpi")
           .with_columns(pl.col("rank").cast(pl.Int32), pl.col("track_id").cast(pl.Int32))
           .join(host_tracks, on=["rank", "track_id"], how="semi")
           .select("rank", "start_ns", "end_ns", "name", "collective", "process_group")
           .collect())
    messages = view.messages.select("src_rank", "dst_rank", "send_start_ns",
                                    "recv_end_ns").collect()
    rep = ideal_replay(mpi, messages, ranks, region.window)
    T = region.runtime_ns
    ser, te = _ratio(max_u, rep.ideal_runtime_ns), _ratio(rep.ideal_runtime_ns, T)
    rows.add("host", "host_serialisation_efficiency", ser, "host_communication_efficiency", 2)
    rows.add("host", "host_transfer_efficiency", te, "host_communication_efficiency", 2)
    rows.add("host", "host_ideal_runtime_ns", rep.ideal_runtime_ns)
    notes.append(f"ideal-network replay: {rep.blocks} MPI blocks, {rep.messages} messages, "
                 f"{rep.collective_instances} collective instances; T^ideal "
                 f"{rep.ideal_runtime_ns} ns of T {T} ns")
    if rep.messages_outside:
        notes.append(f"{rep.messages_outside} messages not used by the replay: received "
                     "outside the window, sent before it, or between ranks without host "
                     "activity")
    if rep.messages_unplaced:
        notes.append(f"{rep.messages_unplaced} messages end outside any MPI call of the "
                     "receiver: not used as replay dependencies")


def _hybrid_rows(per_t: pl.DataFrame, ranks: list[int], rank_mpi: dict[int, int],
                 t_rank: dict[int, int], T: int, threaded: bool, rows: Rows) -> None:
    """A.3 multiplicative hybrid split (MPI level x OpenMP/thread level)."""
    import polars as pl

    counts = per_t.group_by("rank").agg(pl.len().alias("n"))["n"]
    if not threaded or counts.max() is None or int(counts.max()) < 2:  # type: ignore[arg-type]
        return
    u = [int(v) for v in per_t["useful_ns"].to_list()]
    h_lb, h_ce = _ratio(sum(u) / len(u), max(u)), _ratio(max(u), T)
    out_mpi = [t_rank.get(r, T) - int(rank_mpi.get(r, 0)) for r in ranks]
    m_lb, m_ce = _ratio(sum(out_mpi) / len(out_mpi), max(out_mpi)), _ratio(max(out_mpi), T)
    h_pe, m_pe = _mul(h_lb, h_ce), _mul(m_lb, m_ce)
    o_lb = None if h_lb is None or not m_lb else h_lb / m_lb
    o_ce = None if h_ce is None or not m_ce else h_ce / m_ce
    root = "host_hybrid_parallel_efficiency"
    rows.add("host", root, h_pe)
    rows.add("host", "host_hybrid_load_balance", h_lb, root, 1)
    rows.add("host", "host_hybrid_communication_efficiency", h_ce, root, 1)
    rows.add("host", "host_mpi_parallel_efficiency", m_pe, root, 1)
    rows.add("host", "host_mpi_load_balance", m_lb, "host_mpi_parallel_efficiency", 2)
    rows.add("host", "host_mpi_communication_efficiency", m_ce,
             "host_mpi_parallel_efficiency", 2)
    rows.add("host", "host_openmp_parallel_efficiency", _mul(o_lb, o_ce), root, 1)
    rows.add("host", "host_openmp_load_balance", o_lb, "host_openmp_parallel_efficiency", 2)
    rows.add("host", "host_openmp_communication_efficiency", o_ce,
             "host_openmp_parallel_efficiency", 2)


# -- device side ----------------------------------------------------------------------------

def _device(trace: Trace, view: Trace, region: Region, nccl_useful: bool, rows: Rows,
            notes: list[str], per_rank: list[pl.DataFrame]) -> None:
    """Device rows (B.2) over every (rank, device) with device work."""
    import polars as pl

    keys = ["rank", "device"]
    cat = pl.col("category").cast(pl.String)
    devices = (trace.intervals.filter(cat.is_in(DEVICE_WORK))
               .select(pl.col("rank").cast(pl.Int32),
                       pl.col("device").fill_null(-1).cast(pl.Int32)).unique()
               .sort(keys).collect())
    if devices.height == 0:
        return
    work = view.intervals.filter(cat.is_in(DEVICE_WORK)).select(
        pl.col("rank").cast(pl.Int32), pl.col("device").fill_null(-1).cast(pl.Int32),
        cat.alias("cat"), "start_ns", "end_ns")
    useful_cats = ("kernel", "comm_kernel") if nccl_useful else ("kernel",)
    table = devices.lazy()
    for part in (_lengths(work.filter(pl.col("cat").is_in(useful_cats)), keys, region,
                          "useful_ns"),
                 _lengths(work.filter(pl.col("cat").is_in(("kernel", "comm_kernel"))), keys,
                          region, "kernels_ns"),
                 _lengths(work, keys, region, "active_ns")):
        table = table.join(part, on=keys, how="left")
    per = table.with_columns(pl.col("useful_ns", "kernels_ns", "active_ns").fill_null(0)) \
        .sort(keys).collect()
    T = region.runtime_ns
    u = [int(v) for v in per["useful_ns"].to_list()]
    a = [int(v) for v in per["active_ns"].to_list()]
    n = len(u)
    lb = _ratio(sum(u), n * max(u))
    ce = _ratio(max(u), max(a))
    oe = _ratio(max(a), T)
    rows.add("device", "device_parallel_efficiency", _mul(lb, ce, oe))
    rows.add("device", "device_load_balance", lb, "device_parallel_efficiency", 1)
    rows.add("device", "device_communication_efficiency", ce, "device_parallel_efficiency", 1)
    rows.add("device", "device_orchestration_efficiency", oe, "device_parallel_efficiency", 1)
    rows.add("device", "device_runtime_ns", T)
    rows.add("device", "device_useful_max_ns", max(u))
    rows.add("device", "device_active_max_ns", max(a))
    rows.add("device", "device_count", n)
    notes.append("device useful = compute kernels" + (
        " and NCCL/comm kernels (TALP); device_communication_efficiency then measures "
        "memory transfers (memcpy/memset) only" if nccl_useful else
        " only; NCCL kernels and memcpy/memset (host-device transfers) count as "
        "communication and transfers (BSC device model, nsys2prv convention): "
        "device_communication_efficiency is communication and transfers efficiency"))
    per_rank.append(per.with_columns(
        scope=pl.lit(region.scope), side=pl.lit("device"),
        comm_ns=pl.col("active_ns") - pl.col("useful_ns"),
        comm_kernel_ns=pl.col("kernels_ns") - pl.col("useful_ns"),
        transfer_ns=pl.col("active_ns") - pl.col("kernels_ns"),
        idle_ns=pl.lit(T, pl.Int64) - pl.col("active_ns"), runtime_ns=pl.lit(T, pl.Int64),
    ).select(*PER_RANK_COLUMNS))
