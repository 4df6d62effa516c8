"""HTA parity: run HTA 0.5.0 and traceatlas on the same real traces, side by side.

For each trace directory (one Kineto JSON file per rank, what HTA loads) this runs
HTA in its own venv as a subprocess that prints JSON (``HTA_WORKER`` below) and
traceatlas in this venv (``traceatlas.analysis.run`` on a store ingested from the
same directory), then prints one markdown table per analysis: HTA's value,
traceatlas's value, the difference and, where HTA's convention can be emulated,
traceatlas under that convention (``ta (HTA conv.)``) and its residual difference.

Analyses and the HTA calls they are compared with:

* breakdown: ``get_temporal_breakdown`` (idle / compute / non-compute time per rank);
* kernels:   ``get_gpu_kernel_breakdown`` (per kernel type and per kernel stats);
* idle:      ``get_idle_time_breakdown`` (host wait / kernel wait / other per stream);
* overlap:   ``get_comm_comp_overlap`` (percent of communication overlapped);
* launch:    ``get_cuda_kernel_launch_stats`` (per correlation cpu / gpu duration,
  launch delay).

Conventions emulated (see docs/definitions.md):

* HTA drops the last ProfilerStep by default (``include_last_profiler_step=False``):
  host events starting at or after the last ProfilerStep's start are removed, and so is
  every device event whose correlation matches no remaining host event. Emulated by
  running traceatlas through ``HtaLastStepFilter`` (column "ta (HTA conv.)").
* HTA rounds each event inwards to whole microseconds (``ts = ceil(ts)``, ``end =
  floor(ts + dur)``). Emulated on HTA's side: a second HTA run with
  ``HTA_DISABLE_NS_ROUNDING=1`` (column "HTA (ns, no rounding)"). The residual column
  compares the two emulations.
* HTA's temporal breakdown: ``kernel_time`` = our span, ``idle_time`` = our idle,
  ``compute_time`` = our compute, ``non_compute_time`` = our busy - compute.
* HTA's launch stats match four launch names only: our rows are restricted to them in
  the emulated column.
* Not emulated, explained in docs/definitions.md: HTA's idle ``prev_end =
  end.shift(1)`` and its sum of negative gaps; its launch time for device work whose
  launch is not in the trace (the first event's ``ts``); float64 us timestamps; its
  percentages rounded to 2 decimals.

Usage::

    .venv/bin/python bench/parity_hta.py [--json-out bench/results_analyses_parity.json]
        [--trace NAME=DIR ...] [--work /tmp/tabench/parity]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
TRACES = REPO_ROOT.parent / "shared" / "traces"
DEFAULT_HTA_PYTHON = "/tmp/tabench/hta-venv/bin/python"
DEFAULT_WORK = Path("/tmp/tabench/parity")

# --------------------------------------------------------------------------
# HTA side: a script run by HTA's interpreter. argv: trace_dir, spec (JSON).
# spec = {"include_last_profiler_step": bool, "return_data": bool,
#         "calls": [{"id": str, "method": str, "kwargs": {...}}]}
# Prints "HTA_LOAD {json}" once, then "HTA_CALL {json}" per call (flushed).
# --------------------------------------------------------------------------
HTA_WORKER = r'''
import gc, json, math, sys, time, warnings, logging, os
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
spec = json.loads(sys.argv[2])

def js(x, depth=0):
    import numpy as np, pandas as pd
    if isinstance(x, pd.DataFrame):
        if not spec.get("return_data", True):
            return {"shape": list(x.shape), "columns": [str(c) for c in x.columns]}
        df = x.reset_index()
        df.columns = [str(c) if not isinstance(c, tuple) else "/".join(map(str, c))
                      for c in df.columns]
        return {"columns": list(df.columns),
                "records": [{k: js(v, depth + 1) for k, v in r.items()}
                            for r in df.to_dict(orient="records")]}
    if isinstance(x, pd.Series):
        return js(x.to_frame(), depth)
    if isinstance(x, dict):
        return {str(k): js(v, depth + 1) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [js(v, depth + 1) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return str(x)

t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1],
                   include_last_profiler_step=spec.get("include_last_profiler_step", False))
t2 = time.perf_counter()
def rss():
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except Exception:
        return None
print("HTA_LOAD " + json.dumps({"import_s": t1 - t0, "load_s": t2 - t1,
                                "ranks": sorted(int(r) for r in ta.t.traces),
                                "rows": {int(r): int(len(df)) for r, df in ta.t.traces.items()},
                                "maxrss_bytes": rss()}), flush=True)
def busy():
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    return (sum(t[:3]) + sum(t[5:8])) / os.sysconf("SC_CLK_TCK")
for call in spec["calls"]:
    kw = dict(call.get("kwargs", {}))
    if kw.get("ranks") == "all":
        kw["ranks"] = sorted(int(r) for r in ta.t.traces)
    call["kwargs"] = kw
    gc.collect()
    b0 = busy(); c0 = time.process_time(); w0 = time.perf_counter()
    try:
        res = getattr(ta, call["method"])(**call.get("kwargs", {}))
        err = None
    except Exception as exc:
        res, err = None, f"{type(exc).__name__}: {exc}"
    w1 = time.perf_counter(); c1 = time.process_time(); b1 = busy()
    out = {"id": call["id"], "method": call["method"], "wall_s": w1 - w0,
           "cpu_s": c1 - c0, "other_cpu_s": max(b1 - b0 - (c1 - c0), 0.0), "error": err,
           "result": js(res) if err is None else None}
    print("HTA_CALL " + json.dumps(out), flush=True)
'''


def run_hta(trace_dir: Path, calls: list[dict[str, Any]], *, python: str = DEFAULT_HTA_PYTHON,
            include_last: bool = False, return_data: bool = True, ns_rounding: bool = True,
            timeout: float | None = None, log: Path | None = None) -> dict[str, Any]:
    """Run HTA on ``trace_dir``; {"load": {...}, "calls": {id: {...}}, "error": str|None}.

    ``ns_rounding=False`` sets HTA_DISABLE_NS_ROUNDING=1: HTA then keeps Kineto's
    fractional-us times instead of rounding each event inwards to whole us."""
    spec = {"include_last_profiler_step": include_last, "return_data": return_data,
            "calls": calls}
    env = dict(os.environ)
    env.pop("HTA_DISABLE_NS_ROUNDING", None)
    if not ns_rounding:
        env["HTA_DISABLE_NS_ROUNDING"] = "1"
    proc = subprocess.run([python, "-c", HTA_WORKER, str(trace_dir), json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    if log is not None:
        log.write_text(proc.stdout[-20000:] + "\n--- stderr ---\n" + proc.stderr[-20000:])
    out: dict[str, Any] = {"load": None, "calls": {}, "error": None}
    for line in proc.stdout.splitlines():
        if line.startswith("HTA_LOAD "):
            out["load"] = json.loads(line[9:])
        elif line.startswith("HTA_CALL "):
            rec = json.loads(line[9:])
            out["calls"][rec["id"]] = rec
    if proc.returncode != 0:
        out["error"] = f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}"
    return out


# --------------------------------------------------------------------------
# traceatlas side
# --------------------------------------------------------------------------

DEVICE = ("kernel", "comm_kernel", "memcpy", "memset")
HTA_LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync",
                    "cudaMemsetAsync")


class HtaLastStepFilter:
    """A selection reproducing HTA's ``_filter_irrelevant_gpu_kernels`` (the default
    ``include_last_profiler_step=False``): per rank, host rows starting before the last
    ProfilerStep's start; device rows whose correlation matches a kept host row. HTA
    applies it only when the trace has at least two ProfilerStep names.

    Duck-types ``traceatlas.ops.select.Selection`` (``ranks`` and ``apply``), so
    ``Trace.scan`` applies it to every analysis unchanged. Benchmark-only emulation."""

    ranks = None

    def __init__(self, trace: Any) -> None:
        import polars as pl

        steps = (trace.intervals
                 .filter(pl.col("name").cast(pl.String).str.contains("ProfilerStep"))
                 .select("rank", "name", "start_ns").collect())
        self.active = steps["name"].n_unique() >= 2
        self.cutoff = steps.group_by("rank").agg(pl.col("start_ns").max().alias("_cut"))
        host = (trace.intervals.join(self.cutoff.lazy(), on="rank", how="left")
                .filter(~pl.col("category").cast(pl.String).is_in(DEVICE)
                        & (pl.col("start_ns") < pl.col("_cut"))
                        & pl.col("correlation").is_not_null())
                .select("rank", "correlation").unique().collect())
        self.kept = host

    def apply(self, frame: Any, table: str) -> Any:
        import polars as pl

        if not self.active or table != "intervals":
            return frame
        is_dev = pl.col("category").cast(pl.String).is_in(DEVICE)
        dev = frame.filter(is_dev).join(self.kept.lazy(), on=["rank", "correlation"],
                                        how="semi")
        host = (frame.filter(~is_dev).join(self.cutoff.lazy(), on="rank", how="left")
                .filter(pl.col("_cut").is_null() | (pl.col("start_ns") < pl.col("_cut")))
                .drop("_cut"))
        return pl.concat([host, dev])


def hta_view(trace: Any) -> tuple[Any, bool]:
    """``trace`` seen through HTA's last-step filter; (view, filter active)."""
    flt = HtaLastStepFilter(trace)
    view = trace.select()
    view.selections = (*view.selections, flt)
    return view, flt.active


