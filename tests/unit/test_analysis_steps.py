"""Golden tests for the ``steps`` analysis: traces built in code, values worked out by hand
next to the builder calls (all builder times are ns after BASE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import registry
from traceatlas.cli.main import app
from traceatlas.errors import MissingDataError
from traceatlas.testing import TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
PARTS = ("kernel_ns", "memcpy_ns", "memset_ns", "runtime_ns", "dataloader_ns",
         "cpu_exec_ns", "other_ns")


def _builder(rank: int = 0, world_size: int = 1) -> TraceBuilder:
    return TraceBuilder(rank, world_size, base_time_ns=BASE, profiler_markers=False)


def _store(tmp_path: Path, b: TraceBuilder) -> Path:
    return traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "store")


def _rows(trace: traceatlas.Trace, **params: Any) -> list[dict[str, Any]]:
    return registry.run("steps", trace, params).table.to_dicts()


def _three_steps() -> TraceBuilder:
    b = _builder()
    b.step(1, 0, 100_000)
    b.step(2, 100_000, 200_000)
    b.step(3, 200_000, 260_000)
    # Step 1, host [0, 100k).
    b.cpu_op(LOADER, 0, 20_000)                         # dataloader [0, 20k)
    b.cpu_op("aten::mm", 25_000, 60_000)                # cpu op [25k, 60k)
    b.launch("gemm", 30_000, 5_000, 40_000, 50_000)     # runtime [30k, 35k), kernel [40k, 90k)
    b.launch("Memcpy HtoD", 62_000, 3_000, 92_000, 5_000, kind="memcpy", nbytes=64)
    #                                                   # runtime [62k, 65k) (inside the kernel)
    #                                                   # memcpy [92k, 97k)
    # Step 2, host [100k, 200k).
    b.cpu_op("aten::add", 120_000, 180_000)             # cpu op [120k, 180k)
    b.launch("late", 150_000, 4_000, 230_000, 20_000)   # runtime [150k, 154k), kernel [230k, 250k)
    b.launch("Memset", 160_000, 2_000, 170_000, 1_000, kind="memset", nbytes=8)
    #                                                   # runtime [160k, 162k), memset [170k, 171k)
    # Step 3, host [200k, 260k); its window starts at step 2's end, 250k.
    b.cpu_op(LOADER, 200_000, 255_000)                  # dataloader [200k, 255k)
    b.cpu_op("aten::zero_", 256_000, 258_000)           # cpu op [256k, 258k)
    return b


def test_three_steps_by_hand(tmp_path: Path) -> None:
    trace = traceatlas.open(_store(tmp_path, _three_steps()))
    rows = _rows(trace)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["rank"] == 0 for r in rows)
    # Step 1: [0, 100k): device work launched inside ends at 97k < marker end 100k.
    # kernel [40k, 90k) = 50k; memcpy 5k; runtime [30k, 35k) = 5k ([62k, 65k) is under the
    # kernel); dataloader 20k; cpu_exec [25k, 60k) - [30k, 35k) - [40k, 60k) = 10k;
    # other = 100k - 90k covered ([0, 20k) + [25k, 90k) + [92k, 97k)) = 10k.
    # Step 2: [100k, 250k): the kernel launched at 150k ends at 250k > marker end 200k.
    # kernel [230k, 250k) = 20k; memset 1k; runtime 4k + 2k = 6k; dataloader [200k, 230k)
    # (the rest is under the kernel) = 30k; cpu_exec 60k - 6k runtime - 1k memset = 53k;
    # other = 150k - ([120k, 180k) + [200k, 250k) = 110k) = 40k.
    # Step 3: [250k, 260k): dataloader [250k, 255k) = 5k; cpu_exec 2k; other 3k.
    expected = [
        (0, 100_000, 50_000, 5_000, 0, 5_000, 20_000, 10_000, 10_000),
        (100_000, 250_000, 20_000, 0, 1_000, 6_000, 30_000, 53_000, 40_000),
        (250_000, 260_000, 0, 0, 0, 0, 5_000, 2_000, 3_000),
    ]
    for row, (start, end, *parts) in zip(rows, expected, strict=True):
        assert (row["start_ns"], row["end_ns"]) == (BASE + start, BASE + end)
        assert row["dur_ns"] == end - start
        assert [row[p] for p in PARTS] == parts
        assert sum(row[p] for p in PARTS) == row["dur_ns"]


def test_selection_view_runs(tmp_path: Path) -> None:
    trace = traceatlas.open(_store(tmp_path, _three_steps()))
    rows = _rows(trace.select(ranks=[0]))
    assert [r["step"] for r in rows] == [1, 2, 3]


def test_marker_regex_with_and_without_number(tmp_path: Path) -> None:
    b = _builder()
    b.annotation("train_step 7", 0, 50_000)
    b.annotation("train_step 8", 60_000, 100_000)
    b.cpu_op("aten::mm", 10_000, 20_000)                # cpu op 10k in step 7
    b.launch("k", 12_000, 1_000, 70_000, 40_000)        # launched in 7, kernel [70k, 110k)
    trace = traceatlas.open(_store(tmp_path, b))
    rows = _rows(trace, marker=r"^train_step (\d+)$")
    # Step 7: marker [0, 50k), its kernel ends at 110k -> window [0, 110k).
    # Step 8: marker [60k, 100k) starts inside step 7's window -> [110k, 110k), empty.
    assert [(r["step"], r["start_ns"] - BASE, r["end_ns"] - BASE) for r in rows] == [
        (7, 0, 110_000), (8, 110_000, 110_000)]
    # Step 7: kernel 40k; runtime [12k, 13k) = 1k; cpu_exec 10k - 1k = 9k; the marker
    # annotations themselves are not cpu_exec: other = 110k - 50k = 60k.
    seven = rows[0]
    assert [seven[p] for p in PARTS] == [40_000, 0, 0, 1_000, 0, 9_000, 60_000]
    assert [rows[1][p] for p in PARTS] == [0] * 7
    # No group in the regex: steps are numbered by their order on the rank.
    plain = _rows(trace, marker="^train_step")
    assert [r["step"] for r in plain] == [0, 1]


def test_ranks_are_separate(tmp_path: Path) -> None:
    builders = []
    for rank in range(2):
        b = _builder(rank, 2)
        b.step(4, rank * 10_000, 50_000 + rank * 10_000)        # rank 1 is 10k later
        b.launch("k", 1_000 + rank * 10_000, 1_000, 40_000 + rank * 30_000, 20_000)
        builders.append(b)
    store = traceatlas.ingest(write_multi_rank(tmp_path / "run", builders), tmp_path / "s")
    rows = _rows(traceatlas.open(store))
    # rank 0: marker [0, 50k), kernel [40k, 60k) -> [0, 60k); rank 1: marker [10k, 60k),
    # kernel [70k, 90k) -> [10k, 90k).
    assert [(r["rank"], r["step"], r["start_ns"] - BASE, r["end_ns"] - BASE,
             r["kernel_ns"]) for r in rows] == [(0, 4, 0, 60_000, 20_000),
                                               (1, 4, 10_000, 90_000, 20_000)]


def _cpu_only(tmp_path: Path) -> Path:
    b = _builder()
    b.cpu_op("aten::add", 0, 10_000)
    return _store(tmp_path, b)


def test_missing_steps_python_and_cli(tmp_path: Path) -> None:
    store = _cpu_only(tmp_path)
    with pytest.raises(MissingDataError, match="iteration markers"):
        registry.run("steps", traceatlas.open(store))
    result = CliRunner().invoke(app, ["analyze", "steps", str(store)])
    assert result.exit_code == 2
    assert "iteration markers" in result.output
    unmatched = CliRunner().invoke(app, ["analyze", "steps", str(store), "-p",
                                         "marker=^nothing$"])
    assert unmatched.exit_code == 2
    assert "marker" in unmatched.output


def test_cli_json(tmp_path: Path) -> None:
    import json

    store = _store(tmp_path, _three_steps())
    result = CliRunner().invoke(app, ["analyze", "steps", str(store), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["dur_ns"] for r in rows] == [100_000, 150_000, 10_000]
