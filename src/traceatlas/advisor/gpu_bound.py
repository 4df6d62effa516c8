"""Rule ``gpu_bound``: the device is busy for most of every step; the work is the cost.

Computed one rank at a time (each rank's part read alone, on the engine's workers when
the report has one: ``per_rank``). Per rank, the windows are
the steps (``steps`` analysis) or, without steps, the rank's whole span (first interval
start to last end). *Device busy* in a window is the union of the rank's compute device
activity (kernels, memcpy, memset; communication kernels are left to the
exposed-communication rule) clipped to it. The rank's *busy share* is the
median over its windows of busy / window.

Trigger: every rank with device activity has a busy share >= ``MIN_BUSY`` (0.9): the host
keeps the device fed, a host waiting for the device is then the healthy state, and the
advisor caps host-side findings (host wait, short kernels, launch-bound, offload
efficiency) at ``info``.
Cost (ns): the largest per-rank device busy time summed over its windows: the time the
work takes, which only faster kernels or less work shortens.
Statement: "GPU-bound: the device is busy 95% of each step on rank R; the time goes to
KERNEL (P % of device time), launched by OP".
Evidence: the top kernels and operators by device time (kernel -> its ``cpu_op`` through
the external id) and annotations (innermost around the launch); achieved TFLOP/s where
``cpu_op`` rows carry ``flops`` (Kineto ``with_flops=True``): the ops' FLOPs over the
device time of their kernels, against the device's dense bf16 (else fp16) tensor peak when
the trace names a device the known-GPU table (``analysis.gpu_peaks``, the roofline's)
knows (``deviceProperties``); otherwise it says the peak is unknown.
Fields: ``ranks`` the GPU-bound ranks; ``per_step.ms`` the median per-step device busy
time of the rank; ``where`` its top kernel, op and annotation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceatlas.advisor import per_rank
from traceatlas.advisor.base import Context, Finding, fmt_ns, short_name
from traceatlas.analysis import gpu_peaks

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

NAME = "gpu_bound"
MIN_BUSY = 0.9
"""A rank is GPU-bound when its device is busy at least this share of the median step."""
COMPUTE = ("kernel", "memcpy", "memset")
TENSOR_KINDS = ("bf16", "fp16")
"""The peak kinds (``gpu_peaks.KINDS``) quoted, first present wins."""
HOST_SIDE_CAUSES = frozenset({"launch_bound", "short_kernels", "untraced_host"})
HOST_SIDE_RULES = frozenset({"host_wait", "short_kernels"})
HOST_SIDE_METRICS = ("offload_efficiency", "orchestration_efficiency")


def check(ctx: Context) -> list[Finding]:
    """One finding when every rank with device work is GPU-bound."""
    import polars as pl

    busy = _busy_per_window(ctx)
    if busy.height == 0:
        return []
    per_rank = busy.group_by("rank").agg(
        share=(pl.col("busy_ns") / pl.col("dur_ns")).median(),
        busy_ns=pl.col("busy_ns").sum(), step_ms=pl.col("busy_ns").median() / 1e6,
        windows=pl.len()).sort("rank")
    if per_rank["share"].min() < MIN_BUSY:  # type: ignore[operator]
        return []
    row = per_rank.sort("busy_ns", "rank", descending=[True, False]).row(0, named=True)
    rank = int(row["rank"])
    kernels, ops, anns = _work(ctx, rank, busy.filter(pl.col("rank") == rank))
    total = int(kernels["dur_ns"].sum()) if kernels.height else 0
    where: dict[str, str] = {}
    if kernels.height:
        where["kernel"] = str(kernels["name"][0])
    if ops.height:
        where["op"] = str(ops["name"][0])
    if anns is not None and anns.height:
        where["annotation"] = str(anns["name"][0])
    shares = ", ".join(f"rank {int(r)} {s:.0%}" for r, s in
                       per_rank.select("rank", "share").iter_rows())
    top = (f"; the time goes to {short_name(where['kernel'])} "
           f"({int(kernels['dur_ns'][0]) / max(total, 1):.0%} of device time)"
           if "kernel" in where else "")
    by = f", launched by {where['op']}" if "op" in where else ""
    per_step = ({"ms": float(row["step_ms"])} if ctx.has("steps") else None)
    return [Finding(
        rule=NAME,
        statement=(f"GPU-bound: the device is busy {row['share']:.0%} of each "
                   f"{'step' if per_step else 'run'} on rank {rank} (median); "
                   f"host-side findings are informational{top}{by}"),
        cost_ns=int(row["busy_ns"]),
        evidence=(f"device busy share (kernels, memcpy, memset; median over "
                  f"{'steps' if per_step else 'the run'}): {shares}; rank {rank}: "
                  f"busy {fmt_ns(row['busy_ns'])}; "
                  + _listing("kernels", kernels, total) + "; "
                  + _listing("ops", ops, total)
                  + (("; " + _listing("annotations", anns, total))
                     if anns is not None and anns.height else "")
                  + "; " + _flops(ctx, rank, busy.filter(pl.col("rank") == rank))
                  + f"; window {ctx.when(*ctx.window)}"),
        next_step=("The host keeps the GPU fed; speed up the work itself: the top kernels "
                   "and ops above (lower precision or tensor-core friendly shapes, fused "
                   "or better kernels, less work per step), and compare the achieved "
                   "TFLOP/s with the device's peak."),
        command=ctx.command("kernels", "--ranks", str(rank)),
        cause="gpu_bound",
        ranks=[int(r) for r in per_rank["rank"]],
        per_step=per_step,
        where=where,
    )]


def cap_host_side(findings: list[Finding]) -> None:
    """When a ``gpu_bound`` finding is present: host-side findings (host wait, short
    kernels, launch-bound, offload/orchestration efficiency) become ``info``, in place."""
    if not any(f.rule == NAME for f in findings):
        return
    for f in findings:
        if (f.rule in HOST_SIDE_RULES or f.cause in HOST_SIDE_CAUSES
                or (f.metric or "").endswith(HOST_SIDE_METRICS)):
            f.severity = "info"


def _windows(ctx: Context) -> pl.DataFrame:
    """``rank, step, start_ns, end_ns, dur_ns``: the steps, else each rank's span."""
    import polars as pl

    if ctx.has("steps"):
        steps = ctx.result("steps")
        if steps is not None and steps.table.height:
            return steps.table.select("rank", pl.col("step").cast(pl.Int64), "start_ns",
                                      "end_ns", "dur_ns")
    return (ctx.trace.intervals.group_by("rank")
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
            .with_columns(step=pl.lit(-1, pl.Int64),
                          dur_ns=pl.col("end_ns") - pl.col("start_ns"))
            .select("rank", "step", "start_ns", "end_ns", "dur_ns").collect())


