"""The ``efficiency`` analysis on one store: whole (one process reads every rank) vs in
rank batches (``--engine local``: batches of 4 ranks one after the other; ``batched1``: 1
rank a batch) vs the frozen
pre-batching code; each mode in its own process under ``/usr/bin/time -v`` (wall s,
user+sys CPU s, peak RSS MiB), results checked equal. Heavy on a 1 GB/rank store: run
under ``flock /tmp/heavy.lock``.

    python bench/bench_efficiency_partitioned.py STORE [--modes whole,batched,frozen]
        [--region REGION] [-o OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import sys, warnings
warnings.simplefilter("ignore")
import traceatlas
from traceatlas.analysis import registry
from traceatlas.engine import LocalEngine
store, mode, region, out = sys.argv[1:5]
trace = traceatlas.Trace(store)
eff = registry.get_analysis("efficiency")
typed = registry.parse_params(eff, {"region": region})
if mode == "whole":
    result = eff.run(trace, typed)
elif mode == "batched":
    result = registry.run("efficiency", trace, {"region": region}, engine=LocalEngine(1))
elif mode == "batched1":
    from traceatlas.analysis.partitioned import run_partitioned
    result = run_partitioned(eff, trace, typed, LocalEngine(1), ranks_per_task=1)
else:
    from traceatlas.testing.efficiency_whole import Efficiency
    result = Efficiency().run(trace, typed)
result.table.write_parquet(out + ".table.parquet")
for k, v in result.extra.items():
    v.write_parquet(out + "." + k + ".parquet")
open(out + ".notes", "w").write("\\n".join(result.notes))
"""


def _time_v(text: str) -> dict[str, float]:
    def grab(label: str) -> str:
        match = re.search(rf"{re.escape(label)}: (.+)", text)
        return match.group(1).strip() if match else "0"

    wall = grab("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    secs = sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall.split(":"))))
    return {"wall_s": round(secs, 2),
            "cpu_s": round(float(grab("User time (seconds)"))
                           + float(grab("System time (seconds)")), 2),
            "peak_rss_mib": round(int(grab("Maximum resident set size (kbytes)")) / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--modes", default="whole,batched")
    ap.add_argument("--region", default="")
    ap.add_argument("-o", "--out")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for mode in args.modes.split(","):
            out = os.path.join(tmp, mode)
            proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", CHILD,
                                   args.store, mode, args.region, out],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-3000:])
            load = os.getloadavg()[0]
            rows.append({"mode": mode, **_time_v(proc.stderr), "load1": round(load, 2)})
            outs[mode] = out
        import polars as pl
        from polars.testing import assert_frame_equal

        modes = list(outs)
        for other in modes[1:]:
            for part in ("table", "per_rank", "per_thread"):
                assert_frame_equal(pl.read_parquet(f"{outs[other]}.{part}.parquet"),
                                   pl.read_parquet(f"{outs[modes[0]]}.{part}.parquet"),
                                   rel_tol=1e-12)
            assert Path(outs[other] + ".notes").read_text() == \
                Path(outs[modes[0]] + ".notes").read_text()
    report = {"store": args.store, "region": args.region, "runs": rows,
              "equal": True, "cpus": os.cpu_count()}
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
