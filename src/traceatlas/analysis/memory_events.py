"""Kineto ``[memory]`` events (``profile_memory=True``) as columns, with where each happened.

Each event is an ``instants`` row named ``[memory]`` whose ``args`` carry ``Device Type``
(0 CPU, 1 CUDA), ``Device Id``, ``Addr``, ``Bytes`` (> 0 an allocation, < 0 a free),
``Total Allocated`` and ``Total Reserved`` (bytes on that device after the event; older
PyTorch wrote neither, nor ``Addr``). ``events`` extracts them with one JSON decode on the
column, orders them (time, then file order: ``seq``) and adds the context from the
host intervals of the event's thread: ``op`` the innermost enclosing operator
(``cpu_op``, ``start <= ts < end``), ``annotation`` the innermost enclosing user
annotation (PyTorch's own ranges such as ``ProfilerStep#N`` left out), ``step`` the rank's
step whose span holds the event, and ``node`` the innermost enclosing node of the
TensorBoard plugin's operator tree (operators, annotations, steps) that ``by_op``
attributes allocations to. ``pair`` matches each allocation with its free (same rank,
device and address, the next free after it in event order).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from traceatlas.analysis.syncs import NOT_USER_ANNOTATION_RE
from traceatlas.io.kineto_memory import DEVICE_TYPES
from traceatlas.ops.exclusive import parents

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

MEMORY_EVENT = "[memory]"
NODE_CATEGORIES = ("cpu_op", "annotation", "step")
"""Host interval categories forming the TensorBoard plugin's operator tree."""
NOT_OPERATOR_RE = r"^(DataParallel\.forward|DistributedDataParallel\.forward)$|^Optimizer\."
"""Operators the plugin does not count as operators (``node.is_operator_node``)."""
_ARGS = {"Device Type": "device_type", "Device Id": "device_id", "Addr": "addr",
         "Bytes": "bytes", "Total Allocated": "total_allocated",
         "Total Reserved": "total_reserved"}


@dataclass
class MemoryEvents:
    """``frame``: one row per event (``EVENT_COLUMNS``); ``nodes``: the operator-tree nodes
    (``node`` index, ``rank``, ``name``, ``category``, ``is_op``, ``parent`` index);
    ``rebuilt``: (rank, device_type, device_id) whose ``total_allocated`` is the running
    sum of ``bytes`` (the trace lacked ``Total Allocated``)."""

    frame: pl.DataFrame
    nodes: pl.DataFrame
    rebuilt: list[tuple[int, int, int]]


def device_label(device_type: pl.Expr, device_id: pl.Expr) -> pl.Expr:
    """The readers' device names (``io.kineto_memory.device_label``): ``CPU``, ``GPU 0``
    (CUDA and HIP), ``XPU 1``, ``device type 42 0`` for a type c10 does not name."""
    import polars as pl

    kind = device_type.replace_strict(
        DEVICE_TYPES, default=pl.format("device type {}", device_type),
        return_dtype=pl.String)
    return pl.when(device_type == 0).then(kind).otherwise(pl.format("{} {}", kind, device_id))


def _raw(trace: Trace) -> pl.DataFrame:
    """The ``[memory]`` instants' fields, sorted by (rank, ts, file order): ``seq``."""
    import polars as pl

    dtype = pl.Struct({k: pl.Int64 for k in _ARGS})
    frame = (trace.instants.filter(pl.col("name") == MEMORY_EVENT)
             .select("rank", "track_id", "ts_ns",
                     pl.col("args").str.json_decode(dtype).alias("_a"))
             .collect())
    frame = frame.with_columns(
        *[pl.col("_a").struct.field(k).alias(v) for k, v in _ARGS.items()]).drop("_a")
    return (frame.with_columns(pl.col("device_type").fill_null(-1),
                               pl.col("device_id").fill_null(-1),
                               pl.col("bytes").fill_null(0))
            .with_row_index("_file").sort("rank", "ts_ns", "_file")
            .drop("_file").with_row_index("seq"))


