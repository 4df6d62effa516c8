"""Issue 18 section 1: ``-o`` never deletes what traceatlas did not write.

A directory is replaced only when its manifest says traceatlas wrote it, and then only
when it holds nothing but the files that manifest lists; anything else is refused with
exit code 2 and left byte for byte as it was. Writing a file with ``-o`` (report,
export) may overwrite a file, never a directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.store.manifest import is_store
from traceatlas.testing import TraceBuilder

runner = CliRunner()


def _trace(path: Path, n_ops: int, rank: int = 0) -> Path:
    b = TraceBuilder(rank=rank, world_size=1, profiler_markers=False)
    for i in range(n_ops):
        b.cpu_op(f"op{i}", i * 1_000, i * 1_000 + 500)
    return b.write(path)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root`` (files with their bytes, directories as None)."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _debris(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def _intervals(store: Path) -> int:
    return int(traceatlas.summarize(traceatlas.Trace(store))["intervals"])


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return _trace(tmp_path / "rank-0.json", 3)


# -- the reproductions -------------------------------------------------------------------


def test_a_directory_with_a_foreign_manifest_is_not_replaced(src: Path, tmp_path: Path) -> None:
    webapp = tmp_path / "webapp"
    webapp.mkdir()
    (webapp / "manifest.json").write_text('{"name":"app"}')
    (webapp / "thesis.tex").write_text("x\n")
    before = _snapshot(webapp)
    result = runner.invoke(app, ["ingest", str(src), "-o", str(webapp)])
    assert result.exit_code == 2, result.output
    assert "webapp: is not a traceatlas store; choose another -o" in result.output
    assert "Traceback" not in result.output
    assert _snapshot(webapp) == before
    assert _debris(tmp_path) == []


def test_filter_does_not_replace_a_directory_with_a_foreign_manifest(
    src: Path, tmp_path: Path
) -> None:
    store = traceatlas.ingest(src, tmp_path / "st")
    webapp = tmp_path / "webapp"
    webapp.mkdir()
    (webapp / "manifest.json").write_text('{"name":"app"}')
    (webapp / "thesis.tex").write_text("x\n")
    before = _snapshot(webapp)
    result = runner.invoke(app, ["filter", str(store), "-o", str(webapp), "--ranks", "0"])
    assert result.exit_code == 2, result.output
    assert "is not a traceatlas store; choose another -o" in result.output
    assert _snapshot(webapp) == before


def test_a_file_added_to_a_store_is_never_deleted(src: Path, tmp_path: Path) -> None:
    st = tmp_path / "st"
    assert runner.invoke(app, ["ingest", str(src), "-o", str(st)]).exit_code == 0
    (st / "my-notes.txt").write_text("notes\n")
    before = _snapshot(st)
    result = runner.invoke(app, ["ingest", str(src), "-o", str(st)])
    assert result.exit_code == 2, result.output
    assert ("st: contains files traceatlas did not write (my-notes.txt); move them or "
            "choose another -o") in result.output
    assert _snapshot(st) == before  # the store and the note, untouched
    assert _debris(tmp_path) == []


def test_filter_refuses_a_store_holding_foreign_files(src: Path, tmp_path: Path) -> None:
    st = traceatlas.ingest(src, tmp_path / "st")
    out = traceatlas.ingest(src, tmp_path / "out")
    (out / "intervals" / "mine.csv").write_text("a,b\n")
    result = runner.invoke(app, ["filter", str(st), "-o", str(out), "--ranks", "0"])
    assert result.exit_code == 2, result.output
    assert "intervals/mine.csv" in result.output
    assert (out / "intervals" / "mine.csv").read_text() == "a,b\n"


def test_the_message_names_at_most_three_foreign_entries(src: Path, tmp_path: Path) -> None:
    st = traceatlas.ingest(src, tmp_path / "st")
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        (st / name).write_text(name)
    (st / "extra").mkdir()  # an empty directory is someone's too
    with pytest.raises(traceatlas.InputError) as info:
        traceatlas.ingest(src, st)
    message = str(info.value)
    assert "(a.txt, b.txt, c.txt and 2 more)" in message
    assert sorted(p.name for p in st.iterdir() if p.name.endswith(".txt")) == [
        "a.txt", "b.txt", "c.txt", "d.txt"]


# -- what may be written -----------------------------------------------------------------


def test_a_missing_path_and_an_empty_directory_are_written(src: Path, tmp_path: Path) -> None:
    missing = tmp_path / "new" / "st"
    empty = tmp_path / "empty"
    empty.mkdir()
    traceatlas.ingest(src, missing)
    traceatlas.ingest(src, empty)
    assert _intervals(missing) == 3
    assert _intervals(empty) == 3
    assert _debris(tmp_path) == [] and _debris(tmp_path / "new") == []


def test_a_traceatlas_store_is_replaced_whole(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    a = _trace(tmp_path / "a" / "rank-0.json", 2)
    b_dir = tmp_path / "b"
    b_dir.mkdir()
    b = _trace(b_dir / "rank-0.json", 5)
    c = _trace(b_dir / "rank-1.json", 4, rank=1)
    st = tmp_path / "st"
    traceatlas.ingest([b, c], st)  # two ranks
    assert (st / "intervals" / "rank=1").is_dir()
    traceatlas.ingest(a, st)  # one rank: rank 1's parts must go
    assert _intervals(st) == 2
    assert not (st / "intervals" / "rank=1").exists()
    assert _debris(tmp_path) == []


def test_a_store_of_another_schema_version_may_be_replaced(src: Path, tmp_path: Path) -> None:
    st = traceatlas.ingest(src, tmp_path / "st")
    manifest = json.loads((st / "manifest.json").read_text())
    manifest["schema_version"] = 999
    del manifest["parts"]  # as an older or newer traceatlas might have written it
    (st / "manifest.json").write_text(json.dumps(manifest))
    traceatlas.ingest(src, st)
    assert _intervals(st) == 3


@pytest.mark.parametrize("manifest", [
    '{"name": "app"}',                                  # someone else's manifest
    '{"schema_version": 1}',                            # no producer
    '{"schema_version": 1, "producer": {"tool": "x"}}',  # another producer
    '{"schema_version": 1, "producer": {"traceatlas"',  # truncated JSON
    "[1, 2]",
    "\xff\xfe",
])
def test_only_a_manifest_written_by_traceatlas_makes_a_store(
    src: Path, tmp_path: Path, manifest: str
) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "manifest.json").write_text(manifest, encoding="latin-1")
    assert not is_store(d)
    with pytest.raises(traceatlas.InputError, match="is not a traceatlas store"):
        traceatlas.ingest(src, d)
    assert (d / "manifest.json").read_text(encoding="latin-1") == manifest


def test_a_file_is_not_replaced_by_a_store(src: Path, tmp_path: Path) -> None:
    f = tmp_path / "out"
    f.write_text("keep")
    result = runner.invoke(app, ["ingest", str(src), "-o", str(f)])
    assert result.exit_code == 2, result.output
    assert "is not a traceatlas store; choose another -o" in result.output
    assert f.read_text() == "keep"


# -- files written with -o ---------------------------------------------------------------


def test_report_does_not_write_over_a_directory(src: Path, tmp_path: Path) -> None:
    d = tmp_path / "report.html"
    d.mkdir()
    (d / "keep").write_text("k")
    result = runner.invoke(app, ["report", str(src), "-o", str(d)])
    assert result.exit_code == 2, result.output
    assert "is a directory" in result.output
    assert (d / "keep").read_text() == "k"


def test_report_overwrites_a_file(src: Path, tmp_path: Path) -> None:
    f = tmp_path / "report.html"
    f.write_text("old")
    result = runner.invoke(app, ["report", str(src), "-o", str(f)])
    assert result.exit_code == 0, result.output
    assert f.read_text().lstrip().lower().startswith("<!doctype html")


def test_paraver_export_does_not_write_over_a_directory(src: Path, tmp_path: Path) -> None:
    (tmp_path / "out.pcf").mkdir()
    result = runner.invoke(app, ["export", str(src), "--to", "paraver", "-o",
                                 str(tmp_path / "out.prv")])
    assert result.exit_code == 2, result.output
    assert "out.pcf: is a directory" in result.output
    assert not (tmp_path / "out.prv").exists()  # nothing half-written either
    assert (tmp_path / "out.pcf").is_dir()


def test_chrome_export_does_not_write_into_a_directory_unasked(src: Path,
                                                               tmp_path: Path) -> None:
    """`export traces/ --to chrome -o traces/` must not overwrite the user's rank files."""
    d = tmp_path / "traces"
    d.mkdir()
    (d / "rank-0.json.gz").write_bytes(b"the user's original")
    result = runner.invoke(app, ["export", str(src), "--to", "chrome", "-o", str(d)])
    assert result.exit_code == 2, result.output
    assert "traces: is a directory; choose another -o" in result.output
    assert (d / "rank-0.json.gz").read_bytes() == b"the user's original"
