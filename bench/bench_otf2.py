"""OTF2 reader speed: the event-object path (``Collector``) against the fast path
(``otf2_raw`` + ``otf2_fast``) on a synthetic MPI ring (bench_formats.write_otf2), in the
same invocation; events/s and the equality of the tables.

    .venv/bin/python bench/bench_otf2.py --dir /work/tmp_otf2 --ranks 64 --iters 300 \
        --json-out bench/results_otf2.json
"""

from __future__ import annotations

import argparse
import json
import platform
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


def _read(anchor: Path, fast: bool) -> tuple[float, float, Any]:
    reader = Otf2Reader()
    reader.fast = fast
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start, cpu = time.perf_counter(), time.process_time()
        out = reader.read(Source(str(anchor)))
        return time.perf_counter() - start, time.process_time() - cpu, out


def _same(a: Any, b: Any) -> bool:
    for x, y in zip(a, b, strict=True):
        for name, table in x.tables.items():
            cols = [(c, "ascending") for c in table.column_names]
            if not table.sort_by(cols).equals(y.tables[name].sort_by(cols)):
                return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, default=Path("/work/tmp_otf2"))
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--skip-old", action="store_true")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    root = args.dir / f"ring_{args.ranks}x{args.iters}"
    if not (root / "traces.otf2").exists():
        write_otf2(root, args.ranks, args.iters)
    anchor = root / "traces.otf2"
    import otf2  # type: ignore[import-untyped]

    with otf2.reader.open(str(anchor)) as r:
        events = sum(loc.number_of_events for loc in r.definitions.locations)
    new_s, new_cpu, new = _read(anchor, True)
    record: dict[str, Any] = {
        "command": " ".join(["bench/bench_otf2.py", *sys.argv[1:]]),
        "machine": platform.node(), "events": events,
        "input_bytes": sum(p.stat().st_size for p in root.rglob("*") if p.is_file()),
        "fast_s": round(new_s, 3), "fast_events_per_s": round(events / new_s),
        "fast_cpu_s": round(new_cpu, 3), "fast_events_per_cpu_s": round(events / new_cpu),
    }
    if not args.skip_old:
        old_s, old_cpu, old = _read(anchor, False)
        record.update(old_s=round(old_s, 3), old_events_per_s=round(events / old_s),
                      old_cpu_s=round(old_cpu, 3),
                      old_events_per_cpu_s=round(events / old_cpu),
                      speedup=round(old_s / new_s, 2), identical_tables=_same(old, new))
    print(json.dumps(record))
    if args.json_out:
        args.json_out.write_text(json.dumps(record, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
