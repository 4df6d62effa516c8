"""OTF2 (Score-P) reader: an anchor ``<stem>.otf2`` with ``<stem>.def`` and ``<stem>/``.

One ``RankData`` per location group of process type (an MPI rank); GPU (accelerator)
location groups belong to the process that created them. Definitions are read here
(ranks, tracks, clock); the single pass over the events and the table building are in
``otf2_events.py``.

Times: ``ns = (t - global_offset) * 1e9 / timer_resolution`` (exact integer arithmetic,
rounded to the nearest ns), plus ``ClockProperties.realtime_timestamp`` (ns since the unix
epoch) when the archive has one.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import _otf2  # type: ignore[import-untyped]
import otf2  # type: ignore[import-untyped]
import otf2.error  # type: ignore[import-untyped]
import pyarrow as pa

from traceatlas.errors import CorruptTraceError, DataQualityWarning, UnsupportedFormatError
from traceatlas.io.otf2_events import Collector, LocInfo, enum_name
from traceatlas.io.otf2_fast import FastResult, build
from traceatlas.io.otf2_fast import tables as fast_tables
from traceatlas.io.otf2_isolated import isolated
from traceatlas.io.otf2_local import local_part
from traceatlas.io.otf2_parallel import PARALLEL_MIN_EVENTS, read_parallel, worth_it
from traceatlas.io.otf2_raw import read_raw
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source

UNDEFINED_TIMESTAMP = (1 << 64) - 1
"""OTF2_UNDEFINED_TIMESTAMP: ``realtime_timestamp`` when the archive has none."""

_KIND_OF_LOCATION: dict[str, str] = {
    "CPU_THREAD": "host_thread",
    "GPU": "gpu_stream",
    "ACCELERATOR_STREAM": "gpu_stream",
    "METRIC": "counter",
}
"""OTF2 LocationType name -> track kind; anything else is ``other``."""

_DEVICE_STREAM_IN_NAME = re.compile(r"\[(\d+):(\d+)\]")
"""Score-P accelerator location names: ``CUDA[device:stream]``, ``HIP[device:stream]``."""

_OTF2_ERROR_LINE = re.compile(r"\[OTF2\][^:]*:\d+: error: (.*)")
_PYTHON_CALLBACK = "An unhandled python exception has occurred"
"""What the otf2 wheel writes to sys.stderr when one of its reader callbacks raises."""


@dataclass
class Layout:
    """What the definitions say about ranks and tracks."""

    ranks: dict[int, Any]  # rank -> process LocationGroup
    hosts: dict[int, str | None]
    locations: dict[int, LocInfo]  # location ref -> info
    next_track: dict[int, int]  # rank -> next free track id
    world_size: int
    warnings: list[str] = field(default_factory=list)


class Otf2Reader:
    """Reader for OTF2 archives (Score-P): pass the ``.otf2`` anchor or its directory."""

    name = "otf2"
    description = "OTF2 archive (Score-P): <name>.otf2 anchor with <name>.def and <name>/"

    fast = True
    """Read the events through ``otf2_raw``/``otf2_fast`` where they can take the trace;
    False: always through ``Collector`` (the reference the tests compare against)."""

    parallel_min_events = PARALLEL_MIN_EVENTS
    """Archives with at least this many events are read by ``threads`` worker processes
    (when the machine has an idle core: see ``otf2_parallel.worth_it``)."""
    parallel_load_check = True

    def _fast(self, anchor: str, defs: Any, layout: Layout, threads: int) -> FastResult | None:
        refs = [loc._ref for loc in defs.locations]
        sizes = [int(loc.number_of_events) for loc in defs.locations]
        if threads > 1 and len(refs) > 1 and sum(sizes) >= self.parallel_min_events and (
                not self.parallel_load_check or worth_it(threads)):
            parts = read_parallel(anchor, refs, sizes, threads)
        else:
            parts = [local_part(read_raw(anchor, defs, refs), defs, refs)]
        fast = build(parts, defs, layout.locations, dict(layout.next_track))
        if fast is not None:
            layout.next_track.clear()
            layout.next_track.update(fast.collector._next_track)
        return fast

    def sniff(self, head: bytes, source: Source) -> bool:
        """An ``.otf2`` file name (the anchor); its content is checked by ``read``."""
        return source.file_name.endswith(".otf2")

    isolate = True
    """Read in a child process (``otf2_isolated``): the C library may abort() on a damaged
    archive. False: in this process (the child itself, and tests of the reader)."""

    def read(self, source: Source, *, threads: int = 1) -> list[RankData]:
        """Parse the archive: one ``RankData`` per process location group (times in ns)."""
        anchor = _check_anchor(source)
        if self.isolate:
            return isolated(source.display, _read_here, self, source, threads)
        return self._read(source, anchor, threads)

    def _read(self, source: Source, anchor: str, threads: int) -> list[RankData]:
        captured: list[str] = []
        try:
            with _c_stderr(captured):
                reader = otf2.reader.Reader(anchor)
                try:
                    _check_event_files(source.display, anchor, reader.definitions)
                    defs = reader.definitions
                    layout = _layout(defs)
                    fast = self._fast(anchor, defs, layout, threads) if self.fast else None
                    collector: Any = fast
                    if fast is None:
                        collector = Collector(defs, layout.locations, layout.next_track)
                        for location, event in reader.events:
                            collector.feed(location, event)
                finally:
                    reader.close()
        except (_otf2.Error, otf2.error.Error) as exc:
            raise CorruptTraceError(source.display, _problem(exc, captured)) from exc
        except (KeyError, IndexError) as exc:  # a definition referenced but never read
            raise CorruptTraceError(source.display, "damaged definitions: "
                                    + _problem(exc, captured)) from exc
        errors = [m.group(1) for m in map(_OTF2_ERROR_LINE.search, captured) if m]
        if any(_PYTHON_CALLBACK in line for line in captured):
            errors.append(next(ln.strip() for ln in reversed(captured) if ln.strip()))
        if errors:  # the library skipped what it could not read: the archive is damaged
            raise CorruptTraceError(source.display, "the OTF2 library could not read part of "
                                    f"the archive (a damaged definitions or event file): "
                                    f"{errors[0]}")
        messages = [line for line in captured if line.strip()]
        if messages:
            _warn(f"{source.display}: the OTF2 library reported: " + " | ".join(messages[:3]))
        _check_counts(source.display, anchor, defs, collector.location_counts,
                      collector.backwards)
        if defs.clock_properties.timer_resolution <= 0:
            raise CorruptTraceError(source.display, "the archive's timer resolution is "
                                    f"{defs.clock_properties.timer_resolution} ticks/s")
        for text in layout.warnings:
            _warn(f"{source.display}: {text}")
        clock_props = defs.clock_properties
        clock = _clock(clock_props)
        if fast is None:
            per_rank = collector.finish(
                clock_props.timer_resolution, int(clock["base_ns"]), source.display
            )
        else:
            per_rank = fast_tables(fast, clock_props.timer_resolution, int(clock["base_ns"]),
                                   source.display, _warn)
        counts = collector.event_counts
        result = []
        for rank, group in sorted(layout.ranks.items()):
            tables = per_rank[rank]
            tables["metadata"] = _metadata(defs, group, counts.get(rank, {}))
            result.append(RankData(
                tables=tables,
                source_format="otf2",
                rank=rank,
                rank_source="OTF2 location group",
                clock=dict(clock),
                world_size=layout.world_size,
                host=layout.hosts.get(rank),
            ))
        return result


def _read_here(reader: Otf2Reader, source: Source, threads: int) -> list[RankData]:
    """``reader.read`` in this process (the isolated child's entry point)."""
    return reader._read(source, _check_anchor(source), threads)


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=3)


