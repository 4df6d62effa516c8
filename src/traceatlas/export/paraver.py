"""Paraver exporter: a traceatlas store -> ``<out>.prv`` + ``<out>.pcf`` + ``<out>.row``.

Layout: header in ns (``_ns``), no resource model, one application, one task per rank
(ranks in ascending order; task = position + 1), and per task one thread per (track,
lane). A lane is a set of properly nested intervals of a track: host call stacks fit in
lane 0; overlapping device events (or crossing host events) get extra lanes, so every
interval survives Paraver's LIFO pairing of begin/end events.

Records (sorted by time; at one time on one thread, ends come before begins, inner ends
first, and a zero-length interval's end follows its begin):

- every interval except category ``state``: an event at its start (type, value) and an
  event with value 0 at its end (none for a region the source left open at its end).
  Codes (``paraver_codes``, so that Paraver ``.cfg`` files made for Extrae and nsys2prv
  traces work): intervals and instants read from a Paraver trace keep their type and
  value (``args``); MPI calls get Extrae's type and value (MPI_Allreduce = 50000002
  value 10, ...); CUDA ``runtime`` 63000000, ``kernel`` 63000006, ``comm_kernel``
  63000007, ``memcpy``/``memset`` 63000001 (nsys2prv); every other category 91000000 +
  its index in ``CATEGORIES`` (labelled ``traceatlas category <name>``). Values the
  exporter numbers itself are one id per distinct name, shared by all types.
- states: intervals of category ``state`` (e.g. from a Paraver source) become type 1
  records (a Paraver source's own state values kept); when the trace has none, states
  are derived per host track: Extrae's MPI state inside each (outermost) MPI call
  (Blocking Send, Waiting a message, Group Communication, ...), Running over the rest of
  the union of the track's host intervals; the ``.pcf`` then declares type 91000999 so
  that the reader does not count them as intervals again.
- instants: type 91000100 + category index, value = name id (a Paraver source's codes
  kept).
- counters: one type per series (a Paraver source's type kept, else 92000000 + index of
  its sorted name), gradient 7 (the hardware-counter gradient); values are rounded to
  integers (Paraver values are integers; a warning says when a fraction was lost).
- messages: type 3 records between the tasks' first threads.

Times are written relative to the earliest time of the trace; a ``# traceatlas
time_origin_ns=<ns>`` comment after the header lets the reader restore them exactly.
Not carried: flows, interval and instant args, correlation ids, collective fields.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas import tempfiles
from traceatlas.errors import DataQualityWarning
from traceatlas.export.paraver_codes import (
    CUDA_TYPE_LABELS,
    CUDA_TYPES,
    EXTRAE_STATES,
    MPI_GRADIENT,
    MPI_TYPE_LABELS,
    OTHERS,
    Codebook,
    mpi_code,
)
from traceatlas.export.paraver_states import derived_states
from traceatlas.io.paraver_pcf import (
    CATEGORY_LABEL,
    CATEGORY_TYPE_BASE,
    COUNTER_GRADIENT,
    COUNTER_TYPE_BASE,
    DERIVED_STATES_TYPE,
    INSTANT_LABEL,
    INSTANT_TYPE_BASE,
)
from traceatlas.model.schema import CATEGORIES

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace

I64 = npt.NDArray[np.int64]
DERIVED_LABEL = ("traceatlas derived states (Running = host intervals; inside MPI calls "
                 "Extrae's MPI states)")
"""Starts with ``paraver_pcf.DERIVED_STATES_LABEL``'s prefix, which the reader checks."""


class ParaverExporter:
    """Writes a store as a Paraver trace (``.prv``, ``.pcf``, ``.row``)."""

    name = "paraver"
    description = "Paraver trace: <out>.prv + .pcf + .row (times in ns)"

    def write(self, trace: Trace, out: Path) -> list[Path]:
        """Write ``<out>.prv``, ``.pcf`` and ``.row`` (``out`` with or without ``.prv``)."""
        out = Path(out)
        stem = out.with_name(out.name[: -len(".prv")]) if out.name.endswith(".prv") else out
        targets = [stem.with_name(stem.name + ext) for ext in (".prv", ".pcf", ".row")]
        # a regular file may be overwritten; a directory, a device or a FIFO never
        real = [tempfiles.replaceable_file(target) for target in targets]
        texts = _Build(trace).texts()
        with _atomic(real) as temps:
            for tmp, text in zip(temps, texts, strict=True):
                tmp.write_text(text, encoding="utf-8")
        return targets


