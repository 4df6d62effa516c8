"""PyTorch profiler / Kineto Chrome-trace JSON reader (also plain Chrome-trace JSON).

Handles every schema generation seen in the wild: 2021 (``Operator``/``Kernel``/
``Runtime``), 2022+ (``cpu_op``/``kernel``/``cuda_runtime``/``ac2g``), ROCm (``hip*``
names), MTIA, fractional-microsecond timestamps, ``baseTimeNanoseconds``, and rocprof v1
files whose events carry no ``cat`` and write numbers as strings.

How: msgspec scans the top level once (validating the JSON and keeping every metadata
key), then DuckDB's parallel JSON reader parses ``traceEvents`` into Arrow columns, with
``args`` kept whole as JSON text. Everything after that is vectorised (DuckDB SQL,
pyarrow compute, numpy); see ``kineto_tables.py``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from typing import Any, BinaryIO

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import CorruptTraceError, RankInferredWarning, UnsupportedFormatError
from traceatlas.io import kineto_tables
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.model.sqltext import file_list
from traceatlas.tempfiles import staging_prefix

_RANK_IN_NAME = re.compile(r"^(?:rank|worker)[-_]?(\d+)(?!\d)", re.IGNORECASE)
"""``rank-3...``, ``rank3...``, ``worker3...`` at the start of a file name (not hostnames)."""

_BOM = b"\xef\xbb\xbf"
_BOM_AND_SPACE = _BOM + b" \t\r\n"

_ARG_STRUCT = json.dumps(
    {
        "correlation": "BIGINT",
        "External id": "BIGINT",
        "device": "BIGINT",
        "stream": "BIGINT",
        "bytes": "BIGINT",
        "Collective name": "VARCHAR",
        "Process Group Name": "VARCHAR",
        "Process Group Ranks": "VARCHAR",
        "In msg nelems": "BIGINT",
        "Out msg nelems": "BIGINT",
        "dtype": "VARCHAR",
        "grid": "INTEGER[]",
        "block": "INTEGER[]",
        "name": "VARCHAR",
        "labels": "VARCHAR",
    }
)

_EVENTS_SQL = """
SELECT
  ph, cat, name, coalesce(pid, '') AS pid, coalesce(tid, '') AS tid, id, s AS scope,
  CASE WHEN ts IS NULL THEN NULL
       ELSE CAST(floor(ts) AS BIGINT) * 1000 + CAST(round((ts - floor(ts)) * 1000) AS BIGINT)
            + {base_ns}
  END AS ts_ns,
  CAST(round(dur * 1000) AS BIGINT) AS dur_ns,
  CAST(args AS VARCHAR) AS args,
  CASE WHEN ph IN ('X', 'M') THEN json_transform(args, '{arg_struct}') END AS a
