"""Paraver reader: ``.prv`` (or ``.prv.gz``) records, labels from the ``.pcf`` and names
from the ``.row`` beside it (same stem).

Model: one application/task/thread process model; rank = task - 1 (tasks of later
applications follow those of earlier ones), one ``RankData`` per task, one
``host_thread`` track per thread (``track_id`` = ``tid`` = thread index, 1-based).
Records: type 1 states -> intervals (category ``state``); type 2 event pairs -> region
intervals (LIFO per task, thread and type), counters, or instants, as
``paraver_pcf`` decides from the type and the ``.pcf``; type 3 -> messages, kept by the
sender; type 4 is counted and not kept. Times are converted exactly to int64 ns (header
unit ``_ns``/``_us``/``_ms``, no suffix = us). Records per type and event pairs per kind
are kept in ``metadata`` so a user can check nothing was dropped.

How: ``paraver_fields.py`` turns the records into int64 arrays (blocks of lines in a
thread pool, every field cast by Arrow at once; damaged records counted, dropped and
reported, the file refused when none is usable; ``paraver_body.Body.parse`` is the
simpler original kept as the test oracle); region
pairing and depth are numpy. A ``.pcf`` or ``.row`` that is not one (binary data, no
section or LEVEL block) is ignored with a warning naming it: the records do not need it
(the trace reads as if it were missing), and refusing the whole trace for a damaged
label file would lose the data a user can still look at.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import DataQualityWarning, UnsupportedFormatError
from traceatlas.io import allocator
from traceatlas.io.paraver_body import STATE_REVERSED, Body, Header, parse_header
from traceatlas.io.paraver_fields import parse_body
from traceatlas.io.paraver_pcf import Pcf, binary_problem, companion_path, parse_pcf, parse_row
from traceatlas.io.quality import DATA_QUALITY_KEY, Note, notes_json, report
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.model.schema import DEVICE_CATEGORIES, empty_table
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting

I64 = npt.NDArray[np.int64]
CLOCK_METHOD = "Paraver (one clock for all tasks)"
_STREAM_NAME = re.compile(r"(?:GPU|CUDA-D|device)\s*(\d+).*?(?:stream|\.S|S)\s*(\d+)",
                          re.IGNORECASE)


class ParaverReader:
    """Reader for Paraver traces (``.prv`` / ``.prv.gz`` + ``.pcf`` + ``.row``)."""

    name = "paraver"
    description = "Paraver trace (.prv or .prv.gz; .pcf and .row beside it)"

    def sniff(self, head: bytes, source: Source) -> bool:
        """The header starts with ``#Paraver`` (optionally after a ``new format`` line)."""
        if head.startswith(b"new format"):
            head = head.partition(b"\n")[2]
        return head.startswith(b"#Paraver")

    def read(self, source: Source, *, threads: int = 1) -> list[RankData]:
        """Parse one Paraver trace into one ``RankData`` per task.

        Read under ``allocator.reusing_memory()``: the reader allocates and frees many
        short-lived arrays of tens to hundreds of MB (measured costs there)."""
        if source.member is not None:
            raise UnsupportedFormatError(
                source.display, "Paraver traces inside an archive are not supported; "
                "extract the .prv with its .pcf and .row and ingest the .prv"
            )
        with allocator.reusing_memory():  # no frame: warnings count levels from read()
            data = source.read_bytes()
            header, body_at = parse_header(data, source.display)
            prv = Path(source.path)
            companions: dict[str, str] = {}
            pcf, companions["pcf"] = _read_pcf(prv, source.display)
            rows, companions["row"] = _read_row(prv, header)
            body = parse_body(data, body_at, header, source.display, threads=threads)
            del data
            notes = _report_body(body, source.display)
            assembler = _Assembler(source, header, pcf, rows, body, companions, notes)
            del body  # the assembler drops the record arrays once the columns are built
            return assembler.ranks()


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=4)


