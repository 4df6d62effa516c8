"""One pass per OTF2 location through the OTF2 C library's local event readers, with raw
ctypes callbacks that append integers to typed arrays (no event objects).

Hot record types (Enter, Leave, MpiSend, MpiRecv, MpiIsend, MpiIrecv, MpiIsendComplete,
MpiIrecvRequest, MpiCollectiveBegin/End) and Metric go to arrays (a Metric's values as
their raw 8-byte unions, decoded on columns by ``otf2_metrics``); the other record types
(instants) are built as the ``otf2`` wheel's event objects and rendered at once into
picklable rows (``Instant``), so a ``RawEvents`` can come back from a worker process
(``otf2_local.read_part``). ``UNSUPPORTED`` record types (none now) would make ``read_raw`` report
``unsupported`` so that the caller falls back to the event-object reader.

Measured (bench/bench_otf2.py): ~1.2 us per event for the C decoding plus the ctypes
call into Python; the high-level wrapper (event objects, global time merge) costs ~10 us.
"""

from __future__ import annotations

import contextlib
import ctypes
from array import array
from dataclasses import dataclass, field
from typing import Any

import _otf2  # type: ignore[import-untyped]
from _otf2.Config import conf  # type: ignore[import-untyped]

_P = ctypes.c_void_p
_U8, _U32, _U64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64
_HEAD = (ctypes.c_int, _U64, _U64, _U64, _P, _P)
_FP_REGION = ctypes.CFUNCTYPE(*_HEAD, _U32)
_FP_P2P = ctypes.CFUNCTYPE(*_HEAD, _U32, _U32, _U32, _U64)
_FP_BEGIN = ctypes.CFUNCTYPE(*_HEAD)
_FP_END = ctypes.CFUNCTYPE(*_HEAD, _U8, _U32, _U32, _U64, _U64)

_FP_METRIC = ctypes.CFUNCTYPE(*_HEAD, _U32, _U8, _P, _P)
_FP_IP2P = ctypes.CFUNCTYPE(*_HEAD, _U32, _U32, _U32, _U64, _U64)
_FP_REQUEST = ctypes.CFUNCTYPE(*_HEAD, _U64)

HOT = ("Enter", "Leave", "MpiSend", "MpiRecv", "MpiCollectiveBegin", "MpiCollectiveEnd",
       "Metric", "MpiIsend", "MpiIrecv", "MpiIsendComplete", "MpiIrecvRequest")
"""Record types read into arrays."""

UNSUPPORTED: tuple[str, ...] = ()
"""Record types the fast path does not model (the event-object reader takes the trace)."""

P2P_RECV, P2P_SEND, P2P_ISEND, P2P_IRECV = 0, 1, 2, 3
"""``RawEvents.p2p`` kinds (column 6)."""
NB_ISEND_COMPLETE, NB_IRECV_REQUEST = 0, 1
"""``RawEvents.nb`` kinds (column 3)."""


def _signed(value: int) -> int:
    """A uint64 request id as the int64 with the same bits (array('q') holds it)."""
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass(frozen=True)
class Instant:
    """An event of another record type, rendered as ``Collector._instant`` would."""

    ref: int
    t: int  # ticks, before the global offset is taken off
    pos: int
    kind: str  # record type name
    category: str
    args: str  # JSON
    pid: int | None  # the ProcessId attribute, when an int


@dataclass
class RawEvents:
    """Arrays of one pass; ``*_pos`` are 1-based positions in the location's stream."""

    el_t: array[int] = field(default_factory=lambda: array("q"))
    el_r: array[int] = field(default_factory=lambda: array("q"))  # region, ~region: leave
    el_pos: array[int] = field(default_factory=lambda: array("q"))
    p2p: array[int] = field(default_factory=lambda: array("q"))  # t, pos, peer, comm, tag,
    # length, kind (P2P_*), request id (-1: blocking): 8 per event
    nb: array[int] = field(default_factory=lambda: array("q"))  # t, pos, request id, kind
    # (NB_*): 4 per MpiIsendComplete / MpiIrecvRequest
    cb: array[int] = field(default_factory=lambda: array("q"))  # t, pos per begin
    ce: array[int] = field(default_factory=lambda: array("q"))  # t, pos, op, comm, root,
    # sent, received: 7 per end
    met: array[int] = field(default_factory=lambda: array("q"))  # t, pos, metric ref,
    # number of values: 4 per Metric event
    met_values: bytearray = field(default_factory=bytearray)  # OTF2_MetricValue unions
    rare: list[Instant] = field(default_factory=list)
    # per location ref: (end of its el, p2p, cb, ce slices), events read, last time
    spans: dict[int, tuple[int, ...]] = field(default_factory=dict)
    read: dict[int, int] = field(default_factory=dict)
    unsupported: str | None = None


