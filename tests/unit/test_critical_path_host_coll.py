"""``critical_path`` across ranks over host collectives (DDP over gloo: ``gloo:*`` work
records), on two-rank Kineto traces built here whose path is known by construction.

Times in ns from the trace start; every expected value is worked out by hand in the
docstrings from the constructed times."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import traceatlas
from traceatlas import analysis
from traceatlas.testing.builder import TraceBuilder, write_multi_rank

GLOO_TID = 9_000


def _bounds(res: analysis.Result) -> dict[str, int]:
    t = res.extra["by_bound"].filter(pl.col("ns") > 0)
    return dict(zip(t["bound"].to_list(), t["ns"].to_list(), strict=True))


def _by_rank(res: analysis.Result) -> dict[int, dict[str, object]]:
    return {r["rank"]: r for r in res.extra["by_rank"].iter_rows(named=True)}


def _gain(trace: traceatlas.Trace, speedup: str) -> int:
    res = analysis.run("critical_path", trace, {"speedup": speedup})
    w = res.extra["whatif"]
    assert w["length_before_ns"][0] == res.table["on_path_ns"].sum()
    return int(w["gain_ns"][0])


def _inline(tmp_path: Path) -> traceatlas.Trace:
    """Each rank, twice (b = 0, 10k): compute on the main thread [b, b + c], then a
    blocking ``gloo:all_reduce`` on the same thread [b + c, b + 8k]; c = 1k on rank 0
    (``fast_compute``), 5k on rank 1 (``slow_compute``, late every time). Rank 0 ends
    with ``tail`` [18k, 19k]. Region [0, 19k].
    Path (from the end back): tail (rank 0, cpu 1k) <- rank 0's release at 18k <- the
    instance at rank 1's arrival 15k (transfer [15k, 18k], comm 3k, on rank 0's record)
    <- slow_compute [10k, 15k] (cpu 5k) <- rank 1's untraced gap [8k, 10k] (cpu 2k) <-
    rank 1's release at 8k (transfer [5k, 8k], comm 3k) <- slow_compute [0, 5k] (cpu 5k).
    cpu 13k, comm 6k; rank 1 holds 15k, rank 0 4k; rank 1 last at both instances.
    Rank 0 waits 5k - 1k = 4k at each: 8k."""
    builders = []
    for r, (name, c) in enumerate((("fast_compute", 1_000), ("slow_compute", 5_000))):
        b = TraceBuilder(rank=r, world_size=2, backend="gloo", profiler_markers=False)
        for it in range(2):
            base = 10_000 * it
            b.cpu_op(name, base, base + c)
            b.annotation("gloo:all_reduce", base + c, base + 8_000)
        if r == 0:
            b.cpu_op("tail", 18_000, 19_000)
        builders.append(b)
    write_multi_rank(tmp_path / "inline", builders)
    return traceatlas.open(tmp_path / "inline")


def test_late_rank_inline_gloo_path(tmp_path: Path) -> None:
    res = analysis.run("critical_path", _inline(tmp_path))
    t = res.table
    assert t["on_path_ns"].sum() == 19_000
    assert _bounds(res) == {"cpu": 13_000, "comm": 6_000}
    got = list(zip(t["rank"], t["name"], t["bound"], t["start_ns"] - t["start_ns"][0],
                   t["on_path_ns"], strict=True))
    assert got == [(1, "slow_compute", "cpu", 0, 5_000),
                   (1, "gloo:all_reduce", "comm", 5_000, 3_000),
                   (1, "(untraced)", "cpu", 8_000, 2_000),
                   (1, "slow_compute", "cpu", 10_000, 5_000),
                   (0, "gloo:all_reduce", "comm", 15_000, 3_000),
                   (0, "tail", "cpu", 18_000, 1_000)]
    by_rank = _by_rank(res)
    assert (by_rank[1]["ns"], by_rank[0]["ns"]) == (15_000, 4_000)
    assert (by_rank[1]["arrivals_last"], by_rank[0]["arrivals_last"]) == (2, 0)
    assert (by_rank[1]["arrivals_last_all"], by_rank[0]["arrivals_last_all"]) == (2, 0)
    waits = {(r["rank"], r["kind"]): (r["instances"], r["wait_ns"])
             for r in res.extra["waits"].iter_rows(named=True)}
    assert waits == {(0, "collective"): (2, 8_000), (1, "collective"): (2, 0)}
    deps = dict(res.extra["dependencies"].iter_rows())
    assert deps["host_collectives"] == 2 and deps["nccl_collectives"] == 0


def test_inline_gloo_whatif(tmp_path: Path) -> None:
    """Rank 0's compute is off the path (it waits anyway): 0. Rank 1's twice as fast
    (2.5k): each arrival 2.5k earlier, the gap and transfers unchanged: 5k."""
    trace = _inline(tmp_path)
    assert _gain(trace, "fast_compute:2") == 0
    assert _gain(trace, "slow_compute:2") == 5_000


def _threaded(tmp_path: Path) -> traceatlas.Trace:
    """DDP over gloo: the main thread computes [0, c] (c = 1k rank 0 ``fast_compute``,
    4k rank 1 ``slow_compute``), enqueues with ``c10d::allreduce_`` [c, c + 100] and waits
    untraced; gloo's thread runs ``gloo:all_reduce`` [c + 200, 8k] with a copy to the host
    [c + 200, c + 500] and a copy back [7.5k, 7.9k] (``aten::copy_``); the exchange is the
    record's longest own stretch [c + 500, 7.5k]. The main thread resumes with
    ``consume`` [8.3k, 8.9k] on rank 0, [8.3k, 8.8k] on rank 1. Region [0, 8.9k].
    Path: rank 1: slow_compute 4k, c10d::allreduce_ 100, enqueue wake-up [4.1k, 4.2k]
    (cpu 100, untraced on gloo's thread), copy 300 (arrival 4.5k, last); rank 0: the
    transfer [4.5k, 7.5k] (comm 3k), copy back 400, record's tail [7.9k, 8k] cpu 100,
    wake-up of the main thread [8k, 8.3k] (cpu 300, untraced), consume 600.
    Rank 1 4.5k, rank 0 4.4k; cpu 5.9k, comm 3k. Rank 0 waits 4.5k - 1.5k = 3k."""
    builders = []
    for r, (name, c) in enumerate((("fast_compute", 1_000), ("slow_compute", 4_000))):
        b = TraceBuilder(rank=r, world_size=2, backend="gloo", profiler_markers=False)
        b.cpu_op(name, 0, c)
        b.cpu_op("c10d::allreduce_", c, c + 100)
        b.annotation("gloo:all_reduce", c + 200, 8_000, tid=GLOO_TID)
        b.cpu_op("aten::copy_", c + 200, c + 500, tid=GLOO_TID)
        b.cpu_op("aten::copy_", 7_500, 7_900, tid=GLOO_TID)
        b.cpu_op("consume", 8_300, 8_900 if r == 0 else 8_800)
        builders.append(b)
    write_multi_rank(tmp_path / "threaded", builders)
    return traceatlas.open(tmp_path / "threaded")


def test_late_rank_gloo_on_its_own_thread(tmp_path: Path) -> None:
    res = analysis.run("critical_path", _threaded(tmp_path))
    t = res.table
    assert t["on_path_ns"].sum() == 8_900
    assert _bounds(res) == {"cpu": 5_900, "comm": 3_000}
    got = list(zip(t["rank"], t["name"], t["bound"], t["start_ns"] - t["start_ns"][0],
                   t["on_path_ns"], strict=True))
    assert got == [(1, "slow_compute", "cpu", 0, 4_000),
                   (1, "c10d::allreduce_", "cpu", 4_000, 100),
                   (1, "(untraced)", "cpu", 4_100, 100),
                   (1, "aten::copy_", "cpu", 4_200, 300),
                   (0, "gloo:all_reduce", "comm", 4_500, 3_000),
                   (0, "aten::copy_", "cpu", 7_500, 400),
                   (0, "gloo:all_reduce", "cpu", 7_900, 100),
                   (0, "(untraced)", "cpu", 8_000, 300),
                   (0, "consume", "cpu", 8_300, 600)]
    by_rank = _by_rank(res)
    assert (by_rank[1]["ns"], by_rank[0]["ns"]) == (4_500, 4_400)
    assert (by_rank[1]["arrivals_last"], by_rank[0]["arrivals_last"]) == (1, 0)
    waits = {r["rank"]: r["wait_ns"] for r in res.extra["waits"].iter_rows(named=True)}
    assert waits == {0: 3_000, 1: 0}
    deps = dict(res.extra["dependencies"].iter_rows())
    # wake-ups: each rank's enqueue -> record start, record end -> consume
    assert (deps["host_collectives"], deps["host_wakeups"]) == (1, 4)


def test_threaded_gloo_whatif(tmp_path: Path) -> None:
    """Rank 0's compute off the path: 0; rank 1's twice as fast (2k): arrival 2.5k, still
    last (rank 0 arrives at 1.5k): everything after moves 2k earlier."""
    trace = _threaded(tmp_path)
    assert _gain(trace, "fast_compute:2") == 0
    assert _gain(trace, "slow_compute:2") == 2_000


def test_c10d_enqueue_alone_is_not_a_collective(tmp_path: Path) -> None:
    """``c10d::*`` ops only enqueue (NCCL, or gloo without work records): no instance,
    no wake-up; each rank's path stays its own host time (region [0, 4.1k]: rank 1's
    slow_compute 4k + c10d 100)."""
    builders = []
    for r, c in enumerate((1_000, 4_000)):
        b = TraceBuilder(rank=r, world_size=2, profiler_markers=False)
        b.cpu_op("compute", 0, c)
        b.cpu_op("c10d::allreduce_", c, c + 100)
        builders.append(b)
    write_multi_rank(tmp_path / "enq", builders)
    res = analysis.run("critical_path", traceatlas.open(tmp_path / "enq"))
    deps = dict(res.extra["dependencies"].iter_rows())
    assert (deps["host_collectives"], deps["host_wakeups"]) == (0, 0)
    assert _bounds(res) == {"cpu": 4_100}
    assert set(res.table["rank"].to_list()) == {1}
