"""``idle``'s causes table equals the frozen pre-speed-work copy
(``traceatlas.testing.frozen_idle_causes``) on real traces: every H100 run of
``h100-planted``, the 8-rank DLRM archive and the Nsight Systems exports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import traceatlas

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_idle_causes_frozen import assert_causes_equal

pytestmark = pytest.mark.realtrace

TRACES = (
    *(f"h100-planted/{run}" for run in ("compiled", "dataload", "healthy", "imbalance",
                                        "launch", "leak", "regress", "sync",
                                        "zero-timestamps")),
    "param-et_replay/dlrm_kineto.tar.gz",
    "nsys-ai/h100_2gpu_1s.sqlite",
    "nsys-ai/mfu_2gpu_before.sqlite",
    "nsys-ai/mfu_2gpu_after.sqlite",
)


@pytest.mark.parametrize("rel", TRACES)
def test_causes_equal_frozen_on_real_traces(traces_dir: Path, rel: str) -> None:
    trace = traceatlas.open(traces_dir / rel)
    causes = assert_causes_equal(trace)
    assert causes.height > 0 or rel.startswith("nsys-ai/mfu")
