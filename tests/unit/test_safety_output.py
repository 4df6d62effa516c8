"""Issue 18, sections 4 and 9 (OS errors): names are data, never terminal markup, and an OS
error is one line naming the file with exit code 2.

Traces are built with ``TraceBuilder`` and ingested in process; the CLI runs in process
(``CliRunner``) with a 10,000-column console so that no line wraps. What a terminal must
show for a string is defined here independently of ``traceatlas.literal``: every
character as is, except control characters (Unicode category Cc), lone surrogates (Cs),
line/paragraph separators (Zl, Zp) and the bidirectional controls, written as Python
escapes.
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unicodedata
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli import output
from traceatlas.cli.main import app, os_problem, writing
from traceatlas.cli.tables import shorten_middle
from traceatlas.errors import DataQualityWarning
from traceatlas.literal import literal
from traceatlas.names import display_name
from traceatlas.testing.builder import TraceBuilder

runner = CliRunner()
WIDE = 10_000
BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
HOSTILE = ["gemm[bold]_v2", "attn[/]x", "relu:x:fused", "[bold]x[/]", "[/]", ":x:",
           "[link=http://e]a[/link]", "esc\x1b[2Jx", "cr\rover", "nl\nx", ":thumbs_up:"]


def shown(text: str) -> str:
    """What a terminal must show for ``text`` (independent of ``traceatlas.literal``)."""
    out = []
    for char in text:
        code = ord(char)
        if unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp") or code in BIDI:
            short = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
            out.append(short or (f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"))
        else:
            out.append(char)
    return "".join(out)


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """No wrapping: the consoles' width, as COLUMNS=10000 would set it."""
    monkeypatch.setattr(output.stdout, "_width", WIDE)
    monkeypatch.setattr(output.stderr, "_width", WIDE)


def _store(directory: Path, kernels: list[str], *, name: str = "st") -> Path:
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 10_000_000)
    for i, kernel in enumerate(kernels):
        b.launch(kernel, 10_000 + i * 100_000, 5_000, 20_000 + i * 100_000, 40_000 + i)
    b.write(directory / "rank-0.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQualityWarning)
        return traceatlas.ingest(directory / "rank-0.json", directory / name)


def _cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception))
    return result


# -- literal -----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=30))
def test_literal_matches_the_reference(text: str) -> None:
    assert literal(text) == shown(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=30))
def test_literal_output_cannot_act_on_a_terminal(text: str) -> None:
    out = literal(text)
    assert not any(unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") or ord(c) in BIDI
                   for c in out)
    out.encode("utf-8")  # printable: no lone surrogate left


