"""One pass over OTF2 events into Python lists, then canonical Arrow tables per rank.

- Enter/Leave -> intervals (one track per location); an Enter without a Leave is closed at
  the last event time of its location, with a warning.
- MpiSend/MpiIsend and MpiRecv/MpiIrecv -> messages, matched in order per (sender rank,
  receiver rank, communicator, tag); send times are those of the enclosing MPI region
  (MPI_Isend start to the end of the region that holds MpiIsendComplete), receive times
  likewise (MPI_Irecv start, from MpiIrecvRequest, to the end of the completing region).
- MpiCollectiveBegin/End -> the collective columns of the enclosing MPI region, or an
  interval of its own (category mpi, named after the operation) when none encloses it.
- Metric -> counters: a metric location is one counter track; metrics recorded on a
  thread or GPU location, or for another scope (e.g. a GPU context), get a counter track
  per (location, scope). Values are scaled by base**exponent of the metric member.
- Every other event -> an instant named after its record type, fields in ``args``.
"""

from __future__ import annotations

import json
import re
import warnings
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from traceatlas.errors import DataQualityWarning
from traceatlas.model.categories import COMM_KERNEL_RE
from traceatlas.model.schema import empty_table
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting

_CPU_CATEGORY: dict[str, str] = {
    "MPI": "mpi",
    "OPENMP": "openmp",
    "OPENMP_TARGET": "openmp",
    "CUDA": "runtime",
    "HIP": "runtime",
    "OPENCL": "runtime",
    "OPENACC": "runtime",
}
"""Region paradigm -> category on CPU locations; any other paradigm is ``region``."""

_INSTANT_CATEGORY: tuple[tuple[str, str], ...] = (("Mpi", "mpi"), ("Omp", "openmp"))
"""Record type prefix -> instant category; anything else is ``other``."""

_MEMSET_RE = re.compile(r"memset", re.IGNORECASE)
_MEMCPY_RE = re.compile(r"mem_?cpy|memcopy|(?<![A-Za-z])[HDP]to[HDP](?![A-Za-z])", re.IGNORECASE)
_MEMCPY_KIND_RE = re.compile(r"([HDP])to([HDP])")
_BASE = {"DECIMAL": 10, "BINARY": 2}


def enum_name(value: Any) -> str:
    """``Paradigm.MPI`` -> ``MPI`` (the otf2 enums are ctypes values); a value the enum
    does not know (a damaged file) -> ``UNKNOWN_<value>``."""
    try:
        return str(value).rsplit(".", 1)[-1]
    except (KeyError, IndexError, ValueError):
        return f"UNKNOWN_{getattr(value, 'value', value)}"


@dataclass
class LocInfo:
    """A location and its track."""

    ref: int
    rank: int
    track_id: int
    kind: str
    name: str
    device: int
    stream: int
    source_pid: str | None


class Frame:
    """An interval being built: an Enter (``region``) or a standalone collective."""

    __slots__ = ("coll", "end", "loc", "name", "region", "start")

    def __init__(self, loc: int, region: Any, start: int) -> None:
        self.loc = loc
        self.region = region
        self.start = start
        self.end: int | None = None
        self.name: str | None = None
        self.coll: dict[str, Any] | None = None


TimeRef = Frame | int | None
"""A message time: an MPI region (its start or end) or an event time (ticks)."""


class Message:
    """A point-to-point message; a side not seen keeps None times."""

    __slots__ = ("bytes", "comm", "dst", "owner", "r0", "r1", "s0", "s1", "src", "tag")

    def __init__(self, src: int, dst: int, comm: str, tag: int, owner: int) -> None:
        self.src, self.dst, self.comm, self.tag, self.owner = src, dst, comm, tag, owner
        self.bytes: int | None = None
        self.s0: TimeRef = None
        self.s1: TimeRef = None
        self.r0: TimeRef = None
        self.r1: TimeRef = None


