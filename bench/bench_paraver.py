"""Paraver reader speed (issue 14): MB/s of ``.prv`` (and ``.prv.gz``) read into tables,
before and after, each read in a fresh process under ``bench/measure.py``.

Inputs (written under ``--gen-dir``, reused when present):

- ``mpi.prv``: ``traceatlas.testing.mpi.write_mpi_trace(ranks=1024, iterations=1954,
  imbalance=0.5, message_bytes=(1024, 4096, 65536))`` (~724 MB, 16 M event records,
  2 M communications), and ``mpi.prv.gz`` (``gzip -1``);
- ``lulesh.prv``: the real profet-paraver LULESH 4+4 trace replicated in time
  (``bench_formats.scale_paraver``, ``--lulesh-copies``), states, events with several
  pairs per line, counters, communications.

Each file is read by ``ParaverReader().read(Source(path), threads=2)`` (the reader alone:
body parse, .pcf semantics, per-rank tables; no Parquet write) by the current checkout
(``after``) and by a ``git worktree`` of ``--before-ref`` (``before``, the reader of that
commit). ``MB/s`` = uncompressed ``.prv`` bytes / wall seconds of the process (start-up
and imports included); ``MB/s read alone`` = the same bytes / the time of the ``read``
call. The machine is shared: ``other_cpu_s / wall_s`` (measure.py) is the number of cores
other work took meanwhile; ``cpu_s`` is the steadier figure.

Example::

    .venv/bin/python bench/bench_paraver.py --gen-dir /work/tmp_prv/bench \\
        --json-out bench/results_paraver.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
LULESH = "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
BEFORE_REF = "4123d00"  # the commit before the fast Paraver reader


def child(path: str) -> None:
    """Read ``path`` with the ``traceatlas`` on ``sys.path``; print rows per table."""
    import warnings

    from traceatlas.io.paraver import ParaverReader
    from traceatlas.io.sources import Source

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranks = ParaverReader().read(Source(path), threads=2)
    rows: dict[str, int] = {}
    for rank in ranks:
        for name, table in rank.tables.items():
            rows[name] = rows.get(name, 0) + table.num_rows
    print(json.dumps({"read_s": time.perf_counter() - t0, "ranks": len(ranks), "rows": rows}))


def measured(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """``cmd`` under measure.py; its record plus the child's JSON line."""
    out_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_paraver_{os.getpid()}.out"
    wrapper = [sys.executable, str(BENCH_DIR / "measure.py"), "--timeout", str(timeout),
               "--stdout", str(out_file), "--"]
    done = subprocess.run([*wrapper, *cmd], capture_output=True, text=True, check=True,
                          env=env)
    rec: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    lines = out_file.read_text().strip().splitlines()
    out_file.unlink(missing_ok=True)
    if lines:
        rec["child"] = json.loads(lines[-1])
    return rec


