"""Cost of the part stats (``store/part_stats.py``): ``part_stats`` over every part of
STORE, serially, then ``write_manifest`` (footer, hash and stats of every part, threads).
It writes STORE's manifest again: run it on a copy (``cp -al`` of the parts).

    python bench/bench_part_stats.py /work/data/stats/s64.tastore
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from traceatlas.store.manifest import write_manifest
from traceatlas.store.part_stats import part_stats


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    store = Path(sys.argv[1])
    manifest = json.loads((store / "manifest.json").read_text())
    manifest.pop("parts", None)
    c0, t0 = _cpu(), time.perf_counter()
    n = sum(part_stats(p, p.relative_to(store).parts[0]) is not None
            for p in sorted(store.glob("*/rank=*/*.parquet")))
    print(f"part_stats on {n} parts: {time.perf_counter() - t0:.2f} s, {_cpu() - c0:.2f} CPU-s")
    c0, t0 = _cpu(), time.perf_counter()
    write_manifest(store, manifest)
    print(f"write_manifest: {time.perf_counter() - t0:.2f} s, {_cpu() - c0:.2f} CPU-s")


if __name__ == "__main__":
    main()
