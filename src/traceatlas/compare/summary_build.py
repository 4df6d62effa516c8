"""Building the baseline summary of a trace (the format: ``traceatlas.compare.summary``),
in rank batches on an engine (``analysis.partitioned``'s map / merge, bounded memory).

The client decides how iterations are found for the whole selection (``steps`` when any
``step`` row exists; else the ``phases`` analysis, run on the engine; else the whole
run), then maps ``summary_partial.summary_partial`` over batches of ranks (at most 4 ranks
and 4 M stored rows each, a bigger rank alone: ``partitioned.trace_batches``; or
``ranks_per_task`` ranks): each worker reads only its ranks' intervals and sends small
tables back. The merge (ONE code path: the whole run is one batch of every rank) builds
the ``[rank][iteration]`` matrices (``summary_kinds.assemble``) and applies the
whole-run choices once: folding (``min_share`` / ``top``), ``launched_by``, notes, rank
info. The ``efficiency`` analysis runs on the same engine (it is partitioned itself).
Peak memory: the client holds the partials (the size of the summary); a worker one
batch's intervals. ``traceatlas.testing.summary_reference`` keeps the former all-Polars
builder as the test oracle: both give identical summaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import traceatlas
from traceatlas.compare.summary import FORMAT, KINDS, VERSION, finite_or_none
from traceatlas.compare.summary_kinds import assemble
from traceatlas.compare.summary_partial import (
    KIND_CATEGORIES,
    SummaryPartial,
    SummaryTask,
    summary_partial,
)
from traceatlas.errors import MissingDataError

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.engine.base import Engine
    from traceatlas.model.trace import Trace

__all__ = ["KIND_CATEGORIES", "build"]


def build(trace: Trace, *, min_share: float, top: int, engine: Engine | None = None,
          ranks_per_task: int | None = None) -> dict[str, Any]:
    """The summary of ``trace`` as JSON-ready data (see ``traceatlas.compare.summary``),
    its ranks read batch by batch on ``engine`` (None: one after the other in this
    process). ``ranks_per_task``: batches of that many ranks whatever their rows
    (``len(trace.ranks)``: the whole run in one batch); None: ``trace_batches``."""
    from traceatlas.engine.local import LocalEngine

    eng = engine if engine is not None else LocalEngine(max_workers=1)
    try:
        return _build(trace, min_share, top, eng, ranks_per_task)
    finally:
        if engine is None:
            eng.close()


def _build(trace: Trace, min_share: float, top: int, engine: Engine,
           ranks_per_task: int | None) -> dict[str, Any]:
    import polars as pl

    ranks = list(trace.ranks)
    notes: list[str] = []
    source, phases = _source(trace, engine, notes)
    partials = engine.map(summary_partial, _tasks(trace, source, phases, ranks_per_task))
    windows = pl.concat([p.windows for p in partials])
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
    entities: dict[str, list[dict[str, Any]]] = {}
    other: dict[str, dict[str, Any]] = {}
    step_key = {"steps": "ProfilerStep#", "phases": "phase", "run": "run"}[source]
    step_count = np.where(present, 1, -1)
    entities["step"] = [{"key": step_key, "names": [step_key], "n_names": 1,
                         "ns": step_ns.tolist(), "count": step_count.tolist()}]
    note = _attribution_note(partials)
    if note:
        notes.append(note)
    names = pl.concat([p.names for p in partials])
    cells = pl.concat([p.cells for p in partials])
    for kind in KINDS[1:]:
        items = assemble(names.filter(pl.col("kind") == kind).drop("kind"),
                         cells.filter(pl.col("kind") == kind).drop("kind"),
                         ranks, labels, present, raw_names=kind != "category")
        kept, folded = _fold(items, total, min_share, top)
        entities[kind] = kept
        if folded:
            other[kind] = _other(folded, present)
    who = _launched_by(partials, entities["kernel"])
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
        "efficiency": _efficiency(trace, engine, notes),
        "notes": notes,
    }


def _source(trace: Trace, engine: Engine, notes: list[str]
            ) -> tuple[str, pl.DataFrame | None]:
    """How iterations are found, for the whole selection: ``steps`` (a ``step`` row on
    some rank: one scan of the category column), ``phases`` (the ``phases`` analysis'
    table on ``engine``, also returned: rank, it, start_ns, end_ns) or ``run``."""
    import polars as pl

    from traceatlas.analysis.registry import run

    steps = (trace.intervals.select("category").filter(pl.col("category") == "step")
             .select(pl.len()).collect().item())
    if steps > 0:
        return "steps", None
    try:
        phases: pl.DataFrame | None = run("phases", trace, engine=engine).table
    except MissingDataError:
        phases = None
    if phases is not None and phases.height:
        notes.append("no step markers: iterations are the phases analysis' repetitions")
        return "phases", phases.select(pl.col("rank").cast(pl.Int64),
                                       pl.col("phase").cast(pl.Int64).alias("it"),
                                       pl.col("start_ns").cast(pl.Int64),
                                       pl.col("end_ns").cast(pl.Int64))
    notes.append("no step markers and no repeating phase: the whole run is one sample")
    return "run", None


def _tasks(trace: Trace, source: str, phases: pl.DataFrame | None,
           ranks_per_task: int | None) -> list[SummaryTask]:
    """One ``SummaryTask`` per batch of ranks (with its ranks' phase windows)."""
    import polars as pl

    from traceatlas.analysis.partitioned import rank_batches, trace_batches

    ranks = list(trace.ranks)
    if ranks_per_task is None:
        batches = trace_batches(trace, ranks)
    else:
        batches = rank_batches(ranks, ranks_per_task)
    tasks = []
    for batch in batches:
        windows: tuple[tuple[int, int, int, int], ...] = ()
        if phases is not None:
            mine = phases.filter(pl.col("rank").is_in(list(batch)))
            windows = tuple((int(r), int(i), int(s), int(e)) for r, i, s, e in mine.iter_rows())
        tasks.append(SummaryTask(trace.location, trace.selections, batch, source, windows))
    return tasks


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks[:20])) + (" ..." if len(ranks) > 20 else "")


