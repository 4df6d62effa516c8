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

How: the body is split into lines with numpy (newline positions) into one Arrow string
array, lines are grouped by record type from their first byte, and each group is split on
``:`` and cast to int64 by Arrow, so no Python loop runs over records; region pairing
and depth are numpy.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import CorruptTraceError, DataQualityWarning, UnsupportedFormatError
from traceatlas.io.paraver_pcf import (
    TIME_ORIGIN_RE,
    Pcf,
    parse_pcf,
    parse_row,
    read_companion,
)
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.model.schema import DEVICE_CATEGORIES, empty_table
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting

I64 = npt.NDArray[np.int64]
CLOCK_METHOD = "Paraver (one clock for all tasks)"
UNITS_NS: dict[str, int] = {"ns": 1, "us": 1_000, "ms": 1_000_000}
"""Header time unit suffix -> ns per unit (no suffix: us)."""
_HEADER = re.compile(
    r"^#Paraver \((?P<date>[^)]*)\):(?P<end>\d+)(?:_(?P<unit>ns|us|ms))?:"
    r"(?P<resources>\d+(?:\([\d,\s]*\))?):(?P<n_appl>\d+):(?P<apps>.*)$"
)
_APP = re.compile(r"(\d+)\(([^)]*)\)")
_STREAM_NAME = re.compile(r"(?:GPU|CUDA-D|device)\s*(\d+).*?(?:stream|\.S|S)\s*(\d+)",
                          re.IGNORECASE)
_RECORD_FIELDS = {1: 8, 3: 15}


@dataclass(frozen=True)
class Header:
    """The first line of a ``.prv``: end time, unit and process model."""

    text: str
    end_ns: int
    unit: str
    threads: list[list[int]]  # per application, threads per task
    nodes: list[list[int]]  # per application, node of each task (1-based, 0 = none)
    n_communicators: int

    @property
    def task_offsets(self) -> list[int]:
        """Rank of the first task of each application."""
        sizes = [len(t) for t in self.threads]
        return [sum(sizes[:i]) for i in range(len(sizes))]

    @property
    def n_tasks(self) -> int:
        """Tasks of all applications."""
        return sum(len(t) for t in self.threads)


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
        """Parse one Paraver trace into one ``RankData`` per task."""
        if source.member is not None:
            raise UnsupportedFormatError(
                source.display, "Paraver traces inside an archive are not supported; "
                "extract the .prv with its .pcf and .row and ingest the .prv"
            )
        data = source.read_bytes()
        header, body_at = parse_header(data, source.display)
        prv = Path(source.path)
        pcf_text = read_companion(prv, ".pcf")
        if pcf_text is None:
            warnings.warn(f"{source.display}: no .pcf beside the trace; states and event "
                          "types keep numeric labels", DataQualityWarning, stacklevel=2)
        pcf = parse_pcf(pcf_text or "")
        row_text = read_companion(prv, ".row")
        rows = parse_row(row_text or "")
        body = _Body.parse(data, body_at, header, source.display)
        del data
        return _Assembler(source, header, pcf, rows, body).ranks()


def parse_header(data: bytes, display: str) -> tuple[Header, int]:
    """Parse the header line; return it and the offset of the first body line."""
    start = 0
    if data.startswith(b"new format"):
        start = data.find(b"\n") + 1
    end = data.find(b"\n", start)
    end = len(data) if end < 0 else end
    line = data[start:end].decode("ascii", errors="replace").rstrip("\r")
    match = _HEADER.match(line)
    if match is None:
        raise CorruptTraceError(display, f"broken Paraver header {line[:120]!r} (expected "
                                "'#Paraver (<date>):<end>[_ns|_us|_ms]:<resources>:"
                                "<n_appl>:<tasks>(<threads>:<node>,...)')")
    apps = list(_APP.finditer(match["apps"]))
    n_appl = int(match["n_appl"])
    tail = match["apps"][apps[-1].end():] if apps else match["apps"]
    if len(apps) != n_appl or not re.fullmatch(r"(,\d+)?\s*", tail):
        raise CorruptTraceError(display, f"broken Paraver header: process model "
                                f"{match['apps']!r} does not list {n_appl} application(s)")
    threads: list[list[int]] = []
    nodes: list[list[int]] = []
    for app in apps:
        tasks = [t.split(":") for t in app.group(2).split(",") if t.strip()]
        if len(tasks) != int(app.group(1)) or any(
            len(t) != 2 or not (t[0].strip().isdigit() and t[1].strip().isdigit())
            for t in tasks
        ):
            raise CorruptTraceError(display, f"broken Paraver header: application "
                                    f"{app.group(0)!r} is not <tasks>(<threads>:<node>,...)")
        threads.append([int(t[0]) for t in tasks])
        nodes.append([int(t[1]) for t in tasks])
    unit = match["unit"] or "us"
    header = Header(line, int(match["end"]) * UNITS_NS[unit], unit, threads, nodes,
                    int(tail.strip(", ") or 0))
    return header, end + 1