class Collector:
    """Feed ``(location, event)`` pairs in order, then ``finish`` for the tables."""

    def __init__(self, defs: Any, locations: dict[int, LocInfo],
                 next_track: dict[int, int]) -> None:
        import otf2.events as ev  # type: ignore[import-untyped]

        self._locs = locations
        self._next_track = next_track
        self._offset: int = defs.clock_properties.global_offset
        self._handlers = {
            ev.Enter: self._enter, ev.Leave: self._leave,
            ev.MpiSend: self._send, ev.MpiIsend: self._isend,
            ev.MpiIsendComplete: self._isend_complete,
            ev.MpiRecv: self._recv, ev.MpiIrecv: self._irecv,
            ev.MpiIrecvRequest: self._irecv_request,
            ev.MpiCollectiveBegin: self._coll_begin, ev.MpiCollectiveEnd: self._coll_end,
            ev.Metric: self._metric,
        }
        self.frames: list[Frame] = []
        self.messages: list[Message] = []
        self._stacks: dict[int, list[Frame]] = {}
        self._last: dict[int, int] = {}
        self._types: Counter[tuple[int, str]] = Counter()
        self._sends: dict[tuple[int, int, int, int], deque[Message]] = {}
        self._recvs: dict[tuple[int, int, int, int], deque[Message]] = {}
        self._isends: dict[tuple[int, int], Message] = {}
        self._irecv_posts: dict[tuple[int, int], TimeRef] = {}
        self._coll_open: dict[int, int] = {}
        self._world_cache: dict[tuple[int, int], int | None] = {}
        self._comm_cache: dict[int, tuple[str, str | None]] = {}
        self._mpi_region: dict[int, bool] = {}
        self._metric_cache: dict[tuple[int, int], tuple[list[tuple[str, float]], int]] = {}
        self._counter_tracks: dict[tuple[int, Any], int] = {}
        self.extra_tracks: list[tuple[int, int, int, int, str]] = []  # rank, track, device,
        # location ref, name: counter tracks beyond one per location
        self._counter_names: dict[tuple[int, int], set[str]] = {}
        self.counters: tuple[list[int], list[int], list[int], list[str], list[float]] = (
            [], [], [], [], [])
        self.instants: tuple[list[int], list[int], list[str], list[str], list[str]] = (
            [], [], [], [], [])
        self._pids: dict[int, int] = {}
        self._problems: Counter[str] = Counter()
        self.backwards: Counter[int] = Counter()
        """location ref -> events earlier than the one before them (a damaged file)."""

    # -- the pass ---------------------------------------------------------------------

    def feed(self, location: Any, event: Any) -> None:
        """Handle one event of ``location`` (events must come in time order)."""
        ref = location._ref
        t = event.time - self._offset
        if t < self._last.get(ref, t):
            self.backwards[ref] += 1  # a location's events never go back in time
        self._last[ref] = t
        kind = type(event)
        self._types[(ref, kind.__name__)] += 1
        handler = self._handlers.get(kind)
        if handler is None:
            self._instant(ref, t, event, kind.__name__)
        else:
            handler(ref, t, event)

    def _enter(self, ref: int, t: int, event: Any) -> None:
        frame = Frame(ref, event.region, t)
        self._stacks.setdefault(ref, []).append(frame)
        self.frames.append(frame)

    def _leave(self, ref: int, t: int, event: Any) -> None:
        stack = self._stacks.get(ref, [])
        region = event.region
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].region is region:
                for inner in stack[i + 1:]:  # Leave skipped inner regions: close them here
                    inner.end = t
                    self._problems["enter closed by an outer leave"] += 1
                stack[i].end = t
                del stack[i:]
                return
        self._problems["leave without enter"] += 1
        self._instant(ref, t, event, f"Leave {getattr(region, 'name', region)}")

    def _is_mpi(self, region: Any) -> bool:
        key = id(region)
        found = self._mpi_region.get(key)
        if found is None:
            found = region is not None and enum_name(region.paradigm) == "MPI"
            self._mpi_region[key] = found
        return found

    def _at(self, ref: int, t: int) -> TimeRef:
        """The enclosing MPI region of ``ref`` now, or the event time."""
        stack = self._stacks.get(ref)
        if stack and self._is_mpi(stack[-1].region):
            return stack[-1]
        return t

    def world_lookup(self, comm: Any, local: int) -> int | None:
        """World rank of the comm-local rank ``local`` through the comm's group: -1 for
        the caller itself (COMM_SELF), None when the group cannot translate it (cached
        per (comm, local); the one rule both paths use)."""
        key = (comm._ref, local)
        if key not in self._world_cache:
            group = comm.group
            rank = None
            if group is not None and enum_name(group.group_type) == "COMM_SELF":
                rank = -1  # the caller itself
            elif group is not None and 0 <= local < len(group.members):
                info = self._locs.get(getattr(group.members[local], "_ref", -1))
                rank = info.rank if info is not None else None
            self._world_cache[key] = rank
        return self._world_cache[key]

    def _world(self, comm: Any, local: int, ref: int) -> int:
        """World rank of the comm-local rank ``local`` (through the comm's group)."""
        rank = self.world_lookup(comm, local)
        if rank == -1:
            return self._locs[ref].rank
        if rank is None:
            self._problems["rank not translated through its communicator"] += 1
            return local
        return rank

    def _comm(self, comm: Any) -> tuple[str, str | None]:
        """(name, JSON list of world ranks) of a communicator."""
        found = self._comm_cache.get(comm._ref)
        if found is None:
            name = comm.name or f"comm {comm._ref}"
            group = comm.group
            members = None
            if group is not None and enum_name(group.group_type) == "COMM_GROUP":
                infos = [self._locs.get(getattr(m, "_ref", -1)) for m in group.members]
                if all(i is not None for i in infos):
                    members = json.dumps([i.rank for i in infos if i is not None])
            found = (name, members)
            self._comm_cache[comm._ref] = found
        return found

    def _send(self, ref: int, t: int, event: Any) -> Message:
        src = self._locs[ref].rank
        comm = event.communicator
        dst = self._world(comm, event.receiver, ref)
        key = (src, dst, comm._ref, event.msg_tag)
        msg = self._match(key, comm, src, self._recvs, self._sends, event.msg_length)
        msg.s0 = msg.s1 = self._at(ref, t)
        msg.bytes = event.msg_length  # the sender's length wins
        return msg

    def _match(self, key: tuple[int, int, int, int], comm: Any, owner: int,
               other_side: dict[tuple[int, int, int, int], deque[Message]],
               this_side: dict[tuple[int, int, int, int], deque[Message]],
               nbytes: int) -> Message:
        """The oldest message the other side left under ``key`` (FIFO matching), else a
        new one (stored with ``owner``'s rank) queued on this side for the other."""
        waiting = other_side.get(key)
        if waiting:
            return waiting.popleft()
        msg = Message(key[0], key[1], self._comm(comm)[0], key[3], owner)
        msg.bytes = nbytes
        self.messages.append(msg)
        this_side.setdefault(key, deque()).append(msg)
        return msg

    def _isend(self, ref: int, t: int, event: Any) -> None:
        self._isends[(ref, event.request_id)] = self._send(ref, t, event)

    def _isend_complete(self, ref: int, t: int, event: Any) -> None:
        msg = self._isends.pop((ref, event.request_id), None)
        if msg is None:
            self._problems["isend completion without isend"] += 1
            self._instant(ref, t, event, type(event).__name__)
            return
        msg.s1 = self._at(ref, t)

    def _irecv_request(self, ref: int, t: int, event: Any) -> None:
        self._irecv_posts[(ref, event.request_id)] = self._at(ref, t)

    def _irecv(self, ref: int, t: int, event: Any) -> None:
        self._recv(ref, t, event, self._irecv_posts.pop((ref, event.request_id), None))

    def _recv(self, ref: int, t: int, event: Any, start: TimeRef = None) -> None:
        dst = self._locs[ref].rank
        comm = event.communicator
        src = self._world(comm, event.sender, ref)
        key = (src, dst, comm._ref, event.msg_tag)
        msg = self._match(key, comm, dst, self._sends, self._recvs, event.msg_length)
        at = self._at(ref, t)
        msg.r0 = start if start is not None else at
        msg.r1 = at

    def _coll_begin(self, ref: int, t: int, event: Any) -> None:
        self._coll_open[ref] = t

    def _coll_end(self, ref: int, t: int, event: Any) -> None:
        begin = self._coll_open.pop(ref, None)
        if begin is None:
            self._problems["collective end without begin"] += 1
            begin = t
        op = collective_op_name(event.collective_op)
        enclosing = self._at(ref, t)
        frame = enclosing if isinstance(enclosing, Frame) else None
        if frame is None:
            frame = Frame(ref, None, begin)
            frame.end, frame.name = t, op
            self.frames.append(frame)
        frame.coll = collective_args(op, self._comm(event.communicator), event.root,
                                     event.size_sent, event.size_received)

    def _metric(self, ref: int, t: int, event: Any) -> None:
        members, track = self._metric_target(ref, event.metric)
        rank = self._locs[ref].rank
        c_rank, c_track, c_t, c_name, c_value = self.counters
        for (name, scale), value in zip(members, event.values, strict=False):
            if value is None:
                self._problems["metric value missing"] += 1
                continue
            c_rank.append(rank)
            c_track.append(track)
            c_t.append(t)
            c_name.append(name)
            c_value.append(float(value) * scale)
        if len(event.values) != len(members):
            self._problems["metric event whose value count differs from its members"] += 1

    def _metric_target(self, ref: int, metric: Any) -> tuple[list[tuple[str, float]], int]:
        """((member name, scale) per value, counter track) of a metric on ``ref``."""
        key = (ref, metric._ref)
        found = self._metric_cache.get(key)
        if found is not None:
            return found
        info = self._locs[ref]
        scope = getattr(metric, "scope", None)
        klass = metric.metric_class if hasattr(metric, "metric_class") else metric
        members = [(m.name, _scale(m)) for m in klass.members]
        own = scope is None or type(scope).__name__ == "SystemTreeNode" or (
            getattr(scope, "_ref", None) == ref and type(scope).__name__ == "Location"
        ) or (type(scope).__name__ == "LocationGroup" and scope.name == info.source_pid)
        scope_key = None if own or scope is None else (type(scope).__name__, scope._ref)
        track = self._counter_tracks.get((ref, scope_key))
        if track is None:
            if info.kind == "counter" and scope_key is None:
                track = info.track_id
            else:
                track = self._next_track[info.rank]
                self._next_track[info.rank] += 1
                label = "metrics" if scope_key is None else f"[{getattr(scope, 'name', '')}]"
                device = next((i.device for i in self._locs.values() if i.kind == "gpu_stream"
                               and scope_key is not None
                               and i.source_pid == getattr(scope, "name", None)), -1)
                self.extra_tracks.append((info.rank, track, device, ref,
                                          f"{info.name or 'location ' + str(ref)} {label}"))
            self._counter_tracks[(ref, scope_key)] = track
        names = self._counter_names.setdefault((info.rank, track), set())
        names.update(name for name, _ in members)
        found = (members, track)
        self._metric_cache[key] = found
        return found

    def _instant(self, ref: int, t: int, event: Any, name: str) -> None:
        category, args, pid = instant_row(event)
        self.add_instant(ref, t, name, category, args, pid)

    def add_instant(self, ref: int, t: int, name: str, category: str, args: str,
                    pid: int | None) -> None:
        """One instant row (``t`` in ticks since the global offset)."""
        if pid is not None:
            self._pids.setdefault(self._locs[ref].rank, pid)
        i_ref, i_t, i_name, i_cat, i_args = self.instants
        i_ref.append(ref)
        i_t.append(t)
        i_name.append(name)
        i_cat.append(category)
        i_args.append(args)

    # -- the tables -------------------------------------------------------------------

    @property
    def location_counts(self) -> dict[int, int]:
        """location ref -> number of events read."""
        out: dict[int, int] = {}
        for (ref, _kind), n in self._types.items():
            out[ref] = out.get(ref, 0) + n
        return out

    @property
    def event_counts(self) -> dict[int, dict[str, int]]:
        """rank -> record type -> number of events."""
        out: dict[int, dict[str, int]] = {}
        for (ref, kind), n in self._types.items():
            per = out.setdefault(self._locs[ref].rank, {})
            per[kind] = per.get(kind, 0) + n
        return out

    def finish(self, resolution: int, base_ns: int,
               display: str) -> dict[int, dict[str, pa.Table]]:
        """Close what is open, warn about what did not match; tables per rank.

        ``resolution`` is in ticks per second; ``base_ns`` is added to every time."""
        unclosed = 0
        for ref, stack in self._stacks.items():
            for frame in stack:
                frame.end = self._last[ref]
                unclosed += 1
        where = sum(1 for s in self._stacks.values() if s)
        sends = sum(1 for m in self.messages if m.r1 is None)
        recvs = sum(1 for m in self.messages if m.s0 is None)
        if self._irecv_posts:
            self._problems["posted receive never completed"] += len(self._irecv_posts)
        for text in summary_warnings(display, (unclosed, where), (sends, recvs),
                                     self.open_problems()):
            _warn(text)
        to_ns = _converter(resolution, base_ns)
        ranks = sorted(self._next_track)
        return rank_tables(self, ranks, self._interval_table(to_ns),
                           self._counter_table(to_ns), self._instant_table(to_ns),
                           self._message_table(to_ns, set(ranks)))

    def open_problems(self) -> Counter[str]:
        """The problems counted so far plus the collectives still open (the end of the
        pass: a Begin without its End)."""
        out = Counter(self._problems)
        if self._coll_open:
            out["collective begin without end"] += len(self._coll_open)
        return out

    def _interval_table(self, to_ns: Any) -> pa.Table:
        gpu = {ref for ref, info in self._locs.items() if info.kind == "gpu_stream"}
        cache: dict[tuple[int, bool], tuple[str, str, str, str | None, dict[str, Any]]] = {}
        args: dict[str, Any]
        cols: dict[str, list[Any]] = {k: [] for k in (
            "rank", "track_id", "start", "end", "name", "category", "source_category",
            "bytes", "device", "stream", "collective", "process_group", "group_ranks",
            "memcpy_kind", "args")}
        for f in self.frames:
            info = self._locs[f.loc]
            on_gpu = f.loc in gpu
            if f.region is None:
                name, cat, src_cat, kind, args = f.name or "", "mpi", "MPI", None, {}
            else:
                key = (id(f.region), on_gpu)
                if key not in cache:
                    cache[key] = _region_info(f.region, on_gpu)
                name, cat, src_cat, kind, args = cache[key]
            coll = f.coll
            if coll is not None:
                args = {**args, **coll}
            cols["rank"].append(info.rank)
            cols["track_id"].append(info.track_id)
            cols["start"].append(f.start)
            cols["end"].append(f.end)
            cols["name"].append(name)
            cols["category"].append(cat)
            cols["source_category"].append(src_cat)
            cols["bytes"].append(coll["size_sent"] if coll else None)
            cols["device"].append(info.device if on_gpu else None)
            cols["stream"].append(info.stream if on_gpu else None)
            cols["collective"].append(coll["collective_op"] if coll else None)
            cols["process_group"].append(coll["communicator"] if coll else None)
            cols["group_ranks"].append(coll["group_ranks"] if coll else None)
            cols["memcpy_kind"].append(kind)
            cols["args"].append(json.dumps(args))
        rank = np.asarray(cols.pop("rank"), dtype=np.int64)
        start = to_ns(cols.pop("start"))
        end = to_ns(cols.pop("end"))
        gpu_rows = np.asarray([self._locs[f.loc].kind == "gpu_stream" for f in self.frames],
                              dtype=bool)
        types = {"track_id": pa.int32(), "bytes": pa.int64(), "device": pa.int32(),
                 "stream": pa.int64()}
        return interval_table(rank, start, end, gpu_rows, {
            k: pa.array(v, types.get(k, pa.string())) for k, v in cols.items()})

    def _counter_table(self, to_ns: Any) -> pa.Table:
        c_rank, c_track, c_t, c_name, c_value = self.counters
        return counter_table(c_rank, c_track, to_ns(c_t), pa.array(c_name, pa.string()),
                             c_value)

    def _instant_table(self, to_ns: Any) -> pa.Table:
        i_ref, i_t, i_name, i_cat, i_args = self.instants
        return pa.table({
            "rank": pa.array([self._locs[r].rank for r in i_ref], pa.int32()),
            "track_id": pa.array([self._locs[r].track_id for r in i_ref], pa.int32()),
            "ts_ns": pa.array(to_ns(i_t), pa.int64()),
            "name": pa.array(i_name, pa.string()),
            "category": pa.array(i_cat, pa.string()),
            "source_category": pa.array(["OTF2"] * len(i_ref), pa.string()),
            "phase": pa.array(["otf2"] * len(i_ref), pa.string()),
            "args": pa.array(i_args, pa.string()),
        })

    def _message_table(self, to_ns: Any, ranks: set[int]) -> pa.Table:
        msgs = self.messages

        def times(attr: str, use_end: bool) -> pa.Array:
            ticks = [_ticks(getattr(m, attr), use_end) for m in msgs]
            known = [t for t in ticks if t is not None]
            ns = iter(to_ns(known).tolist())
            return pa.array([None if t is None else next(ns) for t in ticks], pa.int64())

        return message_table(
            np.asarray([m.src for m in msgs], dtype=np.int64),
            np.asarray([m.dst for m in msgs], dtype=np.int64),
            np.asarray([m.owner for m in msgs], dtype=np.int64), ranks,
            (times("s0", False), times("s1", True), times("r0", False), times("r1", True)),
            pa.array([m.bytes for m in msgs], pa.int64()),
            pa.array([m.tag for m in msgs], pa.int64()),
            pa.array([m.comm for m in msgs], pa.string()))

    def _track_table(self, rank: int) -> pa.Table:
        rows: list[tuple[int, str, str, int, int, str | None, str]] = []
        for info in self._locs.values():
            if info.rank != rank:
                continue
            name = info.name
            if not name and info.kind == "counter":
                name = ", ".join(sorted(self._counter_names.get((rank, info.track_id), ())))
            rows.append((info.track_id, info.kind, name, info.device, info.stream,
                         info.source_pid, str(info.ref)))
        for r, track, device, ref, name in self.extra_tracks:
            if r == rank:
                rows.append((track, "counter", name, device, -1, self._locs[ref].source_pid,
                             str(ref)))
        pid = self._pids.get(rank)
        return pa.table({
            "track_id": pa.array([r[0] for r in rows], pa.int32()),
            "kind": pa.array([r[1] for r in rows], pa.string()),
            "name": pa.array([r[2] for r in rows], pa.string()),
            "pid": pa.array([pid if r[1] == "host_thread" else None for r in rows],
                            pa.int64()),
            "device": pa.array([r[3] for r in rows], pa.int32()),
            "stream": pa.array([r[4] for r in rows], pa.int64()),
            "source_pid": pa.array([r[5] for r in rows], pa.string()),
            "source_tid": pa.array([r[6] for r in rows], pa.string()),
        })


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=4)


