"""False-alarm rate of ``traceatlas diff``: seeded 3% jitter on every kernel, no systematic
change, diffed against a baseline summary of the original.

Per trial ``t`` (seeds ``1000 * t + rank``): every kernel of every rank file gets its own
duration factor ``1 + N(0, sigma)`` (``traceatlas.testing.stretch.jitter_kernels``, GPU
streams re-timed), then ``traceatlas diff BASELINE JITTERED --fail-on kernel:+5% --format
json`` runs in-process (typer's CliRunner: the CLI's own code path, no process start).
Recorded per trial: the exit code (1 = a false alarm of the gate) and the significant
changes with no threshold at all (the same diff's ``changes`` with ``significant``).

Usage::

    nice -n 10 .venv/bin/python bench/diff_false_alarms.py \\
        [--trace ../shared/traces/h100-planted/healthy] [--trials 100] [--sigma 0.03] \\
        [--out bench/results_diff_false_alarms.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / ".." / "shared" / "traces" / "h100-planted" / "healthy"
RULE = "kernel:+5%"


def _run(args: list[str]) -> tuple[int, str]:
    from traceatlas.cli.main import app

    res = CliRunner().invoke(app, args)
    return res.exit_code, res.stdout


def _code_state() -> dict[str, Any]:
    """The commit measured and whether the diff's files had uncommitted changes."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()

    paths = ["src/traceatlas/compare", "src/traceatlas/cli/diff.py"]
    return {"commit": git("rev-parse", "HEAD"),
            "uncommitted": git("status", "--porcelain", "--", *paths).splitlines()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                        help="a directory of Kineto rank-*.json[.gz] files")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--sigma", type=float, default=0.03)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" /
                        "results_diff_false_alarms.json")
    opts = parser.parse_args()
    from traceatlas.testing.stretch import jitter_kernels

    files = sorted(p for p in opts.trace.iterdir() if p.name.endswith((".json", ".json.gz")))
    with tempfile.TemporaryDirectory(prefix="ta-false-alarms-") as tmp:
        work = Path(tmp)
        os.environ["TRACEATLAS_CACHE_DIR"] = str(work / "cache")
        baseline = work / "baseline.json.gz"
        code, text = _run(["summary", str(opts.trace), "-o", str(baseline)])
        if code != 0:
            print(text, file=sys.stderr)
            return 2
        trials: list[dict[str, Any]] = []
        start = time.perf_counter()
        for t in range(opts.trials):
            run = work / f"trial-{t}"
            run.mkdir()
            for rank, f in enumerate(files):
                jitter_kernels(f, run / f.name, opts.sigma, 1000 * t + rank)
            t0 = time.perf_counter()
            code, text = _run(["diff", str(baseline), str(run), "--fail-on", RULE,
                               "--format", "json"])
            if code not in (0, 1):
                print(f"trial {t}: exit {code}: {text}", file=sys.stderr)
                return 2
            doc = json.loads(text)
            sig = [f"{c['kind']}:{c['key']}" for c in doc["changes"] if c["significant"]]
            trials.append({"trial": t, "exit": code, "violations": [v["text"] for v in
                                                                     doc["violations"]],
                           "significant": sig, "diff_s": round(time.perf_counter() - t0, 3)})
            shutil.rmtree(run)
            shutil.rmtree(work / "cache", ignore_errors=True)
            print(f"trial {t}: exit {code}, {len(sig)} significant", flush=True)
        elapsed = time.perf_counter() - start
    alarms = sum(tr["exit"] == 1 for tr in trials)
    any_sig = sum(bool(tr["significant"]) for tr in trials)
    result = {
        "what": "traceatlas diff BASELINE(original) JITTERED --fail-on " + RULE,
        "trace": str(opts.trace.resolve()), "files": [f.name for f in files],
        "trials": opts.trials, "sigma": opts.sigma, "seeds": "1000 * trial + rank index",
        "gate_false_alarms": alarms, "gate_false_alarm_rate": alarms / opts.trials,
        "gate_passes": opts.trials - alarms,
        "trials_with_any_significant_change": any_sig,
        "significant_changes_total": sum(len(tr["significant"]) for tr in trials),
        "significant_by_entity": dict(Counter(s for tr in trials for s in tr["significant"])
                                      .most_common()),
        "elapsed_s": round(elapsed, 1),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "code": _code_state(),
        "per_trial": trials,
    }
    opts.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"gate: {alarms}/{opts.trials} false alarms; trials with any significant change "
          f"(no threshold): {any_sig}/{opts.trials}; {elapsed:.0f} s -> {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
