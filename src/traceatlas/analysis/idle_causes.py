"""What the host did while the GPU waited: ``idle`` extra table ``causes``.

Every host-wait gap of a device stream (``idle``: the launch of the activity after the gap
started after the stream ran dry) is split by what its *launching threads* (the host
threads whose runtime/driver calls, matched by correlation id, launched work on that
stream) were doing, painted with the priorities of ``traceatlas.ops.host_activity``:
``host_collective`` (own thread) > ``data_loading`` > ``host_sync`` (call and shadow up to
the next launch) > ``launch_bound`` > ``host_collective`` (another thread of the rank,
while the launching threads record nothing) > ``untraced_host``.

Columns: ``rank, device, stream, step`` (the step of the activity after the gap; -1
outside steps), ``cause``, ``idle_ns`` (gap time of that cause, ns; per rank, device and
stream the causes add up to ``idle``'s ``host_wait_ns``), ``gaps`` (gaps where this cause
has the largest share), ``annotation`` (the innermost user annotation on the launching
threads over that time: the deepest whose overlap is at least half of the largest),
``op`` (the name whose outermost intervals of the cause's class, one segment of the class
union per call stack, overlap that time most, summed over its calls; null for
``untraced_host``). Built as interval joins: sorted searches over one painted timeline per
stream, no loop over gaps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.host_activity import CAUSE_ORDER, PAGEABLE_RE, UNTRACED, Painting, name_class

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

KEYS = ["rank", "device", "stream"]
COLUMNS = (*KEYS, "step", "cause", "idle_ns", "gaps", "annotation", "op")
LAUNCH_CATEGORIES = ("runtime", "driver")
ANNOTATION = 6
WHERE_SHARE = 0.5
"""The innermost annotation is the deepest with at least this share of the largest overlap."""


def empty() -> pl.DataFrame:
    """The ``causes`` table with no rows."""
    import polars as pl

    return pl.DataFrame(schema={"rank": pl.Int32, "device": pl.Int32, "stream": pl.Int64,
                                "step": pl.Int32, "cause": pl.String, "idle_ns": pl.Int64,
                                "gaps": pl.Int64, "annotation": pl.String, "op": pl.String})


def causes(trace: Trace, gaps: pl.DataFrame, device: pl.DataFrame) -> pl.DataFrame:
    """The ``causes`` table for the host-wait ``gaps`` (``rank, device, stream, step,
    prev_end_ns, start_ns``); ``device``: device work with ``rank, device, stream,
    correlation, name``."""
    import polars as pl

    if gaps.height == 0:
        return empty()
    ranks = gaps["rank"].unique().to_list()
    host, calls = _host(trace, ranks, device)
    threads = (device.join(calls.select("rank", "correlation", "track_id"),
                           on=["rank", "correlation"], how="inner")
               .select(*KEYS, "track_id").unique())
    frames = []
    by_rank = {int(k[0]): v for k, v in
               host.partition_by("rank", as_dict=True, maintain_order=True).items()}
    launchers = {k: v["track_id"].to_list() for k, v in
                 threads.partition_by(KEYS, as_dict=True).items()}
    for (rank, dev, stream), g in gaps.partition_by(KEYS, as_dict=True).items():
        frames.append(_stream(by_rank.get(int(rank), host.clear()),
                              launchers.get((rank, dev, stream), []), g.sort("start_ns"),
                              (rank, dev, stream)))
    out = pl.concat(frames) if frames else empty()
    return out.filter(pl.col("idle_ns") > 0).sort(*KEYS, "step", "idle_ns",
                                                  descending=[False] * 4 + [True])


def _host(trace: Trace, ranks: list[int], device: pl.DataFrame
          ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Host intervals of ``ranks`` with their class (``k``) and painted end (``paint_end``:
    a sync's end extended to the next launch of its thread), and the launch calls."""
    import polars as pl

    rows = (trace.intervals
            .select("rank", "track_id", "start_ns", "end_ns", "name", "category", "depth",
                    "step", "correlation")
            .filter(~pl.col("category").is_in((*DEVICE_WORK, "gpu_annotation"))
                    & pl.col("rank").is_in(ranks))
            .collect())
    names = rows.select("name", "category").unique()
    names = names.with_columns(k=pl.Series(
        [name_class(str(n), str(c)) for n, c in names.iter_rows()], dtype=pl.Int64))
    pageable = device.filter(pl.col("name").str.contains(PAGEABLE_RE.pattern)
                             & pl.col("correlation").is_not_null())["correlation"]
    host = (rows.join(names, on=["name", "category"], how="left")
            .with_columns(k=pl.when(pl.col("correlation").is_in(pageable.implode())
                                    & pl.col("category").is_in(LAUNCH_CATEGORIES))
                          .then(pl.lit(2, pl.Int64)).otherwise(pl.col("k")))
            .filter(pl.col("k") >= 0))
    calls = (host.filter(pl.col("category").is_in(LAUNCH_CATEGORIES)
                         & pl.col("correlation").is_not_null())
             .select("rank", "track_id", "correlation", pl.col("start_ns").alias("next_ns"))
             .sort("next_ns"))
    syncs = (host.filter(pl.col("k") == 2).sort("end_ns")
             .join_asof(calls.select("rank", "track_id", "next_ns"), left_on="end_ns",
                        right_on="next_ns", by=["rank", "track_id"], strategy="forward",
                        check_sortedness=False))
    host = pl.concat([
        host.filter(pl.col("k") != 2).with_columns(paint_end=pl.col("end_ns")),
        syncs.with_columns(paint_end=pl.max_horizontal("end_ns", pl.col("next_ns")
                                                       .fill_null(pl.col("end_ns"))))
        .drop("next_ns"),
    ])
    return host, calls


