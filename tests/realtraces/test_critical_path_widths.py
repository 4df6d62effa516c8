"""Real traces: the critical-path graph's narrow edge columns (int32 ids, int8 codes)
solve exactly as int64 copies of them (binding edges, path, forward length)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traceatlas
from traceatlas.analysis.critical_path import build
from traceatlas.ops import critical_solve as solve
from traceatlas.ops.critical_graph import Graph


@pytest.mark.parametrize("case", ["hta/critical_path/alexnet",
                                  "hta/critical_path/cuda_event_sync_multi_stream",
                                  "h100-planted/dataload", "pipit/ping-pong-otf2"])
def test_narrow_edges_solve_as_int64(traces_dir: Path, case: str) -> None:
    g, _ = build(traceatlas.open(str(traces_dir / case)), None, None)
    assert g.edges["src"].dtype == np.int32 and g.edges["kind"].dtype == np.int8
    w = Graph(g.r0, g.r1, g.t_ns, g.rank, g.track,
              {k: v.astype(np.int64) for k, v in g.edges.items()}, g.events, g.dropped)
    bind, bind_w = solve.binding(g), solve.binding(w)
    assert (bind == bind_w).all()
    assert (solve.path_edges(g, bind) == solve.path_edges(w, bind_w)).all()
    assert solve.forward(g, solve.weights(g, bind, None, 1.0)) == solve.forward(
        w, solve.weights(w, bind_w, None, 1.0))