# -- the rules both paths share (Collector here, otf2_fast on columns) -----------------


def collective_op_name(op: Any) -> str:
    """A collective's operation name: ``CollectiveOp.ALLREDUCE`` -> ``allreduce``."""
    return enum_name(op).lower()


def collective_args(op: str, comm: tuple[str, str | None], root: int, sent: int,
                    received: int) -> dict[str, Any]:
    """The collective columns (and args keys) of a frame; ``comm`` is ``Collector._comm``'s
    (name, JSON list of world ranks); sizes in bytes."""
    return {"collective_op": op, "communicator": comm[0], "group_ranks": comm[1],
            "root": root, "size_sent": sent, "size_received": received}


def summary_warnings(display: str, unclosed: tuple[int, int], unmatched: tuple[int, int],
                     problems: Mapping[str, int]) -> list[str]:
    """The end-of-pass warnings, in order: Enters without a Leave ((count, locations)),
    unmatched messages ((sends, receives)), then each problem (sorted by its text)."""
    out = []
    if unclosed[0]:
        out.append(f"{display}: {unclosed[0]} Enter event(s) without a Leave on "
                   f"{unclosed[1]} location(s); closed at the last event time of their "
                   "location")
    sends, recvs = unmatched
    if sends or recvs:
        out.append(f"{display}: {sends} MPI send(s) without a matching receive and {recvs} "
                   "receive(s) without a matching send; kept with the other side null")
    out += [f"{display}: {n} x {what}" for what, n in sorted(problems.items())]
    return out


