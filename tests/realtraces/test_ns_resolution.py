"""HTA's ns-resolution trace: absolute unix-us timestamps with ns fractions stay exact."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

import traceatlas

pytestmark = pytest.mark.realtrace


def test_ns_resolution_timestamps_are_exact(traces_dir: Path, tmp_path: Path) -> None:
    path = next((traces_dir / "hta" / "ns_resolution_trace").glob("*.json.gz"))
    # Independent: stdlib json with exact decimals for every complete event's "ts", in ns.
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    expected = sorted(
        int(e["ts"] * 1000) for e in doc["traceEvents"] if e.get("ph") == "X"
    )
    assert len(expected) > 1000
    assert any(v % 1000 for v in expected)          # the file really has sub-us parts
    trace = traceatlas.Trace(traceatlas.ingest(path, tmp_path / "s"))
    got = sorted(trace.intervals.select("start_ns").collect()["start_ns"].to_list())
    assert got == expected