def _companion_text(prv: Path, suffix: str) -> tuple[str | None, str]:
    """(text of the companion file or None, its state: read / missing / ignored)."""
    path = companion_path(prv, suffix)
    if not path.is_file():
        return None, "missing"
    data = path.read_bytes()
    problem = binary_problem(data)
    if problem is not None:
        _warn(f"{path}: ignored, {problem}; the trace reads as without a {suffix}")
        return None, f"ignored ({problem})"
    return data.decode("utf-8", errors="replace"), "read"


def _read_pcf(prv: Path, display: str) -> tuple[Pcf, str]:
    """The ``.pcf`` beside ``prv`` (empty when missing or not a .pcf) and its state."""
    text, state = _companion_text(prv, ".pcf")
    path = companion_path(prv, ".pcf")
    if state == "missing":
        _warn(f"{display}: no .pcf beside the trace; states and event types keep numeric "
              "labels")
    pcf = parse_pcf(text or "")
    if text is not None and text.strip() and not pcf.sections:
        _warn(f"{path}: ignored, no Paraver .pcf section (STATES, EVENT_TYPE, ...); the "
              "trace reads as without a .pcf")
        return Pcf(), "ignored (no .pcf section)"
    if pcf.skipped:
        _warn(f"{path}: {len(pcf.skipped)} line(s) in STATES/EVENT_TYPE blocks are not "
              f"'<value> <label>' or '<gradient> <type> <label>' (first: line "
              f"{pcf.skipped[0]}); skipped")
    return pcf, state


def _read_row(prv: Path, header: Header) -> tuple[dict[str, list[str]], str]:
    """Names of the ``.row`` beside ``prv`` (empty when missing or not a .row) and its
    state; THREAD names are used only when there is one per thread of the header."""
    text, state = _companion_text(prv, ".row")
    path = companion_path(prv, ".row")
    problems: list[str] = []
    rows = parse_row(text or "", problems)
    if text is not None and text.strip() and not rows:
        _warn(f"{path}: ignored, no 'LEVEL <name> SIZE <n>' block")
        return {}, "ignored (no LEVEL block)"
    threads = sum(map(sum, header.threads))
    if "THREAD" in rows and len(rows["THREAD"]) != threads:
        problems.append(f"{len(rows['THREAD'])} thread name(s) for the {threads} thread(s) "
                        "of the trace; thread names not used")
        del rows["THREAD"]
    if problems:
        _warn(f"{path}: {'; '.join(problems)}")
    return rows, state


def _report_body(body: Body, display: str) -> list[Note]:
    """Warn about what the body parser skipped or dropped; the notes for metadata."""
    counts, drops, notes = body.counts, body.drops, []
    if counts["unrecognised"]:
        _warn(f"{display}: {counts['unrecognised']} body line(s) are not Paraver records "
              "(type 1-4), comments or communicators; skipped")
    if counts["4"]:
        _warn(f"{display}: {counts['4']} global communication record(s) (type 4) are "
              "counted in metadata but not kept")
    if drops.total:
        _warn(f"{display}: {drops.total} damaged record line(s) dropped: {drops.describe()}")
    for reason, n in drops.count.items():
        states = reason == STATE_REVERSED
        notes.append(Note(display, "records", f"{n} line(s) dropped: {reason} (first: line "
                          f"{drops.first[reason]})", n, ("state",) if states else (),
                          tables=("intervals",) if states else
                          ("intervals", "instants", "counters", "messages")))
    if body.received_before_sent:
        report(notes, Note(display, "communications",
                           f"{body.received_before_sent} received (physical receive) before "
                           "they were sent (logical send): clocks of the tasks disagree; kept"),
               stacklevel=3)
    return notes


