"""RSS after each of N runs of one rank batch of an analysis in one process: does the
process keep native memory between calls?

    python bench/batch_repeat_rss.py STORE idle 12 0,1,2,3
"""

from __future__ import annotations

import gc
import os
import sys

from traceatlas.analysis import registry
from traceatlas.analysis.partitioned import RankTask, run_task


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    store, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ranks = tuple(int(r) for r in sys.argv[4].split(","))
    params = tuple(sorted(registry.parse_params(registry.get_analysis(name), {}).items()))
    for i in range(n):
        run_task(RankTask(store, (), ranks, name, params))
        gc.collect()
        print(i, f"{_rss_mb():.0f} MB", flush=True)


if __name__ == "__main__":
    main()
