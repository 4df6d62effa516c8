"""Issue 18 ("How to prove it"): Hypothesis over the Nsight Systems, Paraver and OTF2
readers and the CLI.

Random small traces with names drawn from all of Unicode plus ``[]/:\\`$;`` read back
with exact counts and names; then random truncation points, byte flips and (SQLite)
cells of the wrong type. Every damaged run either succeeds (with the exact counts where
the damage cannot change them, or with a warning counting what was dropped) or exits 2
with one line on stderr naming the file. A traceback, or any other exit code, fails.

Expected values come from the traces as generated here, never from the reader: counts
of the rows written, the names drawn, and line and byte counts of the damaged files.
Most runs use typer's CliRunner in-process (fast); two run the installed command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.errors import DataQualityWarning
from traceatlas.io.nsys import NsysReader
from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.paraver import ParaverReader
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.testing.mpi import Messages, Regions, write_paraver
from traceatlas.testing.nsys import SYSTEM_NS, Call, Kernel, Range, epoch, write_export
from traceatlas.testing.otf2 import write_otf2

_DEEP = int(os.environ.get("TRACEATLAS_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_DEEP or 25, deadline=None, derandomize=not _DEEP,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
"""Each property runs a few seconds (derandomized: the same examples on every run);
``TRACEATLAS_FUZZ_EXAMPLES=500`` runs that many random examples per property instead.
The autouse cache-directory fixture is shared by the examples of one test: every example
writes its trace under a new directory, so no cached store is reused."""

HOSTILE = ["[bold]", "[/]", "attn[/]x", ":x:", "relu:x:fused", "\\", "`", "$", "$(id)", ";",
           "a/b", "[red]x[/red]", "\u2028", "\u0085", "\u00a0"]
# NUL ends a C string (nsys, OTF2) and is binary junk in a text file (Paraver): no name
# holds one. Surrogates cannot be encoded.
_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
NAMES = st.one_of(st.sampled_from(HOSTILE), st.text(_CHARS, min_size=1, max_size=10),
                  st.builds(lambda a, b: a + b, st.sampled_from(HOSTILE),
                            st.text(_CHARS, min_size=1, max_size=6)))
LINE_NAMES = NAMES.map(lambda s: s.replace("\n", " ").replace("\r", " ").replace("\t", " ")
                       .strip(" ")).filter(bool)
"""Names of line-based formats (Paraver .pcf/.row): one line, no ASCII blanks at the ends
(the format strips them); every other character is kept."""


@contextmanager
def _workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ta-fuzz-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _info(path: Path) -> Any:
    return CliRunner().invoke(app, ["info", "-f", "json", str(path)])


def _check_contract(result: Any, path: Path) -> dict[str, Any] | None:
    """Exit 0 (the summary) or exit 2 with one stderr line naming ``path`` (None)."""
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    assert result.exit_code in (0, 2), (result.exit_code, result.output)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        errors = [ln for ln in lines if ln.startswith("error")]
        assert len(errors) == 1 and errors == lines[-1:], result.stderr
        assert str(path) in errors[0] or str(path.parent) in errors[0], errors[0]
        return None
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def _flip(data: bytes, positions: Sequence[int], bits: Sequence[int]) -> bytes:
    out = bytearray(data)
    for pos, bit in zip(positions, bits, strict=False):
        out[pos % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


def _quiet_read(reader: Any, path: Path) -> tuple[list[RankData], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ranks = reader.read(Source(str(path)), threads=1)
    return ranks, [str(w.message) for w in caught if issubclass(w.category, DataQualityWarning)]


# ---- Nsight Systems ------------------------------------------------------------------

S = SYSTEM_NS


@st.composite
def nsys_exports(draw: st.DrawFn) -> tuple[list[Kernel], list[Call], list[Range]]:
    """Kernels on two streams, a launch per kernel, and NVTX ranges (times raw ns)."""
    n = draw(st.integers(1, 6))
    names = draw(st.lists(NAMES, min_size=n, max_size=n))
    kernels = [Kernel(S + 1_000 * i + 100, S + 1_000 * i + 100 + draw(st.integers(0, 900)),
                      names[i], stream=7 + i % 2, correlation=i + 1) for i in range(n)]
    api = NAMES.filter(lambda s: re.search(r"_v\d+$", s) is None)  # the reader strips it
    calls = [Call(S + 1_000 * i, S + 1_000 * i + 50, draw(api), i + 1) for i in range(n)]
    ranges = [Range(S, S + 1_000 * n, draw(NAMES))]
    return kernels, calls, ranges


def _nsys_file(root: Path, spec: tuple[list[Kernel], list[Call], list[Range]]) -> Path:
    return write_export(root / "job.sqlite", *spec)


@FUZZ
@given(spec=nsys_exports())
def test_nsys_exact(spec: tuple[list[Kernel], list[Call], list[Range]]) -> None:
    kernels, calls, ranges = spec
    with _workdir() as root:
        path = _nsys_file(root, spec)
        (rank,), messages = _quiet_read(NsysReader(), path)
        assert messages == []
        rows = rank.tables["intervals"].to_pylist()
        got = sorted((r["category"], r["name"], r["start_ns"], r["end_ns"]) for r in rows)
        want = sorted([("kernel", k.name, epoch(k.start), epoch(k.end)) for k in kernels]
                      + [("runtime", c.name, epoch(c.start), epoch(c.end)) for c in calls]
                      + [("nvtx", r.text, epoch(r.start), epoch(r.end)) for r in ranges])
        # category refinement: NCCL-like kernel names are comm kernels, ProfilerStep#N steps
        assert [(n, s, e) for _c, n, s, e in got] == [(n, s, e) for _c, n, s, e in want]
        summary = _check_contract(_info(path), path)
        assert summary is not None and summary["intervals"] == len(want)


_CHECKED = {"CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId",
                                           "correlationId", "globalPid", "contextId",
                                           "gridX"),
            "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId"),
            "NVTX_EVENTS": ("start", "end", "globalTid", "eventType")}
_ALL_COLUMNS = {"CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "contextId",
                                               "streamId", "correlationId", "globalPid",
                                               "demangledName", "shortName", "gridX",
                                               "registersPerThread"),
                "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "eventClass", "globalTid",
                                                "correlationId", "nameId", "returnValue"),
                "NVTX_EVENTS": ("start", "end", "eventType", "text", "globalTid", "textId",
                                "domainId")}
WRONG = st.sampled_from(["'oops'", "'12abc'", "x'00ff'", "x'c328'", "3.5", "''", "'-'"])


@FUZZ
@given(spec=nsys_exports(), table=st.sampled_from(sorted(_ALL_COLUMNS)), data=st.data(),
       value=WRONG)
def test_nsys_wrong_typed_cell(spec: tuple[list[Kernel], list[Call], list[Range]],
                               table: str, data: st.DataObject, value: str) -> None:
    """One cell of a random column holds text, a blob or a fraction: a checked column
    loses exactly that row (with a warning counting it); any other column keeps every
    row (or the file is refused with one line)."""
    column = data.draw(st.sampled_from(_ALL_COLUMNS[table]))
    with _workdir() as root:
        path = _nsys_file(root, spec)
        con = sqlite3.connect(path)
        before = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        rowid = data.draw(st.integers(1, before))
        con.execute(f'UPDATE {table} SET "{column}" = {value} WHERE rowid = {rowid}')
        con.commit()
        con.close()
        result = _info(path)
        summary = _check_contract(result, path)
        total = sum(len(part) for part in spec)
        if column in _CHECKED[table]:
            assert summary is not None, result.output
            assert summary["intervals"] == total - 1
            assert f"table {table} has 1 row(s) with text, a blob or a fraction" \
                in result.stderr.replace("\n", " "), result.stderr
        elif summary is not None:
            assert summary["intervals"] == total, result.stderr


@FUZZ
@given(spec=nsys_exports(), cut=st.floats(0.0, 0.999))
def test_nsys_truncated(spec: tuple[list[Kernel], list[Call], list[Range]], cut: float) -> None:
    """Any truncation of an SQLite file is detected (its header says how long it is)."""
    with _workdir() as root:
        path = _nsys_file(root, spec)
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * cut)])
        result = _info(path)
        assert _check_contract(result, path) is None, result.output


@FUZZ
@given(spec=nsys_exports(), positions=st.lists(st.integers(0, 1 << 20), min_size=1,
                                                max_size=4),
       bits=st.lists(st.integers(0, 7), min_size=4, max_size=4))
def test_nsys_byte_flips(spec: tuple[list[Kernel], list[Call], list[Range]],
                         positions: list[int], bits: list[int]) -> None:
    """Flipped bits anywhere: a clean error, or a read (values may differ: a flipped
    time is still a time)."""
    with _workdir() as root:
        path = _nsys_file(root, spec)
        path.write_bytes(_flip(path.read_bytes(), positions, bits))
        _check_contract(_info(path), path)


# ---- Paraver ---------------------------------------------------------------------------


@st.composite
def paraver_traces(draw: st.DrawFn) -> tuple[int, list[str], Regions, Messages]:
    """1-3 ranks; per rank non-overlapping regions named from ``names`` (MPI_* names
    become MPI calls); messages between ranks. Times ns."""
    ranks = draw(st.integers(1, 3))
    names = draw(st.lists(LINE_NAMES, min_size=1, max_size=4, unique=True))
    names += draw(st.lists(st.sampled_from(["MPI_Send", "MPI_Recv", "MPI_Allreduce"]),
                           max_size=2, unique=True))
    rank, name, start, end = [], [], [], []
    for r in range(ranks):
        t = 0
        for _ in range(draw(st.integers(0, 4))):
            t += draw(st.integers(0, 50))
            length = draw(st.integers(1, 100))
            rank.append(r)
            name.append(draw(st.integers(0, len(names) - 1)))
            start.append(t)
            end.append(t + length)
            t += length
    n_msg = draw(st.integers(0, 3)) if ranks > 1 else 0
    src = [draw(st.integers(0, ranks - 1)) for _ in range(n_msg)]
    dst = [(s + 1) % ranks for s in src]
    sent = [draw(st.integers(0, 500)) for _ in range(n_msg)]
    arr = np.asarray
    regions = Regions(arr(rank, np.int64), arr(name, np.int64), arr(start, np.int64),
                      arr(end, np.int64))
    messages = Messages(arr(src, np.int64), arr(dst, np.int64), arr(sent, np.int64),
                        arr(sent, np.int64) + 5, arr(sent, np.int64) + 1,
                        arr(sent, np.int64) + 9, arr([64] * n_msg, np.int64),
                        arr([1] * n_msg, np.int64))
    return ranks, names, regions, messages


def _prv(root: Path, spec: tuple[int, list[str], Regions, Messages]) -> Path:
    ranks, names, regions, messages = spec
    return write_paraver(root / "t.prv", ranks, names, regions, messages, end_ns=10_000)


def _meta(rank: RankData, key: str) -> Any:
    keys = rank.tables["metadata"]["key"].to_pylist()
    return json.loads(rank.tables["metadata"]["value"][keys.index(key)].as_py())


@FUZZ
@given(spec=paraver_traces())
def test_paraver_exact(spec: tuple[int, list[str], Regions, Messages]) -> None:
    _ranks, names, regions, messages = spec
    with _workdir() as root:
        path = _prv(root, spec)
        got, warned = _quiet_read(ParaverReader(), path)
        assert warned == []
        rows = [r for rank in got for r in rank.tables["intervals"].to_pylist()]
        want = sorted((names[n], int(s), int(e)) for n, s, e in
                      zip(regions.name, regions.start_ns, regions.end_ns, strict=True))
        assert sorted((r["name"], r["start_ns"], r["end_ns"]) for r in rows) == want
        assert sum(rank.tables["messages"].num_rows for rank in got) == len(messages.src)
        summary = _check_contract(_info(path), path)
        assert summary is not None and summary["intervals"] == len(want)
        assert summary["rows"]["messages"] == len(messages.src)


def _body_lines(data: bytes) -> list[bytes]:
    """The body lines of a .prv (after the header line), as split on b"\\n"."""
    body = data.split(b"\n", 1)[1] if b"\n" in data else b""
    lines = body.split(b"\n")
    return lines[:-1] if lines and lines[-1] == b"" else lines


@FUZZ
@given(spec=paraver_traces(), cut=st.floats(0.0, 1.0))
def test_paraver_truncated(spec: tuple[int, list[str], Regions, Messages], cut: float) -> None:
    """Cut anywhere: the complete record lines are kept, a cut last line is dropped and
    counted; a cut header is refused."""
    with _workdir() as root:
        path = _prv(root, spec)
        data = path.read_bytes()
        data = data[: int(len(data) * cut)]
        path.write_bytes(data)
        result = _info(path)
        summary = _check_contract(result, path)
        if summary is None:
            return
        lines = _body_lines(data)
        records = [ln for ln in lines if ln[:2] in (b"1:", b"2:", b"3:")]
        cut_record = bool(lines) and not data.endswith(b"\n") and lines[-1][:2] in (
            b"1:", b"2:", b"3:")
        got, _warned = _quiet_read(ParaverReader(), path)
        kept = sum(sum(_meta(r, "paraver_record_counts_rank").values()) for r in got)
        assert kept == len(records) - cut_record
        assert _meta(got[0], "paraver_records_dropped") == (
            {"the last line has no line end (truncated file?)": 1} if cut_record else {})


@FUZZ
@given(spec=paraver_traces(), positions=st.lists(st.integers(0, 1 << 16), min_size=1,
                                                  max_size=4),
       bits=st.lists(st.integers(0, 7), min_size=4, max_size=4),
       companion=st.sampled_from([".prv", ".pcf", ".row"]))
def test_paraver_byte_flips(spec: tuple[int, list[str], Regions, Messages],
                            positions: list[int], bits: list[int], companion: str) -> None:
    """Flipped bits in the .prv, .pcf or .row: a clean error, or a read in which every
    body line is accounted for (kept, dropped with a reason, or skipped as a comment,
    communicator, blank or unrecognised line)."""
    with _workdir() as root:
        path = _prv(root, spec)
        target = path.with_suffix(companion)
        target.write_bytes(_flip(target.read_bytes(), positions, bits))
        if _check_contract(_info(path), path) is None:
            return
        got, _warned = _quiet_read(ParaverReader(), path)
        counts = _meta(got[0], "paraver_record_counts_file")
        assert sum(counts.values()) == len(_body_lines(path.read_bytes()))
        kept = sum(sum(_meta(r, "paraver_record_counts_rank").values()) for r in got)
        dropped = sum(_meta(got[0], "paraver_records_dropped").values())
        assert kept + dropped == counts["1"] + counts["2"] + counts["3"]


# ---- OTF2 ----------------------------------------------------------------------------


@st.composite
def otf2_traces(draw: st.DrawFn) -> dict[int, list[tuple[str, int, int]]]:
    """1-3 ranks of non-overlapping calls (name, start, end) in ns."""
    calls: dict[int, list[tuple[str, int, int]]] = {}
    for r in range(draw(st.integers(1, 3))):
        t, rows = 0, []
        for _ in range(draw(st.integers(1, 4))):
            t += draw(st.integers(1, 50))
            length = draw(st.integers(1, 100))
            rows.append((draw(NAMES), t, t + length))
            t += length
        calls[r] = rows
    return calls


def _otf2(root: Path, calls: dict[int, list[tuple[str, int, int]]]) -> Path:
    return write_otf2(root / "archive", calls)


@FUZZ
@given(calls=otf2_traces())
def test_otf2_exact(calls: dict[int, list[tuple[str, int, int]]]) -> None:
    with _workdir() as root:
        anchor = _otf2(root, calls)
        got, warned = _quiet_read(Otf2Reader(), anchor)
        assert warned == []
        assert [r.rank for r in got] == sorted(calls)
        rows = sorted((rank.rank, r["start_ns"], r["end_ns"], r["name"])
                      for rank in got for r in rank.tables["intervals"].to_pylist())
        want = sorted((rank, 1000 + s, 1000 + e, n) for rank, rs in calls.items()
                      for n, s, e in rs)
        shift = rows[0][1] - want[0][1]  # the archive's realtime start (the writer's clock)
        assert [(rk, s - shift, e - shift, n) for rk, s, e, n in rows] == want
        summary = _check_contract(_info(anchor), anchor)
        assert summary is not None
        assert summary["intervals"] == sum(len(v) for v in calls.values())


@FUZZ
@given(calls=otf2_traces(), data=st.data(), cut=st.floats(0.0, 0.999))
def test_otf2_truncated(calls: dict[int, list[tuple[str, int, int]]], data: st.DataObject,
                        cut: float) -> None:
    """One file of the archive (anchor, global or local definitions, events) cut short:
    refused, or (when the cut removed nothing the reader uses) the exact counts."""
    with _workdir() as root:
        anchor = _otf2(root, calls)
        files = sorted(p for p in anchor.parent.rglob("*") if p.is_file())
        target = data.draw(st.sampled_from(files))
        content = target.read_bytes()
        target.write_bytes(content[: int(len(content) * cut)])
        summary = _check_contract(_info(anchor), anchor)
        if summary is not None:
            assert summary["intervals"] == sum(len(v) for v in calls.values())


@FUZZ
@given(calls=otf2_traces(), data=st.data(),
       positions=st.lists(st.integers(0, 1 << 12), min_size=1, max_size=3),
       bits=st.lists(st.integers(0, 7), min_size=3, max_size=3))
def test_otf2_byte_flips(calls: dict[int, list[tuple[str, int, int]]], data: st.DataObject,
                         positions: list[int], bits: list[int]) -> None:
    with _workdir() as root:
        anchor = _otf2(root, calls)
        files = sorted(p for p in anchor.parent.rglob("*") if p.is_file())
        target = data.draw(st.sampled_from(files))
        target.write_bytes(_flip(target.read_bytes(), positions, bits))
        _check_contract(_info(anchor), anchor)


# ---- the installed command -------------------------------------------------------------


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("traceatlas")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"}, check=False)


@pytest.mark.parametrize("fmt", ["nsys", "paraver", "otf2"])
def test_command_damaged_file_one_line(tmp_path: Path, fmt: str) -> None:
    """The real process (not CliRunner): exit 2, one stderr line naming the file."""
    if fmt == "nsys":
        path = _nsys_file(tmp_path, ([Kernel(S + 10, S + 20, "k[/]")], [], []))
        path.write_bytes(path.read_bytes()[:3000])
    elif fmt == "paraver":
        path = tmp_path / "t.prv"
        path.write_text("#Paraver (d):10_ns:0:1:1(1:0)\n1:1:1:1:1:0:x:1\n")
    else:
        path = _otf2(tmp_path, {0: [("f", 1, 5)]})
        evt = path.parent / "traces" / "0.evt"
        evt.write_bytes(evt.read_bytes()[:-8])
    done = _command("info", str(path))
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and str(path) in line and "Traceback" not in done.stderr
