"""``tree``: the calling-context tree (CCT) of host activity with the device time of every
kernel, memcpy and memset attributed to the context that launched it
(``traceatlas.ops.cct``: nesting per thread, correlation to the launch call, backward
threads linked to their forward scope by ``fwdbwd`` flows or, without flows, to the main
thread).

Views (``view``):

- ``top_down``: the node table in depth-first order (children by node id), one row per
  node (``by=merged``) or per node and rank (``by=rank``): ``node_id``, ``parent_id``
  (null at the root), ``depth`` (root 0), ``name``, ``category``, ``calls``,
  ``host_inclusive_ns``, ``host_exclusive_ns``, ``device_inclusive_ns``,
  ``device_exclusive_ns``, ``kernels`` (kernel/comm_kernel instances below the node).
  Merged: sums over ranks, ``ranks`` (ranks with the node), and for host and device
  inclusive time ``*_mean_ns`` (over every rank of the trace, absent = 0, rounded),
  ``*_max_ns`` and ``*_max_rank`` (lowest rank on ties).
- ``bottom_up``: per target (``of=kernel``: device activity by name; ``of=op``: operators
  (``cpu_op``) by name, a recursive call counted at its outermost level only), the callers:
  ``caller_id`` (the node of the calling context), ``caller_path`` (names from the root,
  `` > `` between them), ``calls``, ``value_ns`` (``metric``, inclusive) and ``share`` of
  the target's total.
- ``hot_path``: from the root, the child with the most ``metric`` (inclusive) at each level:
  ``step``, the node columns, ``value_ns``, ``share_of_root``, ``share_of_parent``.

Times in ns. Host time is CPU time summed over threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Param, Result
from traceatlas.analysis.partitioned import batch_ranks, summed_notes
from traceatlas.analysis.tree_merge import merge_trees
from traceatlas.ops.cct import (
    DEVICE_CATEGORIES,
    METRIC_COLUMNS,
    NODE_COLUMNS,
    Cct,
    ancestors,
    build_cct,
)

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

METRICS = {"device_ns": "device_inclusive_ns", "host_ns": "host_inclusive_ns"}
PATH_SEPARATOR = " > "
NOTE_ORDER = ("fwdbwd flows:", "backward-thread top-level calls without a fwdbwd flow",
              "device activities without a launch call")
"""``build_cct``'s notes that carry counts, in the order it writes them (others after)."""


class Tree:
    """Calling-context tree: host and device time per context, three views."""

    name = "tree"
    description = ("Calling-context tree of host activity (Python frames, modules, "
                   "annotations, ops, runtime calls) with device time attributed to the "
                   "launching context: top-down, bottom-up, hot path; per rank or merged")
    params = (
        Param("view", str, "top_down", "top_down, bottom_up or hot_path",
              ("top_down", "bottom_up", "hot_path")),
        Param("by", str, "merged", "merged (over ranks: sums, mean/max/rank of max) or "
              "rank (one row per node and rank)", ("merged", "rank")),
        Param("metric", str, "device_ns", "hot_path / bottom_up value: device_ns or "
              "host_ns (inclusive)", tuple(METRICS)),
        Param("of", str, "kernel", "bottom_up targets: kernel (device activity) or op "
              "(cpu_op)", ("kernel", "op")),
        Param("link_threads", bool, True, "put backward-thread calls under their forward "
              "context (fwdbwd flows, else the main thread)"),
        Param("merge_steps", bool, True, "ProfilerStep#N intervals become one "
              "ProfilerStep#* context"),
    )
    requires = ("intervals",)
    partition = "rank"
    """Per rank batch (``analysis.partitioned``): each batch sends its own CCT
    (``partial``); ``merge`` rebuilds the one tree from the batches' paths
    (``tree_merge``: the whole run's node ids) and computes the view. The whole run is
    the merge of one batch."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """The chosen view of the CCT; ``nodes`` (the node table) as an extra table."""
        return self.merge([self.partial(trace, params)], params)

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's CCT: its node table (the batch's own ids) as the table, extras
        ``metrics`` (per rank) and ``ranks`` (the batch's ranks, for the means)."""
        import polars as pl

        cct = build_cct(trace, link_threads=bool(params["link_threads"]),
                        merge_steps=bool(params["merge_steps"]))
        ranks = pl.DataFrame({"rank": trace.ranks}, schema={"rank": pl.Int64})
        return Result(cct.nodes, extra={"metrics": cct.metrics, "ranks": ranks},
                      notes=cct.notes)

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """The one tree from the batches' trees (``tree_merge.merge_trees``), its view;
        notes with counts summed over the batches, in ``build_cct``'s order."""
        nodes, metrics = merge_trees([(p.table, p.extra["metrics"]) for p in partials],
                                     bool(params["merge_steps"]))
        notes = sorted(summed_notes(partials), key=_note_position)
        cct = Cct(nodes, metrics, notes)
        by_rank = params["by"] == "rank"
        table = top_down(cct) if by_rank else merged(cct, batch_ranks(partials))
        view = params["view"]
        metric = METRICS[str(params["metric"])]
        if view == "bottom_up":
            table = bottom_up(cct.nodes, table, str(params["of"]), metric, by_rank)
        elif view == "hot_path":
            table = hot_path(table, metric, by_rank)
        return Result(table, extra={"nodes": cct.nodes}, notes=cct.notes)


