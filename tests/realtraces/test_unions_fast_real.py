"""``efficiency`` on real traces with the numpy unions and host sweep equals, row for row,
the same analysis run on the former Polars code (``ops.unions``' Polars plans, forced by
making the numpy path decline, and a frozen copy of the former Polars sweep): main table,
per_rank, per_thread and notes, for the whole run and for step / annotation / window
regions. Traces: h100-planted/healthy (Kineto), DLRM (8 ranks), LULESH (Paraver .prv,
states and threads), ping-pong (OTF2, MPI replay), an Nsight Systems export.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.analysis import efficiency
from traceatlas.ops import unions
from traceatlas.testing.compare import useful_ns_polars

pytestmark = pytest.mark.realtrace

TRACES = {
    "healthy": "h100-planted/healthy",
    "dlrm": "param-et_replay/dlrm_kineto.tar.gz",
    "lulesh": "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
    "pingpong": "pipit/ping-pong-otf2/traces.otf2",
    "nsys": "nsys-ai/h100_2gpu_1s.sqlite",
}


def _regions(trace: traceatlas.Trace) -> list[str]:
    steps = sorted(s for s in trace.intervals.select("step").unique().collect()["step"]
                   .to_list() if s is not None and s >= 0)
    names = (trace.intervals.filter(pl.col("category").cast(pl.String).is_in(
        efficiency.ANNOTATION_CATEGORIES)).select(pl.col("name").cast(pl.String))
        .unique().sort("name").head(1).collect()["name"].to_list())
    regions = ["", "window:0:1ms"]
    if steps:
        regions.append(f"step:{steps[len(steps) // 2]}")
    if names:
        regions.append("annotation:^" + re.escape(names[0]) + "$")
    return regions


def _run(trace: traceatlas.Trace, region: str, nccl: bool) -> dict[str, Any]:
    result = analysis.run("efficiency", trace, {"region": region, "nccl_useful": nccl})
    return {"main": result.table, "notes": result.notes,
            **{k: result.extra[k] for k in ("per_rank", "per_thread")}}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_efficiency_rows_identical_to_the_polars_code(
        name: str, traces_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = traceatlas.open(traceatlas.ingest(traces_dir / TRACES[name], tmp_path / "s"))
    calls = {"numpy": 0}
    real = unions._segments

    def counting(df: pl.DataFrame, keys: tuple[str, ...]) -> Any:
        calls["numpy"] += 1
        return real(df, keys)

    cases = [(r, nccl) for r in _regions(trace) for nccl in (False, True)]
    monkeypatch.setattr(unions, "_segments", counting)
    new = [_run(trace, r, nccl) for r, nccl in cases]
    assert calls["numpy"] > 0
    monkeypatch.setattr(unions, "_segments", lambda df, keys: None)  # the Polars plans
    monkeypatch.setattr(efficiency, "_useful_by_rank", useful_ns_polars)
    old = [_run(trace, r, nccl) for r, nccl in cases]
    for (region, nccl), a, b in zip(cases, new, old, strict=True):
        assert a["main"].height > 0, (region, nccl)
        assert a["notes"] == b["notes"], (region, nccl)
        for table in ("main", "per_rank", "per_thread"):
            assert a[table].equals(b[table], null_equal=True), (name, region, nccl, table)
