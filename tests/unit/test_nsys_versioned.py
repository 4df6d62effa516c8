"""``collapse_versioned``: a versioned CUDA runtime record nested in its public call is
dropped (its name kept in the public record's args); every other record stays.

Expected rows are written by hand below (which records survive and why)."""

from __future__ import annotations

import json

import pyarrow as pa

from traceatlas.io.nsys_versioned import collapse_versioned

RT = "CUPTI_ACTIVITY_KIND_RUNTIME"


def _ev(rows: list[tuple[int, int, int, int, int | None, str, str, str]]) -> pa.Table:
    """(proc, tid, start, end, correlation, name, raw name, source table) rows."""
    cols = list(zip(*rows, strict=True))
    return pa.table({
        "proc": pa.array(cols[0], pa.int64()), "tid": pa.array(cols[1], pa.int64()),
        "start": pa.array(cols[2], pa.int64()), "end": pa.array(cols[3], pa.int64()),
        "correlation": pa.array(cols[4], pa.int64()),
        "name": pa.array(cols[5], pa.string()).dictionary_encode(),
        "source_category": pa.array(cols[7], pa.string()).dictionary_encode(),
        "args": pa.array([json.dumps({"nameId": raw, "returnValue": 0}) for raw in cols[6]]),
    })


def _rows(ev: pa.Table) -> list[tuple[int, str, str | None]]:
    return [(s, json.loads(a)["nameId"], json.loads(a).get("versioned_name"))
            for s, a in zip(ev["start"].to_pylist(), ev["args"].to_pylist(), strict=True)]


def test_nested_versioned_record_is_collapsed() -> None:
    ev = _ev([
        (1, 7, 100, 200, 5, "cudaMemcpy", "cudaMemcpy", RT),            # public
        (1, 7, 101, 199, 5, "cudaMemcpy", "cudaMemcpy_v3020", RT),      # inside: dropped
        (1, 7, 300, 400, 6, "cudaMemcpy", "cudaMemcpy_v3020", RT),      # alone: kept
        (1, 8, 100, 200, 5, "cudaMemcpy", "cudaMemcpy_v3020", RT),      # other thread: kept
        (1, 7, 500, 600, 9, "cudaMalloc", "cudaMalloc", RT),
        (1, 7, 510, 590, 10, "cudaMalloc", "cudaMalloc_v3020", RT),     # other corr: kept
        (1, 7, 700, 800, 11, "cudaFree", "cudaFree", RT),
        (1, 7, 700, 801, 11, "cudaFree", "cudaFree_v3020", RT),         # ends after: kept
        (2, 7, 100, 200, 5, "cudaMemcpy", "cudaMemcpy_v3020", RT),      # other process: kept
    ])
    out = collapse_versioned(ev)
    assert _rows(out) == [
        (100, "cudaMemcpy", "cudaMemcpy_v3020"),
        (300, "cudaMemcpy_v3020", None),
        (100, "cudaMemcpy_v3020", None),
        (500, "cudaMalloc", None),
        (510, "cudaMalloc_v3020", None),
        (700, "cudaFree", None),
        (700, "cudaFree_v3020", None),
        (100, "cudaMemcpy_v3020", None),
    ]
    assert json.loads(out["args"][0].as_py())["returnValue"] == 0  # other args kept


def test_without_public_names_the_table_is_returned_as_is() -> None:
    ev = _ev([(1, 7, 100, 200, 5, "cudaMemcpy", "cudaMemcpy_v3020", RT),
              (1, 7, 300, 400, 6, "cudaLaunchKernel", "cudaLaunchKernel_v7000", RT)])
    assert collapse_versioned(ev) is ev


def test_same_name_in_other_tables_is_ignored_and_one_public_absorbs_one() -> None:
    ev = _ev([
        (1, 7, 100, 200, None, "cudaMemcpy", "cudaMemcpy", RT),
        (1, 7, 110, 150, None, "cudaMemcpy", "cudaMemcpy_v3020", RT),   # dropped
        (1, 7, 160, 190, None, "cudaMemcpy", "cudaMemcpy_v3020", RT),   # second: kept
        (1, 7, 100, 200, None, "cudaMemcpy", "cudaMemcpy_v3020", "OSRT_API"),  # not runtime
    ])
    assert _rows(collapse_versioned(ev)) == [
        (100, "cudaMemcpy", "cudaMemcpy_v3020"),
        (160, "cudaMemcpy_v3020", None),
        (100, "cudaMemcpy_v3020", None),
    ]
