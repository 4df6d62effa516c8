"""The calling-context tree (CCT) of host activity with device time attributed to it.

Instances are the intervals on host-thread tracks (every category except Paraver
``state``: Python frames, ``nn.Module`` scopes, annotations, NVTX ranges, operators,
runtime calls, MPI calls, OTF2/Paraver regions) and the device activity (``kernel``,
``comm_kernel``, ``memcpy``, ``memset``). A host instance's parent is the innermost
interval on its thread that encloses it (``ops.owned``: on crossing intervals such as
``ProfilerStep#N``, which starts inside one Python frame and ends inside a later one, the
interval containing both); a device instance's parent is
the host call with the same ``(rank, correlation)`` (the runtime/driver launch), so device
activity appears as leaves under the call that launched it. Device activity whose launch is
not in the trace sits under the top-level node ``NO_LAUNCH``.

Across threads (``link_threads``): a top-level interval of an autograd backward thread is
re-parented under its forward context: with Kineto ``fwdbwd`` flows, the top-level
interval enclosing the flow's end goes under the deepest interval starting at the flow's
start (the forward op that recorded the sequence number); without a flow, under the
deepest interval of the rank's main thread (the thread with ``step`` intervals, else the
busiest) enclosing its start (HTA's call graph links backward threads to the main thread
the same way, at the ``## backward ##`` annotation or the step).

Contexts merge by the path of ``(name, category)`` from the root: node ids are path ids
built level by level (integer codes and ``np.unique``, never a Python object per event),
the same for every rank, so per-rank metrics share one node table.

Metrics per node and group (rank, or rank and thread): ``calls`` (instances),
``host_exclusive_ns`` (sum over instances of the time each owns on its thread: every ns
of a thread's busy time belongs to the innermost open interval, the one that started
last, as in the viewer; for nested calls, duration minus the direct children's), so the
root's host time is the union of each thread's intervals summed over threads;
``device_exclusive_ns`` (durations of the device instances of the
node), ``kernels_exclusive`` (kernel/comm_kernel instances); inclusive values are the
node's exclusive value plus its children's inclusive values (so a re-parented backward
subtree counts in its forward context; host time is a sum over threads, i.e. CPU time,
not wall time). Times in ns.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from traceatlas.ops.nesting import IntArray
from traceatlas.ops.owned import with_owned

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

DEVICE_CATEGORIES = ("kernel", "comm_kernel", "memcpy", "memset")
KERNEL_CATEGORIES = ("kernel", "comm_kernel")
LAUNCH_CATEGORIES = ("runtime", "driver")
HOST_KIND = "host_thread"
ROOT = "[root]"
NO_LAUNCH = "[device activity without a launch in the trace]"
BACKWARD_RE = r"^autograd::engine::evaluate_function"
STEP_RE = r"^ProfilerStep\s*#\s*\d+$"
STEP_MERGED = "ProfilerStep#*"
NODE_COLUMNS = ("node_id", "parent_id", "depth", "name", "category")
METRIC_COLUMNS = ("calls", "host_inclusive_ns", "host_exclusive_ns", "device_inclusive_ns",
                  "device_exclusive_ns", "kernels")


@dataclass
class Cct:
    """``nodes``: ``NODE_COLUMNS`` (root: id 0, depth 0, parent null); ``metrics``: one
    row per node and group (``rank`` [, ``track_id``]) that has instances below it, with
    ``METRIC_COLUMNS``; ``notes``: conventions and what could not be linked."""

    nodes: pl.DataFrame
    metrics: pl.DataFrame
    notes: list[str] = field(default_factory=list)


def build_cct(trace: Trace, *, by_thread: bool = False, link_threads: bool = True,
              merge_steps: bool = True) -> Cct:
    """The CCT of ``trace``; metrics per rank (``by_thread``: per rank and host thread,
    the thread of the instance, or of the launching call for device activity)."""
    import polars as pl

    notes: list[str] = []
    host = _host_rows(trace)
    parent = host["parent"].to_numpy().astype(np.int64)
    if link_threads and host.height:
        parent, link_notes = _link_threads(trace, host, parent)
        notes += link_notes
    depth = _depth(parent)
    device = _device_rows(trace, host)
    labels = pl.concat([host.select("name", "category"), device.select("name", "category")])
    codes = _label_codes(labels, merge_steps)
    n_labels = int(codes.max()) + 2 if len(codes) else 2
    host_codes, dev_codes = codes[:host.height], codes[host.height:]
    no_launch_code = n_labels - 1
    builder = _PathIds(n_labels)
    node_of_host = builder.host_levels(parent, depth, host_codes)
    launch = device["launch_row"].to_numpy()
    linked = launch >= 0
    dev_parent = np.zeros(device.height, dtype=np.int64)
    dev_parent[linked] = node_of_host[launch[linked]]
    if (~linked).any():
        dev_parent[~linked] = builder.add(np.zeros(1, np.int64),
                                          np.array([no_launch_code]))[0]
    node_of_device = builder.add(dev_parent, dev_codes)
    nodes = _node_table(builder, labels, codes, no_launch_code, merge_steps)
    dev_track = np.where(linked, host["track_id"].to_numpy()[np.maximum(launch, 0)],
                         device["track_id"].to_numpy())
    instances = pl.concat([
        pl.DataFrame({"node_id": node_of_host, "rank": host["rank"],
                      "track_id": host["track_id"], "host_ns": host["exclusive_ns"],
                      "device_ns": pl.Series(np.zeros(host.height, np.int64)),
                      "kernel": pl.Series(np.zeros(host.height, np.int64))}),
        pl.DataFrame({"node_id": node_of_device, "rank": device["rank"],
                      "track_id": pl.Series(dev_track.astype(np.int32)),
                      "host_ns": pl.Series(np.zeros(device.height, np.int64)),
                      "device_ns": device["dur_ns"],
                      "kernel": device["category"].cast(pl.String).is_in(KERNEL_CATEGORIES)
                      .cast(pl.Int64)}),
    ], how="vertical_relaxed")
    group = ["rank", "track_id"] if by_thread else ["rank"]
    metrics = _metrics(nodes, instances, group)
    unlinked = int((~linked).sum())
    if unlinked:
        notes.append(f"{unlinked} device activities without a launch call in the trace "
                     f"(no correlation, or its call missing) are under {NO_LAUNCH!r}")
    notes.append("host time is summed over threads (CPU time); inclusive = exclusive + "
                 "children's inclusive; device activity is a leaf under its launch call")
    return Cct(nodes, metrics, notes)


def _host_rows(trace: Trace) -> pl.DataFrame:
    """Host-thread intervals (not Paraver states) with ``parent`` (row, -1 top level: the
    innermost enclosing interval) and ``exclusive_ns`` (owned time on the thread,
    ``ops.owned``); ``name`` and ``category`` stay categorical."""
    import polars as pl

    kinds = (trace.tracks.filter(pl.col("kind").cast(pl.String) != HOST_KIND)
             .select("rank", "track_id"))
    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    frame = (trace.intervals
             .join(kinds, on=["rank", "track_id"], how="anti")
             .filter((cat != "state") & ~cat.is_in(DEVICE_CATEGORIES))
             .select("rank", "track_id", "start_ns", "end_ns", "name", "category",
                     "correlation")
             .collect())
    return with_owned(frame)


def _label_codes(labels: pl.DataFrame, merge_steps: bool) -> IntArray:
    """A code per row (0..): one per distinct (name, category); ``ProfilerStep#N`` step
    names share one code when ``merge_steps`` (named ``STEP_MERGED`` in the node table)."""
    import polars as pl

    name = _sorted_codes(labels["name"])
    name[labels["name"].is_null().to_numpy()] = -1
    cat = _sorted_codes(labels["category"])
    if merge_steps:
        steps = np.flatnonzero((labels["category"].cast(pl.String) == "step").to_numpy())
        names = labels["name"].gather(steps).cast(pl.String).fill_null("")
        name[steps[names.str.contains(STEP_RE).to_numpy()]] = -2
    key = (name + 2) * (int(cat.max(initial=0)) + 1) + cat
    return _dense_codes(key)


def _sorted_codes(values: pl.Series) -> IntArray:
    """A code per row from the values in sorted order, so node ids do not depend on the
    order in which a categorical's strings were first seen (run to run)."""
    import polars as pl

    text = values.cast(pl.String)
    levels = text.drop_nulls().unique().sort()
    return text.cast(pl.Enum(levels.to_list())).to_physical().fill_null(0).to_numpy(
    ).astype(np.int64)


