"""The sped-up nsys reader against a frozen copy of the reader before the speed work
(issue 14): the same tables, as the store writes them, on every real ``.sqlite`` in
``shared/traces`` and on synthetic exports (``testing/nsys.py``, Hypothesis).

The oracle is the nsys reader of commit ``ORACLE_COMMIT`` (``git show`` of its
``io/nsys*.py`` into a temporary package), so the expected tables come from the code
that was in use, not from the code under test. The new reader hands intervals back in
the store's order (start, then track; the writer then keeps them as they are), the old
one in nesting order: both are put through the writer's ``time_sorted`` and compared
with dictionaries decoded.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceatlas.io.nsys import read_export
from traceatlas.io.reading import RankData
from traceatlas.model.schema import conform
from traceatlas.store.writer import TIME_SORTED, time_sorted
from traceatlas.testing import nsys as tn

ORACLE_COMMIT = "9b541c8"
REPO = Path(__file__).resolve().parents[2]
TRACES = REPO.parent / "shared" / "traces"
MODULES = ("nsys_schema", "nsys_adbc", "nsys_load", "nsys_versioned", "nsys_tables", "nsys")
STORE_ORACLE_COMMIT = "d34c997"
"""The reader before the 2026-12-07 speed work (which keeps the store's bytes)."""


def _oracle(commit: str = ORACLE_COMMIT) -> ModuleType:
    """The frozen reader's ``nsys`` module (imports rewritten to the frozen copies)."""
    pkg_name = f"_nsys_oracle_{commit}"
    if f"{pkg_name}.nsys" in sys.modules:
        return sys.modules[f"{pkg_name}.nsys"]
    pkg = ModuleType(pkg_name)
    pkg.__path__ = []
    sys.modules[pkg_name] = pkg
    for name in MODULES:
        try:
            text = subprocess.run(
                ["git", "-C", str(REPO), "show", f"{commit}:src/traceatlas/io/{name}.py"],
                capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            pytest.skip(f"git history with commit {commit} is not available")
        for other in MODULES:
            text = text.replace(f"traceatlas.io.{other} ", f"{pkg_name}.{other} ")
            text = text.replace(f"traceatlas.io.{other}\n", f"{pkg_name}.{other}\n")
        text = text.replace("from traceatlas.io import nsys_load as nl",
                            f"from {pkg_name} import nsys_load as nl")
        text = text.replace("from traceatlas.io import nsys_tables as nt",
                            f"from {pkg_name} import nsys_tables as nt")
        text = text.replace("from traceatlas.io import nsys_schema as ns",
                            f"from {pkg_name} import nsys_schema as ns")
        spec = importlib.util.spec_from_loader(f"{pkg_name}.{name}", loader=None)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"{pkg_name}.{name}"] = module
        exec(compile(text, f"<{commit}:{name}.py>", "exec"), module.__dict__)
        setattr(pkg, name, module)
    return sys.modules[f"{pkg_name}.nsys"]


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with dictionary columns decoded (the encoding is not the content)."""
    cols = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
            for c in table.columns]
    names = table.column_names
    return pa.table(dict(zip(names, [c.combine_chunks() for c in cols], strict=True)))


def _stored(name: str, table: pa.Table) -> pa.Table:
    column = TIME_SORTED.get(name)
    return _plain(time_sorted(table, column) if column is not None else table)


def _read(read: object, path: Path, threads: int) -> tuple[list[RankData], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ranks = read(str(path), path.name, threads=threads)  # type: ignore[operator]
    return ranks, sorted(str(w.message) for w in caught)


def assert_same(path: Path, threads: int = 2) -> None:
    """The current reader and the frozen one give the same ranks, tables and warnings."""
    new, new_warnings = _read(read_export, path, threads)
    old, old_warnings = _read(_oracle().read_export, path, threads)
    assert new_warnings == old_warnings
    assert len(new) == len(old)
    for a, b in zip(new, old, strict=True):
        assert (a.rank, a.rank_source, a.clock, a.host, a.source_format) == \
            (b.rank, b.rank_source, b.clock, b.host, b.source_format)
        assert sorted(a.tables) == sorted(b.tables)
        for name in a.tables:
            got, want = _stored(name, a.tables[name]), _stored(name, b.tables[name])
            assert got.schema == want.schema, name
            assert got.equals(want), f"{path.name}: table {name} differs"


REAL = sorted(TRACES.rglob("*.sqlite")) if TRACES.is_dir() else []


@pytest.mark.skipif(not REAL, reason="shared/traces not present")
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
@pytest.mark.parametrize("threads", [1, 2])
def test_real_exports_match_the_frozen_reader(path: Path, threads: int) -> None:
    assert_same(path, threads)


@pytest.mark.skipif(not REAL, reason="shared/traces not present")
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_exports_give_the_frozen_readers_parts(path: Path) -> None:
    """Stricter than ``assert_same``, against the reader of ``STORE_ORACLE_COMMIT`` (it
    hands intervals over in store order too): the tables as the store writes them
    (``conform``, time order), dictionaries not decoded, so the encoding the reader
    gives (text columns made dictionaries from their dictionary, in order of first use)
    is the one the writer made from that reader's text."""
    new, _ = _read(read_export, path, 2)
    old, _ = _read(_oracle(STORE_ORACLE_COMMIT).read_export, path, 2)
    for a, b in zip(new, old, strict=True):
        for name in a.tables:
            got, want = (conform(name, t.add_column(0, "rank", pa.repeat(
                pa.scalar(0, pa.int32()), t.num_rows))) for t in (a.tables[name], b.tables[name]))
            column = TIME_SORTED.get(name)
            if column is not None:
                got, want = time_sorted(got, column), time_sorted(want, column)
            assert got.schema == want.schema, name
            assert got.combine_chunks().equals(want.combine_chunks()), \
                f"{path.name}: table {name} differs"


def test_intervals_come_in_store_order(tmp_path: Path) -> None:
    """Rows by start, then track: two threads' ranges interleaved in time, and a
    nested pair (outer first: same start, longer one first)."""
    path = tn.write_export(tmp_path / "t.sqlite", ranges=[
        tn.Range(6_000_000_000, 6_000_000_900, "outer", tid=101),
        tn.Range(6_000_000_000, 6_000_000_500, "inner", tid=101),
        tn.Range(6_000_000_100, 6_000_000_200, "other", tid=100),
        tn.Range(5_900_000_000, 5_900_000_100, "first", tid=101),
    ])
    (rank,) = read_export(str(path), "t.sqlite")
    iv = rank.tables["intervals"]
    assert iv["name"].cast(pa.string()).to_pylist() == ["first", "outer", "inner", "other"]
    assert iv["depth"].to_pylist() == [0, 0, 1, 0]
    assert time_sorted(iv, "start_ns") is iv  # the writer keeps it as it is


_times = st.integers(5_000_000_000, 5_000_010_000)


@st.composite
def _exports(draw: st.DrawFn) -> tuple[list[tn.Kernel], list[tn.Call], list[tn.Range]]:
    names = ["gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "copy", "ProfilerStep#3"]

    def span() -> tuple[int, int]:
        a = draw(_times)
        return a, a + draw(st.integers(0, 3_000))

    kernels = [tn.Kernel(*span(), draw(st.sampled_from(names[:3])),
                         device=draw(st.integers(0, 1)), stream=draw(st.integers(7, 8)),
                         correlation=draw(st.one_of(st.none(), st.integers(1, 6))),
                         pid=draw(st.sampled_from([100, 200])))
               for _ in range(draw(st.integers(0, 12)))]
    calls = [tn.Call(*span(), draw(st.sampled_from(["cudaLaunchKernel_v7000",
                                                    "cudaMemcpy", "cudaMemcpy_v3020"])),
                     correlation=draw(st.one_of(st.none(), st.integers(1, 6))),
                     pid=draw(st.sampled_from([100, 200])), tid=draw(st.integers(100, 101)))
             for _ in range(draw(st.integers(0, 12)))]
    ranges = [tn.Range(*span(), draw(st.sampled_from(["a", "b", names[3], "ProfilerStep#4"])),
                       pid=draw(st.sampled_from([100, 200])), tid=draw(st.integers(100, 101)))
              for _ in range(draw(st.integers(0, 12)))]
    return kernels, calls, ranges


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_exports())
def test_synthetic_exports_match_the_frozen_reader(
        tmp_path: Path, data: tuple[list[tn.Kernel], list[tn.Call], list[tn.Range]]) -> None:
    kernels, calls, ranges = data
    path = tn.write_export(tmp_path / "s.sqlite", kernels, calls, ranges)
    assert_same(path, threads=1)
