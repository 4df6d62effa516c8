"""Chrome Trace Event JSON exporter (opens in ui.perfetto.dev and chrome://tracing).

What is written, per rank (``pid`` = rank, ``process_name`` "rank N"):

- intervals -> ``X`` events, ``ts``/``dur`` in microseconds with 3 decimals written from
  integers (exact to the ns). Times are relative to ``baseTimeNanoseconds`` (the earliest
  time exported) when they are epoch-sized, as Kineto writes them, so a reader's double
  parse stays exact; small (relative) times are written as they are.
- ``tid`` per track (``thread_name`` = track name). A track whose intervals are not
  properly nested (overlapping device kernels) is split into rows by the lowest free row
  (greedy interval colouring), each row its own ``tid`` named "<track> (row k)", because
  Perfetto needs proper nesting per thread. ``tid = track_id + 1 + row * (max track_id
  + 2)``.
- ``cat`` is the source category when the Kineto reader maps it back to the same
  canonical category, else the canonical name (identity mappings in ``KINETO_CATEGORIES``);
  ``args`` is the stored args object plus the columns the Kineto reader takes from args
  (``correlation``, ``External id``, ``device``, ``stream``, ...) when args lacks them.
- instants -> ``i`` events (scope kept; the source phase letter is not), counters -> ``C``
  events (``args = {name: value}``), flows -> ``s``/``f`` pairs (``bp: "e"``).
- top level: ``traceatlas`` (manifest summary), ``baseTimeNanoseconds`` when used, and
  ``distributedInfo {rank, world_size}`` (plus the rank's other source metadata keys)
  when the file holds one rank.

``critical_path="true"`` (``-p critical_path=true [--step N]``): the events on the critical
path get ``args.on_critical_path`` and flow arrows (cat ``critical_path``) join consecutive
path segments (``export/critical_marks.py``).

Messages have no Chrome equivalent and are not written (a DataQualityWarning says how
many). Tables are streamed in record batches; files are written to a temporary name and
renamed, so nothing is left behind on error. ``split_ranks`` (or ``out`` an existing
directory) writes ``rank-<r>.json.gz`` per rank, which re-ingests into the same ranks.
"""

from __future__ import annotations

import gzip
import itertools
import os
import shutil
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceatlas import tempfiles
from traceatlas._version import __version__
from traceatlas.errors import DataQualityWarning, InputError
from traceatlas.model.categories import KINETO_CATEGORIES
from traceatlas.ops.nesting import free_row_depth, sort_for_nesting, stack_depth
from traceatlas.store.layout import part_path

if TYPE_CHECKING:
    from traceatlas.export.critical_marks import CriticalMarks
    from traceatlas.model.trace import Trace

IntArray = npt.NDArray[np.int64]
BATCH_ROWS = 65_536
"""Rows per record batch read from a rank's Parquet part."""
GZIP_LEVEL = 3
EXACT_DOUBLE_US = 2**40 * 1000
"""Below this many ns, a time in us with 3 decimals survives a double parse exactly."""
DEVICE_KINDS = frozenset({"gpu_stream", "device"})

ARG_KEYS: Mapping[str, str] = {
    "correlation": "correlation",
    "external_id": "External id",
    "device": "device",
    "stream": "stream",
    "bytes": "bytes",
    "collective": "Collective name",
    "process_group": "Process Group Name",
    "group_ranks": "Process Group Ranks",
    "in_msg_nelems": "In msg nelems",
    "out_msg_nelems": "Out msg nelems",
    "dtype": "dtype",
    "grid": "grid",
    "block": "block",
}
"""Interval column -> the Kineto ``args`` key the Kineto reader takes it from."""

_SKIP_META = frozenset({"source_file", "chrome_metadata_events", "baseTimeNanoseconds",
                        "traceEvents", "traceatlas", "distributedInfo"})
_ENCODE = msgspec.json.encode
_DECODE = msgspec.json.decode


