"""Device time by launch context (``op_device``, ``annotation_device``, ``launched_by``;
``traceatlas.compare.launchers``): values worked out by hand on a trace built in code,
the diff's order and headline for a stretched kernel, and version-1 summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.compare.diff import diff_summaries
from traceatlas.compare.diff_format import headline
from traceatlas.compare.summary import launchers, read_summary, summarize, write_summary
from traceatlas.errors import InputError
from traceatlas.testing import TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
STEP = 1_000_000
STEPS = 8
GEMM = "void gemm<float, 128>(float*)"
GEMM_KEY = "gemm<float, #>"
RELU = "void relu_kernel<float>(float*)"
MM = "void mm_kernel(float*)"
BACKWARD_TID = 4242


def _run(gemm_ns: int) -> TraceBuilder:
    """8 steps; in step n (s = n * STEP), main thread:

    - annotation ``fwd`` [s, s+400k) around annotation ``mlp`` [s+10k, s+300k);
    - ``aten::linear`` [s+20k, s+250k) around ``aten::addmm`` [s+30k, s+200k);
    - gemm launched at s+40k (in addmm) runs [s+100k, s+100k+gemm_ns) on stream 7, and
      again at s+50k on stream 8 over [s+120k, s+160k);
    - relu launched at s+260k (in mlp and fwd, in no op) runs [s+300k, s+330k);

    and on a second thread (the autograd engine: no annotation) ``aten::mm`` [s+500k,
    s+600k) launching mm at s+510k, run over [s+600k, s+650k).
    """
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for n in range(1, STEPS + 1):
        s = n * STEP
        b.step(n, s, s + 900_000)
        b.annotation("fwd", s, s + 400_000)
        b.annotation("mlp", s + 10_000, s + 300_000)
        b.cpu_op("aten::linear", s + 20_000, s + 250_000)
        b.cpu_op("aten::addmm", s + 30_000, s + 200_000)
        b.launch(GEMM, s + 40_000, 5_000, s + 100_000, gemm_ns)
        b.launch(GEMM, s + 50_000, 5_000, s + 120_000, 40_000, stream=8)
        b.launch(RELU, s + 260_000, 5_000, s + 300_000, 30_000)
        b.cpu_op("aten::mm", s + 500_000, s + 600_000, tid=BACKWARD_TID)
        b.launch(MM, s + 510_000, 5_000, s + 600_000, 50_000, tid=BACKWARD_TID)
    return b


def _summary(root: Path, b: TraceBuilder) -> dict[str, Any]:
    paths = write_multi_rank(root / "run", [b])
    return summarize(traceatlas.open(traceatlas.ingest(paths, root / "store")))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """BASE with gemm 50 us; NEW with gemm 65 us (the first launch stretched 30%)."""
    root = tmp_path_factory.mktemp("launch")
    return _summary(root / "b", _run(50_000)), _summary(root / "n", _run(65_000))


def _entity(summary: dict[str, Any], kind: str, key: str) -> dict[str, Any] | None:
    found = [e for e in summary["entities"][kind] if e["key"] == key]
    return found[0] if found else None


def test_device_time_by_launching_op_and_annotations(
        pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    base, _ = pair
    assert base["version"] == 2
    # addmm launched both gemms: [100k, 150k) u [120k, 160k) = 60k per step, 2 activities
    addmm = _entity(base, "op_device", "aten::addmm")
    assert addmm is not None
    assert addmm["ns"] == [[60_000] * STEPS] and addmm["count"] == [[2] * STEPS]
    # the innermost op is the launcher: the wrapper aten::linear gets nothing
    assert _entity(base, "op_device", "aten::linear") is None
    mm = _entity(base, "op_device", "aten::mm")
    assert mm is not None and mm["ns"] == [[50_000] * STEPS] and mm["count"] == [[1] * STEPS]
    # every enclosing annotation: gemms (60k) + relu [300k, 330k) (30k) = 90k, 3 activities;
    # the mm launched on the annotation-less thread counts for none
    for name in ("fwd", "mlp"):
        ann = _entity(base, "annotation_device", name)
        assert ann is not None and ann["ns"] == [[90_000] * STEPS], name
        assert ann["count"] == [[3] * STEPS]
    assert sorted(e["key"] for e in base["entities"]["annotation_device"]) == ["fwd", "mlp"]
    # host-time kinds unchanged in meaning: addmm's host time is its own 170k
    host = _entity(base, "op", "aten::addmm")
    assert host is not None and host["ns"] == [[170_000] * STEPS]


def test_launched_by_and_attribution_note(
        pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    base, _ = pair
    who = launchers(base)
    assert who[GEMM_KEY] == {"op": "aten::addmm", "op_share": 1.0, "annotation": "mlp",
                             "annotation_share": 1.0}
    assert who["relu_kernel<float>"]["op"] is None
    assert who["relu_kernel<float>"]["annotation"] == "mlp"
    assert who["mm_kernel"]["op"] == "aten::mm" and who["mm_kernel"]["annotation"] is None
    # summed durations per step: gemm 50k + 40k, relu 30k, mm 50k = 170k; in an op
    # 140k (82.4%), in an annotation 120k (70.6%)
    assert any("inside an op: 82.4%, inside an annotation: 70.6%" in n for n in base["notes"])


def test_stretch_ranks_kernel_then_launchers(
        pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """gemm +15k on the first of its two launches: union [100k, 165k) u [120k, 160k) =
    65k, was 60k (+5k) for the kernel, its op and both annotations (90k -> 95k); equal
    worth, so the most specific kind comes first."""
    result = diff_summaries(*pair)
    sig = [(c.kind, c.key, c.abs_change_ns) for c in result.changes if c.significant]
    assert sig[:4] == [("kernel", GEMM_KEY, 5_000.0), ("op_device", "aten::addmm", 5_000.0),
                       ("annotation_device", "fwd", 5_000.0),
                       ("annotation_device", "mlp", 5_000.0)]
    assert not any(c.significant for c in result.changes if c.kind in ("op", "annotation"))
    line = next(x for x in headline(result) if x.startswith("largest significant"))
    assert line.startswith(f"largest significant change: kernel {GEMM_KEY}: +8.3%")
    assert line.endswith(", launched by aten::addmm in annotation mlp")
    assert result.to_dict()["launched_by"][GEMM_KEY]["op"] == "aten::addmm"


def test_gate_on_device_kinds(tmp_path: Path,
                              pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    b = write_summary(pair[0], tmp_path / "b.json")
    n = write_summary(pair[1], tmp_path / "n.json")
    runner = CliRunner()
    res = runner.invoke(app, ["diff", str(b), str(n), "--fail-on", "op_device:aten::addmm:+8%",
                              "--fail-on", "annotation_device:fwd:+8%", "-f", "json"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    # addmm 60k -> 65k is +8.3% (past 8%); fwd 90k -> 95k is +5.6% (not past 8%)
    assert [(v["kind"], v["key"]) for v in doc["violations"]] == [("op_device", "aten::addmm")]
    res = runner.invoke(app, ["diff", str(b), str(n), "--fail-on", "op_device:+10%"])
    assert res.exit_code == 0, res.output


def _as_version_1(summary: dict[str, Any]) -> dict[str, Any]:
    old = dict(summary)
    old["version"] = 1
    old["entities"] = {k: v for k, v in summary["entities"].items()
                       if k not in ("op_device", "annotation_device")}
    old["other"] = {k: v for k, v in summary["other"].items()
                    if k not in ("op_device", "annotation_device")}
    old["entities"]["kernel"] = [{k: v for k, v in e.items() if k != "launched_by"}
                                 for e in old["entities"]["kernel"]]
    return old


def test_version_1_still_read_and_compared(tmp_path: Path,
                                           pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    path = tmp_path / "v1.json"
    path.write_bytes(msgspec.json.encode(_as_version_1(pair[0])))
    old = read_summary(path)
    assert old["version"] == 1 and launchers(old) == {}
    result = diff_summaries(old, pair[1])
    kinds = {c.kind for c in result.changes}
    assert "op_device" not in kinds and "kernel" in kinds
    assert not any(p.kind in ("op_device", "annotation_device") for p in result.added)
    assert any("BASE is a summary without op_device" in n for n in result.notes)
    assert result.changes[0].kind == "kernel" and result.changes[0].significant


def test_newer_version_refused(tmp_path: Path,
                               pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    path = tmp_path / "v9.json"
    path.write_bytes(msgspec.json.encode({**pair[0], "version": 9}))
    with pytest.raises(InputError, match=r"summary version 9; this traceatlas reads "
                                         r"versions 1, 2"):
        read_summary(path)
