"""``traceatlas trend`` (``compare/trend.py``, ``trend_format.py``, ``trend_plot.py``,
``cli/trend.py``) on summaries of traces built here: runs 1-3 equal up to a seeded +-1 %
jitter of one kernel, run 4 with that kernel 20 % longer. Expected medians are computed by
hand (``statistics.median``) from the durations the test wrote."""

from __future__ import annotations

import json
import random
import statistics
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.compare.summary import read_summary, summarize, write_summary
from traceatlas.compare.trend import parse_threshold, trend
from traceatlas.testing import TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
STEP = 1_000_000
STEPS = 8
GEMM = "void gemm_kernel<float, 128>(float*)"
GEMM_KEY = "gemm_kernel<float, #>"
RELU = "void relu_kernel<float>(float*)"


def _durations(run: int) -> list[int]:
    """gemm's duration per step: 100 us +- 1 % (seed = run), x 1.2 in run 4."""
    rng = random.Random(run)
    factor = 1.2 if run == 4 else 1.0
    return [round(100_000 * (1 + rng.uniform(-0.01, 0.01)) * factor) for _ in range(STEPS)]


def _builder(run: int) -> TraceBuilder:
    """Step i: marker [s, s+900k); ``forward`` annotation [s+5k, s+800k); ``aten::mm``
    [s+10k, s+500k) launching relu (50 us at s+600k); ``aten::addmm`` [s+810k, s+840k)
    launching gemm at s+850k for d_i ns, so the step ends with gemm: 850 us + d_i."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for i, d in enumerate(_durations(run)):
        s = (i + 1) * STEP
        b.step(i + 1, s, s + 900_000)
        b.annotation("forward", s + 5_000, s + 800_000)
        b.cpu_op("aten::mm", s + 10_000, s + 500_000)
        b.launch(RELU, s + 20_000, 5_000, s + 600_000, 50_000)
        b.cpu_op("aten::addmm", s + 810_000, s + 840_000)
        b.launch(GEMM, s + 815_000, 5_000, s + 850_000, d)
    return b


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with run-1.json ... run-4.json.gz (mixed plain and gzip)."""
    root = tmp_path_factory.mktemp("trend")
    out = root / "baselines"
    out.mkdir()
    for run in range(1, 5):
        paths = write_multi_rank(root / f"t{run}", [_builder(run)])
        summary = summarize(traceatlas.open(traceatlas.ingest(paths, root / f"s{run}")))
        write_summary(summary, out / (f"run-{run}.json" + (".gz" if run % 2 == 0 else "")))
    return out


def _files(runs: Path) -> list[Path]:
    return [runs / "run-1.json", runs / "run-2.json.gz", runs / "run-3.json",
            runs / "run-4.json.gz"]


def _result(runs: Path, **kw: Any) -> Any:
    return trend([(f.name, read_summary(f)) for f in _files(runs)], **kw)


def test_change_point_at_run_4_only_and_hand_medians(runs: Path) -> None:
    result = _result(runs)
    flagged = [(i, f.kind, f.key) for i, f, _ in result.change_points()]
    assert flagged == [(3, "kernel", GEMM_KEY)]
    gemm = next(f for f in result.figures if f.key == GEMM_KEY)
    step = next(f for f in result.figures if f.kind == "step")
    for run, (g, s) in enumerate(zip(gemm.points, step.points, strict=True), start=1):
        d = _durations(run)
        assert g.value == pytest.approx(statistics.median(d), abs=0.5)
        # the step ends when gemm does: 850 us + d_i
        assert s.value == pytest.approx(850_000 + statistics.median(d), abs=0.5)
        assert s.n == g.n == STEPS
    assert gemm.points[0].change is None
    assert gemm.points[3].change == pytest.approx(0.20, abs=0.02)
    # the step moved by ~2 %, significantly, but stays under the 5 % threshold
    assert step.points[3].p_adjusted is not None and step.points[3].p_adjusted < 0.05
    assert step.points[3].change == pytest.approx(
        (statistics.median(_durations(4)) - statistics.median(_durations(3))) / (
            850_000 + statistics.median(_durations(3))), abs=0.005)
    assert not step.points[3].change_point
    relu = next(f for f in result.figures if f.kind == "kernel" and "relu" in f.key)
    assert [p.value for p in relu.points] == [50_000] * 4
    assert {f.key for f in result.figures if f.kind == "op"} == {"aten::mm", "aten::addmm"}


