"""The report's flame graph: an icicle SVG of the calling-context tree (``tree`` analysis,
``view=top_down``, ``by=rank``) of one rank, box width = device time (and a second one for
host time), root on top, children left to right by decreasing time.

Nodes under ``MIN_SHARE`` of the root are folded into one ``other`` box per parent; levels
deeper than ``MAX_DEPTH`` are cut. Layout in fractions of the root (``FlameBox.x``,
``FlameBox.w``), so the SVG is one multiplication away; times in ns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING

from traceatlas.names import display_name
from traceatlas.report import svg

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace
    from traceatlas.report.results import Results

MIN_SHARE = 0.005
"""Nodes below this share of the root are folded into their parent's ``other`` box."""
MAX_DEPTH = 60
"""Rows drawn at most below the root (after merging chains)."""
OTHER = "other"
METRICS = (("device", "device_inclusive_ns"), ("host", "host_inclusive_ns"))
"""(label, tree column) of the graphs drawn, in order."""
COLOURS = {
    "op": "#f4b183", "annotation": "#c5b3e6", "python": "#a9d8a0", "runtime": "#f3dc7b",
    "kernel": "#8fbbe6", "communication": "#6f9fd6", "other": "#d4d9e0",
}
"""Box colour per category group (legend order)."""
GROUPS = {
    "cpu_op": "op", "annotation": "annotation", "gpu_annotation": "annotation",
    "nvtx": "annotation", "step": "annotation", "region": "annotation", "python": "python",
    "runtime": "runtime", "driver": "runtime", "sync": "runtime", "osrt": "runtime",
    "kernel": "kernel", "memcpy": "kernel", "memset": "kernel",
    "comm_kernel": "communication", "mpi": "communication",
}
"""Canonical category -> colour group (anything else: ``other``)."""


@dataclass
class FlameBox:
    """One box: ``x`` and ``w`` are fractions of the root's width; ``parent_id`` is None
    for the root; an ``other`` box has ``node_id`` -1 and sums ``folded`` nodes."""

    node_id: int
    parent_id: int | None
    depth: int
    name: str
    category: str
    value_ns: int
    x: float
    w: float
    folded: int = 0
    chain: list[str] = field(default_factory=list)
    """The tree nodes the box stands for, outermost first (one unless a chain of single
    children with the same time was merged); ``name`` is the first."""


@dataclass
class Flame:
    """One graph: ``metric`` (``device`` or ``host`` time) of one rank."""

    metric: str
    root_ns: int
    boxes: list[FlameBox]
    folded: int = 0
    """Nodes folded into ``other`` boxes."""
    cut_depth: bool = False
    """True when levels below ``MAX_DEPTH`` were left out."""


@dataclass
class FlameSection:
    """The rank shown, why that one, and its graphs."""

    rank: int
    why: str
    graphs: list[Flame] = field(default_factory=list)


def build(results: Results) -> FlameSection:
    """Flame graphs of the rank with the most device time (else the lowest rank);
    ``Unavailable`` when the tree cannot be built or is empty.

    The rank is chosen from the intervals (``busiest_rank``, the same choice as the
    tree's roots) and the tree is built for that rank alone (``by=rank`` on a one-rank
    view: a rank's tree does not depend on the other ranks); node ids are those of the
    one-rank tree. With no rank in the tree, the whole-trace path (``build_whole``)
    gives the reason."""
    from traceatlas.report.results import Results as Shared

    choice = busiest_rank(results.trace)
    if choice is None:
        return build_whole(results)
    rank, n_ranks, device_ns = choice
    one = Shared(results.trace.select(ranks=[rank]), path=results.path)
    table = one.get("tree", {"view": "top_down", "by": "rank"}).table
    return _section(table, rank, _why(rank, n_ranks, device_ns))


def build_whole(results: Results) -> FlameSection:
    """``build`` from the ``tree`` of every rank (the rank chosen from the tree's roots):
    the former path, kept as the oracle of ``build``."""
    import polars as pl

    from traceatlas.report.results import Unavailable

    table = results.get("tree", {"view": "top_down", "by": "rank"}).table
    roots = table.filter(pl.col("depth") == 0).sort("rank")
    if roots.height == 0:
        raise Unavailable("the calling-context tree is empty")
    busiest = roots.sort(["device_inclusive_ns", "rank"], descending=[True, False]).row(
        0, named=True)
    device_ns = int(busiest["device_inclusive_ns"] or 0)
    rank = int(busiest["rank"]) if device_ns > 0 else int(roots["rank"][0])
    return _section(table.filter(pl.col("rank") == rank), rank,
                    _why(rank, roots.height, device_ns))


