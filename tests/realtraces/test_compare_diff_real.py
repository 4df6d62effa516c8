"""``traceatlas diff`` on real traces: HTA's TraceDiff pairs (added/removed ops) and two
real Nsight Systems runs (the efficiency factor that moved, checked against
``traceatlas analyze efficiency`` on each side)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app


def _json(args: list[str]) -> tuple[int, Any]:
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


@pytest.mark.parametrize("pair", [("hta/trace_compare/base", "hta/trace_compare/test"),
                                  ("hta/trace_diff/control", "hta/trace_diff/test")])
def test_hta_pairs_list_added_and_removed_ops(traces_dir: Path,
                                              pair: tuple[str, str]) -> None:
    base, new = (traces_dir / p for p in pair)
    code, doc = _json(["diff", str(base), str(new), "-f", "json"])
    assert code == 0  # no --fail-on: never 1
    added = {a["key"] for a in doc["added"] if a["kind"] == "op"}
    removed = {a["key"] for a in doc["removed"] if a["kind"] == "op"}
    assert added, doc["added"]
    # An added op is absent from BASE's side of every change, and vice versa.
    compared = {c["key"] for c in doc["changes"] if c["kind"] == "op"}
    assert not (added & compared) and not (removed & compared)
    assert all(a["total_ns"] > 0 for a in doc["added"] + doc["removed"])
    if pair[0].endswith("control"):
        assert removed  # control runs eager bmm, test a compiled graph
        assert "aten::bmm" in removed


def test_nsys_runs_name_the_factor_that_moved(traces_dir: Path) -> None:
    before = traces_dir / "nsys-ai" / "mfu_2gpu_before.sqlite"
    after = traces_dir / "nsys-ai" / "mfu_2gpu_after.sqlite"
    _, doc = _json(["diff", str(before), str(after), "-f", "json"])
    values = []
    for path in (before, after):
        _, rows = _json(["analyze", "efficiency", str(path), "--format", "json"])
        values.append({r["metric"]: r["value"] for r in rows if r["scope"] == "run"})
    moved = doc["moved_most"]
    assert moved in values[0] and moved in values[1]
    row = next(e for e in doc["efficiency"] if e["metric"] == moved)
    assert row["delta"] == pytest.approx(values[1][moved] - values[0][moved], abs=1e-12)
    # It is the factor (level >= 1) with the largest |delta|, recomputed here.
    factors = [e for e in doc["efficiency"] if e["level"] >= 1 and e["delta"] is not None]
    assert abs(row["delta"]) == max(abs(e["delta"]) for e in factors)
    res = CliRunner().invoke(app, ["diff", str(before), str(after)])
    assert res.exit_code == 0
    assert f"efficiency factor that moved most: {row['label']} ({moved})" in res.stdout
    assert "step time" in res.stdout and "verdict: pass" in res.stdout
