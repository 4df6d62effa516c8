"""Planted regressions in real Kineto traces: one kernel stretched, or every kernel jittered.

``stretch_kernel`` writes a copy of a Chrome-trace JSON (``.json`` or ``.json.gz``) where
every instance of one kernel (exact raw name) lasts ``factor`` times longer;
``jitter_kernels`` multiplies every kernel's duration by its own factor
``1 + N(0, sigma)`` (seeded, drawn in file order). Both re-time the GPU streams the same way.

Re-timing rule, per device stream (events with the same ``pid``/``tid`` as a ``kernel``,
``gpu_memcpy`` or ``gpu_memset`` event; old-schema ``Kernel``/``Memcpy``/``Memset`` too):

- device events are walked in (start, end) order; event ``i`` gets its new duration
  ``round(dur * f_i)`` ns (``f_i = 1`` for events not changed) and starts at
  ``start + max(0, late - gap)``, where ``late`` is how much later (ns) the previous
  device event of the stream now ends than it did, and ``gap = max(0, start - previous
  end)``. That is how a stream runs: an event starts when it was launched (its original
  start, never earlier) and the previous one has finished. So a stream never gets an
  overlap it did not have (an overlap in the input keeps its length), no device event
  starts before its launch call, and an idle gap absorbs a delay as it would on a GPU;
- every other event on the stream (``gpu_user_annotation`` spans, the ``ac2g`` flow
  ends bound to the device events) is mapped through the same monotone time map: a time
  inside device event ``i`` moves with it linearly, a time in a gap after event ``i``
  goes to ``max(t, new end of i)``. A flow end at a kernel's start therefore lands on the
  kernel's new start, and spans still enclose what they enclosed;
- host events and the other streams are left as they were. A cross-stream wait (an event
  recorded on this stream, waited on by another) is not re-timed: the other stream's
  kernels keep their times. That keeps every check a stream or a launch can make (order,
  no overlap, kernel after its launch) true; only inter-stream waits are not modelled.

Times are kept in integer nanoseconds (``round(ts * 1000)``) and written back as
microsecond floats, which round-trip to the nanosecond below ~8.8e12 us (2^43 us).
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from traceatlas.errors import InputError

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
"""Categories of device events (they occupy their stream)."""
KERNEL_CATS = frozenset({"kernel", "Kernel"})
"""Categories of kernels (what ``jitter_kernels`` changes)."""


@dataclass(frozen=True)
class Retimed:
    """What a re-timing changed: kernels given a new duration, streams touched, the total
    extra device time (ns; negative when kernels got shorter) and the largest shift of a
    device event's start (ns)."""

    changed: int
    streams: int
    extra_ns: int
    max_shift_ns: int


def load_trace(path: str | Path) -> dict[str, Any]:
    """The Chrome-trace JSON object in ``path`` (gzip detected by its magic bytes)."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(Path(path), f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(Path(path), "not a Chrome trace object with traceEvents")
    return doc


def save_trace(doc: dict[str, Any], path: str | Path) -> Path:
    """Write ``doc`` to ``path`` (gzip-compressed, level 1, when it ends in ``.gz``)."""
    out = Path(path)
    data = orjson.dumps(doc)
    out.write_bytes(gzip.compress(data, compresslevel=1, mtime=0)
                    if out.name.endswith(".gz") else data)
    return out


def stretch_kernel(src: str | Path, dst: str | Path, name: str, factor: float) -> Retimed:
    """Copy ``src`` to ``dst`` with every ``name`` kernel ``factor`` times longer."""
    doc = load_trace(src)
    result = stretch_events(doc["traceEvents"], name, factor)
    save_trace(doc, dst)
    return result


def jitter_kernels(src: str | Path, dst: str | Path, sigma: float, seed: int) -> Retimed:
    """Copy ``src`` to ``dst`` with each kernel's duration times ``1 + N(0, sigma)``."""
    doc = load_trace(src)
    result = jitter_events(doc["traceEvents"], sigma, seed)
    save_trace(doc, dst)
    return result


def stretch_events(events: list[dict[str, Any]], name: str, factor: float) -> Retimed:
    """Stretch every kernel named ``name`` by ``factor`` in ``events`` (in place)."""
    if factor <= 0:
        raise ValueError(f"factor must be positive, got {factor}")
    picked = {i: factor for i, e in enumerate(events)
              if _is_device(e) and e.get("cat") in KERNEL_CATS and e.get("name") == name}
    if not picked:
        raise ValueError(f"no kernel named {name!r} in the trace")
    return retime(events, picked.get)


def jitter_events(events: list[dict[str, Any]], sigma: float, seed: int) -> Retimed:
    """Multiply each kernel's duration by ``1 + N(0, sigma)`` (in place; factors drawn
    with ``numpy.random.default_rng(seed)`` in file order, floored at 0.01)."""
    kernels = [i for i, e in enumerate(events)
               if _is_device(e) and e.get("cat") in KERNEL_CATS]
    draws = np.random.default_rng(seed).normal(0.0, sigma, size=len(kernels))
    factors = dict(zip(kernels, np.maximum(1.0 + draws, 0.01).tolist(), strict=True))
    return retime(events, factors.get)


