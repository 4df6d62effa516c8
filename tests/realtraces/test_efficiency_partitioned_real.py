"""efficiency in rank batches equals the frozen whole-trace implementation
(``testing/efficiency_whole.py``, the code before batching) on real traces: the 8-rank
NCCL DLRM archive, h100-planted/imbalance (4 ranks, gloo on the host), the OTF2
ping-pong (2 MPI ranks, messages across batches: the replay runs in the merge) and
Extrae LULESH (Paraver, 20 tasks, states and messages); every region kind."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.errors import InputError
from traceatlas.testing.efficiency_whole import Efficiency as Frozen

pytestmark = pytest.mark.realtrace

TRACES = {
    "dlrm": "param-et_replay/dlrm_kineto.tar.gz",
    "imbalance": "h100-planted/imbalance",
    "pingpong": "pipit/ping-pong-otf2/traces.otf2",
    "lulesh": "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
}
CASES: list[tuple[str, dict[str, Any]]] = [
    ("dlrm", {}), ("dlrm", {"region": "step:10"}),
    ("dlrm", {"region": "annotation:^DistributedDataParallel.forward$"}),
    ("dlrm", {"region": "window:10ms:", "nccl_useful": True}),
    ("imbalance", {}), ("imbalance", {"region": "step:5"}),
    ("imbalance", {"region": "annotation:^attention$"}),
    ("pingpong", {}), ("pingpong", {"region": "window:1ms:"}),
    ("lulesh", {}), ("lulesh", {"region": "window::200ms"}), ("lulesh", {"region": "step:1"}),
    ("lulesh", {"region": "annotation:x"}),
]


@pytest.fixture(scope="module")
def traces(traces_dir: Path) -> dict[str, traceatlas.Trace]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {k: traceatlas.open(traces_dir / v) for k, v in TRACES.items()}


def _same(got: Result, want: Result, what: str) -> None:
    assert_frame_equal(got.table, want.table, rel_tol=1e-12)
    assert sorted(got.extra) == sorted(want.extra), what
    for key, frame in want.extra.items():
        assert_frame_equal(got.extra[key], frame, rel_tol=1e-12)
    assert got.notes == want.notes, what


@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_batches_equal_whole(traces: dict[str, traceatlas.Trace], name: str,
                             params: dict[str, Any]) -> None:
    trace = traces[name]
    eff = registry.get_analysis("efficiency")
    typed = registry.parse_params(eff, params)
    try:
        want = Frozen().run(trace, typed)
    except InputError as exc:  # the same error from the batches
        with pytest.raises(InputError) as parts:
            run_partitioned(eff, trace, typed, LocalEngine(1), ranks_per_task=1)
        assert str(parts.value) == str(exc)
        return
    assert want.table.height > 0
    _same(eff.run(trace, typed), want, "whole")
    for size in (1, 3):
        _same(run_partitioned(eff, trace, typed, LocalEngine(1), ranks_per_task=size),
              want, f"{name} {params} ranks_per_task={size}")


@pytest.mark.parametrize("name", ["dlrm", "lulesh"])
def test_process_pool(traces: dict[str, traceatlas.Trace], name: str) -> None:
    """Two worker processes, the default batch size (4 ranks)."""
    eff = registry.get_analysis("efficiency")
    typed = registry.parse_params(eff, {})
    got = registry.run("efficiency", traces[name], {}, engine=LocalEngine(2))
    _same(got, Frozen().run(traces[name], typed), name)
