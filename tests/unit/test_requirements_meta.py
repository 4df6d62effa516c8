"""Requirement checks answered from metadata (``analysis/requirements_meta``: manifest row
counts, selections, Parquet footer statistics) give the same answer as the scans they
replace, kept frozen here as the oracle (the checks as they were: a ``head(1)`` scan per
condition), on traces built here: 4 GPU ranks (steps + kernels + NCCL + syncs; cpu ops
only; memcpy and a later step; no interval at all), an MPI Paraver trace (calls and
messages), under rank / step / window / category / name / duration selections and their
compositions. The scans left are counted by wrapping ``requirements.scan_any``: none for
a question the metadata decides (a rank without device work, no memory events / MPI /
messages, a category selection that excludes what is asked)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import traceatlas
from traceatlas.analysis import registry, requirements
from traceatlas.analysis.requirements import DEVICE_WORK, REQUIREMENTS
from traceatlas.engine import LocalEngine
from traceatlas.errors import InputError
from traceatlas.testing import TraceBuilder, write_multi_rank
from traceatlas.testing.mpi import Messages, Regions, write_paraver

US = 1_000

# -- the oracle: the checks as they were before metadata (frozen) ----------------------------


def _any(trace: traceatlas.Trace, table: str, condition: pl.Expr | None = None) -> bool:
    frame = trace.scan(table)
    if condition is not None:
        frame = frame.filter(condition)
    return bool(frame.select("rank").head(1).collect().height)


def _cat() -> pl.Expr:
    return pl.col("category").cast(pl.String)


ORACLE: dict[str, Callable[[traceatlas.Trace], bool]] = {
    "intervals": lambda t: _any(t, "intervals"),
    "device": lambda t: _any(t, "intervals", _cat().is_in(DEVICE_WORK)),
    "correlation": lambda t: _any(
        t, "intervals", _cat().is_in(DEVICE_WORK) & pl.col("correlation").is_not_null()
    ) and _any(t, "intervals", _cat().is_in(("runtime", "driver"))
               & pl.col("correlation").is_not_null()),
    "steps": lambda t: _any(t, "intervals", _cat() == "step"),
    "comm": lambda t: _any(t, "intervals", _cat() == "comm_kernel"),
    "counters": lambda t: _any(t, "counters") or _any(
        t, "intervals", pl.col("source_category").cast(pl.String) == "cuda_profiler_range"),
    "messages": lambda t: _any(t, "messages"),
    "mpi": lambda t: _any(t, "intervals", _cat() == "mpi"),
}


# -- traces ----------------------------------------------------------------------------------


def _ingest(paths: Any, out: Path) -> traceatlas.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(paths, out, engine=LocalEngine(1)))


def gpu_builders() -> list[TraceBuilder]:
    """Rank 0: step 1 (0-100 us), gemm, NCCL, a sync; rank 1: CPU ops only; rank 2: a
    memcpy at 300 us inside step 2 (250-400 us); rank 3: one instant, no interval."""
    bs = [TraceBuilder(r, 4, profiler_markers=False) for r in range(4)]
    bs[0].step(1, 0, 100 * US)
    bs[0].launch("gemm", 1 * US, 2 * US, 10 * US, 5 * US)
    bs[0].launch("ncclKernel_AllReduce_RING_LL_Sum_float", 4 * US, 2 * US, 20 * US, 5 * US)
    bs[0].sync(30 * US, 5 * US, 31 * US, 3 * US)
    bs[1].cpu_op("aten::add", 0, 50 * US)
    bs[1].cpu_op("aten::mul", 60 * US, 90 * US)
    bs[2].step(2, 250 * US, 400 * US)
    bs[2].launch("Memcpy HtoD", 300 * US, 2 * US, 310 * US, 5 * US, kind="memcpy")
    bs[3].instant("marker", 5 * US)
    return bs


@pytest.fixture(scope="module")
def gpu_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("gpu")
    return _ingest(write_multi_rank(tmp / "in", gpu_builders()), tmp / "gpu.tastore").path


@pytest.fixture(scope="module")
def gpu(gpu_store: Path) -> traceatlas.Trace:
    return traceatlas.open(gpu_store)


@pytest.fixture(scope="module")
def mpi(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    """3 ranks: compute then MPI_Allreduce; rank 2 only compute; a message 0 -> 1."""
    tmp = tmp_path_factory.mktemp("mpi")

    def arr(*v: int) -> np.ndarray:
        return np.array(v, dtype=np.int64)

    regions = Regions(rank=arr(0, 0, 1, 1, 2), name=arr(0, 1, 0, 1, 0),
                      start_ns=arr(0, 50 * US, 0, 60 * US, 0),
                      end_ns=arr(50 * US, 80 * US, 60 * US, 80 * US, 90 * US))
    messages = Messages(src=arr(0), dst=arr(1), send_start_ns=arr(10 * US),
                        send_end_ns=arr(11 * US), recv_start_ns=arr(12 * US),
                        recv_end_ns=arr(13 * US), bytes=arr(64), tag=arr(1))
    prv = write_paraver(tmp / "m.prv", 3, ["compute", "MPI_Allreduce"], regions, messages)
    return _ingest(prv, tmp / "mpi.tastore")


def views(trace: traceatlas.Trace) -> Iterator[tuple[str, traceatlas.Trace]]:
    """The trace under many selections (those the trace refuses are skipped)."""
    specs: list[dict[str, Any]] = [{}]
    specs += [{"ranks": [r]} for r in trace.ranks]
    specs += [{"ranks": trace.ranks[::2]}, {"step": 1}, {"step": 2},
              {"window": "0:50us"}, {"window": "200us:"}, {"window": "600us:"},
              {"categories": "cpu_op"}, {"categories": "kernel"},
              {"categories": "runtime,kernel"}, {"categories": "step,memcpy"},
              {"categories": "counter"}, {"categories": "message"}, {"name": "gemm"},
              {"name": "^MPI_"}, {"min_dur_ns": 4 * US}, {"min_dur_ns": 10**9},
              {"window": "0:50us", "clip": True}]
    composed: list[list[dict[str, Any]]] = [
        [{"ranks": [0]}, {"categories": "kernel,step"}], [{"ranks": [1, 2]}, {"step": 2}],
        [{"categories": "mpi,memcpy"}, {"ranks": [0, 1]}], [{"ranks": [2]}, {"window": "0:1us"}],
    ]
    for chain in [[s] for s in specs] + composed:
        view = trace
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for spec in chain:
                    view = view.select(**spec) if spec else view
        except InputError:
            continue
        yield str(chain), view


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(table, clause) of every scan the checks still run."""
    seen: list[tuple[str, str]] = []
    original = requirements.scan_any

    def counting(trace: traceatlas.Trace, clause: Any) -> bool:
        seen.append((clause.table, repr(clause)))
        return original(trace, clause)

    monkeypatch.setattr(requirements, "scan_any", counting)
    return seen