def pair_regions(group: I64, opens: npt.NDArray[np.bool_]) -> tuple[I64, I64, I64, I64]:
    """LIFO pairing of open/close events sorted by (group, time, file order).

    Returns (open index, matching close index, unclosed opens, unmatched closes). A close
    with no open in its group is unmatched; the clipped running depth (depth minus its
    running minimum) makes every later event pair as if that close were absent.
    """
    n = len(group)
    if n and _alternating(group, opens):  # begin, end, begin, end, ... in every group
        every, empty = np.arange(n, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return every[0::2], every[1::2], empty, empty
    return _pair_lifo(group, opens)


def _alternating(group: I64, opens: npt.NDArray[np.bool_]) -> bool:
    """Whether events come as (open, close) pairs of one group each: LIFO then pairs
    event 2i with event 2i + 1 and leaves none unclosed or unmatched."""
    if len(group) % 2:
        return False
    return bool(opens[0::2].all() and not opens[1::2].any()
                and np.array_equal(group[0::2], group[1::2]))


def _pair_lifo(group: I64, opens: npt.NDArray[np.bool_]) -> tuple[I64, I64, I64, I64]:
    """``pair_regions`` for any sequence (clipped running depth per group)."""
    n = len(group)
    empty = np.zeros(0, dtype=np.int64)
    if n == 0:
        return empty, empty, empty, empty
    delta = np.where(opens, 1, -1).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    sizes = np.diff(np.r_[starts, n])
    gid = np.repeat(np.arange(len(starts), dtype=np.int64), sizes)
    run = np.cumsum(delta)
    run -= np.repeat(run[starts] - delta[starts], sizes)
    shift = gid * (n + 1)
    low = np.minimum.accumulate(np.minimum(run, 0) - shift) + shift
    prev_low = np.r_[0, low[:-1]]
    prev_low[starts] = 0
    unmatched = ~opens & (run < prev_low)
    level = run - low + np.where(opens, 0, 1)
    keep = np.flatnonzero(~unmatched)
    kg, kl = group[keep], level[keep]
    span = int(kl.max(initial=0)) + 1
    seq = keep[_stable_order(kg * span + kl, (keep, kl, kg))]
    is_open = opens[seq]
    same = (group[seq][1:] == group[seq][:-1]) & (level[seq][1:] == level[seq][:-1])
    hit = is_open[:-1] & ~is_open[1:] & same
    open_idx, close_idx = seq[:-1][hit], seq[1:][hit]
    paired = np.zeros(n, dtype=bool)
    paired[open_idx] = True
    unclosed = np.flatnonzero(opens & ~paired)
    return open_idx, close_idx, unclosed, np.flatnonzero(unmatched)


class _Assembler:
    """Body arrays + .pcf/.row -> canonical tables, split by rank."""

    def __init__(self, source: Source, header: Header, pcf: Pcf,
                 rows: dict[str, list[str]], body: Body, companions: dict[str, str],
                 notes: list[Note]) -> None:
        self.source, self.header, self.pcf, self.rows, self.body = source, header, pcf, rows, body
        self.companions, self.notes = companions, notes
        self.display = source.display
        self.origin = body.origin_ns
        self.offsets = np.asarray(header.task_offsets, dtype=np.int64)
        self.pair_counts: dict[str, int] = {}
        self.undeclared: list[int] = []
        self.counter_types: dict[str, int] = {}  # counter name -> event type (for export)
        self._shared_json: dict[str, str] | None = None

    def rank_of(self, appl: I64, task: I64) -> I64:
        """Rank of (application, task) columns: application offset + task - 1."""
        if len(self.offsets) == 1:  # one application (records of others are dropped)
            return np.asarray(task - 1, dtype=np.int64)
        return np.asarray(self.offsets[appl - 1] + task - 1, dtype=np.int64)

    def ranks(self) -> list[RankData]:
        h = self.header
        if len(h.threads) > 1:
            warnings.warn(
                f"{self.display}: {len(h.threads)} applications; ranks are numbered across "
                f"them (application a, task t -> rank offset(a) + t - 1; offsets "
                f"{h.task_offsets})", DataQualityWarning, stacklevel=3)
        intervals, instants, counters = self.events()
        states = self.states()
        intervals = _concat([states, intervals])
        messages = self.messages()
        b = self.body
        self.rank_records = {
            k: np.bincount(self.rank_of(arr[:, 2], arr[:, 3]), minlength=h.n_tasks)
            for k, arr in (("1", b.states), ("2", b.ev_fields), ("3", b.comms))
        }
        del states, b
        self.body = _without_records(self.body)  # lower peak memory (read() holds none)
        tracks = self.tracks(intervals)
        intervals = self.with_depth(intervals, tracks)
        per_rank = {
            name: _split(name, table, h.n_tasks)
            for name, table in (("tracks", tracks), ("intervals", intervals),
                                ("instants", instants), ("counters", counters),
                                ("messages", messages))
        }
        out = []
        for rank in range(h.n_tasks):
            tables = {name: parts[rank] for name, parts in per_rank.items()}
            tables["flows"] = empty_table("flows").drop_columns(["rank"])
            tables["metadata"] = self.metadata(rank)
            host = tables["tracks"]["host"][0].as_py() if tables["tracks"].num_rows else None
            out.append(RankData(
                tables=tables, source_format="paraver", rank=rank,
                rank_source="Paraver task (application offset + task - 1)",
                clock={"method": CLOCK_METHOD, "base_ns": self.origin, "offset_ns": 0},
                world_size=h.n_tasks, host=host,
            ))
        return out

    def states(self) -> dict[str, Any] | None:
        s = self.body.states
        if not len(s) or self.pcf.derived_states:
            return None
        values = s[:, 7]
        uniq, inverse = _codes(values)
        labels = [self.pcf.states.get(int(v), f"state {int(v)}") for v in uniq.tolist()]
        cpu_states, which = _unique_pairs(s[:, 1], values)  # args built once per pair
        args = pa.array([f'{{"cpu": {c}, "state": {v}}}' for c, v in cpu_states.tolist()],
                        pa.string()).take(pa.array(which))
        return {
            "rank": self.rank_of(s[:, 2], s[:, 3]), "track_id": s[:, 4],
            "start_ns": s[:, 5] + self.origin, "end_ns": s[:, 6] + self.origin,
            "name": _dict(inverse, labels), "category": _const("state", len(s)),
            "source_category": _const("Paraver state", len(s)), "args": args,
        }

    def events(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None,
                              dict[str, Any] | None]:
        b, pcf = self.body, self.pcf
        line, etype, value, order = (b.pairs[:, i] for i in range(4))
        # one pair per line (as many pairs as lines): pair i is on line i
        fields = b.ev_fields if len(line) == len(b.ev_fields) else b.ev_fields[line]
        rank = self.rank_of(fields[:, 2], fields[:, 3])
        thread, time = fields[:, 4], fields[:, 5] + self.origin
        types = np.unique(etype).tolist()
        region_cat = {t: pcf.region_category(t) for t in types}
        counter_types = [t for t in types if region_cat[t] is None and pcf.is_counter(t)]
        region_types = [t for t in types if region_cat[t] is not None]
        undeclared = [t for t in types if t not in pcf.types]
        if undeclared and pcf.types:
            warnings.warn(f"{self.display}: {len(undeclared)} event type(s) not declared in "
                          f"the .pcf (e.g. {undeclared[:5]}); named by number",
                          DataQualityWarning, stacklevel=4)
        self.undeclared = undeclared
        is_region = np.isin(etype, region_types)
        is_counter = np.isin(etype, counter_types)
        ridx = np.flatnonzero(is_region)
        # Group = (rank, thread, type); order within by time, then file order.
        sort, group = _region_order(ridx, rank, thread, etype, time, order)
        o, c, unclosed, unmatched = pair_regions(group, value[sort] != 0)
        o_i, c_i, u_i = sort[o], sort[c], sort[unclosed]
        self.pair_counts = {
            "total": len(etype), "interval_begin": len(o_i) + len(u_i),
            "interval_end": len(c_i), "unclosed_at_trace_end": len(u_i),
            "unmatched_end": len(unmatched), "counters": int(is_counter.sum()),
            "instants": len(etype) - len(ridx) - int(is_counter.sum()) + len(unmatched),
        }
        if len(u_i):
            warnings.warn(f"{self.display}: {len(u_i)} region(s) still open at the end of "
                          "the trace; closed at the trace end", DataQualityWarning,
                          stacklevel=4)
        if len(unmatched):
            warnings.warn(f"{self.display}: {len(unmatched)} region end event(s) without a "
                          "begin (e.g. a chopped trace); kept as instants",
                          DataQualityWarning, stacklevel=4)
        opened = np.concatenate([o_i, u_i])
        ends = np.concatenate([time[c_i], np.full(len(u_i), self.header.end_ns + self.origin,
                                                  dtype=np.int64)])
        intervals = self.region_intervals(opened, ends, len(u_i), rank, thread, time, etype,
                                          value, region_cat)
        inst = np.sort(np.concatenate([np.flatnonzero(~is_region & ~is_counter),
                                       sort[unmatched]]))
        instants = self.instant_rows(inst, rank, thread, time, etype, value, region_cat)
        cidx = np.flatnonzero(is_counter)
        cnames, cinv = _codes(etype[cidx])
        self.counter_types = {pcf.type_label(t): t for t in cnames.tolist()}
        counters = {
            "rank": rank[cidx], "track_id": thread[cidx], "ts_ns": time[cidx],
            "name": _dict(cinv, [pcf.type_label(t) for t in cnames.tolist()]),
            "value": value[cidx].astype(np.float64),
        }
        return intervals, instants, counters

    def region_intervals(self, opened: I64, ends: I64, n_unclosed: int, rank: I64,
                         thread: I64, time: I64, etype: I64, value: I64,
                         region_cat: dict[int, str | None]) -> dict[str, Any]:
        pcf = self.pcf
        uniq, inverse = _unique_pairs(etype[opened], value[opened])
        names = [_value_label(pcf, t, v) for t, v in uniq.tolist()]
        cats = [_device_op(region_cat[t], n) for (t, _), n in zip(uniq.tolist(), names,
                                                                   strict=True)]
        srcs = [pcf.type_label(t) for t, _ in uniq.tolist()]
        closed_flag = np.zeros(len(opened), dtype=bool)
        closed_flag[len(opened) - n_unclosed:] = True
        # args built once per (type, value) and per closed flag, then taken per row
        texts = [f'{{"type": {t}, "value": {v}' for t, v in uniq.tolist()]
        args = pa.array([t + "}" for t in texts] + [t + ', "closed_at_trace_end": true}'
                                                    for t in texts], pa.string()).take(
            pa.array(inverse + closed_flag * len(texts)))
        return {
            "rank": rank[opened], "track_id": thread[opened], "start_ns": time[opened],
            "end_ns": ends, "name": _dict(inverse, names), "category": _dict(inverse, cats),
            "source_category": _dict(inverse, srcs), "args": args,
        }

    def instant_rows(self, idx: I64, rank: I64, thread: I64, time: I64, etype: I64,
                     value: I64, region_cat: dict[int, str | None]) -> dict[str, Any]:
        pcf = self.pcf
        uniq, inverse = _unique_pairs(etype[idx], value[idx])
        names, cats, srcs, args = [], [], [], []
        for t, v in uniq.tolist():
            label = pcf.types[t].values.get(v) if t in pcf.types else None
            own = pcf.instant_category(t)
            names.append((label or str(v)) if own else pcf.type_label(t))
            cats.append(own or region_cat.get(t) or "other")
            srcs.append(pcf.type_label(t))
            args.append(json.dumps({"type": t, "value": v, "value_label": label}))
        return {
            "rank": rank[idx], "track_id": thread[idx], "ts_ns": time[idx],
            "name": _dict(inverse, names), "category": _dict(inverse, cats),
            "source_category": _dict(inverse, srcs), "phase": _const("paraver event", len(idx)),
            "args": pa.array(args, pa.string()).take(pa.array(inverse)),
        }

    def messages(self) -> dict[str, Any]:
        c, o = self.body.comms, self.origin
        return {
            "rank": self.rank_of(c[:, 2], c[:, 3]), "src_rank": self.rank_of(c[:, 2], c[:, 3]),
            "dst_rank": self.rank_of(c[:, 8], c[:, 9]),
            "send_start_ns": c[:, 5] + o, "send_end_ns": c[:, 6] + o,
            "recv_start_ns": c[:, 11] + o, "recv_end_ns": c[:, 12] + o,
            "bytes": c[:, 13], "tag": c[:, 14],
        }

    def tracks(self, intervals: dict[str, Any] | None) -> dict[str, Any]:
        h = self.header
        names = self.rows.get("THREAD", [])
        node_names = self.rows.get("NODE", [])
        rank_l, thread_l, host_l = [], [], []
        for a, per_task in enumerate(h.threads):
            for t, n in enumerate(per_task):
                node = h.nodes[a][t]
                host = node_names[node - 1] if 0 < node <= len(node_names) else None
                for th in range(1, n + 1):
                    rank_l.append(h.task_offsets[a] + t)
                    thread_l.append(th)
                    host_l.append(host)
        rank, thread = np.asarray(rank_l, np.int64), np.asarray(thread_l, np.int64)
        name_l = [names[i] if i < len(names) else f"THREAD {r + 1}.{th}"
                  for i, (r, th) in enumerate(zip(rank_l, thread_l, strict=True))]
        device_only = self.device_only_threads(intervals, rank, thread)
        kinds = np.where(device_only, "gpu_stream", "host_thread").astype(object)
        dev, stream = np.full(len(rank), -1, np.int64), np.full(len(rank), -1, np.int64)
        for i in np.flatnonzero(device_only).tolist():
            m = _STREAM_NAME.search(name_l[i])
            dev[i], stream[i] = (int(m.group(1)), int(m.group(2))) if m else (-1, thread[i])
        return {
            "rank": rank, "track_id": thread, "kind": kinds,
            "name": pa.array(name_l, pa.string()), "host": pa.array(host_l, pa.string()),
            "tid": thread, "device": dev, "stream": stream,
            "source_tid": pa.array([str(t) for t in thread_l], pa.string()),
        }

    def device_only_threads(self, intervals: dict[str, Any] | None, rank: I64,
                            thread: I64) -> npt.NDArray[np.bool_]:
        """Threads whose non-state intervals are all device activity (at least one)."""
        out = np.zeros(len(rank), dtype=bool)
        if intervals is None or not len(intervals["rank"]):
            return out
        cat = intervals["category"]  # Arrow kernels: no Python string per row
        key = intervals["rank"] * (1 << 32) + intervals["track_id"]
        dev = _mask(pc.is_in(cat, value_set=pa.array(sorted(DEVICE_CATEGORIES), pa.string())))
        other = _mask(pc.not_equal(cat, "state"), null=True) & ~dev
        track_key = rank * (1 << 32) + thread
        return np.isin(track_key, key[dev]) & ~np.isin(track_key, key[other])

    def with_depth(self, intervals: dict[str, Any] | None,
                   tracks: dict[str, Any]) -> dict[str, Any] | None:
        if intervals is None:
            return None
        key = intervals["rank"] * (1 << 32) + intervals["track_id"]
        device_keys = (tracks["rank"] * (1 << 32) + tracks["track_id"])[
            tracks["kind"] == "gpu_stream"]
        start, end = intervals["start_ns"], intervals["end_ns"]
        order = sort_for_nesting(key, start, end)
        depth = np.empty(len(order), dtype=np.int64)
        depth[order] = nesting_depth(key[order], start[order], end[order],
                                     np.isin(key, device_keys)[order])
        intervals["depth"] = depth
        intervals["dur_ns"] = end - start
        intervals["step"] = np.full(len(start), -1, dtype=np.int64)
        return intervals

    def metadata(self, rank: int) -> pa.Table:
        b = self.body
        mine = {k: int(v[rank]) for k, v in self.rank_records.items()}
        items: dict[str, Any] = {
            "source_file": self.display,
            "paraver_header": self.header.text,
            "paraver_time_unit": self.header.unit,
            "paraver_time_origin_ns": self.origin,
            "paraver_end_ns": self.header.end_ns + self.origin,
            "paraver_record_counts_file": b.counts,
            "paraver_record_counts_rank": mine,
            "paraver_event_pairs_file": self.pair_counts,
            "paraver_records_dropped": b.drops.count,
            "paraver_messages_received_before_sent": b.received_before_sent,
            "paraver_pcf": self.companions["pcf"],
            "paraver_row": self.companions["row"],
            "paraver_undeclared_event_types": self.undeclared,
            "paraver_counter_types": self.counter_types,
            "paraver_states_derived": self.pcf.derived_states,
            "paraver_applications": [len(t) for t in self.header.threads],
            DATA_QUALITY_KEY: self.notes,
        }
        if self._shared_json is None:  # all but the rank's counts: encoded once
            items[DATA_QUALITY_KEY] = notes_json(self.notes)
            self._shared_json = {k: json.dumps(v) for k, v in items.items()}
        shared = self._shared_json
        values = [json.dumps(mine) if k == "paraver_record_counts_rank" else shared[k]
                  for k in items]
        return pa.table({"key": pa.array(list(items), pa.string()),
                         "value": pa.array(values, pa.string())})


def _without_records(body: Body) -> Body:
    """``body`` with empty record arrays (counts, drops and the rest kept): the arrays
    (~3 times the .prv in bytes) are freed once the tables' columns are built."""
    def empty(rows: I64) -> I64:
        return np.zeros((0, *rows.shape[1:]), dtype=np.int64)

    return dataclasses.replace(
        body, states=empty(body.states), state_lines=empty(body.state_lines),
        ev_fields=empty(body.ev_fields), ev_lines=empty(body.ev_lines),
        pairs=empty(body.pairs), comms=empty(body.comms))


def _mask(array: Any, null: bool = False) -> npt.NDArray[np.bool_]:
    """Boolean Arrow array -> numpy (nulls as ``null``, as numpy compares None)."""
    return np.asarray(pc.fill_null(array, null).to_numpy(zero_copy_only=False), dtype=bool)


def _device_op(category: str | None, name: str) -> str:
    """Region category; nsys2prv writes memsets with the memcpy type (name says which)."""
    if category == "memcpy" and "memset" in name.lower():
        return "memset"
    return category or "other"


def _value_label(pcf: Pcf, etype: int, value: int) -> str:
    info = pcf.types.get(etype)
    if info is not None and value in info.values:
        return info.values[value]
    return f"{pcf.type_label(etype)} {value}"


def _unique_pairs(a: I64, b: I64) -> tuple[I64, I64]:
    """Distinct (a, b) rows and the index of each row among them (Arrow hashing)."""
    key = np.ascontiguousarray(np.stack([a, b], axis=1), dtype=np.int64)
    if not len(key):
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64)
    rows = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(key),
                                                [None, pa.py_buffer(key)])
    encoded = pc.dictionary_encode(rows)
    uniq = np.frombuffer(encoded.dictionary.buffers()[1], dtype=np.int64,
                         count=2 * len(encoded.dictionary)).reshape(-1, 2)
    return uniq, np.asarray(encoded.indices.to_numpy(), dtype=np.int64)


