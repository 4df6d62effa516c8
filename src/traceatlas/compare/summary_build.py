"""Building the baseline summary of a trace (the format: ``traceatlas.compare.summary``).

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
from traceatlas.compare.summary import FORMAT, MAX_NAMES, VERSION, finite_or_none
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
"""Canonical categories of each named kind (``category`` takes every one but ``step``)."""


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
    for kind in ("annotation", "op", "kernel", "category"):
        items = _kind(rows, kind, shape)
        kept, folded = _fold(items, total, min_share, top)
        entities[kind] = kept
        if folded:
            other[kind] = _other(folded, present)
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
    """(source, windows with rank/it/dur_ns, intervals with rank/start_ns/end_ns/name/
    category/it, rows outside every iteration dropped)."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    base = trace.intervals.select(
        "rank", "start_ns", "end_ns", "correlation", "step",
        pl.col("name").cast(pl.String), cat.alias("category"))
    has_steps = trace.intervals.filter(cat == "step").select(pl.len()).collect().item() > 0
    if has_steps:
        from traceatlas.analysis.registry import run

        windows = run("steps", trace).table.select(
            "rank", pl.col("step").alias("it"), "dur_ns")
        rows = base.filter(pl.col("step") >= 0).with_columns(pl.col("step").alias("it"))
        return "steps", windows, rows.drop("step", "correlation")
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
    return "run", windows, base.with_columns(pl.lit(0, pl.Int64).alias("it")).drop(
        "step", "correlation")


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
            .select("rank", "start_ns", "end_ns", "name", "category", "it"))


def _kind(rows: pl.LazyFrame, kind: str, shape: tuple[dict[int, int], dict[int, int],
          npt.NDArray[np.bool_]]) -> list[dict[str, Any]]:
    """Entities of ``kind``: key, raw names, ns/count matrices (-1 where absent)."""
    import polars as pl

    from traceatlas.ops.unions import union_ns

    r_index, i_index, present = shape
    if kind == "category":
        picked = rows.filter(pl.col("category") != "step").with_columns(
            pl.col("category").alias("key"))
    else:
        picked = rows.filter(pl.col("category").is_in(KIND_CATEGORIES[kind]))
        names = picked.select(pl.col("name").unique()).collect()["name"].to_list()
        keys = pl.DataFrame({"name": names, "key": [normalize(n) for n in names]},
                            schema={"name": pl.String, "key": pl.String})
        picked = picked.join(keys.lazy(), on="name", how="left")
    picked = picked.with_columns(pl.col("it").cast(pl.Int64))
    unions = union_ns(picked.select("key", "rank", "it", "start_ns", "end_ns"),
                      ["key", "rank", "it"], "ns")
    counts = picked.group_by("key", "rank", "it").agg(pl.len().alias("n"))
    table = unions.join(counts, on=["key", "rank", "it"], how="inner").collect()
    if table.height == 0:
        return []
    raw = (picked.group_by("key", "name").agg(pl.len().alias("n"))
           .sort(["key", "n", "name"], descending=[False, True, False])
           .group_by("key", maintain_order=True)
           .agg(pl.col("name").head(MAX_NAMES).alias("names"),
                pl.len().alias("n_names")).collect())
    keys_list = sorted(table["key"].unique().to_list())
    k_index = {k: i for i, k in enumerate(keys_list)}
    n_ranks, n_its = present.shape
    ns = np.zeros((len(keys_list), n_ranks, n_its), dtype=np.int64)
    count = np.zeros_like(ns)
    e = np.array([k_index[k] for k in table["key"].to_list()], dtype=np.int64)
    r = np.array([r_index[int(x)] for x in table["rank"].to_list()], dtype=np.int64)
    i = np.array([i_index.get(int(x), -1) for x in table["it"].to_list()], dtype=np.int64)
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
                      "ns": ns[idx].tolist(), "count": count[idx].tolist()})
    return items


def _total(item: dict[str, Any]) -> int:
    matrix = np.asarray(item["ns"], dtype=np.int64)
    return int(matrix[matrix > 0].sum())


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
