"""Issue 18, section 9, OTF2: a truncated or damaged archive gives one clear error naming
it (exit 2), never a traceback, never a silently shorter or reshuffled trace.

Every cut point of every file of a small archive (``traceatlas.testing.otf2``) is tried:
the read either fails with ``CorruptTraceError`` or gives exactly the intervals written.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.errors import CorruptTraceError
from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.sources import Source
from traceatlas.testing.otf2 import write_otf2

CALLS = {0: [("main", 0, 100), ("MPI_Send", 10, 20), ("foo[bold]", 30, 40)],
         1: [("main", 0, 100), ("MPI_Recv", 10, 25)]}
GPU = [("kern", 5, 15)]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_otf2(tmp_path_factory.mktemp("otf2") / "a", CALLS, gpu=GPU)


def _intervals(anchor: Path) -> list[tuple[int, str, int]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranks = Otf2Reader().read(Source(str(anchor)))
    return sorted((r.rank or 0, row["name"], row["dur_ns"]) for r in ranks
                  for row in r.tables["intervals"].to_pylist())


def test_written_archive_reads_exactly(archive: Path) -> None:
    assert _intervals(archive) == sorted(
        [(r, n, e - s) for r, rows in CALLS.items() for n, s, e in rows]
        + [(0, "kern", 10)])


@pytest.mark.parametrize("name", ["traces.otf2", "traces.def", "traces/0.evt",
                                  "traces/1.evt", "traces/2.evt", "traces/0.def"])
def test_every_cut_point(archive: Path, tmp_path: Path, name: str,
                         capfd: pytest.CaptureFixture[str]) -> None:
    """Before: a cut event file could read without error, with the missing events taken
    from another location's buffer (the otf2 wheel reuses it), and a cut definitions
    file printed the wheel's Python traceback."""
    want = _intervals(archive)
    data = (archive.parent / name).read_bytes()
    outcomes = set()
    for cut in range(len(data)):
        copy = tmp_path / f"cut{cut}"
        shutil.copytree(archive.parent, copy)
        (copy / name).write_bytes(data[:cut])
        try:
            got = _intervals(copy / "traces.otf2")
        except CorruptTraceError as exc:
            assert str(exc).startswith(f"{copy / 'traces.otf2'}: ")
            outcomes.add("refused")
        else:
            assert got == want, cut
            outcomes.add("same")
        shutil.rmtree(copy)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert "refused" in outcomes


def test_cut_event_file_names_it(archive: Path, tmp_path: Path) -> None:
    copy = tmp_path / "c"
    shutil.copytree(archive.parent, copy)
    evt = copy / "traces" / "0.evt"
    evt.write_bytes(evt.read_bytes()[:-20])
    result = CliRunner().invoke(app, ["info", str(copy / "traces.otf2")])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert str(copy / "traces.otf2") in line and "Traceback" not in result.output


def test_cut_definitions_no_traceback(archive: Path, tmp_path: Path) -> None:
    """A global definitions file cut in half: the wheel's callback raises KeyError for a
    reference to a definition that is gone; the user sees one line."""
    copy = tmp_path / "d"
    shutil.copytree(archive.parent, copy)
    defs = copy / "traces.def"
    defs.write_bytes(defs.read_bytes()[: len(defs.read_bytes()) // 2])
    result = CliRunner().invoke(app, ["info", str(copy / "traces.otf2")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and "unhandled python" not in result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and str(copy / "traces.otf2") in line


def test_a_key_error_from_damaged_definitions_is_one_line(
        archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cut-definitions case above failed once in a full CI run with exit 1 (KeyError(0)
    escaping from reading the definitions, order-dependent): a KeyError while the archive's
    definitions are read is a damaged archive, exit 2 with one line."""
    import traceatlas.io.otf2 as reader_module

    def broken(defs: object) -> None:
        raise KeyError(0)

    monkeypatch.setattr(reader_module, "_layout", broken)
    monkeypatch.setattr(reader_module.Otf2Reader, "isolate", False)  # the patch is here
    copy = tmp_path / "k"
    shutil.copytree(archive.parent, copy)
    result = CliRunner().invoke(app, ["info", str(copy / "traces.otf2")])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "damaged definitions" in line
