"""``info``'s summary from the part records' stats equals the scan of the rows on real
traces of every reader (nsys, Kineto single and multi-rank, OTF2, Paraver), and the
records carry stats for every intervals and tracks part."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import traceatlas
from traceatlas.summary import recorded_tallies, scanned_tallies, summarize

pytestmark = pytest.mark.realtrace

INPUTS = [
    "nsys-ai/h100_2gpu_1s.sqlite",
    "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    "param-et_replay/dlrm_kineto.tar.gz",
    "h100-planted/imbalance",
    "pipit/ping-pong-otf2/traces.otf2",
    "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
]


@pytest.mark.parametrize("name", INPUTS)
def test_recorded_summary_equals_the_scan(traces_dir: Path, tmp_path: Path,
                                          name: str) -> None:
    src = traces_dir / name
    if not src.exists():
        pytest.skip(f"{name} not in this checkout's traces")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traceatlas.ingest([str(src)], str(tmp_path / "s.tastore")))
    recorded = recorded_tallies(trace)
    assert recorded is not None
    scanned = scanned_tallies(trace)
    assert recorded == scanned
    assert sum(recorded.per.values()) == recorded.rows["intervals"] > 0
    assert summarize(trace)["span_ns"] == scanned.hi - scanned.lo  # type: ignore[operator]