def micros(ns: int) -> str:
    """Integer ns -> microseconds text with 3 decimals (``-1`` -> ``-0.001``), exact."""
    sign, a = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{a // 1000}.{a % 1000:03d}"


def export_category(source_category: str | None, category: str) -> str:
    """The ``cat`` that the Kineto reader maps back to ``category``."""
    if source_category is not None:
        mapped = KINETO_CATEGORIES.get(source_category, "other")
        if mapped == category or (category == "comm_kernel" and mapped == "kernel") or (
                category == "step" and mapped in ("annotation", "cpu_op")):
            return source_category
    if category == "step":  # the reader makes ProfilerStep#N annotations steps
        return "user_annotation"
    return category


class ChromeExporter:
    """Chrome Trace Event JSON (``.json``, or gzip with ``.json.gz``)."""

    name = "chrome"
    description = "Chrome Trace Event JSON for Perfetto / chrome://tracing (.json, .json.gz)"
    params: Mapping[str, tuple[str, ...]] = {"critical_path": ("true", "false")}

    def write(self, trace: Trace, out: Path, *, split_ranks: bool | None = None,
              critical_path: str = "false", step: int | None = None) -> list[Path]:
        """Write ``trace`` to the file ``out``, or one file per rank into the directory
        ``out`` (``split_ranks``; the default splits when ``out`` is a directory).
        ``critical_path="true"``: the path of the trace (or of ``step``) marked
        (``export/critical_marks.py``)."""
        import polars as pl

        marks = None
        if critical_path == "true":
            from traceatlas.export.critical_marks import critical_marks

            marks = critical_marks(trace, step)
        elif step is not None:
            raise InputError("--step", "export uses --step only with -p critical_path=true "
                             "(use traceatlas filter --step to cut a step out)")

        out = Path(out)
        split = out.is_dir() if split_ranks is None else split_ranks
        base = _time_base(trace)
        messages = int(trace.messages.select(pl.len()).collect().item())
        if messages:
            warnings.warn(f"{trace.path}: {messages} message(s) not exported (Chrome JSON "
                          "has no point-to-point message events)", DataQualityWarning,
                          stacklevel=2)
        if split:
            return _write_split(trace, out, base, marks)
        target = tempfiles.replaceable_file(
            out, hint="use --split-ranks to write one file per rank")
        _write_atomic(trace, target, trace.ranks, base, marks)
        return [out]


# -- files -------------------------------------------------------------------------------


def _write_split(trace: Trace, out: Path, base: int,
                 marks: CriticalMarks | None = None) -> list[Path]:
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory (--split-ranks writes a directory)")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    done: list[tuple[Path, Path]] = []
    try:
        for rank in trace.ranks:
            final = out / f"rank-{rank}.json.gz"
            tmp = _tmp_name(final)
            done.append((tmp, final))
            _write_file(trace, tmp, final.name, [rank], base, marks)
        for tmp, final in done:
            os.replace(tmp, final)
    except BaseException:
        for tmp, _ in done:
            tmp.unlink(missing_ok=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    return [final for _, final in done]


def _write_atomic(trace: Trace, out: Path, ranks: list[int], base: int,
                  marks: CriticalMarks | None = None) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(out)
    try:
        _write_file(trace, tmp, out.name, ranks, base, marks)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def _tmp_name(final: Path) -> Path:
    tempfiles.sweep_siblings(final.parent, final.name)  # debris of a killed export
    return tempfiles.sibling(final, "tmp")


def _write_file(trace: Trace, tmp: Path, name: str, ranks: list[int], base: int,
                marks: CriticalMarks | None = None) -> None:
    """Write the JSON text of ``ranks`` to ``tmp`` (gzip when ``name`` ends in .gz)."""
    opener: Any = (lambda p: gzip.GzipFile(p, "wb", compresslevel=GZIP_LEVEL, mtime=0)) \
        if name.endswith(".gz") else (lambda p: open(p, "wb"))  # noqa: SIM115
    with opener(tmp) as fh:
        top = _top_level(trace, ranks, base)
        fh.write(b"{" + b"".join(_ENCODE(k) + b":" + _ENCODE(v) + b",\n"
                                 for k, v in top.items()) + b'"traceEvents":[\n')
        sink = _Sink(fh)
        for rank in ranks:
            _write_rank(trace, rank, base, sink, marks)
        fh.write(b"\n]}\n")


class _Sink:
    """Writes event texts separated by commas, a batch at a time."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.first = True

    def write(self, events: list[str]) -> None:
        if not events:
            return
        text = ",\n".join(events)
        self.fh.write((text if self.first else ",\n" + text).encode())
        self.first = False

    def write_text(self, text: pa.Array) -> None:
        """Write an Arrow string array whose values each start with ``,\\n``."""
        if len(text) == 0:
            return
        offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[
            text.offset:text.offset + len(text) + 1]
        data = memoryview(text.buffers()[2])[int(offsets[0]):int(offsets[-1])]
        self.fh.write(data[2:] if self.first else data)
        self.first = False


def _top_level(trace: Trace, ranks: list[int], base: int) -> dict[str, Any]:
    manifest = trace.manifest
    kept = set(ranks)
    summary: dict[str, Any] = {
        "exporter": "traceatlas chrome", "traceatlas_version": __version__,
        "store": str(trace.path.resolve()), "source_format": manifest.get("source_format"),
        "ranks": ranks, "store_ranks": trace.ranks, "created_utc": manifest.get("created_utc"),
        "clock": {k: v for k, v in (manifest.get("clock") or {}).items() if int(k) in kept},
        "clock_alignment": manifest.get("clock_alignment"),
        "sources": [s for s in manifest.get("sources", []) if s.get("rank") in kept],
        "time_base_ns": base,
        "tids": "track_id + 1 + row * (max track_id + 2); rows split non-nested tracks",
    }
    for key in ("filtered_from", "filter"):
        if key in manifest:
            summary[key] = manifest[key]
    top: dict[str, Any] = {"traceatlas": summary}
    if len(ranks) == 1:
        meta = _rank_metadata(trace, ranks[0])
        dist = meta.pop("distributedInfo", None)
        dist = dict(dist) if isinstance(dist, dict) else {}
        world = dist.get("world_size") or next(
            (s.get("world_size") for s in summary["sources"] if s.get("world_size")), None)
        dist.update(rank=ranks[0], world_size=world or max(trace.ranks) + 1)
        top.update(meta)
        top["distributedInfo"] = dist
    if base:
        top["baseTimeNanoseconds"] = base
    return top


def _rank_metadata(trace: Trace, rank: int) -> dict[str, Any]:
    """The rank's source metadata keys (as decoded JSON), except those this file sets."""
    path = part_path(trace.path, "metadata", rank)
    if not path.is_file():
        return {}
    rows = pq.read_table(path, columns=["key", "value"]).to_pylist()
    out: dict[str, Any] = {}
    for row in rows:
        key, value = row["key"], row["value"]
        if key in _SKIP_META or key in out:
            continue
        try:
            out[key] = _DECODE(value) if value is not None else None
        except msgspec.DecodeError:
            out[key] = value
    return out


def _time_base(trace: Trace) -> int:
    """``baseTimeNanoseconds`` to write: the earliest time when times are epoch-sized."""
    import polars as pl

    lows, highs = [], []
    for table, cols in (("intervals", ("start_ns", "end_ns")), ("instants", ("ts_ns",)),
                        ("counters", ("ts_ns",)), ("flows", ("src_ts_ns", "dst_ts_ns"))):
        row = trace.scan(table).select(
            pl.min_horizontal([pl.col(c).min() for c in cols]).alias("lo"),
            pl.max_horizontal([pl.col(c).max() for c in cols]).alias("hi"),
        ).collect().row(0)
        lows += [row[0]] if row[0] is not None else []
        highs += [row[1]] if row[1] is not None else []
    if not lows:
        return 0
    lo, hi = int(min(lows)), int(max(highs))
    return lo if lo > 0 and hi >= EXACT_DOUBLE_US else 0


# -- events of one rank ------------------------------------------------------------------


def _batches(trace: Trace, table: str, rank: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    path = part_path(trace.path, table, rank)
    if not path.is_file():
        return
    parquet = pq.ParquetFile(path)
    present = [c for c in columns if c in parquet.schema_arrow.names]
    yield from parquet.iter_batches(batch_size=BATCH_ROWS, columns=present)


def _write_rank(trace: Trace, rank: int, base: int, sink: _Sink,
                marks: CriticalMarks | None = None) -> None:
    tracks = _tracks(trace, rank)
    lanes = _Lanes.of(trace, rank, tracks)
    sink.write(_metadata_events(rank, tracks, lanes))
    _write_intervals(trace, rank, base, lanes, sink, marks)
    _write_instants(trace, rank, base, lanes, sink)
    _write_counters(trace, rank, base, lanes, sink)
    _write_flows(trace, rank, base, lanes, sink)
    if marks is not None:
        sink.write(marks.flow_events(rank, lanes.tids_at, base))


def _tracks(trace: Trace, rank: int) -> dict[int, tuple[str, str]]:
    """track_id -> (kind, name)."""
    out: dict[int, tuple[str, str]] = {}
    for batch in _batches(trace, "tracks", rank, ["track_id", "kind", "name"]):
        for tid, kind, name in zip(*(batch.column(i).to_pylist() for i in range(3)),
                                   strict=True):
            out[int(tid)] = (str(kind), name or f"track {tid}")
    return out


class _Lanes:
    """Row (lane) of every interval of a rank, and the tids they give."""

    def __init__(self, lane: IntArray, stride: int, track: IntArray | None = None,
                 start: IntArray | None = None) -> None:
        self.lane = lane          # per interval row, in file order
        self.stride = stride
        split = np.flatnonzero(lane > 0)
        tracks = track[split] if track is not None else np.zeros(0, np.int64)
        # distinct (track_id, lane) with lane > 0
        self.pairs = sorted({(int(t), int(k)) for t, k in zip(tracks, lane[split], strict=True)})
        self.null_track = track is not None and bool((track == -1).any())
        # per split track: sorted distinct starts and the (lowest) lane starting there
        self.starts: dict[int, tuple[IntArray, IntArray]] = {}
        if start is not None:
            for t in np.unique(tracks).tolist():
                rows = split[tracks == t]
                order = np.lexsort((lane[rows], start[rows]))
                keys, first = np.unique(start[rows][order], return_index=True)
                self.starts[t] = (keys, lane[rows][order][first])

    @classmethod
    def of(cls, trace: Trace, rank: int, tracks: Mapping[int, tuple[str, str]]) -> _Lanes:
        cols = ["track_id", "start_ns", "end_ns"]
        parts = list(_batches(trace, "intervals", rank, cols))
        stride = max([*tracks, -1]) + 2
        if not parts or sum(p.num_rows for p in parts) == 0:
            return cls(np.zeros(0, np.int64), stride)
        table = pa.Table.from_batches(parts)
        track = table.column("track_id").fill_null(-1).to_numpy().astype(np.int64)
        start = table.column("start_ns").to_numpy().astype(np.int64)
        end = table.column("end_ns").to_numpy().astype(np.int64)
        lane = track_lanes(track, start, end)
        return cls(lane, max(stride, int(track.max()) + 2), track, start)

    def tid(self, track: int, lane: int = 0) -> int:
        return track + 1 + lane * self.stride

    def tids_at(self, track: IntArray, ts: IntArray) -> IntArray:
        """tid of the row holding an interval that starts at ``ts`` on ``track`` (row 0
        when none does): where a flow endpoint binds."""
        lane = np.zeros(len(track), dtype=np.int64)
        for t, (keys, lanes) in self.starts.items():
            rows = np.flatnonzero(track == t)
            idx = np.clip(np.searchsorted(keys, ts[rows]), 0, len(keys) - 1)
            hit = keys[idx] == ts[rows]
            lane[rows[hit]] = lanes[idx[hit]]
        out: IntArray = track + 1 + lane * self.stride
        return out


def track_lanes(track: IntArray, start: IntArray, end: IntArray) -> IntArray:
    """Row per interval: 0 on properly nested tracks; on the others the lowest free row,
    so that the intervals of each (track, row) are disjoint."""
    lane = np.zeros(len(track), dtype=np.int64)
    order = sort_for_nesting(track, start, end)
    t = track[order]
    edges = [0, *(np.flatnonzero(np.diff(t)) + 1).tolist(), len(t)]
    for lo, hi in itertools.pairwise(edges):
        idx = order[lo:hi]
        if not properly_nested(start[idx], end[idx]):
            lane[idx] = free_row_depth(start[idx], end[idx])
    return lane


def properly_nested(start: IntArray, end: IntArray) -> bool:
    """True when intervals (sorted by start, then end descending) are pairwise disjoint
    or nested: each one lies inside the last earlier interval one level up."""
    depth = stack_depth(start, end)
    for level in range(1, int(depth.max(initial=0)) + 1):
        child = np.flatnonzero(depth == level)
        parent = np.flatnonzero(depth == level - 1)
        k = np.searchsorted(parent, child) - 1
        if bool((k < 0).any()) or bool((end[child] > end[parent[k]]).any()):
            return False
    return True


def _metadata_events(rank: int, tracks: Mapping[int, tuple[str, str]],
                     lanes: _Lanes) -> list[str]:
    def meta(name: str, tid: int, args: dict[str, Any]) -> str:
        return _ENCODE({"ph": "M", "name": name, "pid": rank, "tid": tid,
                        "args": args}).decode()

    out = [meta("process_name", 0, {"name": f"rank {rank}"}),
           meta("process_sort_index", 0, {"sort_index": rank})]
    named = [(t, 0, name) for t, (_, name) in sorted(tracks.items())]
    named += [(t, k, f"{tracks.get(t, ('', f'track {t}'))[1]} (row {k})")
              for t, k in lanes.pairs]
    if lanes.null_track:
        named.append((-1, 0, "no track"))
    for t, k, name in named:
        tid = lanes.tid(t, k)
        out.append(meta("thread_name", tid, {"name": name}))
        out.append(meta("thread_sort_index", tid, {"sort_index": tid if k == 0 else
                                                  lanes.tid(t) * 1000 + k}))
    return out


def _tids(batch: pa.RecordBatch) -> IntArray:
    """Row-0 tid per row (instants and counters stay on a track's first row)."""
    track = batch.column("track_id").fill_null(-1).to_numpy(zero_copy_only=False)
    out: IntArray = track.astype(np.int64) + 1
    return out


def _write_intervals(trace: Trace, rank: int, base: int, lanes: _Lanes, sink: _Sink,
                     marks: CriticalMarks | None = None) -> None:
    """X events, built column-wise with Arrow compute (no Python work per row unless
    args lack a column's key)."""
    cols = ["track_id", "start_ns", "end_ns", "name", "category", "source_category", "args",
            *ARG_KEYS]
    offset = 0
    for batch in _batches(trace, "intervals", rank, cols):
        n = batch.num_rows
        track = batch.column("track_id").fill_null(-1).to_numpy(zero_copy_only=False)
        tid = track.astype(np.int64) + 1 + lanes.lane[offset:offset + n] * lanes.stride
        offset += n
        start = batch.column("start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        end = batch.column("end_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        args = _merged_args(batch)
        if marks is not None:
            args = marks.args(rank, offset - n, args)
        text = pc.binary_join_element_wise(
            ',\n{"ph":"X","cat":', _category_text(batch), ',"name":',
            _string_text(batch.column("name")), f',"pid":{rank},"tid":', _digits(tid),
            ',"ts":', _micros_text(start - base), ',"dur":', _micros_text(end - start),
            pc.if_else(pc.is_valid(args), pc.binary_join_element_wise(',"args":', args, ""),
                       ""),
            "}", "")
        sink.write_text(text)


def _digits(values: IntArray) -> pa.Array:
    return pc.cast(pa.array(values, pa.int64()), pa.string())


def _micros_text(ns: IntArray) -> pa.Array:
    """``micros`` over an array (exact integer arithmetic)."""
    a = np.abs(ns)
    text = pc.binary_join_element_wise(
        _digits(a // 1000), pc.utf8_lpad(_digits(a % 1000), 3, "0"), ".")
    negative = ns < 0
    if negative.any():
        text = pc.if_else(pa.array(negative), pc.binary_join_element_wise("-", text, ""), text)
    return text


def _string_text(column: pa.Array, default: str = "") -> pa.Array:
    """JSON string text per value, escaped once per distinct value."""
    if not isinstance(column, pa.DictionaryArray):
        column = pc.dictionary_encode(column)
    values = [_ENCODE(v if v is not None else default).decode()
              for v in column.dictionary.to_pylist()]
    text = pc.take(pa.array(values, pa.string()), column.indices)
    return pc.fill_null(text, _ENCODE(default).decode())


def _category_text(batch: pa.RecordBatch) -> pa.Array:
    """JSON text of ``export_category`` per row, computed once per distinct pair."""
    src = pc.fill_null(pc.cast(batch.column("source_category"), pa.string()), "\x01")
    canon = pc.fill_null(pc.cast(batch.column("category"), pa.string()), "other")
    pairs = pc.dictionary_encode(pc.binary_join_element_wise(src, canon, "\x00"))
    values = []
    for pair in pairs.dictionary.to_pylist():
        source, _, category = pair.partition("\x00")
        values.append(_ENCODE(export_category(None if source == "\x01" else source,
                                              category)).decode())
    return pc.take(pa.array(values, pa.string()), pairs.indices)


def _merged_args(batch: pa.RecordBatch) -> pa.Array:
    """Args JSON text per row, with the ``ARG_KEYS`` columns added where args lacks them."""
    n = batch.num_rows
    names = batch.schema.names
    args = batch.column("args") if "args" in names else pa.nulls(n, pa.string())
    need = np.zeros(n, dtype=bool)
    extra = []
    for col, key in ARG_KEYS.items():
        if col not in names or batch.column(col).null_count == n:
            continue
        has_key = pc.fill_null(pc.match_substring(args, f'"{key}"'), False)
        missing = pc.and_(pc.is_valid(batch.column(col)), pc.invert(has_key))
        need |= missing.to_numpy(zero_copy_only=False)
        extra.append((key, batch.column(col)))
    rows = np.flatnonzero(need)
    if len(rows) == 0:
        return args
    texts: list[str | None] = args.to_pylist()
    for i in rows.tolist():
        text = texts[i]
        obj = _DECODE(text) if text else {}
        obj = obj if isinstance(obj, dict) else {"args": obj}
        for key, column in extra:
            value = column[i].as_py()
            if value is not None and key not in obj:
                obj[key] = value
        texts[i] = _ENCODE(obj).decode()
    return pa.array(texts, pa.string())


def _write_instants(trace: Trace, rank: int, base: int, lanes: _Lanes, sink: _Sink) -> None:
    """``i`` events (scope t unless the source said p or g; no ``ts`` when it had none)."""
    cols = ["track_id", "ts_ns", "name", "source_category", "scope", "args"]
    for batch in _batches(trace, "instants", rank, cols):
        scope = batch.column("scope")
        scope = pc.if_else(pc.fill_null(pc.is_in(scope, pa.array(["p", "g"])), False),
                           scope, "t")
        src = pc.cast(batch.column("source_category"), pa.string())
        times = batch.column("ts_ns")
        ts = _micros_text(pc.fill_null(times, base).to_numpy().astype(np.int64) - base)
        args = batch.column("args")
        sink.write_text(pc.binary_join_element_wise(
            ',\n{"ph":"i","s":"', scope, '"',
            pc.if_else(pc.is_valid(src), pc.binary_join_element_wise(
                ',"cat":', _string_text(src), ""), ""),
            ',"name":', _string_text(batch.column("name")), f',"pid":{rank},"tid":',
            _digits(_tids(batch)),
            pc.if_else(pc.is_valid(times), pc.binary_join_element_wise(',"ts":', ts, ""), ""),
            pc.if_else(pc.is_valid(args), pc.binary_join_element_wise(',"args":', args, ""),
                       ""),
            "}", ""))


def _write_counters(trace: Trace, rank: int, base: int, lanes: _Lanes, sink: _Sink) -> None:
    """``C`` events, ``args = {name: value}`` (non-finite or missing values as null)."""
    for batch in _batches(trace, "counters", rank, ["track_id", "ts_ns", "name", "value"]):
        name = _string_text(batch.column("name"))
        values = batch.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
        value = pa.array([repr(v) if np.isfinite(v) else "null" for v in values.tolist()],
                         pa.string())
        ts = batch.column("ts_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        sink.write_text(pc.binary_join_element_wise(
            ',\n{"ph":"C","name":', name, f',"pid":{rank},"tid":', _digits(_tids(batch)),
            ',"ts":', _micros_text(ts - base), ',"args":{', name, ":", value, "}}", ""))


def _write_flows(trace: Trace, rank: int, base: int, lanes: _Lanes, sink: _Sink) -> None:
    """An ``s`` event per flow start and an ``f`` (``bp: "e"``) per flow end, same id."""
    cols = ["flow_id", "name", "src_track_id", "src_ts_ns", "dst_track_id", "dst_ts_ns"]
    for batch in _batches(trace, "flows", rank, cols):
        name = _string_text(batch.column("name"), "flow")
        ids = _id_text(batch.column("flow_id"))
        for side, head in (("src", ',\n{"ph":"s","id":'), ("dst", ',\n{"ph":"f","bp":"e","id":')):
            present = pc.is_valid(batch.column(f"{side}_ts_ns"))
            ts = pc.filter(batch.column(f"{side}_ts_ns"), present).to_numpy().astype(np.int64)
            track = pc.filter(batch.column(f"{side}_track_id"), present).fill_null(-1)
            tid = lanes.tids_at(track.to_numpy(zero_copy_only=False).astype(np.int64), ts)
            kept = pc.filter(name, present)
            sink.write_text(pc.binary_join_element_wise(
                head, pc.filter(ids, present), ',"cat":', kept, ',"name":', kept,
                f',"pid":{rank},"tid":', _digits(tid), ',"ts":', _micros_text(ts - base),
                "}", ""))


def _id_text(column: pa.Array) -> pa.Array:
    """Flow ids: a number when the id is plain digits (as Kineto writes), else a string."""
    if not isinstance(column, pa.DictionaryArray):
        column = pc.dictionary_encode(column)
    values = [v if v and v.isdigit() and len(v) < 19 else _ENCODE(v or "").decode()
              for v in column.dictionary.to_pylist()]
    return pc.fill_null(pc.take(pa.array(values, pa.string()), column.indices), '""')