def busiest_rank(trace: Trace) -> tuple[int, int, int] | None:
    """(rank, ranks in the tree, its device ns) without building the tree: the rank with
    the most device time (ties: the lowest), else the lowest rank; None when no rank has
    a tree.

    The same choice as the roots of ``tree`` (``ops.cct``): a rank's root holds the
    ``dur_ns`` sum of its ``DEVICE_CATEGORIES`` intervals (every one is a leaf of the
    tree), and a rank has a root when it has such an interval or a host-thread interval
    (a track not listed with another kind) of a category other than ``state``. One
    scan of four columns, grouped per (rank, track, category)."""
    import polars as pl

    from traceatlas.ops.cct import DEVICE_CATEGORIES, HOST_KIND

    cat = pl.col("category").cast(pl.String)
    groups = (trace.intervals.select("rank", "track_id", "category", "dur_ns")
              .group_by("rank", "track_id", "category")
              .agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("_ns"))
              .with_columns(cat.alias("category"))
              .collect())
    other_kind = (trace.tracks.filter(pl.col("kind").cast(pl.String) != HOST_KIND)
                  .select("rank", "track_id").collect())
    device = groups.filter(pl.col("category").is_in(DEVICE_CATEGORIES))
    host = (groups.filter((pl.col("category") != "state")
                          & ~pl.col("category").is_in(DEVICE_CATEGORIES))
            .join(other_kind, on=["rank", "track_id"], how="anti"))
    ranks = sorted(set(device["rank"].to_list()) | set(host["rank"].to_list()))
    if not ranks:
        return None
    per_rank = {int(r): int(ns or 0) for r, ns in
                device.group_by("rank").agg(pl.col("_ns").sum()).iter_rows()}
    best = min(ranks, key=lambda r: (-per_rank.get(r, 0), r))
    return best, len(ranks), per_rank.get(best, 0)


def _why(rank: int, n_ranks: int, device_ns: int) -> str:
    """Why ``rank`` is drawn."""
    if device_ns > 0:
        return (f"rank {rank}: the rank with the most device time"
                if n_ranks > 1 else f"rank {rank}")
    return f"rank {rank} (the lowest rank: the trace has no device time)"


def _section(part: pl.DataFrame, rank: int, why: str) -> FlameSection:
    """The graphs of one rank's tree table."""
    from traceatlas.report.results import Unavailable

    section = FlameSection(rank, why)
    for label, column in METRICS:
        graph = layout(part, column, label)
        if graph is not None:
            section.graphs.append(graph)
    if not section.graphs:
        raise Unavailable(f"rank {rank} has no host or device time in its tree")
    return section