@contextlib.contextmanager
def _atomic(targets: list[Path]) -> Iterator[list[Path]]:
    """Temporary siblings, renamed onto ``targets`` only when the body succeeds."""
    for t in targets:  # debris of a killed export
        tempfiles.sweep_siblings(t.parent, t.name)
    temps = [tempfiles.sibling(t, "tmp") for t in targets]
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
                                              "name", "category", "source_category", "args"])
        self.inst = _arrow(trace, "instants", ["rank", "track_id", "ts_ns", "name",
                                               "category", "source_category", "args"])
        self.cnt = _arrow(trace, "counters", ["rank", "track_id", "ts_ns", "name", "value"])
        self.msg = _arrow(trace, "messages", ["src_rank", "dst_rank", "send_start_ns",
                                              "send_end_ns", "recv_start_ns", "recv_end_ns",
                                              "bytes", "tag"])
        self.paraver_ranks, self.counter_types = _paraver_sources(trace)
        n_flows = trace.scan("flows").select("flow_id").collect().height
        if n_flows:
            warnings.warn(f"{n_flows} flow link(s) are not exported (Paraver has no flows)",
                          DataQualityWarning, stacklevel=3)
        self.origin = _earliest([self.iv["start_ns"], self.inst["ts_ns"],
                                 self.cnt["ts_ns"], *(self.msg[c] for c in (
                                     "send_start_ns", "send_end_ns", "recv_start_ns",
                                     "recv_end_ns"))])
        self.book = Codebook()
        self.mpi_unknown: dict[str, int] = {}
        self.counter_codes: dict[str, int] = {}
        self.state_labels: dict[int, str] = dict(enumerate(EXTRAE_STATES))
        self.derived = False
        self.records: list[tuple[I64, I64, I64, I64, I64, pa.Array]] = []
        self.open_at_end: list[int] = []

    # -- codes --------------------------------------------------------------------------

    def kept_codes(self, table: pa.Table,
                   skip: npt.NDArray[np.bool_]) -> dict[int, tuple[int, int]]:
        """Row -> (type, value) a Paraver source wrote (in ``args``), registered in the
        codebook with the type label (``source_category``) and the value label."""
        kept: dict[int, tuple[int, int]] = {}
        rank = _np(table, "rank")
        rows = np.flatnonzero(np.isin(rank, list(self.paraver_ranks)) & ~skip)
        if not len(rows):
            return kept
        take = pa.array(rows)
        args = table["args"].take(take).to_pylist()
        names = table["name"].take(take).to_pylist()
        labels = table["source_category"].take(take).to_pylist()
        is_instant = "ts_ns" in table.column_names
        for i, a, name, label in zip(rows.tolist(), args, names, labels, strict=True):
            code = _code_of(a)
            if code is None:
                continue
            etype, value, value_label = code
            if not is_instant:
                value_label = name
            kept[i] = (etype, value)
            gradient = MPI_GRADIENT if etype in MPI_TYPE_LABELS else 0
            self.book.declare(etype, gradient, _clean(label) if label else str(etype))
            self.book.keep(etype, value, _clean(value_label) if value_label else None)
        return kept

    def generated_code(self, category: str | None, name: str) -> tuple[int, int]:
        """(type, value) of an interval that has no kept code (module docstring)."""
        if category == "mpi":
            code = mpi_code(name, self.mpi_unknown)
            self.book.declare(code.etype, MPI_GRADIENT, MPI_TYPE_LABELS[code.etype])
            self.book.values[code.etype].setdefault(code.value, code.label)
            return code.etype, code.value
        if category in CUDA_TYPES:
            etype = CUDA_TYPES[category]
            self.book.declare(etype, 0, CUDA_TYPE_LABELS[etype])
        else:
            etype = CATEGORY_TYPE_BASE + _cat_index(category)
            self.book.declare(etype, 0, CATEGORY_LABEL + CATEGORIES[_cat_index(category)])
        return etype, self.book.label_id(etype, name)

    def interval_codes(self, is_state: npt.NDArray[np.bool_]) -> tuple[I64, I64]:
        """Event type and value of every interval (0 for states)."""
        kept = self.kept_codes(self.iv, is_state)
        self.kept_instants = self.kept_codes(self.inst, np.zeros(self.inst.num_rows, bool))
        cats = self.iv["category"].to_pylist()
        names = [_clean(n) for n in self.iv["name"].to_pylist()]
        etype = np.zeros(len(cats), dtype=np.int64)
        value = np.zeros(len(cats), dtype=np.int64)
        cache: dict[tuple[str | None, str], tuple[int, int]] = {}
        for i, (cat, name) in enumerate(zip(cats, names, strict=True)):
            if is_state[i]:
                continue
            code = kept.get(i)
            if code is None:
                key = (cat, name)
                code = cache.get(key) or cache.setdefault(key, self.generated_code(cat, name))
            etype[i], value[i] = code
        return etype, value

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
        etype, value = self.interval_codes(is_state)
        lane = self.lanes(is_state)
        thread_of, thread_names = self.threads(lane)
        rank, track = _np(iv, "rank").tolist(), _np(iv, "track_id").tolist()
        task = np.asarray([self.task_of[r] for r in rank], dtype=np.int64)
        thread = np.asarray([thread_of[(r, t, ln)] for r, t, ln in
                             zip(rank, track, lane.tolist(), strict=True)], dtype=np.int64)
        start, end = _np(iv, "start_ns"), _np(iv, "end_ns")
        ev = np.flatnonzero(~is_state)
        nest = np.empty(len(ev), dtype=np.int64)
        nest[np.lexsort((-end[ev], start[ev], thread[ev], task[ev]))] = np.arange(len(ev))
        zero = end[ev] == start[ev]
        self.add(start[ev], task[ev], thread[ev], 1, 2 * nest,
                 self.event_lines(task[ev], thread[ev], start[ev], etype[ev], value[ev]))
        closes = ~self.left_open(ev)
        c = ev[closes]
        self.add(end[c], task[c], thread[c], np.where(zero[closes], 1, 0),
                 np.where(zero[closes], 2 * nest[closes] + 1, -nest[closes]),
                 self.event_lines(task[c], thread[c], end[c], etype[c], 0 * value[c]))
        self.open_at_end = end[ev[~closes]].tolist()
        self.state_records(is_state, task, start, end, cat, thread_of)
        self.point_records(thread_of)
        self.message_records()
        return self.prv(thread_names), self.pcf(), self.row(thread_names)

    def left_open(self, ev: I64) -> npt.NDArray[np.bool_]:
        """Intervals of ``ev`` a Paraver source left open (closed at its end on reading):
        no end event is written for them."""
        flag = pc.fill_null(pc.match_substring(self.iv["args"], '"closed_at_trace_end": true'),
                            False)
        is_paraver = np.isin(_np(self.iv, "rank"), list(self.paraver_ranks))
        out: npt.NDArray[np.bool_] = (np.asarray(flag.to_numpy(zero_copy_only=False),
                                                 dtype=bool) & is_paraver)[ev]
        return out

    def state_records(self, is_state: npt.NDArray[np.bool_], task: I64, start: I64,
                      end: I64, cat: list[str | None],
                      thread_of: dict[tuple[int, int, int], int]) -> None:
        """Type 1 records: the trace's states, or the derived ones (module docstring)."""
        rank, track = _np(self.iv, "rank"), _np(self.iv, "track_id")
        thread0 = np.asarray([thread_of[(r, t, 0)] for r, t in zip(
            rank.tolist(), track.tolist(), strict=True)], dtype=np.int64)
        idx = np.flatnonzero(is_state)
        if len(idx):
            value = self.state_values(idx)
            s_task, s_thread, s_start, s_end = task[idx], thread0[idx], start[idx], end[idx]
            self.derived = False
        else:
            host = {(r, t) for r, t, k in zip(self.tracks["rank"].to_pylist(),
                                              self.tracks["track_id"].to_pylist(),
                                              self.tracks["kind"].to_pylist(), strict=True)
                    if k == "host_thread"}
            on_host = np.flatnonzero(np.asarray(
                [(r, t) in host for r, t in zip(rank.tolist(), track.tolist(), strict=True)],
                dtype=bool))
            names = self.iv["name"].to_pylist()
            is_mpi = np.asarray([cat[i] == "mpi" for i in on_host.tolist()], dtype=bool)
            mpi_state = np.asarray([mpi_code(_clean(names[i]), self.mpi_unknown).state
                                    if m else OTHERS for i, m in zip(
                                        on_host.tolist(), is_mpi.tolist(), strict=True)],
                                   dtype=np.int64)
            key = task[on_host] * (1 << 32) + thread0[on_host]
            k, s_start, s_end, value = derived_states(key, start[on_host], end[on_host],
                                                      is_mpi, mpi_state)
            s_task, s_thread = k >> 32, k & 0xFFFFFFFF
            self.derived = True
        s = [pa.array(a).cast(pa.string()) for a in (s_task, s_thread,
                                                     s_start - self.origin,
                                                     s_end - self.origin, value)]
        text = pc.binary_join_element_wise("1:0:1", *s, ":")
        self.add(s_start, s_task, s_thread, 3, np.zeros(len(s_start), np.int64), text)

    def state_values(self, idx: I64) -> I64:
        """State values of state intervals ``idx``: a Paraver source's own value, else
        Extrae's value for the label, else a new value after Extrae's."""
        names = [_clean(self.iv["name"][i].as_py()) for i in idx.tolist()]
        rank = _np(self.iv, "rank")[idx]
        args = self.iv["args"].take(pa.array(idx)).to_pylist()
        by_label = {label: v for v, label in self.state_labels.items()}
        kept: set[int] = set()
        out = np.empty(len(idx), dtype=np.int64)
        for j, (name, r, a) in enumerate(zip(names, rank.tolist(), args, strict=True)):
            own = _state_of(a) if r in self.paraver_ranks else None
            if own is not None:
                if own not in kept:
                    kept.add(own)
                    self.state_labels[own] = name
                out[j] = own
                continue
            if name not in by_label:
                by_label[name] = max([*self.state_labels, len(EXTRAE_STATES) - 1]) + 1
                self.state_labels[by_label[name]] = name
            out[j] = by_label[name]
        return out

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
            rows = np.flatnonzero(np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)
                                  ) if table.num_rows else np.zeros(0, np.int64)
            table = table.take(pa.array(rows))
            rank, track = table["rank"].to_pylist(), table["track_id"].to_pylist()
            task = np.asarray([self.task_of[r] for r in rank], dtype=np.int64)
            thread = np.asarray([thread_of[(r, t, 0)] for r, t in zip(rank, track,
                                                                       strict=True)],
                                dtype=np.int64)
            time = _np(table, "ts_ns")
            if is_counter:
                etype, value = self.counter_codes_of(table)
            else:
                etype, value = self.instant_codes(table, rows)
            self.add(time, task, thread, 2, np.zeros(len(time), np.int64),
                     self.event_lines(task, thread, time, etype, value))

    def instant_codes(self, table: pa.Table, rows: I64) -> tuple[I64, I64]:
        """(type, value) of instants (rows of ``self.inst``): kept, or category type."""
        cats, names = table["category"].to_pylist(), table["name"].to_pylist()
        etype = np.empty(len(cats), dtype=np.int64)
        value = np.empty(len(cats), dtype=np.int64)
        for j, (row, c, n) in enumerate(zip(rows.tolist(), cats, names, strict=True)):
            code = self.kept_instants.get(row)
            if code is None:
                t = INSTANT_TYPE_BASE + _cat_index(c)
                self.book.declare(t, 0, INSTANT_LABEL + CATEGORIES[_cat_index(c)])
                code = (t, self.book.label_id(t, _clean(n)))
            etype[j], value[j] = code
        return etype, value

    def counter_codes_of(self, table: pa.Table) -> tuple[I64, I64]:
        """(type, value) of counter samples: a Paraver source's type for its series,
        else 92000000 + index of the sorted name (skipping types already used)."""
        names = [_clean(n) for n in table["name"].to_pylist()]
        for n in sorted(set(names)):
            if n in self.counter_types:
                self.counter_codes[n] = self.counter_types[n]
        used = set(self.counter_codes.values()) | set(self.book.types)
        nxt = COUNTER_TYPE_BASE
        for n in sorted(set(names) - set(self.counter_codes)):
            while nxt in used:
                nxt += 1
            self.counter_codes[n] = nxt
            used.add(nxt)
        for n, t in self.counter_codes.items():
            self.book.declare(t, COUNTER_GRADIENT, n)
        etype = np.asarray([self.counter_codes[n] for n in names], dtype=np.int64)
        raw = table["value"].to_numpy(zero_copy_only=False).astype(np.float64)
        value = np.rint(raw).astype(np.int64)
        if np.any(value != raw):
            warnings.warn("counter values with fractions were rounded to integers "
                          "(Paraver event values are integers)", DataQualityWarning,
                          stacklevel=5)
        return etype, value

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
        times.append(np.asarray(self.open_at_end, dtype=np.int64) - origin)
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
        """The ``.pcf``: states, one block per event type with its value labels."""
        out = ["DEFAULT_OPTIONS", "", "LEVEL               THREAD",
               "UNITS               NANOSEC", "LOOK_BACK           100", "SPEED               1",
               "FLAG_ICONS          ENABLED", "NUM_OF_STATE_COLORS 1000",
               "YMAX_SCALE          37", "", "", "DEFAULT_SEMANTIC", "",
               "THREAD_FUNC          State As Is", "", "", "STATES"]
        out += [f"{v}    {s}" for v, s in sorted(self.state_labels.items())]
        out += ["", "", "# traceatlas export: Extrae MPI and nsys2prv CUDA codes, traceatlas "
                "categories, instants and counters (traceatlas/export/paraver_codes.py)"]
        out += self.book.pcf_lines()
        if self.derived:
            out += ["EVENT_TYPE", f"0    {DERIVED_STATES_TYPE}    {DERIVED_LABEL}", "", ""]
        return "\n".join(out) + "\n"

    def row(self, thread_names: list[list[str]]) -> str:
        """The ``.row``: task (rank) names and thread names in process-model order."""
        threads = [n for per_task in thread_names for n in per_task]
        out = [f"LEVEL TASK SIZE {len(self.ranks)}", *(f"rank {r}" for r in self.ranks), "",
               f"LEVEL THREAD SIZE {len(threads)}", *threads]
        return "\n".join(out) + "\n"


