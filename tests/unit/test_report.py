"""``traceatlas report`` and ``traceatlas demo``: ReportData from a small built trace (values
worked out by hand next to the builder calls), terminal rendering in one screen, a
self-contained HTML file, JSON output, and the demo. Fake ``efficiency`` / ``advisor``
results (registered in a throwaway module) exercise the tree and findings rendering
independently of those analyses."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.cli import report as report_cli
from traceatlas.cli.main import app
from traceatlas.report import data as report_data
from traceatlas.report import html, overview, results, terminal
from traceatlas.report.data import EfficiencyNode, Finding, ReportData, RunReport
from traceatlas.testing import Collective, TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_trace"

# A broken analysis only warns in the CLI; in these tests it must fail.
pytestmark = pytest.mark.filterwarnings("error:report.*failed:RuntimeWarning")


def _write_trace(directory: Path) -> Path:
    """Two ranks, ns after BASE. Steps 1 [0, 50k) and 2 [50k, 100k) on both ranks.

    rank 0: gemm [10k, 20k) stream 7, gemm [15k, 25k) stream 8 -> compute union [10k, 25k)
            = 15k; nccl [20k, 30k) -> device busy [10k, 30k) = 20k, comm not under a
            compute kernel [25k, 30k) = 5k; gemm [60k, 70k) in step 2 -> compute 25k, busy 30k.
    rank 1: gemm [10k, 14k) -> compute 4k; nccl [22k, 30k); gemm [60k, 64k) -> compute 8k,
            busy 4k + 8k + 4k = 16k.
    Trace span: first interval starts at 0 (the step markers), last ends at 100k.
    """
    coll = Collective("allreduce", 1024, 1024, dtype="Float", group_ranks=(0, 1), pg_name="0")
    b0 = TraceBuilder(0, 2, base_time_ns=BASE, profiler_markers=False)
    b1 = TraceBuilder(1, 2, base_time_ns=BASE, profiler_markers=False)
    for b in (b0, b1):
        b.step(1, 0, 50_000)
        b.step(2, 50_000, 100_000)
    b0.launch("gemm", 1_000, 500, 10_000, 10_000)
    b0.launch("gemm", 2_000, 500, 15_000, 10_000, stream=8)
    b0.launch(NCCL, 3_000, 500, 20_000, 10_000, stream=20, collective=coll)
    b0.launch("gemm", 51_000, 500, 60_000, 10_000)
    b1.launch("gemm", 1_000, 500, 10_000, 4_000)
    b1.launch(NCCL, 3_000, 500, 22_000, 8_000, stream=20, collective=coll)
    b1.launch("gemm", 51_000, 500, 60_000, 4_000)
    write_multi_rank(directory, [b0, b1])
    return directory


@pytest.fixture()
def trace_dir(tmp_path: Path) -> Path:
    return _write_trace(tmp_path / "run")


@pytest.fixture()
def trace(trace_dir: Path, tmp_path: Path) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(trace_dir, tmp_path / "store", align="start"))


# -- fake efficiency and advisor analyses (rendering tests) ------------------------------

FAKE_TREE = [  # scope, side, metric, value, parent, level
    ("run", "device", "device_parallel_efficiency", 0.42, None, 0),
    ("run", "device", "device_load_balance", 0.70, "device_parallel_efficiency", 1),
    ("run", "device", "device_communication_efficiency", 0.75, "device_parallel_efficiency", 1),
    ("run", "device", "device_orchestration_efficiency", 0.80, "device_parallel_efficiency", 1),
    ("run", "host", "host_parallel_efficiency", 0.91, None, 0),
    ("run", "host", "host_load_balance", 0.95, "host_parallel_efficiency", 1),
    ("run", "host", "host_communication_efficiency", 0.96, "host_parallel_efficiency", 1),
    ("step 1", "device", "device_load_balance", 0.5, "device_parallel_efficiency", 1),
]


class FakeEfficiency:
    name = "efficiency"
    description = "fake"
    params = ()
    requires = ()

    def run(self, trace: Any, params: Any) -> Result:
        table = pl.DataFrame(FAKE_TREE, schema=["scope", "side", "metric", "value", "parent",
                                                "level"], orient="row")
        per_rank = pl.DataFrame({"rank": [0, 1], "useful_ns": [25_000, 8_000],
                                 "comm_ns": [5_000, 8_000], "idle_ns": [70_000, 84_000]})
        return Result(table, extra={"per_rank": per_rank})


def fake_advise(trace: Any, *, path: str, context: Any, min_cost_pct: float) -> list[Any]:
    """Twelve load-imbalance findings, costliest first (in place of the advisor's rules)."""
    return [types.SimpleNamespace(
        rule="load_imbalance", statement=f"rank {i} runs gemm longest (finding {i + 1})",
        cost_ns=1_000_000 * (12 - i), evidence="rank 0: 25 us vs mean 16.5 us",
        next_step="balance the work", command="traceatlas analyze kernels X",
        severity="high" if i < 3 else "info", cause="load_imbalance", ranks=[i])
        for i in range(12)]


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the fake efficiency analysis and advisor findings for one test."""
    module = types.ModuleType("fake_report_analyses")
    module.FakeEfficiency = FakeEfficiency  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_report_analyses", module)
    monkeypatch.setitem(registry.ANALYSES, "efficiency",  # type: ignore[index]
                        "fake_report_analyses:FakeEfficiency")
    monkeypatch.setattr(results, "advise", fake_advise)


# -- ReportData --------------------------------------------------------------------------


def test_overview_numbers_by_hand(trace: traceatlas.Trace) -> None:
    act = overview.activity(trace)
    assert act.kind == "device"
    # window [0, 100k) in 10 bins of 10k: rank 0 busy [10k, 30k) and [60k, 70k);
    # rank 1 busy [10k, 14k), [22k, 30k), [60k, 64k).
    tl = overview.timeline(trace, act, (BASE, BASE + 100_000), bins=10)
    assert tl.bin_ns == 10_000 and tl.rows == ["rank 0", "rank 1"]
    assert tl.values[0] == [0, 1, 1, 0, 0, 0, 1, 0, 0, 0]
    assert tl.values[1] == [0, 0.4, 0.8, 0, 0, 0, 0.4, 0, 0, 0]
    times = overview.rank_times(trace, act, (BASE, BASE + 100_000))
    assert [(t.rank, t.useful_ns, t.comm_ns, t.idle_ns) for t in times] == [
        (0, 25_000, 5_000, 70_000),   # busy 30k
        (1, 8_000, 8_000, 84_000),    # busy 16k
    ]


def test_report_data_from_built_trace(trace: traceatlas.Trace) -> None:
    data = report_data.build([("run", trace)])
    run = data.runs[0]
    assert run.ranks == [0, 1] and run.span_ns == 100_000
    # kernels over both ranks: gemm 5 launches, 10k+10k+10k+4k+4k = 38k; nccl 2, 18k
    got = {k.name: (k.count, k.total_ns) for k in run.kernels}
    assert got == {"gemm": (5, 38_000), NCCL: (2, 18_000)}
    assert {h.name for h in run.histograms} == {"gemm", NCCL}
    gemm = next(h for h in run.histograms if h.name == "gemm")
    assert sum(b[2] for b in gemm.bins) == 5
    # steps: both ranks, steps 1 and 2, 50k each (device work ends inside the markers)
    assert [(s.rank, s.step, s.dur_ns) for s in run.steps] == [
        (0, 1, 50_000), (0, 2, 50_000), (1, 1, 50_000), (1, 2, 50_000)]
    assert run.timeline is not None and len(run.timeline.values) == 2
    # per-rank bars (efficiency per_rank, or the fallback): by hand in _write_trace,
    # idle = span 100k - busy
    assert [(b.useful_ns, b.comm_ns, b.idle_ns) for b in run.rank_bars] == [
        (25_000, 5_000, 70_000), (8_000, 8_000, 84_000)], run.rank_bars_source
    assert "efficiency" not in run.missing, run.missing
    # device tree (B.2) by hand: U = 25k, 8k; Active = 30k, 16k; T = 100k
    values = {n.metric: n.value for n in run.efficiency if n.side == "device"}
    assert values["device_load_balance"] == pytest.approx(33 / 50)  # sum U / (N max U)
    assert values["device_communication_efficiency"] == pytest.approx(25 / 30)
    assert values["device_orchestration_efficiency"] == pytest.approx(30 / 100)
    assert values["device_parallel_efficiency"] == pytest.approx(33 / 200)  # sum U / (N T)
    parents = {n.metric: n.parent for n in run.efficiency}
    assert parents["device_load_balance"] == "device_parallel_efficiency"
    assert not any(n.metric.endswith("_ns") for n in run.efficiency)
    json.dumps(data.to_dict())  # JSON-ready


def test_missing_sections_say_why(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.cpu_op("aten::add", 0, 10_000)  # host only: no kernels, no steps
    b.write(tmp_path / "host.json")
    trace = traceatlas.open(traceatlas.ingest(tmp_path / "host.json", tmp_path / "s"))
    run = report_data.build([("host", trace)]).runs[0]
    assert {"kernels", "steps"} <= set(run.missing)
    assert "kernel" in run.missing["kernels"] or "device" in run.missing["kernels"]
    page = html.render(ReportData("0", [run]))
    assert page.count("not available") >= 2


def test_fake_efficiency_and_findings_flow_through(trace: traceatlas.Trace,
                                                   fakes: None) -> None:
    run = report_data.build([("run", trace)]).runs[0]
    # run scope only (the "step 1" row is left out)
    assert [n.metric for n in run.efficiency] == [r[2] for r in FAKE_TREE[:-1]]
    assert run.rank_bars_source.startswith("efficiency")
    assert [(b.label, b.useful_ns) for b in run.rank_bars] == [("rank 0", 25_000),
                                                              ("rank 1", 8_000)]
    assert len(run.findings) == report_data.TOP_FINDINGS
    assert run.findings[0].statement.startswith("rank 0 runs gemm")


# -- rendering ---------------------------------------------------------------------------


def _fake_run(findings: int = 12) -> RunReport:
    run = RunReport("my-run", "/tmp/store", "kineto", [0, 1], BASE, 100_000_000)
    run.efficiency = [EfficiencyNode(side, m, v, p, lvl)
                      for _, side, m, v, p, lvl in FAKE_TREE[:-1]]
    run.findings = [Finding(i + 1, "rule", f"statement number {i + 1} about rank {i}",
                            (20 - i) * 1_000_000, "evidence", "try this",
                            f"traceatlas analyze kernels PATH --ranks {i}",
                            "high" if i < 2 else "info") for i in range(findings)]
    return run


def test_terminal_fits_one_screen_with_tree_and_findings() -> None:
    text = terminal.to_text(ReportData("0", [_fake_run()]), width=100)
    lines = text.rstrip("\n").split("\n")
    assert len(lines) <= terminal.MAX_LINES
    assert "load balance" in text and "orchestration efficiency" in text
    assert "0.42" in text and "statement number 1 about rank 0" in text
    assert "traceatlas analyze kernels PATH --ranks 0" in text
    # children are indented under their parent
    parent = next(line for line in lines if "parallel efficiency" in line)
    child = next(line for line in lines if "load balance" in line)
    assert len(child) - len(child.lstrip()) > len(parent) - len(parent.lstrip())


def test_terminal_colours_efficiency_values() -> None:
    text = terminal.to_text(ReportData("0", [_fake_run()]), color=True)
    assert "\x1b[" in text  # ANSI styles
    assert terminal.colour(0.42) == "red" and terminal.colour(0.7) == "yellow"
    assert terminal.colour(0.9) == "green"


def test_terminal_several_runs_fits() -> None:
    runs = [_fake_run(), _fake_run(), _fake_run()]
    for i, run in enumerate(runs):
        run.name, run.ranks = f"r{i}", list(range(2 ** i))
    data = ReportData("0", runs,
                      scalability=[{"run": f"r{i}", "ranks": 2 ** i, "global_efficiency": 0.5}
                                   for i in range(3)])
    text = terminal.to_text(data)
    assert len(text.rstrip("\n").split("\n")) <= terminal.MAX_LINES
    assert "Scalability across 3 runs" in text and "global efficiency" in text


def test_html_is_self_contained(trace: traceatlas.Trace, fakes: None) -> None:
    page = html.render(report_data.build([("run", trace)]))
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page, re.I)
    assert not re.search(r"<(script|link|img|iframe)\b", page, re.I)
    assert "@import" not in page
    assert page.count("<svg") >= 4  # rank bars, timeline, >= 1 histogram, steps
    assert 'class="efftree"' in page and "orchestration efficiency" in page
    assert "rank 0 runs gemm longest" in page


# -- CLI ---------------------------------------------------------------------------------


def test_cli_report_json_and_html(trace_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(trace_dir), "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.splitlines()[0] if res.stdout.startswith("{") else
                     res.stdout[res.stdout.index("{"):].splitlines()[0])
    assert [r["ranks"] for r in doc["runs"]] == [[0, 1]]
    run = doc["runs"][0]
    assert {k["name"]: k["count"] for k in run["kernels"]} == {"gemm": 5, NCCL: 2}
    assert len(run["steps"]) == 4
    assert set(run) >= {"efficiency", "findings", "rank_bars", "timeline", "missing"}
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_cli_report_table(trace_dir: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(trace_dir)])
    assert res.exit_code == 0, res.output
    assert "Efficiency" in res.stdout and "Top findings" in res.stdout


def test_cli_report_several_runs(trace_dir: Path, tmp_path: Path) -> None:
    other = _write_trace(tmp_path / "run2")
    res = CliRunner().invoke(app, ["report", str(trace_dir), str(other), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):].splitlines()[0])
    assert len(doc["runs"]) == 2
    # Two identical 2-rank runs: the same rank count is a comparison, not a scaling
    # study (no strong/weak, no ratio); computational scalability and speedup against
    # run 1 are 1 and global efficiency equals each run's parallel efficiency.
    rows = doc["scalability"]
    assert [r["ranks"] for r in rows] == [2, 2]
    assert doc["runs_mode"] == "comparison"
    for r in rows:
        assert r["scaling"] == "comparison" and r["scaling_ratio"] is None
        assert r["computational_scalability"] == pytest.approx(1.0)
        assert r["speedup"] == pytest.approx(1.0)
        assert r["global_efficiency"] == pytest.approx(r["parallel_efficiency"])


def test_cli_report_bad_format(trace_dir: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(trace_dir), "--format", "csv"])
    assert res.exit_code == 2
    assert "csv" in res.output


def test_demo_writes_html_from_repo_sample(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["demo"])
    assert res.exit_code == 0, res.output
    assert "from the repository" in res.output
    page = (tmp_path / "demo-report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page


def test_demo_without_repo_generates_the_sample(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_cli, "REPO_SAMPLE", tmp_path / "nowhere")
    out = tmp_path / "d.html"
    res = CliRunner().invoke(app, ["demo", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "generated" in res.output
    assert out.read_text().count("<svg") >= 4
