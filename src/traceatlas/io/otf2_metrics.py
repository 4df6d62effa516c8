"""OTF2 Metric events on columns: the rows ``Collector._metric`` appends, from the raw
arrays of ``otf2_raw`` (per event: time, position, metric ref, number of values; the
values as 8-byte ``OTF2_MetricValue`` unions).

As in the ``otf2`` wheel, value ``j`` of an event is read as member ``j``'s value type
(UINT64, INT64 or DOUBLE) and values beyond the members are ignored; an event with fewer
values than members is counted as a problem. Counter tracks are given out in the order the
(location, metric) pairs first occur in time, as the event-object path does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from traceatlas.io.otf2_events import Collector, enum_name
from traceatlas.io.otf2_events import counter_table as _counter_table

I64 = np.int64

_VIEW = {"UINT64": np.uint64, "INT64": np.int64, "DOUBLE": np.float64}
"""Member value type -> how its 8 bytes are read; any other type is not modelled."""

MISMATCH = "metric event whose value count differs from its members"


def counter_columns(collector: Collector, defs: Any, ref: np.ndarray[Any, Any],
                    met: np.ndarray[Any, Any], values: bytes,
                    offset: int) -> dict[str, Any] | None:
    """Counter columns (``ts`` still in ticks since ``offset``) of the Metric events
    ``met`` (rows t, pos, metric ref, n; ``ref``: the location of each row, rows in
    location then stream order); None when a member has a value type not modelled."""
    n_ev = len(met)
    raw_n = met[:, 3].copy() if n_ev else np.zeros(0, I64)
    stored_first = np.cumsum(raw_n) - raw_n  # each event's first union, in stored order
    order = np.argsort(met[:, 0], kind="stable") if n_ev else np.zeros(0, I64)
    ref, met, raw_n, first_value = ref[order], met[order], raw_n[order], stored_first[order]
    words = np.frombuffer(values, dtype=np.uint64) if values else np.zeros(0, np.uint64)
    # location refs are 64-bit: the (location, metric) pairs as rows, not one packed int
    pair_codes, first_at, pair_of = np.unique(
        np.stack([ref, met[:, 2]], axis=1), axis=0, return_index=True,
        return_inverse=True) if n_ev else (
        np.zeros((0, 2), I64), np.zeros(0, I64), np.zeros(0, I64))
    pair_of = np.asarray(pair_of).ravel()
    # targets in order of first occurrence (track ids are given out in this order)
    targets: dict[int, tuple[list[tuple[str, float]], int, list[Any]]] = {}
    metrics = defs.metrics
    for k in np.argsort(first_at, kind="stable").tolist():
        loc_ref, metric_ref = (int(v) for v in pair_codes[k])
        metric = metrics[metric_ref]
        members, trk = collector._metric_target(loc_ref, metric)
        klass = metric.metric_class if hasattr(metric, "metric_class") else metric
        kinds = [_VIEW.get(enum_name(m.value_type)) for m in klass.members]
        targets[k] = (members, trk, kinds)
    n_members = np.asarray([len(targets[k][0]) for k in range(len(pair_codes))], dtype=I64)
    used = np.minimum(raw_n, n_members[pair_of]) if n_ev else np.zeros(0, I64)
    short = int(np.count_nonzero(used != n_members[pair_of])) if n_ev else 0
    if short:
        collector._problems[MISMATCH] += short
    # one row per used value: event e, member j
    event = np.repeat(np.arange(n_ev, dtype=I64), used)
    j = np.arange(len(event), dtype=I64) - np.repeat(np.cumsum(used) - used, used)
    word = words[first_value[event] + j] if len(event) else np.zeros(0, np.uint64)
    value = np.empty(len(event), dtype=np.float64)
    name_index = np.empty(len(event), dtype=I64)
    track = np.empty(len(event), dtype=I64)
    names: list[str] = []
    pair_rows = pair_of[event]
    for k, (members, trk, kinds) in targets.items():
        rows_k = pair_rows == k
        for m, ((name, scale), view) in enumerate(zip(members, kinds, strict=True)):
            sel = rows_k & (j == m)
            if not sel.any():
                continue
            if view is None:
                return None
            value[sel] = word[sel].view(view).astype(np.float64) * scale
            name_index[sel] = len(names)
            names.append(name)
        track[rows_k] = trk
    locs, loc_of = np.unique(ref, return_inverse=True)
    rank = np.asarray([collector._locs[int(r)].rank for r in locs.tolist()],
                      dtype=I64)[np.asarray(loc_of).ravel()[event]] if n_ev else np.zeros(0, I64)
    return {"rank": rank, "track_id": track, "ts": met[event, 0] - offset if n_ev else
            np.zeros(0, I64), "name": pa.array(names, pa.string()).take(
                pa.array(name_index, pa.int64())), "value": value}


def counter_table(cols: dict[str, Any], to_ns: Any) -> pa.Table:
    """``Collector._counter_table``'s columns and types from ``counter_columns``."""
    return _counter_table(cols["rank"], cols["track_id"], to_ns(cols["ts"]), cols["name"],
                          cols["value"])