def _callbacks(raw: RawEvents, defs: Any) -> tuple[Any, list[Any]]:
    """An OTF2_EvtReaderCallbacks with raw callbacks; the function pointers to keep."""
    from otf2.event_reader import BufferedEventReader  # type: ignore[import-untyped]

    lib = conf.lib
    el_t, el_r, el_pos, p2p, cb, ce = (raw.el_t.append, raw.el_r.append, raw.el_pos.append,
                                       raw.p2p.extend, raw.cb.extend, raw.ce.extend)
    met, met_values, string_at = raw.met.extend, raw.met_values.extend, ctypes.string_at
    nb = raw.nb.extend

    def enter(loc: int, t: int, pos: int, ud: Any, al: Any, region: int) -> int:
        el_t(t)
        el_r(region)
        el_pos(pos)
        return 0

    def leave(loc: int, t: int, pos: int, ud: Any, al: Any, region: int) -> int:
        el_t(t)
        el_r(~region)
        el_pos(pos)
        return 0

    def send(loc: int, t: int, pos: int, ud: Any, al: Any, peer: int, comm: int, tag: int,
             length: int) -> int:
        p2p((t, pos, peer, comm, tag, length, P2P_SEND, -1))
        return 0

    def recv(loc: int, t: int, pos: int, ud: Any, al: Any, peer: int, comm: int, tag: int,
             length: int) -> int:
        p2p((t, pos, peer, comm, tag, length, P2P_RECV, -1))
        return 0

    def begin(loc: int, t: int, pos: int, ud: Any, al: Any) -> int:
        cb((t, pos))
        return 0

    def end(loc: int, t: int, pos: int, ud: Any, al: Any, op: int, comm: int, root: int,
            sent: int, received: int) -> int:
        ce((t, pos, op, comm, root, sent, received))
        return 0

    def isend(loc: int, t: int, pos: int, ud: Any, al: Any, peer: int, comm: int, tag: int,
              length: int, req: int) -> int:
        p2p((t, pos, peer, comm, tag, length, P2P_ISEND, _signed(req)))
        return 0

    def irecv(loc: int, t: int, pos: int, ud: Any, al: Any, peer: int, comm: int, tag: int,
              length: int, req: int) -> int:
        p2p((t, pos, peer, comm, tag, length, P2P_IRECV, _signed(req)))
        return 0

    def isend_complete(loc: int, t: int, pos: int, ud: Any, al: Any, req: int) -> int:
        nb((t, pos, _signed(req), NB_ISEND_COMPLETE))
        return 0

    def irecv_request(loc: int, t: int, pos: int, ud: Any, al: Any, req: int) -> int:
        nb((t, pos, _signed(req), NB_IRECV_REQUEST))
        return 0

    def metric(loc: int, t: int, pos: int, ud: Any, al: Any, ref: int, n: int, types: Any,
               values: Any) -> int:
        met((t, pos, ref, n))
        if n:
            met_values(string_at(values, 8 * n))
        return 0

    handle = _otf2.EvtReaderCallbacks_New()
    keep: list[Any] = []
    for name, fp_type, func in (("Enter", _FP_REGION, enter), ("Leave", _FP_REGION, leave),
                                ("MpiSend", _FP_P2P, send), ("MpiRecv", _FP_P2P, recv),
                                ("MpiCollectiveBegin", _FP_BEGIN, begin),
                                ("MpiCollectiveEnd", _FP_END, end),
                                ("Metric", _FP_METRIC, metric),
                                ("MpiIsend", _FP_IP2P, isend), ("MpiIrecv", _FP_IP2P, irecv),
                                ("MpiIsendComplete", _FP_REQUEST, isend_complete),
                                ("MpiIrecvRequest", _FP_REQUEST, irecv_request)):
        setter = getattr(lib, f"OTF2_EvtReaderCallbacks_Set{name}Callback")
        setter.argtypes = [_P, fp_type]
        pointer = fp_type(func)
        keep.append(pointer)
        setter(ctypes.cast(handle, _P), pointer)

    objects = BufferedEventReader(_Defs(defs), 0)
    objects.buffer = []

    def rare_for(cls: Any, is_unsupported: bool) -> Any:
        def handler(loc: int, t: int, pos: int, ud: Any, al: Any, *args: Any) -> None:
            if is_unsupported:
                raw.unsupported = raw.unsupported or cls.__name__
                return
            objects._append(cls, loc, t, None, al, *args)
            _, event = objects.buffer.pop()
            raw.rare.append(_render(loc, t, pos, event))
        return handler

    import otf2.events as ev  # type: ignore[import-untyped]

    prefix, suffix = "EvtReaderCallbacks_Set", "Callback"
    for attr in dir(_otf2):
        if not (attr.startswith(prefix) and attr.endswith(suffix)):
            continue
        name = attr[len(prefix):-len(suffix)]
        cls = getattr(ev, name, None)
        if name in HOT or cls is None:
            continue
        func = rare_for(cls, name in UNSUPPORTED)
        keep.append(func)
        getattr(_otf2, attr)(handle, func)
    return handle, keep


