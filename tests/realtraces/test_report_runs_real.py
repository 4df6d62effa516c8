"""The report on real traces (issue 20): two runs with the same rank count are a
comparison, not a scaling study; host-device copies are named "communication and
transfers" and drawn apart from communication; displayed numbers are rounded.

Expected values come from the SQLite exports (plain interval arithmetic) and from each
run's own report section, not from the code under test's comparison rows."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.testing.compare import plain_union_length

pytestmark = pytest.mark.realtrace

BEFORE, AFTER = "nsys-ai/mfu_2gpu_before.sqlite", "nsys-ai/mfu_2gpu_after.sqlite"
H100_1S = "nsys-ai/h100_2gpu_1s.sqlite"
TRANSFER_COLOUR = "#f58518"


def _report(paths: list[Path], *extra: str, columns: int = 160) -> str:
    res = CliRunner(env={"COLUMNS": str(columns)}).invoke(
        app, ["report", *map(str, paths), *extra])
    assert res.exit_code == 0, res.output
    return res.stdout


def _json(paths: list[Path]) -> dict:  # type: ignore[type-arg]
    out = _report(paths, "--format", "json")
    return json.loads(out[out.index("{"):].splitlines()[0])  # type: ignore[no-any-return]


def _visible_html(page: str) -> str:
    """The HTML's text without the stylesheet and the SVG geometry."""
    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    page = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    return re.sub(r"<[^>]+>", " ", page)


def test_same_rank_count_is_a_comparison(traces_dir: Path, tmp_path: Path) -> None:
    paths = [traces_dir / BEFORE, traces_dir / AFTER]
    doc = _json(paths)
    assert doc["runs_mode"] == "comparison"
    assert [r["scaling"] for r in doc["scalability"]] == ["comparison", "comparison"]
    assert [r["scaling_ratio"] for r in doc["scalability"]] == [None, None]
    runs = doc["runs"]
    rows = {r["metric"]: r for r in doc["comparison"]}
    assert rows["runtime_ns"]["values"] == [r["span_ns"] for r in runs]
    before, after = runs[0]["span_ns"], runs[1]["span_ns"]
    assert rows["runtime_ns"]["changes"][1] == pytest.approx((after - before) / before)
    for node in runs[0]["efficiency"]:  # each run's own tree, side by side
        other = next(n["value"] for n in runs[1]["efficiency"] if n["metric"] == node["metric"])
        row = rows[node["metric"]]
        assert row["values"] == [node["value"], other]
        assert row["changes"][1] == pytest.approx(other - node["value"])
    text = _report(paths)
    for p in paths:  # full names, never cut to fit a column
        assert str(p) in text
    assert "\u2026" not in text.split("Efficiency (POP")[0]
    assert "comparison, not a scaling study" in text
    assert not re.search(r"\b(weak|strong) scaling\b", text)
    assert "(coming: traceatlas diff)" in text
    assert not re.search(r"^\s*traceatlas diff", text, re.M)  # no command that fails
    out = tmp_path / "r.html"
    _report(paths, "-o", str(out))
    page = _visible_html(out.read_text())
    assert "Comparison of runs" in page and all(str(p) in page for p in paths)
    # rounded for display (JSON above keeps every digit)
    assert not re.findall(r"\d\.\d{5,}", text) and not re.findall(r"\d\.\d{5,}", page)
    assert any(len(repr(r["share_pct"]).split(".")[1]) > 5 for r in runs[0]["kernels"])


def test_different_rank_counts_are_a_scaling_study(traces_dir: Path) -> None:
    doc = _json([traces_dir / "h100-planted/healthy", traces_dir / "h100-planted/imbalance"])
    assert doc["runs_mode"] in ("strong", "weak")
    assert [r["ranks"] for r in doc["scalability"]] == [2, 4]
    assert doc["scalability"][0]["scaling_ratio"] is not None


def test_copies_are_transfers_not_communication(traces_dir: Path, tmp_path: Path) -> None:
    path = traces_dir / H100_1S
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    kernels: dict[int, list[tuple[int, int]]] = {}
    memory: dict[int, list[tuple[int, int]]] = {}
    nccl = con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.demangledName WHERE lower(s.value) LIKE '%nccl%'").fetchone()[0]
    for d, s, e in con.execute("SELECT deviceId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        kernels.setdefault(d, []).append((s, e))
    for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        for d, s, e in con.execute(f"SELECT deviceId, start, end FROM {table}"):
            memory.setdefault(d, []).append((s, e))
    con.close()
    assert nccl == 0  # a single-node run without any collective
    # transfers = device activity under no kernel, per device (devices 0, 1 = ranks 0, 1)
    transfers = [plain_union_length(kernels[d] + memory[d]) - plain_union_length(kernels[d])
                 for d in sorted(kernels)]
    doc = _json([path])
    run = doc["runs"][0]
    assert [(b["comm_ns"], b["transfer_ns"]) for b in run["rank_bars"]] == [
        (0, t) for t in transfers]
    assert "transfers" in run["rank_bars_source"]
    node = next(n for n in run["efficiency"] if n["metric"] == "device_communication_efficiency")
    assert node["label"] == "communication and transfers efficiency"
    assert "host-device transfers" in node["description"]
    text = _report([path])
    device = text.split("device side")[1].split("Top findings")[0]
    assert "communication and transfers efficiency" in device
    assert not re.search(r"^\s+communication efficiency", device, re.M)
    out = tmp_path / "r.html"
    _report([path], "-o", str(out))
    page = out.read_text()
    assert "communication and transfers efficiency" in page
    assert f'fill="{TRANSFER_COLOUR}"><title>rank 0 gpu 0 transfers: ' in page
