"""``nsys stats`` NVTX push/pop trace CSV reader (``nvtx_pushpop_trace`` report).

Columns: ``Start (ns)``, ``End (ns)``, ``Duration (ns)``, ``DurChild (ns)``,
``DurNonChild (ns)``, ``Name``, ``PID``, ``TID``, ``Lvl``, ``NumChild``, ``RangeId``,
``ParentId``, ``RangeStack``, ``NameTree``. Each row is one NVTX range (category nvtx)
on the host thread (PID, TID); columns other than start, end, name, PID and TID go to
``args``. The report has no session start, so times stay as written (session-relative
ns) and the rank is left to ingest. One ``RankData`` per PID. Parsed by DuckDB's CSV
reader; depth from ``traceatlas.ops.nesting`` (``Lvl`` stays in args). Rows whose start
or end is not an integer, or that end before they start, are counted, dropped and
reported (a warning and a data-quality note); a file with rows but none usable is refused.
"""

from __future__ import annotations

import json
import warnings

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import CorruptTraceError, DataQualityWarning, UnsupportedFormatError
from traceatlas.io.quality import DATA_QUALITY_KEY, Note, notes_json
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.model.schema import empty_table
from traceatlas.model.sqltext import file_list
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting

_HEADER = b"Start (ns),End (ns),"
_REQUIRED = ("Start (ns)", "End (ns)", "Name")
_TEXT_ARGS = frozenset({"RangeStack", "NameTree"})


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _int(name: str) -> str:
    """SQL: column ``name`` as BIGINT, NULL when it is not an integer. The trim keeps
    DuckDB (2.0.1) from pushing the TRY_CAST into the CSV scan, where it becomes a
    strict conversion that fails the whole file."""
    return f"TRY_CAST(trim({_q(name)}) AS BIGINT)"


class NsysNvtxCsvReader:
    """Reader for the ``nsys stats`` NVTX push/pop trace CSV."""

    name = "nsys-nvtx-csv"
    description = "nsys stats NVTX push/pop trace report (CSV)"

    def sniff(self, head: bytes, source: Source) -> bool:
        """The report's header line: ``Start (ns),End (ns),...`` with a ``Name`` column."""
        first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0]
        return first.startswith(_HEADER) and b",Name," in first

    def read(self, source: Source, *, threads: int = 1) -> list[RankData]:
        """One ``RankData`` per PID; times in ns as written (no absolute start)."""
        if source.member is not None:
            raise UnsupportedFormatError(source.display, "an nsys stats CSV inside an "
                                         "archive cannot be read; extract it first")
        con = duckdb.connect(":memory:", config={"threads": max(1, threads)})
        try:
            table = _load(con, source)
        except duckdb.Error as exc:
            raise CorruptTraceError(source.display, f"CSV could not be parsed "
                                    f"({' '.join(str(exc).split())})") from exc
        finally:
            con.close()
        table, notes = _drop_bad(table, source.display)
        out = []
        for pid in pc.unique(table["pid"]).to_pylist():
            rows = table.filter(pc.equal(table["pid"], pid)) if pid is not None else \
                table.filter(pc.is_null(table["pid"]))
            out.append(_rank(rows, source, notes))
        return out or [_rank(table, source, notes)]


def _drop_bad(table: pa.Table, display: str) -> tuple[pa.Table, list[Note]]:
    """Rows without an integer start and end, or ending before they start, dropped
    (warned, noted); CorruptTraceError when no row is left of several."""
    no_time = pc.or_(pc.is_null(table["start_ns"]), pc.is_null(table["end_ns"]))
    reversed_ = pc.fill_null(pc.less(table["end_ns"], table["start_ns"]), False)
    notes = []
    for mask, what in ((no_time, "a Start (ns) or End (ns) that is not an integer"),
                       (reversed_, "an end before their start")):
        n = int(pc.sum(mask).as_py() or 0)
        if n:
            notes.append(Note(display, "", f"{n} row(s) with {what} dropped", n, ("nvtx",),
                              tables=("intervals",)))
            warnings.warn(notes[-1].text(), DataQualityWarning, stacklevel=3)
    bad = pc.or_(no_time, reversed_)
    kept = table.filter(pc.invert(bad))
    if table.num_rows and not kept.num_rows:
        raise CorruptTraceError(display, f"none of the {table.num_rows} NVTX row(s) has an "
                                "integer start and end in order")
    return kept, notes