def layout(nodes: pl.DataFrame, column: str, label: str, min_share: float = MIN_SHARE,
           max_depth: int = MAX_DEPTH, merge_chains: bool = True) -> Flame | None:
    """Icicle layout of one rank's tree (``node_id``, ``parent_id``, ``depth``, ``name``,
    ``category`` and ``column``, inclusive ns) or None when the root's value is 0.

    Kept: nodes with ``column`` >= ``min_share`` of the root whose parent is kept; the
    others with time sum into one ``other`` box per kept parent. ``merge_chains``: a node
    whose parent (not the root) has it as its only child with time, and the same time,
    shares its parent's box (``FlameBox.chain``: the names, outermost first), so long
    chains of Python frames take one row. Rows deeper than ``max_depth`` are cut."""
    import polars as pl

    frame = nodes.select(pl.col("node_id").cast(pl.Int64), pl.col("parent_id").cast(pl.Int64),
                         "depth", "name", pl.col("category").cast(pl.String),
                         pl.col(column).cast(pl.Int64).alias("v"))
    root_rows = frame.filter(pl.col("depth") == 0)
    if root_rows.height != 1 or not (root_rows["v"][0] or 0) > 0:
        return None
    root = root_rows.row(0, named=True)
    total = int(root["v"])
    timed = frame.filter(pl.col("v") > 0)
    kept = _kept(timed, int(root["node_id"]), min_share * total)
    small = (timed.join(kept.select(pl.col("node_id").alias("parent_id")), on="parent_id",
                        how="semi")
             .join(kept.select("node_id"), on="node_id", how="anti")
             .group_by("parent_id").agg(pl.col("v").sum(), pl.len().alias("n")))
    only = (timed.group_by("parent_id").agg(pl.len().alias("_k"), pl.col("v").max()
                                             .alias("_cv")))
    passing = set((kept.join(only, left_on="node_id", right_on="parent_id")
                   .filter((pl.col("_k") == 1) & (pl.col("_cv") == pl.col("v"))
                           & (pl.col("depth") > 0))["node_id"].to_list())
                  if merge_chains else [])
    others = {int(p): (int(v), int(n)) for p, v, n in small.iter_rows()}
    box_of: dict[int, FlameBox] = {}
    children: dict[int, list[FlameBox]] = {}
    rows = kept.sort("depth", "node_id")
    for node, parent, _, name, cat, v in rows.iter_rows():  # kept nodes: a few thousand
        if parent is not None and parent in passing:
            box = box_of[parent]
            box.chain.append(str(name))
            box.category = str(cat)
            box_of[node] = box
            continue
        up = box_of.get(parent) if parent is not None else None
        box = FlameBox(int(node), None if up is None else up.node_id,
                       0 if up is None else up.depth + 1, str(name), str(cat), int(v),
                       0.0, v / total, chain=[str(name)])
        box_of[node] = box
        if up is not None:
            children.setdefault(up.node_id, []).append(box)
    for node, (v, n) in others.items():
        up = box_of[node]
        children.setdefault(up.node_id, []).append(
            FlameBox(-1, up.node_id, up.depth + 1, OTHER, OTHER, v, 0.0, v / total, n,
                     [OTHER]))
    boxes, cut = [], False
    stack = [box_of[int(root["node_id"])]]
    while stack:  # parents before children; siblings by decreasing time, "other" last
        box = stack.pop()
        if box.depth > max_depth:
            cut = True
            continue
        boxes.append(box)
        kids = sorted(children.get(box.node_id, []),
                      key=lambda b: (b.node_id < 0, -b.value_ns, b.node_id))
        x = box.x
        for kid in kids:
            kid.x = x
            x += kid.w
        stack.extend(reversed([k for k in kids if k.node_id >= 0]))
        boxes.extend(k for k in kids if k.node_id < 0 and k.depth <= max_depth)
    folded = sum(n for _, n in others.values())
    return Flame(label, total, boxes, folded, cut)


def _kept(timed: pl.DataFrame, root: int, floor: float) -> pl.DataFrame:
    """Nodes with ``v`` >= ``floor`` whose ancestors are all kept (level by level)."""
    import polars as pl

    big = timed.filter(pl.col("v") >= floor)
    kept = big.filter(pl.col("node_id") == root)
    level = kept
    while level.height:
        level = big.join(level.select(pl.col("node_id").alias("parent_id")), on="parent_id",
                         how="semi")
        kept = pl.concat([kept, level])
    return kept


# -- rendering -----------------------------------------------------------------------------

ROW_H = 17
CHAR_W = 6.4
"""Approximate width (px) of one character of the box labels (11 px sans-serif)."""
MIN_LABEL_W = 36
"""Boxes narrower than this (px) carry no label (the tooltip has the name)."""


def group(category: str) -> str:
    """Colour group of a canonical category."""
    return GROUPS.get(category, "other")


PY_FRAME_RE = re.compile(r"^(?:.*/)?(?P<file>[^/]*\(\d+\)): (?P<func>.+)$")
"""A Kineto Python frame name: ``path/file.py(line): function``."""
MODULE_PREFIX = "nn.Module: "
ARROW = " \u25b8 "
"""Between the first and the last name of a merged chain."""
TIP_NAMES = 40
"""Names of a merged chain listed in its tooltip at most."""


def short_names(name: str, chars: int) -> list[str]:
    """Ever shorter forms of a name: as displayed (C++ demangled, templates cut), then
    ``file.py(12): func`` for a Python frame / ``X`` for ``nn.Module: X`` / the part
    after the last ``::``, then the function alone."""
    shown = display_name(name, width=max(chars, 200))  # cut below, shorter forms first
    frame = PY_FRAME_RE.match(name)
    if frame:
        return [shown, f"{frame['file']}: {frame['func']}", frame["func"]]
    if name.startswith(MODULE_PREFIX):
        return [shown, name[len(MODULE_PREFIX):]]
    return [shown, shown.rsplit("::", 1)[-1] if " " not in shown else shown]