def _render(ref: int, t: int, pos: int, event: Any) -> Instant:
    from traceatlas.io.otf2_events import instant_row

    category, args, pid = instant_row(event)
    return Instant(ref, t, pos, type(event).__name__, category, args, pid)


class _Defs:
    """What ``BufferedEventReader._append`` needs of a reader: ``definitions``."""

    def __init__(self, definitions: Any) -> None:
        self.definitions = definitions


def read_raw(anchor: str, defs: Any, refs: list[int]) -> RawEvents:
    """Read every event of the locations ``refs`` (in this order) into ``RawEvents``."""
    raw = RawEvents()
    reader = _otf2.Reader_Open(anchor)
    try:
        _otf2.Reader_SetSerialCollectiveCallbacks(reader)
        for ref in refs:
            _otf2.Reader_SelectLocation(reader, ref)
        try:
            _otf2.Reader_OpenDefFiles(reader)
            def_files = True
        except _otf2.Error:
            def_files = False
        with contextlib.suppress(_otf2.Error):
            _otf2.Reader_OpenEvtFiles(reader)
        callbacks, keep = _callbacks(raw, defs)
        register = conf.lib.OTF2_Reader_RegisterEvtCallbacks
        register.argtypes = [_P, _P, _P, _P]
        for ref in refs:
            if def_files:
                def_reader = _otf2.Reader_GetDefReader(reader, ref)
                if def_reader:
                    _otf2.Reader_ReadAllLocalDefinitions(reader, def_reader)
                    _otf2.Reader_CloseDefReader(reader, def_reader)
            evt = _otf2.Reader_GetEvtReader(reader, ref)
            register(ctypes.cast(reader, _P), ctypes.cast(evt, _P),
                     ctypes.cast(callbacks, _P), None)
            raw.read[ref] = _otf2.Reader_ReadAllLocalEvents(reader, evt)
            _otf2.Reader_CloseEvtReader(reader, evt)
            raw.spans[ref] = (len(raw.el_t), len(raw.p2p), len(raw.cb), len(raw.ce),
                              len(raw.met), len(raw.nb))
            if raw.unsupported:
                break
        if def_files:
            _otf2.Reader_CloseDefFiles(reader)
        _otf2.EvtReaderCallbacks_Delete(callbacks)
        del keep
        with contextlib.suppress(_otf2.Error):
            _otf2.Reader_CloseEvtFiles(reader)
    finally:
        _otf2.Reader_Close(reader)
    return raw

