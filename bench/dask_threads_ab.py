"""A/B of the Dask workers' Polars pool: ``report`` with 1 and 2 LocalCluster workers,
alternating the workers' ``POLARS_MAX_THREADS`` unset (the engine sizes it to the
worker's one thread) and ``=N`` (N = this machine's cores: Polars' own default, what the
workers ran before). Same store, same process tree as ``bench_partitioned.py``.

    flock /tmp/heavy.lock python bench/dask_threads_ab.py STORE [--pairs 3] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_partitioned import load, report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cores = str(os.cpu_count())
    runs: list[dict[str, Any]] = []
    for i in range(args.pairs):
        for pool in ("one", cores):
            if pool == "one":
                os.environ.pop("POLARS_MAX_THREADS", None)
            else:
                os.environ["POLARS_MAX_THREADS"] = pool
            for mode in ("dask:1", "dask:2"):
                row = {"pair": i, "polars_threads": pool, "load_before": load(),
                       **report(args.store, 64, mode)}
                runs.append(row)
                print(json.dumps(row), flush=True)
    os.environ.pop("POLARS_MAX_THREADS", None)
    summary = {}
    for pool in ("one", cores):
        ratios = []
        for i in range(args.pairs):
            one, two = (next(r for r in runs if r["pair"] == i and r["polars_threads"] == pool
                             and r["mode"] == m) for m in ("dask:1", "dask:2"))
            ratios.append(round(one["wall_s"] / two["wall_s"], 2))
        summary[pool] = ratios
    print(json.dumps({"speedup_1_vs_2_workers": summary}))
    if args.out:
        args.out.write_text(json.dumps({"runs": runs, "speedup": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
