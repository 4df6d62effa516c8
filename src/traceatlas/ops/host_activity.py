"""What the host was doing: host intervals sorted into cause classes, and the painted
timeline that gives, for every instant, the class with the highest priority (numpy).

Classes, in priority order (a lower number wins when several cover an instant):

0. ``host_collective`` (own): a collective on a launching thread (gloo, MPI, c10d,
   ``record_param_comms``, category ``mpi``);
1. ``data_loading``: a DataLoader ``__next__`` or collate on a launching thread;
2. ``host_sync``: a synchronising call (``cuda*Synchronize``, ``aten::item``,
   ``aten::_local_scalar_dense``, ``nonzero``-style ops, a synchronous ``cudaMemcpy``, a
   launch whose copy goes to or from pageable memory) *and its shadow*: from its end to
   the next launch call of the same thread (the queue ran dry while the host waited;
   refilling it is the sync's cost);
3. ``launch_bound``: any op, runtime, driver or Python call on a launching thread (the
   host busy dispatching work);
4. ``host_collective`` (other threads): a collective running on any other thread of the
   rank while the launching threads record nothing (DDP over gloo: the gradient
   all-reduce runs on gloo's threads while the launching threads wait untraced);
5. ``untraced_host``: nothing recorded on the launching threads (Python between ops,
   or a wait the profiler does not see).

Times are integer ns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

CAUSE_ORDER = ("host_collective", "data_loading", "host_sync", "launch_bound",
               "host_collective", "untraced_host")
"""Painted class index -> cause word (classes 0 and 4 are both ``host_collective``)."""
UNTRACED = 5

HOST_COLLECTIVE = r"(?i)^(gloo:|mpi:|ucc:|c10d::|c10d:|nccl:|record_param_comms|MPI_)"
"""Host collectives by name, as a regex for Polars and ``re`` (category ``mpi`` counts too):
gloo/MPI/UCC/NCCL process-group ops, c10d dispatch ops and PyTorch's comms records."""
COLLECTIVE_RE = re.compile(HOST_COLLECTIVE)
DATA_RE = re.compile(r"DataLoader|collate", re.IGNORECASE)
"""DataLoader iteration (``enumerate(DataLoader)#...__next__``) and collate functions."""
SYNC_RE = re.compile(
    r"synchronize|^aten::(item|_local_scalar_dense|nonzero|masked_select|unique"
    r"|_unique2|repeat_interleave)$|^(cudaMemcpy|cudaMemcpy2D|hipMemcpy|cuMemcpyDtoH(_v2)?"
    r"|cuMemcpyHtoD(_v2)?)$", re.IGNORECASE)
"""Calls and ops that make the host wait for the device."""
PAGEABLE_RE = re.compile(r"(?i)pageable")
"""A device memcpy name (Kineto ``Memcpy DtoH (Device -> Pageable)``) to pageable memory."""
STEP_OR_ROOT_RE = re.compile(r"^ProfilerStep\s*#|^PyTorch Profiler", re.IGNORECASE)
DISPATCH_CATEGORIES = ("cpu_op", "runtime", "driver", "python")


def name_class(name: str, category: str) -> int:
    """Class of one host interval by its name and canonical category: 0 collective,
    1 data loading, 2 sync, 3 dispatch, 6 user annotation, -1 none of them."""
    if category == "mpi" or COLLECTIVE_RE.search(name):
        return 0
    if DATA_RE.search(name):
        return 1
    if category in DISPATCH_CATEGORIES:
        return 2 if SYNC_RE.search(name) else 3
    if category == "annotation" and not STEP_OR_ROOT_RE.search(name):
        return 6
    return -1


