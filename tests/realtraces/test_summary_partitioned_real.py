"""The baseline summary in rank batches on real traces: byte-identical JSON for the whole
run as one batch, one rank a batch, the default batches and the frozen former builder
(``traceatlas.testing.summary_reference``); DLRM 8 ranks also on a 2-worker Dask
LocalCluster. Kineto with steps (DLRM, h100-planted runs), Nsight without steps (the
phases path), OTF2 and Paraver (no steps: phases or the whole run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

import traceatlas
from traceatlas.compare.summary import MIN_SHARE, TOP
from traceatlas.compare.summary_build import build
from traceatlas.testing import summary_reference as reference

pytestmark = [pytest.mark.realtrace,
              pytest.mark.filterwarnings("ignore::traceatlas.DataQualityWarning")]

RUNS = ("param-et_replay/dlrm_kineto.tar.gz", "h100-planted/healthy",
        "h100-planted/imbalance", "h100-planted/sync", "h100-planted/zero-timestamps",
        "nsys-ai/mfu_2gpu_before.sqlite", "fastotf2/simple-mi300-example-run/traces.otf2",
        "profet-paraver/lulesh_7+1_with_uncores_sockets1+2.chop8.prv",
        "folding-paraver/444.namd.prv")


def _encoded(summary: dict[str, Any]) -> bytes:
    return msgspec.json.encode(summary)


@pytest.mark.parametrize("rel", RUNS)
def test_batches_give_the_former_summary(traces_dir: Path, rel: str) -> None:
    trace = traceatlas.open(traces_dir / rel)
    expected = _encoded(reference.build(trace, min_share=MIN_SHARE, top=TOP))
    for size in (len(trace.ranks), 1, None):
        got = build(trace, min_share=MIN_SHARE, top=TOP, ranks_per_task=size)
        assert _encoded(got) == expected, size


@pytest.mark.dask
def test_dlrm_on_two_dask_workers(traces_dir: Path) -> None:
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    trace = traceatlas.open(traces_dir / RUNS[0])
    assert len(trace.ranks) == 8
    expected = _encoded(reference.build(trace, min_share=MIN_SHARE, top=TOP))
    engine = DaskEngine(n_workers=2)
    try:
        got = build(trace, min_share=MIN_SHARE, top=TOP, engine=engine, ranks_per_task=1)
    finally:
        engine.close()
    assert _encoded(got) == expected
