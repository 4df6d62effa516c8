"""The tree's total device time against ``breakdown`` on the TraceLens H100 traces and the
sglang inference trace (issue 13).

Conventions differ on purpose: the tree root's ``device_inclusive_ns`` is a SUM of device
activity durations (concurrent kernels each count, as a flame graph's widths must add
up), ``breakdown``'s ``compute_ns`` / ``comm_ns`` / ``memory_ns`` are interval UNIONS. So
they are equal exactly when no two device activities of the rank overlap in time, which
each test checks first with a plain loop; where they overlap (sglang: one pair), the
difference is exactly the overlapped time (sum of durations - plain-loop union).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.testing.compare import plain_union_length

pytestmark = [pytest.mark.realtrace,
              pytest.mark.filterwarnings("ignore::traceatlas.errors.DataQualityWarning")]

H100 = "tracelens/traces/h100/"
NO_OVERLAP = [H100 + "Falconsai_nsfw_image_detection__1016002.json.gz",
              H100 + "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
              H100 + "facebook_timesformer-base-finetuned-k400__1016002.json.gz",
              H100 + "gaunernst_bert-small-uncased__1016001.json.gz",
              H100 + "google_owlv2-large-patch14-ensemble__1016001.json.gz"]
SGLANG = "tracelens/traces/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
DEVICE = ("kernel", "comm_kernel", "memcpy", "memset")


def _figures(trace: traceatlas.Trace) -> dict[int, dict[str, int]]:
    """Per rank: tree root device ns, breakdown kernel + memory ns, plain sum and union."""
    tree = analysis.run("tree", trace, {"by": "rank"}).table.filter(pl.col("depth") == 0)
    bd = (analysis.run("breakdown", trace).table.group_by("rank")
          .agg(pl.col("compute_ns", "comm_ns", "memory_ns").sum()))
    rows = (trace.intervals.filter(pl.col("category").cast(pl.String).is_in(DEVICE))
            .select("rank", "start_ns", "end_ns").collect())
    out: dict[int, dict[str, int]] = {}
    for rank in trace.ranks:
        mine = rows.filter(pl.col("rank") == rank)
        spans = list(zip(mine["start_ns"].to_list(), mine["end_ns"].to_list(), strict=True))
        b = bd.filter(pl.col("rank") == rank).row(0, named=True)
        out[rank] = {
            "tree": int(tree.filter(pl.col("rank") == rank)["device_inclusive_ns"].item()),
            "breakdown": int(b["compute_ns"] + b["comm_ns"] + b["memory_ns"]),
            "sum": sum(e - s for s, e in spans), "union": int(plain_union_length(spans))}
    return out


@pytest.mark.parametrize("name", NO_OVERLAP)
def test_tree_device_total_equals_breakdown(traces_dir: Path, name: str) -> None:
    figures = _figures(traceatlas.open(traces_dir / name))
    for f in figures.values():
        assert f["sum"] == f["union"] > 0  # precondition: no two device rows overlap
        assert f["tree"] == f["breakdown"] == f["sum"]


def test_sglang_differs_by_the_overlap_only(traces_dir: Path) -> None:
    figures = _figures(traceatlas.open(traces_dir / SGLANG))
    for f in figures.values():
        overlap = f["sum"] - f["union"]
        assert overlap > 0  # this trace has overlapping device rows
        assert f["tree"] == f["sum"]
        assert f["tree"] - f["breakdown"] == overlap
