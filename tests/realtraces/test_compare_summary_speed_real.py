"""The single-scan summary builder gives the same summary as the former builder
(``traceatlas.testing.summary_reference``, frozen) on real traces: the gate test's
h100-planted/healthy run (ProfilerSteps; also with one kernel stretched by 20%), two HTA
runs of the diff tests, and an Nsight Systems run (no steps: the phases path)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceatlas
from traceatlas.compare.summary import MIN_SHARE, TOP
from traceatlas.compare.summary_build import build
from traceatlas.testing import summary_reference as reference
from traceatlas.testing.stretch import stretch_kernel

pytestmark = [pytest.mark.realtrace,
              pytest.mark.filterwarnings("ignore::traceatlas.DataQualityWarning")]

KERNEL = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"


def _same(path: Path | list[Path]) -> dict[str, object]:
    trace = traceatlas.open(path)
    new = build(trace, min_share=MIN_SHARE, top=TOP)
    assert new == reference.build(trace, min_share=MIN_SHARE, top=TOP)
    return new


@pytest.mark.parametrize(("rel", "source"), [
    ("h100-planted/healthy", "steps"),
    ("hta/trace_diff/control", "steps"),
    ("hta/trace_compare/base", "steps"),
    ("nsys-ai/mfu_2gpu_before.sqlite", "phases"),
])
def test_same_summary_as_the_former_builder(traces_dir: Path, rel: str, source: str) -> None:
    summary = _same(traces_dir / rel)
    assert summary["iterations"]["source"] == source  # type: ignore[index]
    assert summary["entities"]["kernel"]  # type: ignore[index]


def test_same_summary_with_a_stretched_kernel(traces_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "s20"
    out.mkdir()
    for f in sorted((traces_dir / "h100-planted" / "healthy").glob("rank-*.json.gz")):
        stretch_kernel(f, out / f.name, KERNEL, 1.20)
    summary = _same(out)
    keys = [e["key"] for e in summary["entities"]["kernel"]]  # type: ignore[index]
    assert KERNEL in keys
