"""The OTF2 reader in its child process (``io/otf2_isolated.py``) gives what the read in
this process gives, on a real Score-P archive."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.sources import Source

pytestmark = pytest.mark.realtrace
PINGPONG = "pipit/ping-pong-otf2/traces.otf2"


def test_isolated_read_equals_the_read_in_this_process(traces_dir: Path) -> None:
    source = Source(str(traces_dir / PINGPONG))
    here = Otf2Reader()
    here.isolate = False
    want = here.read(source)
    got = Otf2Reader().read(source)
    assert [r.rank for r in got] == [r.rank for r in want] == [0, 1]
    for g, w in zip(got, want, strict=True):
        assert sorted(g.tables) == sorted(w.tables)
        for name in w.tables:
            assert g.tables[name].equals(w.tables[name]), name
        assert (g.clock, g.world_size, g.host) == (w.clock, w.world_size, w.host)
