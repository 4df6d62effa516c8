"""From the report to the map: each finding's ``traceatlas view`` command (and viewer URL)
names the window and ranks of the planted problem; the windows and ranks expected here
are worked out by hand from the traces built in the tests."""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.advisor import Context, Finding, advise, view_link
from traceatlas.advisor.commands import view_why_not
from traceatlas.analysis import registry
from traceatlas.ops.select import parse_rank_spans, parse_window
from traceatlas.report import html, terminal
from traceatlas.report.data import Finding as ReportFinding
from traceatlas.report.data import ReportData, RunReport
from traceatlas.testing import Collective, TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
AR_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR = Collective("allreduce", 1024, 1024, "Float", (0, 1, 2, 3))
SLOW = (120_000, 170_000, 110_000)
"""Rank 2's compute per step (ns): worst in step 1; the other ranks compute 100k."""
STEP_1 = (BASE + 200_000, BASE + 200_000 + 10_000 + 180_000)
"""Step 1's window on every rank: the marker starts at 200k; the all-reduce ends at
t + 180k with t = 200k + 10k (after the 150k marker's end)."""


def _open(tmp_path: Path, builders: list[TraceBuilder]) -> traceatlas.Trace:
    paths = write_multi_rank(tmp_path / "in", builders)
    return traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    """4 ranks, steps i = 0..2 with marker [200k i, 200k i + 150k). In step i at
    t = 200k i + 10k: a compute kernel [t, t + c) (c = 100k; rank 2: SLOW[i]), then an
    all-reduce from t + c to t + 180k (ends together; rank 2 starts it last)."""
    builders = [TraceBuilder(r, 4, base_time_ns=BASE, profiler_markers=False)
                for r in range(4)]
    for rank, b in enumerate(builders):
        for i in range(3):
            s = 200_000 * i
            t = s + 10_000
            c = SLOW[i] if rank == 2 else 100_000
            b.step(i, s, s + 150_000)
            b.launch("void gemm_fwd()", s + 1_000, 500, t, c)
            b.launch(AR_KERNEL, s + 2_000, 500, t + c, 180_000 - c, stream=20, collective=AR)
    return _open(tmp_path_factory.mktemp("stepped"), builders)


def _options(command: str) -> dict[str, str]:
    args = shlex.split(command)
    assert args[:2] == ["traceatlas", "view"]
    return dict(zip(args[3::2], args[4::2], strict=True))


def _by_rule(findings: list[Finding], rule: str) -> Finding:
    [found] = [f for f in findings if f.rule == rule]
    return found


@pytest.mark.parametrize("rule", ["load_imbalance", "straggler"])
def test_view_names_the_worst_step_and_rank(stepped: traceatlas.Trace, rule: str) -> None:
    found = _by_rule(advise(stepped, path="run.tastore"), rule)
    options = _options(found.view)
    assert options == {"--window": f"@{STEP_1[0]}:@{STEP_1[1]}", "--ranks": "2"}
    window = parse_window(options["--window"])  # the view CLI's own parsers accept it
    assert window.resolve(0) == STEP_1
    assert parse_rank_spans(options["--ranks"]) == ((2, 2),)
    assert view_why_not(Context(stepped), found.view) is None


def test_without_steps_the_window_is_the_whole_run(tmp_path: Path) -> None:
    """2 ranks, no step markers: rank 1's gemm [5k, 205k) against rank 0's [5k, 55k);
    launches at 1k, so the run spans [BASE + 1k, BASE + 205k)."""
    builders = [TraceBuilder(r, 2, base_time_ns=BASE, profiler_markers=False)
                for r in range(2)]
    builders[0].launch("gemm", 1_000, 500, 5_000, 50_000)
    builders[1].launch("gemm", 1_000, 500, 5_000, 200_000)
    trace = _open(tmp_path, builders)
    found = _by_rule(advise(trace), "load_imbalance")
    assert _options(found.view) == {"--window": f"@{BASE + 1_000}:@{BASE + 205_000}",
                                    "--ranks": "1"}


@pytest.mark.parametrize("path", ["my runs/it's \"here\" $(rm -rf x).tastore",
                                  "-dash dir", "/tmp/a b/<script>alert(1)</script>"])
def test_paths_are_quoted(stepped: traceatlas.Trace, path: str) -> None:
    found = _by_rule(advise(stepped, path=path), "load_imbalance")
    args = shlex.split(found.view)
    assert args[2] == (f"./{path}" if path.startswith("-") else path)
    assert args[3:] == ["--window", f"@{STEP_1[0]}:@{STEP_1[1]}", "--ranks", "2"]


def test_advisor_json_and_reports_carry_the_view(stepped: traceatlas.Trace) -> None:
    path = "/tmp/a b/<script>alert(1)</script>"
    table = registry.run("advisor", stepped, {"path": path}).table
    row = table.filter(table["rule"] == "load_imbalance").row(0, named=True)
    assert shlex.split(row["view"])[2] == path
    url = f"http://127.0.0.1:8765/#start={STEP_1[0]}&end={STEP_1[1]}&ranks=2-2"
    run = RunReport("r", path, "kineto", [0, 1, 2, 3], BASE, 600_000)
    run.findings = [ReportFinding(1, "load_imbalance", "s", 10, "e", "n", "", "high",
                                  ranks=[2], view=row["view"])]
    page = html.render(ReportData("0", [run]))
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert f'href="{url.replace("&", "&amp;")}"' in page
    assert "works while <code>traceatlas view</code> runs" in page
    text = terminal.to_text(ReportData("0", [run]), width=300)
    assert row["view"] in text


def test_view_url_round_trip() -> None:
    command = view_link.view_command("s", (BASE + 5, BASE + 9), [0, 1, 2, 7])
    assert shlex.split(command)[3:] == ["--window", f"@{BASE + 5}:@{BASE + 9}",
                                        "--ranks", "0-2,7"]
    parts = urlsplit(view_link.view_url(command))
    assert (parts.scheme, parts.netloc, parts.path) == ("http", "127.0.0.1:8765", "/")
    assert parse_qs(parts.fragment) == {"start": [str(BASE + 5)], "end": [str(BASE + 9)],
                                        "ranks": ["0-7"]}  # url.js: one range
    assert view_link.view_url("traceatlas analyze kernels s") == ""


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 5000), min_size=1, max_size=40))
def test_rank_spec_round_trip(ranks: set[int]) -> None:
    spans = parse_rank_spans(view_link.rank_spec(ranks))
    assert {r for lo, hi in spans for r in range(lo, hi + 1)} == ranks


def test_view_check_refuses_bad_commands(stepped: traceatlas.Trace) -> None:
    ctx = Context(stepped)
    lo, hi = ctx.window
    good = f"traceatlas view s --window @{lo}:@{hi} --ranks 0-3"
    assert view_why_not(ctx, good) is None
    for bad in (f"traceatlas view s --window @{lo - 1}:@{hi}",  # before the trace
                f"traceatlas view s --window @{lo}:@{hi} --ranks 4",  # no rank 4
                "traceatlas view s --window 1s:2s",  # not absolute
                "traceatlas view s --window @5:@3",  # end before start
                f"traceatlas view s --window @{lo}:@{hi} --port 1",  # not a link option
                "traceatlas analyze kernels s"):
        assert view_why_not(ctx, bad) is not None, bad
