"""Issue 18, section 5: no parameter makes memory explode.

Rank selections are spans clipped to the ranks of the store (never enumerated), checked
against a plain enumeration on small numbers; every numeric analysis parameter has a
documented range and an exit-2 error past it; absurd windows, negative durations and
missing steps are one clear line with exit code 2.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.analysis import registry
from traceatlas.cli import output
from traceatlas.cli.main import app
from traceatlas.engine import LocalEngine
from traceatlas.errors import DataQualityWarning, InputError
from traceatlas.ops.select import parse_rank_spans, parse_ranks, resolve_ranks
from traceatlas.testing.builder import TraceBuilder
from traceatlas.testing.mpi import write_mpi_trace

runner = CliRunner()


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output.stdout, "_width", 10_000)
    monkeypatch.setattr(output.stderr, "_width", 10_000)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks (0 and 1), one step, one kernel each."""
    tmp = tmp_path_factory.mktemp("two-ranks")
    files = []
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        b.step(1, 0, 1_000_000)
        b.launch(f"kernel_r{rank}", 10_000, 5_000, 20_000, 40_000)
        files.append(b.write(tmp / f"rank-{rank}.json"))
    return traceatlas.ingest([str(f) for f in files], tmp / "st",
                             engine=LocalEngine(max_workers=1))


def _cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception))
    return result


def _error(result: Any) -> str:
    """The single error line of a failed command."""
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return str(lines[0])


# -- rank lists: spans, never enumerated -------------------------------------------------

ITEM = st.tuples(st.integers(0, 40), st.integers(0, 6)).map(
    lambda t: str(t[0]) if t[1] == 0 else f"{t[0]}-{t[0] + t[1]}")
RANK_TEXT = st.lists(ITEM, min_size=1, max_size=5).map(",".join)


def _enumerated(text: str) -> set[int]:
    """The reference: every rank of every item, enumerated."""
    out: set[int] = set()
    for item in text.split(","):
        lo, _, hi = item.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


@settings(max_examples=200, deadline=None)
@given(RANK_TEXT)
def test_rank_spans_cover_exactly_the_enumerated_ranks(text: str) -> None:
    spans = parse_rank_spans(text)
    covered = {r for lo, hi in spans for r in range(lo, hi + 1)}
    assert covered == _enumerated(text)
    assert all(lo <= hi for lo, hi in spans)
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(spans))
    assert parse_ranks(text) == tuple(sorted(_enumerated(text)))