def ta_results(store: Path) -> dict[str, Any]:
    """traceatlas's five analyses on the whole trace ("full") and on HTA's view ("hta")."""
    import traceatlas
    from traceatlas.analysis import run

    trace = traceatlas.open(store)
    view, active = hta_view(trace)
    out: dict[str, Any] = {"hta_filter_active": active}
    params = {"breakdown": {}, "overlap": {}, "idle": {}, "kernels": {"memory": True},
              "launch": {}}
    for label, tr in (("full", trace), ("hta", view)):
        res: dict[str, Any] = {}
        for name, prm in params.items():
            try:
                r = run(name, tr, prm)
                res[name] = {"table": r.table, **{k: v for k, v in r.extra.items()}}
            except Exception as exc:  # reported, not fatal: parity is a report
                res[name] = {"error": f"{type(exc).__name__}: {exc}"}
        out[label] = res
    return out


# --------------------------------------------------------------------------
# comparisons: rows of (key, HTA, HTA ns, ta, ta HTA-conv) in us
# --------------------------------------------------------------------------

Row = dict[str, Any]


def _recs(call: dict[str, Any] | None, idx: int | None = None) -> list[dict[str, Any]]:
    if not call or call.get("error") or call.get("result") is None:
        return []
    res = call["result"]
    if idx is not None:
        res = res[idx]
    return list(res.get("records", []))


