"""The report's flame section on the 8-rank DLRM trace: the rank chosen from the intervals
(``flame.busiest_rank``) is the one the tree of every rank picks, and the section built
from that rank's tree alone equals the former whole-tree section (boxes, values, why text,
HTML up to node numbering)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas.report import flame
from traceatlas.report.results import Results

pytestmark = [pytest.mark.realtrace,
              pytest.mark.filterwarnings("ignore::traceatlas.errors.DataQualityWarning")]

DLRM = "param-et_replay/dlrm_kineto.tar.gz"
DEVICE = ("kernel", "comm_kernel", "memcpy", "memset")


def _canonical(section: flame.FlameSection) -> tuple[object, ...]:
    """The section with node ids replaced by box positions (as in the unit test: a
    one-rank tree numbers its nodes differently from the tree of every rank)."""
    graphs = []
    for g in section.graphs:
        pos = {b.node_id: i for i, b in enumerate(g.boxes) if b.node_id >= 0}
        graphs.append((g.metric, g.root_ns, g.folded, g.cut_depth, [
            (b.node_id >= 0, None if b.parent_id is None else pos[b.parent_id], b.depth,
             b.name, b.category, b.value_ns, b.x, b.w, b.folded, b.chain)
            for b in g.boxes]))
    return section.rank, section.why, graphs


def canonical_html(text: str) -> str:
    """``data-node`` / ``data-parent`` ids renamed by first appearance (other boxes: -1)."""
    seen: dict[str, str] = {}

    def rename(m: re.Match[str]) -> str:
        if m.group(2) == "-1":
            return m.group(0)
        return f'{m.group(1)}="{seen.setdefault(m.group(2), str(len(seen)))}"'

    return re.sub(r'(data-node|data-parent)="(-?\d+)"', rename, text)


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
    assert _canonical(new) == _canonical(old)
    assert canonical_html(flame.html(new, "")) == canonical_html(flame.html(old, ""))
