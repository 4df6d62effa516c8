"""Golden tests of ``patterns``: kernel sequences under ops, expected values by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000


def _builder() -> TraceBuilder:
    return TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)


@pytest.fixture
def trace(tmp_path: Path) -> traceatlas.Trace:
    b = _builder()
    # linear #1: gemm [100k,110k), splitK [110k,112k), bias [115k,116k) -> union 13_000
    b.cpu_op("aten::linear", 0, 10_000)
    b.cpu_op("aten::mm", 1_000, 5_000)
    b.launch("gemm", 1_500, 500, 100_000, 10_000)
    b.launch("splitK", 3_000, 500, 110_000, 2_000)
    b.launch("bias", 6_000, 500, 115_000, 1_000)
    # linear #2: gemm [200k,210k), splitK [209k,213k) (other stream), bias [214k,215k)
    # -> union [200k,213k) + 1_000 = 14_000
    b.cpu_op("aten::linear", 20_000, 30_000)
    b.cpu_op("aten::mm", 21_000, 25_000)
    b.launch("gemm", 21_500, 500, 200_000, 10_000)
    b.launch("splitK", 23_000, 500, 209_000, 4_000, stream=8)
    b.launch("bias", 26_000, 500, 214_000, 1_000)
    # linear #3: bias launched first but runs after gemm: sequence by device start
    # gemm [300k,305k), bias [305k,306k) -> union 6_000
    b.cpu_op("aten::linear", 31_000, 40_000)
    b.cpu_op("aten::mm", 31_500, 35_000)
    b.launch("bias", 32_000, 500, 305_000, 1_000, stream=8)
    b.launch("gemm", 33_000, 500, 300_000, 5_000)
    # relu: one kernel [400k, 401k)
    b.cpu_op("aten::relu", 50_000, 60_000)
    b.launch("relu_k", 51_000, 500, 400_000, 1_000)
    path = b.write(tmp_path / "rank-0.json")
    return traceatlas.open(traceatlas.ingest(path, tmp_path / "store"))


def _rows(trace: traceatlas.Trace, **params: Any) -> list[tuple[Any, ...]]:
    table = analysis.run("patterns", trace, params).table
    return table.select("op", "sequence", "length", "count", "total_ns", "mean_ns").rows()


def test_whole_sequences(trace: traceatlas.Trace) -> None:
    assert _rows(trace, op="linear") == [
        ("aten::linear", "gemm > splitK > bias", 3, 2, 27_000, 13_500),  # 13_000 + 14_000
        ("aten::linear", "gemm > bias", 2, 1, 6_000, 6_000),
    ]


def test_ngrams(trace: traceatlas.Trace) -> None:
    # windows: #1 (gemm,splitK) [100k,112k) 12_000, (splitK,bias) 2_000 + 1_000;
    # #2 (gemm,splitK) [200k,213k) 13_000, (splitK,bias) 4_000 + 1_000; #3 (gemm,bias) 6_000
    assert _rows(trace, op="linear", length=2) == [
        ("aten::linear", "gemm > splitK", 2, 2, 25_000, 12_500),
        ("aten::linear", "splitK > bias", 2, 2, 8_000, 4_000),
        ("aten::linear", "gemm > bias", 2, 1, 6_000, 6_000),
    ]
    # length 4: no instance has 4 kernels
    assert _rows(trace, op="linear", length=4) == []


def test_default_is_top_level_ops_and_nested_matches_are_not_roots(
        trace: traceatlas.Trace) -> None:
    expected = [
        ("aten::linear", "gemm > splitK > bias", 3, 2, 27_000, 13_500),
        ("aten::linear", "gemm > bias", 2, 1, 6_000, 6_000),
        ("aten::relu", "relu_k", 1, 1, 1_000, 1_000),
    ]
    assert _rows(trace) == expected
    assert _rows(trace, op="^aten::") == expected  # aten::mm is nested in aten::linear
    # aten::mm alone: the bias of #1 and #2 is launched outside it (in linear only)
    assert _rows(trace, op="aten::mm") == [
        ("aten::mm", "gemm > splitK", 2, 2, 25_000, 12_500),
        ("aten::mm", "gemm > bias", 2, 1, 6_000, 6_000),
    ]
    assert _rows(trace, top=1) == expected[:1]


def test_missing_data_cli_exit_2(trace: traceatlas.Trace, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", "patterns", str(trace.path), "-p", "op=nomatch"])
    assert result.exit_code == 2
    assert "matches" in result.output
    b = _builder()
    b.cpu_op("aten::mm", 0, 1_000)  # host only: no device activity, no correlation
    store = traceatlas.ingest(b.write(tmp_path / "cpu.json"), tmp_path / "cpu")
    result = runner.invoke(app, ["analyze", "patterns", str(store)])
    assert result.exit_code == 2
    assert "device activity" in result.output
