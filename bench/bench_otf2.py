"""OTF2 reader speed: the event-object path (``Collector``), the fast path serial
(``otf2_raw`` + ``otf2_fast``) and the fast path with the locations read by worker
processes (``otf2_parallel``), on a synthetic MPI ring (bench_formats.write_otf2), in the
same invocation; wall and CPU seconds (parent + workers), events/s, the machine's load
average before each run, the best of ``--repeat`` runs, and whether the tables are equal.

    .venv/bin/python bench/bench_otf2.py --dir /work/tmp_otf2 --ranks 64 --iters 13021 \
        --repeat 3 --json-out bench/results_otf2.json --append

(12 events per rank and iteration: 64 x 13021 x 12 = 10.0 M events.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_formats import write_otf2

from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.sources import Source


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _read(anchor: Path, mode: str, threads: int) -> tuple[dict[str, Any], Any]:
    reader = Otf2Reader()
    reader.fast = mode != "old"
    reader.parallel_min_events = 0 if mode == "parallel" else 1 << 62
    reader.parallel_load_check = False  # forced: measured whatever the load
    load = os.getloadavg()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start, cpu = time.perf_counter(), _cpu()
        out = reader.read(Source(str(anchor)), threads=threads)
        wall, used = time.perf_counter() - start, _cpu() - cpu
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    return {"wall_s": round(wall, 3), "cpu_s": round(used, 3),
            "loadavg_1_5_15": [round(x, 2) for x in load],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "peak_rss_mb_so_far": own, "peak_rss_mb_workers_so_far": kids}, out


def _same(a: Any, b: Any) -> bool:
    for x, y in zip(a, b, strict=True):
        for name, table in x.tables.items():
            cols = [(c, "ascending") for c in table.column_names if c != "args"] + [
                ("args", "ascending")] if "args" in table.column_names else [
                (c, "ascending") for c in table.column_names]
            if not table.sort_by(cols).equals(y.tables[name].sort_by(cols)):
                return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, default=Path("/work/tmp_otf2"))
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--modes", default="old,serial,parallel")
    ap.add_argument("--old-repeat", type=int, default=1, help="runs of the slow old path")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--append", action="store_true",
                    help="add the record to the list in --json-out instead of replacing it")
    args = ap.parse_args()
    root = args.dir / f"ring_{args.ranks}x{args.iters}"
    if not (root / "traces.otf2").exists():
        write_otf2(root, args.ranks, args.iters)
    anchor = root / "traces.otf2"
    import otf2  # type: ignore[import-untyped]

    with otf2.reader.open(str(anchor)) as r:
        events = sum(loc.number_of_events for loc in r.definitions.locations)
    record: dict[str, Any] = {
        "command": " ".join([".venv/bin/python bench/bench_otf2.py", *sys.argv[1:]]),
        "machine": platform.node(), "cores": os.cpu_count(), "threads": args.threads,
        "events": events,
        "input_bytes": sum(p.stat().st_size for p in root.rglob("*") if p.is_file()),
        "note": "best of the runs by wall time; cpu_s counts the parent and its worker "
                "processes; loadavg is os.getloadavg() just before the run (the machine is "
                "shared); peak RSS (ru_maxrss, MB) of this process and of the largest worker "
                "so far (monotonic over the modes run in this invocation: run one mode per "
                "invocation for a mode's own peak)",
    }
    outs: dict[str, Any] = {}
    for mode in args.modes.split(","):
        runs = []
        for _ in range(args.old_repeat if mode == "old" else args.repeat):
            stats, out = _read(anchor, mode, args.threads)
            runs.append(stats)
            print(mode, json.dumps(stats), flush=True)
            outs[mode] = out
        best = min(runs, key=lambda s: s["wall_s"])
        record[mode] = {**best, "events_per_s": round(events / best["wall_s"]),
                        "events_per_cpu_s": round(events / best["cpu_s"]), "runs": runs}
    fast = [m for m in ("serial", "parallel") if m in outs]
    for mode in fast:
        if "old" in outs:
            record[mode]["identical_to_old"] = _same(outs["old"], outs[mode])
            record[mode]["speedup_wall_vs_old"] = round(
                record["old"]["wall_s"] / record[mode]["wall_s"], 2)
    if len(fast) == 2:
        record["parallel"]["identical_to_serial"] = _same(outs["serial"], outs["parallel"])
    print(json.dumps(record))
    if args.json_out:
        records = [record]
        if args.append and args.json_out.exists():
            before = json.loads(args.json_out.read_text())
            records = [*(before if isinstance(before, list) else [before]), record]
        out = records if args.append else record
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
