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

import json
from typing import Any

import numpy as np
import pyarrow as pa

from traceatlas.io.otf2_events import (
    Collector,
    LocInfo,
    _converter,
    _region_info,
    collective_args,
    collective_op_name,
    interval_table,
    message_table,
    rank_tables,
    summary_warnings,
)
from traceatlas.io.otf2_local import LocalPart
from traceatlas.io.otf2_metrics import counter_columns, counter_table

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


def build(parts: list[LocalPart], defs: Any, locations: dict[int, LocInfo],
          next_track: dict[int, int]) -> FastResult | None:
    """Tables from the parts of consecutive runs of locations (in location order); None
    when the events need the event-object path."""
    if any(p.fallback for p in parts):
        return None
    offset = int(defs.clock_properties.global_offset)
    collector = Collector(defs, locations, next_track)
    counts: dict[tuple[int, str], int] = {}
    backwards: dict[int, int] = {}
    problems: dict[str, int] = {}
    regions = {r._ref: r for r in defs.regions}
    comms = {c._ref: c for c in defs.comms}
    shift, fr, p2ps, colls = 0, [], [], []
    for part in parts:
        counts.update(part.counts)
        backwards.update(part.backwards)
        fr.append(part.frames)
        p2ps.append(part.p2p)
        coll = part.coll.copy()
        coll[:, 1] = np.where(coll[:, 1] >= 0, coll[:, 1] + shift, -1)
        colls.append(coll)
        shift += len(part.frames)
    never = sum(p.never_completed for p in parts)
    if never:
        problems["posted receive never completed"] = never
    frames = _joined(fr, 4)
    p2p = _joined(p2ps, 9)
    coll = _joined(colls, 9)
    # point-to-point: world ranks through the communicators
    loc_refs = np.asarray(sorted(locations), dtype=I64)
    rank_of = np.asarray([locations[int(r)].rank for r in loc_refs], dtype=I64)
    me = rank_of[np.searchsorted(loc_refs, p2p[:, 8])] if len(p2p) else np.zeros(0, I64)
    peer = _world_all(collector, comms, p2p, me)
    is_send = p2p[:, 5] == 1
    cols = np.stack([p2p[:, 0], np.where(is_send, me, peer), np.where(is_send, peer, me),
                     p2p[:, 2], p2p[:, 3], p2p[:, 4], p2p[:, 6], p2p[:, 7]], axis=1)
    # collectives: ids per distinct (op, comm, root, sent, received); the last End inside a
    # frame wins (as in Collector); an End outside an MPI region is a frame of its own
    coll_rows: list[dict[str, Any]] = []
    coll_ids: dict[tuple[int, ...], int] = {}
    f_coll = np.full(len(frames), -1, dtype=I64)
    f_ref, f_start, f_end, f_region = (frames[:, k] for k in range(4))
    if len(coll):
        uniq, inv = unique_rows(coll[:, 4:9])
        ids = np.asarray([_coll_id(coll_ids, coll_rows, collector, comms, row)
                          for row in uniq.tolist()], dtype=I64)
        cid = ids[inv]
        frame = coll[:, 1]
        inside = np.flatnonzero(frame >= 0)[::-1]
        _, first = np.unique(frame[inside], return_index=True)
        f_coll[frame[inside[first]]] = cid[inside[first]]
        alone = np.flatnonzero(frame < 0)
        if len(alone):
            f_ref = np.concatenate([f_ref, coll[alone, 0]])
            f_start = np.concatenate([f_start, coll[alone, 2]])
            f_end = np.concatenate([f_end, coll[alone, 3]])
            f_region = np.concatenate([f_region, -1 - cid[alone]])
            f_coll = np.concatenate([f_coll, cid[alone]])
    # metrics on columns; instants (rendered by otf2_raw) in time order
    counters = counter_columns(
        collector, defs, np.concatenate([p.met_ref for p in parts]) if parts else
        np.zeros(0, I64), np.concatenate([p.met for p in parts]) if parts else
        np.zeros((0, 4), I64), b"".join(p.met_values for p in parts), offset)
    if counters is None:
        return None
    for inst in sorted((i for p in parts for i in p.rare), key=lambda e: e.t):
        collector.add_instant(inst.ref, inst.t - offset, inst.kind, inst.category, inst.args,
                              inst.pid)
        counts[(inst.ref, inst.kind)] = counts.get((inst.ref, inst.kind), 0) + 1
    for what, n in collector._problems.items():
        problems[what] = problems.get(what, 0) + n
    collector._problems.clear()
    result = FastResult(collector, counts, backwards)
    result.unclosed = (sum(p.unclosed[0] for p in parts), sum(p.unclosed[1] for p in parts))
    result.problems = problems
    result.counters = counters
    result.intervals = _intervals((f_ref, f_start, f_end, f_region, f_coll), coll_rows,
                                  regions, locations)
    result.messages, result.unmatched = _messages([cols[is_send]], [cols[~is_send]],
                                                  collector, comms)
    return result


