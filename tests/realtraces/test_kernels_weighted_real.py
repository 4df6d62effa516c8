"""``kernels`` on (distinct duration, calls) pairs equals the former one-row-a-call code
(``traceatlas.testing.frozen_kernels``) on DLRM (8 ranks, Kineto): ``by=rank`` and
``by=name``, with and without memory, whole and partitioned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.testing import frozen_kernels

pytestmark = pytest.mark.realtrace

TRACES = ["param-et_replay/dlrm_kineto.tar.gz"]


@pytest.mark.parametrize("relative", TRACES)
def test_weighted_equals_frozen_on_real_traces(traces_dir: Path, tmp_path: Path,
                                               relative: str) -> None:
    trace = traceatlas.open(traceatlas.ingest(traces_dir / relative, tmp_path / "store"))
    analysis = registry.get_analysis("kernels")
    for given in ({"by": "rank"}, {"by": "name"}, {"by": "name", "memory": "true"},
                  {"by": "rank", "top": "3", "memory": "true"}, {"by": "name", "top": "5"}):
        given_params: dict[str, Any] = dict(given)
        params = registry.parse_params(analysis, given_params)
        oracle = frozen_kernels.Kernels().run(trace, params)
        frozen_kernels.assert_same(analysis.run(trace, params), oracle)
        if given["by"] == "name":
            frozen_kernels.assert_same(run_partitioned(analysis, trace, params, LocalEngine(1),
                                  ranks_per_task=1), oracle)