def _unique_inverse(key: IntArray) -> tuple[IntArray, IntArray]:
    """``np.unique(key, return_inverse=True)``; by a presence table over the key range
    when it is small, else by ``np.unique``'s sort."""
    low = int(key.min())
    span = int(key.max()) - low + 1
    if span > 4 * len(key) + 1_000_000:
        uniq, inverse = np.unique(key, return_inverse=True)
        return uniq, inverse.ravel()
    present = np.zeros(span, dtype=bool)
    present[key - low] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present) + low, rank[key - low]


def _dense_codes(key: IntArray) -> IntArray:
    """Dense rank of ``key`` from 0 (equal keys, equal codes; ordered as the keys):
    a presence table over the key range when it is small (categorical codes), else a sort."""
    import polars as pl

    if len(key) == 0:
        return np.zeros(0, np.int64)
    low = int(key.min())
    span = int(key.max()) - low + 1
    if span <= 4 * len(key) + 1_000_000:
        present = np.zeros(span, dtype=bool)
        present[key - low] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        out: IntArray = rank[key - low]
        return out
    codes: IntArray = pl.Series(key).rank("dense").cast(pl.Int64).to_numpy() - 1
    return codes


def _device_rows(trace: Trace, host: pl.DataFrame) -> pl.DataFrame:
    """Device activity with ``launch_row``: the host row of its launch call (-1: none)."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    device = (trace.intervals.filter(cat.is_in(DEVICE_CATEGORIES))
              .select("rank", "track_id", "correlation", "dur_ns", "name", "category")
              .collect())
    launches = (host.with_row_index("launch_row")
                .filter(pl.col("category").is_in(LAUNCH_CATEGORIES)
                        & pl.col("correlation").is_not_null())
                .select("rank", "correlation", pl.col("launch_row").cast(pl.Int64))
                .unique(["rank", "correlation"], keep="first"))
    return (device.join(launches, on=["rank", "correlation"], how="left",
                        maintain_order="left")
            .with_columns(pl.col("launch_row").fill_null(-1)))


def _depth(parent: IntArray) -> IntArray:
    """Ancestors per row (0: top level) by pointer jumping (list ranking): O(n log depth).

    ``parent`` must be a forest (no cycles)."""
    dist = (parent >= 0).astype(np.int64)
    anc = parent.copy()
    while True:
        has = np.flatnonzero(anc >= 0)
        if len(has) == 0:
            return dist
        up = anc[has]
        dist[has] = dist[has] + dist[up]
        anc[has] = anc[up]


def _top(parent: IntArray) -> IntArray:
    """Each row's top-level ancestor (itself at the top level), by pointer jumping."""
    top = np.where(parent >= 0, parent, np.arange(len(parent)))
    while True:
        nxt = top[top]
        if np.array_equal(nxt, top):
            return top
        top = nxt