def test_literal_keeps_ordinary_text_and_escapes_ansi() -> None:
    for name in ("gemm[bold]_v2", "back\\slash", "😀\u200d👍 中文", " lead "):
        assert literal(name) == name
    assert literal("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert literal("x\u202ey") == "x\\u202ey"
    assert literal("bad\udcff") == "bad\\udcff"


# -- the issue's reproductions -----------------------------------------------------------


def test_issue_names_print_literally_in_analyze_and_sql(tmp_path: Path) -> None:
    store = _store(tmp_path, HOSTILE)
    kernels = _cli("analyze", "kernels", str(store))
    assert kernels.exit_code == 0
    query = _cli("sql", str(store), "select distinct name from intervals")
    assert query.exit_code == 0
    for result in (kernels, query):
        for name in HOSTILE:
            assert shown(name) in result.stdout, name
        assert "\x1b" not in result.stdout and "\r" not in result.stdout
        assert "❌" not in result.stdout and "👍" not in result.stdout
    assert "gemm_v2" not in kernels.stdout  # the bug: markup tags were swallowed


def test_machine_formats_keep_names_as_data(tmp_path: Path) -> None:
    store = _store(tmp_path, HOSTILE)
    import json

    rows = json.loads(_cli("sql", str(store), "select distinct name from intervals",
                           "--format", "json").stdout)
    assert set(HOSTILE) <= {r["name"] for r in rows}


def test_query_values_and_column_names_print_literally(tmp_path: Path) -> None:
    store = _store(tmp_path, ["k"])
    result = _cli("sql", str(store), "select 'postgres:x:101' as \"[/]:x:\", "
                  "'a[bold]b' as v")
    assert result.exit_code == 0
    assert "postgres:x:101" in result.stdout and "[/]:x:" in result.stdout
    assert "a[bold]b" in result.stdout


def test_warning_and_error_lines_print_literally(tmp_path: Path) -> None:
    bad = tmp_path / "[/]no:x:such\x1b[2J"
    result = _cli("info", str(bad))
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {shown(str(bad))}: no such file or directory"
    # a file without a rank: the warning names the file
    b = TraceBuilder(rank=None)
    b.launch("k", 10_000, 5_000, 20_000, 40_000)
    trace = b.write(tmp_path / "[bold]t:x:.json")
    result = _cli("ingest", str(trace), "-o", str(tmp_path / "st"))
    assert result.exit_code == 0
    assert f"warning (RankInferredWarning): {trace}" in result.stderr


def test_report_terminal_shows_run_and_names_literally(tmp_path: Path) -> None:
    store = _store(tmp_path, ["[bold]gemm[/]:x:"], name="[red]run:x:")
    result = _cli("report", str(store))
    assert result.exit_code == 0
    assert str(store) in result.stdout  # the run's header line
    assert "❌" not in result.stdout


def test_ansi_never_reaches_a_real_terminal_stream(tmp_path: Path) -> None:
    """A subprocess with a pseudo-terminal width: no ESC byte from the data in the output."""
    store = _store(tmp_path, ["clear\x1b[2J\x1b]0;title\x07x"])
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    cli = Path(sys.executable).parent / "traceatlas"
    done = subprocess.run([str(cli), "analyze", "kernels", str(store)], capture_output=True,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout and b"\x07" not in done.stdout
    assert b"clear\\x1b[2J\\x1b]0;title\\x07x" in done.stdout


# -- property: any name through every command --------------------------------------------

NAME = st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12)
MARKUP = st.sampled_from(["[bold]x[/]", "[/]", ":x:", "[link=http://e]a[/link]", "[", "]",
                          "\\[b]", "$(x)", "`x`;", ":smile:"])
HOSTILE_NAME = st.lists(st.one_of(NAME, MARKUP), min_size=1, max_size=3).map("".join)
PATH_NAME = HOSTILE_NAME.filter(lambda s: "/" not in s and "\x00" not in s
                                and s not in (".", "..") and len(s.encode()) < 200)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ta-names-") as tmp:
        yield Path(tmp)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(HOSTILE_NAME, min_size=1, max_size=6, unique=True))
def test_any_kernel_name_is_shown_exactly(scratch: Path, names: list[str]) -> None:
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        store = _store(Path(tmp), names)
        kernels = _cli("analyze", "kernels", str(store))
        assert kernels.exit_code == 0
        query = _cli("sql", str(store), "select name from intervals where category = "
                     "'kernel'")
        assert query.exit_code == 0
        for name in names:
            # terminal tables show kernel names demangled and shortened (issue 22), the
            # escaped text cut in the middle past CELL_MAX characters (cli/tables.py)
            assert shorten_middle(shown(display_name(name))) in kernels.stdout
            assert shorten_middle(shown(name)) in query.stdout  # sql tables cut alike


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run=PATH_NAME)
def test_any_path_is_shown_exactly(scratch: Path, run: str) -> None:
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        store = _store(Path(tmp), ["k"], name=run)
        info = _cli("info", str(store))
        assert info.exit_code == 0 and shown(str(store)) in info.stdout
        report = _cli("report", str(store))
        assert report.exit_code == 0 and shown(str(store)) in report.stdout
        missing = _cli("info", str(store) + "-missing")
        assert missing.exit_code == 2
        assert missing.stderr.strip() == (
            f"error: {shown(str(store) + '-missing')}: no such file or directory")
        bad_sql = _cli("sql", str(store), "select * from no_such_table")
        assert bad_sql.exit_code == 2 and bad_sql.stderr.startswith("error: ")


# -- OS errors ---------------------------------------------------------------------------