def rank_tables(collector: Collector, ranks: list[int], intervals: pa.Table,
                counters: pa.Table, instants: pa.Table,
                messages: pa.Table) -> dict[int, dict[str, pa.Table]]:
    """Per rank tables from the whole-archive tables (each with a ``rank`` column)."""
    per = {name: split_by_rank(table, ranks) for name, table in (
        ("intervals", intervals), ("counters", counters), ("instants", instants),
        ("messages", messages))}
    return {
        rank: {
            "tracks": collector._track_table(rank),
            "intervals": per["intervals"][rank],
            "counters": per["counters"][rank],
            "instants": per["instants"][rank],
            "messages": per["messages"][rank],
            "flows": empty_table("flows").drop_columns(["rank"]),
        }
        for rank in ranks
    }


def interval_table(rank: np.ndarray[Any, Any], start_ns: np.ndarray[Any, Any],
                   end_ns: np.ndarray[Any, Any], gpu_rows: np.ndarray[Any, Any],
                   rest: dict[str, Any]) -> pa.Table:
    """The intervals table: times in ns, nesting depth per track (``rest`` holds
    ``track_id`` and the other columns, in the schema's order), step -1."""
    rank = np.asarray(rank, dtype=np.int64)
    track = np.asarray(rest["track_id"], dtype=np.int64)
    track_key = (rank << 32) + track
    order = sort_for_nesting(track_key, start_ns, end_ns)
    depth = np.empty(len(order), dtype=np.int64)
    depth[order] = nesting_depth(
        track_key[order], start_ns[order], end_ns[order], gpu_rows[order])
    return pa.table({
        "rank": pa.array(rank, pa.int32()),
        "start_ns": pa.array(start_ns, pa.int64()),
        "end_ns": pa.array(end_ns, pa.int64()),
        "dur_ns": pa.array(end_ns - start_ns, pa.int64()),
        "depth": pa.array(depth, pa.int32()),
        "step": pa.array(np.full(len(rank), -1), pa.int32()),
        **rest,
    })


