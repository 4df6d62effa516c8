"""HPC analyses speed (issue 5): 1,024 ranks x ~10 M events, profile + comm_matrix +
load_imbalance on the warm store.

Steps (each result goes into one JSON file):

1. generate: ``traceatlas.testing.mpi.write_mpi_trace`` writes the Paraver trace
   (``--ranks`` x ``--iterations`` of compute, MPI_Send/MPI_Recv ring and MPI_Allreduce;
   4 intervals + 1 message per rank and iteration, + MPI_Init/MPI_Finalize per rank), in
   this process (timed);
2. ingest: ``traceatlas ingest`` in its own process under ``bench/measure.py`` (reported
   apart from the analyses);
3. together: one fresh Python process (under measure.py) opens the store and runs the
   three analyses by name through ``traceatlas.analysis.run``; it reports the time of each
   call and the total from the start of the process (imports included);
4. fresh: each analysis alone in a fresh ``traceatlas analyze NAME STORE --format json``
   process under measure.py (wall, CPU, peak RSS, other_cpu_s);
5. extra (not part of the goal): ``phases`` on the same store, in the together process.

The machine is shared (2 cores): measure.py's ``other_cpu_s`` is the CPU time other work
took during a run; ``other_cpu_s / wall_s`` is the average number of cores it used.
Pipit is not timed: it is not installable here (PyPI ``pipit`` is an empty 0.0.1).

Example::

    .venv/bin/python bench/bench_hpc.py --gen-dir /tmp/tabench/hpc \\
        --json-out bench/results_hpc.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
VENV_BIN = REPO_ROOT / ".venv" / "bin"
ANALYSES = ("profile", "comm_matrix", "load_imbalance")
EXTRA = ("phases",)
GOAL_S = 60.0


def measured(cmd: list[str], timeout: float, stdout: Path | None = None) -> dict[str, Any]:
    """Run ``cmd`` under bench/measure.py; its JSON record."""
    wrapper = [sys.executable, str(BENCH_DIR / "measure.py"), "--timeout", str(timeout)]
    if stdout is not None:
        wrapper += ["--stdout", str(stdout)]
    out = subprocess.run([*wrapper, "--", *cmd], capture_output=True, text=True, check=True)
    rec: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return rec


def generate(prv: Path, ranks: int, iterations: int, imbalance: float) -> dict[str, Any]:
    """Write the trace (skipped when ``prv`` and its counts file exist); counts and time."""
    from traceatlas.testing.mpi import write_mpi_trace

    info = prv.with_suffix(".counts.json")
    params = {"ranks": ranks, "iterations": iterations, "imbalance": imbalance}
    if prv.exists() and info.exists():
        old = json.loads(info.read_text())
        if old.get("params") == params:
            return dict(old, reused=True)
    prv.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    trace = write_mpi_trace(prv, ranks=ranks, iterations=iterations, imbalance=imbalance,
                            message_bytes=(1024, 4096, 65536))
    record = {"params": params, "counts": trace.counts,
              "write_s": time.perf_counter() - t0, "prv_bytes": prv.stat().st_size}
    info.write_text(json.dumps(record))
    return dict(record, reused=False)


def together(store: str, names: list[str]) -> None:
    """(Child process) open the store, run each analysis once; print JSON timings."""
    t_start = time.perf_counter()
    import traceatlas
    from traceatlas.analysis import run

    trace = traceatlas.open(store)
    t_open = time.perf_counter()
    calls = []
    for name in names:
        t0 = time.perf_counter()
        result = run(name, trace)
        calls.append({"analysis": name, "wall_s": time.perf_counter() - t0,
                      "rows": result.table.height})
    print(json.dumps({"import_open_s": t_open - t_start, "calls": calls,
                      "total_s": time.perf_counter() - t_start}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gen-dir", type=Path, default=Path("/tmp/tabench/hpc"))
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--iterations", type=int, default=1954,
                    help="per rank; 5 events each (1954 x 1024 x 5 + 2 x 1024 = 10.0 M)")
    ap.add_argument("--imbalance", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--skip-extra", action="store_true", help="do not time phases")
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--together-child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.together_child:
        together(a.together_child[0], a.together_child[1:])
        return 0

    from traceatlas.analysis.registry import ANALYSES as REGISTERED

    missing = [n for n in ANALYSES if n not in REGISTERED]
    if missing:
        print(f"analyses not registered yet: {', '.join(missing)}", file=sys.stderr)
        return 1
    prv = a.gen_dir / f"mpi_{a.ranks}r_{a.iterations}it.prv"
    store = a.gen_dir / f"mpi_{a.ranks}r_{a.iterations}it.tastore"
    results: dict[str, Any] = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version()},
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "generate": generate(prv, a.ranks, a.iterations, a.imbalance),
    }
    print(json.dumps(results["generate"]), flush=True)
    if store.exists():
        shutil.rmtree(store)
    results["ingest"] = measured([str(VENV_BIN / "traceatlas"), "ingest", str(prv),
                                  "-o", str(store)], a.timeout)
    print(json.dumps({"ingest": results["ingest"]}), flush=True)
    child_out = a.gen_dir / "together.json"
    names = list(ANALYSES) + ([] if a.skip_extra else list(EXTRA))
    for label, run_names in (("together", list(ANALYSES)), ("together_with_phases", names)):
        if label == "together_with_phases" and a.skip_extra:
            continue
        rec = measured([sys.executable, str(Path(__file__).resolve()), "--together-child",
                        str(store), *run_names], a.timeout, stdout=child_out)
        rec["child"] = json.loads(child_out.read_text().strip().splitlines()[-1])
        results[label] = rec
        print(json.dumps({label: rec}), flush=True)
    results["fresh"] = {}
    for name in ANALYSES:
        rec = measured([str(VENV_BIN / "traceatlas"), "analyze", name, str(store),
                        "--format", "json"], a.timeout, stdout=a.gen_dir / f"{name}.json")
        results["fresh"][name] = rec
        print(json.dumps({name: rec}), flush=True)
    fresh_sum = sum(r["wall_s"] for r in results["fresh"].values())
    results["summary"] = {
        "goal_s": GOAL_S,
        "together_wall_s": results["together"]["wall_s"],
        "fresh_sum_wall_s": fresh_sum,
        "meets_goal": results["together"]["wall_s"] < GOAL_S,
    }
    print(json.dumps(results["summary"]), flush=True)
    if a.json_out is not None:
        a.json_out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
