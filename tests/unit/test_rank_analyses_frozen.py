"""``idle``, ``annotations`` and ``syncs`` equal their frozen pre-speed-work copies
(``traceatlas.testing.frozen_*``, the oracles) on random traces built here: nested
annotations (host and GPU), ops, kernel / memcpy / memset launches on several streams and
threads, synchronous and pageable copies, stream and device syncs."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.errors import TraceAtlasError
from traceatlas.model.trace import Trace
from traceatlas.testing.builder import TraceBuilder

NAMES = ("idle", "annotations", "syncs")
COPY_NAMES = ("Memcpy DtoH (Device -> Pageable)", "Memcpy DtoH (Device -> Pinned)",
              "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoD (Device -> Device)")
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy", "cuMemcpyDtoH")


def frozen_run(name: str, trace: Trace, params: dict[str, Any] | None = None) -> Result:
    """The frozen analysis ``name`` run on ``trace`` (parameters parsed as the registry)."""
    module = importlib.import_module(f"traceatlas.testing.frozen_{name}")
    cls = next(v for v in vars(module).values()
               if isinstance(v, type) and getattr(v, "name", None) == name)
    analysis = registry.get_analysis(name)
    typed = registry.parse_params(analysis, params or {})
    registry.check_requirements(analysis, trace)
    result: Result = cls().run(trace, typed)
    return result


def _canon(df: pl.DataFrame) -> pl.DataFrame:
    """Rows in one order (ties of the analyses' own sorts are unordered)."""
    return df.sort(df.columns, nulls_last=True) if df.height else df


def assert_same(name: str, trace: Trace, params: dict[str, Any] | None = None) -> None:
    """The current analysis gives the frozen copy's tables (same columns, types, rows)
    and notes."""
    old = frozen_run(name, trace, params)
    new = registry.run(name, trace, params)
    assert_frame_equal(_canon(new.table), _canon(old.table))
    assert new.extra.keys() == old.extra.keys()
    for key in old.extra:
        assert_frame_equal(_canon(new.extra[key]), _canon(old.extra[key]))
    assert new.notes == old.notes


event = st.tuples(
    st.sampled_from(["kernel", "copy", "memset", "sync", "device_sync", "op", "ann",
                     "gpu_ann"]),
    st.integers(0, 60),      # host start (us)
    st.integers(1, 12),      # host duration (us)
    st.integers(0, 40),      # device delay after the host call (us)
    st.integers(1, 20),      # device duration (us)
    st.integers(0, 2),       # stream / thread / name choice
)


def _build(events: list[tuple[str, int, int, int, int, int]], rank: int) -> TraceBuilder:
    b = TraceBuilder(rank=rank, world_size=2)
    b.step(1, 0, 70_000)
    b.step(2, 70_000, 140_000)
    other_tid = b.main_tid + 1
    for kind, start_us, dur_us, delay_us, dev_us, pick in events:
        s, e = start_us * 1000, (start_us + dur_us) * 1000
        g = e + delay_us * 1000
        tid = other_tid if pick == 2 else None
        if kind == "kernel":
            b.launch(f"kernel_{pick}", s, e - s, g, dev_us * 1000, stream=7 + pick, tid=tid)
        elif kind == "copy":
            b.launch(COPY_NAMES[(start_us + pick) % 4], s, e - s, g, dev_us * 1000,
                     kind="memcpy", nbytes=64, stream=7 + pick,
                     runtime_name=COPY_CALLS[pick], tid=tid)
        elif kind == "memset":
            b.launch("Memset (Device)", s, e - s, g, dev_us * 1000, kind="memset",
                     nbytes=64, stream=7)
        elif kind in ("sync", "device_sync"):
            b.sync(s, e - s, s, e - s, stream=7 + pick, tid=tid,
                   kind="Stream Sync" if kind == "sync" else "Context Sync")
        elif kind == "op":
            b.cpu_op(("aten::item", "aten::to", "aten::copy_")[pick], s, s + 30_000 + e - s,
                     tid=tid)
        else:
            # never two instances over one interval: which is "innermost" is then a
            # tie the frozen copy leaves to its sort (the current one: store order)
            b.annotation(f"block_{pick}", s, s + 40_000 - 1000 * pick - start_us % 7,
                         gpu=kind == "gpu_ann", tid=tid)
    return b


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(event, min_size=1, max_size=25), st.lists(event, max_size=10))
def test_equal_to_frozen_on_built_traces(tmp_path: Path, rank0: list[Any],
                                         rank1: list[Any]) -> None:
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    _build(rank0, 0).write(d / "r0.json")
    if rank1:
        _build(rank1, 1).write(d / "r1.json")
    trace = traceatlas.open(d)
    cases: list[tuple[str, dict[str, Any] | None]] = [
        *((name, None) for name in NAMES), ("idle", {"kernel_wait_ns": "5000"}),
        ("annotations", {"categories": "gpu_annotation,annotation"})]
    for name, params in cases:
        try:
            frozen_run(name, trace, params)
        except TraceAtlasError as exc:  # e.g. no annotations: the same error
            with pytest.raises(type(exc)):
                registry.run(name, trace, params)
            continue
        assert_same(name, trace, params)
