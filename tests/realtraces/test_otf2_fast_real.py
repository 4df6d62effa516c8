"""The fast OTF2 path against the event-object reader (``Collector``) on every real OTF2
archive in ../shared/traces: identical tables (rows as sorted multisets) and warnings."""

from __future__ import annotations

import warnings
from pathlib import Path

import pyarrow as pa
import pytest

from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source

pytestmark = pytest.mark.realtrace


def _read(anchor: Path, fast: bool, parallel: bool = False
          ) -> tuple[list[RankData], list[str]]:
    reader = Otf2Reader()
    reader.fast = fast
    if parallel:  # locations read by 2 worker processes whatever the size and the load
        reader.parallel_min_events = 0
        reader.parallel_load_check = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = reader.read(Source(str(anchor)), threads=2 if parallel else 1)
    return out, sorted(str(w.message) for w in caught)


def _canon(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "parallel"])
def test_every_real_otf2_archive(traces_dir: Path, parallel: bool) -> None:
    anchors = sorted(traces_dir.rglob("*.otf2"))
    assert anchors, "no OTF2 archive among the real traces"
    for anchor in anchors:
        old, old_warnings = _read(anchor, fast=False)
        new, new_warnings = _read(anchor, fast=True, parallel=parallel)
        assert old_warnings == new_warnings, anchor
        assert [r.rank for r in old] == [r.rank for r in new], anchor
        for a, b in zip(old, new, strict=True):
            assert (a.clock, a.world_size, a.host) == (b.clock, b.world_size, b.host)
            for name in a.tables:
                x, y = a.tables[name], b.tables[name]
                assert x.schema == y.schema, (anchor, name)
                assert _canon(x).equals(_canon(y)), (anchor, a.rank, name)
