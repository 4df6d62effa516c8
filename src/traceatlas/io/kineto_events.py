"""Kineto ``traceEvents`` text -> Arrow: times exact to the ns, ``args`` as written.

Part of the Kineto reader (``kineto.py``). DuckDB's JSON reader (C++, multi-threaded)
parses the staged events array. ``ts`` and ``dur`` (us) are read as ``DECIMAL(38,3)``
straight from the number's digits (numbers written as strings too), so
``ns = us * 1000`` is integer arithmetic, exact wherever the event lies in the file; a
fourth decimal digit and beyond (below the ns) is rounded half away from zero. Nothing
in the text is edited.

``args`` is kept as the source text of each event's ``args`` value, byte for byte:
DuckDB re-prints the numbers of a JSON value (``1.000000`` -> ``1.0``), so msgspec
slices the raw values out of the array instead (``raw_args``); DuckDB still pulls the
typed fields analyses need (correlation, stream, ...) out of its own parse.

Bad values are counted, dropped and reported, never kept: an event whose ``ts`` or
``dur`` is not a number (or a numeric string) or is out of the int64 ns range, whose
key appears twice, or an array item that is not an object.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import CorruptTraceError
from traceatlas.io import time_outliers
from traceatlas.io.quality import Note, report
from traceatlas.model.sqltext import file_list

ARG_FIELDS: dict[str, str] = {
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
"""``args`` fields pulled out as typed columns (struct column ``a``)."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MAX_OBJECT = 16 * 1024 * 1024

_COLUMNS = (
    "{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', "
    "id: 'VARCHAR', s: 'VARCHAR', ts: 'DECIMAL(38,3)', dur: 'DECIMAL(38,3)', args: 'JSON'}"
)

_EVENTS_SQL = """
SELECT ph, cat, name, coalesce(pid, '') AS pid, coalesce(tid, '') AS tid, id, s AS scope,
       ts AS ts_us, dur AS dur_us, args IS NOT NULL AS has_args,
       CASE WHEN ph IN ('X', 'M') THEN {arg_value} END AS a
FROM read_json({path}, format = 'array', maximum_object_size = {max_object},
               ignore_errors = {tolerant}, columns = {columns})
"""
"""``ts``/``dur`` come back as DECIMAL(38,3) us, i.e. 128-bit integers of ns (see ``_ns``).

``a`` (the ``ARG_FIELDS`` of X and M events) is read in one of two ways. Typed: the
reader parses ``args`` straight into the struct (one parse; ~25% less CPU for the whole
read), but stops with a "JSON transform error" on any field it cannot convert (a string
``correlation``, ``args`` that is not an object), in any event. As JSON: the reader keeps
``args`` as JSON and ``json_transform`` re-parses it, leaving unconvertible fields null.
Where the typed read succeeds both give the same table (tested on every real trace); the
typed read runs first and the JSON read is the fallback (``load_events``)."""

TYPED_ARGS = True
"""Try the typed ``args`` read first (False: JSON read only; the tests' oracle)."""

_SHAPE_SQL = """
SELECT json_type(json) = 'OBJECT' AS is_object,
       coalesce(json_type(json) = 'OBJECT'
                AND len(json_keys(json)) > len(list_distinct(json_keys(json))), false) AS dup,
       coalesce(json_type(json, '$.ts') NOT IN ('NULL'), false) AS has_ts,
       coalesce(json_type(json, '$.dur') NOT IN ('NULL'), false) AS has_dur
FROM read_json_objects({path}, format = 'array', maximum_object_size = {max_object})
"""
"""Per array item (tolerant pass only): is it an object, does a key repeat, does it hold
a non-null ``ts`` / ``dur`` (which the typed pass turned into NULL when unreadable)."""


class _Args(msgspec.Struct, gc=False):
    args: msgspec.Raw = msgspec.Raw(b"")


_ITEMS_DECODER: msgspec.json.Decoder[list[Any]] = msgspec.json.Decoder(
    list[_Args | int | float | str | bool | list[msgspec.Raw] | None]
)
"""Array items: objects keep only their raw ``args``; other items are kept to be skipped."""


