"""Per-location work of the fast OTF2 path, run where the events were read (a worker
process of ``otf2_parallel`` or the reader itself): Enter/Leave pairing into frames, the
enclosing MPI region of each point-to-point and collective event, non-blocking request
pairing, event counts and the time-order check. What needs the whole archive (world ranks
through communicators, collective ids, message matching, the tables) is ``otf2_fast``'s.

A ``LocalPart`` is plain arrays and small dicts, so it pickles cheaply; ``otf2_fast.build``
takes the parts of consecutive runs of locations, in location order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traceatlas.io.otf2_events import enum_name
from traceatlas.io.otf2_raw import (
    NB_IRECV_REQUEST,
    NB_ISEND_COMPLETE,
    P2P_IRECV,
    P2P_ISEND,
    P2P_RECV,
    P2P_SEND,
    Instant,
    RawEvents,
    read_raw,
)

I64 = np.int64


@dataclass
class LocalPart:
    """What the locations of one run give ``otf2_fast.build`` (times in ticks since the
    global offset unless said otherwise)."""

    counts: dict[tuple[int, str], int] = field(default_factory=dict)
    backwards: dict[int, int] = field(default_factory=dict)
    unclosed: tuple[int, int] = (0, 0)  # Enters without a Leave, locations with one
    never_completed: int = 0  # posted receives never completed
    fallback: bool = False  # the event-object path must take the archive
    frames: np.ndarray[Any, Any] = field(  # ref, start, end, region: Enter/Leave pairs
        default_factory=lambda: np.zeros((0, 4), I64))
    p2p: np.ndarray[Any, Any] = field(  # t, peer (comm-local), comm, tag, length,
        # is_send, start, end, ref
        default_factory=lambda: np.zeros((0, 9), I64))
    coll: np.ndarray[Any, Any] = field(  # ref, frame (row of ``frames``; -1: none),
        # begin, end, op, comm, root, sent, received
        default_factory=lambda: np.zeros((0, 9), I64))
    met_ref: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, I64))
    met: np.ndarray[Any, Any] = field(  # t (raw ticks), pos, metric ref, n
        default_factory=lambda: np.zeros((0, 4), I64))
    met_values: bytes = b""
    rare: list[Instant] = field(default_factory=list)


@dataclass(frozen=True)
class PartJob:
    """The locations ``refs`` of the archive ``anchor``: what one worker reads."""

    anchor: str
    refs: tuple[int, ...]


def read_part(job: PartJob) -> LocalPart:
    """``read_raw`` + ``local_part`` in a worker process (its own definitions)."""
    import otf2  # type: ignore[import-untyped]

    reader = otf2.reader.Reader(job.anchor)
    try:
        defs = reader.definitions
        refs = list(job.refs)
        return local_part(read_raw(job.anchor, defs, refs), defs, refs)
    finally:
        reader.close()


def mpi_regions(defs: Any) -> np.ndarray[Any, Any]:
    """Region ref -> whether its paradigm is MPI."""
    regions = list(defs.regions)
    is_mpi = np.zeros(max((r._ref for r in regions), default=0) + 1, dtype=bool)
    for region in regions:
        is_mpi[region._ref] = enum_name(region.paradigm) == "MPI"
    return is_mpi


def local_part(raw: RawEvents, defs: Any, refs: list[int]) -> LocalPart:
    """The per-location columns of ``raw`` (read over ``refs`` in this order)."""
    part = LocalPart(rare=raw.rare, met_values=bytes(raw.met_values))
    if raw.unsupported:
        part.fallback = True
        return part
    offset = int(defs.clock_properties.global_offset)
    is_mpi = mpi_regions(defs)
    counts, backwards = part.counts, part.backwards
    el = tuple(np.frombuffer(a, dtype=I64) if len(a) else np.zeros(0, I64)
               for a in (raw.el_t, raw.el_r, raw.el_pos))
    rare_by_loc: dict[int, list[tuple[int, int]]] = {}
    for inst in raw.rare:
        rare_by_loc.setdefault(inst.ref, []).append((inst.pos, inst.t))
    met_ref: list[np.ndarray[Any, Any]] = []
    frames: list[np.ndarray[Any, Any]] = []
    p2ps: list[np.ndarray[Any, Any]] = []
    colls: list[np.ndarray[Any, Any]] = []
    n_frames_before = 0
    unclosed = [0, 0]
    prev: tuple[int, ...] = (0, 0, 0, 0, 0, 0)
    for ref in refs:
        span = raw.spans.get(ref, prev)
        loc = _Loc(raw, prev, span, el)
        prev = span
        rare = rare_by_loc.get(ref, [])
        # times of every event in stream order: backwards check and the last time
        pos_all = np.concatenate([loc.pos, loc.p2p[:, 1], loc.cb[:, 1], loc.ce[:, 1],
                                  loc.met[:, 1], loc.nb[:, 1],
                                  np.asarray([p for p, _ in rare], dtype=I64)])
        t_all = np.concatenate([loc.t, loc.p2p[:, 0], loc.cb[:, 0], loc.ce[:, 0],
                                loc.met[:, 0], loc.nb[:, 0],
                                np.asarray([t for _, t in rare], dtype=I64)]) - offset
        met_ref.append(np.full(len(loc.met), ref, dtype=I64))
        order = np.argsort(pos_all, kind="stable")
        t_stream = t_all[order]
        back = int(np.count_nonzero(np.diff(t_stream) < 0))
        if back:
            backwards[ref] = back
        last = int(t_stream[-1]) if len(t_stream) else 0
        n_enter = int(np.count_nonzero(loc.r >= 0))
        for kind, n in (("Enter", n_enter), ("Leave", len(loc.r) - n_enter),
                        ("MpiSend", int(np.count_nonzero(loc.p2p[:, 6] == P2P_SEND))),
                        ("MpiRecv", int(np.count_nonzero(loc.p2p[:, 6] == P2P_RECV))),
                        ("MpiIsend", int(np.count_nonzero(loc.p2p[:, 6] == P2P_ISEND))),
                        ("MpiIrecv", int(np.count_nonzero(loc.p2p[:, 6] == P2P_IRECV))),
                        ("MpiIsendComplete",
                         int(np.count_nonzero(loc.nb[:, 3] == NB_ISEND_COMPLETE))),
                        ("MpiIrecvRequest",
                         int(np.count_nonzero(loc.nb[:, 3] == NB_IRECV_REQUEST))),
                        ("MpiCollectiveBegin", len(loc.cb)),
                        ("MpiCollectiveEnd", len(loc.ce)), ("Metric", len(loc.met))):
            if n:
                counts[(ref, kind)] = n
        if len(pos_all) != raw.read.get(ref, 0):
            part.fallback = True  # a record type without a callback here
            return part
        got = _frames(loc, offset, last)
        if got is None:
            part.fallback = True
            return part
        f_start, f_end, f_region, f_open, enc_of = got
        unclosed[0] += int(f_open.sum())
        unclosed[1] += int(f_open.any())
        frames.append(np.stack([np.full(len(f_start), ref, I64), f_start, f_end, f_region],
                               axis=1))
        # point-to-point: the enclosing MPI region, else the event time
        p2p = loc.p2p
        at = functools.partial(_at, enc_of=enc_of, frames=(f_start, f_end, f_region),
                               is_mpi=is_mpi, offset=offset)
        if len(p2p) or len(loc.nb):
            start, end = at(p2p)
            if len(loc.nb) or np.any(p2p[:, 6] >= P2P_ISEND):
                got_nb = _nonblocking(p2p, loc.nb, start, end, at)
                if got_nb is None:
                    part.fallback = True
                    return part
                start, end, never = got_nb
                part.never_completed += never
            is_send = (p2p[:, 6] == P2P_SEND) | (p2p[:, 6] == P2P_ISEND)
            p2ps.append(np.stack([p2p[:, 0] - offset, p2p[:, 2], p2p[:, 3], p2p[:, 4],
                                  p2p[:, 5], is_send, start, end,
                                  np.full(len(p2p), ref, I64)], axis=1))
        # collectives: Begin/End must alternate (B E B E ...)
        cb, ce = loc.cb, loc.ce
        if len(cb) or len(ce):
            if len(cb) != len(ce) or np.any(cb[:, 1] > ce[:, 1]) or np.any(
                    cb[1:, 1] < ce[:-1, 1]):
                part.fallback = True
                return part
            frame = enc_of(ce[:, 1])
            mpi = (frame >= 0) & _mpi_frames(frame, f_region, is_mpi)
            colls.append(np.concatenate([
                np.stack([np.full(len(ce), ref, I64),
                          np.where(mpi, frame + n_frames_before, -1),
                          cb[:, 0] - offset, ce[:, 0] - offset], axis=1), ce[:, 2:7]], axis=1))
        n_frames_before += len(f_start)
    part.unclosed = (unclosed[0], unclosed[1])
    if frames:
        part.frames = np.concatenate(frames)
    if p2ps:
        part.p2p = np.concatenate(p2ps)
    if colls:
        part.coll = np.concatenate(colls)
    part.met_ref = np.concatenate([np.zeros(0, I64), *met_ref])
    part.met = _rows(raw.met, 0, len(raw.met), 4).copy()
    return part

class _Loc:
    """One location's hot arrays (numpy views)."""

    def __init__(self, raw: RawEvents, prev: tuple[int, ...], span: tuple[int, ...],
                 el: tuple[np.ndarray[Any, Any], ...]) -> None:
        t, r, pos = el
        self.t, self.r, self.pos = t[prev[0]:span[0]], r[prev[0]:span[0]], pos[prev[0]:span[0]]
        self.p2p = _rows(raw.p2p, prev[1], span[1], 8)
        self.cb = _rows(raw.cb, prev[2], span[2], 2)
        self.ce = _rows(raw.ce, prev[3], span[3], 7)
        self.met = _rows(raw.met, prev[4], span[4], 4)
        self.nb = _rows(raw.nb, prev[5], span[5], 4)