def _one_error_line(result: Any, path: Path, reason: str) -> None:
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: {path}: {reason}"], result.stderr
    assert "Usage:" not in result.stderr


def test_disk_full_on_report_html(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path, ["k"])
    out = tmp_path / "r.html"
    real = pathlib.Path.write_text

    def full(self: Path, *args: Any, **kwargs: Any) -> int:
        if ".html" in self.name:  # the report is staged beside r.html, then renamed
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    result = _cli("report", str(store), "-o", str(out), "--format", "json")
    _one_error_line(result, out, "No space left on device")
    assert not [p for p in tmp_path.iterdir() if ".html" in p.name]  # no half file, no temp


def test_disk_full_on_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    store = _store(tmp_path, ["k"])
    out = tmp_path / "x.json.gz"

    def full(self: Any, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(gzip.GzipFile, "write", full)
    result = _cli("export", str(store), "--to", "chrome", "-o", str(out))
    _one_error_line(result, out, "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0.json", "st"]


def test_permission_denied_names_the_file(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path, ["k"])
    out = tmp_path / "r.html"

    def denied(self: Path, *args: Any, **kwargs: Any) -> int:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", denied)
    result = _cli("report", str(store), "-o", str(out), "--format", "json")
    _one_error_line(result, out, "Permission denied")


def _unprivileged() -> list[str] | None:
    """A command prefix that runs without the right to bypass file permissions: nothing
    for a normal user; for root, ``setpriv`` dropping CAP_DAC_OVERRIDE (None: unavailable)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    probe = subprocess.run([setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner",
                            "true"], capture_output=True, check=False)
    return None if probe.returncode else [
        setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]


@pytest.mark.parametrize("command", [
    ["report", "--format", "json", "-o", "{ro}/r.html"],
    ["export", "--to", "chrome", "-o", "{ro}/x.json"],
    ["filter", "-o", "{ro}/f"],
])
def test_read_only_directory(tmp_path: Path, command: list[str]) -> None:
    """A real EACCES: one line naming the -o path (not a temporary sibling), exit 2."""
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv")
    store = _store(tmp_path, ["k"])
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    args = [c.format(ro=ro) for c in command]
    cli = str(Path(sys.executable).parent / "traceatlas")
    try:
        done = subprocess.run([*prefix, cli, args[0], str(store), *args[1:]],
                              capture_output=True, text=True, check=False)
    finally:
        ro.chmod(0o755)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"error: {args[-1]}: Permission denied"
    assert list(ro.iterdir()) == []


def test_writing_names_the_output(tmp_path: Path) -> None:
    out = tmp_path / "st"
    with pytest.raises(OSError) as err, writing(out):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert os_problem(err.value) == f"{out}: No space left on device"
    with pytest.raises(OSError) as err, writing(out, staged=True):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert os_problem(err.value) == (f"{out}: No space left on device (or in the staging "
                                     f"directory {tempfile.gettempdir()})")
    sibling = tmp_path / ".st.tmp-123-abc" / "intervals" / "part-0.parquet"
    with pytest.raises(OSError) as err, writing(out):
        raise PermissionError(errno.EACCES, "Permission denied", str(sibling))
    assert os_problem(err.value) == f"{out}: Permission denied"
    other = tmp_path / "elsewhere.json"
    with pytest.raises(OSError) as err, writing(out):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(other))
    assert os_problem(err.value) == f"{other}: No such file or directory"
    renamed = OSError(errno.EXDEV, "Invalid cross-device link", "a", None)
    renamed.filename2 = "b"
    assert os_problem(renamed) == "a -> b: Invalid cross-device link"


def test_output_under_a_parent_that_cannot_be_created(tmp_path: Path) -> None:
    store = _store(tmp_path, ["k"])
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    for args in (["report", str(store), "--format", "json", "-o",
                  str(blocker / "sub" / "r.html")],
                 ["export", str(store), "--to", "chrome", "-o",
                  str(blocker / "sub" / "x.json")]):
        result = _cli(*args)
        assert result.exit_code == 2, result.stderr
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1 and line.startswith(f"error: {blocker}")
        assert "Not a directory" in line or "No such file" in line
    assert blocker.read_text() == "x"
