"""Timestamps that cannot be right: events far outside the run, set aside and counted.

A profiler sometimes writes events at ``ts`` 0 (PyTorch with ``profiler_metrics`` wrote
1,424 complete and 1,422 flow events at 0 beside a run on the unix clock) or at times
years away from the rest. Kept, they stretch the span to years and every share to 0.

The run is located robustly: its centre is the median start time ``m`` of the events
(those at the clock's zero excluded, so they cannot move it even when they are many)
and its scale the median absolute deviation ``d`` of those starts (both from at most
``SAMPLE`` evenly spaced events). An event lies outside the run when

- its start or (for an interval) end is more than ``max(FAR_FLOOR_NS, FACTOR * d)``
  from ``m`` (1 hour at least: a real trace is not that far from its own median), or
- it sits exactly at the clock's zero (raw ``ts`` 0) more than
  ``max(ZERO_FLOOR_NS, FACTOR * d)`` from ``m`` (1 s at least).

Such events are not kept in any table; the reader warns once per reason with the
counts and records the same in the store's data-quality notes. All times are int64 ns.

Metadata events (Chrome phase ``M``: process and thread names, sort indices) carry no
time of their own; Kineto often writes them at ``ts`` 0 (310,030 of them in HTA's MTIA
trace). They neither locate the run nor count as outliers, and are always kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.io.quality import DATA_QUALITY_KEY, Note, notes_json, report

FACTOR = 1000
"""How many median absolute deviations from the median an event may lie."""
FAR_FLOOR_NS = 3_600 * 10**9
"""Never set aside an event within 1 hour of the run's median start."""
ZERO_FLOOR_NS = 10**9
"""Never set aside an event at the clock's zero within 1 s of the run's median start."""
SAMPLE = 1 << 20
"""At most this many evenly spaced starts estimate the median and the deviation."""

UNTIMED_PHASES = ("M",)
"""Chrome phases whose ``ts`` means nothing (metadata): never outliers, never sampled."""

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

IntArray = np.ndarray[Any, np.dtype[np.int64]]
BoolArray = np.ndarray[Any, np.dtype[np.bool_]]


@dataclass(frozen=True)
class RunWindow:
    """Where the run lies: ``median_ns`` and the allowed distances from it (ns)."""

    median_ns: int
    deviation_ns: int
    far_ns: int
    zero_ns: int | None
    zero_radius_ns: int

    def outside(self, starts: IntArray, ends: IntArray | None = None) -> tuple[BoolArray,
                                                                            BoolArray]:
        """(at the clock's zero and outside, otherwise far outside) per event."""
        lo, hi = _clamp(self.median_ns - self.far_ns), _clamp(self.median_ns + self.far_ns)
        far = (starts < lo) | (starts > hi)
        if ends is not None:
            far |= (ends < lo) | (ends > hi)
        zero = np.zeros(len(starts), dtype=bool)
        if self.zero_ns is not None and abs(self.zero_ns - self.median_ns) > \
                self.zero_radius_ns:
            zero = starts == self.zero_ns
        return zero, far & ~zero


def run_window(starts: list[IntArray], zero_ns: int | None = None) -> RunWindow | None:
    """The run's window from the start times of every timed event (several arrays, ns);
    None when no event (besides those at ``zero_ns``) has a time."""
    total = sum(len(s) for s in starts)
    if total == 0:
        return None
    step = max(1, total // SAMPLE)
    sample = np.concatenate([s[::step] for s in starts]) if len(starts) > 1 \
        else starts[0][::step]
    if zero_ns is not None:
        sample = sample[sample != zero_ns]
    if len(sample) == 0:
        return None
    median = _median(sample)
    if int(sample.max()) - int(sample.min()) < 2**62:  # exact, cannot overflow
        deviation = _median(np.abs(sample - median))
    else:  # times decades apart: float64 is exact enough for a scale
        deviation = int(np.median(np.abs(sample.astype(np.float64) - float(median))))
    return RunWindow(
        median_ns=median,
        deviation_ns=deviation,
        far_ns=max(FAR_FLOOR_NS, FACTOR * deviation),
        zero_ns=zero_ns,
        zero_radius_ns=max(ZERO_FLOOR_NS, FACTOR * deviation),
    )


def _median(values: IntArray) -> int:
    """The lower median of int64 ``values`` (exact integer, no float rounding)."""
    k = (len(values) - 1) // 2
    return int(np.partition(values, k)[k])


def _clamp(value: int) -> int:
    return min(max(value, _I64_MIN), _I64_MAX)


def describe_ns(ns: int) -> str:
    """A duration in words: ``80 ms``, ``3.2 s``, ``52 years``."""
    seconds = ns / 1e9
    for unit, size in (("years", 365.25 * 86_400), ("days", 86_400), ("h", 3_600),
                       ("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{ns} ns"


_TIME_COLUMNS: dict[str, tuple[str, ...]] = {
    "intervals": ("start_ns", "end_ns"),
    "instants": ("ts_ns",),
    "counters": ("ts_ns",),
    "flows": ("src_ts_ns", "dst_ts_ns"),
    "messages": ("send_start_ns", "send_end_ns", "recv_start_ns", "recv_end_ns"),
}
"""Time columns (ns) of the canonical tables; a row is outside when any present one is."""


def set_aside_far(tables: dict[str, pa.Table], display: str) -> None:
    """Any reader's tables: drop (in place) the rows more than the far distance from the
    run's median time (the first rule above; the reader knows its clock's zero, this
    does not), with one warning and one data-quality note in ``metadata``."""
    starts = [pc.drop_null(tables[name][column]).to_numpy()
              for name, column in (("intervals", "start_ns"), ("instants", "ts_ns"),
                                   ("counters", "ts_ns"))
              if name in tables and tables[name].num_rows]
    window = run_window(starts) if starts else None
    if window is None:
        return
    counts: dict[str, int] = {}
    for name, columns in _TIME_COLUMNS.items():
        table = tables.get(name)
        if table is None or not table.num_rows:
            continue
        far = np.zeros(table.num_rows, dtype=bool)
        for column in columns:
            if column in table.column_names:
                values = pc.fill_null(table[column], window.median_ns).to_numpy()
                far |= window.outside(values)[1]
        if far.any():
            counts[name] = int(np.count_nonzero(far))
            tables[name] = table.filter(pa.array(~far))
    if not counts:
        return
    total = sum(counts.values())
    kinds = ", ".join(f"{n} {name}" for name, n in counts.items())
    note = Note(display, "", f"had {total} event(s) more than {describe_ns(window.far_ns)} "
                f"from the run's median time ({kinds}); set aside (spans, models and "
                "findings use the other events)", total, tables=tuple(counts))
    notes: list[Note] = []
    report(notes, note, stacklevel=3)
    _add_note(tables, note)


def _add_note(tables: dict[str, pa.Table], note: Note) -> None:
    """Append ``note`` to the ``metadata`` table's data-quality list (created if absent)."""
    meta = tables.get("metadata")
    keys = meta["key"].to_pylist() if meta is not None else []
    values = meta["value"].to_pylist() if meta is not None else []
    if DATA_QUALITY_KEY in keys:
        at = keys.index(DATA_QUALITY_KEY)
        values[at] = json.dumps([*json.loads(values[at] or "[]"), note.to_json()])
    else:
        keys.append(DATA_QUALITY_KEY)
        values.append(json.dumps(notes_json([note])))
    tables["metadata"] = pa.table({"key": pa.array(keys, pa.string()),
                                   "value": pa.array(values, pa.string())})
