"""Issue 18, "How to prove it": a property-based suite over the Kineto/JSON reader and
``traceatlas ingest``/``info``.

(a) Random valid traces, names drawn from all of Unicode plus ``[]/:\\`$;``: ingest
    succeeds and the intervals are exactly the generated ``X`` events, names included.
(b) The same traces truncated at a random byte or with random bytes flipped, gzipped or
    not: either the damage left a readable trace and ingest succeeds with exactly the
    intervals an independent oracle (stdlib ``json`` + ``decimal``) finds, or ingest
    exits 2 with one line on stderr naming the file. A traceback or any other exit code
    fails, and nothing may be left in the ``-o`` parent or in ``$TMPDIR``.

The CLI runs in-process (typer's CliRunner) for speed; a few cases run the real console
script in a subprocess.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import zlib
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from traceatlas.cli.main import app

INT64_MAX = 2**63 - 1
EXTRA = list("[]/:\\`$;")

NAMES = st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from(EXTRA)), max_size=12)
"""All of Unicode (every code point UTF-8 can encode: lone surrogates are not Unicode
scalar values, and a UTF-8 file cannot hold them) plus the shell and markup characters."""

SETTINGS = settings(deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def traces(draw: st.DrawFn) -> dict[str, Any]:
    """A small Kineto trace: X events (the intervals), instants, a process name, an
    optional ``baseTimeNanoseconds`` and ``distributedInfo``."""
    events: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 8))):
        # within 1 s of each other: an event at ts 0 further than 1 s from the run is
        # set aside by io/time_outliers.py (a counted warning, not an interval)
        ts = draw(st.one_of(st.integers(0, 999_999),
                            st.integers(0, 999_999_999).map(lambda v: v / 1000)))
        event = {"ph": draw(st.sampled_from(["X", "X", "X", "i"])), "cat": "cpu_op",
                 "name": draw(NAMES), "pid": draw(st.integers(0, 3)),
                 "tid": draw(st.integers(0, 3)), "ts": ts}
        if event["ph"] == "X":
            event["dur"] = draw(st.integers(0, 10**5))
        if draw(st.booleans()):
            event["args"] = {"External id": draw(st.integers(0, 99)), "note": draw(NAMES)}
        events.append(event)
    events.append({"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
                   "args": {"name": draw(NAMES)}})
    top: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if draw(st.booleans()):
        top["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    if draw(st.booleans()):
        top["distributedInfo"] = {"rank": 0, "world_size": 1}
    return top


def _encode(trace: dict[str, Any], ascii_only: bool) -> bytes:
    """JSON text, indented or not, non-ASCII escaped or written as UTF-8."""
    indent = 1 if len(trace["traceEvents"]) % 2 else None
    return json.dumps(trace, ensure_ascii=ascii_only, indent=indent).encode()


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` with a private ``$TMPDIR`` (``tmp``) and an output parent (``out``)."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "out").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    return tmp_path


def _clean(*dirs: Path) -> None:
    """Empty ``dirs`` between Hypothesis examples (they share one ``tmp_path``)."""
    for d in dirs:
        for child in d.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()


def _ingest(src: Path, out: Path) -> Any:
    return CliRunner().invoke(app, ["ingest", str(src), "-o", str(out)])


def _interval_names(store: Path) -> list[str]:
    import traceatlas

    frame = traceatlas.Trace(store).intervals.select("name").collect()
    return sorted(frame["name"].cast(str).to_list())


# --- (a) valid traces -----------------------------------------------------------------

@settings(SETTINGS, max_examples=25)
@given(trace=traces(), ascii_only=st.booleans(), compress=st.booleans())
def test_valid_traces_ingest_exactly(sandbox: Path, trace: dict[str, Any], ascii_only: bool,
                                     compress: bool) -> None:
    _clean(sandbox / "tmp", sandbox / "out")
    data = _encode(trace, ascii_only)
    src = sandbox / ("t.json.gz" if compress else "t.json")
    src.write_bytes(gzip.compress(data) if compress else data)
    store = sandbox / "out" / "s"
    result = _ingest(src, store)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    expected = sorted(e["name"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert _interval_names(store) == expected
    info = CliRunner().invoke(app, ["info", str(store), "-f", "json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.stdout)["intervals"] == len(expected)
    assert [p.name for p in (sandbox / "out").iterdir()] == ["s"]
    assert not any((sandbox / "tmp").iterdir())


# --- (b) damaged traces: the oracle ---------------------------------------------------

class Refused(Exception):
    """The oracle says the file is not a readable trace: expect exit 2."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    out = dict(pairs)
    if len(set(keys)) != len(keys):
        out["__duplicate_keys__"] = True
    return out


def _reject_constant(name: str) -> Any:
    raise Refused(f"not JSON: {name}")


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False


