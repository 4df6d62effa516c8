"""Flame sections compared up to node numbering (tests and bench of ``report.flame``).

A one-rank tree numbers its nodes differently from the tree of every rank; everything
else the report draws (boxes, values, layout, why text) must be equal.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceatlas.report.flame import FlameSection


def canonical_section(section: FlameSection) -> tuple[object, ...]:
    """The section with node ids replaced by box positions."""
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