def _stream(host: pl.DataFrame, tracks: list[int], gaps: pl.DataFrame,
            key: tuple[int, int, int]) -> pl.DataFrame:
    """Rows of the ``causes`` table for one stream."""
    import polars as pl

    own = host.filter(pl.col("track_id").is_in(tracks))
    other = host.filter(~pl.col("track_id").is_in(tracks) & (pl.col("k") == 0))
    parts = [own.filter(pl.col("k") == k) for k in range(4)] + [other]
    classes = [(p["start_ns"].to_numpy().astype(np.int64),
                p["paint_end"].to_numpy().astype(np.int64)) for p in parts]
    a = gaps["prev_end_ns"].to_numpy().astype(np.int64)
    b = gaps["start_ns"].to_numpy().astype(np.int64)
    paint = Painting(a, b, classes)
    per_class = np.stack([paint.in_gaps(a, b, k) for k in range(UNTRACED + 1)])
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
    gap_step = _GapStep(np.maximum.accumulate(b), gaps["step"].to_numpy())
    where = _where(paint, parts, own.filter(pl.col("k") == ANNOTATION), gap_step)
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


def _where(paint: Painting, parts: list[pl.DataFrame], notes: pl.DataFrame,
           gap_step: _GapStep) -> pl.DataFrame:
    """Per (step, cause): the op (outermost class interval with the largest overlap with
    the cause's gap time) and the innermost user annotation."""
    import polars as pl

    ops = []
    for k, part in enumerate(parts):
        seg_start, seg_end, first = paint.unions[k]
        if seg_start.size == 0:
            continue
        over = paint.in_gaps(seg_start, seg_end, k)
        hit = over > 0
        ops.append(part[first[hit]].select("name").with_columns(
            step=pl.Series(gap_step(seg_start[hit]), dtype=pl.Int32),
            cause=pl.lit(CAUSE_ORDER[k]), over=pl.Series(over[hit])))
    schema = {"step": pl.Int32, "cause": pl.String, "op": pl.String}
    op = (pl.concat(ops).with_columns(pl.col("name").cast(pl.String))
          .group_by("step", "cause", "name").agg(pl.col("over").sum())
          .sort("over", "name", descending=[True, False])
          .group_by("step", "cause", maintain_order=True)
          .agg(pl.col("name").first().alias("op"))
          if ops else pl.DataFrame(schema=schema))
    marks = []
    if notes.height:
        s = notes["start_ns"].to_numpy().astype(np.int64)
        e = notes["end_ns"].to_numpy().astype(np.int64)
        steps = pl.Series(gap_step(s), dtype=pl.Int32)
        for k in range(UNTRACED + 1):
            marks.append(notes.select(pl.col("name").cast(pl.String), "depth").with_columns(
                step=steps, cause=pl.lit(CAUSE_ORDER[k]),
                over=pl.Series(paint.in_gaps(s, e, k))))
    ann = pl.DataFrame(schema={"step": pl.Int32, "cause": pl.String, "annotation": pl.String})
    if marks:
        m = pl.concat(marks).filter(pl.col("over") > 0)
        m = m.group_by("step", "cause", "name", "depth").agg(pl.col("over").sum())
        best = pl.col("over").max().over("step", "cause")
        ann = (m.filter(pl.col("over") >= WHERE_SHARE * best)
               .sort("depth", "over", descending=True)
               .group_by("step", "cause", maintain_order=True)
               .agg(pl.col("name").first().alias("annotation")))
    return (op.with_columns(pl.col("step").cast(pl.Int32))
            .join(ann.with_columns(pl.col("step").cast(pl.Int32)), on=["step", "cause"],
                  how="full", coalesce=True))
