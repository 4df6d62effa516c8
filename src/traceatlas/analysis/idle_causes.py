"""What the host did while the GPU waited: ``idle`` extra table ``causes``.

Every host-wait gap of a device stream (``idle``: the launch of the activity after the gap
started after the stream ran dry) is split by what its *launching threads* (the host
threads whose runtime/driver calls, matched by correlation id, launched work on that
stream) were doing, painted with the priorities of ``traceatlas.ops.host_activity``:
``host_collective`` (own thread) > ``data_loading`` > ``host_sync`` (call and shadow up to
the next launch) > ``launch_bound`` > ``host_collective`` (another thread of the rank,
while the launching threads record nothing) > ``untraced_host``. In a gap where the
launching threads only dispatched ops (launch-bound and untraced time only, the untraced
part no longer than the launch-bound one), the untraced time is the Python between those
ops and counts as ``launch_bound``.

Columns: ``rank, device, stream, step`` (the step of the activity after the gap; -1
outside steps), ``cause``, ``idle_ns`` (gap time of that cause, ns; per rank, device and
stream the causes add up to ``idle``'s ``host_wait_ns``), ``gaps`` (gaps where this cause
has the largest share), ``annotation`` (the innermost user annotation on the launching
threads over that time: the deepest whose overlap is at least half of the largest; among
equally deep ones the larger overlap, then the first name in byte order),
``op`` (the name whose outermost intervals of the cause's class, one segment of the class
union per call stack, overlap that time most, summed over its calls; null for
``untraced_host``), ``kernel`` (the device activity after most of the gaps where this
cause has the largest share; null when it has none). Rows sorted by ``rank, device,
stream, step``, then ``idle_ns`` descending, then ``cause``. Built as interval joins: sorted
searches over one painted timeline per stream, no loop over gaps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.host_activity import (
    CAUSE_ORDER,
    PAGEABLE_RE,
    UNTRACED,
    IntArray,
    Painting,
    Timeline,
    name_class,
    union,
)
from traceatlas.ops.key_lookup import lookup

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

KEYS = ["rank", "device", "stream"]
COLUMNS = (*KEYS, "step", "cause", "idle_ns", "gaps", "annotation", "op", "kernel")
LAUNCH_CATEGORIES = ("runtime", "driver")
ANNOTATION = 6
LAUNCH = 3
WHERE_SHARE = 0.5
"""The innermost annotation is the deepest with at least this share of the largest overlap."""


def empty() -> pl.DataFrame:
    """The ``causes`` table with no rows."""
    import polars as pl

    return pl.DataFrame(schema={"rank": pl.Int32, "device": pl.Int32, "stream": pl.Int64,
                                "step": pl.Int32, "cause": pl.String, "idle_ns": pl.Int64,
                                "gaps": pl.Int64, "annotation": pl.String, "op": pl.String,
                                "kernel": pl.String})


def causes(trace: Trace, gaps: pl.DataFrame, device: pl.DataFrame) -> pl.DataFrame:
    """The ``causes`` table for the host-wait ``gaps`` (``rank, device, stream, step,
    prev_end_ns, start_ns``); ``device``: device work with ``rank, device, stream,
    correlation, name``."""
    import polars as pl

    if gaps.height == 0:
        return empty()
    ranks = gaps["rank"].unique().to_list()
    host, calls = _host(trace, ranks, device)
    threads = _launching_threads(device, calls)
    frames = []
    one = host["rank"].unique()  # one rank (a batch of one): no copy per rank
    host_of = ({int(one[0]): host} if one.len() == 1 else
               {int(k[0]): v for k, v in
                host.partition_by("rank", as_dict=True, maintain_order=True).items()})
    launchers = {k: v["track_id"].to_list() for k, v in
                 threads.partition_by(KEYS, as_dict=True).items()}
    streams = gaps.partition_by(KEYS, as_dict=True)
    rank_host, current = None, None
    for key in sorted(streams):  # rank after rank: one rank's timelines held at a time
        if rank_host is None or key[0] != current:
            current = key[0]
            rank_host = _Host(host_of.pop(int(current), host.clear()))
        frames.append(_stream(rank_host, launchers.get(key, []), streams[key].sort("start_ns"),
                              key))
    out = pl.concat(frames) if frames else empty()
    # rows of equal time in one step: by cause word (no tie left to the frames' order)
    return out.filter(pl.col("idle_ns") > 0).sort(*KEYS, "step", "idle_ns", "cause",
                                                  descending=[False] * 4 + [True, False])


def _launching_threads(device: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Distinct ``rank, device, stream, track_id``: the threads whose launch calls (matched
    by rank and correlation) launched work on each stream. A sorted search of the packed
    keys (``ops.key_lookup``); an inner join when the keys repeat or do not pack."""
    track = lookup(calls["rank"], calls["correlation"], calls["track_id"],
                   device["rank"], device["correlation"])
    if track is None:
        return (device.join(calls.select("rank", "correlation", "track_id"),
                            on=["rank", "correlation"], how="inner")
                .select(*KEYS, "track_id").unique())
    return device.select(*KEYS).with_columns(track).drop_nulls("track_id").unique()


