"""Analysis speed: traceatlas (warm store) vs HTA (loaded state), and 8 ranks x 1 GB.

Three parts, each writing its own JSON so the slow HTA part can run once:

* ``hta``: one HTA process (its venv) loads the 1 GB single-rank trace directory
  once (load time reported apart), then times each analysis call on the loaded
  state (``HTA_CALLS``; wall and CPU seconds per call).
* ``ta``: each traceatlas analysis on the warm 1 GB store, in one process: the
  store is opened and each analysis run once untimed (warm caches, page cache),
  then ``--repeat`` timed runs (best and median reported), with the machine's
  other CPU use during the run (``other_cpu_s``, /proc/stat) to flag contention.
* ``eight``: the full ``analyze`` of breakdown + idle + overlap + kernels + launch on
  8 ranks x 1 GB: each analysis in a fresh ``traceatlas analyze`` process under
  bench/measure.py (wall, CPU, peak RSS, other_cpu_s), and all five in one Python
  process (``traceatlas.open`` + five ``run`` calls, timed from the start of the
  process).
* ``report``: the markdown tables from the JSON files.

Example::

    .venv/bin/python bench/bench_analyses.py hta --json-out bench/results_analyses_hta.json
    .venv/bin/python bench/bench_analyses.py ta --json-out bench/results_analyses_ta.json
    .venv/bin/python bench/bench_analyses.py eight --json-out bench/results_analyses_8x1gb.json
    .venv/bin/python bench/bench_analyses.py report
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from measure import system_busy_s
from parity_hta import DEFAULT_HTA_PYTHON, run_hta

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
VENV_BIN = REPO_ROOT / ".venv" / "bin"
DIR_1GB = Path("/tmp/tabench/1gb")
STORE_1GB = Path("/tmp/tabench/stores/1gb.tastore")
DIR_8X = Path("/tmp/tabench/8x1gb")
STORE_8X = Path("/tmp/tabench/stores/8x1gb.tastore")
FIVE = ("breakdown", "idle", "overlap", "kernels", "launch")

# analysis -> the HTA calls answering the same question (their times are summed).
HTA_CALLS: dict[str, list[dict[str, Any]]] = {
    "breakdown": [{"id": "breakdown", "method": "get_temporal_breakdown",
                   "kwargs": {"visualize": False}}],
    "kernels": [{"id": "kernels", "method": "get_gpu_kernel_breakdown",
                 "kwargs": {"visualize": False}}],
    "idle": [{"id": "idle", "method": "get_idle_time_breakdown",
              "kwargs": {"ranks": [0], "visualize": False,
                         "show_idle_interval_stats": True}}],
    "overlap": [{"id": "overlap", "method": "get_comm_comp_overlap",
                 "kwargs": {"visualize": False}}],
    "launch": [{"id": "launch", "method": "get_cuda_kernel_launch_stats",
                "kwargs": {"ranks": [0], "visualize": False}}],
    "queue": [
        {"id": "queue.time_series", "method": "get_queue_length_time_series",
         "kwargs": {"ranks": [0]}},
        {"id": "queue.summary", "method": "get_queue_length_summary", "kwargs": {"ranks": [0]}},
        {"id": "queue.memory_bw", "method": "get_memory_bw_summary", "kwargs": {"ranks": [0]}},
    ],
    "annotations": [{"id": "annotations", "method": "get_gpu_user_annotation_breakdown",
                     "kwargs": {"visualize": False}}],
    "patterns": [{"id": "patterns", "method": "get_frequent_cuda_kernel_sequences",
                  "kwargs": {"operator_name": "aten::copy_",
                             "output_dir": "/tmp/tabench/hta_patterns_out",
                             "min_pattern_len": 3, "visualize": False}}],
}
# analysis -> params for traceatlas on the 1 GB trace (the HTA-matching question).
TA_PARAMS: dict[str, dict[str, Any]] = {
    "patterns": {"op": "^aten::copy_$", "length": 3},
}
TA_ANALYSES = ("breakdown", "kernels", "idle", "overlap", "launch", "queue",
               "annotations", "patterns", "steps", "collectives", "counters")


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


# --------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------


def make_ranks(src: Path, out: Path, ranks: int) -> list[Path]:
    """Copy ``src`` (a scaled Kineto rank file) ``ranks`` times with distributedInfo's
    rank and world_size rewritten in its header; the event bodies are identical."""
    out.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as f:
        head = f.read(1 << 20)
    key = head.find(b'"distributedInfo"')
    if key < 0:
        raise SystemExit(f"{src}: no distributedInfo in the first MiB")
    end = head.index(b"}", key)
    info = head[key:end]
    files = []
    for r in range(ranks):
        new = (info.replace(b'"rank": 0', b'"rank": %d' % r)
                   .replace(b'"world_size": 1', b'"world_size": %d' % ranks))
        dst = out / f"rank-{r}.json"
        with src.open("rb") as fi, dst.open("wb") as fo:
            fi.seek(end)
            fo.write(head[:key] + new)
            while chunk := fi.read(1 << 24):
                fo.write(chunk)
        files.append(dst)
    return files


def cmd_prep(a: argparse.Namespace) -> dict[str, Any]:
    """Build DIR_8X from the 1 GB rank file and ingest it (timed under measure.py)."""
    t0 = time.perf_counter()
    files = make_ranks(DIR_1GB / "rank-0.json", DIR_8X, 8)
    copy_s = time.perf_counter() - t0
    if STORE_8X.exists():
        shutil.rmtree(STORE_8X)
    ingest = measured([str(VENV_BIN / "traceatlas"), "ingest", str(DIR_8X), "-o", str(STORE_8X)])
    return {"files": [str(f) for f in files], "bytes": sum(f.stat().st_size for f in files),
            "copy_s": copy_s, "ingest": ingest, "machine": machine()}


def measured(cmd: list[str], stdout: str | None = None) -> dict[str, Any]:
    """Run ``cmd`` under bench/measure.py; its JSON record."""
    wrapper = [sys.executable, str(BENCH_DIR / "measure.py")]
    if stdout:
        wrapper += ["--stdout", stdout]
    proc = subprocess.run([*wrapper, "--", *cmd], capture_output=True, text=True, check=True)
    rec: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return rec


# --------------------------------------------------------------------------
# HTA
# --------------------------------------------------------------------------


def cmd_hta(a: argparse.Namespace) -> dict[str, Any]:
    Path("/tmp/tabench/hta_patterns_out").mkdir(parents=True, exist_ok=True)
    calls = [c for name in a.analyses for c in HTA_CALLS.get(name, [])]
    busy0, t0 = system_busy_s(), time.perf_counter()
    res = run_hta(Path(a.trace_dir), calls, python=a.hta_python, return_data=False,
                  log=Path(a.log) if a.log else None)
    wall = time.perf_counter() - t0
    res["process_wall_s"] = wall
    res["process_other_cpu_s"] = None  # HTA's own CPU is not known here: see per call
    res["machine_busy_s"] = system_busy_s() - busy0
    res["trace_dir"] = a.trace_dir
    res["machine"] = machine()
    res["analyses"] = {name: [c["id"] for c in HTA_CALLS.get(name, [])] for name in a.analyses}
    return res


# --------------------------------------------------------------------------
# traceatlas
# --------------------------------------------------------------------------

# One process: open the store, run each analysis once (warm-up), then time it.
TA_WORKER = r'''
import gc, json, os, sys, time
t_start = time.perf_counter()
import traceatlas
from traceatlas.analysis import run
spec = json.loads(sys.argv[2])
def busy():
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    return (sum(t[:3]) + sum(t[5:8])) / os.sysconf("SC_CLK_TCK")
trace = traceatlas.open(sys.argv[1])
t_open = time.perf_counter()
print("TA_OPEN " + json.dumps({"import_open_s": t_open - t_start}), flush=True)
for name in spec["analyses"]:
    params = spec["params"].get(name, {})
    runs = []
    err = None
    for i in range(spec["repeat"] + spec["warmup"]):
        gc.collect()
        b0 = busy(); c0 = time.process_time(); w0 = time.perf_counter()
        try:
            res = run(name, trace, params)
            rows = res.table.height
        except Exception as exc:
            err = f"{type(exc).__name__}: {exc}"
            break
        w1 = time.perf_counter(); c1 = time.process_time(); b1 = busy()
        runs.append({"wall_s": w1 - w0, "cpu_s": c1 - c0,
                     "other_cpu_s": max(b1 - b0 - (c1 - c0), 0.0),
                     "warmup": i < spec["warmup"], "rows": rows})
    print("TA_RUN " + json.dumps({"analysis": name, "params": params, "runs": runs,
                                  "error": err}), flush=True)
print("TA_TOTAL " + json.dumps({"process_s": time.perf_counter() - t_start}), flush=True)
'''


def run_ta_worker(store: Path, analyses: list[str], params: dict[str, dict[str, Any]],
                  warmup: int, repeat: int, stdout: Path) -> dict[str, Any]:
    """TA_WORKER under measure.py; its parsed records plus the measure record."""
    spec = {"analyses": analyses, "params": params, "warmup": warmup, "repeat": repeat}
    rec = measured([str(VENV_BIN / "python"), "-c", TA_WORKER, str(store), json.dumps(spec)],
                   stdout=str(stdout))
    rec["cmd"] = [c if c != TA_WORKER else "<TA_WORKER>" for c in rec["cmd"]]
    out: dict[str, Any] = {"measure": rec, "runs": {}}
    for line in stdout.read_text().splitlines():
        tag, _, body = line.partition(" ")
        if tag == "TA_OPEN":
            out["open"] = json.loads(body)
        elif tag == "TA_RUN":
            r = json.loads(body)
            timed = [x for x in r["runs"] if not x["warmup"]]
            walls = sorted(x["wall_s"] for x in timed)
            r["best_s"] = walls[0] if walls else None
            r["median_s"] = statistics.median(walls) if walls else None
            out["runs"][r["analysis"]] = r
        elif tag == "TA_TOTAL":
            out["total"] = json.loads(body)
    return out


def cmd_ta(a: argparse.Namespace) -> dict[str, Any]:
    """Each analysis on the warm 1 GB store: in one process (warm-up + repeats) and in a
    fresh ``traceatlas analyze`` process each."""
    store = Path(a.store)
    res: dict[str, Any] = {"store": str(store), "machine": machine()}
    res["in_process"] = run_ta_worker(store, a.analyses, TA_PARAMS, 1, a.repeat,
                                      Path(a.log_dir) / "ta_1gb.stdout")
    res["fresh_process"] = {}
    for name in a.analyses:
        cmd = [str(VENV_BIN / "traceatlas"), "analyze", name, str(store), "--format", "json"]
        for k, v in TA_PARAMS.get(name, {}).items():
            cmd += ["-p", f"{k}={v}"]
        res["fresh_process"][name] = measured(cmd)
    return res


def cmd_eight(a: argparse.Namespace) -> dict[str, Any]:
    """The five analyses on 8 x 1 GB: each in a fresh CLI process, and all in one."""
    store = Path(a.store)
    res: dict[str, Any] = {"store": str(store), "machine": machine(), "fresh_process": {}}
    for name in FIVE:
        res["fresh_process"][name] = measured(
            [str(VENV_BIN / "traceatlas"), "analyze", name, str(store), "--format", "json"])
    res["one_process"] = run_ta_worker(store, list(FIVE), {}, 0, 1,
                                       Path(a.log_dir) / "ta_8x1gb.stdout")
    return res


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def report_1gb(hta: dict[str, Any], ta: dict[str, Any]) -> str:
    """The per-analysis table: HTA from its loaded state vs traceatlas on the warm store."""
    lines = [
        "| analysis | HTA call(s) | HTA s (other CPU s) | traceatlas in-process best s "
        "(median; other CPU s) | traceatlas fresh `analyze` s (other CPU s) "
        "| speed-up in-process | speed-up fresh process |",
        "|---|---|---:|---:|---:|---:|---:|"]
    for name in TA_ANALYSES:
        calls = [hta["calls"].get(c["id"]) for c in HTA_CALLS.get(name, [])]
        if not calls:
            h_s, h_other, h_txt, h_err = None, None, "none", None
        else:
            h_err = next((c["error"] for c in calls if c and c.get("error")), None)
            h_s = sum(c["wall_s"] for c in calls if c)
            h_other = sum(c["other_cpu_s"] for c in calls if c)
            h_txt = " + ".join(f"`{c['method']}`" for c in HTA_CALLS[name])
        r = ta["in_process"]["runs"].get(name, {})
        fresh = ta["fresh_process"].get(name, {})
        best, med = r.get("best_s"), r.get("median_s")
        t_other = max((x["other_cpu_s"] for x in r.get("runs", []) if not x["warmup"]),
                      default=None)
        ok = fresh.get("returncode") == 0
        f_s = fresh.get("wall_s") if ok else None
        if r.get("error"):
            ta_txt, f_txt = f"error: {r['error'].split(':')[0]}", "-"
        else:
            ta_txt = f"{_s(best)} ({_s(med)}; {_s(t_other)})"
            f_txt = f"{_s(f_s)} ({_s(fresh.get('other_cpu_s'))})"
        h_cell = f"failed ({h_err.split(':')[0]}) after {_s(h_s)}" if h_err else (
            "-" if h_s is None else f"{_s(h_s)} ({_s(h_other)})")
        sp1 = f"{h_s / best:.1f}x" if h_s and best and not h_err else "-"
        sp2 = f"{h_s / f_s:.1f}x" if h_s and f_s and not h_err else "-"
        lines.append(f"| {name} | {h_txt} | {h_cell} | {ta_txt} | {f_txt} | {sp1} | {sp2} |")
    load = hta.get("load") or {}
    lines.append("")
    lines.append(f"HTA load (not counted above): {_s(load.get('load_s'))} s, peak RSS "
                 f"{(load.get('maxrss_bytes') or 0) / 1e9:.2f} GB, {load.get('rows')} rows. "
                 f"traceatlas import + open: "
                 f"{_s(ta['in_process'].get('open', {}).get('import_open_s'))} s.")
    return "\n".join(lines) + "\n"


def report_8x(eight: dict[str, Any], ingest: dict[str, Any] | None) -> str:
    lines = ["| analysis | fresh `traceatlas analyze ... --format json` wall s | CPU s "
             "| other CPU s | peak RSS GB | one process: run s |",
             "|---|---:|---:|---:|---:|---:|"]
    one = eight["one_process"]
    tot_f = 0.0
    for name in FIVE:
        f = eight["fresh_process"][name]
        tot_f += f["wall_s"]
        r = one["runs"].get(name, {})
        lines.append(f"| {name} | {_s(f['wall_s'])} | {_s(f['cpu_s'])} | "
                     f"{_s(f['other_cpu_s'])} | {f['maxrss_bytes'] / 1e9:.2f} | "
                     f"{_s(r.get('best_s'))} |")
    m = one["measure"]
    lines.append(f"| **all five** | **{tot_f:.2f}** (sum of 5 processes) | | | | "
                 f"**{m['wall_s']:.2f}** (whole process: import, open, 5 runs; CPU "
                 f"{m['cpu_s']:.2f} s, other CPU {m['other_cpu_s']:.2f} s, peak RSS "
                 f"{m['maxrss_bytes'] / 1e9:.2f} GB) |")
    if ingest:
        i = ingest["ingest"]
        lines.append("")
        lines.append(f"Ingest of the 8 x 1 GB ({ingest['bytes'] / 1e9:.2f} GB) once, not "
                     f"counted: {i['wall_s']:.1f} s wall, {i['cpu_s']:.1f} s CPU, other CPU "
                     f"{i['other_cpu_s']:.1f} s, peak RSS {i['maxrss_bytes'] / 1e9:.2f} GB.")
    return "\n".join(lines) + "\n"


def cmd_report(a: argparse.Namespace) -> dict[str, Any]:
    hta = _load(BENCH_DIR / "results_analyses_hta.json")
    ta = _load(BENCH_DIR / "results_analyses_ta.json")
    eight = _load(BENCH_DIR / "results_analyses_8x1gb.json")
    ingest = _load(BENCH_DIR / "results_analyses_ingest_8x1gb.json")
    if hta and ta:
        print(report_1gb(hta, ta))
    if eight:
        print(report_8x(eight, ingest))
    return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hta", help="HTA: load once, time each analysis")
    h.add_argument("--trace-dir", default=str(DIR_1GB))
    h.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    h.add_argument("--analyses", nargs="*", default=list(HTA_CALLS))
    h.add_argument("--log", default="/tmp/tabench/logs/hta_analyses.log")
    h.add_argument("--json-out", default=str(BENCH_DIR / "results_analyses_hta.json"))
    p = sub.add_parser("prep", help="make /tmp/tabench/8x1gb and ingest it")
    p.add_argument("--json-out", default=str(BENCH_DIR / "results_analyses_ingest_8x1gb.json"))
    t = sub.add_parser("ta", help="traceatlas: each analysis on the warm 1 GB store")
    t.add_argument("--store", default=str(STORE_1GB))
    t.add_argument("--analyses", nargs="*", default=list(TA_ANALYSES))
    t.add_argument("--repeat", type=int, default=3)
    t.add_argument("--log-dir", default="/tmp/tabench/logs")
    t.add_argument("--json-out", default=str(BENCH_DIR / "results_analyses_ta.json"))
    e = sub.add_parser("eight", help="the five analyses on 8 x 1 GB")
    e.add_argument("--store", default=str(STORE_8X))
    e.add_argument("--log-dir", default="/tmp/tabench/logs")
    e.add_argument("--json-out", default=str(BENCH_DIR / "results_analyses_8x1gb.json"))
    sub.add_parser("report", help="markdown tables from the JSON results")
    a = ap.parse_args(argv)
    res = {"hta": cmd_hta, "prep": cmd_prep, "ta": cmd_ta, "eight": cmd_eight,
           "report": cmd_report}[a.cmd](a)
    if a.cmd == "report":
        return 0
    Path(a.json_out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {a.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
