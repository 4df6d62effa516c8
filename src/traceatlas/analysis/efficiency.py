"""``efficiency``: the POP efficiency model, host side and device side, for the whole run
or one region. Formulas: ``formats-and-models.md`` A (host) and B.2 (device). All times
are integer ns; efficiencies are fractions in [0, 1].

Region (param ``region``) and runtime ``T``:

- ``""`` (whole run): every rank's window is [first interval start, last interval end]
  over all ranks and tracks; ``T`` = its length.
- ``step:N``: the window is from the earliest to the latest end of step N over the ranks
  (``Trace.select(step=N)`` spans); ``window:START:END``: the select syntax (relative to
  the trace start, or ``@`` epoch ns; an open side is the trace's first/last time).
  Intervals are CLIPPED to the window (not just kept when they overlap); ``T`` = window
  length.
- ``annotation:REGEX``: per rank, the union of the spans of the user annotations whose
  name matches (categories annotation, nvtx, region; regex search) is that rank's
  window; ``T`` = the largest such union over the ranks. No ideal replay (the windows
  differ per rank): serialisation and transfer efficiency are left out.

Host side (host-thread tracks). Useful time of a thread:

- Paraver traces with states: the thread's state Running (state value 1).
- Otherwise: the time covered by the thread's intervals (union) minus the time inside
  the parallel runtimes: category ``mpi``, and collectives run by the host under other
  categories (``ops.host_activity.HOST_COLLECTIVE``: gloo, MPI, c10d ops), which count as
  MPI time everywhere below (a gloo all-reduce is communication on the host; while one
  runs on a helper thread, no thread of the rank is useful); ``sync``; ``runtime``/``driver``
  calls whose name contains ``Synchronize`` (blocking device-runtime calls, e.g.
  cudaDeviceSynchronize, cudaStreamSynchronize, hipDeviceSynchronize); ``openmp``
  intervals whose name is a synchronisation construct (barrier, wait, lock, flush,
  taskgroup). Time outside any recorded interval is not useful (an idle OpenMP worker).

``U_p`` (process useful) = time at least one thread of rank p is useful. Host ranks: the
ranks with at least one host-thread interval. ``host_load_balance`` = mean_p U_p /
max_p U_p; ``host_communication_efficiency`` = max_p U_p / T; ``host_parallel_efficiency``
= their product (= mean U / T). With MPI calls and a single window:
``host_transfer_efficiency`` = T^ideal / T and ``host_serialisation_efficiency`` =
max_p U_p / T^ideal from ``traceatlas.ops.replay`` (bursts = time outside MPI), so that
CommE = SerE x TE exactly.

Hybrid split (when OpenMP intervals or Paraver states exist and a rank has 2+ threads;
A.3 multiplicative model): per thread U_{p,t}; ``host_hybrid_parallel_efficiency`` =
mean_{p,t} U / T (= hybrid LB x hybrid CommE); MPI level from OutMPI_p = T_p - (MPI
union of rank p): ``host_mpi_load_balance`` = mean/max OutMPI, ``host_mpi_communication_
efficiency`` = max OutMPI / T, ``host_mpi_parallel_efficiency`` = product; OpenMP level =
hybrid / MPI for LB, CommE and PE.

GPU codes (host threads spend time in device-runtime calls: runtime, driver, sync): the
host tree follows TALP's hierarchy, host_parallel_efficiency = load balance x
communication efficiency x ``device_offload_efficiency``, where load balance and
communication efficiency are taken from MPI's point of view on OutMPI_p = T_p - (MPI
union of rank p) (waiting for the device is not communication), and
``device_offload_efficiency`` = sum_p U_p / sum_p OutMPI_p (the share of the time outside
MPI that the host does useful work instead of waiting for or driving the device). The
product is still mean U / T. SerE = max OutMPI / T^ideal there, so CommE = SerE x TE.

Device side (B.2; per physical device = (rank, device); streams flattened): Useful_d =
union of compute kernels (category ``kernel``; with ``nccl_useful=true`` also
``comm_kernel``, TALP's convention; default nsys2prv's and the BSC device model's: NCCL
kernels and memcpy/memset are communication and transfers); Active_d = union of kernels,
comm kernels, memcpy, memset; comm = Active - Useful (data movement not overlapped by
useful kernels), split into comm kernels = |kernels or comm kernels| - Useful and
transfers = Active - |kernels or comm kernels| (memcpy/memset under no kernel; host-device
copies included); idle = T - Active. ``device_load_balance`` = sum U / (N max U);
``device_communication_efficiency`` (shown as "communication and transfers efficiency":
host-device copies count here, so a run without any NCCL kernel can score low) = max U /
max Active; ``device_orchestration_efficiency`` = max Active / T;
``device_parallel_efficiency`` = their product (= sum U / (N T)). Devices: every (rank,
device) with device work anywhere in the trace (idle in the region counts as 0).
Host and device global efficiencies are never multiplied together.

Main table: scope, side, metric, value, parent (parent metric in the tree; null for a
root), level (0 = root), label (the words a report shows, ``efficiency_labels``; null for
the raw inputs). Raw inputs are rows named ``*_ns`` (parent null, level 0).
Extra tables: ``per_rank`` (scope, side, rank, device, useful_ns, comm_ns, comm_kernel_ns,
transfer_ns, idle_ns, active_ns, runtime_ns; host comm = MPI time, idle = T_p - useful -
comm, active = useful + comm, comm_kernel_ns and transfer_ns null; device comm =
comm_kernel_ns + transfer_ns), ``per_thread`` (rank, track_id, useful_ns).

Engines (``analysis.partitioned``): declared ``partition = "message"`` with two passes, so
``--engine local`` / ``dask`` run it in rank batches: the region's global values (T, the
window) from ``prepare``/``prepared`` (``efficiency_region``), per-thread / per-rank /
per-device ns and the replay's inputs (MPI calls, each message once) from ``partial``
(``efficiency_partial``); ``merge`` computes every row, the replay included. ``run`` is
the same code on one batch holding every rank. Bound: docs/definitions.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceatlas.analysis import efficiency_partial as part
from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.efficiency_labels import LABELS, metric_label
from traceatlas.analysis.efficiency_partial import (
    OMP_SYNC,
    RUNNING,
    SYNC_CALL,
    clip,
)
from traceatlas.analysis.efficiency_partial import useful_by_rank as _useful_by_rank
from traceatlas.analysis.efficiency_region import (
    ANNOTATION_CATEGORIES,
    Region,
    batch_region,
    probe,
    resolve,
    resolve_region,
)
from traceatlas.analysis.partitioned import MESSAGE

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

__all__ = ["ANNOTATION_CATEGORIES", "OMP_SYNC", "PER_RANK_COLUMNS", "RUNNING", "SYNC_CALL",
           "Efficiency", "Region", "Rows", "_useful_by_rank", "clip", "resolve_region"]

PER_RANK_COLUMNS = ("scope", "side", "rank", "device", "useful_ns", "comm_ns",
                    "comm_kernel_ns", "transfer_ns", "idle_ns", "active_ns", "runtime_ns")
"""Columns of the ``per_rank`` extra table."""
RESOLVED = ("_scope", "_window", "_runtime_ns", "_mpi")
"""Parameters ``prepared`` adds: the region over every batch (``efficiency_region``)."""


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


@dataclass(frozen=True)
class Merged:
    """The batches' tables concatenated in rank order (``efficiency_partial``) and the
    region over every batch."""

    threads: pl.DataFrame
    ranks: pl.DataFrame
    devices: pl.DataFrame
    mpi_calls: pl.DataFrame
    messages: pl.DataFrame
    state: bool
    openmp: bool
    mpi: bool
    scope: str
    window: tuple[int, int] | None
    runtime_ns: int


class Efficiency:
    """POP efficiency model: host (MPI, OpenMP, GPU host) and device trees."""

    name = "efficiency"
    description = ("POP efficiency model: host load balance, communication, serialisation, "
                   "transfer; device load balance, communication, orchestration")
    params = (
        Param("region", str, "", "whole run (empty), step:N, annotation:REGEX or "
              "window:START:END (select syntax, e.g. window:1.5s:2s)"),
        Param("nccl_useful", bool, False, "count NCCL/comm kernels as useful device time "
              "(TALP convention); default false: communication (nsys2prv convention)"),
    )
    requires = ("intervals",)
    partition = MESSAGE
    """In rank batches (``analysis.partitioned``), two passes: ``prepare`` sends each
    batch's share of the region (span, step span, annotation union, MPI present);
    ``prepared`` fixes the region, T and window for every batch; ``partial`` sends the
    per-thread, per-rank and per-device times (and the replay's MPI calls and messages,
    each message read from the one part that stores it: ``message`` partition); ``merge``
    computes every row as the whole run does."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Efficiency rows; extra tables per_rank and per_thread."""
        given = {**params, **self.prepared([self.prepare(trace, params)], params)}
        return self.merge([self.partial(trace, given)], given)

    def prepare(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """This batch's share of the region's global values (``efficiency_region.probe``)."""
        return Result(probe(trace, str(params.get("region", ""))))

    def prepared(self, partials: Sequence[Result], params: Mapping[str, Any]
                 ) -> dict[str, Any]:
        """The region over every batch: scope, window, T, whether any MPI call exists."""
        import polars as pl

        found = resolve(pl.concat([p.table for p in partials]),
                        str(params.get("region", "")))
        return {"_scope": found["scope"], "_window": found["window"],
                "_runtime_ns": found["runtime_ns"], "_mpi": found["mpi"]}

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """The batch's tables (``efficiency_partial``); ``params`` hold ``prepared``'s
        region. Table: one row of flags (state, openmp, mpi)."""
        import polars as pl

        text = str(params.get("region", ""))
        resolved = {"scope": params["_scope"], "window": params["_window"],
                    "runtime_ns": params["_runtime_ns"]}
        region = batch_region(trace, text, resolved)
        view = trace if region.window is None or region.scope == "run" else trace.select(
            window=region.window)
        threads, ranks, state = part.host(trace, view, region)
        devices = part.devices(trace, view, region, bool(params.get("nccl_useful", False)))
        mpi = part.has_category(view, "mpi")
        if params["_mpi"] and region.window is not None:
            mpi_calls, messages = part.replay_inputs(trace, view, region)
        else:
            mpi_calls, messages = pl.DataFrame(), pl.DataFrame()
        flags = pl.DataFrame({"state": [state], "openmp": [part.has_category(view, "openmp")],
                              "mpi": [mpi]})
        return Result(flags, extra={"threads": threads, "ranks": ranks, "devices": devices,
                                    "mpi_calls": mpi_calls, "messages": messages})

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """Every row of the model from the batches' tables (exact: integer ns sums)."""
        import polars as pl

        window = params["_window"]

        def cat(key: str) -> pl.DataFrame:
            frames = [p.extra[key] for p in partials if p.extra[key].width]
            return pl.concat(frames, how="vertical") if frames else pl.DataFrame()

        flags = pl.concat([p.table for p in partials])
        data = Merged(
            threads=cat("threads").sort("rank", "track_id"), ranks=cat("ranks").sort("rank"),
            devices=cat("devices").sort("rank", "device"), mpi_calls=cat("mpi_calls"),
            messages=cat("messages"), state=bool(flags["state"].any()),
            openmp=bool(flags["openmp"].any()), mpi=bool(flags["mpi"].any()),
            scope=str(params["_scope"]),
            window=None if window is None else (int(window[0]), int(window[1])),
            runtime_ns=int(params["_runtime_ns"]))
        rows = Rows(data.scope, [])
        notes: list[str] = []
        per_rank: list[pl.DataFrame] = []
        per_thread = _host(data, rows, notes, per_rank)
        nccl_useful = bool(params.get("nccl_useful", False))
        _device(data, nccl_useful, rows, notes, per_rank)
        table = pl.DataFrame(rows.rows, schema={
            "scope": pl.String, "side": pl.String, "metric": pl.String,
            "value": pl.Float64, "parent": pl.String, "level": pl.Int64})
        table = table.with_columns(label=pl.Series(
            [metric_label(m, nccl_useful) if m in LABELS else None for m in table["metric"]],
            dtype=pl.String))
        ranks = pl.concat(per_rank, how="diagonal_relaxed") if per_rank else pl.DataFrame()
        return Result(table, extra={"per_rank": ranks, "per_thread": per_thread},
                      notes=notes)


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

def _host(data: Merged, rows: Rows, notes: list[str], per_rank: list[pl.DataFrame]
          ) -> pl.DataFrame:
    """Host rows; returns the per_thread table."""
    import polars as pl

    keys = ["rank", "track_id"]
    if data.threads.height == 0:
        return part.empty_threads().select(*keys, "useful_ns")
    per_t = data.threads
    ranks = [int(r) for r in data.ranks["rank"].to_list()]
    useful = [int(v) for v in data.ranks["useful_ns"].to_list()]
    rank_mpi = dict(zip(ranks, (int(v) for v in data.ranks["mpi_ns"]), strict=True))
    t_rank = dict(zip(ranks, (int(v) for v in data.ranks["runtime_ns"]), strict=True))
    T = data.runtime_ns
    mean_u, max_u = sum(useful) / len(useful), max(useful)
    offload = int(per_t["gpu_ns"].sum()) > 0
    # GPU code (TALP's host hierarchy): load balance and communication efficiency from
    # MPI's point of view (time outside MPI; waiting for the device counts there), and
    # device offload efficiency = useful / outside-MPI time. The product is still
    # mean useful / T.
    basis = [t_rank[r] - rank_mpi[r] for r in ranks] if offload else useful
    mean_b, max_b = sum(basis) / len(basis), max(basis)
    lb, comm_e = _ratio(mean_b, max_b), _ratio(max_b, T)
    doe = _ratio(sum(useful), sum(basis)) if offload else None
    rows.add("host", "host_parallel_efficiency", _mul(lb, comm_e, doe) if offload
             else _mul(lb, comm_e))
    rows.add("host", "host_load_balance", lb, "host_parallel_efficiency", 1)
    rows.add("host", "host_communication_efficiency", comm_e, "host_parallel_efficiency", 1)
    if offload:
        rows.add("host", "device_offload_efficiency", doe, "host_parallel_efficiency", 1)
    _replay_rows(data, ranks, max_b, rows, notes)
    _hybrid_rows(per_t, ranks, rank_mpi, t_rank, T, data.state or data.openmp, rows)
    rows.add("host", "host_runtime_ns", T)
    rows.add("host", "host_useful_mean_ns", mean_u)
    rows.add("host", "host_useful_max_ns", max_u)
    comm = [rank_mpi[r] for r in ranks]
    per_rank.append(pl.DataFrame({
        "scope": [data.scope] * len(ranks), "side": ["host"] * len(ranks),
        "rank": ranks, "device": [None] * len(ranks), "useful_ns": useful, "comm_ns": comm,
        "idle_ns": [max(0, t_rank[r] - u - c) for r, u, c in zip(ranks, useful, comm,
                                                                  strict=True)],
        "active_ns": [u + c for u, c in zip(useful, comm, strict=True)],
        "runtime_ns": [t_rank[r] for r in ranks],
        "comm_kernel_ns": [None] * len(ranks), "transfer_ns": [None] * len(ranks),
    }, schema_overrides={"device": pl.Int32, "rank": pl.Int32, "comm_kernel_ns": pl.Int64,
                         "transfer_ns": pl.Int64}).select(*PER_RANK_COLUMNS))
    return per_t.select(*keys, "useful_ns")


def _replay_rows(data: Merged, ranks: list[int], max_u: int, rows: Rows,
                 notes: list[str]) -> None:
    """Serialisation and transfer efficiency from the ideal-network replay."""
    from traceatlas.ops.replay import ideal_replay

    if not data.mpi:
        return
    if data.window is None:
        notes.append("serialisation/transfer efficiency not computed for annotation "
                      "regions (per-rank windows differ; no common replay window)")
        return
    rep = ideal_replay(data.mpi_calls, data.messages, ranks, data.window)
    T = data.runtime_ns
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

def _device(data: Merged, nccl_useful: bool, rows: Rows, notes: list[str],
            per_rank: list[pl.DataFrame]) -> None:
    """Device rows (B.2) over every (rank, device) with device work."""
    import polars as pl

    per = data.devices
    if per.height == 0:
        return
    T = data.runtime_ns
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
        scope=pl.lit(data.scope), side=pl.lit("device"),
        comm_ns=pl.col("active_ns") - pl.col("useful_ns"),
        comm_kernel_ns=pl.col("kernels_ns") - pl.col("useful_ns"),
        transfer_ns=pl.col("active_ns") - pl.col("kernels_ns"),
        idle_ns=pl.lit(T, pl.Int64) - pl.col("active_ns"), runtime_ns=pl.lit(T, pl.Int64),
    ).select(*PER_RANK_COLUMNS))