def retime(events: list[dict[str, Any]],
           factor_of: Callable[[int], float | None]) -> Retimed:
    """Re-time ``events`` in place: device event ``i`` (index in ``events``) lasts
    ``factor_of(i)`` times longer (None: unchanged); see the module docstring."""
    streams: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        if _is_device(e):
            streams[(e.get("pid"), e.get("tid"))].append(i)
    riders: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        key = (e.get("pid"), e.get("tid"))
        if key in streams and not _is_device(e) and e.get("ph") != "M" and _num(e.get("ts")):
            riders[key].append(i)
    changed = touched = extra = max_shift = 0
    for key, members in streams.items():
        factors = [factor_of(i) for i in members]
        if all(f is None for f in factors):
            continue
        touched += 1
        changed += sum(f is not None for f in factors)
        starts = np.array([_ns(events[i]["ts"]) for i in members], dtype=np.int64)
        durs = np.array([_ns(events[i].get("dur", 0)) for i in members], dtype=np.int64)
        new_durs = np.array([d if f is None else round(d * f)
                             for d, f in zip(durs.tolist(), factors, strict=True)],
                            dtype=np.int64)
        order = np.lexsort((starts + durs, starts))
        s, d, nd = starts[order], durs[order], new_durs[order]
        ns_ = queue_starts(s, s + d, nd)
        for j, i in enumerate(np.asarray(members)[order].tolist()):
            events[i]["ts"] = int(ns_[j]) / 1000
            events[i]["dur"] = int(nd[j]) / 1000
        extra += int((nd - d).sum())
        max_shift = max(max_shift, int((ns_ - s).max()))
        _move_riders(events, riders[key], s, s + d, ns_, ns_ + nd)
    return Retimed(changed=changed, streams=touched, extra_ns=extra, max_shift_ns=max_shift)


def queue_starts(starts: np.ndarray, ends: np.ndarray, new_durs: np.ndarray) -> np.ndarray:
    """New starts (ns) of one stream's device events, sorted by (start, end): each starts
    ``max(0, late - gap)`` later, ``late`` = how much later the previous one now ends,
    ``gap`` = the idle time before it (0 when it overlapped the previous one)."""
    out = starts.copy()
    late = 0
    for j in range(1, len(starts)):
        gap = max(0, int(starts[j]) - int(ends[j - 1]))
        late = int(out[j - 1]) + int(new_durs[j - 1]) - int(ends[j - 1])
        out[j] = int(starts[j]) + max(0, late - gap)
    return out


def time_map(t: np.ndarray, s: np.ndarray, e: np.ndarray, ns_: np.ndarray,
             ne: np.ndarray) -> np.ndarray:
    """Times ``t`` (ns) of a stream mapped like its device events (old ``s``/``e``, new
    ``ns_``/``ne``, sorted by start): linear inside an event, ``max(t, new end)`` after
    it, unchanged before the first one."""
    idx = np.searchsorted(s, t, side="right") - 1
    out = t.astype(np.float64)
    has = idx >= 0
    k = idx[has]
    tk = t[has]
    span = (e[k] - s[k]).astype(np.float64)
    inside = tk < e[k]
    scale = np.divide((ne[k] - ns_[k]).astype(np.float64), span,
                      out=np.ones_like(span), where=span > 0)
    moved = np.where(inside, ns_[k] + (tk - s[k]) * scale, np.maximum(tk, ne[k]))
    out[has] = moved
    return np.rint(out).astype(np.int64)


def _move_riders(events: list[dict[str, Any]], riders: list[int], s: np.ndarray,
                 e: np.ndarray, ns_: np.ndarray, ne: np.ndarray) -> None:
    if not riders:
        return
    t0 = np.array([_ns(events[i]["ts"]) for i in riders], dtype=np.int64)
    has_dur = [events[i].get("ph") == "X" and _num(events[i].get("dur")) for i in riders]
    t1 = np.array([t + (_ns(events[i]["dur"]) if h else 0)
                   for t, i, h in zip(t0.tolist(), riders, has_dur, strict=True)],
                  dtype=np.int64)
    m0 = time_map(t0, s, e, ns_, ne)
    m1 = time_map(t1, s, e, ns_, ne)
    for j, i in enumerate(riders):
        events[i]["ts"] = int(m0[j]) / 1000
        if has_dur[j]:
            events[i]["dur"] = int(m1[j] - m0[j]) / 1000


def _is_device(e: dict[str, Any]) -> bool:
    return e.get("ph") == "X" and e.get("cat") in DEVICE_CATS and _num(e.get("ts"))


def _num(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ns(us: object) -> int:
    """Microseconds (a JSON number) as integer nanoseconds."""
    return round(float(us) * 1000)  # type: ignore[arg-type]
