"""``roofline``: achieved FLOP/s and bytes/s per op shape against the device's roofline.

Per op instance (a ``cpu_op`` that launched kernels): FLOPs and minimum bytes from its
recorded shapes and dtypes (``traceatlas.analysis.flops``; ``record_shapes`` traces),
device time = the sum of the durations of the ``kernel`` rows it launched (kernel ->
launch call -> op: ``kernel_shapes.with_op``; memcpy/memset are not counted). Instances
are grouped by (device, op, ``Input Dims``, ``Input type``) (``by=rank``: per rank too).

Columns (per group): ``count`` instances, ``kernels``, ``device_ns`` (sum), ``share_pct``
(of the kernel time of the ranks), ``flops``, ``bytes`` (sums), ``intensity``
(flop/byte), ``achieved_tflops`` = flops / device_ns / 1e3, ``achieved_tbps`` = bytes /
device_ns / 1e3, ``peak_kind`` (which compute peak applies: the op's dtype on tensor units
for matmul/conv/attention, ``fp32`` vector for the rest; fp32 matmuls ``fp32`` unless
``tf32=true``, fp32 convolutions ``tf32``, cuDNN's default), ``peak_tflops``,
``peak_tbps``, ``ridge`` (flop/byte = peak_tflops / peak_tbps), ``attainable_tflops`` =
min(peak_tflops, intensity x peak_tbps), ``bound`` (``memory`` below the ridge, else
``compute``), ``roof_ns`` = max(flops / peak, bytes / bandwidth): the time at the roof,
``pct_of_roof`` = 100 x roof_ns / device_ns (= achieved / attainable), ``lost_ns`` =
device_ns - roof_ns. Peaks null (and a note) when the device is unknown and no
``peak_tflops`` / ``peak_tbps`` override is given (then one roof for every dtype).

Extra tables: ``no_model`` (ops whose kernels ran but that have no FLOP model, or whose
shapes were not recorded: op, instances, kernels, device_ns), ``peaks`` (per device: the
table entry and each kind's peak with its source).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis import flops as fl
from traceatlas.analysis import gpu_peaks
from traceatlas.analysis.base import MAX_COUNT, Param, Result
from traceatlas.analysis.kernel_shapes import INPUT_DIMS, with_op
from traceatlas.errors import MissingDataError

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

INPUT_TYPE = r'"Input type"\s*:\s*(\[[^\]]*\])'
CONCRETE = r'"Concrete Inputs"\s*:\s*(\[(?:"(?:[^"\\]|\\.)*"|[^\]"])*\])'
KEYS = ("op", "input_dims", "input_types")
MAX_PEAK = 1e6
"""Largest peak override (TFLOP/s or TB/s)."""


class Roofline:
    """FLOPs, bytes, achieved TFLOP/s and TB/s, intensity and % of roofline per op shape."""

    name = "roofline"
    description = ("Roofline per op shape: FLOPs and bytes from recorded shapes, achieved "
                   "TFLOP/s and TB/s over the op's kernel time, bound and % of the roof")
    params = (
        Param("by", str, "op", "op (groups over ranks) or rank (per rank too)",
              ("op", "rank")),
        Param("top", int, 0, "keep the N groups with the most device time; 0 = all",
              minimum=0, maximum=MAX_COUNT),
        Param("peak_tflops", float, 0.0, "compute peak override, TFLOP/s (every dtype); "
              "0 = the device's from the known-GPU table", minimum=0.0, maximum=MAX_PEAK),
        Param("peak_tbps", float, 0.0, "memory bandwidth override, TB/s; 0 = the table's",
              minimum=0.0, maximum=MAX_PEAK),
        Param("convention", str, "executed", "FLOP counting: executed (bias adds, causal "
              "attention halved, flash backward recompute: TraceLens) or torch "
              "(torch.utils.flop_counter)", fl.CONVENTIONS),
        Param("tf32", bool, False, "fp32 matmuls run on TF32 tensor cores "
              "(torch.backends.cuda.matmul.allow_tf32 = True)"),
    )
    requires = ("device", "correlation")

    partition = "rank"
    """Per rank (``analysis.partitioned``): each batch sends its sums per group (count,
    kernels, device_ns, flops, bytes), its unmodelled time per op, its peaks and its kernel
    time; ``merge`` adds them up and derives the rates (float sums of FLOPs and bytes may
    differ from one pass in the last bit)."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per op shape group; extras ``no_model`` and ``peaks``."""
        return self.merge([self.partial(trace, params)], params)

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """``trace``'s sums per group (``_sums``), extras ``_no_model`` (per op),
        ``peaks`` and ``_totals`` (kernel ns, modelled ns, instances with shapes)."""
        import polars as pl

        instances = _instances(trace)
        shaped = instances.filter(pl.col("op").is_not_null()
                                  & pl.col("input_dims").is_not_null()).height
        total_ns = int(instances["device_ns"].sum())
        modelled = _model(instances, str(params["convention"]), bool(params["tf32"]))
        peaks, notes = _peaks(trace, modelled, params)
        keys = (["rank"] if params["by"] == "rank" else []) + [
            "device", *KEYS, "family", "dtype", "peak_kind"]
        done = modelled.filter(pl.col("flops").is_not_null())
        missing = (modelled.filter(pl.col("flops").is_null())
                   .with_columns(pl.col("op").fill_null("(no launching op)"))
                   .group_by("op").agg(instances=pl.len().cast(pl.Int64),
                                       kernels=pl.col("kernels").sum(),
                                       device_ns=pl.col("device_ns").sum()))
        totals = pl.DataFrame({"total_ns": [total_ns],
                               "covered_ns": [int(done["device_ns"].sum())],
                               "shaped": [shaped]})
        return Result(_sums(done, keys, peaks), notes=notes,
                      extra={"_no_model": missing, "peaks": peaks, "_totals": totals})

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """The batches' sums added per group, rates derived; MissingDataError when no
        batch has an op with recorded shapes."""
        import polars as pl

        totals = pl.concat([p.extra["_totals"] for p in partials]).sum()
        if int(totals["shaped"].item()) == 0:
            raise MissingDataError(self.name, "this trace has no kernels launched by ops "
                                   "with recorded input shapes (Kineto record_shapes=True)")
        total_ns, covered = int(totals["total_ns"].item()), int(totals["covered_ns"].item())
        table = _derived(pl.concat([p.table for p in partials], how="vertical"), total_ns)
        if int(params["top"]) > 0:
            table = table.head(int(params["top"]))
        missing = (pl.concat([p.extra["_no_model"] for p in partials], how="vertical")
                   .group_by("op").agg(pl.col("instances").sum(), pl.col("kernels").sum(),
                                       pl.col("device_ns").sum())
                   .sort(["device_ns", "op"], descending=[True, False]))
        peaks = (pl.concat([p.extra["peaks"] for p in partials], how="vertical")
                 .sort("rank", "device", "peak_kind"))
        notes = sorted({n for p in partials for n in p.notes})
        notes += [
            f"{covered / max(total_ns, 1):.1%} of the kernel time has a FLOP model; the rest "
            "is listed in table no_model (no model, no shapes, or no launching op)",
            f"FLOP convention: {params['convention']}; bytes = inputs read + outputs "
            "written once (minimum traffic); device time = sum of the op's kernels",
        ]
        return Result(table, extra={"no_model": missing, "peaks": peaks}, notes=notes)