def _rows(values: Any, start: int, stop: int, width: int) -> np.ndarray[Any, Any]:
    return np.frombuffer(values, dtype=I64)[start:stop].reshape(-1, width) if stop > start \
        else np.zeros((0, width), dtype=I64)


def _at(rows: np.ndarray[Any, Any], enc_of: Any, frames: tuple[np.ndarray[Any, Any], ...],
        is_mpi: np.ndarray[Any, Any], offset: int
        ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(start, end) ticks of the enclosing MPI region of each (t, pos, ...) row, else
    (t, t): ``Collector._at``."""
    f_start, f_end, f_region = frames
    frame = enc_of(rows[:, 1])
    mpi = (frame >= 0) & _mpi_frames(frame, f_region, is_mpi)
    t_ev = rows[:, 0] - offset
    if not len(f_start):  # (a location without any Enter has no frame to index)
        return t_ev, t_ev
    return np.where(mpi, f_start[frame], t_ev), np.where(mpi, f_end[frame], t_ev)


def _pair_previous(a_req: np.ndarray[Any, Any], a_pos: np.ndarray[Any, Any],
                   b_req: np.ndarray[Any, Any], b_pos: np.ndarray[Any, Any]
                   ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """For each B event, the A event just before it in stream order among the events of
    its request id (-1: the one before is a B event, or none), as a dict keyed by request
    id that A sets and B pops behaves; and, per A, whether it is the last event of its id
    (still pending at the end)."""
    req = np.concatenate([a_req, b_req])
    pos = np.concatenate([a_pos, b_pos])
    is_a = np.arange(len(req)) < len(a_req)
    order = np.lexsort((pos, req))
    s_req, s_a = req[order], is_a[order]
    prev_same = np.zeros(len(order), dtype=bool)
    prev_same[1:] = s_req[1:] == s_req[:-1]
    prev_a = np.zeros(len(order), dtype=bool)
    prev_a[1:] = s_a[:-1]
    b_sorted = np.flatnonzero(~s_a)
    paired = prev_same[b_sorted] & prev_a[b_sorted]
    match = np.full(len(b_req), -1, dtype=np.int64)
    b_index = order[b_sorted] - len(a_req)
    match[b_index[paired]] = order[b_sorted[paired] - 1]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = s_req[:-1] != s_req[1:]
    pending = np.zeros(len(a_req), dtype=bool)
    a_sorted = np.flatnonzero(s_a)
    pending[order[a_sorted]] = last[a_sorted]
    return match, pending


def _nonblocking(p2p: np.ndarray[Any, Any], nb: np.ndarray[Any, Any],
                 start: np.ndarray[Any, Any], end: np.ndarray[Any, Any], at: Any) -> Any:
    """Send/receive (start, end) with the non-blocking records of one location, as
    ``Collector`` sets them: an Isend ends with the region of its MpiIsendComplete, an
    Irecv starts with the region of its MpiIrecvRequest; and the number of requests never
    completed. None when a completion has no Isend (the event-object path makes it an
    instant)."""
    start, end = start.copy(), end.copy()
    nb_start, nb_end = at(nb) if len(nb) else (np.zeros(0, I64), np.zeros(0, I64))
    kind = p2p[:, 6]
    never = 0
    for p_kind, n_kind in ((P2P_ISEND, NB_ISEND_COMPLETE), (P2P_IRECV, NB_IRECV_REQUEST)):
        rows = np.flatnonzero(kind == p_kind)
        marks = np.flatnonzero(nb[:, 3] == n_kind)
        if p_kind == P2P_ISEND:  # A: Isend, B: its completion
            match, _ = _pair_previous(p2p[rows, 7], p2p[rows, 1], nb[marks, 2], nb[marks, 1])
            if np.any(match < 0):
                return None
            end[rows[match]] = nb_end[marks]
        else:  # A: the posted request, B: the Irecv that completes it
            match, pending = _pair_previous(nb[marks, 2], nb[marks, 1], p2p[rows, 7],
                                            p2p[rows, 1])
            ok = match >= 0
            start[rows[ok]] = nb_start[marks[match[ok]]]
            never += int(pending.sum())
    return start, end, never


def _mpi_frames(frame: np.ndarray[Any, Any], f_region: np.ndarray[Any, Any],
                is_mpi: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Whether each event's enclosing frame (-1: none) is an MPI region."""
    out = np.zeros(len(frame), dtype=bool)
    has = frame >= 0
    out[has] = is_mpi[f_region[frame[has]]]
    return out


def _frames(loc: _Loc, offset: int, last: int) -> Any:
    """(start, end, region, open, enclosing) of a location's Enter/Leave stream; None when
    a Leave does not close the innermost open Enter of the same region."""
    r, pos = loc.r, loc.pos
    enter = r >= 0
    depth = np.cumsum(np.where(enter, 1, -1))
    if len(depth) and depth.min() < 0:
        return None
    level = np.where(enter, depth, depth + 1)
    order = np.lexsort((pos, level))
    s_enter, s_level, s_r = enter[order], level[order], r[order]
    leaves = np.flatnonzero(~s_enter)
    prev = leaves - 1
    if len(leaves) and (np.any(prev < 0) or np.any(~s_enter[prev])
                        or np.any(s_level[prev] != s_level[leaves])
                        or np.any(s_r[prev] != ~s_r[leaves])):
        return None
    enters_sorted = np.flatnonzero(s_enter)
    nxt = enters_sorted + 1
    closed = np.zeros(len(enters_sorted), dtype=bool)
    ok = nxt < len(order)
    closed[ok] = (~s_enter[nxt[ok]]) & (s_level[nxt[ok]] == s_level[enters_sorted[ok]])
    t = loc.t - offset
    idx = order[enters_sorted]  # stream index of each frame's Enter (frames in level order)
    end = np.full(len(idx), last, dtype=I64)
    end[closed] = t[order[nxt[closed]]]
    # frames in stream order of their Enter
    by_stream = np.argsort(idx, kind="stable")
    frame_of_sorted = np.empty(len(idx), dtype=I64)
    frame_of_sorted[by_stream] = np.arange(len(idx))
    f_start = t[idx][by_stream]
    f_end = end[by_stream]
    f_region = r[idx][by_stream]
    f_open = ~closed[by_stream]
    span = int(pos.max()) + 2 if len(pos) else 2
    combo = s_level * span + pos[order]

    def enclosing(points: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The innermost open frame at each stream position (-1: none)."""
        out = np.full(len(points), -1, dtype=I64)
        if not len(pos):
            return out
        i = np.searchsorted(pos, points) - 1
        lvl = np.where(i >= 0, depth[np.maximum(i, 0)], 0)
        j = np.searchsorted(combo, lvl * span + points) - 1
        has = lvl > 0
        # combo index j is an Enter at level lvl (the open one): its frame
        rank_in_enters = np.searchsorted(enters_sorted, j[has])
        out[has] = frame_of_sorted[rank_in_enters]
        return out

    return f_start, f_end, f_region, f_open, enclosing