def _load(con: duckdb.DuckDBPyConnection, source: Source) -> pa.Table:
    csv = f"read_csv({file_list([source.path])}, header = true, all_varchar = true)"
    columns = list(con.sql(f"SELECT * FROM {csv} LIMIT 0").columns)
    missing = [c for c in _REQUIRED if c not in columns]
    if missing:
        raise CorruptTraceError(source.display, f"NVTX CSV without column(s) {', '.join(missing)}")
    pid = _int("PID") if "PID" in columns else "NULL::BIGINT"
    tid = _int("TID") if "TID" in columns else "NULL::BIGINT"
    rest = [c for c in columns if c not in (*_REQUIRED, "PID", "TID")]
    fields = ", ".join(
        f"'{c.replace(' (ns)', '')}': "
        + (f"{_q(c)}" if c in _TEXT_ARGS else _int(c))
        for c in rest
    )
    args = f"to_json({{{fields}}})" if rest else "'{}'"
    return con.sql(f"""
        SELECT {pid} AS pid, {tid} AS tid, {_int("Start (ns)")} AS start_ns,
               {_int("End (ns)")} AS end_ns, Name AS name,
               CAST({args} AS VARCHAR) AS args
        FROM {csv} ORDER BY pid, tid, start_ns, end_ns DESC
    """).to_arrow_table()


def _rank(rows: pa.Table, source: Source, notes: list[Note]) -> RankData:
    keys = list(dict.fromkeys(zip(rows["pid"].to_pylist(), rows["tid"].to_pylist(),
                                  strict=True)))
    index = {k: i for i, k in enumerate(keys)}
    track = np.array([index[k] for k in zip(rows["pid"].to_pylist(), rows["tid"].to_pylist(),
                                            strict=True)], dtype=np.int64)
    start = rows["start_ns"].to_numpy(zero_copy_only=False).astype(np.int64)
    end = rows["end_ns"].to_numpy(zero_copy_only=False).astype(np.int64)
    order = sort_for_nesting(track, start, end)
    depth = np.empty(len(order), dtype=np.int64)
    depth[order] = nesting_depth(track[order], start[order], end[order])
    n = rows.num_rows
    intervals = pa.table({
        "track_id": pa.array(track, pa.int32()), "start_ns": pa.array(start),
        "end_ns": pa.array(end), "dur_ns": pa.array(end - start),
        "name": pc.fill_null(rows["name"], ""), "category": pa.array(["nvtx"] * n),
        "source_category": pa.array(["nvtx_pushpop_trace"] * n),
        "depth": pa.array(depth, pa.int32()), "step": pa.array([-1] * n, pa.int32()),
        "args": rows["args"],
    })
    tracks = pa.table({
        "track_id": pa.array(range(len(keys)), pa.int32()),
        "kind": pa.array(["host_thread"] * len(keys)),
        "name": pa.array([f"{p}/{t}" for p, t in keys]),
        "pid": pa.array([p for p, _ in keys], pa.int64()),
        "tid": pa.array([t for _, t in keys], pa.int64()),
        "device": pa.array([-1] * len(keys), pa.int32()),
        "stream": pa.array([-1] * len(keys), pa.int64()),
        "source_pid": pa.array([None if p is None else str(p) for p, _ in keys], pa.string()),
        "source_tid": pa.array([None if t is None else str(t) for _, t in keys], pa.string()),
    })
    meta = pa.table({"key": ["source_file", "source_format", DATA_QUALITY_KEY],
                     "value": [json.dumps(source.display),
                               json.dumps("nsys stats nvtx_pushpop_trace CSV"),
                               json.dumps(notes_json(notes))]})
    tables = {"tracks": tracks, "intervals": intervals, "metadata": meta}
    for name in ("instants", "counters", "messages", "flows"):
        tables[name] = empty_table(name).drop_columns(["rank"])
    return RankData(tables=tables, source_format="nsys-nvtx-csv",
                    clock={"method": "none (nsys stats CSV: session-relative ns)",
                           "base_ns": 0, "offset_ns": 0})