def _instances(trace: Trace) -> pl.DataFrame:
    """One row per (rank, launching op instance): op, input_dims / input_types /
    concrete text, device, kernels, device_ns; a rank's kernels without a launching op
    form one row with a null op_id."""
    import polars as pl

    iv = trace.intervals
    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    kernels = iv.filter(cat == "kernel").select(
        "rank", "device", "correlation", "external_id", "dur_ns")
    linked = with_op(iv, kernels, "op_id")
    ops = (iv.filter((cat == "cpu_op") & pl.col("external_id").is_not_null())
           .select("rank", pl.col("external_id").alias("op_id"), "name", "args")
           .join(linked.select("rank", "op_id").unique(), on=["rank", "op_id"], how="semi")
           .unique(["rank", "op_id"], keep="first")
           .select("rank", "op_id", op=pl.col("name").cast(pl.String),
                   input_dims=pl.col("args").str.extract(INPUT_DIMS, 1),
                   input_types=pl.col("args").str.extract(INPUT_TYPE, 1),
                   concrete=pl.col("args").str.extract(CONCRETE, 1)))
    per_op = (linked.group_by("rank", "op_id")
              .agg(device=pl.col("device").first(), kernels=pl.len().cast(pl.Int64),
                   device_ns=pl.col("dur_ns").sum()))
    return per_op.join(ops, on=["rank", "op_id"], how="left").collect()