_CHUNK_ROWS = 1 << 16


class ArgsText:
    """Every array item's ``args`` source text (null when absent, JSON null, or the item
    is not an object), in chunks taken front to back; a chunk is released once taken."""

    def __init__(self, chunks: list[pa.StringArray]) -> None:
        self._chunks = collections.deque(chunks)
        self.total = sum(len(chunk) for chunk in chunks)

    def __len__(self) -> int:
        return self.total

    def take(self, n: int) -> pa.StringArray:
        """The next ``n`` items."""
        parts: list[pa.StringArray] = []
        while n:
            if not self._chunks:
                raise RuntimeError("DuckDB returned more events than the array holds")
            head = self._chunks[0]
            if len(head) <= n:
                parts.append(self._chunks.popleft())
                n -= len(head)
            else:
                parts.append(head.slice(0, n))
                self._chunks[0] = head.slice(n)
                n = 0
        if len(parts) == 1:
            return parts[0]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.string())

    def remaining(self) -> int:
        """Items not taken yet."""
        return sum(len(chunk) for chunk in self._chunks)


def raw_args(events: Any, display: str) -> ArgsText:
    """Each item's ``args`` text as written, from the raw ``traceEvents`` array text."""
    items = _ITEMS_DECODER.decode(events)
    empty = msgspec.Raw(b"")
    raws = [item.args if isinstance(item, _Args) else empty for item in items]
    del items
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    chunks: list[pa.StringArray] = []
    for start in range(0, len(raws), _CHUNK_ROWS):
        chunks.extend(_chunks(raws[start:start + _CHUNK_ROWS],
                              lengths[start:start + _CHUNK_ROWS], display))
    return ArgsText(chunks)


def _chunks(raws: list[msgspec.Raw], lengths: Any, display: str) -> list[pa.StringArray]:
    """One Arrow string array (int32 offsets: split while over 2 GiB) for ``raws``."""
    if int(lengths.sum()) >= 2**31:
        if len(raws) == 1:
            raise CorruptTraceError(display, "an event's 'args' is larger than 2 GiB")
        half = len(raws) // 2
        return (_chunks(raws[:half], lengths[:half], display)
                + _chunks(raws[half:], lengths[half:], display))
    data = np.frombuffer(b"".join(raws), dtype=np.uint8)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    valid = lengths > 0
    four = np.flatnonzero(lengths == 4)
    if len(four):
        text = data[offsets[four][:, None] + np.arange(4)]
        valid[four[(text == np.frombuffer(b"null", np.uint8)).all(axis=1)]] = False
    return [pa.StringArray.from_buffers(
        len(lengths), pa.py_buffer(offsets), pa.py_buffer(data),
        pa.py_buffer(np.packbits(valid, bitorder="little")),
        null_count=int(len(valid) - np.count_nonzero(valid)),
    )]


@dataclass
class _Dropped:
    """Counts of events dropped as unreadable, by reason."""

    out_of_range: int = 0
    no_time: int = 0
    not_object: int = 0
    duplicate_key: int = 0

    def notes(self, display: str) -> list[Note]:
        """One note per reason with a count (none when nothing was dropped)."""
        tables = ("intervals", "instants", "counters", "flows")
        problems = [
            (self.out_of_range, "whose 'ts' or 'dur' is not a number or lies outside the "
             "int64 ns range"),
            (self.no_time, "without 'ts', nothing to place on a timeline"),
            (self.duplicate_key, "with a key written twice"),
            (self.not_object, "that are not JSON objects"),
        ]
        return [
            Note(display, "traceEvents", f"had {count} event(s) {why}; dropped", count,
                 tables=tables)
            for count, why in problems if count
        ]