def generate(gen: Path, ranks: int, iterations: int, lulesh_copies: int,
             traces: Path) -> dict[str, Path]:
    """Write (or reuse) the inputs; their paths."""
    sys.path.insert(0, str(BENCH_DIR))
    from bench_formats import scale_paraver

    from traceatlas.testing.mpi import write_mpi_trace

    gen.mkdir(parents=True, exist_ok=True)
    mpi = gen / "mpi.prv"
    stamp = gen / "mpi.params.json"
    params = {"ranks": ranks, "iterations": iterations}
    if not (mpi.exists() and stamp.exists() and json.loads(stamp.read_text()) == params):
        write_mpi_trace(mpi, ranks=ranks, iterations=iterations, imbalance=0.5,
                        message_bytes=(1024, 4096, 65536))
        stamp.write_text(json.dumps(params))
        (gen / "mpi.prv.gz").unlink(missing_ok=True)
    gz = gen / "mpi.prv.gz"
    if not gz.exists():
        with mpi.open("rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
    lulesh = gen / "lulesh.prv"
    lstamp = gen / "lulesh.copies"
    if not (lulesh.exists() and lstamp.exists() and lstamp.read_text() == str(lulesh_copies)):
        scale_paraver(traces / LULESH, lulesh, lulesh_copies)
        lstamp.write_text(str(lulesh_copies))
    return {"mpi.prv": mpi, "mpi.prv.gz": gz, "lulesh.prv": lulesh}


def before_tree(gen: Path, ref: str) -> Path:
    """A git worktree of ``ref`` (the reader before); its ``src``."""
    tree = gen / f"before-{ref}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach",
                        str(tree), ref], check=True, capture_output=True)
    return tree / "src"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--gen-dir", type=Path, default=Path("/tmp/tabench/paraver"))
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--iterations", type=int, default=1954)
    ap.add_argument("--lulesh-copies", type=int, default=240)
    ap.add_argument("--before-ref", default=BEFORE_REF)
    ap.add_argument("--skip-before", action="store_true")
    ap.add_argument("--traces", type=Path, default=REPO_ROOT.parent / "shared" / "traces")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--label", help="store this run under runs/<label> in --json-out "
                    "(earlier keys kept); without it the top-level keys are replaced")
    ap.add_argument("--repeat", type=int, default=1, help="reads per input and variant "
                    "(variants alternate: after, before, after, ...)")
    ap.add_argument("--only", nargs="*", help="inputs to measure (mpi.prv, mpi.prv.gz, "
                    "lulesh.prv); all by default")
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    inputs = generate(args.gen_dir, args.ranks, args.iterations, args.lulesh_copies,
                      args.traces)
    variants = {"after": str(REPO_ROOT / "src")}
    if not args.skip_before:
        variants["before"] = str(before_tree(args.gen_dir, args.before_ref))
    results: list[dict[str, Any]] = []
    for name, path in inputs.items():
        if args.only and name not in args.only:
            continue
        size = path.stat().st_size
        plain = path.with_suffix("").stat().st_size if path.suffix == ".gz" else size
        for repeat, (variant, src) in ((i, v) for i in range(max(1, args.repeat))
                                       for v in variants.items()):
            env = dict(os.environ, PYTHONPATH=src)
            rec = measured([sys.executable, __file__, "--child", str(path)], env,
                           args.timeout)
            read_s = rec.get("child", {}).get("read_s") or rec["wall_s"]
            rec.update(input=name, variant=variant, repeat=repeat, file_bytes=size,
                       prv_bytes=plain,
                       mb_per_s=plain / 1e6 / rec["wall_s"], mb_per_s_read=plain / 1e6 / read_s)
            results.append(rec)
            print(f"{name:12s} {variant:6s} wall {rec['wall_s']:6.1f} s  cpu "
                  f"{rec.get('cpu_s', 0):6.1f} s  peak {rec.get('maxrss_bytes', 0) / 1e9:5.2f} GB"
                  f"  {rec['mb_per_s']:6.1f} MB/s (read alone {rec['mb_per_s_read']:6.1f})"
                  f"  other cores "
                  f"{rec.get('other_cpu_s', 0) / rec['wall_s']:.2f}", flush=True)
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for name in dict.fromkeys(r["input"] for r in results):
        for variant in variants:
            mine = [r for r in results if r["input"] == name and r["variant"] == variant]
            summary.setdefault(name, {})[variant] = {
                f"median_{k}": statistics.median(float(r.get(k, 0)) for r in mine)
                for k in ("wall_s", "cpu_s", "maxrss_bytes", "mb_per_s", "mb_per_s_read")}
    report = {
        "command": " ".join([".venv/bin/python", "bench/bench_paraver.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "before_ref": None if args.skip_before else args.before_ref,
        "results": results,
        "summary": summary,  # medians over --repeat reads
    }
    if args.json_out:
        # earlier keys are kept: this run goes under "runs"/<label> (the top-level keys
        # of the first run stay as they were)
        saved: dict[str, Any] = {}
        if args.json_out.exists():
            saved = json.loads(args.json_out.read_text())
        if args.label:
            saved.setdefault("runs", {})[args.label] = report
        else:
            saved.update(report)
        args.json_out.write_text(json.dumps(saved, indent=1) + "\n")


if __name__ == "__main__":
    main()
