"""RSS of the process after each rank batch of one analysis (``analysis.partitioned``, local
engine, batches inline): does memory grow with the number of batches?

    .venv/bin/python bench/rss_per_batch.py STORE idle [--ranks 0-31] [-p key=value ...]

Per batch: the RSS at its start, its peak (a thread samples ``/proc/self/statm`` every
2 ms) and the RSS after it (MB), glibc's free memory returned first (``malloc_trim``;
Polars' allocator keeps its own pages: a flat "after" column over batches is the check,
not its level). This found the partials keeping their batch's string buffers
(``ops/detach.py``): before the fix the "after" column grew ~70 MB per 4-rank batch.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import threading
import time
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("analysis")
    ap.add_argument("--ranks", default=None, help="a rank selection, e.g. 0-31")
    ap.add_argument("-p", "--param", action="append", default=[])
    args = ap.parse_args()

    import traceatlas
    from traceatlas.analysis import partitioned
    from traceatlas.analysis.registry import get_analysis, parse_params
    from traceatlas.engine import LocalEngine

    libc = ctypes.CDLL("libc.so.6")
    trace = traceatlas.Trace(args.store)
    if args.ranks:
        trace = trace.select(ranks=args.ranks)
    analysis = get_analysis(args.analysis)
    params = parse_params(analysis, dict(p.split("=", 1) for p in args.param))
    peak = [0.0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.002)

    threading.Thread(target=sample, daemon=True).start()
    run_task = partitioned.run_task

    def measured(task: Any) -> Any:
        libc.malloc_trim(0)
        start = rss_mb()
        peak[0] = start
        t0 = time.process_time()
        out = run_task(task)
        print(f"ranks {task.ranks}: start {start:7.1f}  peak {peak[0]:7.1f}  "
              f"after {rss_mb():7.1f} MB  {time.process_time() - t0:6.2f} CPU-s", flush=True)
        return out

    partitioned.run_task = measured
    partitioned.run_partitioned(analysis, trace, params, LocalEngine(1))
    print(f"end {rss_mb():.1f} MB")


if __name__ == "__main__":
    main()