def _nodes(trace: Trace) -> pl.DataFrame:
    """Operator-tree nodes of every host thread, with ``parent``, ``is_op`` and ``dup``;
    sorted by (rank, track, start, -end): ``node`` is the row index.

    ``dup``: an operator that is the only child of an operator of the same name (the
    plugin merges it into its parent, as ``torch.autograd.profiler`` does); ``canon`` is
    the node it merges into (itself when not a dup)."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    nodes = (trace.intervals.filter(pl.col("category").is_in(NODE_CATEGORIES))
             .select("rank", "track_id", "start_ns", "end_ns",
                     pl.col("name").cast(pl.String), cat.alias("category"))
             .collect()
             .sort("rank", "track_id", "start_ns", pl.col("end_ns"), descending=[
                 False, False, False, True])
             .with_row_index("node"))
    key = nodes.select(pl.struct("rank", "track_id").rank("dense")).to_series()
    parent = parents(key.to_numpy().astype(np.int64), nodes["start_ns"].to_numpy(),
                     nodes["end_ns"].to_numpy(), np.ones(nodes.height, dtype=bool))
    op = (nodes["category"] == "cpu_op").to_numpy()
    names = nodes["name"].to_numpy()
    has = parent >= 0
    children = np.bincount(parent[has], minlength=nodes.height)
    p = np.where(has, parent, 0)
    dup = has & op & op[p] & (children[p] == 1) & (names == names[p])
    canon = np.arange(nodes.height)
    todo = np.flatnonzero(dup)
    while len(todo):  # chains of same-name single children merge into the top one
        canon[todo] = parent[canon[todo]]
        todo = todo[dup[canon[todo]]]
    return nodes.with_columns(
        parent=pl.Series(parent, dtype=pl.Int64),
        is_op=(pl.col("category") == "cpu_op") & ~pl.col("name").str.contains(NOT_OPERATOR_RE)
        & ~pl.Series(dup), dup=pl.Series(dup), canon=pl.Series(canon, dtype=pl.Int64),
        is_user_ann=(pl.col("category") == "annotation")
        & ~pl.col("name").str.contains(NOT_USER_ANNOTATION_RE))


def _innermost(ev: pl.DataFrame, nodes: pl.DataFrame) -> np.ndarray:
    """Per event, the innermost node (``start <= ts < end``) on its thread, -1 for none.

    The last node starting at or before ``ts`` (deepest among equal starts), then up
    its parents until one holds ``ts``: the enclosing node of nested intervals is an
    ancestor of the last one started. A loop per thread and per depth level."""
    out = np.full(ev.height, -1, dtype=np.int64)
    if nodes.height == 0 or ev.height == 0:
        return out
    n_rank = nodes["rank"].to_numpy()
    n_track = nodes["track_id"].to_numpy()
    starts = nodes["start_ns"].to_numpy()
    ends = nodes["end_ns"].to_numpy()
    parent = nodes["parent"].to_numpy()
    e_rank = ev["rank"].to_numpy()
    e_track = ev["track_id"].to_numpy()
    ts = ev["ts_ns"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, (n_rank[1:] != n_rank[:-1])
                                  | (n_track[1:] != n_track[:-1]), True])
    for lo, hi in itertools.pairwise(bounds):
        rows = np.flatnonzero((e_rank == n_rank[lo]) & (e_track == n_track[lo]))
        if len(rows):
            # starts of one thread are sorted; ties: the longer (outer) node first
            out[rows] = lo + np.searchsorted(starts[lo:hi], ts[rows], side="right") - 1
            out[rows[out[rows] < lo]] = -1
    todo = np.flatnonzero(out >= 0)
    while len(todo):
        bad = todo[ends[out[todo]] <= ts[todo]]
        out[bad] = parent[out[bad]]
        todo = bad[out[bad] >= 0]
    return out


def _up_to(node: np.ndarray, parent: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """From each ``node`` (-1 none) up the parents to the first with ``ok`` (-1 none)."""
    out = node.copy()
    todo = np.flatnonzero(out >= 0)
    while len(todo):
        bad = todo[~ok[out[todo]]]
        out[bad] = parent[out[bad]]
        todo = bad[out[bad] >= 0]
    return out


def ancestors(node: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, node) pairs: each row's ``node`` and every ancestor of it (a loop per
    depth level)."""
    rows, nodes = [], []
    cur_rows = np.flatnonzero(node >= 0)
    cur = node[cur_rows]
    while len(cur_rows):
        rows.append(cur_rows)
        nodes.append(cur)
        cur = parent[cur]
        keep = cur >= 0
        cur_rows, cur = cur_rows[keep], cur[keep]
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(rows), np.concatenate(nodes)


