"""``report`` on many ranks, in rank batches: 1 vs 2 Dask workers, and peak memory of the
local engine at 8 / 32 / 64 ranks, with a projection to 1,024 ranks x 1 GB on 32 nodes.

    flock /tmp/heavy.lock python bench/bench_partitioned.py --data /work/data/dask/bench \\
        [--src TRACE.json.gz] [--mb-per-rank 200] [--dask-mb-per-rank 20] \\
        [--out bench/results_partitioned.json] [--dask-modes dask:1 dask:2 ...]
        [--local-ranks 8 32 64] [--big-first]

Data: one real Kineto rank (default h100-planted/healthy rank 0) replicated and re-ranked
with ``../shared/tools/scale_trace.py`` into 64 rank files of about ``--mb-per-rank`` MB,
ingested into a store (the JSON is deleted after the ingest); a second 64-rank store of
``--dask-mb-per-rank`` MB per rank for the Dask comparison (so both worker counts run in
minutes on 2 cores).

Measurements, each in a fresh child process (``os.wait4``: wall, user + sys CPU seconds
of the child and of every process it reaped, Dask workers included, and the largest peak
RSS among them): ``report`` (``report.data.build``, what ``traceatlas report`` renders) on
the view of the first N ranks (``Trace.select(ranks=...)``) with ``--engine local``
(rank batches one after the other in the process), and on all 64 ranks with ``dask:1`` and
``dask:2`` (a LocalCluster of 1 / 2 worker processes). The load average is recorded before
and after each run. Results go to ``--out`` after every run (partial results survive a
timeout).

Projection (``projection`` in the JSON): the local engine's per-rank CPU seconds per MB
(the slope between 8 and 64 ranks) times 1,024 ranks x 1,024 MB, divided over 32 nodes'
workers; the memory per worker is the measured peak at 64 ranks scaled by 1 GB / the
measured MB per rank (the peak grows with the batch's ranks, not with the rank count).
A model, not a measurement: it assumes the per-rank cost is linear in the rank's size and
that the whole-trace parts of the report (efficiency, critical path, advisor) scale like
the per-rank ones.
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

ROOT = Path(__file__).resolve().parents[1]
SCALER = ROOT.parent / "shared" / "tools" / "scale_trace.py"
DEFAULT_SRC = ROOT.parent / "shared" / "traces" / "h100-planted" / "healthy" / "rank-0.json.gz"

CHILD = """
import sys, time, warnings
warnings.simplefilter("ignore")
import traceatlas
from traceatlas.engine import LocalEngine, get_engine
from traceatlas.report import data as report_data
store, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
trace = traceatlas.Trace(store)
if n < len(trace.ranks):
    trace = trace.select(ranks=f"0-{n - 1}")
engine = LocalEngine(1) if mode == "local" else get_engine(mode)
t = time.perf_counter()
try:
    data = report_data.build([(store, trace)], engine=engine)
finally:
    engine.close()
