"""``idle``, ``annotations`` and ``syncs`` equal their frozen pre-speed-work copies
(``traceatlas.testing.frozen_*``) on real traces: every H100 run of ``h100-planted``, the
8-rank DLRM archive, an Nsight Systems export (NVTX ranges), an OTF2 archive with device
activity and a Paraver trace. Where an analysis does not apply, both raise the same
error."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import traceatlas
from traceatlas.analysis import registry
from traceatlas.errors import TraceAtlasError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_rank_analyses_frozen import assert_same, frozen_run

pytestmark = pytest.mark.realtrace

TRACES = (
    *(f"h100-planted/{run}" for run in ("compiled", "dataload", "healthy", "imbalance",
                                        "launch", "leak", "regress", "sync",
                                        "zero-timestamps")),
    "param-et_replay/dlrm_kineto.tar.gz",
    "nsys-ai/h100_2gpu_1s.sqlite",
    "fastotf2/simple-mi300-example-run/traces.otf2",
    "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
)
CASES: tuple[tuple[str, dict[str, Any] | None], ...] = (
    ("idle", None), ("annotations", None), ("syncs", None),
    ("annotations", {"categories": "nvtx"}), ("annotations", {"categories": "gpu_annotation"}),
)


@pytest.mark.parametrize("rel", TRACES)
def test_equal_to_frozen_on_real_traces(traces_dir: Path, rel: str) -> None:
    trace = traceatlas.open(traces_dir / rel)
    ran = 0
    for name, params in CASES:
        try:
            frozen_run(name, trace, params)
        except TraceAtlasError as exc:  # does not apply: the same error now
            with pytest.raises(type(exc)):
                registry.run(name, trace, params)
            continue
        assert_same(name, trace, params)
        ran += 1
    # every trace here but the Paraver one (MPI and CPU regions only: no device activity,
    # no annotations; it checks the errors are the same) runs some of them
    assert ran or rel.endswith(".prv")
