"""``report`` on raw rank files (ingest included) against ``ingest`` alone (issue 14:
within 1.5x).

    flock /tmp/heavy.lock .venv/bin/python bench/bench_report_raw.py \\
        --gen-dir /work/data/report_raw [--case 8x200mb] [--repeat 2] \\
        [--json-out bench/results_report_raw.json]

Input: ``bench_ingest``'s cases (a real Kineto rank replicated and re-ranked with
``shared/tools/scale_trace.py``), generated under ``--gen-dir`` when missing. Each
measurement is a fresh process tree under its own ``bench/measure.py`` process (wall, CPU
seconds of the tree, peak RSS), with its own empty cache directory so ``report`` ingests:
``traceatlas ingest DIR -o STORE`` then ``traceatlas report DIR -o report.html``,
alternating, ``--repeat`` times. The ratio is report wall / ingest wall of the same round
(and the same for CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_ingest import CASES, DEFAULT_SCALER, DEFAULT_SOURCE, generate, inputs_ready

CLI = str(Path(sys.executable).parent / "traceatlas")
MEASURE = str(Path(__file__).resolve().parent / "measure.py")


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def one(cmd: list[str], cache: Path) -> dict[str, Any]:
    """``cmd`` measured with ``TRACEATLAS_CACHE_DIR=cache`` (emptied first)."""
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    os.environ["TRACEATLAS_CACHE_DIR"] = str(cache)
    before = load()
    # measure.py in its own process: its RUSAGE_CHILDREN figures are this command's alone
    done = subprocess.run([sys.executable, MEASURE, "--interval", "0.2", "--", *cmd],
                          capture_output=True, text=True, check=True)
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    record["load_before"], record["load_after"] = before, load()
    if record["returncode"] != 0:
        raise SystemExit(f"failed ({record['returncode']}): {cmd}")
    return record


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen-dir", type=Path, required=True)
    ap.add_argument("--case", default="8x200mb")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    case = CASES[args.case]
    args.gen_dir.mkdir(parents=True, exist_ok=True)
    if not inputs_ready(args.gen_dir, case):
        generate(args.gen_dir, case, DEFAULT_SCALER, DEFAULT_SOURCE, sys.executable)
    data = args.gen_dir / case.name
    rounds = []
    with tempfile.TemporaryDirectory(dir=args.gen_dir) as tmp:
        work = Path(tmp)
        for _ in range(args.repeat):
            ingest = one([CLI, "ingest", str(data), "-o", str(work / "store")], work / "c1")
            shutil.rmtree(work / "store", ignore_errors=True)
            report = one([CLI, "report", str(data), "-o", str(work / "report.html")],
                         work / "c2")
            rounds.append({"ingest": ingest, "report": report,
                           "wall_ratio": report["wall_s"] / ingest["wall_s"],
                           "cpu_ratio": report["cpu_s"] / ingest["cpu_s"]})
            print(f"ingest {ingest['wall_s']:.1f} s / {ingest['cpu_s']:.1f} CPU-s, "
                  f"report {report['wall_s']:.1f} s / {report['cpu_s']:.1f} CPU-s: "
                  f"{rounds[-1]['wall_ratio']:.2f}x wall, {rounds[-1]['cpu_ratio']:.2f}x CPU "
                  f"(load {ingest['load_before']:.1f}-{report['load_after']:.1f})",
                  flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"case": case.name, "rounds": rounds},
                                            indent=1) + "\n")


if __name__ == "__main__":
    main()