def _us(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1000.0


def _ta_rows(ta: dict[str, Any], label: str, name: str, key: str = "table") -> list[Row]:
    res = ta[label].get(name, {})
    if "error" in res or key not in res:
        return []
    rows: list[Row] = res[key].to_dicts()
    return rows


def cmp_breakdown(h: dict[str, Any], hn: dict[str, Any], ta: dict[str, Any]) -> list[Row]:
    def hta_vals(hh: dict[str, Any]) -> dict[int, dict[str, float]]:
        return {int(r["rank"]): {"span": r["kernel_time(us)"], "idle": r["idle_time(us)"],
                                 "compute": r["compute_time(us)"],
                                 "non_compute": r["non_compute_time(us)"]}
                for r in _recs(hh["calls"].get("breakdown"))}

    def ta_vals(label: str) -> dict[int, dict[str, float | None]]:
        out: dict[int, dict[str, float | None]] = {}
        for r in _ta_rows(ta, label, "breakdown"):
            if r["rank"] in out:  # several devices: HTA works per rank
                out[r["rank"]]["note"] = "several devices"  # type: ignore[assignment]
                continue
            out[r["rank"]] = {"span": _us(r["span_ns"]), "idle": _us(r["idle_ns"]),
                              "compute": _us(r["compute_ns"]),
                              "non_compute": _us(r["busy_ns"] - r["compute_ns"])}
        return out

    a, b, c, d = hta_vals(h), hta_vals(hn), ta_vals("full"), ta_vals("hta")
    return [{"key": f"rank {rk} {col}", "hta": a[rk][col], "hta_ns": b.get(rk, {}).get(col),
             "ta": c.get(rk, {}).get(col), "ta_conv": d.get(rk, {}).get(col)}
            for rk in sorted(a) for col in ("span", "idle", "compute", "non_compute")]


def cmp_overlap(h: dict[str, Any], hn: dict[str, Any], ta: dict[str, Any]) -> list[Row]:
    def hv(hh: dict[str, Any]) -> dict[int, float]:
        return {int(r["rank"]): r["comp_comm_overlap_pctg"]
                for r in _recs(hh["calls"].get("overlap"))}

    def tv(label: str) -> dict[int, float]:
        return {r["rank"]: r["overlap_pct"] for r in _ta_rows(ta, label, "overlap")}

    a, b, c, d = hv(h), hv(hn), tv("full"), tv("hta")
    return [{"key": f"rank {rk} overlap %", "hta": a[rk], "hta_ns": b.get(rk),
             "ta": c.get(rk), "ta_conv": d.get(rk)} for rk in sorted(a)]


IDLE_COLS = {"host_wait": "host_wait_ns", "kernel_wait": "kernel_wait_ns", "other": "other_ns"}


def cmp_idle(h: dict[str, Any], hn: dict[str, Any], ta: dict[str, Any]) -> list[Row]:
    def hv(hh: dict[str, Any]) -> dict[tuple[int, int, str], float]:
        return {(int(r["rank"]), int(r["stream"]), str(r["idle_category"])): r["idle_time"]
                for r in _recs(hh["calls"].get("idle"), 0)}

    def tv(label: str) -> dict[tuple[int, int, str], float | None]:
        out: dict[tuple[int, int, str], float | None] = {}
        for r in _ta_rows(ta, label, "idle"):
            for cat, col in IDLE_COLS.items():
                out[(r["rank"], r["stream"], cat)] = _us(r[col])
        return out

    a, b, c, d = hv(h), hv(hn), tv("full"), tv("hta")
    keys = sorted(set(a) | {k for k, v in d.items() if v})
    return [{"key": f"rank {k[0]} stream {k[1]} {k[2]}", "hta": a.get(k, 0.0),
             "hta_ns": b.get(k, 0.0), "ta": c.get(k), "ta_conv": d.get(k)} for k in keys]


def cmp_kernels(h: dict[str, Any], hn: dict[str, Any], ta: dict[str, Any],
                top: int = 8) -> tuple[list[Row], dict[str, Any]]:
    def hv(hh: dict[str, Any]) -> dict[tuple[int, str], dict[str, float]]:
        return {(int(r["rank"]), str(r["name"])): r
                for r in _recs(hh["calls"].get("kernels"), 1)}

    def tv(label: str) -> dict[tuple[int, str], dict[str, Any]]:
        return {(r["rank"], r["name"]): r for r in _ta_rows(ta, label, "kernels")}

    a, b, c, d = hv(h), hv(hn), tv("full"), tv("hta")
    rows: list[Row] = []
    order = sorted(a, key=lambda k: -a[k]["sum (us)"])
    for k in order[:top]:
        for stat, col in (("sum", "total_ns"), ("mean", "mean_ns")):
            hk = f"{stat} (us)"
            rows.append({"key": f"rank {k[0]} {k[1][:40]} {stat}", "hta": a[k][hk],
                         "hta_ns": b.get(k, {}).get(hk), "ta": _us(c.get(k, {}).get(col)),
                         "ta_conv": _us(d.get(k, {}).get(col))})
    both = [k for k in a if k in d]
    diffs = [abs(a[k]["sum (us)"] - d[k]["total_ns"] / 1000) for k in both]
    diffs_ns = [abs(b[k]["sum (us)"] - d[k]["total_ns"] / 1000) for k in both if k in b]
    summary = {"hta_names": len(a), "ta_names": len(c), "ta_conv_names": len(d),
               "matched": len(both), "only_hta": sorted(f"{k[0]}:{k[1][:60]}" for k in a
                                                        if k not in d)[:10],
               "max_abs_sum_diff_us_vs_hta": max(diffs, default=None),
               "max_abs_sum_diff_us_vs_hta_ns": max(diffs_ns, default=None)}
    return rows, summary


def cmp_launch(h: dict[str, Any], hn: dict[str, Any], ta: dict[str, Any]) -> list[Row]:
    def hv(hh: dict[str, Any]) -> dict[int, dict[str, float]]:
        call = hh["calls"].get("launch")
        out: dict[int, dict[str, float]] = {}
        if not call or call.get("error"):
            return out
        for rk, df in call["result"].items():
            recs = df.get("records", [])
            out[int(rk)] = {
                "launches": len(recs),
                "cpu_sum": sum(r["cpu_duration"] for r in recs),
                "gpu_sum": sum(r["gpu_duration"] for r in recs),
                "delay_sum": sum(r["launch_delay"] for r in recs),
                "delay>100us": sum(r["launch_delay"] > 100 for r in recs),
                "cpu>50us": sum(r["cpu_duration"] > 50 for r in recs),
                "gpu<cpu": sum(r["gpu_duration"] < r["cpu_duration"] for r in recs),
            }
        return out

    def tv(label: str, hta_names: bool) -> dict[int, dict[str, float]]:
        out: dict[int, dict[str, float]] = {}
        for r in _ta_rows(ta, label, "launch"):
            if hta_names and r["launch_name"] not in HTA_LAUNCH_NAMES:
                continue
            o = out.setdefault(r["rank"], dict.fromkeys(
                ("launches", "cpu_sum", "gpu_sum", "delay_sum", "delay>100us", "cpu>50us",
                 "gpu<cpu"), 0.0))
            o["launches"] += 1
            o["cpu_sum"] += r["cpu_launch_ns"] / 1000
            o["gpu_sum"] += r["gpu_ns"] / 1000
            o["delay_sum"] += r["launch_delay_ns"] / 1000
            o["delay>100us"] += r["launch_delay_ns"] > 100_000
            o["cpu>50us"] += r["cpu_launch_ns"] > 50_000
            o["gpu<cpu"] += r["gpu_ns"] < r["cpu_launch_ns"]
        return out

    a, b, c, d = hv(h), hv(hn), tv("full", False), tv("hta", True)
    return [{"key": f"rank {rk} {col}", "hta": a[rk][col], "hta_ns": b.get(rk, {}).get(col),
             "ta": c.get(rk, {}).get(col), "ta_conv": d.get(rk, {}).get(col)}
            for rk in sorted(a) for col in a[rk]]


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------

PARITY_CALLS = [
    {"id": "breakdown", "method": "get_temporal_breakdown", "kwargs": {"visualize": False}},
    {"id": "overlap", "method": "get_comm_comp_overlap", "kwargs": {"visualize": False}},
    {"id": "idle", "method": "get_idle_time_breakdown",
     "kwargs": {"ranks": "all", "visualize": False, "show_idle_interval_stats": True}},
    {"id": "kernels", "method": "get_gpu_kernel_breakdown",
     "kwargs": {"visualize": False, "num_kernels": 1_000_000, "duration_ratio": 1.0,
                "include_memory_kernels": True}},
    {"id": "launch", "method": "get_cuda_kernel_launch_stats",
     "kwargs": {"ranks": "all", "visualize": False}},
]


def candidate_traces(work: Path) -> dict[str, Path]:
    """name -> a directory holding only the rank files (symlinks), as HTA wants."""
    hta = TRACES / "hta"
    picks: dict[str, list[Path]] = {
        "hta/nccl_parser_config": sorted((hta / "nccl_parser_config").glob("*.json*")),
        "hta/negative_queue_length_values_check":
            sorted((hta / "negative_queue_length_values_check").glob("*.json*")),
        "hta/trace_file_list": sorted((hta / "trace_file_list").glob("*.json*")),
        "hta/trace_filter": sorted((hta / "trace_filter").glob("*.json*")),
        "hta/timeline_analysis": sorted((hta / "timeline_analysis").glob("*.json*")),
        "hta/ns_resolution_trace": sorted((hta / "ns_resolution_trace").glob("*.json*")),
        "param-et_replay/resnet_kineto": [TRACES / "param-et_replay" / "resnet_kineto.json.gz"],
        "param-et_replay/linear_kineto": [TRACES / "param-et_replay" / "linear_kineto.json.gz"],
    }
    dlrm = work / "src" / "dlrm"
    if not dlrm.exists():
        dlrm.mkdir(parents=True)
        with tarfile.open(TRACES / "param-et_replay" / "dlrm_kineto.tar.gz") as tf:
            tf.extractall(dlrm, filter="data")
    picks["param-et_replay/dlrm_kineto"] = sorted(
        p for p in dlrm.rglob("*.json*") if p.is_file())
    out: dict[str, Path] = {}
    for name, files in picks.items():
        if not files:
            continue
        d = work / "dirs" / name.replace("/", "__")
        d.mkdir(parents=True, exist_ok=True)
        for f in files:
            link = d / f.name
            if not link.exists():
                link.symlink_to(f.resolve())
        out[name] = d
    return out


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.1f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def diff(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    return b - a


def table(title: str, rows: list[Row]) -> str:
    lines = [f"#### {title}", "",
             "| quantity | HTA | HTA (ns, no rounding) | ta | ta - HTA | ta (HTA conv.) "
             "| residual vs HTA ns |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['key']} | {fmt(r['hta'])} | {fmt(r['hta_ns'])} | {fmt(r['ta'])} "
                     f"| {fmt(diff(r['hta'], r['ta']))} | {fmt(r['ta_conv'])} "
                     f"| {fmt(diff(r['hta_ns'], r['ta_conv']))} |")
    return "\n".join(lines) + "\n"


COMPARE: dict[str, Callable[..., Any]] = {
    "breakdown": cmp_breakdown, "overlap": cmp_overlap, "idle": cmp_idle,
    "kernels": cmp_kernels, "launch": cmp_launch,
}


def parity_one(name: str, d: Path, work: Path, python: str) -> dict[str, Any]:
    import traceatlas

    rec: dict[str, Any] = {"trace": name, "dir": str(d)}
    t0 = time.perf_counter()
    h = run_hta(d, PARITY_CALLS, python=python, log=work / f"{d.name}.hta.log")
    hn = run_hta(d, PARITY_CALLS, python=python, ns_rounding=False,
                 log=work / f"{d.name}.hta_ns.log")
    rec["hta_s"] = time.perf_counter() - t0
    if h["load"] is None:
        rec["error"] = f"HTA cannot load it: {(h['error'] or '')[-300:]}"
        return rec
    store = work / "stores" / f"{d.name}.tastore"
    if not store.exists():
        traceatlas.ingest(d, store)
    ta = ta_results(store)
    rec["hta_filter_active"] = ta["hta_filter_active"]
    rec["hta_errors"] = {k: v["error"] for k, v in h["calls"].items() if v.get("error")}
    rec["ta_errors"] = {f"{lab}.{k}": v["error"] for lab in ("full", "hta")
                        for k, v in ta[lab].items() if "error" in v}
    rec["tables"] = {}
    for an, fn in COMPARE.items():
        try:
            out = fn(h, hn, ta)
        except Exception as exc:  # a comparison failing is a finding, not a crash
            rec["tables"][an] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        if an == "kernels":
            rows, summary = out
            rec["tables"][an] = {"rows": rows, "summary": summary}
        else:
            rec["tables"][an] = {"rows": out}
    return rec


def render(rec: dict[str, Any]) -> str:
    out = [f"### {rec['trace']}", ""]
    if "error" in rec:
        return "\n".join([*out, f"skipped: {rec['error']}", ""])
    out.append(f"HTA last-step filter active: {rec['hta_filter_active']}; "
               f"HTA errors: {rec['hta_errors'] or 'none'}; "
               f"traceatlas errors: {rec['ta_errors'] or 'none'}. Times in us.\n")
    for an, t in rec["tables"].items():
        if "error" in t:
            out.append(f"#### {an}\n\ncomparison failed: {t['error']}\n")
            continue
        out.append(table(an, t["rows"]))
        if "summary" in t:
            out.append(f"kernels summary: {json.dumps(t['summary'])}\n")
    return "\n".join(out)


def worst(rows: list[Row]) -> tuple[float, str] | None:
    """The largest |ta (HTA conv.) - HTA (ns)| and its quantity; None when nothing compares."""
    best: tuple[float, str] | None = None
    for r in rows:
        a, b = r["hta_ns"], r["ta_conv"]
        if a is None and b is None:
            continue
        d = math.inf if a is None or b is None else abs(b - a)
        if best is None or d > best[0]:
            best = (d, r["key"])
    return best


def summary(recs: list[dict[str, Any]]) -> str:
    """Per trace and analysis: the worst residual after emulation (us; overlap: points)."""
    names = list(COMPARE)
    lines = ["| trace | ranks | " + " | ".join(names) + " |",
             "|---|---:|" + "---:|" * len(names)]
    for rec in recs:
        if "error" in rec:
            lines.append(f"| {rec['trace']} | - | " + " | ".join("-" for _ in names) + " |")
            continue
        ranks = len({r["key"].split()[1] for r in rec["tables"]["breakdown"].get("rows", [])})
        cells = []
        for an in names:
            t = rec["tables"][an]
            w = None if "error" in t else worst(t["rows"])
            cells.append("n/a" if w is None else f"{w[0]:.3g}")
        lines.append(f"| {rec['trace']} | {ranks} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    ap.add_argument("--only", nargs="*", help="trace names to run (default: all)")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--md-out", type=Path)
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    recs = []
    md = []
    for name, d in candidate_traces(a.work).items():
        if a.only and name not in a.only:
            continue
        rec = parity_one(name, d, a.work, a.hta_python)
        recs.append(rec)
        text = render(rec)
        md.append(text)
        print(text, flush=True)
    head = ("### Summary: largest residual |ta (HTA conv.) - HTA (ns)| per trace and "
            "analysis (us; overlap in percentage points)\n\n")
    md.insert(0, head + summary(recs))
    print(md[0], flush=True)
    if a.json_out:
        a.json_out.write_text(json.dumps(recs, indent=1, default=str) + "\n")
    if a.md_out:
        a.md_out.write_text("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
