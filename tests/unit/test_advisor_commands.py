"""Suggested commands that run (issue 20): ``advisor.commands.why_not`` against what the
CLI does with the same command, and the advisor dropping a command that would fail."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import advisor
from traceatlas.advisor import Context, Finding
from traceatlas.advisor.commands import first_runnable, why_not
from traceatlas.cli.main import app
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    """One GPU rank: kernels, no communication, no MPI messages."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for i in range(12):
        b.launch("void gemm()", i * 20_000, 1_000, i * 20_000 + 2_000, 10_000 + 5_000 * (i % 2))
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s")
    return Context(traceatlas.open(store), path=str(store))


CASES = [
    ("kernels", ("--ranks", "0", "--table", "histogram"), True),
    ("breakdown", ("--ranks", "0", "-p", "by=stream"), True),
    ("comm_matrix", (), False),                    # no point-to-point messages
    ("overlap", ("--ranks", "3"), False),          # no rank 3
    ("kernels", ("--table", "no_such_table"), False),
    ("kernels", ("-p", "by=nobody"), False),       # not an allowed value
    ("no_such_analysis", (), False),
]


@pytest.mark.parametrize(("analysis", "options", "runs"), CASES)
def test_why_not_agrees_with_the_cli(ctx: Context, analysis: str, options: tuple[str, ...],
                                     runs: bool) -> None:
    command = ctx.command(analysis, *options)
    reason = why_not(ctx, command)
    res = CliRunner().invoke(app, shlex.split(command)[1:])
    assert (reason is None) == runs == (res.exit_code == 0), (reason, res.output)


def test_first_runnable_skips_what_cannot_run(ctx: Context) -> None:
    assert first_runnable(ctx, ("comm_matrix", "mpi_collectives", "efficiency")) == \
        ctx.command("efficiency")
    assert first_runnable(ctx, ("comm_matrix",)) == ""


def test_advise_drops_a_failing_command(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    def rule(c: Context) -> list[Finding]:
        return [Finding("fake", "bad", 10**9, "e", "n", c.command("comm_matrix")),
                Finding("fake", "good", 10**9, "e", "n", c.command("kernels"))]

    monkeypatch.setattr(advisor, "get_rule", lambda name: rule)
    found = {f.statement: f.command for f in advisor.advise(ctx.trace, path=ctx.path,
                                                            rules=["fake"], context=ctx)}
    assert found["bad"] == "" and found["good"] == ctx.command("kernels")
    assert any("suggested command dropped" in n and "comm_matrix" in n for n in ctx.notes)