def top_down(cct: Cct) -> pl.DataFrame:
    """Node columns joined with the per-rank metrics, depth-first (children by id)."""
    return (_preorder(cct.nodes).join(cct.metrics, on="node_id", how="inner",
                                      maintain_order="left")
            .sort("rank", "_order").drop("_order"))


def _note_position(note: str) -> int:
    """A note's place in ``build_cct``'s order (``NOTE_ORDER``; others after, as found)."""
    return next((i for i, part in enumerate(NOTE_ORDER) if part in note), len(NOTE_ORDER))


def merged(cct: Cct, ranks: int) -> pl.DataFrame:
    """Sums over ranks plus mean (over ``ranks`` ranks, absent = 0), max and rank of max."""
    import polars as pl

    world = max(ranks, 1)
    extra: list[pl.Expr] = []
    for col in ("host_inclusive_ns", "device_inclusive_ns"):
        stem = col.removesuffix("_ns")
        v = pl.col(col)
        extra += [(v.sum() / world).round(0).cast(pl.Int64).alias(f"{stem}_mean_ns"),
                  v.max().alias(f"{stem}_max_ns"),
                  pl.col("rank").sort_by(v, -pl.col("rank"), descending=True).first()
                  .alias(f"{stem}_max_rank")]
    sums = cct.metrics.group_by("node_id").agg(
        pl.len().cast(pl.Int64).alias("ranks"),
        *[pl.col(c).sum().cast(pl.Int64) for c in METRIC_COLUMNS], *extra)
    return (_preorder(cct.nodes).join(sums, on="node_id", how="inner",
                                      maintain_order="left")
            .sort("_order").drop("_order"))


def _preorder(nodes: pl.DataFrame) -> pl.DataFrame:
    """``nodes`` with ``_order``: depth-first position (children by node id)."""
    import polars as pl

    paths = (ancestors(nodes).join(nodes.select("node_id", "depth"),
                                   left_on="ancestor_id", right_on="node_id")
             .sort("depth").group_by("node_id").agg(pl.col("ancestor_id").alias("_path")))
    return (nodes.join(paths, on="node_id").sort("_path")
            .with_row_index("_order").drop("_path").select(*NODE_COLUMNS, "_order"))


