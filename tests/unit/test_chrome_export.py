"""Chrome Trace Event JSON export: valid JSON, expected events, rows for overlapping device
events, exact ns for epoch-sized times, round trip through the Kineto reader, CLI.

Expected values are worked out by hand from the builder calls (times in ns relative to
BASE) and checked with a plain ``json`` parse of the file (Decimal for ``ts``/``dur``).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.export import chrome
from traceatlas.export.chrome import ChromeExporter, export_category, micros
from traceatlas.export.registry import get_exporter
from traceatlas.model.categories import KINETO_CATEGORIES
from traceatlas.model.schema import CATEGORIES
from traceatlas.testing import TraceBuilder, write_multi_rank
from traceatlas.testing.compare import crossing_slices, interval_multisets

BASE = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _builder(rank: int = 0, world: int = 1) -> TraceBuilder:
    b = TraceBuilder(rank, world, base_time_ns=BASE, profiler_markers=False)
    b.step(1, 0, 200_000)
    b.cpu_op("aten::mm", 1_000, 9_000)
    # three kernels on stream 7: A [10, 50] us, B [20, 30] inside A, C [40, 70] crosses A
    b.launch("kernA", 2_000, 1_000, 10_000, 40_000)
    b.launch("kernB", 3_001, 1_000, 20_000, 10_000)
    b.launch("kernC", 4_002, 1_000, 40_000, 30_000)
    # odd ns everywhere: a memcpy at 100_001 ns lasting 12_345 ns on stream 9
    b.launch("Memcpy HtoD (Pageable -> Device)", 5_003, 1_000, 100_001, 12_345,
             kind="memcpy", nbytes=4096, stream=9)
    b.launch(NCCL, 6_004, 1_000, 120_007, 50_003, stream=20)
    b.instant("mark", 7_777)
    return b


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chrome")
    return traceatlas.ingest(_builder().write(root / "rank-0.json"), root / "store")


@pytest.fixture(scope="module")
def exported(store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("out") / "trace.json.gz"
    files = ChromeExporter().write(traceatlas.open(store), out)
    assert files == [out]
    with gzip.open(out, "rt") as fh:
        doc: dict[str, Any] = json.load(fh, parse_float=Decimal)
    return doc


def _ns(doc: dict[str, Any], us: Decimal) -> int:
    return int(Decimal(doc.get("baseTimeNanoseconds", 0)) + us * 1000)


def test_micros_is_exact_text() -> None:
    assert micros(1_700_000_000_123_456_789) == "1700000000123456.789"
    assert micros(1) == "0.001"
    assert micros(0) == "0.000"
    assert micros(-1) == "-0.001"
    assert micros(-1_500) == "-1.500"


def test_export_category_maps_back_to_the_same_category() -> None:
    assert export_category("kernel", "comm_kernel") == "kernel"
    assert export_category("user_annotation", "step") == "user_annotation"
    assert export_category("NVTX range", "nvtx") == "nvtx"
    assert export_category(None, "step") == "user_annotation"
    assert export_category("Trace", "other") == "Trace"
    for category in CATEGORIES:
        if category != "step":
            assert KINETO_CATEGORIES.get(export_category(None, category), "other") == category


def test_valid_json_with_expected_events(exported: dict[str, Any]) -> None:
    events = exported["traceEvents"]
    phases = Counter(e["ph"] for e in events)
    # 1 step, 1 cpu_op, 5 launches (runtime + device each) = 12 intervals
    assert phases["X"] == 12
    assert phases["i"] == 1
    assert phases["s"] == phases["f"] == 5  # one ac2g flow per launch
    assert exported["distributedInfo"]["rank"] == 0
    assert exported["distributedInfo"]["world_size"] == 1
    assert exported["traceatlas"]["ranks"] == [0]
    assert exported["traceatlas"]["source_format"] == "kineto"
    meta = {(e["name"], e["tid"]): e["args"] for e in events if e["ph"] == "M"}
    assert meta[("process_name", 0)] == {"name": "rank 0"}
    assert {e["pid"] for e in events} == {0}
    x = {e["name"]: e for e in events if e["ph"] == "X"}
    assert x["kernA"]["cat"] == "kernel"
    assert x[NCCL]["cat"] == "kernel"               # the reader makes it comm_kernel again
    assert x["ProfilerStep#1"]["cat"] == "user_annotation"
    assert x["kernA"]["args"]["correlation"] == 1
    assert x["kernA"]["args"]["stream"] == 7
    assert x["kernA"]["args"]["device"] == 0
    flows = {(e["ph"], e["id"]): e for e in events if e["ph"] in "sf"}
    assert flows[("f", 1)]["tid"] == x["kernA"]["tid"]
    assert flows[("f", 1)]["bp"] == "e"
    assert flows[("s", 1)]["tid"] == x["aten::mm"]["tid"]  # the launching host thread


def test_ns_exact_for_epoch_times(exported: dict[str, Any]) -> None:
    x = {e["name"]: e for e in exported["traceEvents"] if e["ph"] == "X"}
    memcpy = x["Memcpy HtoD (Pageable -> Device)"]
    assert _ns(exported, memcpy["ts"]) == BASE + 100_001
    assert int(memcpy["dur"] * 1000) == 12_345
    assert _ns(exported, x[NCCL]["ts"]) == BASE + 120_007
    assert int(x[NCCL]["dur"] * 1000) == 50_003
    instant = next(e for e in exported["traceEvents"] if e["ph"] == "i")
    assert _ns(exported, instant["ts"]) == BASE + 7_777


def test_absolute_epoch_text_is_exact() -> None:
    """No double rounding anywhere: the text is built from integers."""
    for ns in (1_700_000_000_000_000_001, 1_735_689_600_123_456_789):
        text = micros(ns)
        assert int(Decimal(text) * 1000) == ns


def test_overlapping_device_events_get_their_own_rows(exported: dict[str, Any]) -> None:
    events = exported["traceEvents"]
    x = {e["name"]: e for e in events if e["ph"] == "X"}
    # free rows: A row 0; B (inside A) row 1; C (crosses A, starts after B ended) row 1
    assert x["kernB"]["tid"] == x["kernC"]["tid"] != x["kernA"]["tid"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[x["kernC"]["tid"]] == names[x["kernA"]["tid"]] + " (row 1)"
    # the flow of kernel C ends on C's row
    assert next(e for e in events if e["ph"] == "f" and e["id"] == 3)["tid"] == \
        x["kernC"]["tid"]


def test_exported_slices_are_properly_nested_per_tid(exported: dict[str, Any]) -> None:
    assert crossing_slices(exported["traceEvents"]) == []


def test_properly_nested_check_detects_crossing() -> None:
    crossing = [{"ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": 10},
                {"ph": "X", "pid": 0, "tid": 1, "ts": 5, "dur": 10}]
    assert crossing_slices(crossing) == ["(0, 1): [5, 15] crosses"]


def test_round_trip_single_file(store: Path, tmp_path: Path) -> None:
    out = ChromeExporter().write(traceatlas.open(store), tmp_path / "t.json")[0]
    again = traceatlas.open(traceatlas.ingest(out, tmp_path / "again"))
    assert interval_multisets(again) == interval_multisets(traceatlas.open(store))
    expected_counts = {"step": 1, "cpu_op": 1, "runtime": 5, "kernel": 3, "memcpy": 1,
                       "comm_kernel": 1}
    assert {c: len(v) for (_, c), v in interval_multisets(again).items()} == expected_counts
    cols = ["correlation", "external_id", "device", "stream", "bytes"]
    def by_name(t: traceatlas.Trace) -> list[tuple[Any, ...]]:
        return t.intervals.select(pl.col("name").cast(pl.String), *cols).sort(
            "name", "correlation").collect().rows()
    assert by_name(again) == by_name(traceatlas.open(store))


def test_round_trip_split_ranks(tmp_path: Path) -> None:
    files = write_multi_rank(tmp_path / "raw", [_builder(0, 2), _builder(1, 2)])
    first = traceatlas.open(traceatlas.ingest(files, tmp_path / "a"))
    written = ChromeExporter().write(first, tmp_path / "split", split_ranks=True)
    assert [p.name for p in written] == ["rank-0.json.gz", "rank-1.json.gz"]
    with gzip.open(written[1], "rt") as fh:
        assert json.load(fh)["distributedInfo"]["rank"] == 1
    again = traceatlas.open(traceatlas.ingest(tmp_path / "split", tmp_path / "b"))
    assert again.ranks == [0, 1]
    assert interval_multisets(again) == interval_multisets(first)


def test_existing_directory_means_split(store: Path, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    written = ChromeExporter().write(traceatlas.open(store), tmp_path / "d")
    assert written == [tmp_path / "d" / "rank-0.json.gz"]


def test_nothing_left_on_error(store: Path, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(chrome, "_write_counters", boom)
    with pytest.raises(RuntimeError):
        ChromeExporter().write(traceatlas.open(store), tmp_path / "t.json.gz")
    with pytest.raises(RuntimeError):
        ChromeExporter().write(traceatlas.open(store), tmp_path / "split", split_ranks=True)
    assert list(tmp_path.iterdir()) == []


def test_registry_gives_the_chrome_exporter() -> None:
    assert isinstance(get_exporter("chrome"), ChromeExporter)


runner = CliRunner()


def test_cli_export(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    result = runner.invoke(app, ["export", str(store), "--to", "chrome", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sum(e["ph"] == "X" for e in json.loads(out.read_text())["traceEvents"]) == 12
    result = runner.invoke(app, ["export", str(store), "--to", "chrome", "--split-ranks",
                                 "-o", str(tmp_path / "dir")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "dir" / "rank-0.json.gz").is_file()


def test_cli_export_from_raw_trace_file(tmp_path: Path) -> None:
    raw = _builder().write(tmp_path / "rank-0.json")
    out = tmp_path / "t.json"
    result = runner.invoke(app, ["export", str(raw), "--to", "chrome", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sum(e["ph"] == "X" for e in json.loads(out.read_text())["traceEvents"]) == 12


@pytest.mark.parametrize(("args", "message"), [
    (["--to", "svg"], "unknown export format"),
    (["--to", "paraver", "--split-ranks"], "only for --to chrome"),
])
def test_cli_export_bad_input(store: Path, tmp_path: Path, args: list[str],
                              message: str) -> None:
    result = runner.invoke(app, ["export", str(store), "-o", str(tmp_path / "x"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_export_missing_input(tmp_path: Path) -> None:
    result = runner.invoke(app, ["export", str(tmp_path / "nope"), "--to", "chrome",
                                 "-o", str(tmp_path / "x.json")])
    assert result.exit_code == 2
    assert not (tmp_path / "x.json").exists()


@pytest.mark.filterwarnings("ignore::traceatlas.RankInferredWarning")
def test_counters_and_instants_round_trip(tmp_path: Path) -> None:
    """A hand-written Chrome file with counters, a global instant and a negative-free
    relative clock (no baseTimeNanoseconds): values and times come back unchanged."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2},
        {"ph": "C", "name": "mem", "pid": 1, "tid": 1, "ts": 2.25, "args": {"mem": 7.5}},
        {"ph": "C", "name": "mem", "pid": 1, "tid": 1, "ts": 3.001, "args": {"mem": 8}},
        {"ph": "i", "s": "g", "name": "go", "pid": 1, "tid": 1, "ts": 1.002},
    ]
    src = tmp_path / "c.json"
    src.write_text(json.dumps({"traceEvents": events}))
    first = traceatlas.open(traceatlas.ingest(src, tmp_path / "a"))
    out = ChromeExporter().write(first, tmp_path / "t.json")[0]
    doc = json.loads(out.read_text())
    assert "baseTimeNanoseconds" not in doc  # small times are written as they are
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [(e["ts"], e["args"]) for e in counters] == [(2.25, {"mem": 7.5}),
                                                         (3.001, {"mem": 8.0})]
    instant = next(e for e in doc["traceEvents"] if e["ph"] == "i")
    assert (instant["s"], instant["ts"], "cat" in instant) == ("g", 1.002, False)
    again = traceatlas.open(traceatlas.ingest(out, tmp_path / "b"))
    assert again.counters.select("ts_ns", pl.col("name").cast(pl.String), "value").sort(
        "ts_ns").collect().rows() == [(2_250, "mem", 7.5), (3_001, "mem", 8.0)]
    assert again.instants.select("ts_ns", "scope").collect().rows() == [(1_002, "g")]
    assert interval_multisets(again) == {(0, "cpu_op"): [(1_500, 3_500)]}
