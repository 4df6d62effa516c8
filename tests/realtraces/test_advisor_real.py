"""The advisor on real traces: DLRM (8 ranks, Kineto), an Nsight Systems export and the
Pipit OTF2 ping-pong run without error and give findings ranked by cost; a few facts of
the findings are checked against plain counts of the inputs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app

pytestmark = pytest.mark.realtrace

COLUMNS = ["rank", "rule", "statement", "cost_ns", "evidence", "next_step", "command",
           "severity", "cause", "ranks", "per_step", "where", "view", "cost_bytes"]
TRACES = {
    "dlrm": "param-et_replay/dlrm_kineto.tar.gz",
    "nsys": "nsys-ai/h100_2gpu_1s.sqlite",
    "pingpong": "pipit/ping-pong-otf2",
}


@pytest.fixture(scope="module", params=sorted(TRACES))
def trace(request: pytest.FixtureRequest, traces_dir: Path,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[str, traceatlas.Trace]:
    name = str(request.param)
    out = tmp_path_factory.mktemp(name) / "store"
    return name, traceatlas.open(traceatlas.ingest(traces_dir / TRACES[name], out))


def test_ranked_findings(trace: tuple[str, traceatlas.Trace]) -> None:
    name, t = trace
    result = analysis.run("advisor", t, {"top": "0"})
    table = result.table
    assert not [n for n in result.notes if "efficiency analysis failed" in n], result.notes
    assert table.columns == COLUMNS
    assert table.height >= 1, name
    rows = table.to_dicts()
    assert min(r["cost_ns"] for r in rows) > 0
    # Order (advisor/critical_path.py): time findings by cost, except that the
    # critical-path summary never ranks above a high-severity finding on the path, and
    # findings about work off the path come after it (each group still by cost).
    off = [r for r in rows if "off the critical path" in r["evidence"]]
    path = [r for r in rows if r["rule"] == "critical_path"]
    on = [r for r in rows if r not in off and r not in path]
    for group in (on, off):
        costs = [r["cost_ns"] for r in group]
        assert costs == sorted(costs, reverse=True), (name, costs)
    if path:
        at = rows.index(path[0])
        assert all(rows.index(r) > at for r in off), name
        assert all(rows.index(r) < at for r in on if r["severity"] == "high"), name
    else:
        assert not off, name
    assert table["rank"].to_list() == list(range(1, table.height + 1))
    assert set(table["severity"]) <= {"high", "info"}
    assert all(c.startswith("traceatlas analyze ") for c in table["command"])
    # every rank named in a statement exists in the trace
    named = {int(r) for s in table["statement"]
             for r in pl.Series([s]).str.extract_all(r"rank (\d+)").explode().drop_nulls()
             .str.extract(r"(\d+)").to_list()}
    assert named <= set(t.ranks), name


def test_pingpong_late_sender_is_the_mpi_wait_total(traces_dir: Path, tmp_path: Path
                                                    ) -> None:
    t = traceatlas.open(traceatlas.ingest(traces_dir / TRACES["pingpong"], tmp_path / "s"))
    table = analysis.run("advisor", t, {"top": "0", "min_cost_pct": "0"}).table
    late = table.filter(pl.col("rule") == "late_sender")
    # independent of the advisor: the largest per-rank late-sender total of mpi_wait
    waits = analysis.run("mpi_wait", t).table
    assert late.height == 1
    assert late["cost_ns"][0] == waits["late_sender_ns"].max()


def test_cli_json_on_dlrm(traces_dir: Path, tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["analyze", "advisor", str(traces_dir / TRACES["dlrm"]),
                                   "--format", "json", "-p", "top=3"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert 1 <= len(rows) <= 3 and list(rows[0]) == COLUMNS
