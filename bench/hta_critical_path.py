"""Run by bench_critical_path.py in HTA's side venv: HTA critical_path_analysis on DIR,
ANNOTATION, INSTANCE (rank 0); prints one JSON line (times in s; summary_us: HTA's
summary, in % of the path; path_us: sum of the path edges' weights)."""

import json
import sys
import time
import warnings

from hta.trace_analysis import TraceAnalysis

warnings.filterwarnings("ignore")
d, ann, inst = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=d)
load = time.perf_counter() - t0
t0 = time.perf_counter()
g, ok = a.critical_path_analysis(rank=0, annotation=ann, instance_id=inst)
cp = time.perf_counter() - t0
out = {"dir": d, "load_s": load, "critical_path_s": cp, "success": bool(ok)}
try:
    out["summary_us"] = {str(k): float(v) for k, v in g.summary().items()}
    out["path_us"] = float(sum(e.weight for e in g.critical_path_edges_set))
except Exception as e:
    out["summary_error"] = repr(e)[:300]
print(json.dumps(out))