FROM read_json(
  {path}, format = 'array', maximum_object_size = 16777216,
  columns = {{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR',
             tid: 'VARCHAR', id: 'VARCHAR', s: 'VARCHAR', ts: 'DOUBLE', dur: 'DOUBLE',
             args: 'JSON'}}
)
"""

class KinetoReader:
    """Reader for Kineto / Chrome-trace JSON (``.json``, ``.json.gz``)."""

    name = "kineto"
    description = "PyTorch profiler (Kineto) and Chrome-trace JSON, .json or .json.gz"

    def sniff(self, head: bytes, source: Source) -> bool:
        """A JSON object or array: Chrome-trace JSON in either of its two layouts."""
        return head.lstrip(_BOM_AND_SPACE)[:1] in (b"{", b"[")

    def read(self, source: Source, *, threads: int = 1) -> list[RankData]:
        """Parse one Kineto file into canonical tables (times in ns on the unix clock)."""
        # The events text is staged in $TMPDIR for DuckDB's parallel reader (set
        # TMPDIR=/dev/shm to keep it in RAM: faster, but that memory is not in the RSS).
        fd, events_path = tempfile.mkstemp(suffix=".json", prefix=staging_prefix("events"))
        con = None
        try:
            con = duckdb.connect(":memory:", config={"threads": max(1, threads)})
            with os.fdopen(fd, "wb") as events_file:
                meta, rebase_us = _split_top_level(source, events_file)
            base_ns = _base_time_ns(meta) + rebase_us * 1000
            # No local references to the parsed tables: build_tables can free columns.
            tables = kineto_tables.build_tables(
                con, *_load_events(con, events_path, base_ns), source.display
            )
            chrome_meta = kineto_tables.metadata_events(con)
        except duckdb.Error as exc:
            detail = " ".join(str(exc).replace(events_path, "<events>").split())
            raise CorruptTraceError(
                source.display, f"traceEvents could not be parsed ({detail})"
            ) from exc
        finally:
            if con is not None:
                con.close()
            if os.path.exists(events_path):
                os.unlink(events_path)
        rank, rank_source = _rank_of(meta, source)
        tables["metadata"] = _metadata_table(meta, source, chrome_meta)
        dist = meta.get("distributedInfo")
        world = dist.get("world_size") if isinstance(dist, dict) else None
        host = meta.get("host_name")
        if isinstance(host, str):
            tracks = tables["tracks"]
            tables["tracks"] = tracks.set_column(
                tracks.schema.get_field_index("host"), "host",
                pa.array([host] * tracks.num_rows, pa.string()),
            )
        return [RankData(
            tables=tables,
            source_format="kineto",
            rank=rank,
            rank_source=rank_source,
            clock=_clock_of(meta, tables),
            world_size=world if isinstance(world, int) else None,
            host=host if isinstance(host, str) else None,
        )]


def _split_top_level(source: Source, events_file: BinaryIO) -> tuple[dict[str, Any], int]:
    """Validate the JSON, write the raw ``traceEvents`` array to ``events_file`` and
    return the decoded top-level metadata and the rebase (us) subtracted from absolute
    fractional timestamps (see ``_write_events``)."""
    data = source.read_bytes()
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    stripped = data.lstrip()
    if not stripped:
        raise CorruptTraceError(source.display, "empty file")
    try:
        if stripped[:1] == b"[":
            items = msgspec.json.decode(data, type=list[msgspec.Raw])
            if items and bytes(items[0]).lstrip()[:1] != b"{":
                raise UnsupportedFormatError(
                    source.display, "JSON array whose items are not event objects; "
                    "not a Chrome trace"
                )
            del items
            return {}, _write_events(data, events_file)
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError as exc:
        raise UnsupportedFormatError(
            source.display, f"JSON is not a Chrome trace object ({exc})"
        ) from exc
    except msgspec.DecodeError as exc:
        what = "truncated JSON" if "truncated" in str(exc).lower() else "invalid JSON"
        raise CorruptTraceError(source.display, f"{what} ({exc})") from exc
    del data, stripped
    if "traceEvents" not in top:
        hint = ""
        if "nodes" in top:
            hint = "; it looks like a PyTorch execution trace (Chakra ET), not a profiler trace"
        keys = ", ".join(sorted(top)[:8])
        raise UnsupportedFormatError(
            source.display, f"JSON object without 'traceEvents' (keys: {keys}){hint}"
        )
    events = top.pop("traceEvents")
    rebase_us = _write_events(events, events_file)
    del events
    meta = {key: msgspec.json.decode(raw) for key, raw in top.items()}
    return meta, rebase_us


_ABSOLUTE_FRACTIONAL_TS = re.compile(rb'"ts"\s*:\s*"?-?\d{16,}\.\d')
_TS_VALUE = re.compile(rb'("ts"\s*:\s*"?)(-?\d+)')
_REBASE_UNIT_US = 10**9


def _write_events(events: Any, events_file: BinaryIO) -> int:
    """Write the events text; return the rebase in us applied to its timestamps.

    DuckDB reads numbers as doubles, which cannot hold absolute unix microseconds with a
    fraction (16 integer digits + 3) to the ns. When the text has such timestamps, the
    integer part of every ``"ts"`` is rebased in the text itself (exact integer
    arithmetic on the digits, fraction untouched) and the rebase is added back in ns.
    """
    sample = bytes(memoryview(events)[: 1 << 20])
    match = _ABSOLUTE_FRACTIONAL_TS.search(sample)
    if match is None:
        events_file.write(events)
        return 0
    first = int(re.search(rb"-?\d{16,}", match.group(0)).group(0))  # type: ignore[union-attr]
    rebase_us = first // _REBASE_UNIT_US * _REBASE_UNIT_US
    events_file.write(_TS_VALUE.sub(
        lambda m: m.group(1) + str(int(m.group(2)) - rebase_us).encode(), bytes(events)
    ))
    return rebase_us


def _load_events(
    con: duckdb.DuckDBPyConnection, path: str, base_ns: int
) -> tuple[pa.Table, pa.Table]:
    """Parse the ``traceEvents`` array (an empty one too); return (complete events, all
    other events).

    The parse result is streamed in record batches and split as it arrives, so the full
    event table never exists alongside its complete-event copy.
    """
    sql = _EVENTS_SQL.format(
        path=file_list([path]), arg_struct=_ARG_STRUCT, base_ns=int(base_ns)  # never a glob
    )
    complete: list[pa.RecordBatch] = []
    rest: list[pa.RecordBatch] = []
    reader = con.sql(sql).to_arrow_reader(1 << 16)
    schema = reader.schema
    for batch in reader:
        is_complete = pc.fill_null(
            pc.and_(pc.equal(batch["ph"], "X"),
                    pc.and_(pc.is_valid(batch["ts_ns"]), pc.is_valid(batch["dur_ns"]))),
            False,
        )
        complete.append(batch.filter(is_complete))
        rest.append(batch.filter(pc.invert(is_complete)))
    return (
        pa.Table.from_batches(complete, schema=schema),
        pa.Table.from_batches(rest, schema=schema),
    )


def _whole_number(value: Any) -> int | None:
    """A non-negative int from an int (not a bool), a float or a digit string; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return int(value) if value.strip().isdigit() else None
    if isinstance(value, int | float) and value >= 0:
        return int(value)
    return None


