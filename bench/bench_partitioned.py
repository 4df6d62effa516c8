"""Peak memory of ``breakdown`` whole-trace vs partitioned (rank batches inline, the
``analyze --engine local`` path) on 8 / 32 / 64 ranks of a scaled real trace.

    python bench/bench_partitioned.py STORE [--out bench/results_partitioned.json]

STORE: a store of >= 64 ranks (e.g. h100-planted/healthy/rank-0.json.gz replicated with
``../shared/tools/scale_trace.py --copies C --ranks 64`` and ingested). N ranks = the view
``--ranks 0-(N-1)`` (reads only those ranks' parts). Each measurement runs in a fresh
process; peak = its ``ru_maxrss``. Optional: ``--dask`` adds wall time of the partitioned
run on a LocalCluster of 1 and 2 workers at 64 ranks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import resource, sys, time, warnings
warnings.simplefilter("ignore")
import traceatlas
from traceatlas.analysis import registry
from traceatlas.engine import LocalEngine, get_engine
store, n, mode, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
trace = traceatlas.Trace(store).select(ranks=f"0-{n - 1}")
engine = None if mode == "whole" else LocalEngine(1) if mode == "local" else get_engine(mode)
t = time.perf_counter()
rows = registry.run(name, trace, {}, engine=engine).table.height
wall = time.perf_counter() - t
if engine is not None:
    engine.close()
print(rows, wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def measure(store: str, n: int, mode: str, name: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, store, str(n), mode, name],
                         capture_output=True, text=True, check=True).stdout.split()
    return {"rows": int(out[0]), "wall_s": round(float(out[1]), 3),
            "peak_rss_mb": round(int(out[2]) / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--out", default="bench/results_partitioned.json")
    ap.add_argument("--analysis", default="breakdown")
    ap.add_argument("--dask", action="store_true")
    args = ap.parse_args()
    store = Path(args.store)
    parts = sorted((store / "intervals").glob("rank=*/part-0.parquet"))
    results: dict[str, object] = {
        "analysis": args.analysis, "store": str(store),
        "intervals_bytes_per_rank": parts[0].stat().st_size if parts else 0,
        "store_bytes": sum(p.stat().st_size for p in store.rglob("*.parquet")),
        "runs": []}
    runs: list[dict[str, object]] = results["runs"]  # type: ignore[assignment]
    for n in (8, 32, 64):
        for mode in ("whole", "local"):
            row = {"ranks": n, "mode": mode, **measure(str(store), n, mode, args.analysis)}
            print(row, flush=True)
            runs.append(row)
    if args.dask:
        for mode in ("dask:1", "dask:2"):
            t = time.perf_counter()
            row = {"ranks": 64, "mode": mode, **measure(str(store), 64, mode, args.analysis),
                   "process_wall_s": 0.0}
            row["process_wall_s"] = round(time.perf_counter() - t, 2)
            print(row, flush=True)
            runs.append(row)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
