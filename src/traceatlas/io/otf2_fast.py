"""The fast OTF2 event path: ``otf2_raw`` arrays -> the same tables as ``Collector``.

Why this design (issue 14): the ``otf2`` wheel calls a Python function per event and
builds an event object for it, then ``Collector`` handles each one in Python (~10 us per
event). Here the C library's local event readers call minimal ctypes callbacks that append
integers (option (a) of the issue, ~1.2 us per event, the floor of a per-event Python call),
and the matching is done on columns with numpy: Enter/Leave pairs by nesting level,
the enclosing MPI region of each MPI event by a sorted search, FIFO message matching by
rank within (sender, receiver, communicator, tag), collectives paired Begin/End.
Bulk decoding of the OTF2 buffers (option (c)) was not attempted.

What the fast path does not model returns ``None`` (the caller then runs ``Collector``,
which stays the reference): non-blocking MPI records, a Leave that does not close the
innermost open Enter, a collective End without its Begin (or two Begins in a row).
Metrics are decoded on columns (``otf2_metrics``); instants arrive rendered.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pyarrow as pa

from traceatlas.io.otf2_events import Collector, LocInfo, _converter, _region_info, enum_name
from traceatlas.io.otf2_metrics import counter_columns, counter_table
from traceatlas.io.otf2_raw import (
    NB_IRECV_REQUEST,
    NB_ISEND_COMPLETE,
    P2P_IRECV,
    P2P_ISEND,
    P2P_RECV,
    P2P_SEND,
    RawEvents,
)
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting

I64 = np.int64


class FastResult:
    """Tables and counts in the shape ``Otf2Reader.read`` takes from ``Collector``."""

    def __init__(self, collector: Collector, counts: dict[tuple[int, str], int],
                 backwards: dict[int, int]) -> None:
        self.collector = collector
        self.counts = counts
        self.backwards = backwards
        self.intervals: pa.Table | None = None
        self.counters: dict[str, Any] = {}
        self.messages: dict[str, Any] | None = None
        self.unclosed = (0, 0)
        self.problems: dict[str, int] = {}
        self.unmatched = (0, 0)

    @property
    def location_counts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for (ref, _kind), n in self.counts.items():
            out[ref] = out.get(ref, 0) + n
        return out

    @property
    def event_counts(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        locs = self.collector._locs
        for (ref, kind), n in self.counts.items():
            per = out.setdefault(locs[ref].rank, {})
            per[kind] = per.get(kind, 0) + n
        return out


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


def build(raw: RawEvents, defs: Any, locations: dict[int, LocInfo],
          next_track: dict[int, int], refs: list[int]) -> FastResult | None:
    """Tables from ``raw``; None when the events need the event-object path."""
    if raw.unsupported:
        return None
    offset = int(defs.clock_properties.global_offset)
    collector = Collector(defs, locations, next_track)
    counts: dict[tuple[int, str], int] = {}
    backwards: dict[int, int] = {}
    el = tuple(np.frombuffer(a, dtype=I64) if len(a) else np.zeros(0, I64)
               for a in (raw.el_t, raw.el_r, raw.el_pos))
    rare_by_loc: dict[int, list[tuple[int, int]]] = {}
    for inst in raw.rare:
        rare_by_loc.setdefault(inst.ref, []).append((inst.pos, inst.t))
    met_ref: list[np.ndarray[Any, Any]] = []
    regions = {r._ref: r for r in defs.regions}
    comms = {c._ref: c for c in defs.comms}
    frames: list[tuple[np.ndarray[Any, Any], ...]] = []  # per location: ref, start, end,
    # region (-1: standalone collective), coll row (-1: none)
    coll_rows: list[dict[str, Any]] = []
    coll_ids: dict[tuple[int, ...], int] = {}
    sends: list[np.ndarray[Any, Any]] = []  # per location: t, src, dst, comm, tag, len,
    # start, end (ticks)
    recvs: list[np.ndarray[Any, Any]] = []
    problems: dict[str, int] = {}
    unclosed = [0, 0]
    prev: tuple[int, ...] = (0, 0, 0, 0, 0, 0)
    is_mpi = np.zeros(max(regions, default=0) + 1, dtype=bool)
    for ref, region in regions.items():
        is_mpi[ref] = enum_name(region.paradigm) == "MPI"
    for ref in refs:
        span = raw.spans.get(ref, prev)
        loc = _Loc(raw, prev, span, el)
        prev = span
        info = locations[ref]
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
            return None  # a record type without a callback here: the event-object path
        got = _frames(loc, offset, last)
        if got is None:
            return None
        f_start, f_end, f_region, f_open, enc_of = got
        unclosed[0] += int(f_open.sum())
        unclosed[1] += int(f_open.any())
        n_frames = len(f_start)
        f_coll = np.full(n_frames, -1, dtype=I64)
        # point-to-point: the enclosing MPI region, else the event time
        p2p = loc.p2p

        at = functools.partial(_at, enc_of=enc_of, frames=(f_start, f_end, f_region),
                               is_mpi=is_mpi, offset=offset)
        if len(p2p) or len(loc.nb):
            t_ev = p2p[:, 0] - offset
            start, end = at(p2p)
            if len(loc.nb) or np.any(p2p[:, 6] >= P2P_ISEND):
                got_nb = _nonblocking(p2p, loc.nb, start, end, at)
                if got_nb is None:
                    return None
                start, end, never = got_nb
                if never:
                    problems["posted receive never completed"] = problems.get(
                        "posted receive never completed", 0) + never
            me = info.rank
            peer = np.asarray([collector._world(comms[int(c)], int(p), ref)
                               for p, c in zip(p2p[:, 2], p2p[:, 3], strict=True)]
                              if len(p2p) < 64 else _world_many(collector, comms, p2p, ref),
                              dtype=I64)
            is_send = (p2p[:, 6] == P2P_SEND) | (p2p[:, 6] == P2P_ISEND)
            mine = np.full(len(p2p), me, dtype=I64)
            cols = np.stack([t_ev, np.where(is_send, mine, peer), np.where(is_send, peer, mine),
                             p2p[:, 3], p2p[:, 4], p2p[:, 5], start, end], axis=1)
            sends.append(cols[is_send])
            recvs.append(cols[~is_send])
        # collectives: Begin/End must alternate (B E B E ...)
        cb, ce = loc.cb, loc.ce
        if len(cb) or len(ce):
            if len(cb) != len(ce) or np.any(cb[:, 1] > ce[:, 1]) or np.any(
                    cb[1:, 1] < ce[:-1, 1]):
                return None
            frame = enc_of(ce[:, 1])
            mpi = (frame >= 0) & _mpi_frames(frame, f_region, is_mpi)
            uniq, inv = np.unique(ce[:, 2:7], axis=0, return_inverse=True)
            ids = np.asarray([_coll_id(coll_ids, coll_rows, collector, comms, row)
                              for row in uniq.tolist()], dtype=I64)
            cid = ids[inv.ravel()]
            # the last End inside a frame wins (as in Collector)
            inside = np.flatnonzero(mpi)[::-1]
            _, first = np.unique(frame[inside], return_index=True)
            f_coll[frame[inside[first]]] = cid[inside[first]]
            alone = np.flatnonzero(~mpi)
            if len(alone):
                f_start = np.concatenate([f_start, cb[alone, 0] - offset])
                f_end = np.concatenate([f_end, ce[alone, 0] - offset])
                f_region = np.concatenate([f_region, -1 - cid[alone]])
                f_coll = np.concatenate([f_coll, cid[alone]])
        frames.append((np.full(len(f_start), ref, I64), f_start, f_end, f_region, f_coll))
    # metrics on columns; instants (rendered by otf2_raw) in time order
    counters = counter_columns(collector, defs, np.concatenate([np.zeros(0, I64), *met_ref]),
                               _rows(raw.met, 0, len(raw.met), 4), bytes(raw.met_values),
                               offset)
    if counters is None:
        return None
    for inst in sorted(raw.rare, key=lambda e: e.t):
        collector.add_instant(inst.ref, inst.t - offset, inst.kind, inst.category, inst.args,
                              inst.pid)
        counts[(inst.ref, inst.kind)] = counts.get((inst.ref, inst.kind), 0) + 1
    for what, n in collector._problems.items():
        problems[what] = problems.get(what, 0) + n
    collector._problems.clear()
    result = FastResult(collector, counts, backwards)
    result.unclosed = (unclosed[0], unclosed[1])
    result.problems = problems
    result.counters = counters
    result.intervals = _intervals(frames, coll_rows, regions, locations)
    result.messages, result.unmatched = _messages(sends, recvs, collector, comms)
    return result


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


def _world_many(collector: Collector, comms: dict[int, Any], p2p: np.ndarray[Any, Any],
                ref: int) -> np.ndarray[Any, Any]:
    """World rank per event through ``Collector._world``, once per (comm, peer)."""
    codes, inverse = np.unique((p2p[:, 3] << 32) | p2p[:, 2], return_inverse=True)
    pairs = np.stack([codes >> 32, codes & 0xFFFFFFFF], axis=1)
    before = collector._problems.get("rank not translated through its communicator", 0)
    world = np.asarray([collector._world(comms[int(c)], int(p), ref) for c, p in pairs],
                       dtype=I64)
    untranslated = collector._problems.get("rank not translated through its communicator",
                                           0) - before
    if untranslated:  # the Collector counts one per event
        bad = np.asarray([collector._world_cache.get((int(c), int(p))) is None
                          for c, p in pairs])
        collector._problems["rank not translated through its communicator"] = before + int(
            bad[inverse.ravel()].sum())
    out: np.ndarray[Any, Any] = world[inverse.ravel()]
    return out


_OPS: dict[int, str] = {}


def _mpi_frames(frame: np.ndarray[Any, Any], f_region: np.ndarray[Any, Any],
                is_mpi: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Whether each event's enclosing frame (-1: none) is an MPI region."""
    out = np.zeros(len(frame), dtype=bool)
    has = frame >= 0
    out[has] = is_mpi[f_region[frame[has]]]
    return out