def _launched_by(partials: Sequence[SummaryPartial],
                 kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kept kernel key: ``[op, op_share, annotation, annotation_share]``, the op key
    and the innermost annotation key that launched the largest part of its summed device
    time (ties: the smallest key), with that part (0..1, rounded to 3 places); None
    where none."""
    kept = {k["key"] for k in kernels}
    totals: dict[str, int] = {}
    for p in partials:
        for key, t in p.totals.iter_rows():
            if key in kept:
                totals[key] = totals.get(key, 0) + int(t)
    if not totals:
        return {}
    sums: dict[tuple[str, int, str], int] = {}
    for p in partials:
        for key, slot, launcher, d in p.launchers.iter_rows():
            if key in totals:
                sums[(key, slot, launcher)] = sums.get((key, slot, launcher), 0) + int(d)
    best: dict[tuple[str, int], tuple[int, str]] = {}
    for (key, slot, launcher), d in sums.items():
        if (key, slot) not in best or (-d, launcher) < best[(key, slot)]:
            best[(key, slot)] = (-d, launcher)
    out: dict[str, list[Any]] = {k: [None, 0.0, None, 0.0] for k in totals}
    for (key, slot), (neg, launcher) in best.items():
        total = totals[key]
        out[key][slot] = launcher
        out[key][slot + 1] = round(-neg / total, 3) if total else 0.0
    return out


def _attribution_note(partials: Sequence[SummaryPartial]) -> str | None:
    """How much of the device activities' summed time has a launching op / annotation."""
    rows, total, with_op, with_ann = (sum(p.device[j] for p in partials) for j in range(4))
    if rows == 0 or not total:
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


def _efficiency(trace: Trace, engine: Engine, notes: list[str]) -> list[list[Any]] | None:
    """The ``efficiency`` analysis' rows, run on ``engine`` (in rank batches)."""
    from traceatlas.analysis.registry import run

    try:
        table = run("efficiency", trace, engine=engine).table
    except MissingDataError as exc:
        notes.append(f"efficiency model not computed: {exc.problem}")
        return None
    return [[str(scope), str(side), str(metric), finite_or_none(value),
             None if parent is None else str(parent), int(level),
             None if label is None else str(label)]
            for scope, side, metric, value, parent, level, label in table.select(
                "scope", "side", "metric", "value", "parent", "level", "label").iter_rows()]
