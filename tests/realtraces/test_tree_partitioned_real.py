"""``tree`` in rank batches (one rank a batch) equals the frozen whole-run ``tree``
(``testing.frozen_tree``, the code from before batching) on real multi-rank traces: the
8-rank NCCL DLRM archive and h100-planted/healthy (2 ranks): same node ids, values and
notes for the top-down, bottom-up and hot-path views, merged and per rank."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.testing.frozen_tree import Tree as FrozenTree

pytestmark = pytest.mark.realtrace

PARAMS: list[dict[str, Any]] = [{}, {"by": "rank"}, {"view": "bottom_up", "of": "op"},
                                {"view": "hot_path", "metric": "host_ns"},
                                {"link_threads": False, "merge_steps": False}]


@pytest.mark.parametrize("path", ["param-et_replay/dlrm_kineto.tar.gz",
                                  "h100-planted/healthy"])
def test_batched_tree_equals_frozen_on_real_traces(traces_dir: Path, path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traces_dir / path)
    assert len(trace.ranks) >= 2
    tree = registry.get_analysis("tree")
    for given in PARAMS:
        typed = registry.parse_params(tree, given)
        want = FrozenTree().run(trace, typed)
        got = run_partitioned(tree, trace, typed, LocalEngine(1), ranks_per_task=1)
        assert want.table.height > 0
        assert_frame_equal(got.table, want.table, check_exact=True)
        assert sorted(got.extra) == sorted(want.extra)
        for key, frame in want.extra.items():
            assert_frame_equal(got.extra[key], frame, check_exact=True)
        assert got.notes == want.notes, given
