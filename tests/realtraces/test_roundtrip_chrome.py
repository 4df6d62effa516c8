"""Real traces: ingest -> export chrome -> ingest keeps every interval, per rank and category.

The comparison is between two independent parses of two different files (the original
and the exported one); the exported file is also checked with a plain ``json`` parse for
proper nesting per thread, as Perfetto needs it.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.export.chrome import ChromeExporter

pytestmark = pytest.mark.realtrace


def _multisets(trace: traceatlas.Trace) -> dict[tuple[int, str], list[tuple[int, int]]]:
    frame = trace.intervals.select(
        "rank", pl.col("category").cast(pl.String), "start_ns", "end_ns"
    ).sort(pl.all()).collect()
    out: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for rank, category, start, end in frame.iter_rows():
        out[(rank, category)].append((start, end))
    return dict(out)


def _nested_per_tid(path: Path) -> int:
    """Check proper nesting per (pid, tid) with a plain JSON parse; returns the X count."""
    with gzip.open(path, "rt") as fh:
        events: list[dict[str, Any]] = json.load(fh, parse_float=Decimal)["traceEvents"]
    by_tid: dict[tuple[int, int], list[tuple[Decimal, Decimal]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_tid[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for key, spans in by_tid.items():
        stack: list[Decimal] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"{path.name} {key}: [{start}, {end}]"
            stack.append(end)
    return sum(len(v) for v in by_tid.values())


def test_torch_cpu_gloo_two_ranks_split(traces_dir: Path, tmp_path: Path) -> None:
    first = traceatlas.open(traceatlas.ingest(traces_dir / "torch-cpu-gloo", tmp_path / "a"))
    assert first.ranks == [0, 1]
    files = ChromeExporter().write(first, tmp_path / "split", split_ranks=True)
    assert [f.name for f in files] == ["rank-0.json.gz", "rank-1.json.gz"]
    assert sum(_nested_per_tid(f) for f in files) == first.intervals.select(
        pl.len()).collect().item()
    again = traceatlas.open(traceatlas.ingest(tmp_path / "split", tmp_path / "b"))
    assert again.ranks == [0, 1]
    assert _multisets(again) == _multisets(first)


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
    before, after = _multisets(first), _multisets(again)
    assert {k: len(v) for k, v in after.items()} == {k: len(v) for k, v in before.items()}
    assert any(cat in ("kernel", "comm_kernel") for _, cat in before)
    assert after == before