def _sql(path: str, *, tolerant: bool, typed_args: bool = False) -> str:
    if typed_args:
        struct = "STRUCT(" + ", ".join(
            '"' + key.replace('"', '""') + f'" {kind}' for key, kind in ARG_FIELDS.items()
        ) + ")"
        columns = _COLUMNS.replace("args: 'JSON'", "args: '" + struct.replace("'", "''") + "'")
        arg_value = "args"
    else:
        columns = _COLUMNS
        arg_value = ("json_transform(args, '" + json.dumps(ARG_FIELDS).replace("'", "''")
                     + "')")
    return _EVENTS_SQL.format(
        path=file_list([path]),
        columns=columns,
        arg_value=arg_value,
        max_object=_MAX_OBJECT,
        tolerant="true" if tolerant else "false",
    )


def _ns(us: pa.Array) -> tuple[Any, Any, Any]:
    """(values, present, fits) of a DECIMAL(38,3) us column: its 128-bit unscaled
    integers are ns; ``values`` holds the low 64 bits, exact where ``fits`` (the value
    lies in int64); ``present`` is False where the column is null."""
    if us.type != pa.decimal128(38, 3):
        raise TypeError(f"expected decimal128(38, 3) from DuckDB, got {us.type}")
    words = np.frombuffer(us.buffers()[1], dtype=np.int64).reshape(-1, 2)
    words = words[us.offset: us.offset + len(us)]
    low, high = words[:, 0], words[:, 1]
    present = us.is_valid().to_numpy(zero_copy_only=False)
    return low, present, present & (high == (low >> 63))


def _times(batch: pa.RecordBatch, base_ns: int) -> tuple[pa.Array, pa.Array, Any]:
    """``ts_ns`` (``base_ns`` added), ``dur_ns`` and the rows whose present ``ts`` or
    ``dur`` does not fit int64 ns (an X event's end included)."""
    ts, has_ts, ts_ok = _ns(batch["ts_us"])
    dur, has_dur, dur_ok = _ns(batch["dur_us"])
    ts_ok &= (ts >= _INT64_MIN - min(base_ns, 0)) & (ts <= _INT64_MAX - max(base_ns, 0))
    ts_ns = np.where(ts_ok, ts, 0) + base_ns
    is_x = pc.fill_null(pc.equal(batch["ph"], "X"), False).to_numpy(zero_copy_only=False)
    room = _INT64_MAX - np.maximum(ts_ns, 0)  # never overflows
    end_over = is_x & ts_ok & dur_ok & (np.maximum(np.where(dur_ok, dur, 0), 0) > room)
    bad = (has_ts & ~ts_ok) | (has_dur & ~dur_ok) | end_over
    return (
        pa.array(ts_ns, pa.int64(), mask=~ts_ok),
        pa.array(np.where(dur_ok, dur, 0), pa.int64(), mask=~dur_ok),
        bad,
    )


def _is_value_error(exc: duckdb.Error) -> bool:
    """DuckDB could parse the JSON but not convert a value (e.g. ``"ts": "abc"``)."""
    return "JSON transform error" in str(exc)


def load_events(
    con: duckdb.DuckDBPyConnection, path: str, base_ns: int, args: ArgsText,
    display: str, notes: list[Note],
) -> tuple[pa.Table, pa.Table]:
    """Parse the staged ``traceEvents`` array at ``path`` (an empty one too); return
    (complete events, all other events), with ``ts_ns`` (``base_ns`` added) and
    ``dur_ns`` in integer ns and ``args`` taken from ``args`` (see ``raw_args``).

    A first pass converts strictly; only when a value cannot be converted does a second,
    tolerant pass run, which also classifies every item to count what it drops. Dropped
    events are reported (``DataQualityWarning``) and added to ``notes``.
    """
    con.execute("SET preserve_insertion_order = true")
    tables = None
    dropped = _Dropped()
    if TYPED_ARGS:
        try:
            tables = _scan(con, _sql(path, tolerant=False, typed_args=True), base_ns, args,
                           None, dropped)
        except duckdb.InvalidInputException as exc:
            if not _is_value_error(exc):
                raise
            # An ``args`` field (or a time) the typed read cannot convert: read again
            # with ``args`` as JSON. The failed pass took part of ``args``: slice them
            # again from the staged text.
            args = _reslice(path, display)
            dropped = _Dropped()
    try:
        if tables is None:
            tables = _scan(con, _sql(path, tolerant=False), base_ns, args, None, dropped)
    except duckdb.InvalidInputException as exc:
        if not _is_value_error(exc):
            raise
        dropped = _Dropped()
        shape = con.sql(_SHAPE_SQL.format(path=file_list([path]), max_object=_MAX_OBJECT))
        # The strict pass took (and released) part of ``args``: slice them again from
        # the staged text (this path runs only for files with unreadable values).
        args = _reslice(path, display)
        tables = _scan(con, _sql(path, tolerant=True), base_ns, args,
                       shape.to_arrow_table(), dropped)
    for note in dropped.notes(display):
        report(notes, note, stacklevel=3)
    return _set_aside(*tables, base_ns, display, notes)


