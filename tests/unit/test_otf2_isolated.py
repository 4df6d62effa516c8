"""The OTF2 reader runs in a child process (``io/otf2_isolated.py``): a C-library crash
there is a refusal naming the archive, not the end of this process; results, errors and
data-quality warnings come back as an in-process read gives them."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

from traceatlas.errors import CorruptTraceError, DataQualityWarning, InputError
from traceatlas.io.otf2_isolated import isolated
from traceatlas.tempfiles import staging_prefix


def _abort() -> None:
    os.abort()


def _exit() -> None:
    os._exit(3)


def _raise() -> None:
    raise InputError("x.otf2", "a damaged definition")


def _warn_and_return(value: int) -> int:
    warnings.warn("clipped 2 events", DataQualityWarning, stacklevel=1)
    warnings.warn("a library's own", DeprecationWarning, stacklevel=1)
    return value * 2


def _leftovers() -> list[str]:
    return [n for n in os.listdir(tempfile.gettempdir())
            if n.startswith(staging_prefix("otftables"))]


def _table(n: int) -> pa.Table:
    big = pa.table({"x": list(range(1000)), "s": [str(i) for i in range(1000)]})
    return big.slice(10, n)  # a slice: its own pickle would carry the whole buffers


def test_a_crash_in_the_child_is_a_refusal_naming_the_archive() -> None:
    with pytest.raises(CorruptTraceError, match=r"^run/x\.otf2: the OTF2 library crashed "
                       r"\(SIGABRT\)"):
        isolated("run/x.otf2", _abort)
    with pytest.raises(CorruptTraceError, match=r"ended \(exit code 3\)"):
        isolated("run/x.otf2", _exit)
    assert isolated("run/x.otf2", abs, -4) == 4  # this process goes on
    assert _leftovers() == []


def test_tables_come_back_mapped_and_the_directory_goes() -> None:
    got = isolated("x.otf2", _table, 5)
    assert got.equals(_table(5)) and got.num_rows == 5
    assert got.column("s").to_pylist() == ["10", "11", "12", "13", "14"]
    assert _leftovers() == []  # the files are removed; the mapped tables stay readable


def test_errors_and_warnings_come_back() -> None:
    with pytest.raises(InputError) as got:
        isolated("x.otf2", _raise)
    assert str(got.value) == "x.otf2: a damaged definition"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert isolated("x.otf2", _warn_and_return, 21) == 42
    assert [(str(w.message), w.category) for w in caught] == [
        ("clipped 2 events", DataQualityWarning)]  # not the libraries' deprecations


def test_an_archive_ingests_on_a_dask_worker(tmp_path: Path) -> None:
    """A Dask worker is a daemonic process (no multiprocessing children): the reader's
    child is a subprocess, so an OTF2 archive ingests there as it does here."""
    pytest.importorskip("distributed")
    import traceatlas
    from traceatlas.engine.dask import DaskEngine
    from traceatlas.testing.otf2 import write_otf2

    anchor = write_otf2(tmp_path / "a", {0: [("main", 0, 100), ("MPI_Send", 10, 20)],
                                         1: [("main", 0, 100), ("MPI_Recv", 10, 25)]})
    here = traceatlas.Trace(traceatlas.ingest(anchor, tmp_path / "here"))
    engine = DaskEngine(n_workers=1)
    try:
        there = traceatlas.Trace(traceatlas.ingest(anchor, tmp_path / "there", engine=engine))
    finally:
        engine.close()
    assert there.ranks == here.ranks == [0, 1]
    cols = ["rank", "name", "start_ns", "end_ns"]
    assert there.intervals.select(cols).collect().sort(cols).equals(
        here.intervals.select(cols).collect().sort(cols))