def _check_anchor(source: Source) -> str:
    """The anchor path, after checking that it is a readable OTF2 anchor with its .def."""
    if source.member is not None:
        raise UnsupportedFormatError(
            source.display, "an OTF2 archive cannot be read from inside a tar archive; "
            "extract the archive first"
        )
    head = source.head(64)
    if b"OTF2" not in head[:16]:
        raise CorruptTraceError(source.display, "not an OTF2 anchor file (no OTF2 header)")
    stem = source.path[: -len(".otf2")]
    if not os.path.isfile(stem + ".def"):
        raise CorruptTraceError(
            source.display,
            f"the global definitions file {os.path.basename(stem)}.def is missing "
            "(an OTF2 archive is the .otf2 anchor, the .def file and the folder of events)",
        )
    return source.path


def _check_event_files(display: str, anchor: str, defs: Any) -> None:
    """Every location with events has its event file in ``<stem>/`` (POSIX substrate)."""
    stem = anchor[: -len(".otf2")]
    folder = os.path.basename(stem)
    expected = [loc for loc in defs.locations if loc.number_of_events > 0]
    if not expected:
        return
    if not os.path.isdir(stem):
        raise CorruptTraceError(
            display, f"the event folder {folder}/ is missing ({len(expected)} location(s) "
            "have events); copy the whole archive"
        )
    names = set(os.listdir(stem))
    if any(n.endswith(".sion") for n in names):
        return  # SION substrate: one container file, checked by the library
    missing = [
        loc for loc in expected
        if f"{loc._ref}.evt" not in names and f"{loc._ref}.evt.z" not in names
    ]
    if missing:
        first = missing[0]
        raise CorruptTraceError(
            display, f"event file {folder}/{first._ref}.evt of location {first.name!r} is "
            f"missing ({len(missing)} of {len(expected)} event files missing)"
        )


