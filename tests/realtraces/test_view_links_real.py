"""From the report to the map on a real run: on ``h100-planted/imbalance`` (rank 2 has a
1.5x batch every step, PLANTED.md) the load_imbalance finding's ``traceatlas view``
command names rank 2 and the step where rank 2's compute most exceeds the mean, computed
here with a plain-loop union over the store's kernels and its step markers."""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.ops.select import parse_rank_spans, parse_window
from traceatlas.testing.compare import plain_union_length

pytestmark = pytest.mark.realtrace


def test_imbalance_view_names_rank_2_and_its_worst_step(traces_dir: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traces_dir / "h100-planted" / "imbalance")
        rows = analysis.run("advisor", trace, {"path": "runs/imbalance 1"}).table.to_dicts()
        steps = analysis.run("steps", trace, {}).table
    [found] = [r for r in rows if r["cause"] == "load_imbalance" and r["ranks"] == [2]]
    args = shlex.split(found["view"])
    assert args[:3] == ["traceatlas", "view", "runs/imbalance 1"]
    options = dict(zip(args[3::2], args[4::2], strict=True))
    assert parse_rank_spans(options["--ranks"]) == ((2, 2),)
    start, end = parse_window(options["--window"]).resolve(0)
    lo, hi = trace.sql("SELECT min(start_ns), max(end_ns) FROM intervals").row(0)
    assert start is not None and end is not None and lo <= start < end <= hi

    # The expected step: max - mean over the ranks of the compute-kernel union in each
    # step window (kernels placed in the window of their start, clipped to its end).
    kernels = trace.sql("SELECT rank, start_ns, end_ns FROM intervals "
                        "WHERE category = 'kernel'").rows()
    windows = {(int(r), int(s)): (int(a), int(b)) for r, s, a, b in
               steps.select("rank", "step", "start_ns", "end_ns").rows()}
    spans: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rank, s, e in kernels:
        for (r, step), (a, b) in windows.items():
            if r == rank and a <= s < b:
                spans.setdefault((r, step), []).append((s, min(e, b)))
    ranks = sorted(trace.ranks)
    cost = {}
    for step in sorted({s for _, s in windows}):
        values = [plain_union_length(spans.get((r, step), [])) for r in ranks]
        cost[step] = max(values) - sum(values) / len(values)
    worst = min(cost, key=lambda s: (-cost[s], s))
    rank2 = steps.filter((pl.col("rank") == 2) & (pl.col("step") == worst)).row(0, named=True)
    assert (start, end) == (rank2["start_ns"], rank2["end_ns"]), cost