def _steps(trace: Trace, ev: pl.DataFrame) -> pl.Series:
    """The step (number) whose span on the rank holds each event's time, else null."""
    import polars as pl

    steps = (trace.intervals.filter((pl.col("category") == "step")
                                    & (pl.col("step") >= 0))
             .select("rank", pl.col("start_ns").alias("_ss"), pl.col("end_ns").alias("_se"),
                     pl.col("step").alias("_step"))
             .collect().sort("_ss"))
    joined = (ev.select("seq", "rank", "ts_ns").sort("ts_ns")
              .join_asof(steps, left_on="ts_ns", right_on="_ss", by="rank",
                         strategy="backward", check_sortedness=False)
              .sort("seq"))
    inside = joined["_se"] > joined["ts_ns"]
    return (joined.select(pl.when(inside).then(pl.col("_step")).otherwise(None)
                          .cast(pl.Int64).alias("step")).to_series())


def events(trace: Trace) -> MemoryEvents:
    """The ``[memory]`` events of ``trace`` (see the module doc), ``total_allocated``
    rebuilt from the running sum of ``bytes`` per (rank, device) where it is missing."""
    import polars as pl

    ev = _raw(trace)
    nodes = _nodes(trace)
    inner = _innermost(ev, nodes)
    parent = nodes["parent"].to_numpy()
    is_op = (nodes["is_op"] | nodes["dup"]).to_numpy()
    cpu_op = (nodes["category"] == "cpu_op").to_numpy()
    op = _up_to(inner, parent, cpu_op)
    ann = _up_to(inner, parent, nodes["is_user_ann"].to_numpy())
    names = nodes["name"]

    def name_of(idx: np.ndarray) -> pl.Series:
        got = names.gather(np.where(idx >= 0, idx, 0)) if len(names) else pl.Series(
            [None] * len(idx), dtype=pl.String)
        return got.zip_with(pl.Series(idx >= 0), pl.Series([None] * len(idx),
                                                          dtype=pl.String))

    self_node = inner.copy()  # the plugin counts an event only when an operator is innermost
    self_node[self_node >= 0] = np.where(is_op[self_node[self_node >= 0]],
                                         self_node[self_node >= 0], -1)
    canon = nodes["canon"].to_numpy()
    self_node[self_node >= 0] = canon[self_node[self_node >= 0]]
    dev = ["rank", "device_type", "device_id"]
    ev = ev.with_columns(op=name_of(op), annotation=name_of(ann), step=_steps(trace, ev),
                         node=pl.Series(self_node, dtype=pl.Int64),
                         device=device_label(pl.col("device_type"), pl.col("device_id")))
    missing = (ev.group_by(dev).agg(pl.col("total_allocated").is_null().any().alias("_m"))
               .filter("_m").sort(dev))
    rebuilt = [(int(r), int(t), int(i)) for r, t, i in missing.select(dev).iter_rows()]
    if rebuilt:
        marks = missing.select(*dev, pl.lit(True).alias("rebuilt"))
        ev = (ev.join(marks, on=dev, how="left")
              .with_columns(pl.col("rebuilt").fill_null(False))
              .with_columns(total_allocated=pl.when("rebuilt")
                            .then(pl.col("bytes").cum_sum().over(dev, order_by="seq"))
                            .otherwise("total_allocated")))
    else:
        ev = ev.with_columns(rebuilt=pl.lit(False))
    return MemoryEvents(ev.sort("seq"), nodes.select("node", "rank", "name", "category",
                                                      "is_op", "parent"), rebuilt)


def pair(ev: pl.DataFrame) -> pl.DataFrame:
    """Allocations (``bytes > 0``) with ``free_seq``/``free_ns``: the first free of the
    same rank, device and address after it in event order (null: never freed in the
    trace, or no ``Addr`` to match on). Columns of ``ev`` plus those two."""
    import polars as pl

    key = ["rank", "device_type", "device_id", "addr"]
    with_addr = (ev.filter(pl.col("addr").is_not_null() & (pl.col("bytes") != 0))
                 .select(*key, "seq", "ts_ns", "bytes").sort(*key, "seq"))
    nxt = with_addr.with_columns(
        free_seq=pl.col("seq").shift(-1).over(key),
        free_ns=pl.col("ts_ns").shift(-1).over(key),
        _next_bytes=pl.col("bytes").shift(-1).over(key))
    freed = (nxt.filter((pl.col("bytes") > 0) & (pl.col("_next_bytes") < 0))
             .select("seq", "free_seq", "free_ns"))
    return (ev.filter(pl.col("bytes") > 0).join(freed, on="seq", how="left")
            .sort("seq"))