def _check_counts(display: str, anchor: str, defs: Any, read: dict[int, int],
                  backwards: dict[int, int]) -> None:
    """Every location has as many events as its definition declares, in time order.

    A truncated event file can read without an error from the library: shorter, or
    (seen with the otf2 3.x wheel) with the missing events taken from another
    location's buffer, which then go back in time.
    """
    folder = os.path.basename(anchor[: -len(".otf2")])
    for loc in defs.locations:
        declared, got = int(loc.number_of_events), read.get(loc._ref, 0)
        where = f"event file {folder}/{loc._ref}.evt of location {loc.name!r}"
        if got != declared:
            raise CorruptTraceError(
                display, f"{where} holds {got} of the {declared} events the definitions "
                "declare (truncated or damaged)")
        if backwards.get(loc._ref):
            raise CorruptTraceError(
                display, f"{where} has {backwards[loc._ref]} event(s) earlier than the event "
                "before them (truncated or damaged)")


@contextmanager
def _c_stderr(lines: list[str]) -> Iterator[None]:
    """Capture what the OTF2 C library writes to file descriptor 2, and what the otf2
    wheel's callbacks write to ``sys.stderr`` (a Python traceback when a damaged record
    breaks a callback), into ``lines``."""
    sys.stderr.flush()
    saved = os.dup(2)
    python = io.StringIO()
    with tempfile.TemporaryFile() as tmp, contextlib.redirect_stderr(python):
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode(errors="replace").splitlines())
            lines.extend(python.getvalue().splitlines())


def _problem(exc: BaseException, captured: list[str]) -> str:
    """One line: the OTF2 library's first error message (or the last line of a Python
    traceback from the wheel's callbacks) and the exception."""
    details = [m.group(1) for m in map(_OTF2_ERROR_LINE.search, captured) if m]
    if not details and any(_PYTHON_CALLBACK in line for line in captured):
        last = next((ln.strip() for ln in reversed(captured) if ln.strip()), "")
        details = [f"a damaged record ({last})"]
    first = f"{details[0]} " if details else ""
    return f"the OTF2 library could not read the archive: {first}({exc})"


def _layout(defs: Any) -> Layout:
    """Ranks (process location groups), their hosts, and one track per location."""
    groups = list(defs.location_groups)
    process = [g for g in groups if enum_name(g.location_group_type) == "PROCESS"] or groups
    rank_of_group = _rank_numbers(defs, process)
    notes: list[str] = []
    owner: dict[int, int] = {}  # location group ref -> rank
    for group in groups:
        rank = _owner_rank(group, rank_of_group)
        if rank is None:
            rank = min(rank_of_group.values(), default=0)
            notes.append(f"location group {group.name!r} has no owning process; "
                         f"assigned to rank {rank}")
        owner[group._ref] = rank
    next_track: dict[int, int] = dict.fromkeys(rank_of_group.values(), 0)
    accel_seen: dict[int, list[int]] = {}
    locations: dict[int, LocInfo] = {}
    for loc in defs.locations:
        group = loc.group
        rank = owner.get(group._ref, 0) if group is not None else 0
        next_track.setdefault(rank, 0)
        track_id = next_track[rank]
        next_track[rank] += 1
        kind = _KIND_OF_LOCATION.get(enum_name(loc.type), "other")
        device, stream = -1, -1
        if kind == "gpu_stream":
            device, stream = _device_stream(loc, accel_seen)
        locations[loc._ref] = LocInfo(
            ref=loc._ref, rank=rank, track_id=track_id, kind=kind, name=loc.name or "",
            device=device, stream=stream,
            source_pid=group.name if group is not None else None,
        )
    ranks = {rank_of_group[g._ref]: g for g in process}
    hosts = {rank_of_group[g._ref]: _host(g.system_tree_parent) for g in process}
    return Layout(ranks, hosts, locations, next_track, len(process), notes)


