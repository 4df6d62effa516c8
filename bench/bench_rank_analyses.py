"""CPU time and peak RSS of the per-rank analyses ``idle``, ``annotations`` and ``syncs``.

Two measurements per analysis, each in a fresh process:

* ``rank``: the analysis' ``run()`` on one rank (``trace.select(ranks=[R])``), in process:
  CPU-s (user + sys of ``run()`` alone, ``resource.getrusage``), wall s, and the process'
  peak RSS (imports and the store's open included);
* ``store``: ``traceatlas analyze NAME STORE --engine local --format csv`` under
  ``/usr/bin/time -v``: wall, CPU-s (user + sys), peak RSS.

Load average (1, 5, 15 min) before and after each. Run it under the shared lock::

    flock /tmp/heavy.lock .venv/bin/python bench/bench_rank_analyses.py \\
        /work/data/report/8x1gb.tastore --json-out /tmp/rank_analyses.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
VENV_BIN = BENCH_DIR.parent / ".venv" / "bin"
ANALYSES = ("idle", "annotations", "syncs")

ONE_RANK = """
import json, resource, sys, time
from traceatlas.analysis import registry
from traceatlas.model.trace import Trace
trace = Trace(sys.argv[1]).select(ranks=[int(sys.argv[3])])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0, t0 = cpu(), time.perf_counter()
result = registry.run(sys.argv[2], trace)
wall, used = time.perf_counter() - t0, cpu() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cpu_s": round(used, 3), "wall_s": round(wall, 3),
                  "peak_rss_mb": round(peak, 1), "rows": result.table.height}))
"""


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def one_rank(store: str, name: str, rank: int) -> dict[str, Any]:
    before = load()
    out = subprocess.run([str(VENV_BIN / "python"), "-c", ONE_RANK, store, name, str(rank)],
                         capture_output=True, text=True, check=True)
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    row.update(load_before=before, load_after=load())
    return row


def whole_store(store: str, name: str) -> dict[str, Any]:
    cmd = [str(VENV_BIN / "traceatlas"), "analyze", name, store, "--engine", "local",
           "--format", "csv"]
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        before = load()
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-v", "-o", tf.name, *cmd],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t0
        text = Path(tf.name).read_text()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")

    def field(label: str) -> float:
        m = re.search(rf"{re.escape(label)}: ([0-9.]+)", text)
        return float(m.group(1)) if m else float("nan")

    return {"wall_s": round(wall, 3),
            "cpu_s": round(field("User time (seconds)") + field("System time (seconds)"), 3),
            "peak_rss_mb": round(field("Maximum resident set size (kbytes)") / 1024, 1),
            "load_before": before, "load_after": load()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("store")
    ap.add_argument("--analyses", default=",".join(ANALYSES))
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--skip-store", action="store_true", help="only the one-rank runs")
    ap.add_argument("--label", default="", help="e.g. before / after (kept in the JSON)")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    git = subprocess.run(["git", "-C", str(BENCH_DIR.parent), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    out: dict[str, Any] = {"store": a.store, "label": a.label, "commit": git,
                           "date": time.strftime("%F %T"), "rank": a.rank, "analyses": {}}
    for name in a.analyses.split(","):
        res: dict[str, Any] = {"rank": [], "store": []}
        for _ in range(a.repeat):
            res["rank"].append(one_rank(a.store, name, a.rank))
            print(name, "rank", res["rank"][-1], file=sys.stderr, flush=True)
        if not a.skip_store:
            for _ in range(a.repeat):
                res["store"].append(whole_store(a.store, name))
                print(name, "store", res["store"][-1], file=sys.stderr, flush=True)
        out["analyses"][name] = res
    text = json.dumps(out, indent=1)
    if a.json_out:
        Path(a.json_out).write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
