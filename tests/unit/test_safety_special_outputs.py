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


def test_report_and_export_never_overwrite_their_input(tmp_path: Path) -> None:
    """Reviewer's reproductions: report/export -o naming the input trace replaced it."""
    import shutil

    trace = tmp_path / "rank-0.json.gz"
    shutil.copy(SAMPLE / "rank-0.json.gz", trace)
    before = trace.read_bytes()
    runner = CliRunner()
    for args in (["report", str(trace), "-o", str(trace)],
                 ["export", str(trace), "--to", "chrome", "-o", str(trace)],
                 ["export", str(tmp_path), "--to", "chrome", "--split-ranks", "-o",
                  str(tmp_path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "would overwrite the input trace" in result.output
        assert trace.read_bytes() == before


def test_report_refuses_a_fifo_and_writes_atomically(tmp_path: Path) -> None:
    fifo = tmp_path / "r.html"
    os.mkfifo(fifo)
    result = CliRunner().invoke(app, ["report", str(SAMPLE), "-o", str(fifo)])
    assert result.exit_code == 2 and "is not a regular file" in result.output
    out = tmp_path / "ok.html"
    result = CliRunner().invoke(app, ["report", str(SAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.html", "r.html"]  # no temp left


def test_same_size_rewrite_of_a_part_is_damage(tmp_path: Path) -> None:
    """A flipped byte keeps size, row count and schema: only the hash sees it."""
    store = tmp_path / "st"
    assert CliRunner().invoke(app, ["ingest", str(SAMPLE), "-o", str(store)]).exit_code == 0
    part = store / "intervals" / "rank=0" / "part-0.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x10
    part.write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["sql", str(store), "SELECT count(*) FROM intervals"])
    assert result.exit_code == 2, result.output
    assert "intervals/rank=0/part-0.parquet" in result.output and "hash" in result.output
