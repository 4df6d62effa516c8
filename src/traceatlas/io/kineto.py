"""PyTorch profiler / Kineto Chrome-trace JSON reader (also plain Chrome-trace JSON).

Handles every schema generation seen in the wild: 2021 (``Operator``/``Kernel``/
``Runtime``), 2022+ (``cpu_op``/``kernel``/``cuda_runtime``/``ac2g``), ROCm (``hip*``
names), MTIA, fractional-microsecond timestamps, ``baseTimeNanoseconds``, and rocprof v1
files whose events carry no ``cat`` and write numbers as strings.

How: msgspec scans the top level once (validating the JSON and keeping every metadata
key) and slices each event's ``args`` text out as written, then DuckDB's parallel JSON
reader parses ``traceEvents`` into Arrow columns, times exact to the ns
(``kineto_events.py``). Everything after that is vectorised (DuckDB SQL, pyarrow compute,
numpy); see ``kineto_tables.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, NoReturn

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import (
    CorruptTraceError,
    DataQualityWarning,
    RankInferredWarning,
    UnsupportedFormatError,
)
from traceatlas.io import kineto_events, kineto_tables
from traceatlas.io.quality import DATA_QUALITY_KEY, Note, notes_json
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.tempfiles import staging_prefix

_RANK_IN_NAME = re.compile(r"^(?:rank|worker)[-_]?(\d+)(?!\d)", re.IGNORECASE)
"""``rank-3...``, ``rank3...``, ``worker3...`` at the start of a file name (not hostnames)."""

_BOM = b"\xef\xbb\xbf"
_BOM_AND_SPACE = _BOM + b" \t\r\n"

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
                meta, args = _split_top_level(source, events_file)
            base_ns = _base_time_ns(meta, source.display)
            notes: list[Note] = []
            # No local references to the parsed tables: build_tables can free columns.
            tables = kineto_tables.build_tables(
                con,
                *kineto_events.load_events(con, events_path, base_ns, args, source.display,
                                           notes),
                source.display,
            )
            chrome_meta = kineto_tables.metadata_events(con)
        except RecursionError as exc:
            raise CorruptTraceError(
                source.display, "JSON nested too deeply to read (over about "
                f"{sys.getrecursionlimit()} levels)"
            ) from exc
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
        tables["metadata"] = _metadata_table(meta, source, chrome_meta, notes)
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
            world_size=_world_size(meta),
            host=host if isinstance(host, str) else None,
        )]


def _split_top_level(
    source: Source, events_file: BinaryIO
) -> tuple[dict[str, Any], kineto_events.ArgsText]:
    """Validate the JSON, write the raw ``traceEvents`` array to ``events_file`` and
    return the decoded top-level metadata and every event's ``args`` text as written."""
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
            return {}, _write_events(data, events_file, source.display)
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
        del data, stripped
        if "traceEvents" not in top:
            _no_events(source, top)
        events = top.pop("traceEvents")
        first = bytes(memoryview(events)[:1])
        if first != b"[":
            kind = {b"{": "an object", b'"': "a string", b"n": "null"}.get(
                first, "a number or boolean")
            raise UnsupportedFormatError(
                source.display, f"'traceEvents' is {kind}, not a list of events"
            )
        args = _write_events(events, events_file, source.display)
        del events
        meta = {key: msgspec.json.decode(raw) for key, raw in top.items()}
    except msgspec.ValidationError as exc:
        raise UnsupportedFormatError(
            source.display, f"JSON is not a Chrome trace object ({exc})"
        ) from exc
    except msgspec.DecodeError as exc:
        what = "truncated JSON" if "truncated" in str(exc).lower() else "invalid JSON"
        raise CorruptTraceError(source.display, f"{what} ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise CorruptTraceError(source.display, f"text is not UTF-8 ({exc.reason})") from exc
    return meta, args


def _no_events(source: Source, top: dict[str, msgspec.Raw]) -> NoReturn:
    hint = ""
    if "nodes" in top:
        hint = "; it looks like a PyTorch execution trace (Chakra ET), not a profiler trace"
    keys = ", ".join(sorted(top)[:8])
    raise UnsupportedFormatError(
        source.display, f"JSON object without 'traceEvents' (keys: {keys}){hint}"
    )


def _write_events(
    events: Any, events_file: BinaryIO, display: str
) -> kineto_events.ArgsText:
    """Write the events text unchanged; return each event's raw ``args`` text.

    The write (no GIL held) runs in a thread while msgspec slices out the ``args``."""
    with ThreadPoolExecutor(1) as pool:
        written = pool.submit(events_file.write, events)
        args = kineto_events.raw_args(events, display)
        written.result()
    return args


def _whole_number(value: Any) -> int | None:
    """A non-negative int from an int (not a bool), a finite float or an ASCII digit
    string; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        return int(text) if text.isascii() and text.isdigit() else None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, float) and math.isfinite(value) and value >= 0:
        return int(value)
    return None


_BASE_TIME_KEY = "baseTimeNanoseconds"


def _base_time_ns(meta: dict[str, Any], display: str | None = None) -> int:
    """``baseTimeNanoseconds`` (0 when absent or null). With ``display``, a value that
    is not a whole number of ns in [0, 2**63) is an error naming the file."""
    value = meta.get(_BASE_TIME_KEY)
    if value is None:
        return 0
    number = _whole_number(value)
    if isinstance(value, float) and not value.is_integer():
        number = None
    if number is None or number >= 2**63:
        if display is None:
            return 0
        raise CorruptTraceError(
            display, f"{_BASE_TIME_KEY} {str(value)[:40]!s} is not a whole number of ns "
            "between 0 and 2**63 - 1"
        )
    return number


_MAX_RANK = 2**31 - 1
"""Ranks are int32 in the store."""


def _rank_of(meta: dict[str, Any], source: Source) -> tuple[int | None, str | None]:
    dist = meta.get("distributedInfo")
    if isinstance(dist, dict):
        rank = dist.get("rank")
        if not isinstance(rank, float) and (number := _whole_number(rank)) is not None:
            if number <= _MAX_RANK:
                return number, "distributedInfo"
            _warn_rank(source, f"distributedInfo.rank {number}")
    match = _RANK_IN_NAME.search(source.file_name)
    if match and int(match.group(1)) > _MAX_RANK:
        _warn_rank(source, f"rank {match.group(1)} in the file name")
    elif match:
        warnings.warn(
            f"{source.display}: no distributedInfo.rank; rank {match.group(1)} taken from "
            "the file name",
            RankInferredWarning,
            stacklevel=2,
        )
        return int(match.group(1)), "file name"
    return None, None


def _warn_rank(source: Source, what: str) -> None:
    warnings.warn(f"{source.display}: {what} is past the largest rank ({_MAX_RANK}); "
                  "ignored", DataQualityWarning, stacklevel=3)


def _world_size(meta: dict[str, Any]) -> int | None:
    dist = meta.get("distributedInfo")
    world = dist.get("world_size") if isinstance(dist, dict) else None
    if isinstance(world, int) and not isinstance(world, bool) and 0 < world <= _MAX_RANK + 1:
        return world
    return None


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


def _metadata_table(
    meta: dict[str, Any], source: Source, chrome_meta: str, notes: list[Note]
) -> pa.Table:
    """Top-level keys as JSON, every Chrome ``M`` event (names, labels, sort indices) and
    the data-quality notes (what was dropped)."""
    keys = ["source_file", *meta.keys(), "chrome_metadata_events"]
    values = [json.dumps(source.display), *(json.dumps(v) for v in meta.values()), chrome_meta]
    if notes:
        keys.append(DATA_QUALITY_KEY)
        values.append(json.dumps(notes_json(notes)))
    return pa.table({"key": pa.array(keys, pa.string()), "value": pa.array(values, pa.string())})