class _Host:
    """One rank's classified host intervals as numpy columns (names kept as a Series), and
    per set of launching threads the rows of each painted class and their unions (computed
    once for the streams those threads launch on)."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.track = frame["track_id"].to_numpy()
        self.k = frame["k"].to_numpy()
        self.start = frame["start_ns"].to_numpy().astype(np.int64)
        self.end = frame["paint_end"].to_numpy().astype(np.int64)
        self.depth = frame["depth"].to_numpy()
        self.name = frame["name"]
        self.code = self.name.to_physical()
        self._of_class = {k: np.flatnonzero(self.k == k) for k in (0, 1, 2, 3, ANNOTATION)}
        self._sets: dict[tuple[int, ...], _Threads] = {}

    def part(self, rows: npt.NDArray[np.int64]) -> tuple[IntArray, IntArray]:
        return self.start[rows], self.end[rows]

    def threads(self, tracks: list[int]) -> _Threads:
        """The painted classes' rows (ascending) for the launching threads ``tracks``:
        classes 0-3 on those threads, class 4 (collectives) on the others; annotations on
        those threads; the unions of classes 0-4 painted (``Timeline``)."""
        key = tuple(sorted(set(tracks)))
        if key not in self._sets:
            wanted = np.asarray(key, dtype=self.track.dtype)

            def own(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
                return np.isin(self.track[rows], wanted)

            parts = [rows[own(rows)] for rows in (self._of_class[k] for k in range(4))]
            parts.append(self._of_class[0][~own(self._of_class[0])])
            notes = self._of_class[ANNOTATION][own(self._of_class[ANNOTATION])]
            self._sets[key] = _Threads(parts, Timeline([union(*self.part(p)) for p in parts]),
                                       notes)
        return self._sets[key]


class _Threads(NamedTuple):
    parts: list[npt.NDArray[np.int64]]
    timeline: Timeline
    """The classes' unions painted once, for every stream these threads launch on."""
    notes: npt.NDArray[np.int64]