def _reslice(path: str, display: str) -> ArgsText:
    """Every event's ``args`` text again, from the staged events file."""
    with open(path, "rb") as staged:
        return raw_args(staged.read(), display)


def _set_aside(
    complete: pa.Table, rest: pa.Table, base_ns: int, display: str, notes: list[Note]
) -> tuple[pa.Table, pa.Table]:
    """Drop the events whose times cannot be right (``time_outliers``: at ts 0 or far
    outside the run), one warning and note per reason with counts by kind."""
    starts = complete["ts_ns"].to_numpy()
    ends = starts + np.maximum(complete["dur_ns"].to_numpy(), 0)
    timed = ~pc.fill_null(pc.is_in(rest["ph"], value_set=pa.array(
        time_outliers.UNTIMED_PHASES)), False).to_numpy(zero_copy_only=False)
    rest_ts = pc.drop_null(rest["ts_ns"].filter(pa.array(timed))).to_numpy()
    window = time_outliers.run_window([starts, rest_ts], zero_ns=base_ns)
    if window is None:
        return complete, rest
    zero_x, far_x = window.outside(starts, ends)
    rest_starts = pc.fill_null(rest["ts_ns"], window.median_ns).to_numpy()
    zero_r, far_r = (side & timed for side in window.outside(rest_starts))
    if not (zero_x.any() or far_x.any() or zero_r.any() or far_r.any()):
        return complete, rest
    is_flow = pc.fill_null(pc.is_in(rest["ph"], value_set=pa.array(["s", "t", "f"])),
                           False).to_numpy(zero_copy_only=False)
    away = time_outliers.describe_ns(abs(window.median_ns - base_ns))
    reasons = (
        (zero_x, zero_r, f"at ts 0, {away} away from the rest of the run"),
        (far_x, far_r, "starting or ending more than "
         f"{time_outliers.describe_ns(window.far_ns)} from the run's median time"),
    )
    for in_x, in_rest, where in reasons:
        counts = {"complete": int(np.count_nonzero(in_x)),
                  "flow": int(np.count_nonzero(in_rest & is_flow)),
                  "other": int(np.count_nonzero(in_rest & ~is_flow))}
        total = sum(counts.values())
        if total:
            kinds = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
            report(notes, Note(
                display, "traceEvents", f"had {total} event(s) {where} ({kinds}); set "
                "aside (spans, models and findings use the other events)", total,
                tables=("intervals", "instants", "counters", "flows"),
            ), stacklevel=4)
    return (complete.filter(pa.array(~(zero_x | far_x))),
            rest.filter(pa.array(~(zero_r | far_r))))


_KEEP = ["ph", "cat", "name", "pid", "tid", "id", "scope", "ts_ns", "dur_ns", "args", "a"]


