"""States for a Paraver export of a trace that has none: what Extrae would have written.

Per host track (``key``): the union of its host intervals is the time the thread runs.
Inside each outermost MPI call (MPI calls nested in or crossing another MPI call of the
track are merged into it; the first call's state wins) the state is Extrae's state for
that call; the rest of the union is Running. Outside every host interval no state is
written. Times in ns; zero-length pieces are left out.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from traceatlas.export.paraver_codes import RUNNING

I64 = npt.NDArray[np.int64]


def unions(key: I64, start: I64, end: I64) -> tuple[I64, I64]:
    """(first row, union end) of the unions of overlapping intervals per ``key``; the
    first row is the earliest-starting, longest interval of the union. Unions of zero
    length are left out."""
    if not len(key):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    idx = np.lexsort((-end, start, key))
    k, s, e = key[idx], start[idx], end[idx]
    new_key = np.r_[True, k[1:] != k[:-1]]
    bounds = [*np.flatnonzero(new_key).tolist(), len(e)]
    reach = np.empty(len(e), dtype=np.int64)
    for lo, hi in itertools.pairwise(bounds):
        reach[lo:hi] = np.maximum.accumulate(e[lo:hi])
    prev = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    first = np.flatnonzero(new_key | (s > prev))
    last = np.r_[first[1:], len(e)] - 1
    rows, ends = idx[first], reach[last]
    keep = ends > start[rows]
    return rows[keep], ends[keep]


def derived_states(key: I64, start: I64, end: I64, mpi: npt.NDArray[np.bool_],
                   mpi_state: I64) -> tuple[I64, I64, I64, I64]:
    """State records (key, start, end, value) of host intervals ``key``/``start``/``end``;
    rows where ``mpi`` is true are MPI calls with Extrae state ``mpi_state``."""
    run_rows, run_ends = unions(key, start, end)
    m_idx = np.flatnonzero(mpi)
    m_rows, m_ends = unions(key[m_idx], start[m_idx], end[m_idx])
    m_rows = m_idx[m_rows]
    out: list[tuple[int, int, int, int]] = []
    calls = list(zip(key[m_rows].tolist(), start[m_rows].tolist(), m_ends.tolist(),
                     mpi_state[m_rows].tolist(), strict=True))
    ci = 0
    for k, a, b in zip(key[run_rows].tolist(), start[run_rows].tolist(), run_ends.tolist(),
                       strict=True):
        while ci < len(calls) and (calls[ci][0], calls[ci][1]) < (k, a):
            ci += 1  # a zero-length call outside every union
        cur = a
        while ci < len(calls) and calls[ci][0] == k and calls[ci][1] < b:
            _, s, e, value = calls[ci]
            e = min(e, b)
            if s > cur:
                out.append((k, cur, s, RUNNING))
            if e > max(s, cur):
                out.append((k, max(s, cur), e, value))
            cur = max(cur, e)
            ci += 1
        if b > cur:
            out.append((k, cur, b, RUNNING))
    if not out:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    arr = np.asarray(out, dtype=np.int64)
    return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]
