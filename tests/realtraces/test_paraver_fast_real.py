"""The fast Paraver body parse (io/paraver_fields.py) gives the same tables as the
original parse (``paraver_body.Body.parse``, the oracle) on every real ``.prv``, also
gzipped and cut into many small blocks."""

from __future__ import annotations

import gzip
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from traceatlas.io import paraver
from traceatlas.io.paraver import ParaverReader
from traceatlas.io.paraver_body import Body, parse_header
from traceatlas.io.paraver_fields import parse_body
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source

pytestmark = pytest.mark.realtrace


def _prvs(traces_dir: Path) -> list[Path]:
    found = sorted(traces_dir.rglob("*.prv"))
    assert found, "no real .prv found"
    return found


def _read(path: Path) -> list[RankData]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ParaverReader().read(Source(str(path)), threads=2)


def _oracle(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[RankData]:
    with monkeypatch.context() as m:
        m.setattr(paraver, "parse_body",
                  lambda data, at, header, display, threads: Body.parse(data, at, header,
                                                                        display))
        return _read(path)


def _same(a: list[RankData], b: list[RankData], source: str) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.tables.keys() == y.tables.keys()
        for name in x.tables:
            want = x.tables[name]
            if name == "metadata":  # the source file name differs for the .gz copy
                keep = [k != "source_file" for k in want["key"].to_pylist()]
                assert want.filter(keep).equals(y.tables[name].filter(keep)), (source, name)
            else:
                assert want.equals(y.tables[name]), (source, name)


def test_tables_identical_to_the_oracle(traces_dir: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for prv in _prvs(traces_dir):
        fast = _read(prv)
        _same(_oracle(prv, monkeypatch), fast, str(prv))
        # the same trace gzipped, with its .pcf/.row beside it
        gz = tmp_path / (prv.name + ".gz")
        gz.write_bytes(gzip.compress(prv.read_bytes(), compresslevel=1))
        for suffix in (".pcf", ".row"):
            companion = prv.with_suffix(suffix)
            if companion.exists():
                shutil.copy(companion, tmp_path / companion.name)
        _same(fast, _read(gz), str(gz))


@pytest.mark.parametrize("block_bytes", [4096, 65536])
def test_small_blocks_identical_bodies(traces_dir: Path, block_bytes: int) -> None:
    for prv in _prvs(traces_dir):
        data = prv.read_bytes()
        header, at = parse_header(data, str(prv))
        old = Body.parse(data, at, header, str(prv))
        new = parse_body(data, at, header, str(prv), threads=2, block_bytes=block_bytes)
        assert new.counts == old.counts and new.drops == old.drops
        for name in ("states", "state_lines", "ev_fields", "ev_lines", "pairs", "comms"):
            assert np.array_equal(getattr(old, name), getattr(new, name)), (prv, name)
