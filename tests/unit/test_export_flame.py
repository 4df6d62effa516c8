"""``export --to folded|speedscope`` on the hand-built golden trace of ``test_tree``:
folded lines equal hand-written text; speedscope checked against the required fields and
enums of speedscope's file-format-schema.json (jsonschema is not installed here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tree import BWD_TID, EVAL_ACC, EVAL_MM, MEMCPY, PY, STEP, golden
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.export.speedscope import SCHEMA

A = f"{STEP};{PY};fwd;aten::linear;aten::addmm"
W = f"{STEP};{PY};bwd_wait"
# host exclusive ns per context, depth-first, children by first appearance (hand-computed)
HOST = f"""{STEP} 410000
{STEP};{PY} 50000
{STEP};{PY};fwd 110000
{STEP};{PY};fwd;aten::linear 40000
{A} 105000
{A};cudaLaunchKernel 20000
{A};cudaMemcpyAsync 5000
{A};{EVAL_MM} 15000
{A};{EVAL_MM};AddmmBackward0 15000
{A};{EVAL_MM};AddmmBackward0;aten::mm 60000
{A};{EVAL_MM};AddmmBackward0;aten::mm;cudaLaunchKernel 10000
{W} 260000
{W};{EVAL_ACC} 35000
{W};{EVAL_ACC};cudaLaunchKernel 5000
"""
DEVICE = f"""{A};cudaLaunchKernel;gemm 100000
{A};cudaMemcpyAsync;{MEMCPY} 5000
{A};{EVAL_MM};AddmmBackward0;aten::mm;cudaLaunchKernel;gemm_bwd 50000
{W};{EVAL_ACC};cudaLaunchKernel;acc 10000
"""


def _export(tmp_path: Path, fmt: str, *extra: str) -> tuple[int, str, Path]:
    trace = golden(tmp_path)
    out = tmp_path / f"out.{fmt}"
    result = CliRunner().invoke(app, ["export", str(trace.path), "--to", fmt, "-o", str(out),
                                      *extra])
    return result.exit_code, result.output, out


def _sorted_lines(text: str) -> list[str]:
    return sorted(text.splitlines())


def test_folded_host_and_device_lines(tmp_path: Path) -> None:
    code, _, out = _export(tmp_path, "folded")
    assert code == 0
    assert _sorted_lines(out.read_text()) == _sorted_lines(HOST)
    code, _, out = _export(tmp_path, "folded", "-p", "value=device")
    assert code == 0
    assert _sorted_lines(out.read_text()) == _sorted_lines(DEVICE)
    # inferno/FlameGraph: the last space-separated token is an integer count
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        assert stack and count.isdigit()


def test_folded_bad_param_is_one_line_exit_2(tmp_path: Path) -> None:
    code, output, out = _export(tmp_path, "folded", "-p", "value=wall")
    assert code == 2 and "value" in output and not out.exists()
    code, output, out = _export(tmp_path, "chrome", "-p", "value=host")
    assert code == 2 and not out.exists()


def test_folded_names_are_escaped(tmp_path: Path) -> None:
    from traceatlas.testing.builder import TraceBuilder

    b = TraceBuilder(rank=0)
    b.cpu_op("a;b\nc", 0, 1_000)
    b.cpu_op("", 100, 200)
    path = b.write(tmp_path / "names.json")
    out = tmp_path / "n.folded"
    result = CliRunner().invoke(app, ["export", str(path), "--to", "folded", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert _sorted_lines(out.read_text()) == ["a:b c 900", "a:b c;[unnamed] 100"]


def _check_schema(doc: dict[str, object]) -> None:
    """The required fields, types and enums of speedscope's FileFormat.File schema."""
    assert doc["$schema"] == SCHEMA
    frames = doc["shared"]["frames"]  # type: ignore[index]
    assert all(isinstance(f["name"], str) for f in frames)
    for p in doc["profiles"]:  # type: ignore[attr-defined]
        assert p["type"] == "sampled"
        assert isinstance(p["name"], str)
        assert p["unit"] in ("bytes", "microseconds", "milliseconds", "nanoseconds", "none",
                             "seconds")
        assert isinstance(p["startValue"], int | float)
        assert isinstance(p["endValue"], int | float)
        assert len(p["samples"]) == len(p["weights"])
        for stack in p["samples"]:
            assert all(isinstance(i, int) and 0 <= i < len(frames) for i in stack)


def test_speedscope_profiles_per_thread(tmp_path: Path) -> None:
    code, output, out = _export(tmp_path, "speedscope")
    assert code == 0, output
    doc = json.loads(out.read_text())
    _check_schema(doc)
    names = [f["name"] for f in doc["shared"]["frames"]]
    profiles = {p["name"]: p for p in doc["profiles"]}
    assert len(profiles) == 4  # main and backward thread, host and device time each
    bwd = next(p for n, p in profiles.items() if f"thread {BWD_TID} " in n and "host" in n)
    stacks = {";".join(names[i] for i in s): w for s, w in
              zip(bwd["samples"], bwd["weights"], strict=True)}
    # the backward thread's own stacks (not moved under the forward op here)
    assert stacks == {EVAL_MM: 15_000, f"{EVAL_MM};AddmmBackward0": 15_000,
                      f"{EVAL_MM};AddmmBackward0;aten::mm": 60_000,
                      f"{EVAL_MM};AddmmBackward0;aten::mm;cudaLaunchKernel": 10_000,
                      EVAL_ACC: 35_000, f"{EVAL_ACC};cudaLaunchKernel": 5_000}
    assert bwd["endValue"] == 140_000 and bwd["unit"] == "nanoseconds"
    main_dev = next(p for n, p in profiles.items()
                    if f"thread {BWD_TID} " not in n and "device" in n)
    assert main_dev["endValue"] == 105_000


@pytest.mark.parametrize("fmt", ["folded", "speedscope"])
def test_output_directory_refused(tmp_path: Path, fmt: str) -> None:
    trace = golden(tmp_path)
    result = CliRunner().invoke(app, ["export", str(trace.path), "--to", fmt, "-o",
                                      str(tmp_path)])
    assert result.exit_code == 2
