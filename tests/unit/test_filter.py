"""Selection parsers, ``filter_store`` and the ``filter`` command.

The trace is built here with TraceBuilder; every expected count is worked out by hand from
the builder calls below (times in ns relative to BASE), never copied from library output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.errors import InputError
from traceatlas.ops.filter_store import filter_store
from traceatlas.ops.select import (
    Selection,
    WindowSpec,
    check_regex,
    parse_categories,
    parse_duration,
    parse_ranks,
    parse_window,
)
from traceatlas.testing import TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
MS = 1_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_SMALL = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


# -- parsers -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "ns"), [
    ("5ms", 5_000_000), ("250us", 250_000), ("1.5s", 1_500_000_000), ("100ns", 100),
    ("100", 100), (" 2 ms ", 2_000_000), ("0.000001s", 1_000), (".5us", 500), ("0", 0),
])
def test_parse_duration(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "ms", "5 m", "-1ms", "1e3", "5msec", "1.2.3s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(InputError, match="bad duration"):
        parse_duration(text, "--min-dur")


def test_parse_ranks() -> None:
    assert parse_ranks("0,3-5") == (0, 3, 4, 5)
    assert parse_ranks("7") == (7,)
    assert parse_ranks("5-5, 2 ,1-2") == (1, 2, 5)
    for bad in ("", "a", "1,", "5-3", "-1", "1-2-3"):
        with pytest.raises(InputError, match="--ranks"):
            parse_ranks(bad)


def test_parse_window_relative_absolute_and_open_sides() -> None:
    assert parse_window("1.5s:2s") == WindowSpec(1_500_000_000, 2_000_000_000)
    assert parse_window(":500ms") == WindowSpec(None, 500_000_000)
    assert parse_window("2ms:") == WindowSpec(2_000_000, None)
    spec = parse_window("@1700000000000000000:@1700000000500000000")
    assert spec == WindowSpec(BASE, BASE + 500_000_000, True, True)
    assert not spec.needs_trace_start
    assert spec.resolve(123) == (BASE, BASE + 500_000_000)
    mixed = parse_window("@1700000000000000000:1s")
    assert mixed.needs_trace_start
    assert mixed.resolve(10) == (BASE, 10 + 1_000_000_000)
    assert parse_window("1ms:2ms").resolve(BASE) == (BASE + MS, BASE + 2 * MS)


@pytest.mark.parametrize(("text", "problem"), [
    ("1s", "START:END"), ("1s:2s:3s", "START:END"), (":", "both sides are empty"),
    ("2s:1s", "end is before start"), ("@abc:", "integer epoch ns"), ("x:1s", "bad duration"),
])
def test_parse_window_rejects(text: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        parse_window(text)


def test_parse_categories() -> None:
    assert parse_categories(["kernel,comm_kernel", "cpu_op"]) == (
        "kernel", "comm_kernel", "cpu_op")
    with pytest.raises(InputError, match=r"unknown category 'kernels' \(valid: cpu_op, "):
        parse_categories(["kernels"])


def test_check_regex() -> None:
    assert check_regex("^aten::") == "^aten::"
    with pytest.raises(InputError, match="bad regular expression"):
        check_regex("(")


# -- the trace ---------------------------------------------------------------------------


def _write_trace(directory: Path) -> list[Path]:
    """Rank 0: 10 intervals, 2 instants, 3 flows; rank 1: 7 intervals, 2 flows."""
    r0 = TraceBuilder(0, 2, base_time_ns=BASE, profiler_markers=False)
    r0.step(1, 0, 10 * MS)                                       # step   [0, 10] ms
    r0.step(2, 10 * MS, 20 * MS)                                 # step   [10, 20]
    r0.cpu_op("aten::mm", 1 * MS, 2 * MS)                        # cpu_op [1, 2]
    r0.launch("void gemm()", 1_100_000, 100_000, 3 * MS, 4 * MS)  # runtime, kernel [3, 7]
    r0.cpu_op("nccl:all_reduce", 11 * MS, 12 * MS)               # cpu_op [11, 12]
    r0.launch(NCCL, 11_100_000, 100_000, 12 * MS, 6 * MS, stream=20)        # comm [12, 18]
    r0.launch(NCCL_SMALL, 15 * MS, 50_000, 19 * MS, 2 * MS, stream=20)      # comm [19, 21]
    r0.instant("mark", 5 * MS)
    r0.instant("mark", 15 * MS)
    r1 = TraceBuilder(1, 2, base_time_ns=BASE, profiler_markers=False)
    r1.step(1, 0, 10 * MS)
    r1.step(2, 10 * MS, 20 * MS)
    r1.cpu_op("aten::add", 2 * MS, 2_500_000)                    # cpu_op [2, 2.5]
    # comm [11, 18]: ends with rank 0's, so clock alignment leaves rank 1 where it is
    r1.launch(NCCL, 10_500_000, 100_000, 11 * MS, 7 * MS, stream=20)
    r1.launch("void tail()", 19_500_000, 100_000, 21 * MS, 1 * MS)  # kernel [21, 22], step 2
    return write_multi_rank(directory, [r0, r1])


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    root = tmp_path_factory.mktemp("filter")
    files = _write_trace(root / "raw")
    return traceatlas.open(traceatlas.ingest(files, root / "store"))


def _counts(store: Path | traceatlas.Trace) -> dict[str, Any]:
    t = store if isinstance(store, traceatlas.Trace) else traceatlas.open(store)
    per_rank = (t.intervals.group_by("rank").agg(pl.len()).sort("rank").collect())
    return {
        "intervals": dict(per_rank.iter_rows()),
        "instants": t.instants.select(pl.len()).collect().item(),
        "flows": t.flows.select(pl.len()).collect().item(),
    }


def _sel(trace: traceatlas.Trace, **kw: Any) -> Selection:
    return Selection(**kw).resolve(trace)


def _kept(trace: traceatlas.Trace, sel: Selection) -> dict[int, int]:
    frame = sel.resolve(trace).apply(trace.intervals, "intervals")
    return dict(frame.group_by("rank").agg(pl.len()).sort("rank").collect().iter_rows())


def test_the_trace_as_built(trace: traceatlas.Trace) -> None:
    assert _counts(trace) == {"intervals": {0: 10, 1: 7}, "instants": 2, "flows": 5}


@pytest.mark.parametrize(("kw", "expected"), [
    ({"categories": ("comm_kernel",)}, {0: 2, 1: 1}),
    ({"categories": ("comm_kernel",), "min_dur_ns": 5 * MS}, {0: 1, 1: 1}),
    ({"name_regex": "^aten::"}, {0: 1, 1: 1}),
    ({"name_regex": "nccl"}, {0: 3, 1: 1}),      # cpu_op nccl:all_reduce + NCCL kernels
    ({"min_dur_ns": 5 * MS}, {0: 3, 1: 3}),      # 4 steps (10 ms), comm 6 ms, comm 7 ms
    ({"min_dur_ns": 4 * MS}, {0: 4, 1: 3}),      # + gemm (4 ms, bound inclusive)
    ({"ranks": (1,)}, {1: 7}),
    # [2.5, 3.5] ms: step 1 of both, gemm [3, 7]; rank 1's aten::add ends at 2.5 ms
    ({"window": (BASE + 2_500_000, BASE + 3_500_000)}, {0: 2, 1: 2}),
    # from 15 ms: r0 step 2, runtime at 15 ms, comm [12, 18], comm [19, 21];
    # r1 step 2, comm [11, 18], runtime at 19.5 ms, kernel [21, 22]
    ({"window": (BASE + 15 * MS, None)}, {0: 4, 1: 4}),
    ({"window": (BASE + 3 * MS, BASE + 3 * MS)}, {0: 2, 1: 1}),
    # step 2 = [10, 20) ms on both ranks; step 1 ends at 10 ms (not in); r1's tail kernel
    # runs after the step but was launched in it (step column 2)
    ({"step": 2}, {0: 6, 1: 5}),
    ({"step": 1}, {0: 4, 1: 2}),
    ({"step": 2, "categories": ("kernel",)}, {1: 1}),
    ({"categories": ("comm_kernel",), "ranks": (0,), "window": (BASE + 11 * MS, None)},
     {0: 2}),
    ({"categories": ("comm_kernel",), "ranks": (0,), "window": (BASE + 11 * MS, None),
      "min_dur_ns": 5 * MS}, {0: 1}),
])
def test_selection_apply(trace: traceatlas.Trace, kw: dict[str, Any],
                         expected: dict[int, int]) -> None:
    assert _kept(trace, Selection(**kw)) == expected


def test_selection_other_tables(trace: traceatlas.Trace) -> None:
    def rows(sel: Selection, table: str) -> int:
        return int(sel.resolve(trace).apply(trace.scan(table), table).select(pl.len())
                   .collect().item())

    # instants at 5 ms and 15 ms (rank 0)
    assert rows(Selection(window=(BASE + 15 * MS, None)), "instants") == 1
    assert rows(Selection(step=1), "instants") == 1
    assert rows(Selection(ranks=(1,)), "instants") == 0
    # flows (launch -> device start): r0 [1.1, 3], [11.1, 12], [15, 19]; r1 [10.5, 11],
    # [19.5, 21] ms
    assert rows(Selection(window=(BASE + 2_500_000, BASE + 3_500_000)), "flows") == 1
    assert rows(Selection(window=(BASE + 11 * MS, BASE + 14 * MS)), "flows") == 2
    assert rows(Selection(ranks=(1,)), "flows") == 2
    assert rows(Selection(ranks=(1,)), "tracks") == rows(Selection(), "tracks") - rows(
        Selection(ranks=(0,)), "tracks")


def test_step_unknown_and_unresolved(trace: traceatlas.Trace) -> None:
    with pytest.raises(InputError, match=r"no step 9 in the trace \(steps: 1, 2\)"):
        Selection(step=9).resolve(trace)
    with pytest.raises(ValueError, match="resolve"):
        Selection(step=1).apply(trace.intervals, "intervals")


# -- filter_store ------------------------------------------------------------------------


def test_filter_store_writes_a_valid_smaller_store(trace: traceatlas.Trace,
                                                   tmp_path: Path) -> None:
    sel = Selection(ranks=(1,), categories=("comm_kernel", "kernel"))
    out = filter_store(trace, sel, tmp_path / "f", spec={"ranks": "1"})
    small = traceatlas.open(out)
    assert small.ranks == [1]
    assert _counts(small) == {"intervals": {1: 2}, "instants": 0, "flows": 2}
    assert small.manifest["filtered_from"] == str(trace.path.resolve())
    assert small.manifest["filter"]["spec"] == {"ranks": "1"}
    assert small.manifest["filter"]["selection"]["categories"] == ["comm_kernel", "kernel"]
    assert [s["rank"] for s in small.manifest["sources"]] == [1]
    # columns and types are the canonical ones; values are unchanged
    kept = small.intervals.with_columns(pl.col("name").cast(pl.String)).sort("start_ns")
    got = kept.select("name", "start_ns", "end_ns", "stream").collect().rows()
    assert got == [(NCCL, BASE + 11 * MS, BASE + 18 * MS, 20),
                   ("void tail()", BASE + 21 * MS, BASE + 22 * MS, 7)]
    assert small.intervals.collect_schema() == trace.intervals.collect_schema()
    assert small.sql("SELECT count(*) AS n FROM tracks")["n"][0] > 0


def test_filter_store_refuses_to_overwrite_its_input(trace: traceatlas.Trace) -> None:
    with pytest.raises(InputError, match="input store"):
        filter_store(trace, Selection(), trace.path)


def test_filter_store_unknown_ranks(trace: traceatlas.Trace, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"none of the ranks \[5\]"):
        filter_store(trace, Selection(ranks=(5,)), tmp_path / "f")
    assert not (tmp_path / "f").exists()


# -- CLI ---------------------------------------------------------------------------------

runner = CliRunner()


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_cli_filter_each_option(trace: traceatlas.Trace, tmp_path: Path) -> None:
    cases: list[tuple[list[str], dict[int, int]]] = [
        (["--category", "comm_kernel", "--min-dur", "5ms"], {0: 1, 1: 1}),
        (["-c", "comm_kernel", "-c", "kernel"], {0: 3, 1: 2}),
        (["--name", "^void"], {0: 1, 1: 1}),
        (["--ranks", "0"], {0: 10}),
        (["--window", "2.5ms:3.5ms"], {0: 2, 1: 2}),
        (["--window", f"@{BASE + 15 * MS}:"], {0: 4, 1: 4}),
        (["--step", "2"], {0: 6, 1: 5}),
    ]
    for i, (opts, expected) in enumerate(cases):
        out = tmp_path / f"f{i}"
        result = runner.invoke(app, ["filter", str(trace.path), "-o", str(out), *opts])
        assert result.exit_code == 0, (opts, result.output)
        assert _counts(out)["intervals"] == expected, opts
        info = runner.invoke(app, ["info", str(out), "--format", "json"])
        assert info.exit_code == 0, info.output
        assert json.loads(info.output)["intervals"] == sum(expected.values())


@pytest.mark.parametrize(("opts", "message"), [
    (["--name", "("], "bad regular expression"),
    (["--category", "kernels"], "unknown category 'kernels'"),
    (["--min-dur", "5 minutes"], "bad duration"),
    (["--ranks", "3-1"], "bad rank range"),
    (["--ranks", "7"], "rank 7 is not in this store (ranks 0-1)"),
    (["--window", "1s"], "START:END"),
    (["--step", "9"], "no step 9"),
])
def test_cli_filter_bad_input(trace: traceatlas.Trace, tmp_path: Path, opts: list[str],
                              message: str) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["filter", str(trace.path), "-o", str(out), *opts])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()
    assert _leftovers(tmp_path) == []


def test_cli_filter_then_export(trace: traceatlas.Trace, tmp_path: Path) -> None:
    """"Collectives longer than 5 ms, to Paraver" in two commands (and to Chrome)."""
    small = tmp_path / "coll"
    result = runner.invoke(app, ["filter", str(trace.path), "-o", str(small),
                                 "--category", "comm_kernel", "--min-dur", "5ms"])
    assert result.exit_code == 0, result.output
    chrome = tmp_path / "coll.json"
    result = runner.invoke(app, ["export", str(small), "--to", "chrome", "-o", str(chrome)])
    assert result.exit_code == 0, result.output
    events = json.loads(chrome.read_text())["traceEvents"]
    assert sorted(e["dur"] for e in events if e["ph"] == "X") == [6000.0, 7000.0]
    prv = tmp_path / "coll.prv"
    result = runner.invoke(app, ["export", str(small), "--to", "paraver", "-o", str(prv)])
    assert result.exit_code == 0, result.output
    assert prv.is_file()


def test_selection_category_name_and_duration_on_instants_counters_messages(
    trace: traceatlas.Trace,
) -> None:
    """Instants have their own category (Kineto's cpu_instant_event is not in
    KINETO_CATEGORIES, so it is ``other``); counters are ``counter`` and messages
    ``message``; neither has a duration, so --min-dur drops instants and counters."""

    def rows(sel: Selection, frame: pl.LazyFrame, table: str) -> int:
        return int(sel.apply(frame, table).select(pl.len()).collect().item())

    inst = trace.scan("instants")
    assert rows(Selection(categories=("kernel",)), inst, "instants") == 0
    assert rows(Selection(categories=("other", "kernel")), inst, "instants") == 2
    assert rows(Selection(name_regex="^mark$"), inst, "instants") == 2
    assert rows(Selection(name_regex="nomatch"), inst, "instants") == 0
    assert rows(Selection(min_dur_ns=1), inst, "instants") == 0
    assert rows(Selection(min_dur_ns=0), inst, "instants") == 2

    counters = pl.LazyFrame({"rank": [0, 0, 1], "track_id": [1, 1, 1],
                             "ts_ns": [BASE, BASE + MS, BASE], "name": ["sm", "dram", "sm"],
                             "value": [1.0, 2.0, 3.0]})
    assert rows(Selection(categories=("counter",)), counters, "counters") == 3
    assert rows(Selection(categories=("kernel",)), counters, "counters") == 0
    assert rows(Selection(name_regex="^sm$"), counters, "counters") == 2
    assert rows(Selection(min_dur_ns=5), counters, "counters") == 0
    assert rows(Selection(ranks=(1,), categories=("counter",)), counters, "counters") == 1

    messages = pl.LazyFrame({"rank": [0], "src_rank": [0], "dst_rank": [1],
                             "send_start_ns": [BASE], "send_end_ns": [BASE + 1],
                             "recv_start_ns": [BASE], "recv_end_ns": [BASE + 2]})
    assert rows(Selection(categories=("message",)), messages, "messages") == 1
    assert rows(Selection(categories=("mpi",)), messages, "messages") == 0
    assert rows(Selection(name_regex="x", min_dur_ns=5), messages, "messages") == 1
    assert parse_categories(["counter,message"]) == ("counter", "message")
