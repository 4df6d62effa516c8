"""One pass per OTF2 location through the OTF2 C library's local event readers, with raw
ctypes callbacks that append integers to typed arrays (no event objects).

Hot record types (Enter, Leave, MpiSend, MpiRecv, MpiCollectiveBegin/End) go to arrays;
the other record types the fast path can take (instants and Metric) are built as the
``otf2`` wheel's event objects (they are few in the traces we see); the non-blocking MPI
records (Isend, Irecv and their requests/completions) make ``read_raw`` report
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

HOT = ("Enter", "Leave", "MpiSend", "MpiRecv", "MpiCollectiveBegin", "MpiCollectiveEnd")
"""Record types read into arrays."""

UNSUPPORTED = ("MpiIsend", "MpiIsendComplete", "MpiIrecv", "MpiIrecvRequest")
"""Record types the fast path does not model (the event-object reader takes the trace)."""


@dataclass
class RawEvents:
    """Arrays of one pass; ``*_pos`` are 1-based positions in the location's stream."""

    el_t: array[int] = field(default_factory=lambda: array("q"))
    el_r: array[int] = field(default_factory=lambda: array("q"))  # region, ~region: leave
    el_pos: array[int] = field(default_factory=lambda: array("q"))
    p2p: array[int] = field(default_factory=lambda: array("q"))  # t, pos, peer, comm, tag,
    # length, is_send: 7 per event
    cb: array[int] = field(default_factory=lambda: array("q"))  # t, pos per begin
    ce: array[int] = field(default_factory=lambda: array("q"))  # t, pos, op, comm, root,
    # sent, received: 7 per end
    rare: list[tuple[int, int, int, Any]] = field(default_factory=list)  # ref, t, pos, event
    # per location ref: (end of its el, p2p, cb, ce slices), events read, last time
    spans: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    read: dict[int, int] = field(default_factory=dict)
    unsupported: str | None = None


def _callbacks(raw: RawEvents, defs: Any) -> tuple[Any, list[Any]]:
    """An OTF2_EvtReaderCallbacks with raw callbacks; the function pointers to keep."""
    from otf2.event_reader import BufferedEventReader  # type: ignore[import-untyped]

    lib = conf.lib
    el_t, el_r, el_pos, p2p, cb, ce = (raw.el_t.append, raw.el_r.append, raw.el_pos.append,
                                       raw.p2p.extend, raw.cb.extend, raw.ce.extend)

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
        p2p((t, pos, peer, comm, tag, length, 1))
        return 0

    def recv(loc: int, t: int, pos: int, ud: Any, al: Any, peer: int, comm: int, tag: int,
             length: int) -> int:
        p2p((t, pos, peer, comm, tag, length, 0))
        return 0

    def begin(loc: int, t: int, pos: int, ud: Any, al: Any) -> int:
        cb((t, pos))
        return 0

    def end(loc: int, t: int, pos: int, ud: Any, al: Any, op: int, comm: int, root: int,
            sent: int, received: int) -> int:
        ce((t, pos, op, comm, root, sent, received))
        return 0

    handle = _otf2.EvtReaderCallbacks_New()
    keep: list[Any] = []
    for name, fp_type, func in (("Enter", _FP_REGION, enter), ("Leave", _FP_REGION, leave),
                                ("MpiSend", _FP_P2P, send), ("MpiRecv", _FP_P2P, recv),
                                ("MpiCollectiveBegin", _FP_BEGIN, begin),
                                ("MpiCollectiveEnd", _FP_END, end)):
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
            raw.rare.append((loc, t, pos, event))
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
            raw.spans[ref] = (len(raw.el_t), len(raw.p2p), len(raw.cb), len(raw.ce))
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
