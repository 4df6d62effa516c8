"""Track numbering of the nsys reader: ``track_numbers`` (Arrow hashing + Python over
the distinct tracks) against ``_tracks_sql`` (the DuckDB query it replaced, kept as the
general path and as the oracle), on every real export in ``shared/traces``, on built
exports with several processes, threads, devices and streams, and on hand-made rows
whose expected numbers are worked out by hand."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceatlas.io import nsys_load as nl
from traceatlas.io import nsys_tables as nt
from traceatlas.io.nsys_schema import Catalog
from traceatlas.testing import nsys as tn

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
REAL = sorted(TRACES.rglob("*.sqlite")) if TRACES.is_dir() else []


def _both(ev: pa.Table, mk: pa.Table) -> tuple[tuple[pa.Table, np.ndarray], tuple[
        pa.Table, np.ndarray] | None]:
    con = duckdb.connect()
    try:
        con.register("ev", nt._with_rid(ev, ("proc", "kind", "tid", "device", "stream",
                                             "start", "end")))
        con.register("mk", nt._with_rid(mk, ("proc", "tid", "ts")))
        return nt._tracks_sql(con, ev), nt.track_numbers(ev, mk)
    finally:
        con.close()


def _assert_same(ev: pa.Table, mk: pa.Table) -> None:
    (want, want_track), got = _both(ev, mk)
    assert got is not None
    tracks, track = got
    assert tracks.to_pylist() == want.to_pylist()
    assert track.tolist() == want_track.tolist()


def _loaded(path: Path) -> nl.Loaded:
    uri = path.absolute().as_uri() + "?mode=ro"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        con = sqlite3.connect(uri, uri=True)
        try:
            return nl.load(Catalog(con, path.name), uri)
        finally:
            con.close()


@pytest.mark.skipif(not REAL, reason="shared/traces not present")
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_exports(path: Path) -> None:
    loaded = _loaded(path)
    _assert_same(loaded.ev.unify_dictionaries().combine_chunks(),
                 loaded.mk.unify_dictionaries())


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(0, 2),
                          st.integers(0, 3), st.booleans()), min_size=1, max_size=30))
def test_built_exports(tmp_path: Path, rows: list[tuple[int, int, int, int, bool]]) -> None:
    kernels, calls = [], []
    for i, (pid, tid, device, stream, is_kernel) in enumerate(rows):
        if is_kernel:
            kernels.append(tn.Kernel(10 * i, 10 * i + 5, f"k{i}", device, stream, pid=pid))
        else:
            calls.append(tn.Call(10 * i, 10 * i + 5, "cudaLaunchKernel", pid=pid, tid=tid))
    path = tn.write_export(tmp_path / "t.sqlite", kernels=kernels, calls=calls)
    loaded = _loaded(path)
    _assert_same(loaded.ev.unify_dictionaries().combine_chunks(),
                 loaded.mk.unify_dictionaries())


def _ev(procs: list[int | None], kinds: list[str], tids: list[int | None],
        devices: list[int | None], streams: list[int | None]) -> pa.Table:
    n = len(procs)
    return pa.table({
        "proc": pa.array(procs, pa.int64()),
        "kind": pa.array(kinds, pa.string()).dictionary_encode(),
        "tid": pa.array(tids, pa.int64()), "device": pa.array(devices, pa.int64()),
        "stream": pa.array(streams, pa.int64()),
        "start": pa.array(range(n), pa.int64()), "end": pa.array(range(n), pa.int64()),
    })


def test_by_hand() -> None:
    """Per process: host threads by tid first, then streams by (device, stream), then
    sync rows (kind ``device``); marks add their thread; a null tid reads -1."""
    ev = _ev([5, 5, 5, 5, 2, 5],
             [nt.STREAM, nt.HOST, nt.DEVICE, nt.STREAM, nt.HOST, nt.HOST],
             [None, 9, None, None, 3, None], [1, None, 0, 0, None, None],
             [7, None, 0, 8, None, None])
    mk = pa.table({"proc": pa.array([5], pa.int64()), "tid": pa.array([4], pa.int64()),
                   "ts": pa.array([0], pa.int64())})
    got = nt.track_numbers(ev, mk)
    assert got is not None
    tracks, track = got
    # process 2: thread 3 -> 0; process 5: threads -1, 4 (mark), 9 -> 0, 1, 2; streams
    # (0, 8) -> 3, (1, 7) -> 4; sync (0, 0) -> 5
    assert track.tolist() == [4, 2, 5, 3, 0, 0]
    assert [(r["proc"], r["kind"], r["tid"], r["device"], r["stream"], r["track_id"])
            for r in tracks.to_pylist()] == [
        (2, nt.HOST, 3, -1, -1, 0), (5, nt.HOST, -1, -1, -1, 0), (5, nt.HOST, 4, -1, -1, 1),
        (5, nt.HOST, 9, -1, -1, 2), (5, nt.STREAM, -1, 0, 8, 3), (5, nt.STREAM, -1, 1, 7, 4),
        (5, nt.DEVICE, -1, 0, 0, 5)]
    _assert_same(ev, mk)


def test_null_process_takes_the_sql_path() -> None:
    ev = _ev([None, 1], [nt.HOST, nt.HOST], [1, 1], [None, None], [None, None])
    mk = pa.table({"proc": pa.array([], pa.int64()), "tid": pa.array([], pa.int64()),
                   "ts": pa.array([], pa.int64())})
    assert nt.track_numbers(ev, mk) is None