def test_threshold_and_top(runs: Path) -> None:
    assert _result(runs, threshold=0.25).change_points() == []
    few = _result(runs, top=1)
    assert [f.key for f in few.figures if f.kind == "kernel"] == [GEMM_KEY]  # 100 > 50 us


def _fake(samples: list[int]) -> dict[str, Any]:
    """A minimal summary dict: one rank, one step entity with ``samples``."""
    return {"ranks": [0], "iterations": {"source": "steps", "labels": list(range(len(samples)))},
            "entities": {"step": [{"key": "ProfilerStep#", "ns": [samples]}]},
            "efficiency": None}


def test_large_change_untestable_or_insignificant_is_not_flagged() -> None:
    # 3 vs 3 values, every new value far above: the smallest two-sided p is 2/C(6,3) = 0.1
    result = trend([("a", _fake([100, 101, 102])), ("b", _fake([200, 201, 202]))])
    point = result.figures[0].points[1]
    assert point.p_adjusted == pytest.approx(0.1)
    assert not point.change_point and point.change == pytest.approx(1.0, abs=0.02)
    # 2 values a side: reported, never tested
    result = trend([("a", _fake([100, 101])), ("b", _fake([200, 201]))])
    assert result.figures[0].points[1].p_adjusted is None
    assert not result.change_points()


def test_parse_threshold() -> None:
    assert parse_threshold("5%") == pytest.approx(0.05)
    assert parse_threshold("12.5") == pytest.approx(0.125)
    for bad in ("-5%", "five", "5%%", ""):
        with pytest.raises(traceatlas.errors.InputError):
            parse_threshold(bad)


def test_cli_directory_order_and_formats(runs: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["trend", str(runs), "-f", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["label"] for r in doc["runs"]] == ["run-1", "run-2", "run-3", "run-4"]
    assert doc["order"].startswith("by file name")
    assert [(c["run"], c["key"]) for c in doc["change_points"]] == [(3, GEMM_KEY)]
    res = runner.invoke(app, ["trend", *map(str, reversed(_files(runs))), "-f", "markdown"])
    assert res.exit_code == 0, res.output
    assert "| figure | 1: run-4 | 2: run-3 |" in res.stdout  # the order given
    res = runner.invoke(app, ["trend", *map(str, _files(runs))])
    assert res.exit_code == 0, res.output
    assert "change point at run 4 (run-4): kernel " + GEMM_KEY in res.output


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_html_page_self_contained_with_one_ring(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "trend.html"
    res = CliRunner().invoke(app, ["trend", *map(str, _files(runs)), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = _Page()
    page.feed(out.read_text())
    tags = [t for t, _ in page.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags
    assert not [a for _, a in page.tags for k, v in a.items()
                if k in ("src", "href") and v and "//" in v]
    n_figures = len(_result(runs).figures)
    assert tags.count("svg") == n_figures
    rings = [a for t, a in page.tags if t == "circle" and a.get("class") == "change-point"]
    assert len(rings) == 1
    cells = [a for t, a in page.tags if t == "td" and a.get("class") == "change-point"]
    assert len(cells) == 1


def _write(path: Path, summary: dict[str, Any]) -> Path:
    return write_summary(summary, path)


def test_bad_input_exit_2_one_line(runs: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    first = _files(runs)[0]
    out = tmp_path / "t.html"

    def fails(*args: str) -> str:
        res = runner.invoke(app, ["trend", *args, "-o", str(out)])
        assert res.exit_code == 2, res.output
        assert not out.exists()
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.output
        return lines[0]

    assert "at least 2 summaries" in fails(str(first))
    not_summary = tmp_path / "x.json"
    not_summary.write_text('{"traceEvents": []}')
    assert "x.json" in fails(str(first), str(not_summary))
    doc = json.loads(first.read_text())
    doc["version"] = 99
    other = tmp_path / "v99.json"
    other.write_text(json.dumps(doc))
    assert "version 99" in fails(str(first), str(other))
    summary = read_summary(first)
    summary["entities"]["kernel"] = []
    summary["other"].pop("kernel", None)
    no_kernels = _write(tmp_path / "nok.json", summary)
    line = fails(str(first), str(no_kernels))
    assert "nok.json" in line and "entity kinds" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "at least 2 summaries" in fails(str(empty))
    res = runner.invoke(app, ["trend", str(first), str(first), "--threshold", "x"])
    assert res.exit_code == 2
