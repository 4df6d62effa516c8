"""nsys ingest before/after (issue 14): ``traceatlas ingest X.sqlite -o S`` end to end.

Input: ``nsys-ai/h100_2gpu_1s.sqlite`` replicated ``--copies`` times in time by
``bench_formats.scale_nsys`` (x40: 79 MB, 1.09 M intervals). "before" is a copy of the
current ``src`` with ``io/nsys*.py``, ``ingest/partition.py`` (staging, part writes) and
``ingest/__init__.py`` (which builds the partition jobs) taken from ``--base`` (so only
those differ);
"after" is ``src``. Runs alternate between the two, ``--repeat`` times each, each in a
fresh process; per run: wall s, CPU s (user + system of the process tree), peak RSS, and
the load average (``os.getloadavg()``) just before it. The machine is shared: CPU time is
the steadier figure, and best-of-N is reported.

Example::

    .venv/bin/python bench/bench_nsys.py --json-out bench/results_nsys.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from bench_formats import NSYS_SOURCE, scale_nsys  # noqa: E402

CHANGED = ("io/nsys*.py", "ingest/partition.py", "ingest/__init__.py")
"""The files the speed work changed (taken from ``--base`` for "before")."""


def old_tree(base: str, out: Path) -> Path:
    """A copy of ``src`` with the files of ``CHANGED`` as they were at commit ``base``."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(REPO / "src", out, ignore=shutil.ignore_patterns("__pycache__"))
    pkg = out / "traceatlas"
    for path in sorted(p for pattern in CHANGED for p in pkg.glob(pattern)):
        rel = f"src/traceatlas/{path.relative_to(pkg).as_posix()}"
        done = subprocess.run(["git", "-C", str(REPO), "show", f"{base}:{rel}"],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0:
            path.write_text(done.stdout)
    return out


def measure(src: Path, args: list[str]) -> dict[str, Any]:
    """One ``traceatlas`` process on source tree ``src``: wall, CPU (user + system of it
    and its waited-for children) and peak RSS, from ``wait4`` of that process alone."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    load = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c",
                             "from traceatlas.cli.main import main; main()", *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{src}: {' '.join(args)} failed:\n{err[-2000:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "maxrss_mb": round(usage.ru_maxrss / 1024, 1),
            "loadavg": [round(x, 2) for x in load]}


def main() -> None:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen-dir", type=Path, default=Path("/tmp/tabench/nsys"))
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--base", default="9b541c8", help="commit of the 'before' reader")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--also", default=None,
                    help="commit of a third reader to measure alongside (label 'also')")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--json-key", default=None,
                    help="store the record under this key of the existing --json-out file "
                         "(its other keys kept) instead of replacing the file")
    args = ap.parse_args()
    args.gen_dir.mkdir(parents=True, exist_ok=True)
    sqlite = args.gen_dir / f"nsys_x{args.copies}.sqlite"
    if not sqlite.exists():
        scale_nsys(NSYS_SOURCE, sqlite, args.copies)
    trees = {"before": old_tree(args.base, args.gen_dir / "src_before"),
             "after": REPO / "src"}
    if args.also:
        trees = {"before": trees["before"],
                 "also": old_tree(args.also, args.gen_dir / "src_also"),
                 "after": trees["after"]}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in trees}
    for _ in range(args.repeat):
        for label, src in trees.items():
            store = args.gen_dir / f"{label}.tastore"
            shutil.rmtree(store, ignore_errors=True)
            runs[label].append(measure(src, ["ingest", str(sqlite), "-o", str(store)]))
            print(label, runs[label][-1], flush=True)
    summary = {label: {"best_wall_s": min(r["wall_s"] for r in rs),
                       "best_cpu_s": min(r["cpu_s"] for r in rs),
                       "best_maxrss_mb": min(r["maxrss_mb"] for r in rs)}
               for label, rs in runs.items()}
    record = {
        "command": f"traceatlas ingest {sqlite.name} -o S",
        "bench": " ".join(["bench/bench_nsys.py", *sys.argv[1:]]),
        "input_bytes": sqlite.stat().st_size, "copies": args.copies, "base": args.base,
        "also": args.also,
        "cores": os.cpu_count(), "runs": runs, "best": summary,
    }
    print(json.dumps(summary, indent=1))
    if args.json_out:
        out: dict[str, Any] = record
        if args.json_key:
            out = json.loads(args.json_out.read_text()) if args.json_out.exists() else {}
            out[args.json_key] = record
        args.json_out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