# -- equality with the oracle ----------------------------------------------------------------


@pytest.mark.parametrize("which", ["gpu", "mpi"])
def test_every_requirement_equals_the_scan(request: pytest.FixtureRequest, which: str,
                                           scans: list[tuple[str, str]]) -> None:
    trace: traceatlas.Trace = request.getfixturevalue(which)
    checked = decided = 0
    for what, view in views(trace):
        for name, req in REQUIREMENTS.items():
            before = len(scans)
            assert req.check(view) == ORACLE[name](view), f"{which} {what} {name}"
            checked += 1
            decided += len(scans) == before
    assert checked > 100
    print(which, checked, decided)
    assert decided > checked // 2  # most answers come from metadata alone


def test_no_scan_where_metadata_decides(gpu: traceatlas.Trace,
                                        scans: list[tuple[str, str]]) -> None:
    def ask(view: traceatlas.Trace, name: str) -> bool:
        before = len(scans)
        got = REQUIREMENTS[name].check(view)
        assert len(scans) == before, f"{name} scanned {scans[before:]}"
        assert got == ORACLE[name](view)
        return got

    # row counts: intervals everywhere but rank 3; no messages; no counters and (rank 1)
    # no interval that could be a range-profiler event
    assert ask(gpu, "intervals") and not ask(gpu, "messages")
    assert not ask(gpu.select(ranks=[3]), "intervals")
    # rank 1 has cpu ops only (footer: min = max = cpu_op): nothing else, no scan
    cpu = gpu.select(ranks=[1])
    for name in REQUIREMENTS:
        assert ask(cpu, name) == (name == "intervals")
    # rank 3 has no interval: every interval requirement is False from the row counts
    for name in ("device", "correlation", "steps", "comm", "counters", "mpi"):
        assert not ask(gpu.select(ranks=[3]), name)
    # a category selection that excludes what is asked, under any other selection
    assert not ask(gpu.select(categories="cpu_op"), "device")
    assert not ask(gpu.select(categories="cpu_op").select(window="0:50us"), "steps")
    assert not ask(gpu.select(categories="kernel"), "mpi")
    # absent from every row group's [min, max] (no MPI on a GPU rank whose categories run
    # from comm_kernel to sync... is decided only when outside; memcpy rank: no mpi)
    assert not ask(gpu.select(ranks=[2]), "comm")