def counter_table(rank: Any, track: Any, ts_ns: Any, name: pa.Array, value: Any) -> pa.Table:
    """The counters table (times in ns, values already scaled)."""
    return pa.table({
        "rank": pa.array(rank, pa.int32()),
        "track_id": pa.array(track, pa.int32()),
        "ts_ns": pa.array(ts_ns, pa.int64()),
        "name": name,
        "value": pa.array(value, pa.float64()),
    })


def message_table(src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any],
                  owner: np.ndarray[Any, Any], ranks: set[int],
                  times: tuple[pa.Array, pa.Array, pa.Array, pa.Array], nbytes: pa.Array,
                  tag: pa.Array, comm: pa.Array) -> pa.Table:
    """The messages table: a message belongs to its sender's rank when the sender is one
    of ``ranks``, else to ``owner`` (the rank that saw it); ``times`` are send start/end
    and receive start/end in ns (null where that side was not seen)."""
    in_ranks = np.isin(src, np.asarray(sorted(ranks), dtype=np.int64))
    return pa.table({
        "rank": pa.array(np.where(in_ranks, src, owner), pa.int32()),
        "src_rank": pa.array(src, pa.int32()),
        "dst_rank": pa.array(dst, pa.int32()),
        "send_start_ns": times[0],
        "send_end_ns": times[1],
        "recv_start_ns": times[2],
        "recv_end_ns": times[3],
        "bytes": nbytes,
        "tag": tag,
        "communicator": comm,
    })


