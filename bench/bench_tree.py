"""Speed of ``analyze tree`` (top_down, bottom_up, hot_path) and ``export --to folded`` on a
~1 GB single-rank Kineto trace with Python stacks.

Preparation (skipped when ``WORK/ts.tastore`` exists): a TraceLens H100 trace with
``with_stack`` Python frames (default: facebook_timesformer, 18 MB of JSON, ~50k events)
is replicated in time with ``/work/shared/tools/scale_trace.py --copies N`` (73 copies:
1.00 GB of JSON, 3.65 M events, 3.46 M intervals), ingested with ``traceatlas ingest``
(timed once), and the JSON deleted.

Timed end to end (a new process each time: imports and store open included),
``--repeats`` times: wall seconds (median and best) and the CPU seconds (user + sys of
the child, all threads) of the median run, peak RSS, and the 1-minute load average
before each run (the machine may be shared: CPU seconds are the steadier figure).

Usage::

    .venv/bin/python bench/bench_tree.py --work /work/tmp_tree [--copies 73]
        [--repeats 3] [--out bench/results_tree.json] [--clean]
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
CLI = str(ROOT / ".venv" / "bin" / "traceatlas")
SCALE = "/work/shared/tools/scale_trace.py"
SOURCE = ("/work/shared/traces/tracelens/traces/h100/"
          "facebook_timesformer-base-finetuned-k400__1016002.json.gz")


def timed(cmd: list[str]) -> dict[str, float]:
    """Run ``cmd``; wall s, CPU s (user + sys of the child) and peak RSS (MB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "peak_rss_mb": round(after.ru_maxrss / 1024, 1), "load_1min": round(load, 2)}


def prepare(work: Path, copies: int) -> dict[str, Any]:
    """Scale, ingest, delete the JSON; returns what was built."""
    store = work / "ts.tastore"
    info: dict[str, Any] = {"source": SOURCE, "copies": copies}
    if store.exists():
        return info | {"prepared": "reused"}
    raw = work / "ts"
    subprocess.run([sys.executable, SCALE, SOURCE, str(raw), "--copies", str(copies),
                    "--ranks", "1"], check=True, capture_output=True)
    rank0 = raw / "rank-0.json"
    info["json_bytes"] = rank0.stat().st_size
    info["ingest"] = timed([CLI, "ingest", str(rank0), "-o", str(store)])
    shutil.rmtree(raw)
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--copies", type=int, default=73)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results_tree.json")
    ap.add_argument("--clean", action="store_true")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    info = prepare(args.work, args.copies)
    store = str(args.work / "ts.tastore")
    commands = {
        "tree_top_down": [CLI, "analyze", "tree", store, "-p", "view=top_down",
                          "--format", "csv"],
        "tree_bottom_up": [CLI, "analyze", "tree", store, "-p", "view=bottom_up",
                           "--format", "csv"],
        "tree_hot_path": [CLI, "analyze", "tree", store, "-p", "view=hot_path",
                          "--format", "csv"],
        "export_folded": [CLI, "export", store, "--to", "folded", "-o",
                          str(args.work / "out.folded")],
        "info": [CLI, "info", store],  # open + imports: the fixed cost of a command
    }
    results: dict[str, Any] = {}
    for name, cmd in commands.items():
        runs = [timed(cmd) for _ in range(args.repeats)]
        walls = [r["wall_s"] for r in runs]
        median = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
        results[name] = {"wall_median_s": statistics.median(walls), "wall_best_s": min(walls),
                         "cpu_s_of_median": median["cpu_s"],
                         "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                         "load_1min": [r["load_1min"] for r in runs]}
        print(name, results[name], flush=True)
    doc = {"what": "analyze tree / export folded on a ~1 GB single-rank Kineto trace",
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "platform": platform.platform()},
           "trace": info, "repeats": args.repeats, "results": results}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    if args.clean:
        shutil.rmtree(args.work)


if __name__ == "__main__":
    main()
