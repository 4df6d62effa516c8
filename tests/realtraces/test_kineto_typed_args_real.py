"""The Kineto reader's typed ``args`` read (``kineto_events.TYPED_ARGS``: DuckDB parses
``args`` straight into the struct of ``ARG_FIELDS``) against the JSON read it replaced
(``args`` kept as JSON, then ``json_transform``), kept as the oracle: identical tables,
warnings and metadata on every real Kineto trace."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_kineto_real import _MISSING, KINETO_FILES

from traceatlas.io import kineto_events
from traceatlas.io.kineto import KinetoReader
from traceatlas.io.sources import resolve_inputs

pytestmark = pytest.mark.realtrace


def _read(path: Path, typed: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    monkeypatch.setattr(kineto_events, "TYPED_ARGS", typed)
    (source,) = resolve_inputs([path])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rank,) = KinetoReader().read(source, threads=2)
    return rank, sorted((w.category.__name__, str(w.message)) for w in caught)


@pytest.mark.parametrize("rel", KINETO_FILES or _MISSING)
def test_typed_args_read_equals_json_read(
    traces_dir: Path, rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, old_warnings = _read(traces_dir / rel, False, monkeypatch)
    new, new_warnings = _read(traces_dir / rel, True, monkeypatch)
    assert new_warnings == old_warnings
    assert sorted(new.tables) == sorted(old.tables)
    for name, table in old.tables.items():
        other: pa.Table = new.tables[name]
        assert other.schema == table.schema, name
        assert other.equals(table), name
    assert (new.rank, new.rank_source, new.clock, new.world_size, new.host) == (
        old.rank, old.rank_source, old.clock, old.world_size, old.host)
