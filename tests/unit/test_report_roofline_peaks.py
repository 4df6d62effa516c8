"""One GPU peak table: the ``gpu_bound`` advisor rule quotes ``analysis.gpu_peaks`` (the
roofline's table) instead of a table of its own.

Expected peaks are vendor datasheet dense tensor figures: NVIDIA H100 PCIe 1,513 bf16
TFLOP/s "with sparsity" -> 756.5 dense; A100 312 bf16; V100 SXM2 125 fp16 (no bf16); HGX
B200 36 PFLOP/s fp16/bf16 sparse for 8 GPUs -> 2,250 dense per GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traceatlas
from traceatlas import advisor
from traceatlas.advisor import gpu_bound
from traceatlas.testing import TraceBuilder

US, MS = 1_000, 1_000_000


@pytest.mark.parametrize(("name", "mem", "tflops"), [
    ("NVIDIA H100 PCIe", None, 756.5),
    ("NVIDIA A100-SXM4-80GB", 80e9, 312.0),
    ("Tesla V100-SXM2-16GB", None, 125.0),
    ("NVIDIA B200", None, 2250.0),
    ("NVIDIA H200", None, 989.4),
])
def test_gpu_bound_peaks_come_from_the_shared_table(name: str, mem: float | None,
                                                    tflops: float) -> None:
    assert gpu_bound.peak_tflops(name, mem) == pytest.approx(tflops)


def test_no_second_table_in_gpu_bound() -> None:
    assert not hasattr(gpu_bound, "PEAK_TFLOPS")


def test_gpu_bound_evidence_on_a_device_only_the_shared_table_knows(tmp_path: Path) -> None:
    """2 steps of 1 ms, an mm with 475e9 FLOPs over a 950 us gemm each: 500 TFLOP/s;
    on a B200 (2,250 dense bf16) that is 500 / 2250 = 22 %."""
    b = TraceBuilder(0, 1, profiler_markers=False)
    for s in (1, 2):
        t0 = s * MS
        b.step(s, t0, t0 + MS)
        b.cpu_op("aten::mm", t0 + 10 * US, t0 + 25 * US, args={"flops": 475_000_000_000})
        b.launch("gemm", t0 + 12 * US, 8 * US, t0 + 30 * US, 950 * US)
    data = json.loads(b.to_json())
    for props in data["deviceProperties"]:
        props["name"] = "NVIDIA B200"
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(data))
    trace = traceatlas.open(traceatlas.ingest(path, tmp_path / "s"))
    (top,) = [f for f in advisor.advise(trace) if f.rule == "gpu_bound"]
    assert "achieved 500.0 TFLOP/s" in top.evidence
    assert "22% of the NVIDIA B200's ~2250 TFLOP/s" in top.evidence
