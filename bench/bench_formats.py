"""Reader, export and filter benchmark for the non-Kineto formats.

Inputs are the real traces in ``shared/traces`` scaled up by replication in time (each
copy shifted by the trace's span, ids shifted so correlations stay unique):

* nsys: ``nsys-ai/h100_2gpu_1s.sqlite`` (2 processes), activity tables copied ``--copies``
  times inside a copy of the SQLite file;
* Paraver: ``profet-paraver/lulesh_4+4...chop_5it.prv`` (20 tasks), body records copied;
* OTF2: a synthetic MPI ring (``--otf2-ranks`` ranks x ``--otf2-iters`` iterations of
  compute, MPI_Send/MPI_Recv to the neighbours and MPI_Allreduce) written with ``otf2``.

Each command runs in its own process through ``bench/measure.py`` (wall time, peak RSS):
``traceatlas ingest``, then ``export --to chrome`` and ``--to paraver`` of the store, then
``filter --category mpi`` (or ``kernel``). No peer is timed: HTA reads none of these
formats, nsys2prv needs the ``nsys`` binary (not installable here) even for an existing
SQLite export, and Pipit is not on PyPI (the ``pipit`` name there is an empty 0.0.1).

Example::

    .venv/bin/python bench/bench_formats.py --gen-dir /tmp/tabench/formats \\
        --json-out bench/results_formats.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
TRACES = REPO_ROOT.parent / "shared" / "traces"
NSYS_SOURCE = TRACES / "nsys-ai" / "h100_2gpu_1s.sqlite"
PRV_SOURCE = TRACES / "profet-paraver" / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
NSYS_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS",
    "OSRT_API",
)
TIME_FIELDS = {"1": (5, 6), "2": (5,), "3": (5, 6, 11, 12)}
"""Paraver record type -> indexes of its time fields (0-based, ':'-separated)."""


def scale_nsys(src: Path, out: Path, copies: int) -> int:
    """Copy ``src`` with its activity tables replicated ``copies`` times; returns rows."""
    shutil.copyfile(src, out)
    con = sqlite3.connect(out)
    present = [t for t in NSYS_TABLES
               if con.execute("SELECT 1 FROM sqlite_master WHERE name=?", (t,)).fetchone()]
    lo, hi = con.execute(
        " UNION ALL ".join(f"SELECT min(start) a, max(end) b FROM {t}" for t in present)
        .join(("SELECT min(a), max(b) FROM (", ")"))
    ).fetchone()
    span = int(hi) - int(lo) + 1
    rows = 0
    for table in present:
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        n = con.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
        corr_max = (con.execute(f"SELECT max(correlationId) FROM {table}").fetchone()[0]
                    if "correlationId" in cols else 0) or 0
        for k in range(1, copies):
            shifted = {
                "start": f"start + {k * span}", "end": f"end + {k * span}",
                "correlationId": f"correlationId + {k * (corr_max + 1)}",
            }
            select = ", ".join(shifted.get(c, c) for c in cols)
            con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {select} "
                        f"FROM {table} WHERE rowid <= {n}")
        rows += con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    con.commit()
    con.close()
    return int(rows)


def scale_paraver(src: Path, out: Path, copies: int) -> int:
    """Write ``out`` (.prv + copied .pcf/.row) with the body replicated; returns records."""
    lines = src.read_text().splitlines()
    header, body = lines[0], [ln for ln in lines[1:] if ln[:2] in ("1:", "2:", "3:")]
    comms = [ln for ln in lines[1:] if ln[:1] in "cCiI"]
    head, _, rest = header.partition("):")
    end_text, _, model = rest.partition(":")
    digits = end_text.split("_")[0]
    end = int(digits)
    with out.open("w") as fh:
        fh.write(f"{head}):{end * copies}{end_text[len(digits):]}:{model}\n")
        fh.writelines(c + "\n" for c in comms)
        for k in range(copies):
            for ln in body:
                f = ln.split(":")
                for i in TIME_FIELDS[f[0]]:
                    f[i] = str(int(f[i]) + k * end)
                fh.write(":".join(f) + "\n")
    for ext in (".pcf", ".row"):
        shutil.copyfile(src.with_suffix(ext), out.with_suffix(ext))
    return len(body) * copies


def write_otf2(root: Path, ranks: int, iters: int) -> int:
    """A synthetic MPI ring in OTF2; returns the number of events written."""
    import otf2
    from otf2.enums import CollectiveOp, GroupType, Paradigm, RegionRole

    with otf2.writer.open(str(root), timer_resolution=1_000_000_000) as trace:
        d = trace.definitions
        node = d.system_tree_node("node0", class_name="node")
        groups = [d.location_group(f"MPI Rank {r}", system_tree_parent=node)
                  for r in range(ranks)]
        locs = [d.location("Master thread", group=g) for g in groups]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI,
            members=list(range(ranks))))
        compute = d.region("compute", paradigm=Paradigm.USER, region_role=RegionRole.FUNCTION)
        send = d.region("MPI_Send", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT)
        recv = d.region("MPI_Recv", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT)
        allred = d.region("MPI_Allreduce", paradigm=Paradigm.MPI,
                          region_role=RegionRole.COLL_ALL2ALL)
        events = 0
        for r, loc in enumerate(locs):
            w = trace.event_writer_from_location(loc)
            t = 1_000
            for i in range(iters):
                w.enter(t, compute)
                w.leave(t + 50_000 + 100 * r, compute)
                t += 60_000
                w.enter(t, send)
                w.mpi_send(t + 10, (r + 1) % ranks, world, i, 4096)
                w.leave(t + 2_000, send)
                w.enter(t + 3_000, recv)
                w.mpi_recv(t + 4_000, (r - 1) % ranks, world, i, 4096)
                w.leave(t + 5_000, recv)
                w.enter(t + 6_000, allred)
                w.mpi_collective_begin(t + 6_010)
                w.mpi_collective_end(t + 9_000, CollectiveOp.ALLREDUCE, world, 0, 64, 64)
                w.leave(t + 9_010, allred)
                t += 10_000
                events += 14
    return events


def _measure(cmd: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(BENCH_DIR / "measure.py"), "--", *cmd],
        capture_output=True, text=True, check=False,
    )
    record: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return record


def run(gen: Path, copies: int, otf2_ranks: int, otf2_iters: int) -> list[dict[str, Any]]:
    """Generate (when missing) and measure every case; one record per command."""
    gen.mkdir(parents=True, exist_ok=True)
    ta = str(REPO_ROOT / ".venv" / "bin" / "traceatlas")
    cases: list[tuple[str, Path, int, str]] = []
    nsys = gen / f"nsys_x{copies}.sqlite"
    if not nsys.exists():
        scale_nsys(NSYS_SOURCE, nsys, copies)
    cases.append(("nsys", nsys, copies, "kernel"))
    prv = gen / f"lulesh_x{copies}.prv"
    if not prv.exists():
        scale_paraver(PRV_SOURCE, prv, copies)
    cases.append(("paraver", prv, copies, "mpi"))
    otf = gen / f"ring_{otf2_ranks}x{otf2_iters}"
    if not (otf / "traces.otf2").exists():
        shutil.rmtree(otf, ignore_errors=True)
        write_otf2(otf, otf2_ranks, otf2_iters)
    cases.append(("otf2", otf / "traces.otf2", otf2_ranks, "mpi"))
    records = []
    for fmt, path, scale, category in cases:
        store = gen / f"{fmt}.tastore"
        steps = {
            "ingest": [ta, "ingest", str(path), "-o", str(store)],
            "export chrome": [ta, "export", str(store), "--to", "chrome",
                              "-o", str(gen / f"{fmt}.json.gz")],
            "export paraver": [ta, "export", str(store), "--to", "paraver",
                               "-o", str(gen / f"{fmt}_out.prv")],
            f"filter --category {category}": [ta, "filter", str(store), "--category",
                                              category, "-o", str(gen / f"{fmt}_f.tastore")],
        }
        for step, cmd in steps.items():
            rec = _measure(cmd)
            info = json.loads(subprocess.run(
                [ta, "info", str(store), "--format", "json"], capture_output=True,
                text=True, check=True).stdout) if step == "ingest" else {}
            records.append({
                "format": fmt, "input": str(path), "scale": scale, "step": step,
                "wall_s": rec.get("wall_s"), "maxrss_bytes": rec.get("maxrss_bytes"),
                "returncode": rec.get("returncode"),
                "input_bytes": _size(path),
                "rows": info.get("rows"),
            })
    return records


def _size(path: Path) -> int:
    from traceatlas.io.sources import companion_files

    return path.stat().st_size + sum(Path(f).stat().st_size
                                     for f in companion_files(str(path)))


def main() -> None:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen-dir", type=Path, default=Path("/tmp/tabench/formats"))
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--otf2-ranks", type=int, default=64)
    ap.add_argument("--otf2-iters", type=int, default=1_000)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    records = run(args.gen_dir, args.copies, args.otf2_ranks, args.otf2_iters)
    print("| format | input MB | step | wall s | peak RSS MB | rc |")
    print("|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['format']} | {r['input_bytes'] / 1e6:.1f} | {r['step']} | "
              f"{r['wall_s']:.2f} | {(r['maxrss_bytes'] or 0) / 1e6:.0f} | "
              f"{r['returncode']} |")
    if args.json_out:
        args.json_out.write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
