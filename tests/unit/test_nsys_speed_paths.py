"""The shortcuts of the nsys reader's speed work (issue 14, session 2026-12-07) against
the plain Arrow operations they stand for: NULL columns on a shared zero buffer
(``pa.nulls``), dictionary comparisons (``pc.equal`` of the decoded text), categories
refined on the dictionary (the string path), columns encoded as the store's ``conform``
casts them (``pc.dictionary_encode`` of the text), and the wrong-typed rows a query
drops counted from the row count (the per-row flag)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.io import nsys_load, nsys_tables
from traceatlas.io.nsys import NsysReader
from traceatlas.io.nsys_adbc import DICT, _nulls, text_equals
from traceatlas.io.sources import Source
from traceatlas.testing.nsys import Call, Kernel, Range, write_export

TEXTS = ["kernel", "nvtx", "runtime", "memcpy", "comm_kernel", "step", ""]
NAMES = ["gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ProfilerStep#3", "fwd",
         "rcclKernel", "ProfilerStep"]


@pytest.mark.parametrize("type_", [pa.int64(), pa.float64(), pa.string(), DICT])
@pytest.mark.parametrize("n", [0, 1, 7, 9, 1000])
def test_nulls_on_a_shared_buffer_equal_pa_nulls(type_: pa.DataType, n: int) -> None:
    zeros = pa.py_buffer(bytes(8 * n + 8))
    got = _nulls(n, type_, zeros)
    got.validate(full=True)
    assert got.type == type_
    assert got.equals(pa.nulls(n, type_))


_chunks = st.lists(st.lists(st.one_of(st.none(), st.sampled_from(TEXTS)), max_size=12),
                   min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(chunks=_chunks, text=st.sampled_from(TEXTS))
def test_text_equals_is_equal_of_the_text(chunks: list[list[str | None]], text: str) -> None:
    column = pa.chunked_array([pc.dictionary_encode(pa.array(c, pa.string())) for c in chunks],
                              DICT)
    want = pc.equal(column.cast(pa.string()), text)
    assert text_equals(column, text).combine_chunks().equals(want.combine_chunks())
    plain = column.cast(pa.string())
    assert text_equals(plain, text).combine_chunks().equals(want.combine_chunks())


_rows = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(TEXTS[:6])), max_size=30)


@settings(max_examples=80, deadline=None)
@given(rows=_rows, dictionary=st.permutations(TEXTS[:6]))
def test_categories_refined_on_the_dictionary_are_the_string_path(
        rows: list[tuple[str, str]], dictionary: list[str]) -> None:
    names = nsys_tables._first_seen(pc.dictionary_encode(pa.array([n for n, _ in rows],
                                                                   pa.string())))
    codes = pa.array([dictionary.index(c) for _, c in rows], pa.int32())
    category = pa.DictionaryArray.from_arrays(codes, pa.array(dictionary, pa.string()))
    fast = nsys_tables._refine_categories(names, category)
    plain = nsys_tables._refine_categories(names, category.cast(pa.string()))
    assert pa.types.is_dictionary(fast.type)
    assert fast.cast(pa.string()).equals(plain)
    # as the store's conform casts the text: dictionary in order of first use
    want = plain.cast(DICT)
    assert nsys_tables._encoded(fast).equals(want)
    assert nsys_tables._encoded(category).equals(category.cast(pa.string()).cast(DICT))


def test_encoded_with_nulls_takes_the_text_path() -> None:
    values = pc.dictionary_encode(pa.array(["b", None, "a", "b"], pa.string()))
    assert nsys_tables._encoded(values).equals(pa.array(["b", None, "a", "b"]).cast(DICT))


S = 5_000_000_000


@pytest.mark.parametrize("threads", [1, 3])
def test_dropped_rows_counted_from_the_row_count(tmp_path: Path, threads: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Wrong-typed values in tables read with and without the count of their args
    members (pieces of 2 rows): the same rows dropped, the same counts reported."""
    monkeypatch.setattr(nsys_load, "_MIN_PIECE_ROWS", 2)
    kernels = [Kernel(S + 1_000 * i, S + 1_000 * i + 500, f"k{i}", correlation=i)
               for i in range(1, 8)]
    calls = [Call(S + 1_000 * i, S + 1_000 * i + 400, "cudaLaunchKernel_v7000",
                  correlation=i) for i in range(1, 8)]
    ranges = [Range(S + 1_000 * i, S + 1_000 * i + 900, f"r{i}") for i in range(1, 8)]
    path = write_export(tmp_path / "t.sqlite", kernels, calls, ranges)
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' WHERE correlationId = 2")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET \"end\" = 1.5 WHERE correlationId = 3")
    con.execute("UPDATE NVTX_EVENTS SET globalTid = x'00' WHERE text IN ('r4', 'r6')")
    con.commit()
    con.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rank,) = NsysReader().read(Source(str(path)), threads=threads)
    messages = [str(w.message) for w in caught]
    iv = rank.tables["intervals"].to_pylist()
    names = {c: sorted(r["name"] for r in iv if r["category"] == c)
             for c in ("kernel", "nvtx")}
    assert names["kernel"] == ["k1", "k3", "k4", "k5", "k6", "k7"]
    assert names["nvtx"] == ["r1", "r2", "r3", "r5", "r7"]
    assert sum(r["category"] in ("runtime", "driver") for r in iv) == 6
    for table, n, column in (("CUPTI_ACTIVITY_KIND_KERNEL", 1, "start 1"),
                             ("CUPTI_ACTIVITY_KIND_RUNTIME", 1, "end 1"),
                             ("NVTX_EVENTS", 2, "globalTid 2")):
        assert any(f"table {table} has {n} row(s) with text" in m and column in m
                   for m in messages), (table, messages)
