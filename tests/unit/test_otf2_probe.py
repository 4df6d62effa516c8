"""The OTF2 probe: an archive whose opening kills the process (the C library's abort() on
some damaged files) is refused with exit 2 naming the file; a good archive opens."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.errors import CorruptTraceError
from traceatlas.io import otf2_probe
from traceatlas.testing.otf2 import write_otf2


def _archive(tmp: Path) -> Path:
    return write_otf2(tmp / "archive", {0: [("compute", 0, 100)], 1: [("compute", 10, 90)]})


def test_a_good_archive_passes_the_probe(tmp_path: Path) -> None:
    otf2_probe.check_opens("x", str(_archive(tmp_path)))  # no error


def test_an_opening_that_aborts_is_refused_with_exit_2(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = _archive(tmp_path)
    # stands in for the C library's abort() on a damaged file: the child dies by SIGABRT
    monkeypatch.setattr(otf2_probe, "_OPEN", "import os; os.abort()")
    with pytest.raises(CorruptTraceError, match="SIGABRT"):
        otf2_probe.check_opens(str(anchor), str(anchor))
    result = CliRunner().invoke(app, ["info", str(anchor)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(anchor) in lines[0] and "SIGABRT" in lines[0]
    assert "Traceback" not in result.output


def test_a_child_that_fails_normally_leaves_the_error_to_the_reader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = _archive(tmp_path)
    monkeypatch.setattr(otf2_probe, "_OPEN", "raise SystemExit(3)")
    otf2_probe.check_opens(str(anchor), str(anchor))  # not a crash: no error here