@settings(max_examples=200, deadline=None)
@given(RANK_TEXT, st.sets(st.integers(0, 50), max_size=12))
def test_resolve_ranks_is_the_intersection(text: str, present: set[int]) -> None:
    wanted = _enumerated(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            kept = resolve_ranks(text, sorted(present))
        except InputError as exc:
            assert not wanted & present
            assert "not in this store" in exc.problem
            return
    assert kept == tuple(sorted(wanted & present))
    assert bool(caught) == bool(wanted - present)
    if caught:
        assert issubclass(caught[0].category, DataQualityWarning)


def test_resolve_ranks_with_python_values() -> None:
    assert resolve_ranks([1, 3, 3], [0, 1, 2, 3]) == (1, 3)
    with pytest.warns(DataQualityWarning, match=r"499,999,999,999,998 of range\(0, "):
        assert resolve_ranks(range(0, 10**15, 2), [0, 1, 2, 3]) == (0, 2)
    with pytest.raises(InputError, match=r"rank 7 is not in this store \(ranks 0-3\)"):
        resolve_ranks([7], [0, 1, 2, 3])
    with pytest.raises(InputError, match="no rank selected"):
        resolve_ranks([], [0, 1])
    with pytest.raises(InputError, match="integers"):
        resolve_ranks(["0"], [0, 1])  # type: ignore[list-item]


def test_huge_rank_range_costs_nothing(store: Path) -> None:
    trace = traceatlas.Trace(store)
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.warns(DataQualityWarning, match=r"ranks 2-999999999 are not in this store"):
        view = trace.select(ranks="0-999999999")
    with pytest.warns(DataQualityWarning):
        trace.select(ranks=range(10**18))
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert view.ranks == [0, 1]
    assert peak < 2**20 and elapsed < 5, (peak, elapsed)  # a list of 10**9 ints is ~40 GB
    with pytest.raises(InputError, match="more than 1,000,000 ranks"):
        parse_ranks("0-999999999")


def test_issue_huge_rank_range_in_the_cli(store: Path) -> None:
    result = _cli("analyze", "kernels", str(store), "--ranks", "0-999999999", "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert {r["name"] for r in json.loads(result.stdout)} == {"kernel_r0", "kernel_r1"}
    assert "ranks 2-999999999 are not in this store (ranks 0-1); selecting 0-1" in (
        result.stderr)


def test_issue_rank_not_in_store(store: Path) -> None:
    line = _error(_cli("analyze", "kernels", str(store), "--ranks", "99"))
    assert line == "error: --ranks: rank 99 is not in this store (ranks 0-1)"
    line = _error(_cli("filter", str(store), "-o", str(store.parent / "f"), "--ranks", "5-9"))
    assert line == "error: --ranks: ranks 5-9 are not in this store (ranks 0-1)"
    assert not (store.parent / "f").exists()


def test_partly_present_ranks_keep_the_present_ones(store: Path) -> None:
    result = _cli("analyze", "kernels", str(store), "--ranks", "1,7", "-f", "json")
    assert result.exit_code == 0
    assert [r["name"] for r in json.loads(result.stdout)] == ["kernel_r1"]
    assert "rank 7 is not in this store (ranks 0-1); selecting 1" in result.stderr


# -- analysis parameters have ranges -----------------------------------------------------


def _numeric_params() -> list[tuple[str, Any]]:
    out = []
    for name in sorted(analysis.ANALYSES):
        for p in analysis.get_analysis(name).params:
            if p.kind in (int, float):
                out.append((name, p))
    return out


NUMERIC = _numeric_params()


def test_every_numeric_parameter_has_a_documented_range() -> None:
    assert len(NUMERIC) >= 15
    for name, p in NUMERIC:
        assert p.minimum is not None and p.maximum is not None, (name, p.name)
        assert p.minimum <= p.default <= p.maximum, (name, p.name)


@pytest.mark.parametrize(("name", "param"), NUMERIC, ids=[f"{a}.{p.name}" for a, p in NUMERIC])
def test_range_edges(name: str, param: Any) -> None:
    spec = analysis.get_analysis(name)
    for ok in (param.minimum, param.maximum):
        assert registry.parse_params(spec, {param.name: str(ok)})[param.name] == ok
        assert registry.parse_params(spec, {param.name: ok})[param.name] == ok
    step = 1 if param.kind is int else 0.5
    for bad in (param.minimum - step, param.maximum + step):
        for given_value in (str(bad), bad):
            with pytest.raises(InputError) as err:
                registry.parse_params(spec, {param.name: given_value})
            assert err.value.path == f"--param {param.name}"
            assert "out of range" in err.value.problem
            assert param.range_text() in err.value.problem
    if param.kind is float:
        for bad in ("nan", "inf", math.nan, -math.inf):
            with pytest.raises(InputError, match="finite"):
                registry.parse_params(spec, {param.name: bad})


def test_issue_huge_bins_is_refused_before_any_work(tmp_path: Path) -> None:
    trace = write_mpi_trace(tmp_path / "run.prv", ranks=2, iterations=2)
    start = time.perf_counter()
    line = _error(_cli("analyze", "comm_over_time", str(tmp_path / "run.prv"),
                       "-p", "bins=100000000"))
    assert line == ("error: --param bins: 100000000 is out of range for comm_over_time "
                    "(allowed: 1..100000)")
    assert time.perf_counter() - start < 5
    # the largest allowed value runs: one row per bin, every message counted once
    result = _cli("analyze", "comm_over_time", str(tmp_path / "run.prv"),
                  "-p", "bins=100000", "-f", "csv")
    assert result.exit_code == 0
    rows = result.stdout.strip().splitlines()[1:]
    header = result.stdout.splitlines()[0].split(",")
    assert len(rows) == 100_000
    count = header.index("count")
    assert sum(int(r.split(",")[count]) for r in rows) == trace.counts["messages"]


def test_analyses_lists_the_ranges() -> None:
    result = _cli("analyses")
    assert result.exit_code == 0
    text = result.stdout
    assert "bins=50 [1..100000]" in text  # comm_over_time
    assert "top=10 [0..10^9]" in text  # advisor
    assert "[range]" in text


def test_huge_integer_parameter_text(store: Path) -> None:
    line = _error(_cli("analyze", "kernels", str(store), "-p", "top=" + "9" * 60))
    assert "a number of more than 40 digits is out of range" in line
    line = _error(_cli("analyze", "kernels", str(store), "-p", "top=" + "9" * 5000))
    assert "kernels expects int" in line and len(line) < 200


# -- windows, durations, steps -----------------------------------------------------------


@pytest.mark.parametrize(("args", "expected"), [
    (["--window", "0:99999999999s"], "duration '99999999999s' is too long"),
    (["--window", "@99999999999999999999:"], "is past the int64 ns range"),
    (["--window", "0:9000000000s"], "relative to the trace start"),
    (["--window", "5s:1s"], "end is before start"),
    (["--step", "99"], "no step 99 in the trace (steps: 1)"),
    (["--step", "-1"], "no step -1 in the trace (steps: 1)"),
    (["--step", "9" * 30], f"no step {'9' * 30} in the trace"),
])
def test_absurd_selections_exit_2(store: Path, args: list[str], expected: str) -> None:
    line = _error(_cli("analyze", "kernels", str(store), *args))
    assert expected in line


@pytest.mark.parametrize(("value", "expected"), [
    ("-5ms", "bad duration '-5ms'"),
    ("999999999999s", "is too long"),
])
def test_bad_min_dur_exits_2(store: Path, value: str, expected: str) -> None:
    out = store.parent / "filtered"
    line = _error(_cli("filter", str(store), "-o", str(out), f"--min-dur={value}"))
    assert line.startswith("error: --min-dur: ") and expected in line
    assert not out.exists()


def test_python_selection_values_are_checked(store: Path) -> None:
    trace = traceatlas.Trace(store)
    with pytest.raises(InputError, match="min_dur_ns"):
        trace.select(min_dur_ns=-1)
    with pytest.raises(InputError, match="int64"):
        trace.select(window=(0, 2**70))
    with pytest.raises(InputError, match="before its start"):
        trace.select(window=(10, 5))
    with pytest.raises(InputError, match="no step 42"):
        trace.select(step=42)
