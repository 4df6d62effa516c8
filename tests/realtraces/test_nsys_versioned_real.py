"""A CUDA call written twice in the runtime table (public entry + the versioned function
it calls, e.g. ``cudaMemcpy`` and ``cudaMemcpy_v3020``) is counted once, on every real
Nsight Systems export.

Expected values come from the SQLite file itself (standard library ``sqlite3``):

* saxpy (nsys 2022, Perlmutter): ``analyze profile`` gives the public ``cudaMemcpy``
  rows of CUPTI_ACTIVITY_KIND_RUNTIME (StringIds value exactly ``cudaMemcpy``): their
  count and the sum of ``end - start``; every ``cudaMemcpy_v3020`` row lies inside one of
  them (same thread and correlation id), which is the premise of the collapse;
* every export: runtime + driver intervals per name = raw rows per name without the
  ``_v<digits>`` suffix, minus the versioned rows that a public row of the same call
  holds (a SQL self-join: same globalTid and correlationId, start/end within).
"""

from __future__ import annotations

import json
import re
import sqlite3
import warnings
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas.analysis import registry
from traceatlas.engine import LocalEngine

pytestmark = pytest.mark.realtrace

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
FILES = sorted(str(p.relative_to(TRACES)) for p in TRACES.glob("**/*.sqlite")) \
    if TRACES.is_dir() else []
SAXPY = "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
_SUFFIX = re.compile(r"_v\d+$")


def _open(traces_dir: Path, rel: str, tmp: Path) -> traceatlas.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = traceatlas.ingest(traces_dir / rel, tmp / "store",
                                  engine=LocalEngine(max_workers=1))
    return traceatlas.open(store)


def _db(traces_dir: Path, rel: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{traces_dir / rel}?mode=ro", uri=True)


def test_saxpy_cudamemcpy_counted_once(traces_dir: Path, tmp_path: Path) -> None:
    db = _db(traces_dir, SAXPY)
    public = db.execute(
        "SELECT count(*), sum(r.\"end\" - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r "
        "JOIN StringIds AS s ON s.id = r.nameId WHERE s.value = 'cudaMemcpy'").fetchone()
    versioned = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s "
        "ON s.id = r.nameId WHERE s.value = 'cudaMemcpy_v3020'").fetchone()[0]
    nested = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS v "
        "JOIN StringIds AS sv ON sv.id = v.nameId AND sv.value = 'cudaMemcpy_v3020' "
        "WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME AS p "
        "JOIN StringIds AS sp ON sp.id = p.nameId AND sp.value = 'cudaMemcpy' "
        "WHERE p.globalTid = v.globalTid AND p.correlationId = v.correlationId "
        "AND p.start <= v.start AND v.\"end\" <= p.\"end\")").fetchone()[0]
    assert public[0] == versioned == nested == 15  # the premise: each call written twice
    trace = _open(traces_dir, SAXPY, tmp_path)
    table = registry.run("profile", trace, {"categories": "runtime"}).table
    row = table.filter(pl.col("name") == "cudaMemcpy").to_dicts()
    assert len(row) == 1
    assert (row[0]["calls"], row[0]["inclusive_ns"]) == (public[0], public[1])
    assert round(public[1] / 1e6, 1) == 374.3  # the number, ms
    args = trace.intervals.filter(pl.col("name") == "cudaMemcpy").select("args").collect()
    assert {json.loads(a)["versioned_name"] for a in args["args"]} == {"cudaMemcpy_v3020"}


@pytest.mark.parametrize("rel", FILES)
def test_runtime_calls_per_name(traces_dir: Path, tmp_path: Path, rel: str) -> None:
    db = _db(traces_dir, rel)
    raw = Counter(_SUFFIX.sub("", name) for (name,) in db.execute(
        "SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r "
        "JOIN StringIds AS s ON s.id = r.nameId"))
    held = Counter(_SUFFIX.sub("", name) for (name,) in db.execute(
        "SELECT sv.value FROM CUPTI_ACTIVITY_KIND_RUNTIME AS v "
        "JOIN StringIds AS sv ON sv.id = v.nameId "
        "WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME AS p "
        "JOIN StringIds AS sp ON sp.id = p.nameId "
        "WHERE sp.value || substr(sv.value, length(sp.value) + 1) = sv.value "
        "AND sv.value GLOB sp.value || '_v[0-9]*' "
        "AND p.globalTid = v.globalTid AND p.correlationId = v.correlationId "
        "AND p.start <= v.start AND v.\"end\" <= p.\"end\")"))
    expected = raw - held
    trace = _open(traces_dir, rel, tmp_path)
    got = trace.sql("SELECT name, count(*) AS n FROM intervals "
                    "WHERE category IN ('runtime', 'driver') GROUP BY 1").to_dicts()
    assert {r["name"]: r["n"] for r in got} == dict(expected)
    if rel == SAXPY:
        assert sum(held.values()) == 38  # cudaMalloc 15, cudaMemcpy 15, launch 5, free 3
    else:
        assert not held  # the other generations write only the versioned record
