"""The report's flame section alone: ``flame.build`` (rank chosen from the intervals, tree
of that rank only) against ``flame.build_whole`` (tree of every rank, the former path),
each in a fresh process under ``/usr/bin/time -v`` (wall, CPU = user + sys, peak RSS),
load average before/after, and a digest of each section (node ids renamed by position)
so the two runs can be seen to draw the same thing.

    flock /tmp/heavy.lock .venv/bin/python bench/bench_report_flame.py \\
        /work/data/report/8x1gb.tastore --json-out bench/results_report_flame_8x1gb.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from bench_report import load, timed  # noqa: E402


def digest(section: Any) -> str:
    """sha256 of the section's HTML with node ids renamed by first appearance."""
    from traceatlas.report import flame
    from traceatlas.testing.flame import canonical_html

    text = canonical_html(flame.html(section, ""))
    return hashlib.sha256(f"{section.rank}|{section.why}|{text}".encode()).hexdigest()


def child(store: str, mode: str, out: str) -> None:
    """One section build in this process; writes rank, why, digest, in-process times."""
    import resource

    import traceatlas
    from traceatlas.report import flame
    from traceatlas.report.results import Results

    trace = traceatlas.Trace(store)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    build = flame.build if mode == "one_rank" else flame.build_whole
    section = build(Results(trace, path=store))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    Path(out).write_text(json.dumps({
        "rank": section.rank, "why": section.why, "digest": digest(section),
        "boxes": [len(g.boxes) for g in section.graphs],
        "section_wall_s": round(wall, 3), "section_cpu_s": round(cpu, 3)}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("store")
    p.add_argument("--modes", default="one_rank,whole")
    p.add_argument("--json-out")
    p.add_argument("--child", nargs=2, metavar=("MODE", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.store, *a.child)
        return 0
    result: dict[str, Any] = {"store": a.store, "date": time.strftime("%F %T"),
                              "load_start": load(), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in a.modes.split(","):
            out = f"{tmp}/{mode}.json"
            run = timed([sys.executable, __file__, a.store, "--child", mode, out])
            run.update(json.loads(Path(out).read_text()))
            run.pop("cmd")
            result["runs"][mode] = run
            print(mode, json.dumps(run), flush=True)
    runs = result["runs"]
    if len(runs) > 1:
        result["same_section"] = len({r["digest"] for r in runs.values()}) == 1
        print("same section:", result["same_section"])
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
