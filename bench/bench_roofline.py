"""Speed of ``analyze roofline`` and ``analyze tree`` on a ~1 GB single-rank Kineto trace
with shapes and Python stacks (issue 13: under 5 s each).

The trace and store are ``bench_tree.py``'s (TraceLens H100 timesformer, record_shapes and
with_stack, scaled to 73 copies: 1.00 GB of JSON, 3.46 M intervals; prepared by its
``prepare`` when ``WORK/ts.tastore`` is missing). Each command runs ``--repeats`` times in
a new process (imports and store open included): wall and CPU seconds (user + sys of the
child, all threads) of each run, the best of each, and the 1-minute load average before
each run (the machine may be shared: CPU seconds are the steadier figure).

Usage::

    .venv/bin/python bench/bench_roofline.py --work /work/tmp_e3 [--repeats 3]
        [--out bench/results_roofline.json] [--clean]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tree import CLI, prepare, timed

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--copies", type=int, default=73)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results_roofline.json")
    ap.add_argument("--clean", action="store_true")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    info = prepare(args.work, args.copies)
    store = str(args.work / "ts.tastore")
    commands = {
        "roofline": [CLI, "analyze", "roofline", store, "--format", "csv"],
        "roofline_by_rank": [CLI, "analyze", "roofline", store, "-p", "by=rank",
                             "--format", "csv"],
        "tree_top_down": [CLI, "analyze", "tree", store, "-p", "view=top_down",
                          "--format", "csv"],
        "tree_hot_path": [CLI, "analyze", "tree", store, "-p", "view=hot_path",
                          "--format", "csv"],
        "info": [CLI, "info", store],  # open + imports: the fixed cost of a command
    }
    results: dict[str, Any] = {}
    for name, cmd in commands.items():
        runs = [timed(cmd) for _ in range(args.repeats)]
        results[name] = {"wall_best_s": min(r["wall_s"] for r in runs),
                         "cpu_best_s": min(r["cpu_s"] for r in runs),
                         "runs": runs}
        print(name, {k: v for k, v in results[name].items() if k != "runs"},
              [r["load_1min"] for r in runs], flush=True)
    doc = {"what": "analyze roofline / tree on a ~1 GB single-rank Kineto trace",
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "platform": platform.platform()},
           "trace": info, "repeats": args.repeats, "results": results}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    if args.clean:
        shutil.rmtree(args.work)


if __name__ == "__main__":
    main()
