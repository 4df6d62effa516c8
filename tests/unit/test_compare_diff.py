"""``traceatlas diff`` (``traceatlas.compare.diff``, ``diff_format``, ``cli/diff.py``) on
traces built in code: expected shifts worked out by hand from the builder's durations."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.compare.diff import diff_summaries, is_summary_file, metric_path
from traceatlas.compare.gate import parse_rule
from traceatlas.compare.summary import summarize, write_summary
from traceatlas.testing import TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
STEP = 1_000_000
GEMM = "void gemm_kernel<float, 128>(float*)"
GEMM_KEY = "gemm_kernel<float, #>"
RELU = "void relu_kernel<float>(float*)"


def _run(slow: float, extra: str) -> TraceBuilder:
    """8 steps of 1 ms; in step i (0..7): ``aten::mm`` [s+10k, s+500k) launching gemm
    over [s+100k, s+100k + d_i) with d_i = (100,000 + 1,000 i) * slow ns, relu over
    [s+600k, s+650k) (50 us, every step), and ``extra`` over [s+700k, s+720k)."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for i in range(8):
        s = (i + 1) * STEP
        b.step(i + 1, s, s + 900_000)
        b.cpu_op("aten::mm", s + 10_000, s + 500_000)
        b.launch(GEMM, s + 20_000, 5_000, s + 100_000, round((100_000 + 1_000 * i) * slow))
        b.launch(RELU, s + 520_000, 5_000, s + 600_000, 50_000)
        b.launch(extra, s + 540_000, 5_000, s + 700_000, 20_000)
    return b