def _device(trace: Trace) -> pl.LazyFrame:
    import polars as pl

    return trace.intervals.filter(
        pl.col("category").is_in(COMPUTE)).select(
        "rank", pl.col("step").cast(pl.Int64), "start_ns", "end_ns", "correlation",
        "external_id",
        pl.col("name").cast(pl.String))


def _clipped(trace: Trace, windows: pl.DataFrame) -> pl.LazyFrame:
    """Compute device rows of ``trace`` clipped to the window of their step (the store's
    ``step`` column of the row; every row of a rank when the windows are the ranks'
    spans)."""
    import polars as pl

    w = windows.lazy().select("rank", "step", pl.col("start_ns").alias("w0"),
                              pl.col("end_ns").alias("w1"))
    device = _device(trace)
    if windows.height and (windows["step"] == -1).all():
        device = device.with_columns(step=pl.lit(-1, pl.Int64))
    return (device.join(w, on=["rank", "step"], how="inner")
            .with_columns(start_ns=pl.max_horizontal("start_ns", "w0"),
                          end_ns=pl.min_horizontal("end_ns", "w1"))
            .filter(pl.col("end_ns") > pl.col("start_ns"))
            .drop("w0", "w1"))


RANK_BUSY = "traceatlas.advisor.gpu_bound:rank_busy"


def rank_busy(view: Trace, rank: int, windows: pl.DataFrame) -> pl.DataFrame:
    """The mapped per-rank step (``per_rank.map_ranks``), on ``view`` (one rank):
    ``rank, step, dur_ns, busy_ns`` of its windows with device activity."""
    import polars as pl

    from traceatlas.ops.unions import union_ns

    mine = windows.filter(pl.col("rank") == rank)
    busy = union_ns(_clipped(view, mine), ["rank", "step"], "busy_ns")
    return (mine.lazy().join(busy, on=["rank", "step"], how="inner")
            .select("rank", "step", "dur_ns", "busy_ns").collect())


def _busy_per_window(ctx: Context) -> pl.DataFrame:
    """``rank, step, dur_ns, busy_ns`` per window with device activity, rank by rank (on
    the engine's workers when the context has one)."""
    import polars as pl

    windows = _windows(ctx).filter(pl.col("dur_ns") > 0)
    ranks = sorted({int(r) for r in windows["rank"]})
    parts = [p for p in per_rank.map_ranks(ctx, RANK_BUSY, ranks, windows) if p.height]
    if not parts:
        return pl.DataFrame(schema={"rank": windows.schema["rank"], "step": pl.Int64,
                                    "dur_ns": windows.schema["dur_ns"],
                                    "busy_ns": pl.Int64})
    busy: pl.DataFrame = pl.concat(parts)
    return busy


