"""The report's flame section on the 8-rank DLRM trace: the rank chosen from the intervals
(``flame.busiest_rank``) is the one the tree of every rank picks, and the section built
from that rank's tree alone equals the former whole-tree section (boxes, values, why text,
HTML up to node numbering)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas.report import flame
from traceatlas.report.results import Results
from traceatlas.testing.flame import canonical_html, canonical_section

pytestmark = [pytest.mark.realtrace,
              pytest.mark.filterwarnings("ignore::traceatlas.errors.DataQualityWarning")]

DLRM = "param-et_replay/dlrm_kineto.tar.gz"
DEVICE = ("kernel", "comm_kernel", "memcpy", "memset")


@pytest.fixture(scope="module")
def dlrm(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    out = tmp_path_factory.mktemp("dlrm") / "store"
    return traceatlas.Trace(traceatlas.ingest(traces_dir / DLRM, out))


def test_dlrm_flame_rank_and_section(dlrm: traceatlas.Trace) -> None:
    whole = Results(dlrm)
    table = whole.get("tree", {"view": "top_down", "by": "rank"}).table
    roots = table.filter(pl.col("depth") == 0).sort("rank")
    # a plain loop over the device rows: each rank's device ns = its root's
    plain: dict[int, int] = {}
    for rank, cat, dur in (dlrm.intervals.select("rank", "category", "dur_ns").collect()
                           .iter_rows()):
        if str(cat) in DEVICE:
            plain[rank] = plain.get(rank, 0) + int(dur)
    assert dict(zip(roots["rank"].to_list(), roots["device_inclusive_ns"].to_list(),
                    strict=True)) == plain
    best = min(plain, key=lambda r: (-plain[r], r))
    assert flame.busiest_rank(dlrm) == (best, 8, plain[best])
    new = flame.build(Results(dlrm))
    old = flame.build_whole(whole)
    assert new.rank == old.rank == best
    assert canonical_section(new) == canonical_section(old)
    assert canonical_html(flame.html(new, "")) == canonical_html(flame.html(old, ""))