def caller_paths(nodes: pl.DataFrame) -> pl.DataFrame:
    """``node_id`` -> ``path``: names from the root's child to the node itself."""
    import polars as pl

    named = nodes.select(pl.col("node_id").alias("ancestor_id"), "name",
                         pl.col("depth").alias("_d"))
    return (ancestors(nodes).join(named, on="ancestor_id").filter(pl.col("_d") > 0)
            .sort("_d").group_by("node_id")
            .agg(pl.col("name").str.join(PATH_SEPARATOR).alias("path")))


def bottom_up(nodes: pl.DataFrame, table: pl.DataFrame, of: str, metric: str,
              by_rank: bool) -> pl.DataFrame:
    """Per target name, its callers with their share (see the module doc)."""
    import polars as pl

    group = ["rank"] if by_rank else []
    if of == "kernel":
        targets = nodes.filter(pl.col("category").is_in(DEVICE_CATEGORIES))
        value = "device_inclusive_ns"
    else:
        ops = nodes.filter(pl.col("category") == "cpu_op")
        # a recursive op counts at its outermost occurrence only
        inner = (ancestors(nodes).filter(pl.col("node_id") != pl.col("ancestor_id"))
                 .join(ops.select(pl.col("node_id").alias("ancestor_id"),
                                  pl.col("name").alias("_an")), on="ancestor_id")
                 .join(ops.select("node_id", "name"), on="node_id")
                 .filter(pl.col("_an") == pl.col("name")).select("node_id").unique())
        targets = ops.join(inner, on="node_id", how="anti")
        value = metric
    rows = (table.join(targets.select("node_id"), on="node_id", how="semi")
            .join(caller_paths(nodes).rename({"node_id": "parent_id", "path": "caller_path"}),
                  on="parent_id", how="left")
            .group_by(*group, "name", "category", pl.col("parent_id").alias("caller_id"),
                      "caller_path")
            .agg(pl.col("calls").sum().cast(pl.Int64),
                 pl.col(value).sum().cast(pl.Int64).alias("value_ns")))
    total = pl.col("value_ns").sum().over(*group, "name", "category")
    return (rows.with_columns(
        share=pl.when(total > 0).then(pl.col("value_ns") / total).otherwise(None),
        _total=total)
        .sort([*group, "_total", "name", "value_ns", "caller_id"],
              descending=[*([False] * len(group)), True, False, True, False])
        .drop("_total")
        .select(*group, "name", "category", "caller_id", "caller_path", "calls", "value_ns",
                "share"))


def hot_path(table: pl.DataFrame, metric: str, by_rank: bool) -> pl.DataFrame:
    """From the root, the heaviest child by ``metric`` at each level (ties: lowest id)."""
    import polars as pl

    parts = table.partition_by("rank", maintain_order=True) if by_rank else [table]
    out = []
    for part in parts:  # a loop over levels of one path, not over events
        children = (part.filter(pl.col("parent_id").is_not_null())
                    .sort([metric, "node_id"], descending=[True, False])
                    .unique("parent_id", keep="first"))
        nxt = dict(zip(children["parent_id"].to_list(), children["node_id"].to_list(),
                       strict=True))
        path = [0]
        while path[-1] in nxt:
            path.append(nxt[path[-1]])
        step = pl.DataFrame({"node_id": path, "step": list(range(len(path)))},
                            schema={"node_id": pl.Int64, "step": pl.Int64})
        rows = part.join(step, on="node_id").sort("step")
        root = rows[metric][0]
        rows = rows.with_columns(
            value_ns=pl.col(metric),
            share_of_root=(pl.col(metric) / root) if root else pl.lit(None, pl.Float64),
            share_of_parent=pl.when(pl.col(metric).shift(1) > 0)
            .then(pl.col(metric) / pl.col(metric).shift(1)).otherwise(None))
        out.append(rows)
    first = ["rank"] if by_rank else []
    cols = [*first, "step", *NODE_COLUMNS, "value_ns", "share_of_root", "share_of_parent",
            *METRIC_COLUMNS]
    return pl.concat(out).select(cols)
