"""Speed of ``traceatlas diff``: two ~1 GB single-rank stores, and two baseline summaries.

Preparation (skipped when ``WORK/a.tastore`` and ``WORK/b.tastore`` already exist):
rank 0 of a real multi-step trace (default ``h100-planted/healthy``) is copied as is (A)
and with one kernel stretched by 20% (B, ``traceatlas.testing.stretch``); each is
replicated in time with ``/work/shared/tools/scale_trace.py --copies N`` (~10.7 MB per
copy: 100 copies ~ 1.07 GB of JSON, 500 ProfilerSteps), ingested with ``traceatlas
ingest -o``, and the JSON deleted. ``traceatlas summary`` then writes ``a.json`` and
``b.json``.

Timed end to end (a new process each time: imports included), ``--repeats`` times; the
best (minimum) and the median are kept, with the 1-minute load average before each run:

- ``traceatlas diff WORK/a.tastore WORK/b.tastore --format json -o /dev/null``-like
  (output to a file in WORK) -> ``stores_s``;
- ``traceatlas diff WORK/a.json WORK/b.json ...`` -> ``baselines_s``;
- ``traceatlas summary WORK/a.tastore -o WORK/a.json`` (once) -> ``summary_s``.

``*_cpu_s``: median CPU seconds (user + sys) of the same runs: the figure to trust when
the machine is shared (``load_avg_*`` says how loaded it was); ``*_best_*``: the fastest
run. ``--pythonpath DIR`` times another checkout's package (e.g. ``git archive REV src``
unpacked in DIR: ``DIR/src``) with the same virtualenv, for before/after figures.

Usage::

    nice -n 10 .venv/bin/python bench/bench_diff.py --work /work/bench_diff \\
        [--copies 100] [--repeats 3] [--out bench/results_diff_speed.json] [--clean]

``--clean`` deletes WORK at the end (the stores take ~0.5 GB each).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / ".." / "shared" / "traces" / "h100-planted" / "healthy" / "rank-0.json.gz"
SCALE = Path("/work/shared/tools/scale_trace.py")
KERNEL = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"
CLI = str(ROOT / ".venv" / "bin" / "traceatlas")
PY = str(ROOT / ".venv" / "bin" / "python")


CPU: list[float] = []
LOAD: list[float] = []
ENV: dict[str, str] = dict(os.environ)
"""CPU seconds (user + sys, the process and its children) of each ``_run``, in order: on
a shared machine the wall time depends on the load, the CPU time much less."""


def _run(cmd: list[str]) -> float:
    LOAD.append(os.getloadavg()[0])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=ENV)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if res.returncode not in (0, 1):
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-2000:]}")
    return took


def _prepare(work: Path, copies: int) -> dict[str, Any]:
    from traceatlas.testing.stretch import stretch_kernel

    info: dict[str, Any] = {}
    for side in ("a", "b"):
        store = work / f"{side}.tastore"
        if store.exists():
            continue
        src = work / f"{side}-src.json.gz"
        if side == "a":
            shutil.copyfile(TRACE, src)
        else:
            stretch_kernel(TRACE, src, KERNEL, 1.20)
        scaled = work / f"{side}-scaled"
        subprocess.run([PY, str(SCALE), str(src), str(scaled), "--copies", str(copies),
                        "--ranks", "1"], check=True, capture_output=True)
        files = sorted(scaled.iterdir())
        info[f"{side}_trace_bytes"] = sum(f.stat().st_size for f in files)
        info[f"{side}_ingest_s"] = _run([CLI, "ingest", str(scaled), "-o", str(store)])
        shutil.rmtree(scaled)
        src.unlink()
    return info


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/work/bench_diff"))
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results_diff_speed.json")
    ap.add_argument("--clean", action="store_true")
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--pythonpath", type=Path, default=None,
                    help="time the package under this directory's src/ instead")
    args = ap.parse_args()
    if args.pythonpath is not None:
        ENV["PYTHONPATH"] = str(args.pythonpath.resolve() / "src")
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    prep = _prepare(work, args.copies)
    if args.prepare_only:
        print(json.dumps(prep))
        return
    a, b = work / "a.tastore", work / "b.tastore"
    summary_s = _run([CLI, "summary", str(a), "-o", str(work / "a.json")])
    summary_cpu, summary_load = CPU[-1], LOAD[-1]
    _run([CLI, "summary", str(b), "-o", str(work / "b.json")])
    out_file = str(work / "diff.json")
    stores_cmd = [CLI, "diff", str(a), str(b), "--format", "json", "-o", out_file]
    base_cmd = [CLI, "diff", str(work / "a.json"), str(work / "b.json"), "--format", "json",
                "-o", out_file]
    load_before = os.getloadavg()[0]
    CPU.clear()
    LOAD.clear()
    stores = [_run(stores_cmd) for _ in range(args.repeats)]
    stores_cpu, stores_load = list(CPU), list(LOAD)
    CPU.clear()
    LOAD.clear()
    baselines = [_run(base_cmd) for _ in range(args.repeats)]
    baselines_cpu, baselines_load = list(CPU), list(LOAD)
    result = {
        "what": "traceatlas diff end to end (new process each run), median of repeats",
        "stores_cmd": " ".join(stores_cmd),
        "baselines_cmd": " ".join(base_cmd),
        "copies": args.copies,
        "store_bytes": {"a": _du(a), "b": _du(b)},
        "summary_bytes": {"a": (work / "a.json").stat().st_size,
                          "b": (work / "b.json").stat().st_size},
        "stores_s": statistics.median(stores),
        "stores_runs_s": stores,
        "baselines_s": statistics.median(baselines),
        "baselines_runs_s": baselines,
        "stores_cpu_s": statistics.median(stores_cpu),
        "baselines_cpu_s": statistics.median(baselines_cpu),
        "stores_best_s": min(stores),
        "stores_best_cpu_s": min(stores_cpu),
        "stores_runs_cpu_s": stores_cpu,
        "stores_runs_load_1min": stores_load,
        "baselines_best_s": min(baselines),
        "baselines_runs_load_1min": baselines_load,
        "package": str(args.pythonpath or ROOT),
        "summary_s": summary_s,
        "summary_cpu_s": summary_cpu,
        "summary_load_1min": summary_load,
        "prepare": prep,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_1min_before": load_before,
                    "load_avg_1min_after": os.getloadavg()[0]},
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if args.clean:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
