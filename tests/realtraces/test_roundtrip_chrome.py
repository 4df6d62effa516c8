"""Real traces: ingest -> export chrome -> ingest keeps every interval, per rank and category.

The comparison is between two independent parses of two different files (the original
and the exported one); the exported file is also checked with a plain ``json`` parse for
proper nesting per thread, as Perfetto needs it.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.export.chrome import ChromeExporter
from traceatlas.testing.compare import crossing_slices, interval_multisets

pytestmark = pytest.mark.realtrace


def _nested_per_tid(path: Path) -> int:
    """Check proper nesting per (pid, tid) with a plain JSON parse; returns the X count."""
    with gzip.open(path, "rt") as fh:
        events: list[dict[str, Any]] = json.load(fh, parse_float=Decimal)["traceEvents"]
    assert crossing_slices(events) == [], path.name
    return sum(1 for e in events if e["ph"] == "X")


def test_torch_cpu_gloo_two_ranks_split(traces_dir: Path, tmp_path: Path) -> None:
    first = traceatlas.open(traceatlas.ingest(traces_dir / "torch-cpu-gloo", tmp_path / "a"))
    assert first.ranks == [0, 1]
    files = ChromeExporter().write(first, tmp_path / "split", split_ranks=True)
    assert [f.name for f in files] == ["rank-0.json.gz", "rank-1.json.gz"]
    assert sum(_nested_per_tid(f) for f in files) == first.intervals.select(
        pl.len()).collect().item()
    again = traceatlas.open(traceatlas.ingest(tmp_path / "split", tmp_path / "b"))
    assert again.ranks == [0, 1]
    assert interval_multisets(again) == interval_multisets(first)


@pytest.mark.parametrize("name", [
    "hta/nccl_parser_config/nccl_data.json.gz",               # kernels, NCCL, memcpy, memset
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # fractional us
])
def test_hta_gpu_trace(traces_dir: Path, tmp_path: Path, name: str) -> None:
    first = traceatlas.open(traceatlas.ingest(traces_dir / name, tmp_path / "a"))
    out = ChromeExporter().write(first, tmp_path / "t.json.gz")[0]
    assert _nested_per_tid(out) == first.intervals.select(pl.len()).collect().item()
    again = traceatlas.open(traceatlas.ingest(out, tmp_path / "b"))
    assert again.ranks == first.ranks
    before, after = interval_multisets(first), interval_multisets(again)
    assert {k: len(v) for k, v in after.items()} == {k: len(v) for k, v in before.items()}
    assert any(cat in ("kernel", "comm_kernel") for _, cat in before)
    assert after == before