def _paraver_sources(trace: Trace) -> tuple[set[int], dict[str, int]]:
    """Ranks read from a Paraver trace (their metadata has ``paraver_header``) and the
    event type of each counter series they hold (``paraver_counter_types``)."""
    meta = _arrow(trace, "metadata", ["rank", "key", "value"])
    ranks: set[int] = set()
    counters: dict[str, int] = {}
    for r, k, v in zip(meta["rank"].to_pylist(), meta["key"].to_pylist(),
                       meta["value"].to_pylist(), strict=True):
        if k == "paraver_header":
            ranks.add(int(r))
        elif k == "paraver_counter_types" and v:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                for name, etype in json.loads(v).items():
                    if isinstance(etype, int):
                        counters.setdefault(_clean(name), etype)
    return ranks, counters


def _code_of(args: str | None) -> tuple[int, int, str | None] | None:
    """(type, value, value label) a Paraver source kept in ``args``, else None."""
    try:
        obj = json.loads(args) if args else None
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    etype, value = obj.get("type"), obj.get("value")
    if type(etype) is not int or type(value) is not int or etype <= 0:
        return None
    label = obj.get("value_label")
    return etype, value, label if isinstance(label, str) else None


def _state_of(args: str | None) -> int | None:
    """The state value a Paraver source kept in ``args``, else None."""
    try:
        obj = json.loads(args) if args else None
    except ValueError:
        return None
    value = obj.get("state") if isinstance(obj, dict) else None
    return value if type(value) is int and value >= 0 else None


def _cat_index(category: str | None) -> int:
    return CATEGORIES.index(category) if category in CATEGORIES else CATEGORIES.index("other")


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
