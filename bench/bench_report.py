"""``traceatlas report`` speed and memory: the whole command, and where its time goes.

Two parts:

* ``cli``: ``traceatlas report STORE -o OUT.html`` (and, with ``--raw DIR``, the report
  on the raw files plus ``traceatlas ingest DIR`` alone for the 1.5x ratio), each in a
  fresh process under ``/usr/bin/time -v``: wall, CPU (user + sys) seconds, peak RSS, the
  load average before and after. ``--repeat`` runs, each kept.
* ``profile``: the report built in this process with every ``registry.run`` call timed
  (wall, CPU of the process, the largest RSS sampled every 10 ms while it ran, nesting
  depth) and every report section timed the same way, then the HTML rendering; the
  rows are printed largest first and written to the JSON.

Example (the 8 x 1 GB store, ``bench/bench_analyses.py prep`` or the commands in the
report of this script's author)::

    flock /tmp/heavy.lock .venv/bin/python bench/bench_report.py cli \\
        /work/data/report/8x1gb.tastore --json-out bench/results_report_8x1gb.json
    flock /tmp/heavy.lock .venv/bin/python bench/bench_report.py profile \\
        /work/data/report/8x1gb.tastore --json-out /tmp/report_profile.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
VENV_BIN = BENCH_DIR.parent / ".venv" / "bin"


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def timed(cmd: list[str]) -> dict[str, Any]:
    """``cmd`` under ``/usr/bin/time -v``: wall s, CPU s, peak RSS MB, load before/after."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        before = load()
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-v", "-o", tf.name, *cmd],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t0
        text = Path(tf.name).read_text()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")

    def field(label: str) -> float:
        m = re.search(rf"{re.escape(label)}: ([0-9.]+)", text)
        return float(m.group(1)) if m else float("nan")

    user, system = field("User time (seconds)"), field("System time (seconds)")
    return {"cmd": cmd, "wall_s": round(wall, 3), "cpu_s": round(user + system, 3),
            "user_s": user, "sys_s": system,
            "peak_rss_mb": round(field("Maximum resident set size (kbytes)") / 1024, 1),
            "load_before": before, "load_after": load()}


def cmd_cli(a: argparse.Namespace) -> dict[str, Any]:
    ta = str(VENV_BIN / "traceatlas")
    out: dict[str, Any] = {"store": a.store, "report": [], "date": time.strftime("%F %T")}
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        for _ in range(a.repeat):
            out["report"].append(timed([ta, "report", a.store, "-o", f"{tmp}/r.html"]))
        if a.raw:
            out["raw"] = a.raw
            out["ingest"], out["report_raw"] = [], []
            for i in range(a.repeat):
                store = f"{tmp}/ingest{i}.tastore"
                out["ingest"].append(timed([ta, "ingest", a.raw, "-o", store]))
                out["report_raw"].append(timed([ta, "report", a.raw, "-o", f"{tmp}/raw.html"]))
            best_i = min(r["wall_s"] for r in out["ingest"])
            best_r = min(r["wall_s"] for r in out["report_raw"])
            out["raw_over_ingest"] = round(best_r / best_i, 3)
    return out


class Sampler:
    """RSS of this process every ``period`` s; ``window()`` opens a max-tracking window."""

    def __init__(self, period: float = 0.01) -> None:
        self.period = period
        self.windows: list[list[int]] = []
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _loop(self) -> None:
        while not self.stop:
            r = self.rss()
            for w in list(self.windows):
                if r > w[0]:
                    w[0] = r
            time.sleep(self.period)

    def open(self) -> list[int]:
        w = [self.rss()]
        self.windows.append(w)
        return w

    def close(self, w: list[int]) -> int:
        self.windows = [x for x in self.windows if x is not w]
        return max(w[0], self.rss())


def cmd_profile(a: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    import traceatlas
    from traceatlas.analysis import registry
    from traceatlas.cli.analyze import analysis_engine
    from traceatlas.report import data as report_data
    from traceatlas.report import html

    sampler = Sampler()
    rows: list[dict[str, Any]] = []
    depth = [0]

    def wrap(label: str, fn: Any) -> Any:
        def inner(*args: Any, **kw: Any) -> Any:
            name = label or str(args[0])
            params = dict(args[2]) if label == "" and len(args) > 2 and args[2] else {}
            w = sampler.open()
            t0, c0 = time.perf_counter(), time.process_time()
            depth[0] += 1
            try:
                return fn(*args, **kw)
            finally:
                depth[0] -= 1
                rows.append({"what": name, "params": {k: str(v) for k, v in params.items()},
                             "depth": depth[0], "wall_s": round(time.perf_counter() - t0, 3),
                             "cpu_s": round(time.process_time() - c0, 3),
                             "peak_rss_mb": round(sampler.close(w) / 2**20, 1)})
        return inner

    registry.run = wrap("", registry.run)  # type: ignore[assignment]
    for fn in ("_efficiency", "_findings", "_rank_bars", "_timeline", "_kernels", "_steps"):
        setattr(report_data, fn, wrap("section " + fn.lstrip("_"), getattr(report_data, fn)))
    for mod in ("memory_report", "flame_report", "roofline_report", "critical_report"):
        m = getattr(report_data, mod)
        m.build = wrap("section " + mod.split("_")[0], m.build)
    ov = report_data.overview
    for fn in ("span", "activity", "timeline", "rank_times"):
        setattr(ov, fn, wrap("overview " + fn, getattr(ov, fn)))

    t0 = time.perf_counter()
    trace = traceatlas.open(a.store)
    open_s = time.perf_counter() - t0
    eng = analysis_engine(a.engine)  # what `report --engine` uses
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        data = report_data.build([(a.store, trace)], engine=eng)
    finally:
        eng.close()
    build_s, build_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    text = html.render(data)
    render_s = time.perf_counter() - t0
    sampler.stop = True
    rows.sort(key=lambda r: -r["wall_s"])
    for r in rows:
        print(f"{r['wall_s']:8.2f} s {r['cpu_s']:8.2f} cpu {r['peak_rss_mb']:8.0f} MB "
              f"{'  ' * r['depth']}{r['what']} {r['params'] or ''}", file=sys.stderr)
    return {"store": a.store, "open_s": open_s, "build_s": build_s, "build_cpu_s": build_cpu,
            "render_s": render_s, "html_bytes": len(text),
            "total_s": time.perf_counter() - t_start,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "missing": data.runs[0].missing, "calls": rows, "load": load()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cli", help="the report command in fresh processes")
    c.add_argument("store")
    c.add_argument("--raw", help="the raw trace directory: report on it and ingest it alone")
    c.add_argument("--repeat", type=int, default=1)
    c.add_argument("--tmp", default=None, help="where the HTML and the raw ingest go")
    c.add_argument("--json-out")
    p = sub.add_parser("profile", help="per-analysis time and memory in this process")
    p.add_argument("store")
    p.add_argument("--engine", default="local")
    p.add_argument("--json-out")
    a = ap.parse_args(argv)
    res = {"cli": cmd_cli, "profile": cmd_profile}[a.cmd](a)
    text = json.dumps(res, indent=1)
    if a.json_out:
        Path(a.json_out).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
