"""FROZEN REFERENCE (test oracle): the summary builder as it was before the single-scan
rewrite of ``traceatlas.compare.summary_build`` (commit e7e6de5), kept unchanged so that
tests can assert the fast builder writes identical summaries. Not used by the package.

Every value is computed with Polars over the store: iteration of each interval, then one
interval union per (kind, key, rank, iteration) (``traceatlas.ops.unions``), scattered
into ``[rank][iteration]`` matrices with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import traceatlas
from traceatlas.compare.normalize import normalize
from traceatlas.compare.summary import FORMAT, KINDS, MAX_NAMES, VERSION, finite_or_none
from traceatlas.errors import MissingDataError
from traceatlas.model.schema import DEVICE_CATEGORIES

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

I64 = npt.NDArray[np.int64]

KIND_CATEGORIES: dict[str, tuple[str, ...]] = {
    "annotation": ("annotation", "nvtx", "region"),
    "op": ("cpu_op",),
    "kernel": ("kernel", "comm_kernel", "memcpy", "memset"),
}
"""Canonical categories of each named kind (``category`` takes every one but ``step``;
``op_device`` / ``annotation_device`` take the ``kernel`` rows by launch context)."""


def build(trace: Trace, *, min_share: float, top: int) -> dict[str, Any]:
    """The summary of ``trace`` as JSON-ready data (see ``traceatlas.compare.summary``)."""
    ranks = list(trace.ranks)
    notes: list[str] = []
    source, windows, rows = _iterations(trace, notes)
    labels = sorted(int(x) for x in windows["it"].unique().to_list())
    r_index = {r: i for i, r in enumerate(ranks)}
    i_index = {label: i for i, label in enumerate(labels)}
    present = np.zeros((len(ranks), len(labels)), dtype=bool)
    step_ns = np.full((len(ranks), len(labels)), -1, dtype=np.int64)
    for rank, it, dur in windows.select("rank", "it", "dur_ns").iter_rows():
        present[r_index[int(rank)], i_index[int(it)]] = True
        step_ns[r_index[int(rank)], i_index[int(it)]] = int(dur)
    if len(labels) and not present.all():
        missing = [r for r in ranks if not present[r_index[r]].all()]
        notes.append(f"ranks without every iteration (-1 where absent): {_ranks_text(missing)}")
    total = int(step_ns[step_ns > 0].sum())
    shape = (r_index, i_index, present)
    entities: dict[str, list[dict[str, Any]]] = {}
    other: dict[str, dict[str, Any]] = {}
    step_key = {"steps": "ProfilerStep#", "phases": "phase", "run": "run"}[source]
    step_count = np.where(present, 1, -1)
    entities["step"] = [{"key": step_key, "names": [step_key], "n_names": 1,
                         "ns": step_ns.tolist(), "count": step_count.tolist()}]
    table = rows.collect()  # read once; every kind picks from it
    device = _device_context(trace, table)
    note = _attribution_note(device)
    if note:
        notes.append(note)
    for kind in KINDS[1:]:
        items = _kind(_picked(table, device, kind), kind, shape)
        kept, folded = _fold(items, total, min_share, top)
        entities[kind] = kept
        if folded:
            other[kind] = _other(folded, present)
    who = _launched_by(device, entities["kernel"])
    for item in entities["kernel"]:
        if item["key"] in who:
            item["launched_by"] = who[item["key"]]
    return {
        "format": FORMAT,
        "version": VERSION,
        "traceatlas": traceatlas.__version__,
        "sources": _sources(trace),
        "source_format": trace.source_format,
        "ranks": ranks,
        "rank_info": _rank_info(trace, ranks),
        "iterations": {"source": source, "labels": labels},
        "total_ns": total,
        "entities": entities,
        "other": other,
        "fold_rule": (f"an entity below {min_share:g} of total_ns and not among the {top} "
                      "largest of its kind is folded into other (summed)"),
        "efficiency": _efficiency(trace, notes),
        "notes": notes,
    }


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks[:20])) + (" ..." if len(ranks) > 20 else "")


def _iterations(trace: Trace, notes: list[str]) -> tuple[str, pl.DataFrame, pl.LazyFrame]:
    """(source, windows with rank/it/dur_ns, intervals with rank/start_ns/end_ns/
    correlation/name/category/it, rows outside every iteration dropped)."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    base = trace.intervals.select(
        "rank", "start_ns", "end_ns", "correlation", "step",
        pl.col("name").cast(pl.String), cat.alias("category"))
    has_steps = trace.intervals.filter(cat == "step").select(pl.len()).collect().item() > 0
    if has_steps:
        # the steps analysis' windows without its breakdown (most of its cost)
        from traceatlas.analysis.steps import _markers, _windows

        windows = (_windows(trace, _markers(trace, "").collect().lazy())
                   .select("rank", pl.col("step").cast(pl.Int64).alias("it"),
                           (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
                   .sort("rank", "it").collect())
        rows = base.filter(pl.col("step") >= 0).with_columns(pl.col("step").alias("it"))
        return "steps", windows, rows.drop("step")
    phases = _phases(trace)
    if phases is not None and phases.height:
        notes.append("no step markers: iterations are the phases analysis' repetitions")
        windows = phases.select("rank", pl.col("phase").alias("it"), "start_ns", "end_ns",
                                "dur_ns")
        return "phases", windows.select("rank", "it", "dur_ns"), _by_windows(base, windows)
    notes.append("no step markers and no repeating phase: the whole run is one sample")
    spans = (base.group_by("rank").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
             .collect())
    windows = spans.select("rank", pl.lit(0, pl.Int64).alias("it"),
                           (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    return "run", windows, base.with_columns(pl.lit(0, pl.Int64).alias("it")).drop("step")


def _phases(trace: Trace) -> pl.DataFrame | None:
    from traceatlas.analysis.registry import run

    try:
        return run("phases", trace).table
    except MissingDataError:
        return None


def _by_windows(base: pl.LazyFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """Intervals with the iteration whose [start, end) holds their time: a device
    interval's time is its launch's start (same rank and correlation), else its own."""
    import polars as pl

    device = pl.col("category").is_in(tuple(DEVICE_CATEGORIES))
    launches = (base.filter(pl.col("category").is_in(("runtime", "driver"))
                            & pl.col("correlation").is_not_null())
                .group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("ls")))
    timed = (base.join(launches, on=["rank", "correlation"], how="left")
             .with_columns(pl.when(device).then(pl.coalesce("ls", "start_ns"))
                           .otherwise(pl.col("start_ns")).alias("t")))
    wins = windows.lazy().select(pl.col("rank").cast(pl.Int32), "it",
                                 pl.col("start_ns").alias("ws"),
                                 pl.col("end_ns").alias("we")).sort("ws")
    return (timed.sort("t")
            .join_asof(wins, left_on="t", right_on="ws", by="rank", strategy="backward",
                       check_sortedness=False)
            .filter(pl.col("ws").is_not_null() & (pl.col("t") < pl.col("we")))
            .select("rank", "start_ns", "end_ns", "correlation", "name", "category", "it"))


def _keys(names: pl.Series) -> pl.DataFrame:
    """``name`` -> ``key`` (``normalize``) for the distinct non-null names given."""
    import polars as pl

    distinct = [n for n in names.unique().to_list() if n is not None]
    return pl.DataFrame({"name": distinct, "key": [normalize(n) for n in distinct]},
                        schema={"name": pl.String, "key": pl.String})


def _device_context(trace: Trace, rows: pl.DataFrame) -> pl.DataFrame:
    """Device rows (rank, it, start_ns, end_ns, name) with their launch context
    (``compare.launchers``): ``op`` and ``annotations``, plus a row id ``_d``."""
    import polars as pl

    device = (rows.filter(pl.col("category").is_in(KIND_CATEGORIES["kernel"]))
              .select("rank", "it", "start_ns", "end_ns", "name", "correlation")
              .with_row_index("_d"))
    ctx = launch_context(trace)
    return (device.with_columns(pl.col("rank").cast(pl.Int32),
                                pl.col("correlation").cast(pl.Int64))
            .join(ctx, on=["rank", "correlation"], how="left")
            .with_columns(pl.col("annotations").fill_null(pl.lit([], pl.List(pl.String))))
            .drop("correlation"))


def _picked(rows: pl.DataFrame, device: pl.DataFrame, kind: str) -> pl.DataFrame:
    """The intervals of ``kind`` as rank, it, start_ns, end_ns, name (the raw name its
    key comes from). Device kinds: the device rows under their launching op's name, or
    once under each enclosing annotation's name (a name repeated in nested annotations
    counted once)."""
    import polars as pl

    cols = ("rank", "it", "start_ns", "end_ns")
    if kind == "category":
        return rows.filter(pl.col("category") != "step").select(
            *cols, pl.col("category").alias("name"))
    if kind == "op_device":
        return device.filter(pl.col("op").is_not_null()).select(
            *cols, pl.col("op").alias("name"))
    if kind == "annotation_device":
        return (device.select("_d", *cols, pl.col("annotations").alias("name"))
                .explode("name").drop_nulls("name").unique(["_d", "name"]).drop("_d"))
    return rows.filter(pl.col("category").is_in(KIND_CATEGORIES[kind])).select(*cols, "name")


def _kind(picked: pl.DataFrame, kind: str, shape: tuple[dict[int, int], dict[int, int],
          npt.NDArray[np.bool_]]) -> list[dict[str, Any]]:
    """Entities of ``kind`` from ``_picked``: key, raw names, ns/count matrices (-1 where
    absent)."""
    import polars as pl

    from traceatlas.ops.unions import union_ns

    r_index, i_index, present = shape
    if kind == "category":
        picked = picked.with_columns(pl.col("name").alias("key"))
    else:
        picked = picked.join(_keys(picked["name"]), on="name", how="left")
    picked = picked.with_columns(pl.col("it").cast(pl.Int64))
    lazy = picked.lazy()
    unions = union_ns(lazy.select("key", "rank", "it", "start_ns", "end_ns"),
                      ["key", "rank", "it"], "ns")
    counts = lazy.group_by("key", "rank", "it").agg(pl.len().alias("n"))
    table = unions.join(counts, on=["key", "rank", "it"], how="inner").collect()
    if table.height == 0:
        return []
    raw = (lazy.group_by("key", "name").agg(pl.len().alias("n"))
           .sort(["key", "n", "name"], descending=[False, True, False])
           .group_by("key", maintain_order=True)
           .agg(pl.col("name").head(MAX_NAMES).alias("names"),
                pl.len().alias("n_names")).collect())
    keys_list = sorted(table["key"].unique().to_list())
    k_index = {k: i for i, k in enumerate(keys_list)}
    n_ranks, n_its = present.shape
    ns = np.zeros((len(keys_list), n_ranks, n_its), dtype=np.int64)
    count = np.zeros_like(ns)
    e = _index(table["key"], k_index)
    r = _index(table["rank"], r_index)
    i = _index(table["it"], i_index)
    ok = i >= 0  # an interval of a step the steps analysis has no window for: dropped
    ns[e[ok], r[ok], i[ok]] = table["ns"].to_numpy()[ok]
    count[e[ok], r[ok], i[ok]] = table["n"].to_numpy()[ok]
    ns[:, ~present] = -1
    count[:, ~present] = -1
    names_of = {k: (list(n), int(c)) for k, n, c in raw.iter_rows()}
    items = []
    for key in keys_list:
        listed, n_names = names_of.get(key, ([], 0)) if kind != "category" else ([], 0)
        if listed == [key]:
            listed = []  # the raw name is the key itself
        idx = k_index[key]
        items.append({"key": key, "names": listed, "n_names": n_names,
                      "ns": ns[idx].tolist(), "count": count[idx].tolist(),
                      "_total": int(ns[idx][ns[idx] > 0].sum())})
    return items


def _index(values: pl.Series, index: dict[Any, int]) -> I64:
    """Positions of ``values`` in ``index`` (-1 for a value not in it), by one join on the
    distinct values."""
    import polars as pl

    lookup = pl.DataFrame({"v": list(index), "i": list(index.values())},
                          schema={"v": values.dtype, "i": pl.Int64})
    joined = pl.DataFrame({"v": values}).join(lookup, on="v", how="left", maintain_order="left")
    return joined["i"].fill_null(-1).to_numpy().astype(np.int64)


def _launched_by(device: pl.DataFrame, kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kept kernel key: ``[op, op_share, annotation, annotation_share]``, the op key
    and the innermost annotation key that launched the largest part of its summed device
    time, with that part (0..1); None where none."""
    import polars as pl

    if not kernels or device.height == 0:
        return {}
    keyed = (device.join(_keys(device["name"]), on="name", how="left")
             .filter(pl.col("key").is_in([k["key"] for k in kernels]))
             .select("key", (pl.col("end_ns") - pl.col("start_ns")).alias("dur"),
                     pl.col("op").alias("op_name"),
                     pl.col("annotations").list.last().alias("ann_name")))
    if keyed.height == 0:
        return {}
    totals = keyed.group_by("key").agg(pl.col("dur").sum().alias("total"))
    out: dict[str, list[Any]] = {k: [None, 0.0, None, 0.0] for k in totals["key"].to_list()}
    for col, slot in (("op_name", 0), ("ann_name", 2)):
        named = keyed.filter(pl.col(col).is_not_null())
        if named.height == 0:
            continue
        names = _keys(named[col]).rename({"name": col, "key": "launcher"})
        best = (named.join(names, on=col, how="left")
                .group_by("key", "launcher").agg(pl.col("dur").sum().alias("d"))
                .sort(["key", "d", "launcher"], descending=[False, True, False])
                .group_by("key", maintain_order=True).first()
                .join(totals, on="key"))
        for key, launcher, d, total in best.select("key", "launcher", "d", "total").iter_rows():
            out[key][slot] = launcher
            out[key][slot + 1] = round(d / total, 3) if total else 0.0
    return out


def _attribution_note(device: pl.DataFrame) -> str | None:
    """How much of the device activities' summed time has a launching op / annotation."""
    import polars as pl

    if device.height == 0:
        return None
    dur = pl.col("end_ns") - pl.col("start_ns")
    total, with_op, with_ann = device.select(
        dur.sum().alias("t"), dur.filter(pl.col("op").is_not_null()).sum().alias("o"),
        dur.filter(pl.col("annotations").list.len() > 0).sum().alias("a")).row(0)
    if not total:
        return None
    return (f"device time launched inside an op: {with_op / total:.1%}, inside an "
            f"annotation: {with_ann / total:.1%} (summed durations; the rest is "
            "unattributed in op_device / annotation_device)")


def _total(item: dict[str, Any]) -> int:
    return int(item["_total"])


def _fold(items: list[dict[str, Any]], total: int, min_share: float,
          top: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept, folded): folded = below ``min_share`` of ``total`` and not in the top."""
    order = sorted(items, key=lambda it: (-_total(it), it["key"]))
    kept, folded = [], []
    for rank, item in enumerate(order):
        if rank < top or _total(item) >= min_share * total:
            kept.append(item)
        else:
            folded.append(item)
        del item["_total"]
    return kept, folded


def _other(folded: list[dict[str, Any]], present: npt.NDArray[np.bool_]) -> dict[str, Any]:
    ns = sum(np.maximum(np.asarray(f["ns"], dtype=np.int64), 0) for f in folded)
    count = sum(np.maximum(np.asarray(f["count"], dtype=np.int64), 0) for f in folded)
    ns_m = np.where(present, np.asarray(ns), -1)
    count_m = np.where(present, np.asarray(count), -1)
    return {"keys": sorted(f["key"] for f in folded), "ns": ns_m.tolist(),
            "count": count_m.tolist()}


def _sources(trace: Trace) -> list[dict[str, Any]]:
    """Each source file once (a file holding several ranks is listed once)."""
    seen: dict[tuple[str, str | None], dict[str, Any]] = {}
    for src in trace.manifest.get("sources", []):
        key = (str(src.get("path")), src.get("member"))
        if key not in seen:
            seen[key] = {"path": key[0], "member": key[1],
                         "format": str(src.get("format", trace.source_format)),
                         "bytes": int(src.get("size") or 0),
                         "fingerprint": src.get("sampled_blake2b")}
    return list(seen.values())


def _rank_info(trace: Trace, ranks: list[int]) -> list[dict[str, Any]]:
    import polars as pl

    tracks = trace.tracks.select(
        "rank", pl.col("kind").cast(pl.String), "host", "pid", "device").collect()
    info = []
    for rank in ranks:
        mine = tracks.filter(pl.col("rank") == rank)
        hosts = sorted({h for h in mine["host"].to_list() if h})
        pids = sorted({int(p) for p in mine.filter(pl.col("kind") == "host_thread")["pid"]
                       .to_list() if p is not None})
        devices = sorted({int(d) for d in mine["device"].to_list() if d is not None and d >= 0})
        info.append({"rank": rank, "hosts": hosts, "pids": pids, "devices": devices})
    return info


def _efficiency(trace: Trace, notes: list[str]) -> list[list[Any]] | None:
    from traceatlas.analysis.registry import run

    try:
        table = run("efficiency", trace).table
    except MissingDataError as exc:
        notes.append(f"efficiency model not computed: {exc.problem}")
        return None
    return [[str(scope), str(side), str(metric), finite_or_none(value),
             None if parent is None else str(parent), int(level),
             None if label is None else str(label)]
            for scope, side, metric, value, parent, level, label in table.select(
                "scope", "side", "metric", "value", "parent", "level", "label").iter_rows()]


LAUNCH_CATEGORIES = ("runtime", "driver")
ANNOTATION_CATEGORIES = ("annotation", "nvtx", "region")


def launch_context(trace: Trace) -> pl.DataFrame:
    """Per launch call (``rank``, ``correlation``): ``op`` (innermost enclosing
    ``cpu_op`` name, null when none) and ``annotations`` (enclosing annotation names,
    outermost first; empty when none)."""
    import polars as pl

    from traceatlas.analysis.syncs import _ancestors

    cat = pl.col("category").cast(pl.String)
    calls = (trace.intervals
             .filter(cat.is_in(LAUNCH_CATEGORIES) & pl.col("correlation").is_not_null())
             .select("rank", "track_id", "start_ns", "end_ns", "depth", "correlation")
             .sort("rank", "correlation", "start_ns")
             .unique(["rank", "correlation"], keep="first", maintain_order=True)
             .collect().with_row_index("_id"))
    if calls.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "correlation": pl.Int64, "op": pl.String,
                                    "annotations": pl.List(pl.String)})
    anc = _ancestors(trace, calls)  # sorted by (_id, depth): outermost first
    acat = pl.col("acat")
    ctx = anc.group_by("_id").agg(
        pl.col("aname").filter(acat == "cpu_op").last().alias("op"),
        pl.col("aname").filter(acat.is_in(ANNOTATION_CATEGORIES)).alias("annotations"))
    return (calls.select("_id", "rank", "correlation")
            .join(ctx, on="_id", how="left")
            .select(pl.col("rank").cast(pl.Int32), pl.col("correlation").cast(pl.Int64),
                    "op", pl.col("annotations").fill_null(pl.lit([], pl.List(pl.String)))))
