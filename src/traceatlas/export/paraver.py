"""Paraver exporter: a traceatlas store -> ``<out>.prv`` + ``<out>.pcf`` + ``<out>.row``.

Layout: header in ns (``_ns``), no resource model, one application, one task per rank
(ranks in ascending order; task = position + 1), and per task one thread per (track,
lane). A lane is a set of properly nested intervals of a track: host call stacks fit in
lane 0; overlapping device events (or crossing host events) get extra lanes, so every
interval survives Paraver's LIFO pairing of begin/end events.

Records (sorted by time; at one time on one thread, ends come before begins, inner ends
first, and a zero-length interval's end follows its begin):

- every interval except category ``state``: an event at its start (type per category,
  value = id of its name in the ``.pcf`` VALUES table) and an event with value 0 at its
  end. Types (``traceatlas.io.paraver_pcf``): ``kernel`` 63000006 (Extrae/nsys2prv
  "CUDA kernel exec"), ``runtime`` 63000000 (Extrae "CUDA call"), ``mpi`` 50000001/2/3
  (Extrae MPI point-to-point / collective / other, chosen from the call name), every
  other category 91000000 + its index in ``CATEGORIES`` (labelled ``traceatlas category
  <name>``).
- states: intervals of category ``state`` (e.g. from a Paraver source) become type 1
  records; when the trace has none, ``Running`` states cover the top-level host intervals
  of each host thread and the ``.pcf`` declares type 91000999 so that the reader does not
  count them as intervals again.
- instants: type 91000100 + category index, value = name id.
- counters: one type per series, 92000000 + index of its sorted name, gradient 7 (the
  hardware-counter gradient); values are rounded to integers (Paraver values are
  integers; a warning says when a fraction was lost).
- messages: type 3 records between the tasks' first threads.

Times are written relative to the earliest time of the trace; a ``# traceatlas
time_origin_ns=<ns>`` comment after the header lets the reader restore them exactly.
Not carried: flows, interval and instant args, correlation ids, collective fields.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
import warnings
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import DataQualityWarning
from traceatlas.io.paraver_pcf import (
    CATEGORY_LABEL,
    CATEGORY_TYPE_BASE,
    COUNTER_GRADIENT,
    COUNTER_TYPE_BASE,
    DERIVED_STATES_LABEL,
    DERIVED_STATES_TYPE,
    EXTRAE_CATEGORY_TYPES,
    INSTANT_LABEL,
    INSTANT_TYPE_BASE,
    MPI_TYPES,
    mpi_type,
)
from traceatlas.model.schema import CATEGORIES

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace

I64 = npt.NDArray[np.int64]
EXTRAE_STATES: tuple[str, ...] = (
    "Idle", "Running", "Not created", "Waiting a message", "Blocking Send",
    "Synchronization", "Test/Probe", "Scheduling and Fork/Join", "Wait/WaitAll", "Blocked",
    "Immediate Send", "Immediate Receive", "I/O", "Group Communication", "Tracing Disabled",
    "Others", "Send Receive", "Memory transfer",
)
"""Extrae's state values 0..17, reused so Paraver configurations keep their colours."""
_TYPE_LABELS = {63_000_006: "CUDA kernel exec", 63_000_000: "CUDA call",
                50_000_001: "MPI Point-to-point", 50_000_002: "MPI Collective Comm",
                50_000_003: "MPI Other"}


class ParaverExporter:
    """Writes a store as a Paraver trace (``.prv``, ``.pcf``, ``.row``)."""

    name = "paraver"
    description = "Paraver trace: <out>.prv + .pcf + .row (times in ns)"

    def write(self, trace: Trace, out: Path) -> list[Path]:
        """Write ``<out>.prv``, ``.pcf`` and ``.row`` (``out`` with or without ``.prv``)."""
        out = Path(out)
        stem = out.with_name(out.name[: -len(".prv")]) if out.name.endswith(".prv") else out
        texts = _Build(trace).texts()
        targets = [stem.with_name(stem.name + ext) for ext in (".prv", ".pcf", ".row")]
        with _atomic(targets) as temps:
            for tmp, text in zip(temps, texts, strict=True):
                tmp.write_text(text, encoding="utf-8")
        return targets


