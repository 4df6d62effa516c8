"""PyTorch ``export_memory_timeline`` output -> one counter track per memory category.

Two layouts PyTorch writes (``torch.profiler.profile.export_memory_timeline``):

- raw (``*.raw.json.gz``; HTA's sample ``memory_timeline.raw.gz``): a JSON array of
  ``[time_ns, action, bytes, category]`` events, ``action`` 1-4 (PREEXISTING, CREATE,
  INCREMENT_VERSION, DESTROY), ``bytes`` negative for a release, ``category`` 0-7;
- curves (``*.json`` / ``*.json.gz``): ``[times_ns, sizes]``, ``sizes[i]`` the 8
  categories' bytes at ``times[i]``.

Category order (PyTorch ``_memory_profiler._CATEGORY_TO_INDEX``, HTA
``memory_analysis._CATEGORY_TO_INDEX``): Parameter, Optimizer state, Input, Temporary,
Activation, Gradient, Autograd, Unknown. Times are ns on the profiler's clock (the unix
epoch in the files seen) and are kept as they are: no unit conversion; pre-existing
allocations (time -1) are placed at the smallest positive time, as HTA and PyTorch do.
The raw events become curves exactly as HTA's ``MemoryAnalysis._process_raw_events``:
a new sample whenever the time differs from the previous event's (file order), each
category's bytes the running sum of its events. Every sample gives one counter row per
category (series ``memory timeline: <category> (bytes)``).

The file does not name its device or rank: the tracks have device -1 and the rank comes
from the file name (``rank3...``, ``..._rank-3...``) or is assigned by ingest. In a
directory, ``*.raw.gz`` files are listed when their content is a raw timeline and no other
trace is there (``directory_timelines``). msgspec validates the shape
(a clear error names the file); numpy does the sums.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from traceatlas.errors import CorruptTraceError, DataQualityWarning
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.model.schema import empty_table

CATEGORIES: tuple[str, ...] = (
    "Parameter", "Optimizer state", "Input", "Temporary", "Activation", "Gradient",
    "Autograd", "Unknown",
)
"""Category index -> name (PyTorch/HTA order)."""

_WS = rb"[ \t\r\n]*"
_RAW_HEAD = re.compile(
    rb"^\[" + _WS + rb"\[" + _WS + rb"-?\d+" + _WS + rb"," + _WS + rb"[1-4]" + _WS + rb","
    + _WS + rb"-?\d+" + _WS + rb"," + _WS + rb"[0-7]" + _WS + rb"\]" + _WS + rb"[,\]]")
"""``[[t, action 1-4, bytes, category 0-7], ...``: a raw memory timeline."""
_CURVES_HEAD = re.compile(
    rb"^\[" + _WS + rb"\[" + _WS + rb"\d{16,}" + _WS + rb"(?:," + _WS + rb"\d{16,}" + _WS
    + rb")*(?:\]" + _WS + rb"," + _WS + rb"\[" + _WS + rb"\[|,?" + _WS + rb"\d*$)")
"""``[[t0, t1, ...], [[...], ...]]`` with times of 16+ digits (epoch ns): the curves
layout. The head may end inside the times list."""
_RANK_IN_NAME = re.compile(r"(?:^|[._-])(?:rank|worker)[-_]?(\d+)(?!\d)", re.IGNORECASE)
"""``rank3.raw.gz``, ``memory_timeline_rank-3.raw.gz``, ``worker_3.json``: rank 3."""
RAW_SUFFIX = ".raw.gz"
"""The name PyTorch's raw export and HTA's sample use; a directory lists such files only
when their content is a memory timeline (``directory_timelines``)."""
_MAX_RANK = 2**31 - 1
_BOM = b"\xef\xbb\xbf"

_RAW_TYPE = list[tuple[int, int, int, int]]
_CURVES_TYPE = tuple[list[int], list[list[float]]]


class MemoryTimelineReader:
    """Reader for PyTorch ``export_memory_timeline`` JSON (raw events or curves)."""

    name = "memory-timeline"
    description = "PyTorch export_memory_timeline JSON (raw events or [times, sizes])"

    def sniff(self, head: bytes, source: Source) -> bool:
        """True for the two layouts' openings (a random JSON list does not match)."""
        text = head.removeprefix(_BOM).lstrip(b" \t\r\n")
        return bool(_RAW_HEAD.match(text) or _CURVES_HEAD.match(text))

    def read(self, source: Source, *, threads: int = 1) -> list[RankData]:
        """One rank: a counter track per category (bytes), times in ns as written."""
        data = source.read_bytes().removeprefix(_BOM)
        raw = _RAW_HEAD.match(data.lstrip(b" \t\r\n")) is not None
        times, sizes = _raw_curves(data, source.display) if raw else _curves(
            data, source.display)
        tracks, counters = _tables(times, sizes)
        meta = pa.table({
            "key": ["source_file", "source_format", "memory_categories"],
            "value": [json.dumps(source.display),
                      json.dumps("PyTorch export_memory_timeline "
                                 + ("raw events" if raw else "[times, sizes]")),
                      json.dumps(list(CATEGORIES))],
        })
        tables = {"tracks": tracks, "counters": counters, "metadata": meta}
        for name in ("intervals", "instants", "messages", "flows"):
            tables[name] = empty_table(name).drop_columns(["rank"])
        rank, rank_source = _rank_of(source)
        return [RankData(tables=tables, source_format="memory-timeline", rank=rank,
                         rank_source=rank_source,
                         clock={"method": "profiler ns as written (unix epoch in "
                                "PyTorch's export_memory_timeline)", "base_ns": 0,
                                "offset_ns": 0})]


def _decode(data: bytes, kind: Any, display: str, what: str) -> Any:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise CorruptTraceError(display, f"not a PyTorch memory timeline ({what}: {exc})"
                                ) from exc
    except msgspec.DecodeError as exc:
        problem = "truncated JSON" if "truncated" in str(exc).lower() else "invalid JSON"
        raise CorruptTraceError(display, f"{problem} ({exc})") from exc


def _raw_curves(data: bytes, display: str) -> tuple[np.ndarray[Any, Any],
                                                     np.ndarray[Any, Any]]:
    """HTA's ``_process_raw_events`` on columns: (times ns, sizes [n, 8] bytes)."""
    events = _decode(data, _RAW_TYPE, display,
                     "expected [[time_ns, action, bytes, category], ...]")
    if not events:
        raise CorruptTraceError(display, "memory timeline without events")
    arr = np.array(events, dtype=np.int64)
    del events
    t, action, nbytes, cat = arr.T
    bad = (cat < 0) | (cat >= len(CATEGORIES)) | (action < 1) | (action > 4)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise CorruptTraceError(
            display, f"{int(bad.sum())} event(s) with an action outside 1-4 or a category "
            f"outside 0-{len(CATEGORIES) - 1} (first: event {first}, {arr[first].tolist()})")
    new_step = np.concatenate(([True], t[1:] != t[:-1]))
    contrib = np.zeros((len(t), len(CATEGORIES)), dtype=np.int64)
    contrib[np.arange(len(t)), cat] = nbytes
    running = np.cumsum(contrib, axis=0)
    last_of_step = np.concatenate((np.flatnonzero(new_step)[1:] - 1, [len(t) - 1]))
    positive = t[t > 0]
    t_min = int(positive.min()) if len(positive) else -1
    times = t[new_step]
    return np.where(times < 0, t_min, times), running[last_of_step]


def _curves(data: bytes, display: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The ``[times, sizes]`` layout, checked: as many rows as times, 8 values each."""
    times, sizes = _decode(data, _CURVES_TYPE, display, "expected [times_ns, sizes]")
    widths = {len(row) for row in sizes}
    if len(times) != len(sizes) or widths - {len(CATEGORIES)}:
        raise CorruptTraceError(
            display, f"memory timeline with {len(times)} times and {len(sizes)} size rows "
            f"of {sorted(widths)} values (expected equal counts of {len(CATEGORIES)})")
    if not times:
        raise CorruptTraceError(display, "memory timeline without samples")
    return np.asarray(times, dtype=np.int64), np.asarray(sizes, dtype=np.float64)


def track_name(category: str) -> str:
    """Track name of a category, e.g. ``memory timeline: Activation``."""
    return f"memory timeline: {category}"


def _tables(times: np.ndarray[Any, Any], sizes: np.ndarray[Any, Any]
            ) -> tuple[pa.Table, pa.Table]:
    """Tracks (one per category) and counters (per track, samples in time order)."""
    n_cat = len(CATEGORIES)
    names = [track_name(c) for c in CATEGORIES]
    tracks = pa.table({
        "track_id": pa.array(range(n_cat), pa.int32()),
        "kind": pa.array(["counter"] * n_cat),
        "name": pa.array(names),
        "device": pa.array([-1] * n_cat, pa.int32()),
        "stream": pa.array([-1] * n_cat, pa.int64()),
    })
    n = len(times)
    counters = pa.table({
        "track_id": pa.array(np.repeat(np.arange(n_cat, dtype=np.int32), n)),
        "ts_ns": pa.array(np.tile(times, n_cat)),
        "name": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(n_cat, dtype=np.int32), n)),
            pa.array([f"{name} (bytes)" for name in names])),
        "value": pa.array(sizes.T.reshape(-1).astype(np.float64)),
    })
    return tracks, counters


def directory_timelines(directory: str, files: list[str], others: list[Source]
                        ) -> list[Source]:
    """The ``*.raw.gz`` files among a directory's ``files`` that are PyTorch raw memory
    timelines by content (other ``.raw.gz`` files, unreadable ones included, are not
    traces: skipped, as before). Taken only when the directory holds no other trace
    (``others`` empty): a timeline names no device, and beside traces it would take a rank
    of its own or claim one of theirs; then one ``DataQualityWarning`` says they were left
    out (pass such a file on its own)."""
    reader = MemoryTimelineReader()
    found = []
    for path in files:
        if not path.endswith(RAW_SUFFIX):
            continue
        source = Source(path)
        try:
            if reader.sniff(source.head(), source):
                found.append(source)
        except CorruptTraceError:
            continue
    if found and others:
        names = ", ".join(s.file_name for s in found[:3]) + (" ..." if len(found) > 3 else "")
        warnings.warn(f"{directory}: {len(found)} PyTorch memory timeline file(s) left out "
                      f"({names}): a timeline names no device and would take a rank beside "
                      "the traces; ingest it on its own", DataQualityWarning, stacklevel=3)
        return []
    return found


def _rank_of(source: Source) -> tuple[int | None, str | None]:
    match = _RANK_IN_NAME.search(source.file_name)
    if match and int(match.group(1)) <= _MAX_RANK:
        return int(match.group(1)), "file name"
    return None, None
