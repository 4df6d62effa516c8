"""CPU seconds of ``analyze efficiency`` and ``summary`` on a ~1 GB single-rank store, old
tree against new (the numpy unions of ``ops/unions.py`` and the numpy host sweep of
``analysis/efficiency.py``), alternating old / new, each run a new process (imports and
store open included), best of ``--repeats``, with the 1-minute load average before each
run (the machine is shared: CPU seconds are the steadier figure). The outputs of the two
trees are compared (efficiency CSV byte for byte; summary JSON as parsed data).

The store: h100-planted/healthy rank 0 scaled with ``/work/shared/tools/scale_trace.py
--copies 95 --ranks 1`` (995 MB of JSON, 2.24 M intervals), then ``traceatlas ingest``.
The old tree: ``git worktree add --detach /tmp/u_base <commit before>``.

Usage::

    .venv/bin/python bench/bench_unions.py --store /work/tmp_u/store --base /tmp/u_base/src
        [--repeats 3] [--out bench/results_unions.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI = [str(ROOT / ".venv" / "bin" / "traceatlas")]


def timed(cmd: list[str], src: Path) -> tuple[dict[str, float], str]:
    """Run ``cmd`` with ``src`` first on PYTHONPATH: wall s, CPU s (user + sys of the
    child, all threads), load average before; and its stdout."""
    env = dict(os.environ, PYTHONPATH=str(src))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return ({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "load_1min": round(load, 2)},
            proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--base", type=Path, required=True, help="src/ of the old tree")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results_unions.json")
    args = ap.parse_args()
    trees = {"old": args.base.resolve(), "new": ROOT / "src"}
    tmp = Path(tempfile.mkdtemp(prefix="bench_unions_"))
    commands = {
        "efficiency": lambda tree: [*CLI, "analyze", "efficiency", str(args.store),
                                    "--format", "csv"],
        "summary": lambda tree: [*CLI, "summary", str(args.store), "-o",
                                 str(tmp / f"{tree}.json")],
        "info": lambda tree: [*CLI, "info", str(args.store)],  # the fixed cost
    }
    results: dict[str, Any] = {"store": str(args.store), "cpu_count": os.cpu_count()}
    for name, make in commands.items():
        runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        outputs: dict[str, str] = {}
        for _ in range(args.repeats):
            for tree in ("old", "new"):
                run, out = timed(make(tree), trees[tree])
                runs[tree].append(run)
                outputs[tree] = out
        same: bool | None = None
        if name == "efficiency":
            same = outputs["old"] == outputs["new"]
        elif name == "summary":
            same = (json.loads((tmp / "old.json").read_text())
                    == json.loads((tmp / "new.json").read_text()))
        results[name] = {tree: {"cpu_best_s": min(r["cpu_s"] for r in rs),
                                "wall_best_s": min(r["wall_s"] for r in rs), "runs": rs}
                         for tree, rs in runs.items()} | {"identical_output": same}
        print(name, json.dumps({t: results[name][t]["cpu_best_s"] for t in runs}),
              "identical:", same, flush=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