def _joined(arrays: list[np.ndarray[Any, Any]], width: int) -> np.ndarray[Any, Any]:
    """The rows of ``arrays`` one after the other (no copy for a single part)."""
    if len(arrays) == 1:
        return arrays[0]
    return np.concatenate(arrays) if arrays else np.zeros((0, width), I64)


def unique_rows(rows: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any],
                                                     np.ndarray[Any, Any]]:
    """(distinct rows, index of each row's distinct row): ``np.unique(axis=0)`` through a
    lexsort (much faster on many rows of a few int64 columns)."""
    if not len(rows):
        return rows[:0], np.zeros(0, I64)
    order = np.lexsort(rows.T[::-1])
    srt = rows[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = np.any(srt[1:] != srt[:-1], axis=1)
    group = np.cumsum(new) - 1
    inverse = np.empty(len(order), dtype=I64)
    inverse[order] = group
    return srt[new], inverse


def _world_all(collector: Collector, comms: dict[int, Any], p2p: np.ndarray[Any, Any],
               me: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """World rank of each row's peer (``Collector.world_lookup``, once per (comm, peer)):
    the caller itself on COMM_SELF, the comm-local rank (counted as a problem per event)
    when the communicator cannot translate it."""
    if not len(p2p):
        return np.zeros(0, I64)
    # comm and peer are uint32 in OTF2: one uint64 code per pair (a 1-D unique is fast)
    packed = (p2p[:, 2].astype(np.uint64) << np.uint64(32)) | p2p[:, 1].astype(np.uint64)
    codes, inverse = np.unique(packed, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    world = np.empty(len(codes), dtype=I64)
    kind = np.zeros(len(codes), dtype=I64)  # 0: translated, 1: self, 2: untranslated
    pairs = zip((codes >> np.uint64(32)).tolist(), (codes & np.uint64(0xFFFFFFFF)).tolist(),
                strict=True)
    for k, (comm, local) in enumerate(pairs):
        found = collector.world_lookup(comms[comm], local)
        if found is None:
            world[k], kind[k] = local, 2
        elif found == -1:
            world[k], kind[k] = -1, 1
        else:
            world[k] = found
    untranslated = int(np.count_nonzero(kind[inverse] == 2))
    if untranslated:
        collector._problems["rank not translated through its communicator"] = untranslated
    out: np.ndarray[Any, Any] = np.where(kind[inverse] == 1, me, world[inverse])
    return out


_OPS: dict[int, str] = {}
"""Collective op code -> its name (lower case)."""


def _coll_id(ids: dict[tuple[int, ...], int], rows: list[dict[str, Any]],
             collector: Collector, comms: dict[int, Any], row: list[int]) -> int:
    """Index in ``rows`` of the collective (op, comm, root, sent, received)."""
    key = tuple(row)
    found = ids.get(key)
    if found is None:
        op, comm, root, sent, received = row
        rows.append(collective_args(_op_name(op), collector._comm(comms[comm]), root, sent,
                                    received))
        found = ids[key] = len(rows) - 1
    return found


def _op_name(op: int) -> str:
    found = _OPS.get(op)
    if found is None:
        import _otf2  # type: ignore[import-untyped]

        found = _OPS[op] = collective_op_name(_otf2.CollectiveOp(op))
    return found


def _intervals(frames: tuple[np.ndarray[Any, Any], ...], coll_rows: list[dict[str, Any]],
               regions: dict[int, Any],
               locations: dict[int, LocInfo]) -> pa.Table:
    """The intervals table in ``Collector._interval_table``'s columns and types (``frames``:
    location ref, start and end ticks, region ref (-1 - k: standalone collective k),
    collective index (-1: none) per row)."""
    ref, start, end, region, coll = frames
    loc_refs = np.asarray(sorted(locations), dtype=I64)
    infos = [locations[int(r)] for r in loc_refs]
    # rows grouped by rank (``tables`` slices them), in the old reader's order (the global
    # Enter order) within a rank
    row_rank = np.asarray([i.rank for i in infos], dtype=I64)[np.searchsorted(loc_refs, ref)] \
        if len(ref) else np.zeros(0, I64)
    order = np.lexsort((ref, start, row_rank))
    ref, start, end, region, coll = ref[order], start[order], end[order], region[order], \
        coll[order]
    loc_index = np.searchsorted(loc_refs, ref)
    gpu_loc = np.asarray([i.kind == "gpu_stream" for i in infos], dtype=bool)
    on_gpu = gpu_loc[loc_index] if len(ref) else np.zeros(0, bool)
    # per (region, on_gpu) strings; standalone collectives are region -1 - k
    codes, inverse = _small_unique(region * 2 + on_gpu)
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


def _small_unique(keys: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any],
                                                       np.ndarray[Any, Any]]:
    """``np.unique(keys, return_inverse=True)`` for keys in a small range (region refs):
    a presence table instead of a sort."""
    if not len(keys):
        return keys[:0], np.zeros(0, I64)
    low = int(keys.min())
    span = int(keys.max()) - low + 1
    if span > 4 * len(keys) + 1024:
        codes, inverse = np.unique(keys, return_inverse=True)
        return codes, np.asarray(inverse, dtype=I64).ravel()
    present = np.zeros(span, dtype=bool)
    present[keys - low] = True
    codes = np.flatnonzero(present)
    slot = np.cumsum(present) - 1
    return codes.astype(I64) + low, slot[keys - low].astype(I64)


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
    rest = table.drop_columns(["rank", "start_ticks", "end_ticks", "on_gpu"])
    return interval_table(
        table.column("rank").to_numpy(), to_ns(table.column("start_ticks").to_numpy()),
        to_ns(table.column("end_ticks").to_numpy()),
        table.column("on_gpu").to_numpy(zero_copy_only=False),
        {name: rest.column(name) for name in rest.column_names})


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
    def times(key: str) -> pa.Array:
        ticks, has = parts[key]
        return pa.array(np.where(has, to_ns(ticks) if len(ticks) else ticks, 0), pa.int64(),
                        mask=~has)

    return message_table(
        parts["src_rank"], parts["dst_rank"], parts["owner"], ranks,
        (times("send_start"), times("send_end"), times("recv_start"), times("recv_end")),
        pa.array(parts["bytes"], pa.int64()), pa.array(parts["tag"], pa.int64()),
        pa.array(parts["communicator"], pa.string()))


def tables(result: FastResult, resolution: int, base_ns: int, display: str,
           warn: Any) -> dict[int, dict[str, pa.Table]]:
    """Per rank tables, with the old reader's warnings (``summary_warnings``)."""
    collector = result.collector
    problems = collector.open_problems()
    for what, n in result.problems.items():
        problems[what] += n
    for text in summary_warnings(display, result.unclosed, result.unmatched, problems):
        warn(text)
    to_ns = _converter(resolution, base_ns)
    ranks = sorted(collector._next_track)
    assert result.intervals is not None and result.messages is not None
    return rank_tables(collector, ranks, finish_intervals(result.intervals, to_ns),
                       counter_table(result.counters, to_ns),
                       collector._instant_table(to_ns),
                       finish_messages(result.messages, to_ns, set(ranks)))
