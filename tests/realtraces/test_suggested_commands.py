"""Every command the report suggests runs on the data it was made from (issue 20).

For a representative real trace of each format (Nsight Systems, Kineto files and
directories, OTF2, Paraver, a CPU-only run) and for one before/after pair, the JSON
report's findings are collected and each suggested command is run in-process (typer's
CliRunner, arguments from ``shlex.split``), expecting exit 0. The demo's commands are
checked the same way after a non-editable install (no repository sample): the sample
must outlive the demo. The store cache of each test is shared by the report and the
commands, so each trace is read once.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli import report as report_cli
from traceatlas.cli.main import app

pytestmark = pytest.mark.realtrace

RUNS = {
    "saxpy": ["pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"],  # MPI without messages
    "h100_2gpu": ["nsys-ai/h100_2gpu_1s.sqlite"],
    "cloverleaf": ["pipit/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"],
    "mfu_pair": ["nsys-ai/mfu_2gpu_before.sqlite", "nsys-ai/mfu_2gpu_after.sqlite"],
    "planted_imbalance": ["h100-planted/imbalance"],
    "hta_control": ["hta/trace_diff/control/control.json.gz"],
    "pingpong": ["pipit/ping-pong-otf2"],
    "mi300_otf2": ["fastotf2/simple-mi300-example-run/traces.otf2"],
    "lulesh": ["profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"],
    "cpu_gloo": ["torch-cpu-gloo"],
    "dlrm_8_ranks": ["param-et_replay/dlrm_kineto.tar.gz"],
}


def _json(output: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads(output[output.index("{"):].splitlines()[0])
    return doc


def _commands(doc: dict[str, object]) -> list[str]:
    runs = doc["runs"]
    assert isinstance(runs, list)
    return [f["command"] for run in runs for f in run["findings"] if f["command"]]


def _run_all(commands: list[str]) -> None:
    runner = CliRunner()
    failed = []
    for command in commands:
        args = shlex.split(command)
        assert args[:2] == ["traceatlas", "analyze"], command
        res = runner.invoke(app, args[1:])
        if res.exit_code != 0:
            failed.append((command, res.exit_code, res.output.strip()[-300:]))
    assert not failed, failed


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_suggested_command_runs(traces_dir: Path, name: str) -> None:
    paths = [str(traces_dir / p) for p in RUNS[name]]
    res = CliRunner().invoke(app, ["report", *paths, "--format", "json"])
    assert res.exit_code == 0, res.output
    commands = _commands(_json(res.stdout))
    for command in commands:  # each points at one of the runs it was made from
        assert any(shlex.split(command)[3] == p for p in paths), command
    _run_all(commands)


def test_saxpy_suggests_no_comm_matrix(traces_dir: Path) -> None:
    """The saxpy run has MPI calls but no point-to-point message: comm_matrix would exit
    2 there, so the low transfer efficiency points elsewhere."""
    res = CliRunner().invoke(app, ["report", str(traces_dir / RUNS["saxpy"][0]),
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    commands = _commands(_json(res.stdout))
    assert commands and not [c for c in commands if "comm_matrix" in c]


def test_demo_commands_run_after_a_non_editable_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_cli, "REPO_SAMPLE", tmp_path / "no-checkout")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["demo", "--format", "json"])
    assert res.exit_code == 0, res.output
    commands = _commands(_json(res.stdout))
    assert len(commands) >= 3
    sample = {shlex.split(c)[3] for c in commands}
    assert len(sample) == 1 and Path(sample.pop()).is_dir()  # still there after the demo
    _run_all(commands)
    again = CliRunner().invoke(app, ["demo", "--format", "json"])  # reuses the kept sample
    assert again.exit_code == 0 and "generated earlier" in again.output
