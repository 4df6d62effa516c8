"""``idle``'s causes table (``analysis.idle_causes.causes``) on one rank: the current module
against a former version of it (a copy of the file, e.g. from ``git show REV:path``), same
inputs, CPU seconds per run (process time), tables checked equal, load average.

    git show 0a2d1e1:src/traceatlas/analysis/idle_causes.py > /tmp/idle_causes_before.py
    .venv/bin/python bench/bench_idle_causes.py /work/data/report/8x1gb.tastore \\
        --before /tmp/idle_causes_before.py --json-out bench/results_idle_causes_8x1gb.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path
from typing import Any


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("store")
    p.add_argument("--before", required=True, help="a former idle_causes.py")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json-out")
    a = p.parse_args()

    import polars as pl

    import traceatlas
    from traceatlas.analysis import idle, idle_causes

    spec = importlib.util.spec_from_file_location("idle_causes_before", a.before)
    assert spec is not None and spec.loader is not None
    before = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(before)
    trace = traceatlas.Trace(a.store).select(ranks=[a.rank])
    device, launch = pl.collect_all([idle._device_work(trace), idle.launches(trace)])
    gaps = (idle.idle_gaps(trace, 30_000, device=device.lazy(), launch=launch.lazy())
            .filter(pl.col("category") == "host_wait").collect())
    out: dict[str, Any] = {"store": a.store, "rank": a.rank, "date": time.strftime("%F %T"),
                           "host_wait_gaps": gaps.height, "device_rows": device.height,
                           "load_before": load(), "cpu_s": {"before": [], "after": []}}
    ref = None
    for _ in range(a.repeat):
        for name, mod in (("before", before), ("after", idle_causes)):
            t0 = time.process_time()
            table = mod.causes(trace, gaps, device)
            out["cpu_s"][name].append(round(time.process_time() - t0, 3))
            ref = table if ref is None else ref
            if not ref.equals(table):
                raise SystemExit(f"{name}: the causes table differs")
    out["equal"] = True
    out["load_after"] = load()
    print(json.dumps(out))
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