def _summary(root: Path, b: TraceBuilder) -> dict[str, Any]:
    paths = write_multi_rank(root / "run", [b])
    return summarize(traceatlas.open(traceatlas.ingest(paths, root / "store")))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Baselines of BASE (gemm as built, ``old_kernel``) and NEW (gemm 30 % slower in
    every step, ``new_kernel`` instead of ``old_kernel``)."""
    root = tmp_path_factory.mktemp("diff")
    base = write_summary(_summary(root / "b", _run(1.0, "void old_kernel()")), root / "b.json")
    new = write_summary(_summary(root / "n", _run(1.3, "void new_kernel()")),
                        root / "n.json.gz")
    return base, new


def _load(path: Path) -> dict[str, Any]:
    from traceatlas.compare.summary import read_summary

    return read_summary(path)


def test_self_diff_nothing_significant(pair: tuple[Path, Path]) -> None:
    s = _load(pair[0])
    result = diff_summaries(s, s)
    assert result.changes and not any(c.significant for c in result.changes)
    assert all(c.abs_change_ns == 0 for c in result.changes)
    assert not result.added and not result.removed
    assert all(e.delta == 0 for e in result.efficiency if e.delta is not None)
    assert result.gate([parse_rule("kernel:+1%"), parse_rule("step:+1%")]) == []
    res = CliRunner().invoke(app, ["diff", str(pair[0]), str(pair[0]), "--fail-on", "kernel:+1%"])
    assert res.exit_code == 0, res.output
    assert "verdict: pass" in res.output


def test_slower_kernel_first_with_hand_shift(pair: tuple[Path, Path]) -> None:
    result = diff_summaries(_load(pair[0]), _load(pair[1]))
    first = result.changes[0]
    assert (first.kind, first.key) == ("kernel", GEMM_KEY)
    assert first.significant and first.base_names == [GEMM]
    # By hand: base d_i = 100,000 + 1,000 i, new 1.3 d_j; the pairwise differences
    # 30,000 + 1,300 j - 1,000 i are symmetric about j = i = 3.5: shift 31,050 ns; the
    # base median is 103,500 ns; 31,050 / 103,500 = 0.30.
    assert first.base_median_ns == 103_500
    assert first.abs_change_ns == pytest.approx(31_050, abs=2)
    assert first.rel_change == pytest.approx(0.30, rel=0.01)
    # every NEW value above every BASE value: exact two-sided p = 2 / C(16, 8)
    assert first.p_value == pytest.approx(2 / 12_870)
    assert first.base_count == 8 and first.new_count == 8
    relu = next(c for c in result.changes if c.key == "relu_kernel<float>")
    assert not relu.significant and relu.abs_change_ns == 0
    assert [(p.kind, p.key, p.total_ns) for p in result.added] == [
        ("kernel", "new_kernel", 8 * 20_000)]
    assert [(p.kind, p.key, p.total_ns) for p in result.removed] == [
        ("kernel", "old_kernel", 8 * 20_000)]


def test_gate_thresholds_and_exit_codes(pair: tuple[Path, Path]) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["diff", str(pair[0]), str(pair[1]), "--fail-on", "kernel:+10%"])
    assert res.exit_code == 1, res.output
    assert "FAIL" in res.output and GEMM_KEY in res.output
    res = runner.invoke(app, ["diff", str(pair[0]), str(pair[1]), "--fail-on", "kernel:+50%"])
    assert res.exit_code == 0, res.output
    # A raw (mangled-looking) name resolves to its key.
    res = runner.invoke(app, ["diff", str(pair[0]), str(pair[1]), "--fail-on",
                              f"kernel:{GEMM}:+10%", "-f", "json"])
    assert res.exit_code == 1
    assert json.loads(res.stdout)["violations"][0]["key"] == GEMM_KEY


def test_formats_parse(pair: tuple[Path, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["diff", str(pair[0]), str(pair[1]), "--fail-on", "kernel:+10%"]
    res = runner.invoke(app, [*args, "-f", "json"])
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "fail" and doc["violations"][0]["rule"] == "kernel:+10%"
    assert doc["violations"][0]["rel_change"] == pytest.approx(0.30, rel=0.01)
    top = doc["changes"][0]
    for name in ("kind", "key", "base_names", "new_names", "base_count", "new_count",
                 "base_median_ns", "new_median_ns", "abs_change_ns", "rel_change",
                 "p_value", "p_adjusted", "ci_low_ns", "ci_high_ns", "significant",
                 "testable"):
        assert name in top
    assert top["ci_low_ns"] <= top["abs_change_ns"] <= top["ci_high_ns"]
    assert {"kind", "key", "names", "total_ns"} <= set(doc["added"][0])
    assert doc["removed"][0]["key"] == "old_kernel"
    res = runner.invoke(app, [*args, "-f", "markdown"])
    assert "| kind | name | base median |" in res.stdout and "|---|" in res.stdout
    for rule, failed in (("kernel:+10%", True), ("kernel:+50%", False)):
        out = tmp_path / f"{failed}.xml"
        res = runner.invoke(app, ["diff", str(pair[0]), str(pair[1]), "--fail-on", rule,
                                  "-f", "junit", "-o", str(out)])
        assert res.exit_code == int(failed)
        root = ET.parse(out).getroot()
        cases = root.findall("./testsuite/testcase")
        assert [c.get("name") for c in cases] == [rule]
        assert (cases[0].find("failure") is not None) is failed
    res = runner.invoke(app, [*args, "-f", "table"])
    assert "verdict: FAIL" in res.stdout and "old_kernel" in res.stdout


def test_trace_and_its_baseline_same_verdict(pair: tuple[Path, Path],
                                             tmp_path: Path) -> None:
    runs = [write_multi_rank(tmp_path / n, [_run(f, "void old_kernel()")])[0].parent
            for n, f in (("b", 1.0), ("n", 1.3))]
    runner = CliRunner()
    res = runner.invoke(app, ["diff", str(runs[0]), str(runs[1]), "--fail-on",
                              "kernel:+10%", "-f", "json"])
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["violations"][0]["key"] == GEMM_KEY


def test_bad_input_one_line_exit_2(pair: tuple[Path, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    out = tmp_path / "never.xml"
    cases = [
        ([str(tmp_path / "absent.json"), str(pair[1])], "absent.json"),
        ([str(other), str(pair[1])], "other.json"),
        ([str(pair[0]), str(pair[1]), "--fail-on", "kernel:10%"], "--fail-on"),
        ([str(pair[0]), str(pair[1]), "--fail-on", "bogus:+5%"], "--fail-on"),
        ([str(pair[0]), str(pair[1]), "-f", "yaml"], "--format"),
        ([str(pair[0]), str(pair[1]), "--alpha", "2"], "--alpha"),
        ([str(pair[0]), str(pair[1]), "-o", str(tmp_path)], "directory"),
        ([str(pair[0]), str(pair[1]), "-o", str(pair[0])], "input"),
    ]
    for args, needle in cases:
        res = runner.invoke(app, ["diff", *args, "-f", "junit", "-o", str(out)]
                            if "-o" not in args and "-f" not in args else ["diff", *args])
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.output and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1, res.output
        assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".never")]


def test_efficiency_side_by_side_and_rules() -> None:
    def summary(lb: float, comm: float) -> dict[str, Any]:
        return {"ranks": [0], "rank_info": [{"rank": 0, "hosts": [], "pids": [1],
                                             "devices": [0]}],
                "iterations": {"source": "steps", "labels": [1, 2, 3]}, "total_ns": 30,
                "entities": {"step": [{"key": "ProfilerStep#", "names": [], "n_names": 1,
                                       "ns": [[10, 10, 10]], "count": [[1, 1, 1]]}]},
                "other": {}, "notes": [],
                "efficiency": [
                    ["run", "device", "device_parallel_efficiency", lb * comm, None, 0, "pe"],
                    ["run", "device", "device_load_balance", lb, "x", 1, "load balance"],
                    ["run", "device", "device_communication_efficiency", comm, "x", 1, "comm"],
                    ["run", "device", "device_runtime_ns", 5.0, None, 0, None]]}

    result = diff_summaries(summary(0.9, 0.8), summary(0.7, 0.75))
    assert [e.metric for e in result.efficiency] == [
        "device_parallel_efficiency", "device_load_balance", "device_communication_efficiency"]
    moved = result.moved_most()
    assert moved is not None and moved.metric == "device_load_balance"
    assert moved.delta == pytest.approx(0.7 - 0.9)
    # Both spellings of the metric reach it; the drop of 0.2 passes -0.05, not -0.5.
    for text in ("efficiency.device.load_balance:-0.05", "efficiency.device_load_balance:-0.05"):
        assert [v.name for v in result.gate([parse_rule(text)])] == ["device.load_balance"]
    assert result.gate([parse_rule("efficiency.device.load_balance:-0.5")]) == []
    result.gate([parse_rule("efficiency.device.nothing:-0.1")])
    assert [r.text for r in result.unmatched] == ["efficiency.device.nothing:-0.1"]
    assert metric_path("host", "device_offload_efficiency") == "host.device_offload"


def test_ranks_matched_by_number_with_notes(tmp_path: Path) -> None:
    def two(pid0: int, slow1: float) -> list[TraceBuilder]:
        out = []
        for rank in (0, 1):
            b = TraceBuilder(rank, 2, base_time_ns=BASE, pid=pid0 + rank,
                             profiler_markers=False)
            for i in range(6):
                s = (i + 1) * STEP
                b.step(i + 1, s, s + 900_000)
                d = 100_000 + 500 * i
                b.launch(GEMM, s + 10_000, 5_000, s + 100_000,
                         round(d * (slow1 if rank == 1 else 1.0)))
            out.append(b)
        return out

    base = summarize(traceatlas.open(traceatlas.ingest(
        write_multi_rank(tmp_path / "b", two(100, 1.0)), tmp_path / "bs")))
    new = summarize(traceatlas.open(traceatlas.ingest(
        write_multi_rank(tmp_path / "n", two(900, 1.5)), tmp_path / "ns")))
    result = diff_summaries(base, new)
    ranks = {c.key: c for c in result.changes if c.kind == "rank"}
    assert set(ranks) == {"0", "1"}
    assert ranks["0"].abs_change_ns == 0
    # rank 1: d_i = 100,000 + 500 i -> 1.5 d_j: shift at the centre 50,000 + 750*2.5 - 500*2.5
    assert ranks["1"].abs_change_ns == pytest.approx(50_625, abs=2)
    assert any("process ids differ" in n for n in result.notes)
    result.gate([parse_rule("rank:1:+20%")])
    assert result.unmatched == []
    fewer = dict(new, ranks=[0], rank_info=new["rank_info"][:1])
    fewer["entities"] = {k: [dict(e, ns=e["ns"][:1], count=e["count"][:1]) for e in v]
                         for k, v in new["entities"].items()}
    fewer["other"] = {k: dict(o, ns=o["ns"][:1], count=o["count"][:1])
                      for k, o in new["other"].items()}
    result = diff_summaries(base, fewer)
    assert any("BASE has 2 rank(s)" in n for n in result.notes)
    assert [(p.kind, p.key) for p in result.removed] == [("rank", "1")]


def test_is_summary_file(pair: tuple[Path, Path], tmp_path: Path) -> None:
    assert is_summary_file(pair[0]) and is_summary_file(pair[1])
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    assert not is_summary_file(tmp_path / "t.json")
    assert not is_summary_file(tmp_path)
