"""Time traceatlas CLI commands under two source trees, interleaved, in one run.

Used to state what a change costs (e.g. the session start vs HEAD): each command runs
``--repeat`` times per tree, alternating trees, in fresh processes; wall seconds and peak
RSS (``/usr/bin/time``) are reported as best and median per tree and their ratio.

Example (bench/RESULTS.md, "Cost of the safety and diagnosis changes")::

    git worktree add /tmp/base fad3da4
    python bench/bench_trees.py --old /tmp/base/src --new src --repeat 3 \\
        --cmd "analyze idle {store} --format csv" \\
        --cmd-new "analyze idle {store} --table causes --format csv" --store S.tastore
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run(src: str, args: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KB) of one ``traceatlas`` process on source tree ``src``."""
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        cmd = ["/usr/bin/time", "-f", "%e %M", "-o", out.name, sys.executable, "-c",
               "from traceatlas.cli.main import main; main()", *args]
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{src}: {' '.join(args)} failed:\n{done.stderr[-2000:]}")
        wall, rss = out.read().split()[-2:]
    return float(wall), int(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="old source tree (the src/ directory)")
    ap.add_argument("--new", required=True, help="new source tree (the src/ directory)")
    ap.add_argument("--cmd", required=True, help="CLI arguments; {store} is replaced")
    ap.add_argument("--cmd-new", help="arguments for the new tree when they differ")
    ap.add_argument("--store", default="", help="value of {store}")
    ap.add_argument("--repeat", type=int, default=3)
    opts = ap.parse_args()
    old_args = opts.cmd.format(store=opts.store).split()
    new_args = (opts.cmd_new or opts.cmd).format(store=opts.store).split()
    times: dict[str, list[tuple[float, int]]] = {"old": [], "new": []}
    for _ in range(opts.repeat):
        times["old"].append(run(opts.old, old_args))
        times["new"].append(run(opts.new, new_args))
    report = {}
    for side, runs in times.items():
        walls = [w for w, _ in runs]
        report[side] = {"best_s": min(walls), "median_s": statistics.median(walls),
                        "peak_rss_mb": max(r for _, r in runs) / 1024}
    report["ratio_best"] = report["new"]["best_s"] / report["old"]["best_s"]
    report["ratio_median"] = report["new"]["median_s"] / report["old"]["median_s"]
    print(json.dumps({"old_cmd": " ".join(old_args), "new_cmd": " ".join(new_args),
                      **report}))


if __name__ == "__main__":
    main()