def _work(ctx: Context, rank: int, busy: pl.DataFrame
          ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None]:
    """Top kernels, ops (kernel -> ``cpu_op`` by external id) and innermost annotations
    of ``rank`` by device time inside its windows: ``name, dur_ns`` sorted descending."""
    import polars as pl

    windows = _windows(ctx).filter(pl.col("rank") == rank).join(
        busy.select("step"), on="step", how="semi")
    rows = (_clipped(ctx.trace.select(ranks=[rank]), windows)
            .with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns")).collect())

    def top(frame: pl.DataFrame, key: str) -> pl.DataFrame:
        return (frame.group_by(key).agg(pl.col("dur_ns").sum()).rename({key: "name"})
                .sort("dur_ns", "name", descending=[True, False]))

    ops_of = (ctx.trace.intervals.filter((pl.col("rank") == rank)
                                         & (pl.col("category") == "cpu_op")
                                         & pl.col("external_id").is_not_null())
              .group_by("external_id").agg(pl.col("name").cast(pl.String).first()
                                           .alias("op")).collect())
    ops = top(rows.join(ops_of, on="external_id", how="inner"), "op")
    anns = None
    ann = per_rank.rank_result(ctx.trace.select(ranks=[rank]), "annotations")
    inner = None if ann is None else ann.extra.get("kernels")
    if inner is not None and "innermost" in inner.columns:
        linked = rows.join(inner.filter(pl.col("rank") == rank)
                           .select("correlation", "innermost").unique("correlation"),
                           on="correlation", how="inner")
        anns = top(linked.filter(pl.col("innermost").is_not_null()), "innermost")
    return top(rows, "name"), ops, anns


def _listing(what: str, frame: pl.DataFrame | None, total: int) -> str:
    if frame is None or frame.height == 0:
        return f"no {what} linked"
    return f"top {what}: " + ", ".join(
        f"{short_name(str(n), 40)} {fmt_ns(d)} ({d / max(total, 1):.0%})"
        for n, d in frame.head(3).iter_rows())


def device_name(ctx: Context, rank: int) -> tuple[str, float | None] | None:
    """The rank's first device's (name, total memory bytes) from Kineto's
    ``deviceProperties`` metadata, if any."""
    import polars as pl

    rows = (ctx.trace.metadata.filter((pl.col("rank") == rank)
                                      & (pl.col("key") == "deviceProperties"))
            .select("value").collect())
    for (value,) in rows.iter_rows():
        props = gpu_peaks.device_properties(value)
        name = props[0].get("name") if props else None
        if isinstance(name, str) and name:
            mem = props[0].get("totalGlobalMem")
            return name, float(mem) if isinstance(mem, int | float) else None
    return None


def peak_tflops(name: str | None, total_mem_bytes: float | None = None) -> float | None:
    """Dense bf16 (else fp16) tensor peak (TFLOP/s) of a device name from the known-GPU
    table (``gpu_peaks.lookup``), None when the device or both kinds are unknown."""
    gpu = gpu_peaks.lookup(name, total_mem_bytes)
    if gpu is None:
        return None
    return next((gpu.tflops[k] for k in TENSOR_KINDS if k in gpu.tflops), None)


def _flops(ctx: Context, rank: int, busy: pl.DataFrame) -> str:
    """Achieved TFLOP/s of the ops with ``flops`` (over their kernels' device time)."""
    import polars as pl

    windows = _windows(ctx).filter(pl.col("rank") == rank).join(
        busy.select("step"), on="step", how="semi")
    ops = (ctx.trace.intervals.filter(
        (pl.col("rank") == rank) & (pl.col("category") == "cpu_op")
        & pl.col("external_id").is_not_null() & pl.col("args").str.contains('"flops"',
                                                                           literal=True))
        .select("external_id", pl.col("args").str.json_path_match("$.flops")
                .cast(pl.Float64, strict=False).alias("flops"))
        .filter(pl.col("flops") > 0)
        .group_by("external_id").agg(pl.col("flops").first()).collect())
    if ops.height == 0:
        return "no FLOPs in the trace (record with with_flops=True for achieved TFLOP/s)"
    mine = _clipped(ctx.trace.select(ranks=[rank]), windows)
    linked = (mine.join(ops.lazy(), on="external_id", how="inner")
              .group_by("external_id")
              .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns"),
                   pl.col("flops").first()).collect())
    rows = int(linked["ns"].sum()) if linked.height else 0
    flops = float(linked["flops"].sum()) if linked.height else float(ops["flops"].sum())
    named = device_name(ctx, rank)
    name = named[0] if named else None
    peak = peak_tflops(*named) if named else None
    if not rows:
        return f"{flops / 1e12:.3g} TFLOP in ops with no kernel linked"
    achieved = flops / rows / 1e3  # FLOP per ns = GFLOP/s; / 1e3 = TFLOP/s
    against = (f" = {achieved / peak:.0%} of the {name}'s ~{peak:g} TFLOP/s dense bf16/fp16 peak"
               if peak else (f"; peak of {name} unknown" if name else
                             "; device not named in the trace, peak unknown"))
    return (f"achieved {achieved:.1f} TFLOP/s in the ops with FLOPs ({flops / 1e12:.3g} "
            f"TFLOP over {fmt_ns(rows)} of their kernels){against}")