@contextlib.contextmanager
def _atomic(targets: list[Path]) -> Iterator[list[Path]]:
    """Temporary siblings, renamed onto ``targets`` only when the body succeeds."""
    temps = [t.with_name(f".{t.name}.tmp-{uuid.uuid4().hex[:8]}") for t in targets]
    try:
        yield temps
        for tmp, target in zip(temps, targets, strict=True):
            os.replace(tmp, target)
    finally:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def _arrow(trace: Trace, table: str, columns: list[str]) -> pa.Table:
    import polars as pl

    frame = trace.scan(table).select(columns).collect()
    casts = [pl.col(c).cast(pl.String) for c in columns
             if isinstance(frame.schema[c], pl.Categorical | pl.Enum)]
    return frame.with_columns(casts).to_arrow() if casts else frame.to_arrow()


def _np(table: pa.Table, col: str) -> I64:
    return np.asarray(pc.fill_null(table[col], 0).to_numpy(), dtype=np.int64)


def _clean(label: Any) -> str:
    text = " ".join(str(label if label is not None else "").split())
    return text or "(no name)"


class _Build:
    """Collects the records of one export, then renders the three files."""

    def __init__(self, trace: Trace) -> None:
        self.ranks = trace.ranks
        self.task_of = {r: i + 1 for i, r in enumerate(self.ranks)}
        if self.ranks != list(range(len(self.ranks))):
            warnings.warn(f"ranks {self.ranks[:8]} are not 0..n-1; task t holds the t-th "
                          "rank in ascending order", DataQualityWarning, stacklevel=3)
        self.tracks = _arrow(trace, "tracks", ["rank", "track_id", "kind", "name", "device",
                                               "stream", "tid"])
        self.iv = _arrow(trace, "intervals", ["rank", "track_id", "start_ns", "end_ns",
                                              "name", "category"])
        self.inst = _arrow(trace, "instants", ["rank", "track_id", "ts_ns", "name",
                                               "category"])
        self.cnt = _arrow(trace, "counters", ["rank", "track_id", "ts_ns", "name", "value"])
        self.msg = _arrow(trace, "messages", ["src_rank", "dst_rank", "send_start_ns",
                                              "send_end_ns", "recv_start_ns", "recv_end_ns",
                                              "bytes", "tag"])
        n_flows = trace.scan("flows").select("flow_id").collect().height
        if n_flows:
            warnings.warn(f"{n_flows} flow link(s) are not exported (Paraver has no flows)",
                          DataQualityWarning, stacklevel=3)
        self.origin = _earliest([self.iv["start_ns"], self.inst["ts_ns"],
                                 self.cnt["ts_ns"], *(self.msg[c] for c in (
                                     "send_start_ns", "send_end_ns", "recv_start_ns",
                                     "recv_end_ns"))])
        self.names: dict[str, int] = {}
        self.counter_names: list[str] = []
        self.derived = False
        self.records: list[tuple[I64, I64, I64, I64, I64, pa.Array]] = []

    def name_id(self, labels: list[str]) -> I64:
        """Value ids (1-based) of labels in the shared VALUES table."""
        return np.asarray([self.names.setdefault(_clean(s), len(self.names) + 1)
                           for s in labels], dtype=np.int64)

    # -- threads ------------------------------------------------------------------------

    def lanes(self, is_state: npt.NDArray[np.bool_]) -> I64:
        """Lane of every interval: properly nested within a lane, per (rank, track)."""
        iv = self.iv
        rank, track = _np(iv, "rank"), _np(iv, "track_id")
        start, end = _np(iv, "start_ns"), _np(iv, "end_ns")
        lane = np.zeros(iv.num_rows, dtype=np.int64)
        idx = np.flatnonzero(~is_state)
        order = idx[np.lexsort((-end[idx], start[idx], track[idx], rank[idx]))]
        stacks: list[list[int]] = []
        key = None
        for i, r, t, s, e in zip(order.tolist(), rank[order].tolist(), track[order].tolist(),
                                 start[order].tolist(), end[order].tolist(), strict=True):
            if (r, t) != key:
                key, stacks = (r, t), []
            for li, stack in enumerate(stacks):
                while stack and stack[-1] <= s and not (stack[-1] == s == e):
                    stack.pop()
                if not stack or e <= stack[-1]:
                    stack.append(e)
                    lane[i] = li
                    break
            else:
                stacks.append([e])
                lane[i] = len(stacks) - 1
        return lane

    def threads(self, lane: I64) -> tuple[dict[tuple[int, int, int], int], list[list[str]]]:
        """(rank, track, lane) -> thread index per task, and thread names per task."""
        tr = self.tracks
        lanes_of: dict[tuple[int, int], int] = {}
        for r, t, ln in zip(_np(self.iv, "rank").tolist(), _np(self.iv, "track_id").tolist(),
                            lane.tolist(), strict=True):
            lanes_of[(r, t)] = max(lanes_of.get((r, t), 0), ln + 1)
        info = {(r, t): (k, n, d, s, tid) for r, t, k, n, d, s, tid in zip(
            *(tr[c].to_pylist() for c in ("rank", "track_id", "kind", "name", "device",
                                          "stream", "tid")), strict=True)}
        for table in (self.iv, self.inst, self.cnt):
            for r, t in zip(table["rank"].to_pylist(), table["track_id"].to_pylist(),
                            strict=True):
                info.setdefault((r, t), ("other", None, -1, -1, t))
        thread_of: dict[tuple[int, int, int], int] = {}
        names: list[list[str]] = [[] for _ in self.ranks]
        for (r, t) in sorted(info):
            kind, name, dev, stream, tid = info[(r, t)]
            if kind == "gpu_stream":
                base = f"GPU {dev} stream {stream}"
            else:
                base = _clean(name) if name else f"thread {tid if tid is not None else t}"
            for ln in range(max(1, lanes_of.get((r, t), 0))):
                per_task = names[self.task_of[r] - 1]
                per_task.append(base + (f" row {ln}" if ln else ""))
                thread_of[(r, t, ln)] = len(per_task)
        return thread_of, names

    # -- records ------------------------------------------------------------------------

    def add(self, time: I64, task: I64, thread: I64, phase: int | I64, sub: I64,
            text: pa.Array) -> None:
        """Queue records (sort keys + their text without the leading time fields)."""
        n = len(time)
        text = _plain(text)
        self.records.append((time - self.origin, task, thread,
                             np.broadcast_to(np.asarray(phase, dtype=np.int64), n), sub, text))

    def event_lines(self, task: I64, thread: I64, time: I64, etype: I64,
                    value: I64) -> pa.Array:
        s = [pa.array(a).cast(pa.string()) for a in (task, thread, time - self.origin,
                                                     etype, value)]
        return pc.binary_join_element_wise("2:0:1", s[0], s[1], s[2], s[3], s[4], ":")

    def texts(self) -> tuple[str, str, str]:
        iv = self.iv
        cat = iv["category"].to_pylist()
        is_state = np.asarray([c == "state" for c in cat], dtype=bool)
        lane = self.lanes(is_state)
        thread_of, thread_names = self.threads(lane)
        rank, track = _np(iv, "rank").tolist(), _np(iv, "track_id").tolist()
        task = np.asarray([self.task_of[r] for r in rank], dtype=np.int64)
        thread = np.asarray([thread_of[(r, t, ln)] for r, t, ln in
                             zip(rank, track, lane.tolist(), strict=True)], dtype=np.int64)
        start, end = _np(iv, "start_ns"), _np(iv, "end_ns")
        names = iv["name"].to_pylist()
        ev = np.flatnonzero(~is_state)
        etype = np.asarray([_interval_type(c, n) for c, n in zip(cat, names, strict=True)],
                           dtype=np.int64)
        value = self.name_id(names)
        nest = np.empty(len(ev), dtype=np.int64)
        nest[np.lexsort((-end[ev], start[ev], thread[ev], task[ev]))] = np.arange(len(ev))
        zero = end[ev] == start[ev]
        self.add(start[ev], task[ev], thread[ev], 1, 2 * nest,
                 self.event_lines(task[ev], thread[ev], start[ev], etype[ev], value[ev]))
        self.add(end[ev], task[ev], thread[ev], np.where(zero, 1, 0),
                 np.where(zero, 2 * nest + 1, -nest),
                 self.event_lines(task[ev], thread[ev], end[ev], etype[ev], 0 * value[ev]))
        self.used_types = set(etype[ev].tolist())
        self.states = self.state_records(is_state, task, thread, start, end, names, lane)
        self.point_records(thread_of)
        self.message_records()
        return self.prv(thread_names), self.pcf(), self.row(thread_names)

    def state_records(self, is_state: npt.NDArray[np.bool_], task: I64, thread: I64,
                      start: I64, end: I64, names: list[str], lane: I64) -> dict[str, int]:
        """Type 1 records: the trace's states, or Running over top-level host intervals."""
        states = {s: i for i, s in enumerate(EXTRAE_STATES)}
        idx = np.flatnonzero(is_state)
        if len(idx):
            value = np.asarray([states.setdefault(_clean(names[i]), len(states))
                                for i in idx.tolist()], dtype=np.int64)
            self.derived = False
        else:
            host = {(r, t) for r, t, k in zip(self.tracks["rank"].to_pylist(),
                                              self.tracks["track_id"].to_pylist(),
                                              self.tracks["kind"].to_pylist(), strict=True)
                    if k == "host_thread"}
            on_host = np.asarray([(r, t) in host for r, t in zip(
                self.iv["rank"].to_pylist(), self.iv["track_id"].to_pylist(), strict=True)],
                dtype=bool)
            idx = _merged_top_level(np.flatnonzero(on_host & (lane == 0)), task, thread,
                                    start, end)
            task, thread, start, end = (a[idx[:, 0]] for a in (task, thread, start, end))
            end = idx[:, 1]
            idx = np.arange(len(idx))
            value = np.ones(len(idx), dtype=np.int64)
            self.derived = True
        s = [pa.array(a).cast(pa.string()) for a in (task[idx], thread[idx],
                                                     start[idx] - self.origin,
                                                     end[idx] - self.origin, value)]
        text = pc.binary_join_element_wise("1:0:1", *s, ":")
        self.add(start[idx], task[idx], thread[idx], 3, np.zeros(len(idx), np.int64), text)
        return states

    def point_records(self, thread_of: dict[tuple[int, int, int], int]) -> None:
        """Instants and counters as events on lane 0 of their track."""
        for table, is_counter in ((self.inst, False), (self.cnt, True)):
            ts = table["ts_ns"]
            keep = pc.is_valid(ts) if not is_counter else pc.and_(
                pc.is_valid(ts), pc.invert(pc.fill_null(pc.is_nan(table["value"]), True)))
            dropped = table.num_rows - pc.sum(keep).as_py() if table.num_rows else 0
            if dropped:
                warnings.warn(f"{dropped} {'counter sample' if is_counter else 'instant'}(s) "
                              "without a time or value are not exported",
                              DataQualityWarning, stacklevel=4)
            table = table.filter(keep)
            rank, track = table["rank"].to_pylist(), table["track_id"].to_pylist()
            task = np.asarray([self.task_of[r] for r in rank], dtype=np.int64)
            thread = np.asarray([thread_of[(r, t, 0)] for r, t in zip(rank, track,
                                                                       strict=True)],
                                dtype=np.int64)
            time = _np(table, "ts_ns")
            if is_counter:
                self.counter_names = sorted({_clean(n) for n in table["name"].to_pylist()})
                code = {n: COUNTER_TYPE_BASE + i for i, n in enumerate(self.counter_names)}
                etype = np.asarray([code[_clean(n)] for n in table["name"].to_pylist()],
                                   dtype=np.int64)
                raw = table["value"].to_numpy(zero_copy_only=False).astype(np.float64)
                value = np.rint(raw).astype(np.int64)
                if np.any(value != raw):
                    warnings.warn("counter values with fractions were rounded to integers "
                                  "(Paraver event values are integers)", DataQualityWarning,
                                  stacklevel=4)
            else:
                cats = table["category"].to_pylist()
                etype = np.asarray([INSTANT_TYPE_BASE + _cat_index(c) for c in cats],
                                   dtype=np.int64)
                value = self.name_id(table["name"].to_pylist())
                self.used_types |= set(etype.tolist())
            self.add(time, task, thread, 2, np.zeros(len(time), np.int64),
                     self.event_lines(task, thread, time, etype, value))

    def message_records(self) -> None:
        m = self.msg
        known = pc.and_(pc.is_in(m["src_rank"], pa.array(self.ranks, m["src_rank"].type)),
                        pc.is_in(m["dst_rank"], pa.array(self.ranks, m["dst_rank"].type)))
        cols = {c: pc.coalesce(m[c], m[o], m[a], m[b]) for c, o, a, b in (
            ("send_start_ns", "send_end_ns", "recv_start_ns", "recv_end_ns"),
            ("send_end_ns", "send_start_ns", "recv_start_ns", "recv_end_ns"),
            ("recv_start_ns", "recv_end_ns", "send_end_ns", "send_start_ns"),
            ("recv_end_ns", "recv_start_ns", "send_end_ns", "send_start_ns"))}
        keep = pc.and_(pc.fill_null(known, False), pc.is_valid(cols["send_start_ns"]))
        if m.num_rows - (pc.sum(keep).as_py() or 0):
            warnings.warn(f"{m.num_rows - (pc.sum(keep).as_py() or 0)} message(s) with an "
                          "unknown rank or no time are not exported", DataQualityWarning,
                          stacklevel=4)
        m = pa.table({**{k: v for k, v in cols.items()}, "src_rank": m["src_rank"],
                      "dst_rank": m["dst_rank"], "bytes": m["bytes"], "tag": m["tag"]}
                     ).filter(keep)
        src = np.asarray([self.task_of[r] for r in m["src_rank"].to_pylist()], np.int64)
        dst = np.asarray([self.task_of[r] for r in m["dst_rank"].to_pylist()], np.int64)
        self.comm = (src, dst, m)

    def prv(self, thread_names: list[list[str]]) -> str:
        """The ``.prv`` text: header, time-origin comment, records sorted by time."""
        src, dst, m = self.comm
        origin = self.origin
        times = [r[0] for r in self.records]
        times += [_np(m, c) - origin for c in ("send_start_ns", "send_end_ns",
                                               "recv_start_ns", "recv_end_ns")]
        flat = np.concatenate(times) if times else np.zeros(0, np.int64)
        last = int(flat.max()) if len(flat) else 0
        parts = list(self.records)
        rel = {c: pa.array(_np(m, c) - origin).cast(pa.string()) for c in (
            "send_start_ns", "send_end_ns", "recv_start_ns", "recv_end_ns")}
        comm_text = pc.binary_join_element_wise(
            "3:0:1", pa.array(src).cast(pa.string()), "1", rel["send_start_ns"],
            rel["send_end_ns"], "0:1", pa.array(dst).cast(pa.string()), "1",
            rel["recv_start_ns"], rel["recv_end_ns"],
            pc.fill_null(m["bytes"], 0).cast(pa.string()),
            pc.fill_null(m["tag"], 0).cast(pa.string()), ":")
        parts.append((_np(m, "send_start_ns") - origin, src, np.ones(len(src), np.int64),
                      np.full(len(src), 4, np.int64), np.zeros(len(src), np.int64),
                      _plain(comm_text)))
        keys = [np.concatenate([p[i] for p in parts]) for i in range(5)]
        text = pa.concat_arrays([p[5] for p in parts]) if parts else pa.array([], pa.string())
        order = np.lexsort((keys[4], keys[3], keys[2], keys[1], keys[0]))
        body = "\n".join(text.take(pa.array(order)).to_pylist())
        model = ",".join(f"{len(t)}:1" for t in thread_names)
        date = datetime.now().strftime("%d/%m/%Y at %H:%M")
        header = f"#Paraver ({date}):{last}_ns:0:1:{len(thread_names)}({model})"
        return f"{header}\n# traceatlas time_origin_ns={origin}\n{body}\n" if body else \
            f"{header}\n# traceatlas time_origin_ns={origin}\n"

    def pcf(self) -> str:
        """The ``.pcf``: states, category/instant types with one VALUES table, counters."""
        out = ["DEFAULT_OPTIONS", "", "LEVEL               THREAD",
               "UNITS               NANOSEC", "LOOK_BACK           100", "SPEED               1",
               "FLAG_ICONS          ENABLED", "NUM_OF_STATE_COLORS 1000",
               "YMAX_SCALE          37", "", "", "DEFAULT_SEMANTIC", "",
               "THREAD_FUNC          State As Is", "", "", "STATES"]
        out += [f"{v}    {s}" for s, v in sorted(self.states.items(), key=lambda x: x[1])]
        out += ["", "", "# traceatlas export: interval categories, instants and counters "
                "(codes in traceatlas/io/paraver_pcf.py)"]
        if self.used_types:
            out += ["EVENT_TYPE"]
            out += [f"{9 if t in MPI_TYPES else 0}    {t}    {_type_label(t)}"
                    for t in sorted(self.used_types)]
            out += ["VALUES", "0      End"]
            out += [f"{v}      {s}" for s, v in self.names.items()]
            out += ["", ""]
        if self.derived:
            out += ["EVENT_TYPE", f"0    {DERIVED_STATES_TYPE}    {DERIVED_STATES_LABEL}",
                    "", ""]
        if self.counter_names:
            out += ["EVENT_TYPE"]
            out += [f"{COUNTER_GRADIENT}    {COUNTER_TYPE_BASE + i}    {n}"
                    for i, n in enumerate(self.counter_names)]
            out += ["", ""]
        return "\n".join(out) + "\n"

    def row(self, thread_names: list[list[str]]) -> str:
        """The ``.row``: task (rank) names and thread names in process-model order."""
        threads = [n for per_task in thread_names for n in per_task]
        out = [f"LEVEL TASK SIZE {len(self.ranks)}", *(f"rank {r}" for r in self.ranks), "",
               f"LEVEL THREAD SIZE {len(threads)}", *threads]
        return "\n".join(out) + "\n"


