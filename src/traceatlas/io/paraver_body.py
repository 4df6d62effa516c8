"""Paraver ``.prv`` header and body records -> int64 arrays (part of the Paraver reader,
``paraver.py``).

The body is split into lines with numpy (newline positions) into one Arrow string array,
lines are grouped by record type from their first byte, and each group is split on
``:`` and cast to int64 by Arrow, so no Python loop runs over records.

Damaged records are counted, dropped and reported, never kept: a line with the wrong
number of fields, a field that is not an integer (or a byte that is not ASCII), a time
out of range, an object the header does not declare, a state that ends before it
begins, and the last line when the file does not end with a line end (a truncated
file). When no record is usable the file is refused. Communications received before
they were sent (possible with clock skew) are kept and counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import CorruptTraceError
from traceatlas.io.paraver_pcf import TIME_ORIGIN_RE

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
UNITS_NS: dict[str, int] = {"ns": 1, "us": 1_000, "ms": 1_000_000}
"""Header time unit suffix -> ns per unit (no suffix: us)."""
TIME_LIMIT_NS = 1 << 62
"""Times (ns, origin included) must stay within +-2^62 (~146 years) so that every
difference fits in int64."""
MAX_THREADS = 1_000_000
"""Threads a header may declare (one track each is built before any record is read)."""
_HEADER = re.compile(
    r"^#Paraver \((?P<date>[^)]*)\):(?P<end>[0-9]{1,19})(?:_(?P<unit>ns|us|ms))?:"
    r"(?P<resources>[0-9]+(?:\([0-9,\s]*\))?):(?P<n_appl>[0-9]{1,6}):(?P<apps>.*)$",
    re.ASCII,
)
_APP = re.compile(r"([0-9]{1,9})\(([^)]*)\)", re.ASCII)
_TASK = re.compile(r"\s*([0-9]{1,9})\s*:\s*([0-9]{1,9})\s*", re.ASCII)
_FIELD = r"^-?[0-9]{1,18}$"
_TIME_FIELDS = {1: (5, 6), 2: (5,), 3: (5, 6, 11, 12)}
_OBJECT_FIELDS = {1: ((2, 5),), 2: ((2, 5),), 3: ((2, 5), (8, 11))}

BAD_FIELDS = "wrong number of fields"
NOT_INTEGER = "a field is not an integer"
TIME_RANGE = "a time out of range"
UNKNOWN_OBJECT = "an application:task:thread the header does not declare"
STATE_REVERSED = "a state that ends before it begins"
INCOMPLETE = "the last line has no line end (truncated file?)"


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
    if len(apps) != n_appl or not re.fullmatch(r"(,[0-9]{1,9})?\s*", tail, re.ASCII):
        raise CorruptTraceError(display, f"broken Paraver header: process model "
                                f"{match['apps'][:120]!r} does not list {n_appl} application(s)")
    threads: list[list[int]] = []
    nodes: list[list[int]] = []
    for app in apps:
        tasks = [_TASK.fullmatch(t) for t in app.group(2).split(",") if t.strip()]
        if len(tasks) != int(app.group(1)) or any(t is None for t in tasks):
            raise CorruptTraceError(display, f"broken Paraver header: application "
                                    f"{app.group(0)[:120]!r} is not "
                                    "<tasks>(<threads>:<node>,...)")
        threads.append([int(t[1]) for t in tasks if t is not None])
        nodes.append([int(t[2]) for t in tasks if t is not None])
    total = sum(map(sum, threads))
    if total > MAX_THREADS:
        raise CorruptTraceError(display, f"the Paraver header declares {total:,} threads "
                                f"(at most {MAX_THREADS:,} are read)")
    unit = match["unit"] or "us"
    end_ns = int(match["end"]) * UNITS_NS[unit]
    if end_ns >= TIME_LIMIT_NS:
        raise CorruptTraceError(display, f"the Paraver header's end time {match['end']} "
                                f"{unit} is out of range")
    header = Header(line, end_ns, unit, threads, nodes, int(tail.strip(", ") or 0))
    return header, end + 1


@dataclass
class Drops:
    """Record lines dropped, by reason: count and first line number (1-based)."""

    count: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str, lines: I64) -> None:
        """Count ``lines`` (line numbers) as dropped for ``reason``."""
        if len(lines):
            self.count[reason] = self.count.get(reason, 0) + len(lines)
            first = int(lines.min())
            self.first[reason] = min(self.first.get(reason, first), first)

    @property
    def total(self) -> int:
        """Record lines dropped for any reason."""
        return sum(self.count.values())

    def describe(self) -> str:
        """``<reason>: <n> (first: line <l>); ...``, reasons by first line."""
        order = sorted(self.count, key=lambda r: self.first[r])
        return "; ".join(f"{r}: {self.count[r]} (first: line {self.first[r]})" for r in order)


@dataclass
class Body:
    """Body records as int64 columns (times already in ns, without the time origin)."""

    counts: dict[str, int]
    states: I64  # (n, 8) fields
    state_lines: I64
    ev_fields: I64  # (n_lines, 6): type, cpu, appl, task, thread, time
    ev_lines: I64
    pairs: I64  # (n_pairs, 4): event line index, type, value, order
    comms: I64  # (n, 15)
    origin_ns: int
    drops: Drops
    received_before_sent: int

    @classmethod
    def parse(cls, data: bytes, at: int, header: Header, display: str) -> Body:
        """Records of the body starting at byte ``at`` (damaged ones dropped and counted
        in ``drops``; ``CorruptTraceError`` when none is usable)."""
        lines, starts, line_no = _split_lines(data, at)
        buf = np.frombuffer(data, dtype=np.uint8)
        first = buf[starts] if len(starts) else np.zeros(0, np.uint8)
        second = buf[np.minimum(starts + 1, len(buf) - 1)] if len(starts) else first
        is_record = (second == ord(":")) & np.isin(first, np.frombuffer(b"1234", np.uint8))
        kind = np.where(is_record, first - ord("0"), 0).astype(np.int64)
        counts = {str(k): int(np.count_nonzero(kind == k)) for k in (1, 2, 3, 4)}
        other = first[~is_record]
        counts["comment"] = int(np.count_nonzero(other == ord("#")))
        counts["communicator"] = int(np.count_nonzero(np.isin(other, np.frombuffer(
            b"cCiI", np.uint8))))
        counts["blank"] = int(np.count_nonzero(np.isin(other, np.frombuffer(b"\n\r", np.uint8))))
        counts["unrecognised"] = len(other) - counts["comment"] - counts["communicator"] \
            - counts["blank"]
        drops = Drops()
        # records must be ASCII (and complete): other lines never reach Arrow's kernels
        suspect = _non_ascii_lines(buf, starts)
        if len(starts) and data[-1:] != b"\n" and is_record[-1]:
            drops.add(INCOMPLETE, line_no[-1:])
            suspect[-1] = False
            kind[-1] = 0
        drops.add(NOT_INTEGER, line_no[suspect & is_record])
        kind[suspect] = 0
        origin = _origin(data, starts, first, display)
        limit = (TIME_LIMIT_NS - abs(origin)) // UNITS_NS[header.unit]
        parse = _Records(lines, line_no, kind, drops, header, limit)
        states, state_lines = parse.fixed(1, 8)
        reversed_ = states[:, 6] < states[:, 5]
        drops.add(STATE_REVERSED, state_lines[reversed_])
        states, state_lines = states[~reversed_], state_lines[~reversed_]
        flat, lengths, ev_lines = parse.events()
        comms, _comm_lines = parse.fixed(3, 15)
        unit = UNITS_NS[header.unit]
        states[:, 5:7] *= unit
        comms[:, [5, 6, 11, 12]] *= unit
        line_at = (np.cumsum(lengths) - lengths).astype(np.int64)
        ev_fields = flat[line_at[:, None] + np.arange(6)] if len(lengths) else \
            np.zeros((0, 6), np.int64)
        ev_fields[:, 5] *= unit
        n_pairs = (lengths - 6) // 2
        owner = np.repeat(np.arange(len(lengths), dtype=np.int64), n_pairs)
        j = np.arange(len(owner), dtype=np.int64) - np.repeat(
            np.cumsum(n_pairs) - n_pairs, n_pairs)
        at_type = line_at[owner] + 6 + 2 * j
        stride = int(n_pairs.max(initial=0)) + 1
        pairs = np.stack([owner, flat[at_type], flat[at_type + 1], owner * stride + j], axis=1)
        usable = len(states) + len(ev_fields) + len(comms) + counts["4"]
        if not usable and (drops.total or counts["unrecognised"]):
            what = drops.describe() or f"{counts['unrecognised']} line(s) are not Paraver records"
            raise CorruptTraceError(display, f"no usable Paraver record in the body ({what})")
        return cls(counts, states, state_lines, ev_fields, ev_lines, pairs, comms, origin,
                   drops, int(np.count_nonzero(comms[:, 12] < comms[:, 5])))


def _split_lines(data: bytes, at: int) -> tuple[pa.LargeStringArray, I64, I64]:
    """(lines from byte ``at`` as one Arrow array over ``data``, their start offsets,
    their 1-based line numbers). The array is not UTF-8 checked: only ASCII lines are
    given to string kernels."""
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    starts = np.concatenate(([at], newlines[newlines >= at] + 1)).astype(np.int64)
    starts = starts[starts < len(buf)]
    offsets = np.append(starts, len(buf)).astype(np.int64)
    lines = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets),
                                             pa.py_buffer(data))
    line_no = np.arange(len(starts), dtype=np.int64) + 2 + data[:at].count(b"\n") - 1
    return lines, starts, line_no


def _non_ascii_lines(buf: npt.NDArray[np.uint8], starts: I64) -> Mask:
    """Lines holding a byte >= 0x80 (none in a Paraver record)."""
    out = np.zeros(len(starts), dtype=bool)
    high = np.flatnonzero(buf >= 0x80)
    if len(high) and len(starts):
        idx = np.searchsorted(starts, high, side="right") - 1
        out[idx[idx >= 0]] = True
    return out


def _origin(data: bytes, starts: I64, first: npt.NDArray[np.uint8], display: str) -> int:
    """ns added to every time: a ``# traceatlas time_origin_ns=`` comment among the
    first 16 comments (0 without one)."""
    origin = 0
    for i in np.flatnonzero(first == ord("#"))[:16].tolist():
        end = data.find(b"\n", int(starts[i]))
        text = data[int(starts[i]): end if end >= 0 else len(data)]
        found = TIME_ORIGIN_RE.match(text.decode("utf-8", errors="replace").strip())
        if found and len(found.group(1)) <= 19:
            origin = int(found.group(1))
    if abs(origin) >= TIME_LIMIT_NS:
        raise CorruptTraceError(display, f"time origin {origin} ns is out of range")
    return origin


class _Records:
    """Splits the lines of one record type into int64 fields, dropping damaged ones."""

    def __init__(self, lines: pa.LargeStringArray, line_no: I64, kind: I64, drops: Drops,
                 header: Header, limit: int) -> None:
        self.lines, self.line_no, self.kind, self.drops = lines, line_no, kind, drops
        self.header, self.limit = header, limit

    def split(self, k: int, ok_length: Callable[[I64], Mask]) -> tuple[I64, I64, I64]:
        """(flat int64 fields, fields per line, line numbers) of the well-formed lines of
        type ``k`` (right field count, integers only)."""
        idx = np.flatnonzero(self.kind == k)
        sub = pc.utf8_rtrim_whitespace(self.lines.take(pa.array(idx)))
        parts = pc.split_pattern(sub, ":")
        lengths = pc.list_value_length(parts).to_numpy().astype(np.int64)
        flat = pc.list_flatten(parts)
        lines = self.line_no[idx]
        try:
            values = np.asarray(pc.cast(flat, pa.int64()).to_numpy(), dtype=np.int64)
            ints = np.ones(len(lengths), dtype=bool)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            digits = pc.match_substring_regex(flat, _FIELD)
            values = np.asarray(pc.cast(pc.if_else(digits, flat, "0"), pa.int64()).to_numpy(),
                                dtype=np.int64)
            bad = (~digits.to_numpy(zero_copy_only=False)).astype(np.int64)
            ends = np.cumsum(lengths)
            ints = np.diff(np.concatenate(([0], np.cumsum(bad)[ends - 1]))) == 0 \
                if len(lengths) else np.ones(0, dtype=bool)
        good_length = np.asarray(ok_length(lengths), dtype=bool)
        self.drops.add(BAD_FIELDS, lines[~good_length])
        self.drops.add(NOT_INTEGER, lines[good_length & ~ints])
        keep = good_length & ints
        return values[np.repeat(keep, lengths)].copy(), lengths[keep], lines[keep]

    def checked(self, k: int, rows: I64, lines: I64) -> Mask:
        """Rows (leading fields of each line) whose times are in range and whose objects
        the header declares; the others are counted as dropped."""
        times = rows[:, list(_TIME_FIELDS[k])]
        in_range = ((times >= 0) & (times <= self.limit)).all(axis=1)
        self.drops.add(TIME_RANGE, lines[~in_range])
        known = np.ones(len(rows), dtype=bool)
        for lo, hi in _OBJECT_FIELDS[k]:
            known &= valid_objects(rows[:, lo:hi], self.header)
        self.drops.add(UNKNOWN_OBJECT, lines[in_range & ~known])
        keep: Mask = in_range & known
        return keep

    def fixed(self, k: int, n: int) -> tuple[I64, I64]:
        """(rows of ``n`` fields, line numbers) of the usable type-``k`` records."""
        flat, _lengths, lines = self.split(k, lambda m: m == n)
        rows = flat.reshape(-1, n)
        keep = self.checked(k, rows, lines)
        return rows[keep], lines[keep]

    def events(self) -> tuple[I64, I64, I64]:
        """(flat fields, fields per line, line numbers) of the usable event records."""
        flat, lengths, lines = self.split(2, lambda m: (m >= 8) & (m % 2 == 0))
        line_at = (np.cumsum(lengths) - lengths).astype(np.int64)
        head = flat[line_at[:, None] + np.arange(6)] if len(lengths) else \
            np.zeros((0, 6), np.int64)
        keep = self.checked(2, head, lines)
        return flat[np.repeat(keep, lengths)], lengths[keep], lines[keep]


def valid_objects(obj: I64, header: Header) -> Mask:
    """Rows (appl, task, thread) that exist in the header's process model."""
    ok = (obj[:, 0] >= 1) & (obj[:, 0] <= len(header.threads)) & (obj[:, 1] >= 1) & (
        obj[:, 2] >= 1)
    for a, per_task in enumerate(header.threads, start=1):
        in_app = obj[:, 0] == a
        limit = np.asarray([0, *per_task], dtype=np.int64)
        task = np.clip(obj[:, 1], 0, len(per_task))
        ok &= ~in_app | ((obj[:, 1] <= len(per_task)) & (obj[:, 2] <= limit[task]))
    return np.asarray(ok, dtype=bool)