def union(start: IntArray, end: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Disjoint segments of the intervals ``[start, end)`` (any order): ``(seg_start,
    seg_end, first)``, ``first`` the index of the earliest interval of each segment (the
    outermost of a call stack). Only overlapping intervals merge; touching ones stay
    apart, so top-level calls of one thread keep their own segment."""
    if start.size == 0:
        return start, end, np.zeros(0, dtype=np.int64)
    if bool(np.all(start[1:] >= start[:-1])):  # sorted already: no copy
        order, s, e = None, start, end
    else:
        order = np.argsort(start, kind="stable").astype(np.int64)
        s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] >= reach[:-1]
    idx = np.flatnonzero(new).astype(np.int64)
    return s[idx], np.maximum.reduceat(e, idx), idx if order is None else order[idx]


def overlapping(seg_start: IntArray, seg_end: IntArray, gap_start: IntArray,
                gap_end: IntArray) -> npt.NDArray[np.bool_]:
    """Whether each of the disjoint sorted segments ``[seg_start, seg_end)`` overlaps one of
    the disjoint sorted gaps ``[gap_start, gap_end)`` (a sorted search per gap, not per
    segment: the segments overlapping gap ``[a, b)`` are those from the first ending after
    ``a`` to the last starting before ``b``)."""
    keep = np.zeros(seg_start.size + 1, dtype=np.int64)
    if seg_start.size == 0 or gap_start.size == 0:
        return keep[:-1] > 0
    lo = np.searchsorted(seg_end, gap_start, side="right")
    hi = np.searchsorted(seg_start, gap_end, side="left")
    ok = hi > lo
    n = seg_start.size + 1
    keep += np.bincount(lo[ok], minlength=n) - np.bincount(hi[ok], minlength=n)
    out: npt.NDArray[np.bool_] = np.cumsum(keep[:-1]) > 0
    return out


def covered_sorted(points: IntArray, seg_start: IntArray, seg_end: IntArray
                   ) -> npt.NDArray[np.bool_]:
    """Whether each of the sorted ``points`` lies in one of the disjoint sorted segments
    ``[start, end)``: the points from each segment's start to before its end found by two
    sorted searches per segment (fewer than one per point when the segments are fewer
    than the points)."""
    lo = np.searchsorted(points, seg_start, side="left")
    hi = np.searchsorted(points, seg_end, side="left")
    n = points.size + 1
    out: npt.NDArray[np.bool_] = np.cumsum(
        np.bincount(lo, minlength=n) - np.bincount(hi, minlength=n))[:-1] > 0
    return out


class Timeline:
    """The classes of one set of launching threads painted over all time, once (shared by
    every stream those threads launch on; ``Painting`` restricts it to a stream's gaps).

    ``unions``: for each class index 0..4 the ``union`` of its host intervals. Every
    instant gets the lowest class covering it, else ``UNTRACED``; ``points`` are the
    union boundaries (ascending, distinct), ``label[j]`` the class of ``[points[j],
    points[j + 1])`` (the last one and the time before ``points[0]``: ``UNTRACED``), and
    ``cum[k, j]`` the time of class ``k`` in ``[points[0], points[j])`` (ns).
    """

    def __init__(self, unions: Sequence[tuple[IntArray, IntArray, IntArray]]) -> None:
        self.unions = list(unions)
        bounds = [x for u in self.unions for x in u[:2]]
        # each bound array is sorted: a stable sort (timsort) merges the runs
        points = np.sort(np.concatenate(bounds) if bounds else np.zeros(0, np.int64),
                         kind="stable")
        if points.size:
            distinct = np.ones(points.size, dtype=bool)
            distinct[1:] = points[1:] != points[:-1]
            points = points[distinct]
        label = np.full(points.size, UNTRACED, dtype=np.int64)
        for k in range(len(self.unions) - 1, -1, -1):
            label[covered_sorted(points, *self.unions[k][:2])] = k
        length = np.zeros(points.size, dtype=np.int64)
        length[:-1] = np.diff(points)
        self.points, self.label = points.astype(np.int64, copy=False), label
        self.cum = np.zeros((UNTRACED + 1, points.size), dtype=np.int64)
        for k in range(UNTRACED + 1):
            self.cum[k, 1:] = np.cumsum(np.where(label == k, length, 0)[:-1])
        # each class's time before its own union's bounds (they are points: no tail)
        self.union_before = [
            (self.cum[k, np.searchsorted(self.points, u[0])],
             self.cum[k, np.searchsorted(self.points, u[1])])
            for k, u in enumerate(self.unions)]

    def _locate(self, x: IntArray) -> tuple[IntArray, IntArray, npt.NDArray[np.bool_]]:
        """For each instant: the segment it lies in (0 before ``points[0]``), its offset
        from that segment's start (negative before ``points[0]``), and whether it lies at
        or after ``points[0]``. ``points`` must not be empty."""
        j = np.searchsorted(self.points, x, side="right") - 1
        inside = j >= 0
        jj = np.where(inside, j, 0)
        return jj, x - self.points[jj], inside

    def before(self, x: IntArray) -> IntArray:
        """Time of every class before each instant ``x``, from ``points[0]`` (ns; shape
        ``(UNTRACED + 1, len(x))``): only differences of two instants mean anything
        (untraced time before ``points[0]`` counts negative)."""
        out = np.zeros((UNTRACED + 1, x.size), dtype=np.int64)
        if self.points.size == 0:
            out[UNTRACED] = x
            return out
        jj, tail, inside = self._locate(x)
        out[:] = self.cum[:, jj]
        out += np.where(self.label[jj] == np.arange(UNTRACED + 1)[:, None], tail, 0)
        out[:, ~inside] = 0
        out[UNTRACED, ~inside] = tail[~inside]  # x - points[0] < 0: untraced before
        return out

    def before_class(self, x: IntArray, k: int) -> IntArray:
        """Row ``k`` of ``before(x)``, computed alone."""
        if self.points.size == 0:
            return x.copy() if k == UNTRACED else np.zeros(x.size, dtype=np.int64)
        jj, tail, inside = self._locate(x)
        out: IntArray = self.cum[k, jj] + np.where(self.label[jj] == k, tail, 0)
        out[~inside] = tail[~inside] if k == UNTRACED else 0
        return out


class Painting:
    """The gaps of one stream painted with the class of the host activity over them.

    ``gap_start``/``gap_end``: the stream's idle gaps (disjoint); ``classes``: for each
    class index 0..4 the host intervals ``(start, end)`` of that class (or ``unions``: their
    ``union`` already computed; or ``timeline``: their ``Timeline``, shared by the streams
    of one set of launching threads). ``in_gaps(a, b, k)`` gives the time of class ``k``
    within the gaps and within ``[a, b)``; ``gaps`` the gaps' union ``(start, end)``;
    ``unions`` the segments of each class union (``union``) that overlap the gaps (the
    others paint nothing). Inside a gap an instant has the lowest class covering it, else
    ``UNTRACED``; outside the gaps nothing counts. Per stream the cost is sorted searches
    over its gaps and the timeline, not a repaint of the host's timeline.
    """

    def __init__(self, gap_start: IntArray, gap_end: IntArray,
                 classes: Sequence[tuple[IntArray, IntArray]] = (),
                 unions: Sequence[tuple[IntArray, IntArray, IntArray]] | None = None,
                 timeline: Timeline | None = None) -> None:
        g_start, g_end, _ = union(gap_start, gap_end)
        self.gaps = (g_start, g_end)
        if timeline is None:
            timeline = Timeline([union(s, e) for s, e in classes] if unions is None
                                else unions)
        self.timeline = timeline
        self.unions = []
        self._union_before = []
        for u, (c0, c1) in zip(timeline.unions, timeline.union_before, strict=True):
            keep = overlapping(u[0], u[1], g_start, g_end)
            whole = bool(keep.all())
            self.unions.append(u if whole else (u[0][keep], u[1][keep], u[2][keep]))
            self._union_before.append((c0, c1) if whole else (c0[keep], c1[keep]))
        # per gap: each class's time before its start, and inside the gaps before it
        self._at_start = timeline.before(g_start)
        inside = timeline.before(g_end) - self._at_start
        self._prefix = np.zeros((UNTRACED + 1, g_start.size + 1), dtype=np.int64)
        np.cumsum(inside, axis=1, out=self._prefix[:, 1:])

    def _open(self, x: IntArray) -> tuple[IntArray, IntArray]:
        """For each instant: the number of gaps it has ended (``i``), and the positions of
        the instants inside a gap (gap ``i[pos]``)."""
        g_start, g_end = self.gaps
        i = np.searchsorted(g_end, x, side="right")
        pos = np.flatnonzero(i < g_start.size)
        return i, pos[g_start[i[pos]] < x[pos]]

    def all_at(self, x: IntArray) -> IntArray:
        """Time of every class within the gaps before each instant ``x`` (ns; rows
        0..UNTRACED)."""
        i, pos = self._open(x)
        out: IntArray = self._prefix[:, i]
        if pos.size:
            out[:, pos] += self.timeline.before(x[pos]) - self._at_start[:, i[pos]]
        return out

    def at(self, x: IntArray, k: int, before: IntArray | None = None) -> IntArray:
        """Time of class ``k`` within the gaps before each instant ``x`` (ns);
        ``before``: the timeline's ``before_class(x, k)`` when already known."""
        i, pos = self._open(x)
        out: IntArray = self._prefix[k, i]
        if pos.size:
            known = self.timeline.before_class(x[pos], k) if before is None else before[pos]
            out[pos] += known - self._at_start[k, i[pos]]
        return out

    def union_in_gaps(self, k: int) -> IntArray:
        """``in_gaps`` of each kept segment of class ``k``'s union (``unions[k]``), from
        the class times the timeline keeps at its bounds (no search of the timeline)."""
        seg_start, seg_end, _ = self.unions[k]
        c0, c1 = self._union_before[k]
        return self.at(seg_end, k, c1) - self.at(seg_start, k, c0)

    def in_gaps(self, a: IntArray, b: IntArray, k: int) -> IntArray:
        """Time of class ``k`` within the gaps and within each ``[a, b)`` (ns)."""
        return self.at(b, k) - self.at(a, k)

    def all_in_gaps(self, a: IntArray, b: IntArray) -> IntArray:
        """``in_gaps(a, b, k)`` for every class ``k``: shape ``(UNTRACED + 1, len(a))``."""
        return self.all_at(b) - self.all_at(a)