def _scale(member: Any) -> float:
    """base ** exponent of a metric member (1.0 when the exponent is 0)."""
    exponent = int(member.exponent or 0)
    if exponent == 0:
        return 1.0
    return float(_BASE.get(enum_name(member.base), 10)) ** exponent


def _ticks(ref: TimeRef, use_end: bool) -> int | None:
    if isinstance(ref, Frame):
        return ref.end if use_end else ref.start
    return ref


def _region_info(region: Any, on_gpu: bool) -> tuple[str, str, str, str | None,
                                                       dict[str, Any]]:
    """(name, category, source category, memcpy kind, args) of a region."""
    name = str(region.name)
    paradigm = enum_name(region.paradigm)
    role = enum_name(region.region_role)
    kind = None
    if not on_gpu:
        category = _CPU_CATEGORY.get(paradigm, "region")
    elif _MEMSET_RE.search(name):
        category = "memset"
    elif role == "DATA_TRANSFER" or _MEMCPY_RE.search(name):
        category = "memcpy"
        match = _MEMCPY_KIND_RE.search(name)
        kind = f"{match.group(1)}to{match.group(2)}" if match else None
    else:
        category = "comm_kernel" if COMM_KERNEL_RE.search(name) else "kernel"
    args = {"canonical_name": region.canonical_name, "paradigm": paradigm, "role": role,
            "source_file": region.source_file, "begin_line": region.begin_line_number,
            "end_line": region.end_line_number, "region_ref": region._ref}
    return name, category, paradigm, kind, args