class _PathIds:
    """Node ids of paths: a child id per distinct (parent id, label code); root id 0."""

    def __init__(self, n_labels: int) -> None:
        self.n_labels = n_labels
        self.parent: list[IntArray] = [np.array([-1], np.int64)]
        self.code: list[IntArray] = [np.array([-1], np.int64)]
        self.depth: list[IntArray] = [np.array([0], np.int64)]
        self.size = 1
        self.known: dict[int, int] = {}

    def add(self, parent_node: IntArray, code: IntArray) -> IntArray:
        """Node id per row for children ``code`` of ``parent_node`` (new ids as needed)."""
        if len(code) == 0:
            return np.zeros(0, np.int64)
        key = parent_node * self.n_labels + code
        uniq, inverse = _unique_inverse(key)
        ids = np.empty(len(uniq), np.int64)
        new: list[int] = []
        for i, k in enumerate(uniq.tolist()):  # one step per distinct path, not per event
            found = self.known.get(k)
            if found is None:
                found = self.size + len(new)
                new.append(i)
                self.known[k] = found
            ids[i] = found
        if new:
            fresh = uniq[np.array(new)]
            p = fresh // self.n_labels
            self.parent.append(p)
            self.code.append(fresh % self.n_labels)
            depth_all = np.concatenate(self.depth)
            self.depth.append(depth_all[p] + 1)
            self.size += len(new)
        out: IntArray = ids[inverse.ravel()]
        return out

    def host_levels(self, parent: IntArray, depth: IntArray, codes: IntArray) -> IntArray:
        """Node id per host row, level by level (a row's parent row is one level up)."""
        node = np.zeros(len(parent), np.int64)
        order = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=-1)) + 2))
        for lo, hi in itertools.pairwise(bounds.tolist()):
            rows = order[lo:hi]
            up = parent[rows]
            pnode = np.where(up >= 0, node[np.maximum(up, 0)], 0)
            node[rows] = self.add(pnode, codes[rows])
        return node


