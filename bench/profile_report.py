"""Where ``report`` spends memory and CPU, per section, per advisor rule and per analysis:
what grows with the number of ranks.

    flock /tmp/heavy.lock python bench/profile_report.py STORE --ranks 8 32 64 \\
        [--out bench/results_profile_report.json]

For each N, a fresh child process builds ``report.data.build`` on the view of the first N
ranks (``Trace.select(ranks="0-{N-1}")``) with ``LocalEngine(1)`` (rank batches inline;
``--engine dask:N``: on a LocalCluster, the numbers are then the client's, the serial part)
and times every report section, advisor rule, advisor step (``efficiency.apply``,
``why_not``, ``view_link.attach``, ``critical_path.order``), requirement check and first
run of an analysis (``Context.result``). Per item: CPU seconds of the process
(``time.process_time``: every thread, Polars' included), wall seconds, and the peak RSS
increase (MB) over the RSS at its start, from a thread sampling ``/proc/self/statm`` every
2 ms; glibc's free memory is returned (``malloc_trim``) before each item so that a later
item does not reuse what an earlier one freed. Items nest (a section runs rules, a rule
runs analyses): an item's numbers include its children's; ``depth`` says the nesting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import ctypes, functools, json, os, sys, threading, time, warnings
warnings.simplefilter("ignore")
import traceatlas
from traceatlas.engine import LocalEngine
from traceatlas.report import data as report_data
from traceatlas.report import overview, results as report_results
from traceatlas.report import critical, flame, memory, roofline
from traceatlas import advisor
from traceatlas.advisor import base, registry, commands, view_link
from traceatlas.advisor import critical_path, efficiency as adv_eff

PAGE = os.sysconf("SC_PAGE_SIZE")
libc = ctypes.CDLL("libc.so.6")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE
open_items = []
rows = []
stop = False
def sampler():
    while not stop:
        r = rss()
        for it in open_items:
            if r > it["peak"]:
                it["peak"] = r
        time.sleep(0.002)
threading.Thread(target=sampler, daemon=True).start()

def timed(kind, name, fn):
    @functools.wraps(fn)
    def wrap(*a, **k):
        libc.malloc_trim(0)
        r0 = rss()
        it = {"kind": kind, "name": name, "depth": len(open_items), "peak": r0}
        open_items.append(it)
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            open_items.remove(it)
            r = rss()
            rows.append({"kind": kind, "name": name, "depth": it["depth"],
                         "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                         "peak_inc_mb": round((max(it["peak"], r) - r0) / 2**20, 1),
                         "start_mb": round(r0 / 2**20, 1)})
    return wrap

for n in ("_efficiency", "_findings", "_rank_bars", "_timeline", "_kernels", "_steps"):
    setattr(report_data, n, timed("section", n.strip("_"), getattr(report_data, n)))
for mod, n in ((memory, "memory"), (flame, "flame"), (roofline, "roofline"),
               (critical, "critical")):
    mod.build = timed("section", n, mod.build)
overview.span = timed("section", "span", overview.span)
overview.activity = timed("section", "activity", overview.activity)
overview.rank_times = timed("section", "rank_times", overview.rank_times)

orig_get_rule = registry.get_rule
def get_rule(name):
    return timed("rule", name, orig_get_rule(name))
advisor.get_rule = get_rule
adv_eff.apply = timed("advisor", "efficiency.apply", adv_eff.apply)
advisor.why_not = timed("advisor", "why_not", advisor.why_not)
advisor.view_why_not = timed("advisor", "view_why_not", advisor.view_why_not)
view_link.attach = timed("advisor", "view_link.attach", view_link.attach)
critical_path.order = timed("advisor", "critical_path.order", critical_path.order)

orig_result = base.Context.result
def result(self, name, **params):
    key = (name, tuple(sorted(params.items())))
    if key in self._results:
        return orig_result(self, name, **params)
    label = name + "".join(f" {k}={v}" for k, v in sorted(params.items()))
    return timed("analysis", label, orig_result)(self, name, **params)
base.Context.result = result
orig_has = base.Context.has
def has(self, req):
    if req in self._requirements:
        return orig_has(self, req)
    return timed("requires", req, orig_has)(self, req)
base.Context.has = has
orig_step_path = critical_path.step_path
def step_path(ctx):
    if "critical_path@step" in vars(ctx):
        return orig_step_path(ctx)
    return timed("advisor", "critical_path.step_path", orig_step_path)(ctx)
critical_path.step_path = step_path
critical.step_path = step_path

made = []
orig_init = report_results.Results.__init__
def init(self, *a, **k):
    orig_init(self, *a, **k)
    made.append(self)
report_results.Results.__init__ = init

def held_mb(result):
    frames = [result.table, *result.extra.values()]
    return round(sum(f.estimated_size() for f in frames if hasattr(f, "estimated_size"))
                 / 2**20, 1)

store, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
trace = traceatlas.Trace(store)
if n < len(trace.ranks):
    trace = trace.select(ranks=f"0-{n - 1}")
from traceatlas.engine import get_engine
engine = LocalEngine(1) if mode == "local" else get_engine(mode)
c0, w0 = time.process_time(), time.perf_counter()
try:
    data = report_data.build([(store, trace)], engine=engine)
finally:
    engine.close()
total = {"cpu_s": round(time.process_time() - c0, 2),
         "wall_s": round(time.perf_counter() - w0, 2)}
stop = True
import resource
total["maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
total["missing"] = data.runs[0].missing
held = {}
for res in made:
    for (name, params), value in res.context._results.items():
        if value is not None:
            held[name + "".join(f" {k}={v}" for k, v in params)] = held_mb(value)
    cp = vars(res.context).get("critical_path@step", {}).get("result")
    if cp is not None:
        held["critical_path (step)"] = held_mb(cp)
total["held_mb"] = held
print(json.dumps({"ranks": len(trace.ranks), "total": total, "items": rows}))
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--engine", default="local",
                    help="local (LocalEngine(1), inline) or dask:N: with Dask the CPU "
                         "seconds are the client's (the serial part)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results_profile_report.json")
    args = ap.parse_args()
    out: dict[str, Any] = {"store": args.store, "engine": args.engine, "runs": []}
    for n in args.ranks:
        load = os.getloadavg()[0]
        proc = subprocess.run([sys.executable, "-c", CHILD, args.store, str(n), args.engine],
                              capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        run = json.loads(proc.stdout.splitlines()[-1])
        run["load_before"], run["load_after"] = round(load, 2), round(os.getloadavg()[0], 2)
        out["runs"].append(run)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(n, run["total"], flush=True)
    table(out)
    print("results held by the report's cache (MB, estimated_size):")
    for run in out["runs"]:
        print(run["ranks"], run["total"].get("held_mb"))


def table(out: dict[str, Any]) -> None:
    """Items side by side over the rank counts: peak increase MB / CPU s."""
    runs = out["runs"]
    keys: list[tuple[str, str, int]] = []
    for run in runs:
        for it in run["items"]:
            key = (it["kind"], it["name"], it["depth"])
            if key not in keys:
                keys.append(key)
    head = "".join(f" | {r['ranks']:>4} ranks: MB / CPU-s" for r in runs)
    print(f"{'item':48}{head}")
    for key in keys:
        cells = ""
        for run in runs:
            its = [i for i in run["items"] if (i["kind"], i["name"], i["depth"]) == key]
            mb = max((i["peak_inc_mb"] for i in its), default=0.0)
            cpu = sum(i["cpu_s"] for i in its)
            cells += f" | {mb:10.1f} / {cpu:8.2f}      "
        print(f"{'  ' * key[2]}{key[0]}:{key[1]}"[:48].ljust(48) + cells)


if __name__ == "__main__":
    main()
