"""critical_path speed and HTA comparison; writes bench/results_critical_path.json.

traceatlas: ``critical_path`` on one step (``--step``) and on the whole store, in one
process (wall s, best of ``--repeat``). HTA (side venv: HolisticTraceAnalysis with
pandas<2.1 and numpy<2; newer pandas fails in its ``_create_event_nodes``): its
``critical_path_analysis`` on the HTA critical-path traces, beside ours on the same
annotation instance. Example (the 1 GB store from /work/shared/tools/scale_trace.py of
h100-planted/healthy rank 0, 95 copies)::

    .venv/bin/python bench/bench_critical_path.py --store /work/hc2_bench/1gb.tastore \\
        --step 200 --hta-python /work/hta-venv/bin/python

Cross-rank (``--multi``, written under ``cross_rank`` beside the earlier keys, which are
kept): ``critical_path`` over a whole multi-rank store and over one step, wall and CPU
seconds, the load average before and after, the path's share per rank and last arrivals.
The 8-rank set: each DLRM worker (param-et_replay/dlrm_kineto.tar.gz) scaled with
/work/shared/tools/scale_trace.py to the same period (``--gap-us`` = period - span) and
its header's rank restored::

    .venv/bin/python bench/bench_critical_path.py --multi /work/data/crit/g1.tastore \\
        --multi-step 600 --keep-previous cross_rank_before_lean

(1150 copies per worker, ``--gap-us`` = 23387 - the worker's span in us, then the
header's ``"rank": 0, "world_size": 1`` set back to the worker's rank and 8;
``peak_rss_gb``: the process's peak over whole + step.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
TRACES = Path("/work/shared/traces/hta/critical_path")
ANNOTATION = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"


def _time(fn: Any, repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="")
    ap.add_argument("--multi", default="")
    ap.add_argument("--multi-step", type=int, default=-1)
    ap.add_argument("--step", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--hta-python", default="")
    ap.add_argument("--json-out", default=str(BENCH / "results_critical_path.json"))
    ap.add_argument("--keep-previous", default="",
                    help="--multi: key under which the earlier cross_rank entry is kept")
    a = ap.parse_args()
    import traceatlas
    from traceatlas import analysis

    if a.multi:
        _cross_rank(a)
        return
    out: dict[str, Any] = {"store": a.store, "step": a.step}
    trace = traceatlas.open(a.store)
    rows = trace.intervals.select("rank").collect().height
    out["intervals"] = rows
    s, res = _time(lambda: analysis.run("critical_path", trace.select(step=a.step)), a.repeat)
    out["step_s"], out["step_path_ns"] = s, int(res.table["on_path_ns"].sum())
    s, res = _time(lambda: analysis.run("critical_path", trace), 1)
    out["whole_s"], out["whole_path_segments"] = s, res.table.height
    s, _ = _time(lambda: analysis.run("critical_path", trace, {"speedup": "aten::mm:2"}), 1)
    out["whole_whatif_s"] = s
    cmp = []
    for name in ("simple_add", "alexnet"):
        t = traceatlas.open(TRACES / name)
        s, r = _time(lambda t=t: analysis.run(  # type: ignore[misc]
            "critical_path", t, {"region": f"annotation:{ANNOTATION}:1"}), 1)
        row: dict[str, Any] = {"trace": name, "ta_s": s,
                               "ta_path_us": int(r.table["on_path_ns"].sum()) / 1000,
                               "ta_by_bound_ns": dict(r.extra["by_bound"].select(
                                   "bound", "ns").iter_rows())}
        if a.hta_python:
            p = subprocess.run([a.hta_python, str(BENCH / "hta_critical_path.py"),
                                str(TRACES / name), ANNOTATION, "1"], capture_output=True,
                               text=True, check=False)
            lines = p.stdout.strip().splitlines()
            row["hta"] = json.loads(lines[-1]) if lines else {"error": p.stderr[-300:]}
        cmp.append(row)
    out["hta_comparison"] = cmp
    Path(a.json_out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


def _cross_rank(a: argparse.Namespace) -> None:
    """Whole trace and one step of a multi-rank store; merged into the results file."""
    import os
    import sys

    import traceatlas
    from traceatlas import analysis

    trace = traceatlas.open(a.multi)
    out: dict[str, Any] = {"command": " ".join(sys.argv), "store": a.multi,
                           "ranks": len(trace.ranks),
                           "intervals": trace.intervals.select("rank").collect().height,
                           "store_mb": sum(p.stat().st_size for p in Path(a.multi).rglob("*")
                                           if p.is_file()) / 1e6,
                           "loadavg_before": os.getloadavg()}
    for key, view in (("whole", trace), ("step", trace.select(step=a.multi_step)
                                          if a.multi_step >= 0 else None)):
        if view is None:
            continue
        c0, t0 = time.process_time(), time.perf_counter()
        res = analysis.run("critical_path", view)
        out[f"{key}_s"] = time.perf_counter() - t0
        out[f"{key}_cpu_s"] = time.process_time() - c0
        out[f"{key}_path_ns"] = int(res.table["on_path_ns"].sum())
        out[f"{key}_segments"] = res.table.height
        out[f"{key}_by_bound_ns"] = {b: n for b, n in res.extra["by_bound"].select(
            "bound", "ns").iter_rows() if n}
        out[f"{key}_by_rank"] = res.extra["by_rank"].to_dicts()
        out[f"{key}_dependencies"] = dict(res.extra["dependencies"].iter_rows())
    out["loadavg_after"] = os.getloadavg()
    import resource

    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    path = Path(a.json_out)
    doc = json.loads(path.read_text()) if path.is_file() else {}
    if "cross_rank" in doc and a.keep_previous:
        doc[a.keep_previous] = doc["cross_rank"]
    doc["cross_rank"] = out
    path.write_text(json.dumps(doc, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