def _ns(value: Any) -> int | None:
    """Exact ns of a JSON number (decoded as Decimal), or None when not a number or
    outside int64."""
    if not isinstance(value, Decimal) or not value.is_finite() or abs(value) > 10**17:
        return None
    try:
        ns = int((value * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    except InvalidOperation:
        return None
    return ns if -(2**63) <= ns <= INT64_MAX else None


def oracle_intervals(data: bytes) -> int:
    """How many intervals a damaged file must give, or Refused. Independent of the
    reader: stdlib gzip, json (strict, duplicate keys seen) and decimal."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise Refused("gzip") from exc
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        doc = json.loads(data.decode("utf-8"), parse_float=Decimal, parse_int=Decimal,
                         parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise Refused("json") from exc
    if _has_surrogate(doc):
        raise Refused("lone surrogate")
    base = 0
    if isinstance(doc, list):
        if doc and not isinstance(doc[0], dict):
            raise Refused("array of non-objects")
        events = doc
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
        value = doc.get("baseTimeNanoseconds")
        if value is not None:
            if not (isinstance(value, Decimal) and value == value.to_integral_value()
                    and 0 <= value < 2**63):
                raise Refused("baseTimeNanoseconds")
            base = int(value)
    else:
        raise Refused("not a trace")
    count = 0
    for item in events:
        if not isinstance(item, dict) or "__duplicate_keys__" in item:
            continue
        if item.get("ph") != "X" or item.get("ts") is None or item.get("dur") is None:
            continue
        ts, dur = _ns(item["ts"]), _ns(item["dur"])
        if ts is None or dur is None or not -(2**63) <= ts + base <= INT64_MAX:
            continue
        if ts + base + max(dur, 0) <= INT64_MAX:
            count += 1
    return count


@st.composite
def damaged(draw: st.DrawFn) -> tuple[bytes, str]:
    """(damaged file bytes, file name): a trace, gzip-compressed or not, then truncated
    at a random byte, or with 1-3 bytes flipped (random bits, or set to a JSON-ish ASCII
    byte, which more often leaves valid JSON with other values)."""
    data = _encode(draw(traces()), draw(st.booleans()))
    compress = draw(st.booleans())
    if compress:
        data = gzip.compress(data, mtime=0)
    how = draw(st.sampled_from(["cut", "flip", "ascii"]))
    if how == "cut":
        data = data[: draw(st.integers(0, len(data) - 1))]
    else:
        flipped = bytearray(data)
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(data) - 1))
            if how == "flip":
                flipped[at] ^= draw(st.integers(1, 255))
            else:  # a printable ASCII byte: more damage that leaves valid JSON
                flipped[at] = draw(st.sampled_from(b"0123456789.-+eE :,[]{}\"Xxtsdurph"))
        data = bytes(flipped)
    return data, "rank-0.json.gz" if compress else "rank-0.json"


def _check_damaged(sandbox: Path, data: bytes, name: str) -> None:
    _clean(sandbox / "tmp", sandbox / "out")
    src = sandbox / name
    src.write_bytes(data)
    store = sandbox / "out" / "s"
    try:
        want: int | None = oracle_intervals(data)
    except Refused:
        want = None
    result = _ingest(src, store)
    assert "Traceback" not in result.output, result.output
    event(f"exit {result.exit_code}")
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {src}"), result.stderr
        assert want is None, f"oracle reads {want} intervals, ingest refused: {lines[0]}"
        assert not any((sandbox / "out").iterdir())
    else:
        assert result.exit_code == 0, result.output
        assert want is not None, f"oracle refuses the file, ingest read it: {result.output}"
        info = CliRunner().invoke(app, ["info", str(store), "-f", "json"])
        assert info.exit_code == 0, info.output
        assert json.loads(info.stdout)["intervals"] == want
        assert [p.name for p in (sandbox / "out").iterdir()] == ["s"]
    assert not any((sandbox / "tmp").iterdir())


@settings(SETTINGS, max_examples=150)
@given(case=damaged())
def test_damaged_traces_exact_or_one_line(sandbox: Path, case: tuple[bytes, str]) -> None:
    _check_damaged(sandbox, *case)


def test_oracle_reads_valid_and_refuses_garbage() -> None:
    """The oracle itself: a known trace gives its X count; damage it refuses."""
    trace = {"traceEvents": [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 2},
        {"ph": "i", "name": "c", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "X", "name": "d", "pid": 1, "tid": 1, "ts": 1e300, "dur": 2},
    ]}
    text = json.dumps(trace).replace('"ts": 2', '"ts": 1, "ts": 2')  # b: a repeated key
    assert oracle_intervals(text.encode()) == 1
    assert oracle_intervals(gzip.compress(text.encode())) == 1
    for bad in (b"", b"[1]", b'{"traceEvents": 5}', text.encode()[:-2],
                gzip.compress(text.encode())[:-4], b'{"traceEvents": [], '
                b'"baseTimeNanoseconds": -1}', text.replace("1.5", "NaN").encode()):
        with pytest.raises(Refused):
            oracle_intervals(bad)


@pytest.mark.parametrize("cut", [0, 1, 37, -2])
def test_subprocess_cut_file(tmp_path: Path, cut: int) -> None:
    """The console script in a real process: exit 2 and one line, or exact success."""
    trace = {"traceEvents": [{"ph": "X", "name": "a[b]:x:$(id)`;", "pid": 1, "tid": 1,
                              "ts": 1, "dur": 2}] * 3}
    data = json.dumps(trace).encode()
    data = data[:cut] if cut >= 0 else data[:cut] + b"}"  # -2: the array left open
    src = tmp_path / "rank-0.json"
    src.write_bytes(data)
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "traceatlas.cli.main", "ingest", str(src), "-o",
         str(tmp_path / "out" / "s")], capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path / "tmp"),
             "TRACEATLAS_CACHE_DIR": str(tmp_path / "cache")})
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {src}: ")
    assert not any((tmp_path / "tmp").iterdir())
    assert not (tmp_path / "out" / "s").exists()
