"""Issue 18 §1: an export's atomic rename never replaces a device, FIFO or symlink."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_trace"


@pytest.mark.parametrize("fmt, name", [("chrome", "out.json"), ("paraver", "out.prv")])
def test_export_refuses_a_fifo(tmp_path: Path, fmt: str, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    result = CliRunner().invoke(app, ["export", str(SAMPLE), "--to", fmt, "-o", str(fifo)])
    assert result.exit_code == 2
    assert "is not a regular file" in result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a regular file
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing else written


def test_export_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    result = CliRunner().invoke(app, ["export", str(SAMPLE), "--to", "chrome", "-o", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text().startswith("{")  # the link's target got the export
