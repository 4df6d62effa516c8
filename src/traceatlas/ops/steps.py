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


def step_of_launch(
    corr: IntArray, has_corr: npt.NDArray[np.bool_], launch_corr: IntArray, launch_step: IntArray
) -> IntArray:
    """Step of the launch with the same correlation id (the first one if repeated); -1 for
    rows without a correlation id or without a launch in the trace."""
    out = np.full(len(corr), -1, dtype=np.int64)
    if len(launch_corr) == 0 or len(corr) == 0:
        return out
    keys, first = np.unique(launch_corr, return_index=True)
    idx = np.clip(np.searchsorted(keys, corr), 0, len(keys) - 1)
    found = has_corr & (keys[idx] == corr)
    out[found] = launch_step[first[idx[found]]]
    return out