def _cat_index(category: str | None) -> int:
    return CATEGORIES.index(category) if category in CATEGORIES else CATEGORIES.index("other")


def _interval_type(category: str | None, name: str | None) -> int:
    """Event type of an interval (see the module docstring)."""
    if category == "mpi":
        return mpi_type(_clean(name))
    if category in EXTRAE_CATEGORY_TYPES:
        return EXTRAE_CATEGORY_TYPES[category]
    return CATEGORY_TYPE_BASE + _cat_index(category)


def _type_label(etype: int) -> str:
    if etype in _TYPE_LABELS:
        return _TYPE_LABELS[etype]
    if etype >= INSTANT_TYPE_BASE:
        return INSTANT_LABEL + CATEGORIES[etype - INSTANT_TYPE_BASE]
    return CATEGORY_LABEL + CATEGORIES[etype - CATEGORY_TYPE_BASE]


def _plain(array: Any) -> pa.Array:
    """One contiguous string array (compute functions return chunked arrays)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], pa.string())
    return array.cast(pa.string())


def _earliest(columns: list[Any]) -> int:
    """The earliest time (ns) over the given columns; 0 when all are empty."""
    mins = [pc.min(c).as_py() for c in columns if len(c)]
    found = [m for m in mins if m is not None]
    return int(min(found)) if found else 0


def _merged_top_level(idx: I64, task: I64, thread: I64, start: I64, end: I64) -> I64:
    """Rows (index of the first interval, end of the union) of the unions of overlapping
    intervals ``idx`` per (task, thread); unions of zero length are left out."""
    if not len(idx):
        return np.zeros((0, 2), dtype=np.int64)
    idx = idx[np.lexsort((start[idx], thread[idx], task[idx]))]
    key = task[idx] * (1 << 32) + thread[idx]
    s, e = start[idx], end[idx]
    new_thread = np.r_[True, key[1:] != key[:-1]]
    bounds = [*np.flatnonzero(new_thread).tolist(), len(e)]
    reach = np.empty(len(e), dtype=np.int64)
    for lo, hi in itertools.pairwise(bounds):
        reach[lo:hi] = np.maximum.accumulate(e[lo:hi])
    prev = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    first = np.flatnonzero(new_thread | (s > prev))
    last = np.r_[first[1:], len(e)] - 1
    merged = np.stack([idx[first], reach[last]], axis=1)
    out: I64 = merged[merged[:, 1] > start[merged[:, 0]]]
    return out