@dataclass
class _Body:
    """Body records as int64 columns (times already in ns, without the time origin)."""

    counts: dict[str, int]
    states: I64  # (n, 8) fields
    state_lines: I64
    ev_fields: I64  # (n_lines, 6): type, cpu, appl, task, thread, time
    ev_lines: I64
    pairs: I64  # (n_pairs, 4): event line index, type, value, order
    comms: I64  # (n, 15)
    origin_ns: int

    @classmethod
    def parse(cls, data: bytes, at: int, header: Header, display: str) -> _Body:
        buf = np.frombuffer(data, dtype=np.uint8)
        newlines = np.flatnonzero(buf == 10)
        starts = np.concatenate(([at], newlines[newlines >= at] + 1)).astype(np.int64)
        starts = starts[starts < len(buf)]
        offsets = np.append(starts, len(buf)).astype(np.int64)
        lines = pa.LargeStringArray.from_buffers(
            len(starts), pa.py_buffer(offsets), pa.py_buffer(data)
        )
        line_no = np.arange(len(starts), dtype=np.int64) + 2 + data[:at].count(b"\n") - 1
        first = buf[starts]
        second = buf[np.minimum(starts + 1, len(buf) - 1)]
        is_record = (second == ord(":")) & np.isin(first, np.frombuffer(b"1234", np.uint8))
        kind = np.where(is_record, first - ord("0"), 0).astype(np.int64)
        counts = {str(k): int(np.count_nonzero(kind == k)) for k in (1, 2, 3, 4)}
        other = first[~is_record]
        counts["comment"] = int(np.count_nonzero(other == ord("#")))
        counts["communicator"] = int(np.count_nonzero(np.isin(other, np.frombuffer(
            b"cCiI", np.uint8))))
        blank = np.isin(other, np.frombuffer(b"\n\r", np.uint8))
        counts["unrecognised"] = len(other) - counts["comment"] - counts["communicator"] - int(
            np.count_nonzero(blank))
        if counts["unrecognised"]:
            warnings.warn(f"{display}: {counts['unrecognised']} body line(s) are not Paraver "
                          "records (type 1-4), comments or communicators; skipped",
                          DataQualityWarning, stacklevel=3)
        if counts["4"]:
            warnings.warn(f"{display}: {counts['4']} global communication record(s) (type 4) "
                          "are counted in metadata but not kept", DataQualityWarning,
                          stacklevel=3)
        origin = 0
        comment_idx = np.flatnonzero(first == ord("#"))
        for i in comment_idx[:16].tolist():
            found = TIME_ORIGIN_RE.match(lines[i].as_py().strip())
            if found:
                origin = int(found.group(1))
        unit = UNITS_NS[header.unit]

        def fields(k: int) -> tuple[I64, I64, I64]:
            idx = np.flatnonzero(kind == k)
            sub = pc.utf8_rtrim_whitespace(lines.take(pa.array(idx)))
            parts = pc.split_pattern(sub, ":")
            lengths = pc.list_value_length(parts).to_numpy().astype(np.int64)
            values = _to_int(pc.list_flatten(parts), lengths, line_no[idx], display)
            return values, lengths, line_no[idx]

        states, lengths, state_lines = fields(1)
        _check_lengths(lengths, state_lines, lambda n: n == 8, "a state needs 8 fields", display)
        states = states.reshape(-1, 8)
        states[:, 5:7] *= unit
        flat, lengths, ev_lines = fields(2)
        _check_lengths(lengths, ev_lines, lambda n: (n >= 8) & (n % 2 == 0),
                       "an event needs 6 fields and type:value pairs", display)
        line_at = (np.cumsum(lengths) - lengths).astype(np.int64)
        ev_fields = flat[line_at[:, None] + np.arange(6)]
        ev_fields[:, 5] *= unit
        n_pairs = (lengths - 6) // 2
        owner = np.repeat(np.arange(len(lengths), dtype=np.int64), n_pairs)
        j = np.arange(len(owner), dtype=np.int64) - np.repeat(
            np.cumsum(n_pairs) - n_pairs, n_pairs)
        at_type = line_at[owner] + 6 + 2 * j
        stride = int(n_pairs.max(initial=0)) + 1
        pairs = np.stack([owner, flat[at_type], flat[at_type + 1], owner * stride + j], axis=1)
        comms, lengths, comm_lines = fields(3)
        _check_lengths(lengths, comm_lines, lambda n: n == 15,
                       "a communication needs 15 fields", display)
        comms = comms.reshape(-1, 15)
        comms[:, [5, 6, 11, 12]] *= unit
        body = cls(counts, states, state_lines, ev_fields, ev_lines, pairs, comms, origin)
        body.check_objects(header, display)
        return body

    def check_objects(self, header: Header, display: str) -> None:
        """Every record names an application, task and thread of the header."""
        refs: list[tuple[I64, I64 | None]] = [(self.states[:, 2:5], self.state_lines),
                                              (self.ev_fields[:, 2:5], self.ev_lines)]
        refs += [(self.comms[:, 2:5], None), (self.comms[:, 8:11], None)]
        for obj, lines in refs:
            if not len(obj):
                continue
            bad = ~valid_objects(obj, header)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                where = f"line {lines[i]}" if lines is not None else "a communication"
                raise CorruptTraceError(display, f"{where} refers to application:task:thread "
                                        f"{':'.join(map(str, obj[i].tolist()))}, which the "
                                        "header does not declare")


