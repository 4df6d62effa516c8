"""Fast ``.prv`` body parse (part of the Paraver reader): the same ``Body`` as
``paraver_body.Body.parse`` (which stays as the test oracle), built without splitting lines.

How: the body is cut into blocks of whole lines, parsed by a thread pool (numpy and
Arrow kernels release the GIL). In a block, every ``:`` and line end is found with numpy;
each field is one element of an Arrow string array over a copy of the block in which
every delimiter became a ``0`` (a field reads as ``0<digits>``: the same integer, nothing
sliced), and Arrow casts every field of every record line to int64 at once. A block with
an empty field, whitespace or a field that fails this cast (a negative value, damage)
takes the sliced route: fields are the bytes between delimiters, cut out of the file.
Rows of a record type and the event pairs are then gathered from the flat values by each
line's first field index, still in the block's thread. Damaged records are classified by
the same rules and in the same order as the oracle: a non-ASCII record line or a non-integer field
(``a field is not an integer``), a field count the type does not allow (``wrong number of
fields``, checked first), times out of range, undeclared objects, reversed states and a
last line without a line end. Line numbers are 1-based file lines.

One difference from the oracle, on damaged files only: the oracle's fallback to a strict
``-?[0-9]{1,18}`` field check is decided per record type over the whole file, here per
block; both keep every field Arrow's int64 cast accepts when no field of the block fails.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import CorruptTraceError
from traceatlas.io.paraver_body import (
    _FIELD,
    BAD_FIELDS,
    INCOMPLETE,
    NOT_INTEGER,
    STATE_REVERSED,
    TIME_LIMIT_NS,
    UNITS_NS,
    Body,
    Drops,
    Header,
    _Records,
)
from traceatlas.io.paraver_pcf import TIME_ORIGIN_RE

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
BLOCK_BYTES = 4 << 20
"""Body bytes per block (cut at the next line end)."""
_FIXED = {1: 8, 3: 15}
_COMMENTS = 16
_INCOMPLETE, _SUSPECT = -2, -1


@dataclass
class _Kind:
    """Well-formed lines of one record type in a block: first field index (into the
    block's values), field count, block-local line index."""

    at: I64
    lengths: I64
    lines: I64


@dataclass
class _Block:
    """One block's parse: flat int64 values, lines per record type, local drops."""

    values: I64
    kinds: dict[int, _Kind]
    n_lines: int
    counts: dict[str, int]
    drops: list[tuple[int, str, I64]] = field(default_factory=list)  # (stage, reason, lines)
    comments: list[int] = field(default_factory=list)  # byte offsets of comment lines
    rows: dict[int, I64] = field(default_factory=dict)  # leading fields per record type
    pairs: tuple[I64, I64, I64] | None = None  # events: (type, value, pairs per line)


def parse_body(data: bytes, at: int, header: Header, display: str, *,
               threads: int = 1, block_bytes: int = BLOCK_BYTES) -> Body:
    """Records of the body starting at byte ``at``; same result as ``Body.parse``."""
    bounds = _blocks(data, at, block_bytes)
    with ThreadPoolExecutor(max(1, threads)) as pool:
        blocks = list(pool.map(lambda b: _parse_block(data, b[0], b[1]), bounds))
    first_line = data[:at].count(b"\n") + 1
    bases = np.cumsum([0] + [b.n_lines for b in blocks])[:-1] + first_line
    counts = {k: sum(b.counts[k] for b in blocks) for k in blocks[0].counts} if blocks \
        else dict.fromkeys(("1", "2", "3", "4", "comment", "communicator", "blank",
                            "unrecognised"), 0)
    drops = Drops()

    def add_stage(stage: int) -> None:
        # reasons are added in the oracle's order (it keeps them in that order)
        for reason in (INCOMPLETE, BAD_FIELDS, NOT_INTEGER):
            for block, base in zip(blocks, bases.tolist(), strict=True):
                for at_stage, why, lines in block.drops:
                    if at_stage == stage and why == reason:
                        drops.add(reason, lines + base)

    add_stage(_INCOMPLETE)
    add_stage(_SUSPECT)
    origin = _origin(data, [c for b in blocks for c in b.comments][:_COMMENTS], display)
    limit = (TIME_LIMIT_NS - abs(origin)) // UNITS_NS[header.unit]
    check = _Records(pa.array([], pa.large_string()), np.zeros(0, np.int64),
                     np.zeros(0, np.int64), drops, header, limit)
    unit = UNITS_NS[header.unit]
    add_stage(1)
    states, state_lines = _fixed(blocks, bases, 1, check)
    ordered = states[:, 6] >= states[:, 5]
    drops.add(STATE_REVERSED, state_lines[~ordered])
    states, state_lines = _subset(states, ordered), _subset(state_lines, ordered)
    add_stage(2)
    ev_fields, ev_lines, pairs = _events(blocks, bases, check)
    add_stage(3)
    comms, _comm_lines = _fixed(blocks, bases, 3, check)
    states[:, 5:7] *= unit
    comms[:, [5, 6, 11, 12]] *= unit
    ev_fields[:, 5] *= unit
    usable = len(states) + len(ev_fields) + len(comms) + counts["4"]
    if not usable and (drops.total or counts["unrecognised"]):
        what = drops.describe() or f"{counts['unrecognised']} line(s) are not Paraver records"
        raise CorruptTraceError(display, f"no usable Paraver record in the body ({what})")
    return Body(counts, states, state_lines, ev_fields, ev_lines, pairs, comms, origin,
                drops, int(np.count_nonzero(comms[:, 12] < comms[:, 5])))


def _blocks(data: bytes, at: int, size: int) -> list[tuple[int, int]]:
    """[start, end) byte ranges of whole lines covering ``data[at:]``."""
    out, start = [], at
    while start < len(data):
        cut = data.find(b"\n", min(start + size, len(data)) - 1)
        end = len(data) if cut < 0 else cut + 1
        out.append((start, end))
        start = end
    return out


def _parse_block(data: bytes, b0: int, b1: int) -> _Block:
    """Classify the lines of ``data[b0:b1]`` and cast the fields of its record lines."""
    buf = np.frombuffer(data, dtype=np.uint8, count=b1 - b0, offset=b0)
    delim = buf == 58
    delim |= buf == 10
    pos = np.flatnonzero(delim)
    is_nl = buf[pos] == 10
    newlines = pos[is_nl]
    starts = np.concatenate(([0], newlines + 1))
    starts = starts[starts < len(buf)]
    n_lines = len(starts)
    complete = len(newlines)  # lines with a line end (all but possibly the last)
    first = buf[starts]
    second = buf[np.minimum(starts + 1, len(buf) - 1)]
    is_record = (second == ord(":")) & (first >= ord("1")) & (first <= ord("4"))
    kind = np.where(is_record, first - ord("0"), 0).astype(np.int64)
    counts = {str(k): int(np.count_nonzero(kind == k)) for k in (1, 2, 3, 4)}
    other = first[~is_record]
    counts["comment"] = int(np.count_nonzero(other == ord("#")))
    counts["communicator"] = int(np.count_nonzero(np.isin(other, np.frombuffer(
        b"cCiI", np.uint8))))
    counts["blank"] = int(np.count_nonzero((other == 10) | (other == 13)))
    counts["unrecognised"] = len(other) - counts["comment"] - counts["communicator"] \
        - counts["blank"]
    block = _Block(np.zeros(0, np.int64), {}, n_lines, counts)
    block.comments = (starts[np.flatnonzero(first == ord("#"))[:_COMMENTS]] + b0).tolist()
    suspect = np.zeros(n_lines, dtype=bool)
    high = np.flatnonzero(buf >= 0x80)
    if len(high):
        suspect[np.searchsorted(starts, high, side="right") - 1] = True
    if complete < n_lines and is_record[-1]:
        block.drops.append((_INCOMPLETE, INCOMPLETE, np.asarray([n_lines - 1], np.int64)))
        suspect[-1] = False
        kind[-1] = 0
    block.drops.append((_SUSPECT, NOT_INTEGER, np.flatnonzero(suspect & is_record)))
    kind[suspect] = 0
    kind = kind[:complete]
    # fields per complete line: delimiters up to and including its line end
    line_end_idx = np.flatnonzero(is_nl)
    per_line = np.diff(np.concatenate(([-1], line_end_idx))).astype(np.int64)
    rec = kind > 0
    if not rec.any():
        return block
    n_fields = int(line_end_idx[-1]) + 1
    field_rows = None if rec.all() else pa.array(np.flatnonzero(np.repeat(rec, per_line)))
    lengths = per_line[rec]
    line_at = np.cumsum(lengths) - lengths
    plain = np.count_nonzero(buf < 33) == len(newlines)  # no whitespace but line ends
    cast = _cast_zero_led(buf, delim, pos, n_fields, field_rows, len(lengths)) if plain and bool(
        np.all(pos[1:n_fields] - pos[: n_fields - 1] > 1)) else None
    if cast is None:
        cast = _cast_sliced(data, b0, pos, n_fields, field_rows, lengths, line_at, plain)
    values, ints = cast
    block.values = values
    local = np.flatnonzero(rec)
    rec_kind = kind[rec]
    for k in (1, 2, 3):
        sel = rec_kind == k
        n = lengths[sel]
        good = n == _FIXED[k] if k in _FIXED else (n >= 8) & (n % 2 == 0)
        lines = local[sel]
        block.drops.append((k, BAD_FIELDS, lines[~good]))
        block.drops.append((k, NOT_INTEGER, lines[good & ~ints[sel]]))
        keep = good & ints[sel]
        block.kinds[k] = _Kind(line_at[sel][keep], n[keep], lines[keep])
    _gather_block(block)
    return block


def _gather_block(block: _Block) -> None:
    """Rows of leading fields per record type and the event pairs of ``block`` (in the
    pool's thread: numpy's gathers release the GIL); the flat values are then freed."""
    values = block.values
    for k, width in ((1, 8), (2, 6), (3, 15)):
        if k in block.kinds:
            block.rows[k] = _take_rows(values, block.kinds[k].at, width)
    ev = block.kinds.get(2)
    if ev is not None:
        n = (ev.lengths - 6) // 2
        if not len(n) or (int(n.min()) == 1 and int(n.max()) == 1):  # one pair per line
            where = ev.at + 6
        else:
            where = np.repeat(ev.at + 6 - 2 * (np.cumsum(n) - n), n) + 2 * np.arange(
                int(n.sum()), dtype=np.int64)
        block.pairs = (values.take(where), values.take(where + 1), n)
    block.values = np.zeros(0, np.int64)


def _take_rows(values: I64, at: I64, width: int) -> I64:
    """(len(at), width) view of ``values[at + j]`` for j < width, stored by column."""
    out = np.empty((width, len(at)), dtype=np.int64)
    idx = np.empty(len(at), dtype=np.int64)
    for j in range(width):
        np.add(at, j, out=idx)
        values.take(idx, out=out[j], mode="clip")
    return out.T


def _cast_zero_led(buf: npt.NDArray[np.uint8], delim: Mask, pos: I64, n_fields: int,
                   rows: pa.Array | None, n_lines: int) -> tuple[I64, Mask] | None:
    """Every field cast at once, each read with the delimiter before it turned into a
    ``0`` (``:123`` -> ``0123``, the same integer) so no field is sliced; None when a
    field fails (a negative or damaged one: the caller slices). Needs fields that are not
    empty (no two delimiters side by side) and no whitespace but line ends."""
    text = np.where(delim, np.uint8(48), buf)  # delim: the ':' and line ends of buf
    offsets = np.empty(n_fields + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = pos[:n_fields]
    fields = pa.LargeStringArray.from_buffers(n_fields, pa.py_buffer(offsets),
                                              pa.py_buffer(text))
    if rows is not None:
        fields = fields.take(rows)
    try:
        values = np.asarray(pc.cast(fields, pa.int64()).to_numpy(), dtype=np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return values, np.ones(n_lines, dtype=bool)


def _cast_sliced(data: bytes, b0: int, pos: I64, n_fields: int, rows: pa.Array | None,
                 lengths: I64, line_at: I64, plain: bool) -> tuple[I64, Mask]:
    """Fields as the bytes between delimiters (trailing whitespace of a line's last field
    trimmed unless ``plain``), cast to int64; per line, whether all are integers."""
    offsets = np.empty(n_fields + 1, dtype=np.int64)
    offsets[0] = b0
    np.add(pos[:n_fields], b0 + 1, out=offsets[1:])
    fields = pa.LargeStringArray.from_buffers(n_fields, pa.py_buffer(offsets),
                                              pa.py_buffer(data))
    if rows is not None:
        fields = fields.take(rows)
    fields = pc.binary_slice(fields.view(pa.large_binary()), 0, -1).view(pa.large_string())
    if not plain:  # whitespace other than line ends
        last = np.zeros(len(fields), dtype=bool)
        last[line_at + lengths - 1] = True
        trimmed = pc.utf8_rtrim_whitespace(fields.filter(pa.array(last)))
        fields = pc.replace_with_mask(fields, pa.array(last), trimmed)
    return _cast(fields, lengths)


def _cast(fields: pa.Array, lengths: I64) -> tuple[I64, Mask]:
    """(int64 value per field, 0 where not an integer; per line: all fields integers)."""
    try:
        values = np.asarray(pc.cast(fields, pa.int64()).to_numpy(), dtype=np.int64)
        return values, np.ones(len(lengths), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        digits = pc.match_substring_regex(fields, _FIELD)
        values = np.asarray(pc.cast(pc.if_else(digits, fields, "0"), pa.int64()).to_numpy(),
                            dtype=np.int64)
        bad = (~digits.to_numpy(zero_copy_only=False)).astype(np.int64)
        ends = np.cumsum(lengths)
        ints = np.diff(np.concatenate(([0], np.cumsum(bad)[ends - 1]))) == 0
        return values, ints


def _origin(data: bytes, comments: list[int], display: str) -> int:
    """ns added to every time: the last ``# traceatlas time_origin_ns=`` comment among
    the first 16 comments (0 without one), as the oracle reads it."""
    origin = 0
    for start in comments:
        end = data.find(b"\n", start)
        text = data[start: end if end >= 0 else len(data)]
        found = TIME_ORIGIN_RE.match(text.decode("utf-8", errors="replace").strip())
        if found and len(found.group(1)) <= 19:
            origin = int(found.group(1))
    if abs(origin) >= TIME_LIMIT_NS:
        raise CorruptTraceError(display, f"time origin {origin} ns is out of range")
    return origin


def _rows(blocks: list[_Block], k: int, width: int) -> I64:
    """(n, width) leading fields of the type-``k`` lines of every block (by column)."""
    parts = [b.rows[k] for b in blocks if k in b.rows]
    if not parts:
        return np.zeros((0, width), np.int64)
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p.T for p in parts], axis=1).T


def _lines(blocks: list[_Block], bases: I64, k: int) -> I64:
    parts = [b.kinds[k].lines + base for b, base in zip(blocks, bases.tolist(), strict=True)
             if k in b.kinds]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _fixed(blocks: list[_Block], bases: I64, k: int, check: _Records) -> tuple[I64, I64]:
    """(rows, line numbers) of the usable type-``k`` records (fixed field count)."""
    rows = _rows(blocks, k, _FIXED[k])
    lines = _lines(blocks, bases, k)
    keep = check.checked(k, rows, lines)
    return _subset(rows, keep), _subset(lines, keep)


def _events(blocks: list[_Block], bases: I64, check: _Records) -> tuple[I64, I64, I64]:
    """(head fields (n, 6), line numbers, pairs (owner, type, value, order))."""
    head = _rows(blocks, 2, 6)
    lines = _lines(blocks, bases, 2)
    keep = check.checked(2, head, lines)
    parts = [b.pairs for b in blocks if b.pairs is not None]
    empty = np.zeros(0, np.int64)
    etype = np.concatenate([p[0] for p in parts]) if parts else empty
    value = np.concatenate([p[1] for p in parts]) if parts else empty
    n_pairs = np.concatenate([p[2] for p in parts]) if parts else empty
    if not bool(keep.all()):
        etype, value = etype[np.repeat(keep, n_pairs)], value[np.repeat(keep, n_pairs)]
        n_pairs = n_pairs[keep]
    head, lines = _subset(head, keep), _subset(lines, keep)
    stride = int(n_pairs.max(initial=0)) + 1
    if len(n_pairs) and int(n_pairs.min()) == stride - 1:  # the same pair count per line
        m = stride - 1
        order = np.arange(len(etype), dtype=np.int64)
        if m == 1:  # one pair per line
            return head, lines, _columns(order, etype, value, 2 * order)
        owner = order // m
        order = owner * stride + (order - owner * m)
        return head, lines, _columns(owner, etype, value, order)
    owner = np.repeat(np.arange(len(n_pairs), dtype=np.int64), n_pairs)
    j = np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(n_pairs) - n_pairs,
                                                          n_pairs)
    return head, lines, _columns(owner, etype, value, owner * stride + j)


def _columns(*cols: I64) -> I64:
    """(n, len(cols)) int64 array stored by column (each column contiguous)."""
    out = np.empty((len(cols[0]), len(cols)), dtype=np.int64, order="F")
    for i, col in enumerate(cols):
        out[:, i] = col
    return out


def _subset(rows: I64, keep: Mask) -> I64:
    """``rows[keep]`` without a copy when every row is kept."""
    return rows if bool(keep.all()) else rows[keep]
