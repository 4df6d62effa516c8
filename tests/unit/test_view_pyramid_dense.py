"""The pyramid's dense rank-row matrices and narrow stored types (format 2): ``rows`` from
the dense matrices equals the sparse path and a plain per-rank loop; stored files use the
narrow types while queries answer in the contract's types; trimming the mapped pages
changes no answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_view_pyramid import BASE
from test_view_pyramid_scale import many_ranks

from traceatlas.model.trace import Trace
from traceatlas.view import levels as lv
from traceatlas.view import pyramid_dense
from traceatlas.view.pyramid import Pyramid, ensure_pyramid, pyramid_dir
from traceatlas.view.pyramid_build import (
    BINS_SCHEMA,
    COUNTERS_SCHEMA,
    FORMAT_VERSION,
    stored_schema,
)
from traceatlas.view.pyramid_dense import DenseRows, dense_levels
from traceatlas.view.pyramid_query import busy_matrix_loop

_STORE: dict[str, Trace] = {}
N_RANKS = 12


def _shared(factory: pytest.TempPathFactory) -> Pyramid:
    if "t" not in _STORE:
        _STORE["t"] = many_ranks(factory.mktemp("dense") / "s.tastore", N_RANKS)
    return ensure_pyramid(_STORE["t"])


def _sparse_rows(p: Pyramid, *args: Any) -> list[dict[str, Any]]:
    """``rows`` with the dense matrices hidden (the sparse level-file path)."""
    saved = p._dense
    p._dense = {k: DenseRows(p.directory, k, []) for k in saved}
    try:
        return p.rows(*args)
    finally:
        p._dense = saved


def _loop_rows(p: Pyramid, level: int, start: int, end: int, kind: str, ranks: list[int],
               groups: int) -> list[dict[str, Any]]:
    """Plain reference: each rank's busy per bin from its own tiles, groups by hand. The
    level answered: the smallest one >= ``level`` at which at least half of the ranks'
    rows are stored; a row stored only coarser is read at its own level (as ``tiles``
    answers) and each coarse bin's fraction counts for every bin it covers."""
    if not ranks:
        return []
    ids = [p._rows.get((r, kind)) for r in ranks]
    fins = [p.tracks[i].finest_level for i in ids if i is not None]
    used = level
    while fins and 2 * sum(f <= used for f in fins) < len(fins):
        used += 1
    used = min(used, p.top)
    width = lv.bin_ns(used)
    last = (p.end_ns - 1 - p.origin_ns) // width
    lo = max((start - p.origin_ns) // width, 0)
    hi = min((max(end - 1, start) - p.origin_ns) // width, last)
    bins = list(range(lo, hi + 1))
    frac = []
    for i in ids:
        row = [0.0] * len(bins)
        if i is not None and bins:
            (tile,) = p.tiles(used, p.origin_ns + lo * width, p.origin_ns + (hi + 1) * width,
                              [i])
            busy: dict[int, int] = {}
            table = tile.table.to_pydict()
            for b, ns in zip(table["bin"], table["busy_ns"], strict=True):
                busy[b] = busy.get(b, 0) + ns
            for k, b in enumerate(bins):  # the tile bin holding the start of bin b
                own = (b * width) // tile.bin_ns
                row[k] = min(busy.get(own, 0) / tile.bin_ns, 1.0)
        frac.append(row)
    n = len(ranks)
    g = max(1, min(groups, n))
    sizes = [n // g + (1 if k < n % g else 0) for k in range(g)]
    out, a = [], 0
    for size in sizes:
        members = frac[a:a + size]
        out.append({"ranks": [ranks[a], ranks[a + size - 1]], "bin": bins,
                    "mean": [sum(c) / size for c in zip(*members, strict=True)],
                    "min": [min(c) for c in zip(*members, strict=True)],
                    "max": [max(c) for c in zip(*members, strict=True)], "level": used,
                    "bin_ns": width})
        a += size
    return out


def _same(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert {k: g[k] for k in ("ranks", "bin", "level", "bin_ns", "min", "max")} == \
            {k: w[k] for k in ("ranks", "bin", "level", "bin_ns", "min", "max")}
        assert g["mean"] == pytest.approx(w["mean"], rel=1e-12, abs=1e-15)


def test_dense_matrices_exist_for_the_coarse_levels(tmp_path_factory: pytest.TempPathFactory
                                                    ) -> None:
    p = _shared(tmp_path_factory)
    for kind in ("rank_device", "rank_host"):
        fins = [t.finest_level for t in p.tracks if t.kind == kind]
        assert p.header["dense"][kind] == list(range(min(fins), p.top + 1))
        for level in p.header["dense"][kind]:
            mat = np.load(p.directory / f"rows-{kind}-{level}.npy")
            assert mat.shape == ((p.end_ns - 1 - p.origin_ns) // lv.bin_ns(level) + 1, N_RANKS)
            assert mat.dtype == np.uint32
            # column r = rank r's row summed over categories (the per-rank loop)
            ids = [p._rows.get((r, kind)) for r in range(N_RANKS)]
            want = busy_matrix_loop(p._bins, level, ids, 0, mat.shape[0] - 1)
            assert np.array_equal(mat.T, want)
        assert not [f for f in p.directory.glob(f"rows-{kind}-*.npy")
                    if int(f.stem.rsplit("-", 1)[1]) not in p.header["dense"][kind]]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_dense_rows_equal_sparse_rows_and_the_per_rank_loop(
        tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    p = _shared(tmp_path_factory)
    level = data.draw(st.integers(0, p.top))
    kind = data.draw(st.sampled_from(["rank_device", "rank_host"]))
    ranks = data.draw(st.one_of(
        st.builds(lambda a, n: list(range(a, min(a + n, N_RANKS))), st.integers(0, 11),
                  st.integers(1, 12)),
        st.lists(st.integers(0, N_RANKS + 2), min_size=1, max_size=16)))  # 12..14: none
    start = BASE + data.draw(st.integers(-3000, 12_000))
    end = start + data.draw(st.integers(0, 15_000))
    groups = data.draw(st.integers(1, 8))
    args = (level, start, end, kind, ranks, groups)
    dense = p.rows(*args)
    assert p._dense[kind].has(dense[0]["level"])  # the dense path answered
    _same(dense, _sparse_rows(p, *args))
    _same(dense, _loop_rows(p, *args))


def test_dense_rows_read_in_chunks_give_the_same_answer(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _shared(tmp_path_factory)
    args = (0, BASE - 500, BASE + 9500, "rank_device", list(range(N_RANKS)), 5)
    whole = p.rows(*args)
    assert len(whole[0]["bin"]) > 3
    monkeypatch.setattr(pyramid_dense, "CHUNK_CELLS", 2 * N_RANKS)  # 2 bins at a time
    _same(p.rows(*args), whole)


def test_dense_levels_by_hand() -> None:
    cells = pyramid_dense.DENSE_CELLS
    # 4 ranks; level 0 too many cells, levels 1..3 fit; finest row level 2
    n_bins = [cells // 4 + 1, cells // 4, 100, 1]
    assert dense_levels(0, 3, n_bins, 4) == [1, 2, 3]
    assert dense_levels(2, 3, n_bins, 4) == [2, 3]
    assert dense_levels(4, 3, n_bins, 4) == []


def test_stored_schema_narrows_only_where_values_fit() -> None:
    s = stored_schema(BINS_SCHEMA, 2**31 - 1, 2**32 - 1, 2**32 - 1)
    assert [s.field(c).type for c in ("bin", "cat", "busy_ns", "count", "name")] == \
        [pa.int32(), pa.int8(), pa.uint32(), pa.uint32(), pa.int32()]
    w = stored_schema(BINS_SCHEMA, 2**31, 2**32, 2**32)
    assert w == BINS_SCHEMA
    c = stored_schema(COUNTERS_SCHEMA, 5, 1024, 7)
    assert [c.field(n).type for n in ("bin", "count", "min")] == \
        [pa.int32(), pa.uint32(), pa.float64()]


def test_level_files_are_narrow_and_tiles_answer_in_contract_types(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    p = _shared(tmp_path_factory)
    schema = pa.ipc.open_file(str(p.directory / "bins-0.arrow")).schema
    assert schema.field("bin").type == pa.int32()
    assert schema.field("busy_ns").type == pa.uint32()
    row = p._rows[(1, "rank_device")]
    (tile,) = p.tiles(p.tracks[row].finest_level, BASE, BASE + 9000, [row])
    assert tile.table.schema == BINS_SCHEMA and tile.table.num_rows > 0
    counter = next(t.id for t in p.tracks if t.kind == "counter")
    (ctile,) = p.counter_tiles(p.top, BASE, BASE + 9000, [counter])
    assert ctile.table.schema == COUNTERS_SCHEMA and ctile.table.num_rows > 0


def test_trimming_mapped_pages_changes_no_answer(tmp_path_factory: pytest.TempPathFactory
                                                 ) -> None:
    p = _shared(tmp_path_factory)
    ids = list(range(len(p.tracks)))
    before = [t.table.to_pydict() for t in p.tiles(1, BASE, BASE + 9000, ids)]
    rows = _sparse_rows(p, 1, BASE, BASE + 9000, "rank_host", list(range(N_RANKS)), 3)
    p._bins.trim()
    p._counters.trim()
    assert [t.table.to_pydict() for t in p.tiles(1, BASE, BASE + 9000, ids)] == before
    assert _sparse_rows(p, 1, BASE, BASE + 9000, "rank_host", list(range(N_RANKS)), 3) == rows


def test_format_1_pyramid_is_rebuilt(tmp_path: Path) -> None:
    trace = many_ranks(tmp_path / "s.tastore", 2)
    p = ensure_pyramid(trace)
    header = json.loads((p.directory / "header.json").read_text())
    header["format"] = 1
    (p.directory / "header.json").write_text(json.dumps(header))
    (p.directory / "rows-rank_host-0.npy").unlink(missing_ok=True)
    again = ensure_pyramid(trace)
    assert again.directory == pyramid_dir(trace.path)
    assert json.loads((again.directory / "header.json").read_text())["format"] == FORMAT_VERSION
    assert again.header["dense"]["rank_host"]
    assert all((again.directory / f"rows-rank_host-{L}.npy").is_file()
               for L in again.header["dense"]["rank_host"])


def test_windows_beyond_the_int32_bin_range_clamp(tmp_path_factory: pytest.TempPathFactory
                                                  ) -> None:
    """Bin indexes outside the stored int32 range neither wrap nor fail: a window from
    far before the run to far after it returns every row, one wholly after returns none."""
    p = _shared(tmp_path_factory)
    row = p._rows[(1, "rank_host")]
    level = p.tracks[row].finest_level
    (whole,) = p.tiles(level, p.origin_ns, p.end_ns, [row])
    far = 2**40 * lv.bin_ns(level)
    (wide,) = p.tiles(level, p.origin_ns - far, p.end_ns + far, [row])
    assert wide.table.to_pydict() == whole.table.to_pydict() and whole.table.num_rows > 0
    (after,) = p.tiles(level, p.end_ns + far, p.end_ns + 2 * far, [row])
    assert after.table.num_rows == 0
