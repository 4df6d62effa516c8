"""Rule ``memcpy_stream``: memory copies on a compute stream, not hidden by kernels.

A *compute stream* runs compute kernels (``breakdown`` by stream: ``compute_ns`` > 0); a
copy or memset there blocks the kernels queued behind it. Per rank and device: M =
the memcpy/memset intervals on its compute streams, K = its kernels and communication
kernels (any stream); exposed = |M or K| - |K| (unions): time the device spends on those
copies with no kernel running anywhere on it.

Trigger: exposed > 0 on some rank (computed one rank at a time: the ranks with copies
on a compute stream, each rank's part read alone, on the engine's workers when the report
has one: ``per_rank``).
Cost (ns): exposed, summed over the rank's devices; the largest over the ranks.
Statement: "Memory copies stall the compute stream: on rank R, NAME on stream S leaves the
GPU doing nothing but copies for X".

Machine-readable: ``ranks`` = [R]; ``where`` = {``op``: the framework op that issued
most of the costliest copy's calls (same ``external_id``), when known}; ``per_step.ms``
(with steps) = median over R's steps of the same exposed time in the step window, and
``count`` = median number of such copies per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceatlas.advisor import per_rank, stepwise
from traceatlas.advisor.base import Context, Finding, fmt_ns, heaviest, per_rank_sum, short_name
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

NAME = "memcpy_stream"


def check(ctx: Context) -> list[Finding]:
    """One finding for the rank whose compute-stream copies cost the most."""
    import polars as pl

    by_stream = ctx.result("breakdown", by="stream")
    by_device = ctx.result("breakdown")
    if by_stream is None or by_device is None:
        return []
    streams = by_stream.table.filter((pl.col("compute_ns") > 0) & (pl.col("memory_ns") > 0))
    if streams.height == 0:
        return []
    on_stream = per_rank_sum(streams, "memory_ns")
    keys = streams.select("rank", "device", "stream")
    cost: dict[int, int] = {}
    for part in per_rank.map_ranks(ctx, RANK_EXPOSED, {int(x) for x in keys["rank"]}, keys):
        cost.update(part)
    if not cost or max(cost.values()) <= 0:
        return []
    rank, worst = heaviest(cost)
    kernels, memory = _rows(ctx.trace.select(ranks=[rank]),
                            keys.filter(pl.col("rank") == rank))
    mine = streams.filter(pl.col("rank") == rank)
    names = (ctx.trace.intervals
             .filter((pl.col("rank") == rank)
                     & pl.col("category").is_in(("memcpy", "memset"))
                     & pl.col("stream").is_in(mine["stream"].to_list()))
             .group_by(pl.col("name").cast(pl.String), "stream")
             .agg(pl.col("dur_ns").sum(), pl.len().alias("n"))
             .sort("dur_ns", "name", descending=[True, False]).collect())
    top, stream = (str(names["name"][0]), int(names["stream"][0])) if names.height else (
        "memory copies", int(mine["stream"][0]))
    span = per_rank_sum(by_device.table, "span_ns").get(rank, 0)
    return [Finding(
        rule=NAME,
        statement=(f"Memory copies stall the compute stream: on rank {rank}, "
                   f"{short_name(top)} on stream {stream} leaves the GPU doing nothing but "
                   f"copies for {fmt_ns(worst)}"),
        cost_ns=worst,
        evidence=(f"rank {rank}: copies/memsets on compute streams "
                  f"{fmt_ns(on_stream[rank])}, of which with no kernel running on the "
                  f"device {fmt_ns(worst)}; largest: "
                  + ", ".join(f"{short_name(n, 40)} (stream {s}) {fmt_ns(d)} x{c}"
                              for n, s, d, c in names.head(3).rows())
                  + f"; window {ctx.when(*ctx.window)}"),
        next_step=("Move copies off the compute stream: pinned host memory with "
                   "non_blocking=True on a side stream, prefetch the next batch, or keep "
                   "the data on the GPU."),
        command=ctx.command("breakdown", "--ranks", str(rank), "-p", "by=stream"),
        metric="device_communication_efficiency",
        efficiency=1 - worst / span if span else None,
        cause="copy_on_compute_stream",
        ranks=[rank],
        per_step=_per_step(ctx, rank, kernels, memory),
        where=_op(ctx, rank, top, stream),
    )]


def _op(ctx: Context, rank: int, name: str, stream: int) -> dict[str, str]:
    """{"op": the cpu_op sharing ``external_id`` with most ``name`` copies on ``stream``}."""
    import polars as pl

    iv = ctx.trace.intervals.filter(pl.col("rank") == rank)
    ids = iv.filter((pl.col("name").cast(pl.String) == name) & (pl.col("stream") == stream)
                    & pl.col("external_id").is_not_null()).select("external_id")
    ops = (iv.filter(pl.col("category") == "cpu_op")
           .join(ids, on="external_id", how="semi")
           .group_by(pl.col("name").cast(pl.String)).len()
           .sort("len", "name", descending=[True, False]).head(1).collect())
    return {"op": str(ops["name"][0])} if ops.height else {}


def _per_step(ctx: Context, rank: int, kernels: pl.LazyFrame, memory: pl.LazyFrame
              ) -> dict[str, float] | None:
    """Median over ``rank``'s steps of |M or K| - |K| in the step window (ms), and of the
    number of compute-stream copies per step."""
    import polars as pl

    steps = stepwise.windows(ctx)
    if steps is None:
        return None
    steps = steps.filter(pl.col("rank") == rank)
    k = kernels.filter(pl.col("rank") == rank).collect()
    m = memory.filter(pl.col("rank") == rank).collect()
    both = stepwise.union_per_step(pl.concat([k, m]), steps, ("device",), "mk")
    only = stepwise.union_per_step(k, steps, ("device",), "k")
    frame = (both.join(only, on=["rank", "step", "device"], how="left")
             .with_columns(exposed=pl.col("mk") - pl.col("k").fill_null(0)))
    exposed = stepwise.per_rank_step(frame, rank, "exposed")
    counts = stepwise.assign(m.select("rank", "start_ns", "end_ns"), steps)
    count = {int(s): n for s, n in counts.group_by("step").len().rows()}
    every = [int(s) for s in steps["step"].unique().to_list()]
    return stepwise.median_ms([exposed.get(s, 0.0) for s in every],
                              [float(count.get(s, 0)) for s in every])


RANK_EXPOSED = "traceatlas.advisor.memcpy_stream:rank_exposed"


def rank_exposed(view: Trace, rank: int, streams: pl.DataFrame) -> dict[int, int]:
    """The mapped per-rank step (``per_rank.map_ranks``), on ``view`` (one rank): its
    exposed copy time (``_exposed``) on its compute ``streams``."""
    import polars as pl

    return _exposed(*_rows(view, streams.filter(pl.col("rank") == rank)))


def _rows(trace: Trace, streams: pl.DataFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(K, M) of ``trace`` (one rank's view): kernels and communication kernels, and the
    memcpy/memset rows on the compute ``streams`` (rank, device, stream, category,
    start_ns, end_ns)."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    device = pl.col("category").is_in(("kernel", "comm_kernel", "memcpy", "memset"))
    rows = trace.intervals.filter(device).select(
        "rank", pl.col("device").fill_null(-1).cast(pl.Int64),
        pl.col("stream").fill_null(-1).cast(pl.Int64), cat.alias("category"), "start_ns",
        "end_ns")
    kernels = rows.filter(pl.col("category").is_in(("kernel", "comm_kernel")))
    memory = rows.filter(pl.col("category").is_in(("memcpy", "memset"))).join(
        streams.lazy().with_columns(pl.col("device").cast(pl.Int64),
                                    pl.col("stream").cast(pl.Int64)),
        on=["rank", "device", "stream"], how="semi")
    return kernels, memory


def _exposed(kernels: pl.LazyFrame, memory: pl.LazyFrame) -> dict[int, int]:
    """Per rank: |M or K| - |K| summed over devices (ns)."""
    import polars as pl

    keys = ["rank", "device"]
    both = union_ns(pl.concat([kernels, memory]), keys, "mk")
    only_k = union_ns(kernels, keys, "k")
    frame = (both.join(only_k, on=keys, how="left")
             .with_columns(exposed=pl.col("mk") - pl.col("k").fill_null(0)).collect())
    return per_rank_sum(frame, "exposed")
