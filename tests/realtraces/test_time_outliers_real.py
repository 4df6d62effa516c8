"""Issue 22: the H100 run recorded with ``profiler_metrics`` holds events at ts 0.
``info`` must give the run's own span (about 60 ms, not 1.8e9 s) and warn once with the
counts, which are recounted here with a plain JSON parse of the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app

pytestmark = pytest.mark.realtrace


def test_zero_timestamps_set_aside(traces_dir: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    folder = traces_dir / "h100-planted/zero-timestamps"
    with gzip.open(folder / "rank-0.json.gz") as handle:
        events = json.load(handle)["traceEvents"]
    zero = [e for e in events if e.get("ts") in (0, "0")]
    complete = sum(e["ph"] == "X" for e in zero)
    flow = sum(e["ph"] in ("s", "t", "f") for e in zero)
    assert complete + flow == len(zero)  # nothing else at ts 0 in this file
    # The run's own span from the other events (us -> ns), ends included.
    kept = [e for e in events if e.get("ph") not in ("M",) and e.get("ts") not in (0, None)]
    lo = min(float(e["ts"]) for e in kept)
    hi = max(float(e["ts"]) + float(e.get("dur", 0)) for e in kept if e["ph"] == "X")

    monkeypatch.setenv("TRACEATLAS_CACHE_DIR", str(tmp_path / "cache"))
    res = CliRunner().invoke(app, ["info", str(folder), "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert abs(out["span_ns"] - (hi - lo) * 1000) < 1000  # within 1 us of the recount
    assert 50e6 < out["span_ns"] < 70e6  # "about 60 ms"
    assert out["intervals"] == sum(e.get("ph") == "X" for e in events) - complete
    lines = [line for line in res.stderr.splitlines() if "ts 0" in line]
    assert len(lines) == 1
    assert f"had {len(zero)} event(s) at ts 0" in lines[0]
    assert f"({complete} complete, {flow} flow)" in lines[0]