def _rank_numbers(defs: Any, process: list[Any]) -> dict[int, int]:
    """Process group ref -> rank: the MPI rank (index of its location in the MPI
    COMM_LOCATIONS group) when every process has a distinct one, else its position."""
    mpi_index: dict[int, int] = {}
    for group in defs.groups:
        if enum_name(group.group_type) == "COMM_LOCATIONS" and enum_name(group.paradigm) == "MPI":
            mpi_index = {loc._ref: i for i, loc in enumerate(group.members)}
    by_group: dict[int, int] = {}
    for loc in defs.locations:
        if loc._ref in mpi_index and loc.group is not None:
            ref = loc.group._ref
            by_group[ref] = min(by_group.get(ref, mpi_index[loc._ref]), mpi_index[loc._ref])
    mpi = {g._ref: by_group.get(g._ref) for g in process}
    values = list(mpi.values())
    if None not in values and len(set(values)) == len(values):
        return {ref: int(v) for ref, v in mpi.items() if v is not None}
    return {g._ref: i for i, g in enumerate(process)}


def _owner_rank(group: Any, rank_of_group: dict[int, int]) -> int | None:
    """The rank of a location group: itself, or the process that created it."""
    seen = set()
    while group is not None and group._ref not in seen:
        if group._ref in rank_of_group:
            return rank_of_group[group._ref]
        seen.add(group._ref)
        group = group.creating_location_group
    return None


def _device_stream(loc: Any, seen: dict[int, list[int]]) -> tuple[int, int]:
    """(device, stream) of an accelerator location: from ``NAME[d:s]``; else the device
    is the system tree node name of its group when numeric (else the group's order of
    appearance) and the stream is the location's position in its group."""
    match = _DEVICE_STREAM_IN_NAME.search(loc.name or "")
    if match:
        return int(match.group(1)), int(match.group(2))
    group = loc.group
    key = group._ref if group is not None else -1
    streams = seen.setdefault(key, [len(seen)])
    streams.append(loc._ref)
    node = group.system_tree_parent if group is not None else None
    device = int(node.name) if node is not None and str(node.name).isdigit() else streams[0]
    return device, len(streams) - 2


def _host(node: Any) -> str | None:
    """The name of the system tree node of class ``node`` above ``node`` (or itself);
    the immediate parent's name when no node is of that class."""
    start = node
    seen = set()
    while node is not None and id(node) not in seen:
        if str(node.class_name).lower() == "node":
            return str(node.name)
        seen.add(id(node))
        node = node.parent
    return str(start.name) if start is not None else None


def _clock(props: Any) -> dict[str, Any]:
    """RankData.clock from ClockProperties."""
    realtime = props.realtime_timestamp
    if realtime is None or realtime == UNDEFINED_TIMESTAMP:
        return {"method": "none (OTF2 without realtime timestamp)", "base_ns": 0,
                "offset_ns": 0}
    return {"method": "OTF2 ClockProperties realtime_timestamp", "base_ns": int(realtime),
            "offset_ns": 0}


def _metadata(defs: Any, group: Any, counts: dict[str, int]) -> pa.Table:
    """Metadata rows: clock properties, the location group, metric definitions, the
    system tree (with properties) and the number of events of each type on this rank."""
    props = defs.clock_properties
    realtime = props.realtime_timestamp
    rows: dict[str, Any] = {
        "otf2_clock": {
            "timer_resolution": props.timer_resolution,
            "global_offset": props.global_offset,
            "trace_length": props.trace_length,
            "realtime_timestamp": None if realtime == UNDEFINED_TIMESTAMP else realtime,
        },
        "otf2_location_group": {"name": group.name, "ref": group._ref,
                                "type": enum_name(group.location_group_type)},
        "otf2_metrics": [
            {"name": m.name, "description": m.description, "unit": m.unit,
             "metric_type": enum_name(m.metric_type), "metric_mode": enum_name(m.metric_mode),
             "value_type": enum_name(m.value_type), "base": enum_name(m.base),
             "exponent": m.exponent}
            for m in defs.metric_members
        ],
        "otf2_system_tree": _system_tree(defs),
        "otf2_event_counts": dict(sorted(counts.items())),
    }
    return pa.table({
        "key": pa.array(list(rows), pa.string()),
        "value": pa.array([json.dumps(v, default=str) for v in rows.values()], pa.string()),
    })


def _system_tree(defs: Any) -> list[dict[str, Any]]:
    props: dict[int, dict[str, str]] = {}
    for prop in defs.system_tree_node_properties:
        props.setdefault(id(prop.system_tree_node), {})[prop.name] = str(prop.value)
    return [
        {"name": n.name, "class": n.class_name,
         "parent": n.parent.name if n.parent is not None else None,
         "properties": props.get(id(n), {})}
        for n in defs.system_tree_nodes
    ]