def _codes(values: I64) -> tuple[I64, I64]:
    """``np.unique(values, return_inverse=True)`` by hashing and a binary search (no sort
    of ``values``; few distinct values here: states, event types)."""
    uniq = np.unique(values)
    return uniq, np.asarray(np.searchsorted(uniq, values), dtype=np.int64)


def _stable_order(key: I64, keys: tuple[I64, ...]) -> I64:
    """Stable argsort of ``key`` (a radix sort when it fits 16 bits); ``np.lexsort(keys)``
    when ``key`` may have overflowed (negative or past 2^62)."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    low, high = int(key.min()), int(key.max())
    if low < 0 or high >= 1 << 62:
        return np.asarray(np.lexsort(keys), dtype=np.int64)
    small = key.astype(np.uint16) if high < 1 << 16 else key
    return np.asarray(np.argsort(small, kind="stable"), dtype=np.int64)


def _region_order(ridx: I64, rank: I64, thread: I64, etype: I64, time: I64,
                  order: I64) -> tuple[I64, I64]:
    """(``ridx`` sorted by (rank, thread, type, time, file order), group id of each).

    ``ridx`` is in file order; a stable sort on the group alone gives the same order
    whenever times never decrease within a group in file order (checked; otherwise the
    five-key lexsort)."""
    if not len(ridx):
        return ridx, np.zeros(0, dtype=np.int64)
    every = len(ridx) == len(rank)  # every event is a region: no gathers (ridx = 0..n-1)
    r, th, ty, tm = ((rank, thread, etype, time) if every else
                     (rank[ridx], thread[ridx], etype[ridx], time[ridx]))
    types, ty_code = _codes(ty)
    th_low = int(th.min())
    th_span = int(th.max()) - th_low + 1
    r_low = int(r.min())
    n_groups = (int(r.max()) - r_low + 1) * th_span * len(types)
    if n_groups < 1 << 62:
        key = ((r - r_low) * th_span + (th - th_low)) * len(types) + ty_code
        by_group = _stable_order(key, (key,))
        ks, ts = key[by_group], tm[by_group]
        change = ks[1:] != ks[:-1]
        if bool(np.all((ts[1:] >= ts[:-1]) | change)):
            group = np.empty(len(ks), dtype=np.int64)
            group[0] = 0
            np.cumsum(change, out=group[1:])
            return (by_group if every else ridx[by_group]), group
    sort = ridx[np.lexsort((order[ridx], time[ridx], etype[ridx], thread[ridx], rank[ridx]))]
    return sort, _group_ids(np.stack([rank[sort], thread[sort], etype[sort]], axis=1))


def _group_ids(key: I64) -> I64:
    """Consecutive ids for rows of sorted ``key`` (new id where any column changes)."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    change = np.any(key[1:] != key[:-1], axis=1)
    return np.concatenate(([0], np.cumsum(change))).astype(np.int64)