def _coll_id(ids: dict[tuple[int, ...], int], rows: list[dict[str, Any]],
             collector: Collector, comms: dict[int, Any], row: list[int]) -> int:
    """Index in ``rows`` of the collective (op, comm, root, sent, received)."""
    key = tuple(row)
    found = ids.get(key)
    if found is None:
        op, comm, root, sent, received = row
        name, members = collector._comm(comms[comm])
        rows.append({"collective_op": _op_name(op), "communicator": name,
                     "group_ranks": members, "root": root, "size_sent": sent,
                     "size_received": received})
        found = ids[key] = len(rows) - 1
    return found


def _op_name(op: int) -> str:
    found = _OPS.get(op)
    if found is None:
        import _otf2  # type: ignore[import-untyped]

        found = _OPS[op] = enum_name(_otf2.CollectiveOp(op)).lower()
    return found


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


def _intervals(frames: list[tuple[np.ndarray[Any, Any], ...]], coll_rows: list[dict[str, Any]],
               regions: dict[int, Any],
               locations: dict[int, LocInfo]) -> pa.Table:
    """The intervals table in ``Collector._interval_table``'s columns and types."""
    if frames:
        ref, start, end, region, coll = (np.concatenate(c) for c in zip(*frames, strict=True))
    else:
        ref = start = end = region = coll = np.zeros(0, I64)
    order = np.lexsort((ref, start))  # the old reader's order is the global Enter order
    ref, start, end, region, coll = ref[order], start[order], end[order], region[order], \
        coll[order]
    loc_refs = np.asarray(sorted(locations), dtype=I64)
    loc_index = np.searchsorted(loc_refs, ref)
    infos = [locations[int(r)] for r in loc_refs]
    gpu_loc = np.asarray([i.kind == "gpu_stream" for i in infos], dtype=bool)
    on_gpu = gpu_loc[loc_index] if len(ref) else np.zeros(0, bool)
    # per (region, on_gpu) strings; standalone collectives are region -1 - k
    codes, inverse = np.unique(region * 2 + on_gpu, return_inverse=True)
    inverse = inverse.ravel()
    names, cats, srcs, kinds, argss = [], [], [], [], []
    for reg, gpu in zip((codes >> 1).tolist(), (codes & 1).tolist(), strict=True):
        if reg < 0:
            name, cat, src, kind = coll_rows[-1 - int(reg)]["collective_op"], "mpi", "MPI", None
            args: dict[str, Any] = {}
        else:
            name, cat, src, kind, args = _region_info(regions[int(reg)], bool(gpu))
        names.append(name)
        cats.append(cat)
        srcs.append(src)
        kinds.append(kind)
        argss.append(args)
    # text columns: the distinct values once, then an Arrow take (no Python object per row)
    n = len(ref)
    has = coll >= 0
    arg_texts = [json.dumps(a) for a in argss]
    arg_index = inverse.astype(I64)
    if has.any():  # args of a frame with a collective: one JSON per (region, collective)
        width = len(coll_rows) + 1
        pair_codes, pinv = np.unique(inverse[has] * width + coll[has], return_inverse=True)
        arg_index[has] = len(arg_texts) + pinv.ravel()
        arg_texts += [json.dumps({**argss[k // width], **coll_rows[k % width]})
                      for k in pair_codes.tolist()]
    coll_index = pa.array(np.where(has, coll, len(coll_rows)))

    def coll_col(key: str, kind: pa.DataType) -> pa.Array:
        return pa.array([row[key] for row in coll_rows] + [None], kind).take(coll_index)

    nbytes, coll_op = coll_col("size_sent", pa.int64()), coll_col("collective_op", pa.string())
    comm = coll_col("communicator", pa.string())
    members = coll_col("group_ranks", pa.string())
    rank = np.asarray([i.rank for i in infos], dtype=I64)[loc_index] if n else np.zeros(0, I64)
    track = np.asarray([i.track_id for i in infos], dtype=I64)[loc_index] if n else \
        np.zeros(0, I64)
    device = np.asarray([i.device for i in infos], dtype=I64)[loc_index] if n else \
        np.zeros(0, I64)
    stream = np.asarray([i.stream for i in infos], dtype=I64)[loc_index] if n else \
        np.zeros(0, I64)
    return _interval_columns(rank, track, start, end, on_gpu, device, stream, {
        "name": _take(names, inverse), "category": _take(cats, inverse),
        "source_category": _take(srcs, inverse), "bytes": nbytes, "collective": coll_op,
        "process_group": comm, "group_ranks": members,
        "memcpy_kind": _take(kinds, inverse), "args": _take(arg_texts, arg_index)})


def _take(values: list[Any], index: np.ndarray[Any, Any]) -> pa.Array:
    """``values[index]`` as an Arrow string array (C++ take over the distinct values)."""
    return pa.array(values, pa.string()).take(pa.array(index, pa.int64()))


def _interval_columns(rank: np.ndarray[Any, Any], track: np.ndarray[Any, Any],
                      start_ticks: np.ndarray[Any, Any], end_ticks: np.ndarray[Any, Any],
                      on_gpu: np.ndarray[Any, Any], device: np.ndarray[Any, Any],
                      stream: np.ndarray[Any, Any], text: dict[str, Any]) -> pa.Table:
    """Ticks are converted by the caller's ``to_ns`` later: kept as ticks here."""
    return pa.table({
        "rank": pa.array(rank, pa.int32()),
        "start_ticks": pa.array(start_ticks, pa.int64()),
        "end_ticks": pa.array(end_ticks, pa.int64()),
        "on_gpu": pa.array(on_gpu, pa.bool_()),
        "track_id": pa.array(track, pa.int32()),
        "name": text["name"],
        "category": text["category"],
        "source_category": text["source_category"],
        "bytes": text["bytes"],
        "device": pa.array(np.where(on_gpu, device, 0), pa.int32(), mask=~on_gpu),
        "stream": pa.array(np.where(on_gpu, stream, 0), pa.int64(), mask=~on_gpu),
        "collective": text["collective"],
        "process_group": text["process_group"],
        "group_ranks": text["group_ranks"],
        "memcpy_kind": text["memcpy_kind"],
        "args": text["args"],
    })


def finish_intervals(table: pa.Table, to_ns: Any) -> pa.Table:
    """Ticks -> ns, depth and step: the old reader's interval columns in its order."""
    rank = table.column("rank").to_numpy().astype(I64)
    track = table.column("track_id").to_numpy().astype(I64)
    start = to_ns(table.column("start_ticks").to_numpy())
    end = to_ns(table.column("end_ticks").to_numpy())
    gpu_rows = table.column("on_gpu").to_numpy(zero_copy_only=False)
    track_key = (rank << 32) + track
    order = sort_for_nesting(track_key, start, end)
    depth = np.empty(len(order), dtype=I64)
    depth[order] = nesting_depth(track_key[order], start[order], end[order], gpu_rows[order])
    rest = table.drop_columns(["rank", "start_ticks", "end_ticks", "on_gpu"])
    return pa.table({
        "rank": table.column("rank"),
        "start_ns": pa.array(start, pa.int64()),
        "end_ns": pa.array(end, pa.int64()),
        "dur_ns": pa.array(end - start, pa.int64()),
        "depth": pa.array(depth, pa.int32()),
        "step": pa.array(np.full(len(rank), -1), pa.int32()),
        **{name: rest.column(name) for name in rest.column_names},
    })


def _messages(sends: list[np.ndarray[Any, Any]], recvs: list[np.ndarray[Any, Any]],
              collector: Collector, comms: dict[int, Any]
              ) -> tuple[dict[str, Any], tuple[int, int]]:
    """FIFO matching per (src, dst, comm, tag) in time order; ticks kept (``_ns`` columns
    hold ticks until ``finish_messages``)."""
    s = np.concatenate(sends) if sends else np.zeros((0, 8), I64)
    r = np.concatenate(recvs) if recvs else np.zeros((0, 8), I64)
    s = s[np.argsort(s[:, 0], kind="stable")]
    r = r[np.argsort(r[:, 0], kind="stable")]

    def ordinal(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Rows keyed (src, dst, comm, tag, k-th of that key)."""
        order = np.lexsort((np.arange(len(rows)), rows[:, 4], rows[:, 3], rows[:, 2],
                            rows[:, 1]))
        keys = rows[order][:, 1:5]
        new = np.ones(len(order), dtype=bool)
        new[1:] = np.any(keys[1:] != keys[:-1], axis=1)
        group_start = np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
        kth = np.empty(len(order), dtype=I64)
        kth[order] = np.arange(len(order)) - group_start
        return np.concatenate([rows[:, 1:5], kth[:, None]], axis=1)

    ks, kr = ordinal(s), ordinal(r)
    both = np.concatenate([ks, kr])
    ids = np.zeros(len(both), dtype=I64)
    if len(both):  # one id per distinct (src, dst, comm, tag, k)
        order = np.lexsort(both.T[::-1])
        new = np.ones(len(order), dtype=bool)
        new[1:] = np.any(both[order][1:] != both[order][:-1], axis=1)
        ids[order] = np.cumsum(new) - 1
    n = int(ids.max()) + 1 if len(ids) else 0
    send_of = np.full(n, -1, dtype=I64)
    recv_of = np.full(n, -1, dtype=I64)
    send_of[ids[:len(ks)]] = np.arange(len(ks))
    recv_of[ids[len(ks):]] = np.arange(len(kr))
    has_s, has_r = send_of >= 0, recv_of >= 0
    si, ri = np.maximum(send_of, 0), np.maximum(recv_of, 0)
    first_t = np.where(has_s & has_r, np.minimum(s[si, 0] if len(s) else 0,
                                                 r[ri, 0] if len(r) else 0),
                       np.where(has_s, s[si, 0] if len(s) else 0, r[ri, 0] if len(r) else 0))
    order = np.argsort(first_t, kind="stable")
    arrays: list[Any] = [a[order] for a in (send_of, recv_of, has_s, has_r, si, ri)]
    send_of, recv_of, has_s, has_r, si, ri = arrays
    src = np.where(has_s, s[si, 1] if len(s) else 0, r[ri, 1] if len(r) else 0)
    dst = np.where(has_s, s[si, 2] if len(s) else 0, r[ri, 2] if len(r) else 0)
    comm = np.where(has_s, s[si, 3] if len(s) else 0, r[ri, 3] if len(r) else 0)
    tag = np.where(has_s, s[si, 4] if len(s) else 0, r[ri, 4] if len(r) else 0)
    nbytes = np.where(has_s, s[si, 5] if len(s) else 0, r[ri, 5] if len(r) else 0)
    owner_is_recv = ~has_s | (has_r & (r[ri, 0] < s[si, 0] if len(s) and len(r) else False))
    owner = np.where(owner_is_recv, dst, src)

    def col(rows: np.ndarray[Any, Any], idx: np.ndarray[Any, Any], has: np.ndarray[Any, Any],
            j: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        return (rows[idx, j] if len(rows) else np.zeros(len(idx), I64)), has

    names = {c: collector._comm(comms[int(c)])[0] for c in np.unique(comm).tolist()}
    table = {
        "src_rank": src, "dst_rank": dst, "owner": owner,
        "send_start": col(s, si, has_s, 6), "send_end": col(s, si, has_s, 7),
        "recv_start": col(r, ri, has_r, 6), "recv_end": col(r, ri, has_r, 7),
        "bytes": nbytes, "tag": tag,
        "communicator": np.asarray([names[c] for c in comm.tolist()], dtype=object),
    }
    unmatched = (int(np.count_nonzero(has_s & ~has_r)), int(np.count_nonzero(~has_s & has_r)))
    return table, unmatched


def finish_messages(parts: dict[str, Any], to_ns: Any, ranks: set[int]) -> pa.Table:
    """The messages table in ``Collector._message_table``'s columns and types."""
    src, owner = parts["src_rank"], parts["owner"]
    in_ranks = np.isin(src, np.asarray(sorted(ranks), dtype=I64))

    def times(key: str) -> pa.Array:
        ticks, has = parts[key]
        return pa.array(np.where(has, to_ns(ticks) if len(ticks) else ticks, 0), pa.int64(),
                        mask=~has)

    return pa.table({
        "rank": pa.array(np.where(in_ranks, src, owner), pa.int32()),
        "src_rank": pa.array(src, pa.int32()),
        "dst_rank": pa.array(parts["dst_rank"], pa.int32()),
        "send_start_ns": times("send_start"),
        "send_end_ns": times("send_end"),
        "recv_start_ns": times("recv_start"),
        "recv_end_ns": times("recv_end"),
        "bytes": pa.array(parts["bytes"], pa.int64()),
        "tag": pa.array(parts["tag"], pa.int64()),
        "communicator": pa.array(parts["communicator"], pa.string()),
    })


def tables(result: FastResult, resolution: int, base_ns: int, display: str,
           warn: Any) -> dict[int, dict[str, pa.Table]]:
    """Per rank tables, with the old reader's warnings."""
    from traceatlas.io.otf2_events import _split
    from traceatlas.model.schema import empty_table

    collector = result.collector
    unclosed, where = result.unclosed
    if unclosed:
        warn(f"{display}: {unclosed} Enter event(s) without a Leave on {where} "
             "location(s); closed at the last event time of their location")
    sends, recvs = result.unmatched
    if sends or recvs:
        warn(f"{display}: {sends} MPI send(s) without a matching receive and {recvs} "
             "receive(s) without a matching send; kept with the other side null")
    problems = dict(result.problems)
    for what, n in collector._problems.items():
        problems[what] = problems.get(what, 0) + n
    if collector._coll_open:
        problems["collective begin without end"] = len(collector._coll_open)
    for what, n in sorted(problems.items()):
        warn(f"{display}: {n} x {what}")
    to_ns = _converter(resolution, base_ns)
    ranks = sorted(collector._next_track)
    assert result.intervals is not None and result.messages is not None
    intervals = _split(finish_intervals(result.intervals, to_ns), ranks)
    counters = _split(counter_table(result.counters, to_ns), ranks)
    instants = _split(collector._instant_table(to_ns), ranks)
    messages = _split(finish_messages(result.messages, to_ns, set(ranks)), ranks)
    return {
        rank: {
            "tracks": collector._track_table(rank),
            "intervals": intervals[rank],
            "counters": counters[rank],
            "instants": instants[rank],
            "messages": messages[rank],
            "flows": empty_table("flows").drop_columns(["rank"]),
        }
        for rank in ranks
    }
