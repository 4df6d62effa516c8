"""Start-up time of the CLI (issue 14: ``--help`` and ``info STORE`` under 0.5 s).

Runs each command ``--runs`` times (after one warm-up) for the working tree and for an
older revision (``--before``, extracted with ``git archive`` into a temporary directory
and put first on PYTHONPATH, same interpreter and packages), interleaved so that both
see the same machine load. Reports per command: best and median wall time (s), best
user+system CPU time (s) of the process, and the 1-minute load average around the runs
(on a shared machine the wall time grows with the load; the CPU time much less).
``--json`` appends one record per invocation.

    .venv/bin/python bench/bench_startup.py --before aea1fb8 --runs 7 \
        --json bench/results_startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / ".venv" / "bin" / "traceatlas"
COMMANDS = (("--help",), ("info", "{store}"), ("analyze", "--help"), ("view", "--help"))


def _extract(rev: str, into: Path) -> Path:
    """The ``src`` tree of ``rev`` under ``into``; returns the directory for PYTHONPATH."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "src.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def _one(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, help="git revision to compare with")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp_name:
        tmp = Path(tmp_name)
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        base_env["TRACEATLAS_CACHE_DIR"] = str(tmp / "cache")
        trees: dict[str, dict[str, str]] = {"after (working tree)": base_env}
        if args.before:
            old = _extract(args.before, tmp / "before")
            trees[f"before ({args.before})"] = {**base_env, "PYTHONPATH": str(old)}
        store = tmp / "sample.tastore"
        subprocess.run([str(CLI), "ingest", str(ROOT / "examples" / "sample_trace"), "-o",
                        str(store)], env=base_env, check=True, capture_output=True)
        results: dict[str, dict[str, dict[str, object]]] = {label: {} for label in trees}
        for template in COMMANDS:
            cmd = [a.format(store=store) for a in template]
            name = "traceatlas " + " ".join(template).replace("{store}", "STORE")
            samples: dict[str, list[tuple[float, float]]] = {label: [] for label in trees}
            load0 = os.getloadavg()[0]
            for env in trees.values():
                _one([str(CLI), *cmd], env)  # warm-up (page cache, .pyc)
            for _ in range(args.runs):
                for label, env in trees.items():
                    samples[label].append(_one([str(CLI), *cmd], env))
            load1 = os.getloadavg()[0]
            for label, runs in samples.items():
                walls = [w for w, _ in runs]
                results[label][name] = {
                    "best_wall_s": round(min(walls), 3),
                    "median_wall_s": round(statistics.median(walls), 3),
                    "best_cpu_s": round(min(c for _, c in runs), 3),
                    "runs": len(runs),
                    "loadavg_1min": [round(load0, 2), round(load1, 2)],
                }
                print(f"{label:28s} {name:32s} best {min(walls):.3f} s  median "
                      f"{statistics.median(walls):.3f} s  cpu {results[label][name]['best_cpu_s']}"
                      f" s  load {load0:.1f}-{load1:.1f}", flush=True)
    if args.json:
        record = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": f"{os.cpu_count()} CPU cores, shared with other jobs (see loadavg)",
            "python": sys.version.split()[0],
            "results": results,
        }
        # one record per invocation, appended: the machine's load differs between them
        runs = json.loads(args.json.read_text())["runs"] if args.json.exists() else []
        args.json.write_text(json.dumps({"runs": [*runs, record]}, indent=2) + "\n")


if __name__ == "__main__":
    main()