def _dict(indices: Any, labels: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.asarray(indices, np.int32)),
                                          pa.array(labels, pa.string()))


def _const(text: str, n: int) -> pa.DictionaryArray:
    return _dict(np.zeros(n, np.int32), [text])


def _concat(parts: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    out: dict[str, Any] = {}
    for col in present[0]:
        values = [p[col] for p in present]
        if isinstance(values[0], np.ndarray):
            out[col] = np.concatenate(values)
        elif all(v.type == values[0].type for v in values):  # dictionaries are unified
            out[col] = pa.concat_arrays(values)
        else:
            out[col] = pa.concat_arrays([v.cast(pa.string()) for v in values])
    return out


def _split(name: str, columns: dict[str, Any] | None, n_ranks: int) -> list[pa.Table]:
    """Columns with a ``rank`` column -> one table per rank (without ``rank``)."""
    if columns is None:
        return [empty_table(name).drop_columns(["rank"]) for _ in range(n_ranks)]
    rank = np.asarray(columns["rank"], dtype=np.int64)
    table = pa.table({k: (pa.array(v) if isinstance(v, np.ndarray) else v)
                      for k, v in columns.items() if k != "rank"})
    if len(rank) and bool(np.any(rank[1:] < rank[:-1])):  # else already by rank
        order = np.argsort(rank.astype(np.uint16) if n_ranks <= 1 << 16 else rank,
                           kind="stable")
        table, rank = table.take(pa.array(order)), rank[order]
    bounds = np.searchsorted(rank, np.arange(n_ranks + 1))
    return [table.slice(int(bounds[r]), int(bounds[r + 1] - bounds[r]))
            for r in range(n_ranks)]