def test_registry_and_advisor_answers_unchanged(gpu: traceatlas.Trace,
                                                mpi: traceatlas.Trace) -> None:
    for trace in (gpu, mpi, gpu.select(ranks=[1]), gpu.select(categories="cpu_op")):
        for name in registry.ANALYSES:
            analysis = registry.get_analysis(name)
            want = all(ORACLE[r](trace) for r in analysis.requires)
            try:
                registry.check_requirements(analysis, trace)
                got = True
            except registry.MissingDataError:
                got = False
            assert got == want, name


def test_store_without_part_records_scans(gpu_store: Path, tmp_path: Path,
                                          scans: list[tuple[str, str]]) -> None:
    trace = traceatlas.open(gpu_store)
    trace.manifest = {k: v for k, v in trace.manifest.items() if k != "parts"}
    for name, req in REQUIREMENTS.items():
        assert req.check(trace) == ORACLE[name](trace)
    assert scans  # nothing decided without part records


def test_a_view_scans_a_clause_once(gpu_store: Path, scans: list[tuple[str, str]]) -> None:
    """The answers are kept per view: asking again (every analysis of a report does)
    scans nothing more; a narrower view has its own answers."""
    trace = traceatlas.open(gpu_store)
    step = trace.select(step=1)  # a step selection: only a scan can tell
    assert REQUIREMENTS["device"].check(step) == ORACLE["device"](step)
    first = list(scans)
    assert first  # the step view needed a scan
    for _ in range(3):
        assert REQUIREMENTS["device"].check(step) == ORACLE["device"](step)
    assert scans == first
    later = step.select(window="300us:400us")  # nothing of step 1 there
    assert REQUIREMENTS["device"].check(later) is False
    assert ORACLE["device"](later) is False
    assert len(scans) > len(first)  # the new view asked for itself


def test_a_copy_with_other_selections_does_not_reuse_the_answers(gpu_store: Path) -> None:
    """Workers make a batch's view by copying the opened store and setting its
    selections (``partitioned_view.rank_view``): the copy must not answer from the
    memo of the view it was copied from."""
    from traceatlas.analysis.partitioned_view import rank_view

    base = traceatlas.open(gpu_store)
    assert REQUIREMENTS["device"].check(base) is True  # rank 0 has kernels
    only_cpu = rank_view(base, (), (1,))  # rank 1: CPU ops only
    assert REQUIREMENTS["device"].check(only_cpu) is False
    assert ORACLE["device"](only_cpu) is False
    assert REQUIREMENTS["device"].check(base) is True


def _without_stats(trace: traceatlas.Trace) -> traceatlas.Trace:
    trace.manifest = {**trace.manifest, "parts": [
        {k: v for k, v in rec.items() if k != "stats"} for rec in trace.manifest["parts"]]}
    return trace


def test_part_stats_decide_what_the_footers_leave_open(
        gpu_store: Path, scans: list[tuple[str, str]]) -> None:
    """The parts' category counts (``store/part_stats.py``) answer the category clauses
    the footers leave open (a category strictly inside a row group's [min, max]): the
    same answers as the oracle with and without them, and fewer scans with them."""
    counts = []
    for strip in (False, True):
        base = traceatlas.open(gpu_store)
        base = _without_stats(base) if strip else base
        before = len(scans)
        for what, view in views(base):
            for name, req in REQUIREMENTS.items():
                assert req.check(view) == ORACLE[name](view), f"{strip} {what} {name}"
        counts.append(len(scans) - before)
    with_stats, without = counts
    assert with_stats < without
    # the whole store and one rank, a category selection: every requirement is decided
    # from the stats (kernels, steps, NCCL kernels inside the row groups' ranges;
    # kernels and launches with a correlation; source categories)
    whole = traceatlas.open(gpu_store)
    before = len(scans)
    for view in (whole, whole.select(ranks=[0]), whole.select(categories="kernel,runtime")):
        for name, req in REQUIREMENTS.items():
            assert req.check(view) == ORACLE[name](view)
    assert len(scans) == before, scans[before:]
    assert REQUIREMENTS["correlation"].check(whole) is REQUIREMENTS["comm"].check(whole) is True