def _scan(
    con: duckdb.DuckDBPyConnection, sql: str, base_ns: int, args: ArgsText,
    shape: pa.Table | None, dropped: _Dropped,
) -> tuple[pa.Table, pa.Table]:
    """Stream the parse in record batches, split each into complete events (ph X with
    ts and dur) and the rest as it arrives, so the full event table never exists
    alongside its complete-event copy. DuckDB returns rows in file order (insertion
    order is preserved), which lines them up with ``args`` and ``shape``."""
    complete: list[pa.RecordBatch] = []
    rest: list[pa.RecordBatch] = []
    offset = 0
    schema: pa.Schema | None = None
    for batch in _batches(con, sql):
        n = batch.num_rows
        raw = args.take(n)
        ts_ns, dur_ns, bad = _times(batch, base_ns)
        dropped.out_of_range += int(np.count_nonzero(bad))
        if shape is not None:
            bad = _classify(shape.slice(offset, n), ts_ns, dur_ns, bad, dropped)
        no_time = _no_time(batch, ts_ns) & ~bad
        dropped.no_time += int(np.count_nonzero(no_time))
        bad |= no_time
        has_args = batch["has_args"].to_numpy(zero_copy_only=False)
        if np.any((has_args != raw.is_valid().to_numpy(zero_copy_only=False)) & ~bad):
            raise RuntimeError("events from DuckDB and msgspec are not in the same order")
        columns = {"ts_ns": ts_ns, "dur_ns": dur_ns, "args": raw}
        batch = pa.RecordBatch.from_arrays(
            [columns[c] if c in columns else batch[c] for c in _KEEP], names=_KEEP
        )
        if bad.any():
            batch = batch.filter(pa.array(~bad))
        schema = batch.schema
        is_complete = pc.fill_null(
            pc.and_(pc.equal(batch["ph"], "X"),
                    pc.and_(pc.is_valid(batch["ts_ns"]), pc.is_valid(batch["dur_ns"]))),
            False,
        )
        complete.append(batch.filter(is_complete))
        rest.append(batch.filter(pc.invert(is_complete)))
        offset += n
    if args.remaining():
        raise RuntimeError(f"DuckDB returned {offset} events, the array holds {len(args)}")
    if schema is None:
        schema = _empty_schema(con, sql)
    return (
        pa.Table.from_batches(complete, schema=schema),
        pa.Table.from_batches(rest, schema=schema),
    )


def _no_time(batch: pa.RecordBatch, ts_ns: pa.Array) -> Any:
    """Events without ``ts`` (absent or null) that need one: every phase but metadata
    (``M``) and counters (``C``, which ``kineto_tables`` counts and skips itself)."""
    timed = pc.and_(pc.is_valid(batch["ph"]),
                    pc.invert(pc.is_in(batch["ph"], value_set=pa.array(["M", "C"]))))
    return pc.and_(pc.fill_null(timed, False), pc.is_null(ts_ns)).to_numpy(
        zero_copy_only=False)


def _batches(con: duckdb.DuckDBPyConnection, sql: str) -> Iterator[pa.RecordBatch]:
    """The query's record batches. An error DuckDB hits after the first batch comes
    through Arrow's stream interface as OSError; it is re-raised as DuckDB's own."""
    reader = con.sql(sql).to_arrow_reader(1 << 16)
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except OSError as exc:
            raise duckdb.InvalidInputException(str(exc)) from exc
        yield batch


def _classify(
    shape: pa.Table, ts_ns: pa.Array, dur_ns: pa.Array, bad: Any, dropped: _Dropped
) -> Any:
    """Tolerant pass: add to ``bad`` (and count) the items that are not objects, repeat
    a key, or hold a ``ts``/``dur`` DuckDB could not convert (now null)."""
    def col(name: str) -> Any:
        return pc.fill_null(shape[name], False).to_numpy(zero_copy_only=False)

    not_object = ~col("is_object")
    dup = ~not_object & col("dup")
    unreadable = (col("has_ts") & ~pc.is_valid(ts_ns).to_numpy(zero_copy_only=False)) | (
        col("has_dur") & ~pc.is_valid(dur_ns).to_numpy(zero_copy_only=False))
    unreadable &= ~not_object & ~dup & ~bad
    dropped.not_object += int(np.count_nonzero(not_object))
    dropped.duplicate_key += int(np.count_nonzero(dup))
    dropped.out_of_range += int(np.count_nonzero(unreadable))
    return bad | not_object | dup | unreadable


def _empty_schema(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Schema:
    duck = con.sql(sql).limit(0).to_arrow_table().schema
    types = {"ts_ns": pa.int64(), "dur_ns": pa.int64(), "args": pa.string()}
    return pa.schema([pa.field(c, types[c]) if c in types else duck.field(c) for c in _KEEP])