def _host(trace: Trace, ranks: list[int], device: pl.DataFrame
          ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Host intervals of ``ranks`` with their class (``k``) and painted end (``paint_end``:
    a sync's end extended to the next launch of its thread), and the launch calls."""
    import polars as pl

    rows = (trace.intervals
            .select("rank", "track_id", "start_ns", "end_ns", "name", "category", "depth",
                    "correlation")
            .filter(~pl.col("category").is_in((*DEVICE_WORK, "gpu_annotation"))
                    & pl.col("rank").is_in(ranks))
            .collect())
    k = classify(rows)
    # correlation ids are per rank: a launch is pageable when its own rank's copy is
    pageable = (device.filter(pl.col("name").str.contains(PAGEABLE_RE.pattern)
                              & pl.col("correlation").is_not_null())
                .select(pl.col("rank").cast(rows["rank"].dtype),
                        pl.col("correlation").cast(rows["correlation"].dtype))
                .unique())
    launch = pl.col("category").is_in(LAUNCH_CATEGORIES) & pl.col("correlation").is_not_null()
    if pageable.height:  # launch calls of a pageable copy are syncs (only those rows join)
        k = k.copy()
        k[(rows.select("rank", "correlation", "category").with_row_index("_i").filter(launch)
           .join(pageable, on=["rank", "correlation"], how="semi")["_i"].to_numpy())] = 2
    host = rows.with_columns(k=pl.Series(k, dtype=pl.Int8))
    if (k < 0).any():
        host = host.filter(pl.col("k") >= 0)
    calls = (host.filter(launch)
             .select("rank", "track_id", "correlation", pl.col("start_ns").alias("next_ns"))
             .sort("next_ns"))
    host = host.with_row_index("_row")
    syncs = (host.filter(pl.col("k") == 2).select("_row", "rank", "track_id", "end_ns")
             .sort("end_ns")
             .join_asof(calls.select("rank", "track_id", "next_ns"), left_on="end_ns",
                        right_on="next_ns", by=["rank", "track_id"], strategy="forward",
                        check_sortedness=False))
    paint_end = host["end_ns"].to_numpy().copy()
    rows_i = syncs["_row"].to_numpy()
    paint_end[rows_i] = np.maximum(paint_end[rows_i],
                                   syncs["next_ns"].fill_null(0).to_numpy())
    host = host.drop("_row", "correlation", "category").with_columns(
        paint_end=pl.Series(paint_end))
    return host, calls


def classify(rows: pl.DataFrame) -> npt.NDArray[np.int8]:
    """``name_class`` of each row's (``name``, ``category``), each distinct pair classified
    once, found through the categorical codes (hashing 1 M strings for a join costs more
    than the rest of the read): the first row of each distinct code pair by a hash of the
    int64 pair codes (``arg_unique``), then a sorted search of every row's pair among the
    distinct ones (any code range)."""
    import polars as pl

    pair = _pair_codes(rows)
    if pair.size == 0:
        return np.zeros(0, np.int8)
    first = pl.Series(pair).arg_unique().to_numpy().astype(np.int64)
    order = np.argsort(pair[first], kind="stable")
    first = first[order]
    classes = _classes(rows, first)
    out: npt.NDArray[np.int8] = classes[np.searchsorted(pair[first], pair)]
    return out


def _pair_codes(rows: pl.DataFrame) -> IntArray:
    """One int64 per row from the ``name`` and ``category`` categorical codes."""
    name_code = rows["name"].to_physical().to_numpy().astype(np.int64)
    cat_code = rows["category"].to_physical().to_numpy().astype(np.int64)
    out: IntArray = name_code * (int(cat_code.max(initial=0)) + 1) + cat_code
    return out


def _classes(rows: pl.DataFrame, first: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]:
    """``name_class`` of the rows ``first`` (one per distinct pair)."""
    return np.array([name_class(str(n), str(c)) for n, c in zip(
        rows["name"].gather(first).to_list(), rows["category"].gather(first).to_list(),
        strict=True)], dtype=np.int8)


def _stream(host: _Host, tracks: list[int], gaps: pl.DataFrame,
            key: tuple[int, int, int]) -> pl.DataFrame:
    """Rows of the ``causes`` table for one stream."""
    import polars as pl

    threads = host.threads(tracks)
    parts = threads.parts
    a = gaps["prev_end_ns"].to_numpy().astype(np.int64)
    b = gaps["start_ns"].to_numpy().astype(np.int64)
    paint = Painting(a, b, timeline=threads.timeline)
    per_class = paint.all_in_gaps(a, b)
    # A gap in which the launching threads only dispatched ops, for at least as long as
    # they recorded nothing: the untraced time is the Python between those ops, part of
    # launching too slowly (the gap's final launch call alone does not make a gap so).
    python = ((per_class[LAUNCH] >= per_class[UNTRACED])
              & (per_class[[0, 1, 2, 4]].sum(axis=0) == 0))
    per_class[LAUNCH] += np.where(python, per_class[UNTRACED], 0)
    per_class[UNTRACED] = np.where(python, 0, per_class[UNTRACED])
    per_cause = {c: np.zeros(a.size, dtype=np.int64) for c in dict.fromkeys(CAUSE_ORDER)}
    for k, cause in enumerate(CAUSE_ORDER):
        per_cause[cause] += per_class[k]
    words = list(per_cause)
    matrix = np.stack([per_cause[c] for c in words])
    top = matrix.argmax(axis=0)
    steps, inverse = np.unique(gaps["step"].to_numpy(), return_inverse=True)
    n = steps.size
    table = pl.DataFrame({
        "step": np.tile(steps, len(words)),
        "cause": np.repeat(np.asarray(words), n),
        "idle_ns": np.concatenate([np.bincount(inverse, weights=row, minlength=n)
                                   for row in matrix]).astype(np.int64),
        "gaps": np.concatenate([np.bincount(inverse[top == i], minlength=n)
                                for i in range(len(words))]).astype(np.int64),
    })
    kernels = (pl.DataFrame({"step": gaps["step"], "top": top.astype(np.int8),
                             "kernel": gaps["name"]})
               .group_by("step", "top", "kernel").len()
               .sort("len", "kernel", descending=[True, False])
               .group_by("step", "top", maintain_order=True).agg(pl.col("kernel").first())
               .with_columns(pl.col("top").replace_strict(
                   list(range(len(words))), words, return_dtype=pl.String))
               .rename({"top": "cause"}))
    table = table.join(kernels.with_columns(pl.col("step").cast(table["step"].dtype)),
                       on=["step", "cause"], how="left")
    gap_step = _GapStep(np.maximum.accumulate(b), gaps["step"].to_numpy())
    where = _where(paint, parts, host, threads.notes, gap_step)
    rank, dev, stream = key
    return (table.join(where, on=["step", "cause"], how="left")
            .with_columns(rank=pl.lit(rank, pl.Int32), device=pl.lit(dev, pl.Int32),
                          stream=pl.lit(stream, pl.Int64), step=pl.col("step").cast(pl.Int32))
            .select(COLUMNS))


class _GapStep:
    """The step of the first gap ending after an instant (the gap a host interval starting
    there first overlaps): host intervals are charged to the gaps' steps, not their own
    (a sync in step 1 whose shadow idles the GPU before step 2's first kernel is step 2's)."""

    def __init__(self, gap_end: npt.NDArray[np.int64], steps: npt.NDArray[Any]) -> None:
        self.gap_end, self.steps = gap_end, steps

    def __call__(self, start: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        idx = np.searchsorted(self.gap_end, start, side="right")
        return self.steps[np.clip(idx, 0, self.steps.size - 1)]


def _where(paint: Painting, parts: list[npt.NDArray[np.int64]], host: _Host,
           notes: npt.NDArray[np.int64], gap_step: _GapStep) -> pl.DataFrame:
    """Per (step, cause): the op (the name whose outermost class intervals overlap the
    cause's gap time most, summed) and the innermost user annotation."""
    import polars as pl

    ops = []
    for k, rows in enumerate(parts):
        seg_start, _, first = paint.unions[k]
        if seg_start.size == 0:
            continue
        over = paint.union_in_gaps(k)
        hit = over > 0
        if not hit.any():
            continue
        row = rows[first[hit]]
        ops.append(pl.DataFrame({
            "code": host.code.gather(row), "row": row,
            "step": pl.Series(gap_step(seg_start[hit]), dtype=pl.Int32),
            "over": pl.Series(over[hit], dtype=pl.Int64)})
            .with_columns(cause=pl.lit(CAUSE_ORDER[k], pl.String)))
    schema = {"step": pl.Int32, "cause": pl.String, "op": pl.String}
    # summed per name code (one code per name), the names decoded for the sums only
    sums = (pl.concat(ops).group_by("step", "cause", "code")
            .agg(pl.col("over").sum(), pl.col("row").first()) if ops else None)
    op = (sums.with_columns(name=host.name.gather(sums["row"]).cast(pl.String))
          .sort("over", "name", descending=[True, False])
          .group_by("step", "cause", maintain_order=True)
          .agg(pl.col("name").first().alias("op"))
          if sums is not None else pl.DataFrame(schema=schema))
    marks = []
    if notes.size:  # only annotations overlapping a gap have time there
        s, e = host.part(notes)
        g_start, g_end = paint.gaps
        idx = np.searchsorted(g_end, s, side="right")
        inside = idx < g_end.size
        inside[inside] = g_start[idx[inside]] < e[inside]
        notes, s, e = notes[inside], s[inside], e[inside]
    if notes.size:
        steps = pl.Series(gap_step(s), dtype=pl.Int32)
        names = host.name.gather(notes).cast(pl.String)
        for k in range(UNTRACED + 1):
            marks.append(pl.DataFrame({
                "name": names, "depth": pl.Series(host.depth[notes], dtype=pl.Int64),
                "step": steps, "cause": pl.Series([CAUSE_ORDER[k]] * notes.size,
                                                  dtype=pl.String),
                "over": pl.Series(paint.in_gaps(s, e, k), dtype=pl.Int64)}))
    ann = pl.DataFrame(schema={"step": pl.Int32, "cause": pl.String, "annotation": pl.String})
    if marks:
        m = pl.concat(marks).filter(pl.col("over") > 0)
        m = m.group_by("step", "cause", "name", "depth").agg(pl.col("over").sum())
        best = pl.col("over").max().over("step", "cause")
        # ties: the deeper, then the larger overlap, then the name's byte order (the
        # group_by above leaves rows in no set order: a tie must not fall to it)
        ann = (m.filter(pl.col("over") >= WHERE_SHARE * best)
               .sort("depth", "over", "name", descending=[True, True, False])
               .group_by("step", "cause", maintain_order=True)
               .agg(pl.col("name").first().alias("annotation")))
    return (op.with_columns(pl.col("step").cast(pl.Int32))
            .join(ann.with_columns(pl.col("step").cast(pl.Int32)), on=["step", "cause"],
                  how="full", coalesce=True))