def instant_row(event: Any) -> tuple[str, str, int | None]:
    """(category, args JSON, ProcessId attribute when an int) of an instant event."""
    args = _event_args(event)
    attrs = args.get("attributes")
    pid = attrs["ProcessId"] if isinstance(attrs, dict) and isinstance(
        attrs.get("ProcessId"), int) else None
    kind = type(event).__name__
    category = next((c for p, c in _INSTANT_CATEGORY if kind.startswith(p)), "other")
    return category, json.dumps(args, default=str), pid


def _plain(value: Any) -> Any:
    """A JSON-friendly form of an event field (definitions by name, enums by name)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "_ref"):
        return getattr(value, "name", None) or f"{type(value).__name__} {value._ref}"
    return str(value)


def _event_args(event: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in vars(event).items():
        if key == "time":
            continue
        if key == "attributes":
            if value:
                out["attributes"] = {_plain(a): _plain(v) for a, v in value.items()}
            continue
        out[key] = _plain(value)
    return out


def _converter(resolution: int, base_ns: int) -> Any:
    """ticks since the global offset -> ns (+ base), exact, rounded to the nearest ns."""
    half = resolution // 2

    def to_ns(ticks: list[int]) -> np.ndarray[Any, np.dtype[np.int64]]:
        if resolution * 10**9 < (1 << 62):
            q, r = np.divmod(np.asarray(ticks, dtype=np.int64), resolution)
            out: np.ndarray[Any, np.dtype[np.int64]] = (
                q * 10**9 + (r * 10**9 + half) // resolution + base_ns)
            return out
        return np.asarray([(t * 10**9 + half) // resolution + base_ns for t in ticks],
                          dtype=np.int64)

    return to_ns


def split_by_rank(table: pa.Table, ranks: list[int]) -> dict[int, pa.Table]:
    """Rows of each rank (without the rank column), in table order within a rank: rows
    already grouped by rank are zero-copy slices; otherwise one stable gather by rank,
    then slices."""
    rank = table.column("rank").to_numpy(zero_copy_only=False)
    rest = table.drop_columns(["rank"])
    if len(rank) > 1 and np.any(np.diff(rank) < 0):
        order = np.argsort(rank, kind="stable")
        rest, rank = rest.take(pa.array(order)), rank[order]
    lo = np.searchsorted(rank, ranks, side="left").tolist()
    hi = np.searchsorted(rank, ranks, side="right").tolist()
    return {r: rest.slice(a, b - a) for r, a, b in zip(ranks, lo, hi, strict=True)}