print(len(trace.ranks), round(time.perf_counter() - t, 3))
"""


def load() -> float:
    return os.getloadavg()[0]


def measured(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` under ``/usr/bin/time``: wall, CPU seconds (user + sys of the child and
    every process it reaped, Dask workers included), the largest peak RSS among them (MB),
    the load average before and after, and the child's stdout."""
    stats = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_partitioned.{os.getpid()}.time"
    before = load()
    t = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-o", str(stats), "-f", "%U %S %M", *argv],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise RuntimeError(f"{argv[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    user, system, rss_kb = stats.read_text().split()[-3:]
    stats.unlink()
    return {"stdout": proc.stdout, "wall_s": round(wall, 2),
            "cpu_s": round(float(user) + float(system), 2),
            "peak_rss_mb": round(int(rss_kb) / 1024, 1),
            "load_before": round(before, 2), "load_after": round(load(), 2)}


def prepare(src: Path, data: Path, name: str, mb: float) -> dict[str, Any]:
    """64 rank files of ~``mb`` MB from ``src``, ingested into ``data/name.tastore``."""
    store = data / f"{name}.tastore"
    saved = data / f"{name}.info.json"  # how it was made, for a later run reusing it
    info: dict[str, Any] = {"store": str(store)}
    if (store / "manifest.json").is_file():
        if saved.is_file():
            info.update(json.loads(saved.read_text()))
        info["reused"] = True
        return info
    one = json.loads(subprocess.run(
        [sys.executable, str(SCALER), "--copies", "1", "--ranks", "1", str(src),
         str(data / "probe")], capture_output=True, text=True, check=True).stdout.splitlines()[-1])
    shutil.rmtree(data / "probe")
    copies = max(1, round(mb * 1e6 / one["bytes_per_rank"]))
    raw = data / f"{name}-json"
    gen = measured([sys.executable, str(SCALER), "--copies", str(copies), "--ranks", "64",
                    str(src), str(raw)])
    info.update(copies=copies, json_bytes=sum(p.stat().st_size for p in raw.iterdir()),
                generate=gen)
    cli = str(Path(sys.executable).parent / "traceatlas")
    info["ingest"] = measured([cli, "ingest", str(raw), "-o", str(store)])
    info["store_bytes"] = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    shutil.rmtree(raw)
    for key in ("generate", "ingest"):
        info[key].pop("stdout", None)
    saved.write_text(json.dumps(info, indent=1) + "\n")
    return info


def report(store: str, n: int, mode: str) -> dict[str, Any]:
    row = measured([sys.executable, "-c", CHILD, store, str(n), mode])
    ranks, build_s = row.pop("stdout").split()
    return {"ranks": int(ranks), "mode": mode, "build_s": float(build_s), **row}


def projection(big: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    local = {r["ranks"]: r for r in runs if r["mode"] == "local" and r.get("set") == "big"}
    if 8 not in local or 64 not in local:
        return {}
    mb = big["json_bytes"] / 64 / 1e6
    per_rank_cpu = (local[64]["cpu_s"] - local[8]["cpu_s"]) / 56
    per_mb = per_rank_cpu / mb
    total_cpu = per_mb * 1024 * 1024  # 1,024 ranks x 1,024 MB
    nodes = 32
    return {
        "measured_mb_per_rank": round(mb, 1),
        "cpu_s_per_rank": round(per_rank_cpu, 2),
        "cpu_s_per_mb": round(per_mb, 4),
        "total_cpu_s_1024x1gb": round(total_cpu),
        "wall_s_32_nodes_1_worker_1_core": round(total_cpu / nodes),
        "wall_s_32_nodes_1_worker_8_tasks": round(total_cpu / nodes / 8),
        "peak_rss_mb_per_worker_at_1gb": round(local[64]["peak_rss_mb"] * 1024 / mb),
        "assumes": "per-rank cost linear in rank size; whole-trace parts scale like "
                   "per-rank ones; no network or file-system contention",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--mb-per-rank", type=float, default=200.0)
    ap.add_argument("--dask-mb-per-rank", type=float, default=20.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results_partitioned.json")
    ap.add_argument("--dask-modes", nargs="*", default=["dask:1", "dask:2", "dask:1", "dask:2"],
                    help="engines run on the small store, in this order (none: skip)")
    ap.add_argument("--local-ranks", type=int, nargs="*", default=[8, 32, 64],
                    help="rank counts of the big store run with the local engine (none: skip)")
    ap.add_argument("--big-first", action="store_true",
                    help="the local-engine runs on the big store before the Dask runs")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"src": str(args.src), "cores": os.cpu_count(), "runs": []}

    def save() -> None:
        args.out.write_text(json.dumps(res, indent=1) + "\n")

    def small() -> None:
        if not args.dask_modes:
            return
        res["small"] = prepare(args.src, args.data, "small64", args.dask_mb_per_rank)
        save()
        for mode in args.dask_modes:
            res["runs"].append({"set": "small", **report(res["small"]["store"], 64, mode)})
            print(res["runs"][-1], flush=True)
            save()

    def big() -> None:
        if not args.local_ranks:
            return
        res["big"] = prepare(args.src, args.data, "big64", args.mb_per_rank)
        save()
        for n in args.local_ranks:
            res["runs"].append({"set": "big", **report(res["big"]["store"], n, "local")})
            print(res["runs"][-1], flush=True)
            save()
        res["projection"] = projection(res["big"], res["runs"])
        save()

    for part in ((big, small) if args.big_first else (small, big)):
        part()


if __name__ == "__main__":
    main()