def _node_table(builder: _PathIds, labels: pl.DataFrame, codes: IntArray,
                no_launch_code: int, merge_steps: bool) -> pl.DataFrame:
    """``NODE_COLUMNS`` from the path ids; names from the label codes."""
    import polars as pl

    parent = np.concatenate(builder.parent)
    code = np.concatenate(builder.code)
    depth = np.concatenate(builder.depth)
    first = np.full(builder.n_labels, -1, np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]
    present = np.flatnonzero(first >= 0)
    rows = labels[first[present]]
    name_list = rows["name"].cast(pl.String).fill_null("").to_list()
    cat_list = rows["category"].cast(pl.String).to_list()
    step = [c == "step" and re.search(STEP_RE, n) is not None
            for n, c in zip(name_list, cat_list, strict=True)]
    if merge_steps:  # one row per distinct label, not per event
        name_list = [STEP_MERGED if s else n for n, s in zip(name_list, step, strict=True)]
    name_of = dict(zip(present.tolist(), name_list, strict=True))
    cat_of = dict(zip(present.tolist(), cat_list, strict=True))
    name_of[no_launch_code], cat_of[no_launch_code] = NO_LAUNCH, "device"
    name_of[-1], cat_of[-1] = ROOT, "root"
    code_frame = pl.DataFrame({"code": list(name_of), "name": list(name_of.values()),
                               "category": [cat_of[c] for c in name_of]},
                              schema={"code": pl.Int64, "name": pl.String,
                                      "category": pl.String})
    nodes = pl.DataFrame({"node_id": np.arange(builder.size, dtype=np.int64),
                          "parent_id": parent, "depth": depth.astype(np.int32),
                          "code": code})
    return (nodes.join(code_frame, on="code", how="left", maintain_order="left")
            .with_columns(pl.when(pl.col("parent_id") >= 0).then(pl.col("parent_id"))
                          .alias("parent_id"))
            .select(NODE_COLUMNS))


