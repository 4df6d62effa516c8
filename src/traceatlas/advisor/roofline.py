"""Rule ``roofline``: heavy op shapes running far below their roofline.

Needs the ``roofline`` analysis (Kineto ``record_shapes`` traces on a GPU the peak table
knows). Per op group (op, input shapes, dtypes; over the ranks):

Trigger: ``pct_of_roof`` < ``LOW_PCT`` (the op reaches under 30 % of what the roofline
allows at its arithmetic intensity) and the group holds at least ``MIN_SHARE_PCT`` of the
kernel time.
Cost (ns): ``lost_ns`` = device time - time at the roof (max(FLOPs / compute peak, bytes
/ bandwidth)): what reaching the roof would save. The costliest ``MAX_FINDINGS`` groups.
Statement: "OP on SHAPES (DTYPE) runs at P % of its roofline (memory-bound): X TB/s of
Y" (compute-bound: TFLOP/s).
Next step by family and bound: memory-bound elementwise / copy / norm / softmax chains ->
fusion (``torch.compile``), fewer dtype conversions; compute-bound matmul / conv /
attention -> bf16 or TF32 for fp32, batching small matmuls, tile-friendly sizes;
memory-bound matmuls (skinny, decode) -> batch more rows, fuse, quantise weights.

Machine-readable: ``ranks`` = the trace's ranks; ``where`` = {``op``}.
"""

from __future__ import annotations

import json

from traceatlas.advisor.base import Context, Finding, fmt_ns

NAME = "roofline"
LOW_PCT = 30.0
MIN_SHARE_PCT = 5.0
MAX_FINDINGS = 3
MATRIX = ("matmul", "conv", "attention")


def check(ctx: Context) -> list[Finding]:
    """One finding per heavy op group far below its roof (the costliest few)."""
    import polars as pl

    result = ctx.result(NAME)
    if result is None or result.table.height == 0:
        return []
    low = (result.table
           .filter(pl.col("pct_of_roof").is_not_null()
                   & (pl.col("pct_of_roof") < LOW_PCT)
                   & (pl.col("share_pct") >= MIN_SHARE_PCT))
           .sort(["lost_ns", "op"], descending=[True, False])
           .head(MAX_FINDINGS))
    return [_finding(ctx, row) for row in low.iter_rows(named=True)]


def _finding(ctx: Context, row: dict[str, object]) -> Finding:
    op, bound, dtype = str(row["op"]), str(row["bound"]), str(row["dtype"])
    if bound == "memory":
        speed = f"{_num(row['achieved_tbps'])} TB/s of {_num(row['peak_tbps'])} TB/s"
    else:
        speed = (f"{_num(row['achieved_tflops'])} TFLOP/s of "
                 f"{_num(row['attainable_tflops'])} TFLOP/s ({row['peak_kind']})")
    return Finding(
        rule=NAME,
        statement=(f"{op} on {_compact(row['input_dims'])} ({dtype}) runs at "
                   f"{_f(row, 'pct_of_roof'):.0f}% of its roofline ({bound}-bound): {speed}"),
        cost_ns=round(_f(row, "lost_ns")),
        evidence=(f"{row['count']} calls, {fmt_ns(_f(row, 'device_ns'))} of kernel time "
                  f"({_f(row, 'share_pct'):.1f}%); intensity {_f(row, 'intensity'):.3g} "
                  f"flop/B, ridge {_f(row, 'ridge'):.3g}; achieved "
                  f"{_num(row['achieved_tflops'])} TFLOP/s, {_num(row['achieved_tbps'])} "
                  f"TB/s; attainable {_num(row['attainable_tflops'])} TFLOP/s; time at the "
                  f"roof {fmt_ns(_f(row, 'roof_ns'))}"),
        next_step=_advice(str(row["family"]), bound, dtype),
        command=ctx.command(NAME),
        cause="below_roofline",
        ranks=list(ctx.trace.ranks),
        where={"op": op},
    )


def _f(row: dict[str, object], key: str) -> float:
    value = row[key]
    return float(value) if isinstance(value, int | float) else float("nan")


def _advice(family: str, bound: str, dtype: str) -> str:
    if family in MATRIX and dtype == "fp32":
        return ("Run it in bf16 (torch.autocast) or allow TF32 "
                "(torch.backends.cuda.matmul.allow_tf32 = True): fp32 does not use the "
                "tensor cores' full rate.")
    if family in MATRIX and bound == "memory":
        return ("A skinny product (few rows, e.g. decode): batch more rows per call, fuse "
                "it with its neighbours, or shrink the weights (weight-only quantisation).")
    if family in MATRIX:
        return ("Small or oddly sized products leave the tensor cores idle: batch small "
                "matmuls (bmm, grouped GEMM), use sizes that are multiples of 64/128, "
                "check the kernel choice (torch.compile max-autotune).")
    return ("Memory-bound chain of small ops: fusion (torch.compile, fused kernels) reads "
            "and writes the tensor once instead of once per op; drop needless dtype "
            "conversions (copy_/to) and out-of-place temporaries.")


def _compact(dims: object) -> str:
    """``Input Dims`` text without whitespace and trailing scalar slots ([])."""
    try:
        value = json.loads(str(dims))
    except ValueError:
        return " ".join(str(dims).split())
    if isinstance(value, list):
        while value and value[-1] == []:
            value.pop()
    return json.dumps(value, separators=(",", ":"))


def _num(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, int | float) else "?"