def _base_time_ns(meta: dict[str, Any]) -> int:
    return _whole_number(meta.get("baseTimeNanoseconds")) or 0


def _rank_of(meta: dict[str, Any], source: Source) -> tuple[int | None, str | None]:
    dist = meta.get("distributedInfo")
    if isinstance(dist, dict):
        rank = dist.get("rank")
        if not isinstance(rank, float) and (number := _whole_number(rank)) is not None:
            return number, "distributedInfo"
    match = _RANK_IN_NAME.search(source.file_name)
    if match:
        warnings.warn(
            f"{source.display}: no distributedInfo.rank; rank {match.group(1)} taken from "
            "the file name",
            RankInferredWarning,
            stacklevel=2,
        )
        return int(match.group(1)), "file name"
    return None, None


def _clock_of(meta: dict[str, Any], tables: dict[str, pa.Table]) -> dict[str, object]:
    base_ns = _base_time_ns(meta)
    if base_ns:
        return {"method": "baseTimeNanoseconds", "base_ns": base_ns, "offset_ns": 0}
    starts = tables["intervals"].column("start_ns")
    first = pc.min(starts).as_py() if len(starts) else None
    # Timestamps after 2001-09-09 in us are wall-clock (unix epoch) values.
    if first is not None and first >= 10**18:
        return {"method": "unix timestamps as written", "base_ns": 0, "offset_ns": 0}
    return {"method": "none (relative timestamps, no baseTimeNanoseconds)", "base_ns": 0,
            "offset_ns": 0}


def _metadata_table(meta: dict[str, Any], source: Source, chrome_meta: str) -> pa.Table:
    """Top-level keys as JSON, plus every Chrome ``M`` event (names, labels, sort indices)."""
    keys = ["source_file", *meta.keys(), "chrome_metadata_events"]
    values = [json.dumps(source.display), *(json.dumps(v) for v in meta.values()), chrome_meta]
    return pa.table({"key": pa.array(keys, pa.string()), "value": pa.array(values, pa.string())})