def valid_objects(obj: I64, header: Header) -> npt.NDArray[np.bool_]:
    """Rows (appl, task, thread) that exist in the header's process model."""
    ok = (obj[:, 0] >= 1) & (obj[:, 0] <= len(header.threads)) & (obj[:, 1] >= 1) & (
        obj[:, 2] >= 1)
    for a, per_task in enumerate(header.threads, start=1):
        in_app = obj[:, 0] == a
        limit = np.asarray([0, *per_task], dtype=np.int64)
        task = np.clip(obj[:, 1], 0, len(per_task))
        ok &= ~in_app | ((obj[:, 1] <= len(per_task)) & (obj[:, 2] <= limit[task]))
    return ok


def _to_int(values: Any, lengths: I64, lines: I64, display: str) -> I64:
    try:
        return np.asarray(pc.cast(values, pa.int64()).to_numpy(), dtype=np.int64).copy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ends = np.cumsum(lengths)
        digits = pc.match_substring_regex(values, r"^-?\d{1,18}$").to_numpy(
            zero_copy_only=False)
        bad = int(np.flatnonzero(~digits)[0]) if not digits.all() else 0
        line = lines[int(np.searchsorted(ends, bad, side="right"))]
        raise CorruptTraceError(display, f"line {line}: field {values[bad].as_py()!r} is "
                                "not an integer") from None


