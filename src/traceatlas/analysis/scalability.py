"""Multi-run POP scaling metrics (reference A.2): one row per run, the run with the fewest
processes is the reference.

Runs that all have the same rank count are a *comparison* (e.g. before/after an
optimisation), not a scaling study: ``scaling`` is ``comparison``, ``scaling_ratio`` null,
the reference is the first run given, and the columns hold the same formulas with P /
P_ref = 1 (``speedup`` = T_ref / T, ``computational_scalability`` = sum U_ref / sum U).
Strong or weak scaling is detected only when the rank counts differ.

Per run (``efficiency`` analysis, whole run, host side): ``ranks`` P (host ranks),
``runtime_ns`` T, ``useful_ns`` total useful time sum_p U_p, ``parallel_efficiency``
PE = mean U / T.

Scaling mode: ``ratio`` = mean over the other runs of (X / X_ref) / (P / P_ref), where X
is the total useful instructions when every run has ``PAPI_TOT_INS`` counters, else the
total useful time. Weak scaling (work grows with P) gives a ratio near 1, strong
scaling (fixed work) near P_ref / P; ``weak`` when ratio > 0.75, else ``strong`` (our
threshold, half way between the two for a doubling of P; basicanalysis'
``get_scaling_type`` uses the same instruction ratio).

- ``computational_scalability`` CompS = sum U_ref / sum U (strong), x P / P_ref (weak).
- ``global_efficiency`` GE = PE x CompS.
- ``speedup`` = T_ref / T (strong), x P / P_ref (weak).
- With counters ``PAPI_TOT_INS`` and ``PAPI_TOT_CYC`` (names containing them): I and C
  per run = per (rank, track, counter) the last sample minus the first when the samples
  never decrease (cumulative counters), else the sum of the samples (per-burst deltas, as
  Extrae writes them); all samples of the run are used (not only those of useful bursts).
  ``instruction_scalability`` IS = I_ref / I (x P / P_ref weak); ``ipc`` = I / C and
  ``ipc_scalability`` = IPC / IPC_ref; ``frequency_ghz`` f = C / sum U (cycles per ns) and
  ``frequency_scalability`` = f / f_ref. Null without counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result

if TYPE_CHECKING:

    from traceatlas.model.trace import Trace

WEAK_THRESHOLD = 0.75
"""Normalised growth of the work above which the runs are taken as weak scaling."""


def scalability(results: Sequence[tuple[str, Trace]],
                efficiency: Sequence[Result] | None = None) -> Result:
    """Scaling metrics across runs ``(label, trace)``; see the module docstring.

    ``efficiency``: each run's ``efficiency`` result when the caller already has them
    (the report does), so the model is not computed twice."""
    import polars as pl

    from traceatlas.analysis.registry import run

    if efficiency is not None and len(efficiency) != len(results):
        raise ValueError("one efficiency result per run is needed")
    runs: list[dict[str, Any]] = []
    for i, (label, trace) in enumerate(results):
        result = efficiency[i] if efficiency is not None else run("efficiency", trace)
        per = result.extra["per_rank"]
        host = per.filter(pl.col("side") == "host") if per.height else per
        values = dict(zip(result.table["metric"], result.table["value"], strict=True))
        ins, cyc = _counter_total(trace, "PAPI_TOT_INS"), _counter_total(trace, "PAPI_TOT_CYC")
        runs.append({
            "run": label, "ranks": host.height,
            "runtime_ns": int(values.get("host_runtime_ns") or 0),
            "useful_ns": int(host["useful_ns"].sum()) if host.height else 0,
            "parallel_efficiency": values.get("host_parallel_efficiency"),
            "instructions": ins, "cycles": cyc,
        })
    if not runs:
        raise ValueError("scalability needs at least one run")
    ref = min(runs, key=lambda r: (r["ranks"], runs.index(r)))
    counters = all(r["instructions"] for r in runs)
    key = "instructions" if counters else "useful_ns"
    if len({r["ranks"] for r in runs}) == 1:
        mode, ratio = "comparison", None
        notes = [f"comparison, not a scaling study: every run has {ref['ranks']} ranks; "
                 f"reference run {ref['run']!r} (the first given)"]
    else:
        others = [r for r in runs if r is not ref and r["ranks"] and ref["ranks"] and ref[key]]
        ratio = (sum((r[key] / ref[key]) / (r["ranks"] / ref["ranks"]) for r in others)
                 / len(others)) if others else None
        mode = "weak" if ratio is not None and ratio > WEAK_THRESHOLD else "strong"
        basis = "useful instructions" if counters else "total useful time"
        notes = [f"{mode} scaling detected: mean normalised growth of {basis} "
                 f"(X/X_ref)/(P/P_ref) = {ratio if ratio is None else round(ratio, 4)} "
                 f"(weak above {WEAK_THRESHOLD}); reference run {ref['run']!r} "
                 f"({ref['ranks']} ranks)"]
    rows = [_row(r, ref, mode, counters) for r in runs]
    table = pl.DataFrame(rows).with_columns(scaling=pl.lit(mode),
                                            scaling_ratio=pl.lit(ratio, pl.Float64))
    return Result(table, notes=notes)


def _row(r: dict[str, Any], ref: dict[str, Any], mode: str, counters: bool) -> dict[str, Any]:
    weak = (r["ranks"] / ref["ranks"]) if mode == "weak" and ref["ranks"] else 1.0
    comp = ref["useful_ns"] / r["useful_ns"] * weak if r["useful_ns"] else None
    pe = r["parallel_efficiency"]
    out: dict[str, Any] = {
        "run": r["run"], "ranks": r["ranks"], "runtime_ns": r["runtime_ns"],
        "useful_ns": r["useful_ns"], "parallel_efficiency": pe,
        "computational_scalability": comp,
        "global_efficiency": None if comp is None or pe is None else pe * comp,
        "speedup": ref["runtime_ns"] / r["runtime_ns"] * weak if r["runtime_ns"] else None,
        "instruction_scalability": None, "ipc": None, "ipc_scalability": None,
        "frequency_ghz": None, "frequency_scalability": None,
    }
    if counters and r["cycles"] and ref["cycles"] and r["useful_ns"] and ref["useful_ns"]:
        ipc, ipc_ref = r["instructions"] / r["cycles"], ref["instructions"] / ref["cycles"]
        f, f_ref = r["cycles"] / r["useful_ns"], ref["cycles"] / ref["useful_ns"]
        out.update(instruction_scalability=ref["instructions"] / r["instructions"] * weak,
                   ipc=ipc, ipc_scalability=ipc / ipc_ref, frequency_ghz=f,
                   frequency_scalability=f / f_ref)
    return out


def _counter_total(trace: Trace, name: str) -> float:
    """Total of the counter series whose name contains ``name`` (see the docstring)."""
    import polars as pl

    frame = trace.counters.filter(pl.col("name").cast(pl.String).str.contains(name,
                                                                               literal=True))
    per = (
        frame.sort("rank", "track_id", "name", "ts_ns")
        .group_by("rank", "track_id", pl.col("name").cast(pl.String))
        .agg(monotone=(pl.col("value").diff().fill_null(0) >= 0).all(),
             first=pl.col("value").first(), last=pl.col("value").last(),
             total=pl.col("value").sum())
        .select(pl.when(pl.col("monotone")).then(pl.col("last") - pl.col("first"))
                .otherwise(pl.col("total")).alias("v"))
        .collect()
    )
    return float(per["v"].sum()) if per.height else 0.0
