"""Exclusive time (``ops.exclusive``) on real traces: on the TraceLens Kineto traces, whose
``ProfilerStep#N`` cross the ``profiler.step()`` Python frames, the flat profile's host
exclusive times add up to the union of each thread's host intervals (a plain loop,
``testing.compare.plain_union_length``) and one DataQualityWarning counts the crossed rows;
on properly nested traces (OTF2 ping-pong, Paraver LULESH, nsys saxpy) nothing is crossed
and the exclusive times equal the former rule (duration minus the direct children's
overlap), so the Pipit parity tests keep their values.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import traceatlas
from traceatlas.errors import DataQualityWarning
from traceatlas.ops.exclusive import exclusive_intervals
from traceatlas.testing.compare import plain_union_length

pytestmark = pytest.mark.realtrace

CROSSING = ["tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
            "tracelens/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"]
NESTED = ["pipit/ping-pong-otf2", "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
          "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"]


def _open(path: Path, tmp_path: Path) -> traceatlas.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(str(path), tmp_path / "s"))


@pytest.mark.parametrize("name", CROSSING)
def test_crossing_kineto_sums_to_union(name: str, traces_dir: Path, tmp_path: Path) -> None:
    trace = _open(traces_dir / name, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame, _ = exclusive_intervals(trace, "")
    ours = [w for w in caught if issubclass(w.category, DataQualityWarning)
            and "crossed" in str(w.message)]
    crossed = int(frame["crossed"].sum())
    assert crossed > 0
    assert len(ours) == 1 and str(ours[0].message).startswith(f"{crossed} host interval(s)")
    stacks = frame.filter(pl.col("layer") >= 0).partition_by(["rank", "track_id", "layer"])
    for g in stacks:
        union = plain_union_length(zip(g["start_ns"].to_list(), g["end_ns"].to_list(),
                                       strict=True))
        assert int(g["exclusive_ns"].sum()) == union


@pytest.mark.parametrize("name", NESTED)
def test_nested_traces_unchanged(name: str, traces_dir: Path, tmp_path: Path) -> None:
    trace = _open(traces_dir / name, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataQualityWarning)
        frame, _ = exclusive_intervals(trace, "all")
    assert not frame["crossed"].any()
    parent, overlap = frame["parent"].to_numpy(), frame["child_ns"].to_numpy()
    has = parent >= 0
    old = (frame["end_ns"] - frame["start_ns"]).to_numpy() - np.bincount(
        parent[has], weights=overlap[has], minlength=frame.height).astype(np.int64)
    assert frame["exclusive_ns"].to_list() == old.tolist()