def _model(instances: pl.DataFrame, convention: str, tf32: bool) -> pl.DataFrame:
    """``instances`` plus flops, bytes, family, dtype, peak_kind (null without a model):
    the models run once per distinct (op, dims, types, concrete)."""
    import polars as pl

    distinct = instances.select("op", "input_dims", "input_types", "concrete").unique()
    rows: dict[str, list[Any]] = {k: [] for k in ("flops", "bytes", "family", "dtype",
                                                  "peak_kind")}
    for op, dims, types, concrete in distinct.iter_rows():
        got = fl.work(op, fl.parse(dims, types, concrete), convention) if op else None
        rows["flops"].append(None if got is None else got.flops)
        rows["bytes"].append(None if got is None else got.bytes)
        rows["family"].append(None if got is None else got.family)
        rows["dtype"].append(None if got is None else got.dtype)
        rows["peak_kind"].append(None if got is None else _peak_kind(got, tf32))
    models = distinct.with_columns(
        pl.Series("flops", rows["flops"], pl.Float64),
        pl.Series("bytes", rows["bytes"], pl.Float64),
        pl.Series("family", rows["family"], pl.String),
        pl.Series("dtype", rows["dtype"], pl.String),
        pl.Series("peak_kind", rows["peak_kind"], pl.String))
    return instances.join(models, on=["op", "input_dims", "input_types", "concrete"],
                          how="left", nulls_equal=True)


def _peak_kind(work: fl.Work, tf32: bool) -> str:
    """The compute peak an op is measured against (see the module docstring)."""
    if not work.matrix:
        return "fp32"
    if work.dtype == "fp32":
        return "tf32" if tf32 or work.family == "conv" else "fp32"
    return work.dtype if work.dtype in gpu_peaks.KINDS else "fp32"


def _peaks(trace: Trace, modelled: pl.DataFrame,
           params: Mapping[str, Any]) -> tuple[pl.DataFrame, list[str]]:
    """Per (device name, peak kind): peak_tflops, peak_tbps, gpu, source; and notes."""
    import polars as pl

    names = _device_names(trace)
    modelled_devices = modelled.select("rank", "device").unique()
    over_f, over_b = float(params["peak_tflops"]), float(params["peak_tbps"])
    kinds = sorted({k for k in modelled["peak_kind"].drop_nulls().to_list()})
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for rank, device in modelled_devices.iter_rows():
        name, mem = names.get((rank, device), names.get((rank, None), ("", None)))
        gpu = gpu_peaks.lookup(name, mem)
        for kind in kinds:
            table_f = gpu.tflops.get(kind) if gpu else None
            rows.append({"rank": rank, "device": device, "device_name": name,
                         "gpu": gpu.label if gpu else None, "peak_kind": kind,
                         "peak_tflops": over_f or table_f,
                         "peak_tbps": over_b or (gpu.tbps if gpu else None),
                         "source": "override" if over_f and over_b else (
                             gpu.source if gpu else None)})
        if gpu is None and not (over_f and over_b):
            notes.append(f"rank {rank}: device {name or '(unnamed)'!s} is not in the "
                         "known-GPU table: pass -p peak_tflops=... -p peak_tbps=...")
    frame = pl.DataFrame(rows, schema={
        "rank": pl.Int32, "device": pl.Int32, "device_name": pl.String, "gpu": pl.String,
        "peak_kind": pl.String, "peak_tflops": pl.Float64, "peak_tbps": pl.Float64,
        "source": pl.String})
    return frame.sort("rank", "device", "peak_kind"), sorted(set(notes))