def ancestors(nodes: pl.DataFrame) -> pl.DataFrame:
    """(``node_id``, ``ancestor_id``) for every node and each node on its path from the
    root, itself included."""
    import polars as pl

    parent = nodes.sort("node_id")["parent_id"].fill_null(-1).to_numpy().astype(np.int64)
    ids = np.arange(len(parent), dtype=np.int64)
    pairs_node, pairs_anc = [ids], [ids]
    cur, who = parent.copy(), ids
    while len(who):
        keep = cur >= 0
        who, cur = who[keep], cur[keep]
        pairs_node.append(who)
        pairs_anc.append(cur)
        cur = parent[cur]
    return pl.DataFrame({"node_id": np.concatenate(pairs_node),
                         "ancestor_id": np.concatenate(pairs_anc)})


def _metrics(nodes: pl.DataFrame, instances: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Exclusive sums per (node, group), inclusive over each node's descendants."""
    import polars as pl

    excl = instances.group_by("node_id", *group).agg(
        calls=pl.len().cast(pl.Int64), host_exclusive_ns=pl.col("host_ns").sum(),
        device_exclusive_ns=pl.col("device_ns").sum(), _k=pl.col("kernel").sum())
    incl = (excl.join(ancestors(nodes), on="node_id")
            .group_by(pl.col("ancestor_id").alias("node_id"), *group)
            .agg(host_inclusive_ns=pl.col("host_exclusive_ns").sum(),
                 device_inclusive_ns=pl.col("device_exclusive_ns").sum(),
                 kernels=pl.col("_k").sum()))
    return (incl.join(excl, on=["node_id", *group], how="left")
            .with_columns(pl.col("calls", "host_exclusive_ns", "device_exclusive_ns")
                          .fill_null(0).cast(pl.Int64),
                          pl.col("host_inclusive_ns", "device_inclusive_ns", "kernels")
                          .cast(pl.Int64))
            .select("node_id", *group, *METRIC_COLUMNS)
            .sort(*group, "node_id"))


def _link_threads(trace: Trace, host: pl.DataFrame,
                  parent: IntArray) -> tuple[IntArray, list[str]]:
    """``parent`` with backward-thread top-level rows re-parented (see the module doc)."""
    import polars as pl

    parent = parent.copy()
    depth = _depth(parent)
    top = _top(parent)
    rows = host.select("rank", "track_id", "start_ns", "end_ns", "name").with_columns(
        _row=pl.Series(np.arange(host.height, dtype=np.int64)),
        _depth=pl.Series(depth))
    flows = (trace.flows.filter(pl.col("name").cast(pl.String) == "fwdbwd")
             .drop_nulls(["src_track_id", "src_ts_ns", "dst_track_id", "dst_ts_ns"])
             .select("rank", "src_track_id", "src_ts_ns", "dst_track_id", "dst_ts_ns")
             .collect())
    ends = pl.concat([flows.select("rank", pl.col("src_track_id").alias("track_id"),
                                   pl.col("src_ts_ns").alias("start_ns")),
                      flows.select("rank", pl.col("dst_track_id").alias("track_id"),
                                   pl.col("dst_ts_ns").alias("start_ns"))])
    at = (rows.select("rank", "track_id", "start_ns", "_row", "_depth")
          .join(ends, on=["rank", "track_id", "start_ns"], how="semi"))
    src = (at.sort("_depth", descending=True)
           .unique(["rank", "track_id", "start_ns"], keep="first")
           .rename({"track_id": "src_track_id", "start_ns": "src_ts_ns", "_row": "_src"})
           .drop("_depth"))
    dst = (at.sort("_depth").unique(["rank", "track_id", "start_ns"], keep="first")
           .rename({"track_id": "dst_track_id", "start_ns": "dst_ts_ns", "_row": "_dst"})
           .drop("_depth"))
    pairs = (flows.join(src, on=["rank", "src_track_id", "src_ts_ns"], how="left")
             .join(dst, on=["rank", "dst_track_id", "dst_ts_ns"], how="left"))
    unresolved = pairs.filter(pl.col("_src").is_null() | pl.col("_dst").is_null()).height
    pairs = pairs.drop_nulls(["_src", "_dst"]).filter(
        pl.col("src_track_id") != pl.col("dst_track_id"))
    bwd_tracks = pairs.select("rank", pl.col("dst_track_id").alias("track_id")).unique()
    pairs = pairs.join(bwd_tracks.rename({"track_id": "src_track_id"}),
                       on=["rank", "src_track_id"], how="anti")
    pairs = (pairs.with_columns(_top=pl.Series(top[pairs["_dst"].to_numpy().astype(np.int64)],
                                               dtype=pl.Int64))
             .sort("src_ts_ns").unique("_top", keep="first", maintain_order=True))
    tops = pairs["_top"].to_numpy().astype(np.int64)
    parent[tops] = pairs["_src"].to_numpy().astype(np.int64)
    by_flow = len(tops)
    by_main, notes = _link_to_main(trace, rows, parent, bwd_tracks)
    if flows.height:
        notes.insert(0, f"fwdbwd flows: {by_flow} backward top-level calls placed under "
                     f"their forward op ({unresolved} flows with an end not at an interval "
                     "start left out)")
    if by_main:
        notes.append(f"{by_main} backward-thread top-level calls without a fwdbwd flow "
                     "placed under the main thread's innermost interval enclosing them")
    return parent, notes


def _link_to_main(trace: Trace, rows: pl.DataFrame, parent: IntArray,
                  flow_tracks: pl.DataFrame) -> tuple[int, list[str]]:
    """Re-parent (in place) the still top-level rows of backward threads under the main
    thread's deepest enclosing row. Returns how many and notes."""
    import polars as pl

    top_level = rows.filter(pl.Series(parent < 0))
    named = (top_level.filter(pl.col("name").cast(pl.String).str.contains(BACKWARD_RE))
             .select("rank", "track_id").unique())
    bwd = pl.concat([named, flow_tracks]).unique()
    if bwd.height == 0:
        return 0, []
    steps = (trace.intervals.filter(pl.col("category") == "step")
             .select("rank", "track_id").unique().with_columns(_step=pl.lit(1)).collect())
    main = (top_level.join(bwd, on=["rank", "track_id"], how="anti")
            .group_by("rank", "track_id")
            .agg(_busy=(pl.col("end_ns") - pl.col("start_ns")).sum())
            .join(steps, on=["rank", "track_id"], how="left")
            .sort(pl.col("_step").fill_null(0), "_busy", descending=True)
            .unique("rank", keep="first").select("rank", "track_id"))
    orphans = (top_level.join(bwd, on=["rank", "track_id"], how="semi")
               .select("rank", "start_ns", "_row").sort("start_ns"))
    cands = (rows.join(main, on=["rank", "track_id"], how="semi")
             .select("rank", pl.col("start_ns").alias("_cs"), pl.col("_row").alias("_c"),
                     "_depth").sort("_cs", "_depth"))
    if orphans.height == 0 or cands.height == 0:
        return 0, []
    found = orphans.join_asof(cands, left_on="start_ns", right_on="_cs", by="rank",
                              strategy="backward", check_sortedness=False
                              ).drop_nulls("_c")
    child = found["_row"].to_numpy().astype(np.int64)
    cand = found["_c"].to_numpy().astype(np.int64)
    t = found["start_ns"].to_numpy()
    end = rows["end_ns"].to_numpy()
    while len(cand):  # walk up until the candidate encloses the start
        bad = (cand >= 0) & (end[np.maximum(cand, 0)] < t)
        if not bad.any():
            break
        cand[bad] = parent[cand[bad]]
    ok = cand >= 0
    parent[child[ok]] = cand[ok]
    return int(ok.sum()), []
