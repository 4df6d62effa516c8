"""Kineto events (one polars frame, one row per JSON event) -> canonical tables.

Part of the Kineto reader (``kineto.py``); vectorised, no Python loop over events.
Tables come back without the ``rank`` column: ingest adds it once the rank is known.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from traceatlas.errors import DataQualityWarning
from traceatlas.model.categories import (
    COMM_KERNEL_RE,
    KINETO_CATEGORIES,
    STEP_RE,
    category_from_process_name,
)
from traceatlas.model.schema import DEVICE_CATEGORIES, empty_table
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting
from traceatlas.ops.steps import step_of_time

FLOW_PHASES = ("s", "f", "t")
DEVICE_SOURCE_CATEGORIES = frozenset({"mtia_ccp_events"})
_ACCELERATOR_LABEL = re.compile(r"^(GPU|MTIA|XPU|HPU|TPU|NPU)\b", re.IGNORECASE)


def build_tables(events: pl.DataFrame, base_ns: int, display: str) -> dict[str, pa.Table]:
    """Split events by phase and build tracks, intervals, instants, counters, flows."""
    events = events.with_columns(pl.col("ts_ns") + base_ns)
    no_phase = events.filter(pl.col("ph").is_null())
    if no_phase.height:
        _warn(f"{display}: {no_phase.height} event(s) without 'ph' skipped "
              "(nothing to place on a timeline)")
    meta = events.filter(pl.col("ph") == "M")
    names = _track_names(meta)
    complete = events.filter((pl.col("ph") == "X") & pl.col("dur_ns").is_not_null()
                             & pl.col("ts_ns").is_not_null())
    counters_src = events.filter(pl.col("ph") == "C")
    flows_src = events.filter(pl.col("ph").is_in(FLOW_PHASES))
    instants_src = events.filter(
        pl.col("ph").is_not_null()
        & ~pl.col("ph").is_in(["M", "C", *FLOW_PHASES])
        & ~((pl.col("ph") == "X") & pl.col("dur_ns").is_not_null()
            & pl.col("ts_ns").is_not_null())
    )
    complete = _categorise(complete, names["process"], display)
    tracks, track_of = _tracks(complete, instants_src, counters_src, flows_src, names)
    intervals = _intervals(complete, track_of, display)
    return {
        "tracks": tracks,
        "intervals": intervals,
        "instants": _instants(instants_src, track_of, names["process"]),
        "counters": _counters(counters_src, track_of),
        "flows": _flows(flows_src, track_of),
        "messages": empty_table("messages").drop_columns(["rank"]),
    }


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=3)


def _track_names(meta: pl.DataFrame) -> dict[str, dict[Any, str]]:
    """process_name / process_labels per pid and thread_name per (pid, tid)."""
    proc: dict[Any, str] = {}
    labels: dict[Any, str] = {}
    thread: dict[Any, str] = {}
    wanted = meta.filter(pl.col("name").is_in(["process_name", "process_labels", "thread_name"]))
    for row in wanted.select("name", "pid", "tid", "a").iter_rows():
        kind, pid, tid, args = row
        args = args or {}
        if kind == "process_name" and args.get("name"):
            proc[pid] = args["name"]
        elif kind == "process_labels" and args.get("labels"):
            labels[pid] = args["labels"]
        elif kind == "thread_name" and args.get("name"):
            thread[(pid, tid)] = args["name"]
    # Kineto names GPU processes by label ("GPU 0"); the name is the host process name.
    process = {pid: labels.get(pid, name) for pid, name in proc.items()}
    process.update({pid: lab for pid, lab in labels.items() if pid not in process})
    return {"process": process, "thread": thread}


def _categorise(df: pl.DataFrame, process: dict[Any, str], display: str) -> pl.DataFrame:
    """Add ``category`` (canonical) from ``cat`` and name rules."""
    by_process = {pid: category_from_process_name(name) for pid, name in process.items()}
    inferred = {pid: cat for pid, cat in by_process.items() if cat is not None}
    base = pl.col("cat").replace_strict(KINETO_CATEGORIES, default="other",
                                        return_dtype=pl.String)
    from_pid = pl.col("pid").replace_strict(inferred, default="other", return_dtype=pl.String)
    category = pl.when(pl.col("cat").is_null()).then(from_pid).otherwise(base)
    df = df.with_columns(category.alias("category"))
    n_inferred = df.filter(pl.col("cat").is_null() & (pl.col("category") != "other")).height
    if n_inferred:
        _warn(f"{display}: {n_inferred} event(s) without 'cat'; category inferred from "
              "process names (rocprof style)")
    comm = (pl.col("category") == "kernel") & pl.col("name").str.contains(
        "(?i)" + COMM_KERNEL_RE.pattern
    )
    step = pl.col("category").is_in(["annotation", "cpu_op"]) & pl.col("name").str.contains(
        STEP_RE.pattern
    )
    return df.with_columns(
        pl.when(comm).then(pl.lit("comm_kernel"))
        .when(step).then(pl.lit("step"))
        .otherwise(pl.col("category")).alias("category")
    )


def _tracks(
    complete: pl.DataFrame,
    instants: pl.DataFrame,
    counters: pl.DataFrame,
    flows: pl.DataFrame,
    names: dict[str, dict[Any, str]],
) -> tuple[pa.Table, pl.DataFrame]:
    """One track per (pid, tid); returns the tracks table and a (pid, tid) -> id frame."""
    device_flag = pl.col("category").is_in(list(DEVICE_CATEGORIES)) | pl.col("cat").is_in(
        list(DEVICE_SOURCE_CATEGORIES)
    )
    per_track = complete.group_by("pid", "tid").agg(
        device_flag.any().alias("is_device"),
        pl.col("a").struct.field("device").drop_nulls().first().alias("arg_device"),
        pl.col("a").struct.field("stream").drop_nulls().first().alias("arg_stream"),
    )
    others = pl.concat(
        [f.select("pid", "tid") for f in (instants, counters, flows)], how="vertical"
    ).unique()
    counter_keys = counters.select("pid", "tid").unique().with_columns(
        pl.lit(True).alias("is_counter")
    )
    keys = (
        per_track.join(others, on=["pid", "tid"], how="full", coalesce=True, nulls_equal=True)
        .join(counter_keys, on=["pid", "tid"], how="left", nulls_equal=True)
        .with_columns(pl.col("is_device").fill_null(False), pl.col("is_counter").fill_null(False))
        .sort(["is_device", "pid", "tid"], nulls_last=True)
        .with_row_index("track_id")
    )
    rows: dict[str, list[Any]] = {k: [] for k in (
        "track_id", "kind", "name", "pid", "tid", "device", "stream", "source_pid", "source_tid"
    )}
    process = names["process"]
    thread = names["thread"]
    for rec in keys.iter_rows(named=True):
        pid, tid = rec["pid"], rec["tid"]
        pid_int, tid_int = _as_int(pid), _as_int(tid)
        label = process.get(pid, "")
        accel = bool(_ACCELERATOR_LABEL.search(label))
        if rec["is_device"]:
            kind = "gpu_stream"
            device = rec["arg_device"] if rec["arg_device"] is not None else pid_int
            stream = rec["arg_stream"] if rec["arg_stream"] is not None else _digits(tid)
        elif accel and pid_int is not None:
            kind, device, stream = "device", pid_int, _digits(tid)
        elif rec["is_counter"]:
            kind, device, stream = "counter", -1, -1
        elif pid_int is None:
            kind, device, stream = "other", -1, -1
        else:
            kind, device, stream = "host_thread", -1, -1
        name = thread.get((pid, tid)) or (
            f"{label} stream {stream}" if kind == "gpu_stream" and label else None
        ) or (f"{pid}/{tid}" if tid is not None else str(pid))
        rows["track_id"].append(rec["track_id"])
        rows["kind"].append(kind)
        rows["name"].append(name)
        rows["pid"].append(pid_int)
        rows["tid"].append(tid_int)
        rows["device"].append(-1 if device is None else device)
        rows["stream"].append(-1 if stream is None else stream)
        rows["source_pid"].append(pid)
        rows["source_tid"].append(tid)
    tracks = pa.table({
        "track_id": pa.array(rows["track_id"], pa.int32()),
        "kind": pa.array(rows["kind"], pa.string()),
        "name": pa.array(rows["name"], pa.string()),
        "pid": pa.array(rows["pid"], pa.int64()),
        "tid": pa.array(rows["tid"], pa.int64()),
        "device": pa.array(rows["device"], pa.int32()),
        "stream": pa.array(rows["stream"], pa.int64()),
        "source_pid": pa.array(rows["source_pid"], pa.string()),
        "source_tid": pa.array(rows["source_tid"], pa.string()),
    })
    track_of = keys.select("pid", "tid", pl.col("track_id").cast(pl.Int32), "is_device")
    return tracks, track_of


def _as_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _digits(value: str | None) -> int | None:
    """Trailing integer of a tid like ``7`` or ``stream 7``."""
    if value is None:
        return None
    tail = value.rsplit(" ", 1)[-1]
    return _as_int(tail)


def _with_track(df: pl.DataFrame, track_of: pl.DataFrame) -> pl.DataFrame:
    return df.join(track_of, on=["pid", "tid"], how="left", nulls_equal=True)


def _intervals(df: pl.DataFrame, track_of: pl.DataFrame, display: str) -> pa.Table:
    df = _with_track(df, track_of)
    negative = df.filter(pl.col("dur_ns") < 0).height
    if negative:
        _warn(f"{display}: {negative} event(s) with negative duration clipped to 0")
    a = pl.col("a").struct
    df = df.with_columns(
        pl.col("dur_ns").clip(lower_bound=0),
    ).with_columns(
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
        a.field("correlation").alias("correlation"),
        a.field("External id").alias("external_id"),
        pl.when(pl.col("is_device")).then(a.field("device")).alias("device"),
        pl.when(pl.col("is_device")).then(a.field("stream")).alias("stream"),
        a.field("bytes").alias("bytes"),
        a.field("Collective name").alias("collective"),
        a.field("Process Group Name").alias("process_group"),
        a.field("Process Group Ranks").alias("group_ranks"),
        a.field("In msg nelems").alias("in_msg_nelems"),
        a.field("Out msg nelems").alias("out_msg_nelems"),
        a.field("dtype").alias("dtype"),
        a.field("grid").alias("grid"),
        a.field("block").alias("block"),
        pl.when(pl.col("category") == "memcpy")
        .then(pl.col("name").str.extract(r"^Memcpy\s+(\w+)", 1)).alias("memcpy_kind"),
    ).rename({"ts_ns": "start_ns", "cat": "source_category"})
    df = _assign_steps(df)
    track = df.get_column("track_id").to_numpy().astype(np.int64)
    start = df.get_column("start_ns").to_numpy()
    end = df.get_column("end_ns").to_numpy()
    order = sort_for_nesting(track, start, end)
    df = df[order]
    depth = nesting_depth(track[order], start[order], end[order])
    df = df.with_columns(pl.Series("depth", depth, dtype=pl.Int32))
    return df.select(
        "track_id", "start_ns", "end_ns", "dur_ns", "name", "category", "source_category",
        "depth", "correlation", "external_id", "step", "bytes", "device", "stream",
        "collective", "process_group", "group_ranks", "in_msg_nelems", "out_msg_nelems",
        "dtype", "grid", "block", "memcpy_kind", "args",
    ).to_arrow()


def _assign_steps(df: pl.DataFrame) -> pl.DataFrame:
    """HTA's rule: host events take the step whose range holds their start; device events
    take the step of the host launch with the same correlation id; else -1."""
    steps = df.filter(pl.col("category") == "step").select(
        "start_ns", "end_ns",
        pl.col("name").str.extract(r"#\s*(\d+)", 1).cast(pl.Int64).alias("n"),
    )
    host_step = step_of_time(
        df.get_column("start_ns").to_numpy(),
        steps.get_column("start_ns").to_numpy(),
        steps.get_column("end_ns").to_numpy(),
        steps.get_column("n").to_numpy(),
    )
    df = df.with_columns(pl.Series("host_step", host_step))
    launches = (
        df.filter(~pl.col("is_device") & pl.col("correlation").is_not_null())
        .group_by("correlation").agg(pl.col("host_step").first().alias("launch_step"))
    )
    df = df.join(launches, on="correlation", how="left")
    step = pl.when(pl.col("is_device")).then(pl.col("launch_step").fill_null(-1)).otherwise(
        pl.col("host_step")
    )
    return df.with_columns(step.cast(pl.Int32).alias("step")).drop("host_step", "launch_step")


def _instants(df: pl.DataFrame, track_of: pl.DataFrame, process: dict[Any, str]) -> pa.Table:
    df = _with_track(df, track_of)
    category = pl.col("cat").replace_strict(KINETO_CATEGORIES, default="other",
                                            return_dtype=pl.String)
    return df.select(
        "track_id",
        "ts_ns",
        "name",
        category.alias("category"),
        pl.col("cat").alias("source_category"),
        pl.col("ph").alias("phase"),
        "scope",
        "args",
    ).to_arrow()


def _counters(df: pl.DataFrame, track_of: pl.DataFrame) -> pa.Table:
    """Chrome 'C' events: every key of ``args`` is one series."""
    df = _with_track(df, track_of)
    track_ids: list[int] = []
    ts: list[int] = []
    names: list[str] = []
    values: list[float | None] = []
    for track_id, ts_ns, name, args in df.select("track_id", "ts_ns", "name", "args").iter_rows():
        series = json.loads(args) if args else {}
        for key, value in series.items():
            track_ids.append(track_id)
            ts.append(ts_ns)
            names.append(f"{name}.{key}" if name and key != name else key)
            values.append(float(value) if isinstance(value, int | float) else None)
    return pa.table({
        "track_id": pa.array(track_ids, pa.int32()),
        "ts_ns": pa.array(ts, pa.int64()),
        "name": pa.array(names, pa.string()),
        "value": pa.array(values, pa.float64()),
    })


def _flows(df: pl.DataFrame, track_of: pl.DataFrame) -> pa.Table:
    """Pair flow starts ('s') with ends ('f' or 't'): the k-th start of a (category, id)
    pairs with its k-th end, so repeated ids are kept, and unmatched ends keep null sides."""
    df = _with_track(df, track_of).with_columns(
        pl.coalesce("cat", "name").alias("flow_name"), pl.col("id").fill_null("")
    )
    key = ["flow_name", "id"]

    def side(frame: pl.DataFrame, prefix: str) -> pl.DataFrame:
        return frame.sort("ts_ns").select(
            *key,
            pl.int_range(pl.len()).over(key).alias("k"),
            pl.col("track_id").alias(f"{prefix}_track_id"),
            pl.col("ts_ns").alias(f"{prefix}_ts_ns"),
        )

    starts = side(df.filter(pl.col("ph") == "s"), "src")
    ends = side(df.filter(pl.col("ph") != "s"), "dst")
    paired = starts.join(ends, on=[*key, "k"], how="full", coalesce=True, nulls_equal=True)
    return paired.select(
        pl.col("id").alias("flow_id"), pl.col("flow_name").alias("name"),
        "src_track_id", "src_ts_ns", "dst_track_id", "dst_ts_ns",
    ).to_arrow()
