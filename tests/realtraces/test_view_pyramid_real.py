"""The viewer's pyramid on a real 4-rank trace: each rank's synthetic rows at the top level
hold exactly the union of that rank's device (host) intervals, computed in DuckDB SQL."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceatlas
from traceatlas.view.pyramid import ensure_pyramid

UNION_SQL = """
WITH iv AS (
  SELECT i.rank, i.start_ns, i.end_ns FROM intervals i JOIN tracks t
    ON i.rank = t.rank AND i.track_id = t.track_id
  WHERE CAST(t.kind AS VARCHAR) IN ({kinds})
), ordered AS (
  SELECT rank, start_ns, end_ns,
         MAX(end_ns) OVER (PARTITION BY rank ORDER BY start_ns, end_ns
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
  FROM iv
), islands AS (
  SELECT rank, start_ns, end_ns,
         SUM(CASE WHEN reach IS NULL OR start_ns > reach THEN 1 ELSE 0 END)
           OVER (PARTITION BY rank ORDER BY start_ns, end_ns
                 ROWS UNBOUNDED PRECEDING) AS island
  FROM ordered
)
SELECT rank, SUM(hi - lo) AS union_ns, (SELECT COUNT(*) FROM iv WHERE iv.rank = g.rank) AS n
FROM (SELECT rank, island, MIN(start_ns) AS lo, MAX(end_ns) AS hi FROM islands
      GROUP BY rank, island) g
GROUP BY rank ORDER BY rank
"""


@pytest.fixture(scope="module")
def imbalance(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(traceatlas.ingest(traces_dir / "h100-planted" / "imbalance",
                                  tmp_path_factory.mktemp("imb") / "s"))


@pytest.mark.parametrize(("kind", "kinds"), [("rank_device", "'gpu_stream', 'device'"),
                                              ("rank_host", "'host_thread'")])
def test_rank_rows_hold_the_union_of_the_ranks_intervals(imbalance: Path, kind: str,
                                                         kinds: str) -> None:
    trace = traceatlas.open(imbalance)
    calls: list[tuple[int, int]] = []
    pyramid = ensure_pyramid(trace, lambda done, total: calls.append((done, total)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]  # built anew: the cache is per test
    want = {r: (u, n) for r, u, n in trace.sql(UNION_SQL.format(kinds=kinds)).iter_rows()}
    assert sorted(want) == [0, 1, 2, 3]
    for rank, (union, count) in want.items():
        (row,) = [t for t in pyramid.tracks if t.rank == rank and t.kind == kind]
        (tile,) = pyramid.tiles(pyramid.top, pyramid.origin_ns, pyramid.end_ns, [row.id])
        busy = sum(tile.table["busy_ns"].to_pylist())
        assert busy == union, (rank, kind)
        assert sum(tile.table["count"].to_pylist()) == count == row.events
        # The same holds at a fine level over the whole run.
        (fine,) = pyramid.tiles(row.finest_level, pyramid.origin_ns, pyramid.end_ns, [row.id])
        assert sum(fine.table["busy_ns"].to_pylist()) == union


@pytest.mark.parametrize("kind", ["rank_device", "rank_host"])
def test_dense_rank_rows_equal_the_sparse_path_and_the_union(imbalance: Path,
                                                             kind: str) -> None:
    """``rows`` from the dense matrices (format 2) against the sparse level files, and
    the top level's busy (one rank per group) against the SQL union of the rank."""
    from traceatlas.view.pyramid_dense import DenseRows

    trace = traceatlas.open(imbalance)
    pyramid = ensure_pyramid(trace)
    dense_levels = pyramid.header["dense"][kind]
    assert dense_levels and dense_levels[-1] == pyramid.top
    kinds = "'gpu_stream', 'device'" if kind == "rank_device" else "'host_thread'"
    union = {r: u for r, u, _ in trace.sql(UNION_SQL.format(kinds=kinds)).iter_rows()}
    window = (pyramid.origin_ns, pyramid.end_ns)
    for level in dense_levels:
        got = pyramid.rows(level, *window, kind, [0, 1, 2, 3], 2)
        assert got[0]["level"] == level
        saved = pyramid._dense
        pyramid._dense = {k: DenseRows(pyramid.directory, k, []) for k in saved}
        try:
            sparse = pyramid.rows(level, *window, kind, [0, 1, 2, 3], 2)
        finally:
            pyramid._dense = saved
        for g, s in zip(got, sparse, strict=True):
            assert (g["ranks"], g["bin"], g["min"], g["max"]) == \
                (s["ranks"], s["bin"], s["min"], s["max"])
            assert g["mean"] == pytest.approx(s["mean"], rel=1e-12, abs=1e-15)
    singles = pyramid.rows(pyramid.top, *window, kind, [0, 1, 2, 3], 4)
    for rank, g in zip([0, 1, 2, 3], singles, strict=True):
        busy = sum(round(f * g["bin_ns"]) for f in g["mean"])
        assert busy == union[rank], (rank, kind)