def _check_lengths(lengths: I64, lines: I64, ok: Any, what: str, display: str) -> None:
    bad = ~np.asarray(ok(lengths), dtype=bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CorruptTraceError(display, f"line {lines[i]}: {what} (found {lengths[i]})")


def pair_regions(group: I64, opens: npt.NDArray[np.bool_]) -> tuple[I64, I64, I64, I64]:
    """LIFO pairing of open/close events sorted by (group, time, file order).

    Returns (open index, matching close index, unclosed opens, unmatched closes). A close
    with no open in its group is unmatched; the clipped running depth (depth minus its
    running minimum) makes every later event pair as if that close were absent.
    """
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
    seq = keep[np.lexsort((keep, level[keep], group[keep]))]
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
                 rows: dict[str, list[str]], body: _Body) -> None:
        self.source, self.header, self.pcf, self.rows, self.body = source, header, pcf, rows, body
        self.display = source.display
        self.origin = body.origin_ns
        self.offsets = np.asarray(header.task_offsets, dtype=np.int64)
        self.pair_counts: dict[str, int] = {}
        self.undeclared: list[int] = []
        self.counter_types: dict[str, int] = {}  # counter name -> event type (for export)

    def rank_of(self, appl: I64, task: I64) -> I64:
        """Rank of (application, task) columns: application offset + task - 1."""
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
        tracks = self.tracks(intervals)
        intervals = self.with_depth(intervals, tracks)
        b = self.body
        self.rank_records = {
            k: np.bincount(self.rank_of(arr[:, 2], arr[:, 3]), minlength=h.n_tasks)
            for k, arr in (("1", b.states), ("2", b.ev_fields), ("3", b.comms))
        }
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
        uniq, inverse = np.unique(values, return_inverse=True)
        labels = [self.pcf.states.get(int(v), f"state {int(v)}") for v in uniq.tolist()]
        args = pc.binary_join_element_wise(
            '{"cpu": ', pa.array(s[:, 1]).cast(pa.string()), ', "state": ',
            pa.array(values).cast(pa.string()), "}", "")
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
        fields = b.ev_fields[line]
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
        sort = ridx[np.lexsort((order[ridx], time[ridx], etype[ridx], thread[ridx],
                                rank[ridx]))]
        group_key = np.stack([rank[sort], thread[sort], etype[sort]], axis=1)
        group = _group_ids(group_key)
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
        cnames, cinv = np.unique(etype[cidx], return_inverse=True)
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
        args = pc.binary_join_element_wise(
            '{"type": ', pa.array(etype[opened]).cast(pa.string()), ', "value": ',
            pa.array(value[opened]).cast(pa.string()),
            pc.if_else(pa.array(closed_flag), ', "closed_at_trace_end": true}', "}"), "")
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
        cat = intervals["category"].to_numpy(zero_copy_only=False)
        key = intervals["rank"] * (1 << 32) + intervals["track_id"]
        dev = np.isin(cat, list(DEVICE_CATEGORIES))
        other = (cat != "state") & ~dev
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
        prv = Path(self.source.path)
        items: dict[str, Any] = {
            "source_file": self.display,
            "paraver_header": self.header.text,
            "paraver_time_unit": self.header.unit,
            "paraver_time_origin_ns": self.origin,
            "paraver_end_ns": self.header.end_ns + self.origin,
            "paraver_record_counts_file": b.counts,
            "paraver_record_counts_rank": mine,
            "paraver_event_pairs_file": self.pair_counts,
            "paraver_pcf": read_companion(prv, ".pcf") is not None,
            "paraver_row": read_companion(prv, ".row") is not None,
            "paraver_undeclared_event_types": self.undeclared,
            "paraver_counter_types": self.counter_types,
            "paraver_states_derived": self.pcf.derived_states,
            "paraver_applications": [len(t) for t in self.header.threads],
        }
        return pa.table({"key": pa.array(list(items), pa.string()),
                         "value": pa.array([json.dumps(v) for v in items.values()],
                                           pa.string())})


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
        else:
            out[col] = pa.concat_arrays([v.cast(pa.string()) for v in values])
    return out


def _split(name: str, columns: dict[str, Any] | None, n_ranks: int) -> list[pa.Table]:
    """Columns with a ``rank`` column -> one table per rank (without ``rank``)."""
    if columns is None:
        return [empty_table(name).drop_columns(["rank"]) for _ in range(n_ranks)]
    rank = np.asarray(columns["rank"], dtype=np.int64)
    order = np.argsort(rank, kind="stable")
    bounds = np.searchsorted(rank[order], np.arange(n_ranks + 1))
    table = pa.table({k: (pa.array(v) if isinstance(v, np.ndarray) else v)
                      for k, v in columns.items() if k != "rank"}).take(pa.array(order))
    return [table.slice(int(bounds[r]), int(bounds[r + 1] - bounds[r]))
            for r in range(n_ranks)]