def _device_names(trace: Trace) -> dict[tuple[int, int | None], tuple[str, float | None]]:
    """(rank, device id) -> (deviceProperties name, totalGlobalMem); (rank, None) is the
    rank's first device."""
    import polars as pl

    rows = (trace.metadata.filter(pl.col("key") == "deviceProperties")
            .select("rank", "value").collect())
    out: dict[tuple[int, int | None], tuple[str, float | None]] = {}
    for rank, value in rows.iter_rows():
        for i, props in enumerate(gpu_peaks.device_properties(value)):
            name = props.get("name")
            mem = props.get("totalGlobalMem")
            entry = (str(name) if name else "",
                     float(mem) if isinstance(mem, int | float) else None)
            ident = props.get("id", i)
            out[(int(rank), int(ident) if isinstance(ident, int) else i)] = entry
            out.setdefault((int(rank), None), entry)
    return out


def _sums(done: pl.DataFrame, keys: list[str], peaks: pl.DataFrame) -> pl.DataFrame:
    """Per group (``keys``, ``device`` as the device name): count, kernels, device_ns,
    flops, bytes, peak_tflops, peak_tbps."""
    import polars as pl

    dev_peaks = peaks.select("rank", "device", "peak_kind", "device_name", "peak_tflops",
                             "peak_tbps")
    rows = done.join(dev_peaks, on=["rank", "device", "peak_kind"], how="left")
    keys = [("device_name" if k == "device" else k) for k in keys]
    return (rows.group_by(keys)
            .agg(count=pl.len().cast(pl.Int64), kernels=pl.col("kernels").sum(),
                 device_ns=pl.col("device_ns").sum(), flops=pl.col("flops").sum(),
                 bytes=pl.col("bytes").sum(), peak_tflops=pl.col("peak_tflops").first(),
                 peak_tbps=pl.col("peak_tbps").first())
            .rename({"device_name": "device"}))


def _derived(sums: pl.DataFrame, total_ns: int) -> pl.DataFrame:
    """``_sums`` of every batch added per group, with shares, rates and the roof."""
    import polars as pl

    keys = [c for c in sums.columns if c not in (
        "count", "kernels", "device_ns", "flops", "bytes", "peak_tflops", "peak_tbps")]
    ns = pl.col("device_ns")
    order = ["device_ns", "op", "input_dims", *(k for k in keys if k not in KEYS[:2])]
    return (sums.group_by(keys)
            .agg(pl.col("count").sum(), pl.col("kernels").sum(), ns.sum(),
                 pl.col("flops").sum(), pl.col("bytes").sum(),
                 pl.col("peak_tflops").first(), pl.col("peak_tbps").first())
            .with_columns(
                share_pct=100.0 * ns / max(total_ns, 1),
                intensity=pl.col("flops") / pl.col("bytes"),
                achieved_tflops=pl.col("flops") / ns / 1e3,
                achieved_tbps=pl.col("bytes") / ns / 1e3,
                ridge=pl.col("peak_tflops") / pl.col("peak_tbps"))
            .with_columns(
                attainable_tflops=pl.min_horizontal(
                    "peak_tflops", pl.col("intensity") * pl.col("peak_tbps")),
                bound=pl.when(pl.col("ridge").is_null()).then(None)
                .when(pl.col("intensity") < pl.col("ridge")).then(pl.lit("memory"))
                .otherwise(pl.lit("compute")),
                roof_ns=pl.max_horizontal(pl.col("flops") / pl.col("peak_tflops") / 1e3,
                                          pl.col("bytes") / pl.col("peak_tbps") / 1e3))
            .with_columns(pct_of_roof=100.0 * pl.col("roof_ns") / ns,
                          lost_ns=(ns - pl.col("roof_ns")).round(0))
            .select(*keys, "count", "kernels", "device_ns",
                    "share_pct", "flops", "bytes", "intensity", "achieved_tflops",
                    "achieved_tbps", "peak_tflops", "peak_tbps", "ridge",
                    "attainable_tflops", "bound", "roof_ns", "pct_of_roof", "lost_ns")
            .sort(order, descending=[True] + [False] * (len(order) - 1), nulls_last=True))
