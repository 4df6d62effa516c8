"""The one calling-context tree of a run rebuilt from per-batch trees (``tree``'s merge).

Each batch of ranks builds its own CCT (``ops.cct.build_cct``: a rank's tree does not
depend on the other ranks) and sends its node table, with the batch's own ids, and its
per-rank metrics. A context is its path of labels from the root; the merge takes the union
of the batches' paths and numbers them with the rule ``build_cct`` numbers one tree built
over every rank (``_PathIds``: one id per distinct (parent id, label), new ids in sorted
key order, host levels first):

1. the root is 0;
2. host contexts level by level (depth 1, 2, ...); within a level, in order of (parent
   id, label);
3. the ``NO_LAUNCH`` node (device activity without a launch call), when any batch has it;
4. device contexts (``kernel``, ``comm_kernel``, ``memcpy``, ``memset`` leaves), all
   depths together, in order of (parent id, label).

Label order: ``ProfilerStep#*`` (the merged step label, ``merge_steps``) first, then by
name, then by category (Polars' string order, the order of ``build_cct``'s label codes).
The rule depends only on the set of paths, never on which batch or rank holds a path, so
a whole run (one batch) and any cut into batches give the same ids. Metrics rows keep
their values and take the merged ids (sorted by rank, node id as in ``build_cct``).

Memory: the batches' node tables and per-rank metrics (one row per node and rank that has
time below it: the size of ``by=rank``'s table), never the intervals. Known limit: a
literal step-category interval named ``ProfilerStep#*`` (not ``ProfilerStep#<N>``) is a
separate context in ``build_cct`` but shows the merged step's name, so it merges with it
here (no profiler writes that name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from traceatlas.ops.cct import (
    DEVICE_CATEGORIES,
    METRIC_COLUMNS,
    NODE_COLUMNS,
    ROOT,
    STEP_MERGED,
)

if TYPE_CHECKING:
    import polars as pl

NO_LAUNCH_CATEGORY = "device"
"""Category of ``ops.cct``'s ``NO_LAUNCH`` node (no interval has it)."""


def merge_trees(parts: Sequence[tuple[pl.DataFrame, pl.DataFrame]], merge_steps: bool
                ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(nodes, metrics) of the one tree from each batch's (nodes, metrics) (``Cct``
    tables with the batch's own node ids); see the module doc for the numbering rule."""
    import polars as pl

    nodes = pl.concat([n.select(NODE_COLUMNS).with_columns(_b=pl.lit(i, pl.Int64))
                       for i, (n, _) in enumerate(parts)], how="vertical")
    body = nodes.filter(pl.col("depth") > 0)
    step = ((pl.col("category") == "step") & (pl.col("name") == STEP_MERGED)
            if merge_steps else pl.lit(False))
    labels = (body.select("name", "category").unique().with_columns(_later=step.not_())
              .sort("_later", "name", "category").drop("_later")
              .with_row_index("_label").with_columns(pl.col("_label").cast(pl.Int64)))
    body = body.join(labels, on=["name", "category"], how="left")
    device = pl.col("category").is_in(DEVICE_CATEGORIES)
    no_launch = pl.col("category") == NO_LAUNCH_CATEGORY
    host = body.filter(~device & ~no_launch)

    roots = nodes.filter(pl.col("depth") == 0).select("_b", "node_id",
                                                      _gid=pl.lit(0, pl.Int64))
    new_nodes = [pl.DataFrame({"_gid": [0], "_gp": [None], "depth": [0],
                               "name": [ROOT], "category": ["root"]},
                              schema={"_gid": pl.Int64, "_gp": pl.Int64, "depth": pl.Int32,
                                      "name": pl.String, "category": pl.String})]
    maps = [roots]
    level = roots
    next_id = 1
    for depth in sorted(host["depth"].unique().to_list()):  # levels of a path, not events
        rows = host.filter(pl.col("depth") == depth)
        level, keys = _number(rows, level, next_id)
        next_id += keys.height
        maps.append(level)
        new_nodes.append(keys)
    lost = body.filter(no_launch)
    if lost.height:
        keys = lost.head(1).select(_gid=pl.lit(next_id, pl.Int64), _gp=pl.lit(0, pl.Int64),
                                   depth="depth", name="name", category="category")
        maps.append(lost.select("_b", "node_id", _gid=pl.lit(next_id, pl.Int64)))
        new_nodes.append(keys)
        next_id += 1
    dev = body.filter(device)
    if dev.height:
        level, keys = _number(dev, pl.concat(maps, how="vertical"), next_id)
        maps.append(level)
        new_nodes.append(keys)
    mapping = pl.concat(maps, how="vertical")
    tree = (pl.concat([k.select("_gid", "_gp", pl.col("depth").cast(pl.Int32), "name",
                                "category") for k in new_nodes], how="vertical")
            .sort("_gid")
            .select(pl.col("_gid").alias("node_id"), pl.col("_gp").alias("parent_id"),
                    "depth", "name", "category"))
    metrics = pl.concat([m.with_columns(_b=pl.lit(i, pl.Int64))
                         for i, (_, m) in enumerate(parts)], how="vertical")
    group = [c for c in metrics.columns if c not in ("node_id", "_b", *METRIC_COLUMNS)]
    metrics = (metrics.join(mapping, on=["_b", "node_id"], how="left")
               .with_columns(pl.col("_gid").alias("node_id"))
               .select("node_id", *group, *METRIC_COLUMNS)
               .sort(*group, "node_id"))
    if metrics["node_id"].null_count():
        raise AssertionError("tree merge: a metrics row names a node no batch has")
    return tree, metrics


def _number(rows: pl.DataFrame, parents: pl.DataFrame, first: int
            ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Merged ids for ``rows`` (batch ``_b``, ``node_id``, ``parent_id``, ``_label``)
    whose parents are in ``parents`` (``_b``, ``node_id``, ``_gid``): one id per distinct
    (parent's merged id, label), from ``first`` in that order. Returns the rows' mapping
    (``_b``, ``node_id``, ``_gid``) and the new nodes (``_gid``, ``_gp``, ``depth``,
    ``name``, ``category``)."""
    import polars as pl

    rows = rows.join(parents.select("_b", pl.col("node_id").alias("parent_id"),
                                    pl.col("_gid").alias("_gp")),
                     on=["_b", "parent_id"], how="left")
    if rows["_gp"].null_count():
        raise AssertionError("tree merge: a node whose parent no batch numbered")
    keys = (rows.unique(["_gp", "_label"], keep="first")
            .sort("_gp", "_label")
            .with_row_index("_gid", offset=first)
            .with_columns(pl.col("_gid").cast(pl.Int64))
            .select("_gid", "_gp", "_label", "depth", "name", "category"))
    level = rows.join(keys.select("_gp", "_label", "_gid"), on=["_gp", "_label"],
                      how="left").select("_b", "node_id", "_gid")
    return level, keys.drop("_label")

