"""Assign iteration (step) numbers to events from step marker intervals."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def step_of_time(
    ts_ns: IntArray, step_start_ns: IntArray, step_end_ns: IntArray, step_no: IntArray
) -> IntArray:
    """Step number whose [start, end) contains each time; -1 where none does.

    Step markers must not overlap each other (ProfilerStep ranges do not).
    """
    out = np.full(len(ts_ns), -1, dtype=np.int64)
    if len(step_start_ns) == 0 or len(ts_ns) == 0:
        return out
    order = np.argsort(step_start_ns, kind="stable")
    starts, ends, numbers = step_start_ns[order], step_end_ns[order], step_no[order]
    idx = np.searchsorted(starts, ts_ns, side="right") - 1
    inside = idx >= 0
    safe = np.where(inside, idx, 0)
    inside &= ts_ns < ends[safe]
    out[inside] = numbers[safe[inside]]
    return out
