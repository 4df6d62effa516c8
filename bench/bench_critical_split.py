"""``critical_path`` whole vs in rank batches (issue 15): peak memory and CPU over 4, 8
and 16 ranks of one store, each measurement a fresh process under ``bench/measure.py``.

    flock /tmp/heavy.lock .venv/bin/python bench/bench_critical_split.py STORE \\
        [--ranks 4 8 16] [--step N] [--ranks-per-task 1] [--json-out FILE]

Input: a store of equal ranks (e.g. h100-planted/healthy replicated with
``shared/tools/scale_trace.py --copies 5 --ranks 16 --skew-us 37``). The view is the first
N ranks (``Trace.select(ranks=...)``), optionally one step. "whole" is
``CriticalPath.run`` (one graph over every rank); "batched" is ``run_partitioned`` on
``LocalEngine(1)`` with ``--ranks-per-task`` ranks a batch (the analysis' default fills
batches up to ``partitioned.ROWS_PER_TASK`` stored rows). Both results are compared
(``assert_same_result``) in a separate process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

MEASURE = str(Path(__file__).resolve().parent / "measure.py")
CHILD = """
import sys, warnings
warnings.simplefilter("ignore")
import traceatlas
from traceatlas.analysis import partitioned, registry
from traceatlas.engine import LocalEngine
store, mode = sys.argv[1], sys.argv[4]
n, step, per = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
view = traceatlas.Trace(store).select(ranks=f"0-{n - 1}")
if step >= 0:
    view = view.select(step=step)
a = registry.get_analysis("critical_path")
typed = registry.parse_params(a, {})
if mode == "whole":
    r = a.run(view, typed)
elif mode == "batched":
    r = partitioned.run_partitioned(a, view, typed, LocalEngine(1), ranks_per_task=per)
else:
    from traceatlas.testing.results import assert_same_result
    assert_same_result(partitioned.run_partitioned(a, view, typed, LocalEngine(1),
                                                   ranks_per_task=per), a.run(view, typed))
    r = None
print(r.table.height if r is not None else "same")
"""


def one(store: str, n: int, step: int, mode: str, per: int) -> dict[str, Any]:
    """One fresh process: measure.py's JSON plus what the child printed."""
    out = Path(f"/tmp/bench_cs_{mode}_{n}.out")
    done = subprocess.run([sys.executable, MEASURE, "--stdout", str(out), "--", sys.executable,
                           "-c", CHILD, store, str(n), str(step), mode, str(per)],
                          capture_output=True, text=True, check=True)
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    row["printed"] = out.read_text().strip()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--step", type=int, default=-1)
    ap.add_argument("--ranks-per-task", type=int, default=1)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    rows = []
    for n in args.ranks:
        for mode in ("whole", "batched", "check"):
            got = one(args.store, n, args.step, mode, args.ranks_per_task)
            row = {"ranks": n, "mode": mode, "wall_s": got.get("wall_s"),
                   "cpu_s": got.get("cpu_s"),
                   "peak_mb": round(got.get("maxrss_bytes", 0) / 2**20, 1),
                   "other_cpu_s": got.get("other_cpu_s"), "printed": got["printed"]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"store": args.store, "step": args.step,
                                                   "ranks_per_task": args.ranks_per_task,
                                                   "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
