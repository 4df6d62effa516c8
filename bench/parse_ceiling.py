"""Raw parse speed of the JSON libraries traceatlas uses, on one rank file (the ceiling).

Measures, in one process: reading the file; msgspec's validating scan of the top level
(what traceatlas runs first); DuckDB's parallel ``read_json`` of the events array into
Arrow with no transforms (the parser traceatlas uses for events); and, for reference, a
full msgspec decode into typed structs with the garbage collector paused.

Usage: python bench/parse_ceiling.py FILE.json [--threads 2]

With ``--ab N`` it instead times the Kineto reader itself (``KinetoReader.read``, no
store writes) N times with the JSON ``args`` read (``TYPED_ARGS = False``, the old path)
and the typed one alternately: wall and CPU seconds (all threads, ``getrusage``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import tempfile
import time
import warnings

import duckdb
import msgspec


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event]


def _timed(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def reader_ab(path: str, runs: int, threads: int) -> None:
    """Old (JSON args) and new (typed args) reader paths, alternated, ``runs`` each."""
    from traceatlas.io import kineto_events
    from traceatlas.io.kineto import KinetoReader
    from traceatlas.io.sources import resolve_inputs

    (source,) = resolve_inputs([path])
    rows: dict[str, list[dict[str, float]]] = {"json_args": [], "typed_args": []}
    for _ in range(runs):
        for label, typed in (("json_args", False), ("typed_args", True)):
            kineto_events.TYPED_ARGS = typed
            c0, t0 = _cpu_s(), time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                KinetoReader().read(source, threads=threads)
            rows[label].append({"wall_s": round(time.perf_counter() - t0, 3),
                                "cpu_s": round(_cpu_s() - c0, 3)})
    best = {k: {m: min(r[m] for r in v) for m in ("wall_s", "cpu_s")} for k, v in rows.items()}
    print(json.dumps({"file": path, "MB": round(os.path.getsize(path) / 1e6, 1),
                      "threads": threads, "load_avg": os.getloadavg(), "runs": rows,
                      "best": best}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ab", type=int, default=0, metavar="N",
                    help="time the reader's old and new args paths N times each")
    args = ap.parse_args()
    if args.ab:
        reader_ab(args.file, args.ab, args.threads)
        return
    size = os.path.getsize(args.file)
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    with open(args.file, "rb") as fh:
        data = fh.read()
    out["read_s"] = time.perf_counter() - t0
    top: dict[str, msgspec.Raw] = {}
    out["msgspec_scan_s"] = _timed(
        lambda: top.update(msgspec.json.decode(data, type=dict[str, msgspec.Raw]))
    )
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "wb") as fh:
        out["stage_events_s"] = _timed(lambda: fh.write(top["traceEvents"]))
    top.clear()
    con = duckdb.connect(config={"threads": args.threads})
    sql = (
        f"SELECT * FROM read_json('{path}', format='array', maximum_object_size=16777216, "
        "columns={ph:'VARCHAR', cat:'VARCHAR', name:'VARCHAR', pid:'VARCHAR', tid:'VARCHAR',"
        " id:'VARCHAR', s:'VARCHAR', ts:'DOUBLE', dur:'DOUBLE', args:'JSON'})"
    )
    out["duckdb_parse_s"] = _timed(lambda: con.sql(sql).to_arrow_table())
    con.close()
    os.unlink(path)
    gc.disable()
    out["msgspec_typed_decode_s"] = _timed(lambda: msgspec.json.decode(data, type=_Trace))
    gc.enable()
    mb = size / 1e6
    rates = {k.removesuffix("_s") + "_MBps": round(mb / v, 1) for k, v in out.items()}
    print(json.dumps({"file": args.file, "MB": round(mb, 1), "threads": args.threads,
                      **{k: round(v, 3) for k, v in out.items()}, **rates}, indent=1))


if __name__ == "__main__":
    main()