def label_text(chain: list[str], width_px: float) -> str:
    """The box's names shortened to fit ``width_px`` ("" when nothing readable fits):
    a merged chain as ``first ▸ … ▸ last`` (shorter forms, then ``first ▸ …``), a single
    name as its shortest form that fits, else cut with an ellipsis."""
    chars = int((width_px - 6) / CHAR_W)
    if width_px < MIN_LABEL_W or chars < 3 or not chain:
        return ""
    first = short_names(chain[0], chars)
    if len(chain) > 1:
        last = short_names(chain[-1], chars)
        mid = f"{ARROW}\u2026{ARROW}" if len(chain) > 2 else ARROW
        options = [f"{first[0]}{mid}{last[0]}", f"{first[-1]}{mid}{last[-1]}",
                   f"{first[-1]}{ARROW}\u2026", first[-1]]
    else:
        options = first
    for text in options:
        if len(text) <= chars:
            return text
    return options[-1][:max(1, chars - 1)] + "\u2026"


def tooltip(box: FlameBox, flame: Flame) -> str:
    """Full names (a merged chain one per line), category or folded count, time, share."""
    share = box.value_ns / flame.root_ns if flame.root_ns else 0.0
    if box.node_id < 0:
        names = f"{OTHER}: {box.folded} nodes under {MIN_SHARE:.1%} of the root each"
    else:
        shown = box.chain[:TIP_NAMES] or [box.name]
        more = len(box.chain) - len(shown)
        names = "\n".join(shown) + (f"\n\u2026 {more} more" if more > 0 else "")
        if len(box.chain) > 1:
            names = f"{len(box.chain)} nested calls, each with all of this time:\n{names}"
        names += f"\n({box.category})"
    return f"{names}\n{svg.fmt_ns(box.value_ns)} {flame.metric} time, {share:.1%} of the root"


def graph_svg(flame: Flame, width: int = 1100) -> str:
    """The icicle of ``flame``: one ``<rect>`` per box (``data-node``, ``data-parent``,
    ``data-ns`` for tools and tests), its name in ``<title>``, a label when it fits."""
    top = 24
    depth = max((b.depth for b in flame.boxes), default=0)
    height = top + (depth + 1) * ROW_H + 6
    body = svg._legend(0, 14, [(g, c) for g, c in COLOURS.items()])
    for b in flame.boxes:
        x, w, y = b.x * width, b.w * width, top + b.depth * ROW_H
        tip = tooltip(b, flame)
        colour = COLOURS[group(b.category)] if b.node_id >= 0 else COLOURS["other"]
        parent = "" if b.parent_id is None else f' data-parent="{b.parent_id}"'
        body.append(f'<g><rect x="{x:.2f}" y="{y}" width="{max(w, 0.0):.2f}" '
                    f'height="{ROW_H - 1}" fill="{colour}" data-node="{b.node_id}"'
                    f'{parent} data-depth="{b.depth}" data-ns="{b.value_ns}">'
                    f"<title>{escape(tip)}</title></rect>")
        text = label_text(b.chain or [b.name], w)
        if text:
            body.append(f'<text x="{x + 3:.1f}" y="{y + ROW_H - 5}" class="flbl">'
                        f"{escape(text)}</text>")
        body.append("</g>")
    title = f"flame graph ({flame.metric} time)"
    return (f'<svg class="plot flame" role="img" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}"><title>{escape(title)}</title>'
            f"{''.join(body)}</svg>")


def html(section: FlameSection | None, reason: str) -> str:
    """The inner HTML of the flame-graph card."""
    if section is None:
        return f'<p class="na">not available: {escape(reason)}</p>'
    parts = []
    for g in section.graphs:
        caption = (f"{g.metric} time of {section.why}: {svg.fmt_ns(g.root_ns)} at the root; "
                   f"width = inclusive {g.metric} time; nodes under {MIN_SHARE:.1%} of the "
                   f"root folded into 'other' ({g.folded:,} nodes)"
                   + (f"; levels below {MAX_DEPTH} not drawn" if g.cut_depth else "")
                   + ("; device time is attributed to the call that launched it"
                      if g.metric == "device" else "; host time is summed over threads"))
        parts.append(f'<figure class="flame"><figcaption>{escape(caption)}</figcaption>'
                     f"{graph_svg(g)}</figure>")
    return "".join(parts)
