"""Peak compute (TFLOP/s) and memory bandwidth (TB/s) of known GPUs, for the roofline.

Kineto's ``deviceProperties`` gives the device name, SM count and memory size but no clock
and no per-SM throughput, so the compute peak cannot be derived from it: the device is
looked up by name in ``GPUS`` (first match wins; ``min_mem_gb`` tells the 40 and 80 GB
A100 apart). Every figure is a vendor datasheet's *dense* number (NVIDIA's tensor figures
"with sparsity" halved), per device as PyTorch sees it: one MI250/MI250X device is one of
its two GCDs, so those rows are half the package figures.

Peak kinds: ``fp64``, ``fp32`` (non-tensor vector FMA), ``tf32``, ``bf16``, ``fp16``,
``fp8`` (tensor / matrix cores). Bandwidth: HBM, TB/s (10^12 bytes/s).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

KINDS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class GpuPeaks:
    """One GPU model: ``match`` is a substring of ``deviceProperties.name``."""

    label: str
    match: str
    tflops: Mapping[str, float]
    tbps: float
    source: str
    min_mem_gb: float = 0.0
    aliases: tuple[str, ...] = field(default_factory=tuple)


_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_B200 = "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU = 1/8)"
_MI250 = "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html"
_MI300 = ("https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/"
          "amd-instinct-mi300x-data-sheet.pdf")


def _h100(fp32: float, tf32: float, bf16: float, fp8: float, fp64: float) -> dict[str, float]:
    return {"fp64": fp64, "fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": bf16, "fp8": fp8}


GPUS: tuple[GpuPeaks, ...] = (
    GpuPeaks("H100 PCIe", "H100 PCIe", _h100(51.0, 378.0, 756.5, 1513.0, 26.0), 2.0, _H100),
    GpuPeaks("H100 NVL", "H100 NVL", _h100(60.0, 417.5, 835.5, 1670.5, 30.0), 3.9, _H100),
    GpuPeaks("H100 SXM5", "H100", _h100(67.0, 494.7, 989.4, 1978.9, 34.0), 3.35, _H100),
    GpuPeaks("H200 SXM", "H200", _h100(67.0, 494.7, 989.4, 1978.9, 34.0), 4.8, _H200),
    GpuPeaks("B200", "B200", _h100(75.0, 1125.0, 2250.0, 4500.0, 37.0), 8.0, _B200),
    GpuPeaks("A100 PCIe 80GB", "A100 80GB PCIe",
             {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
             1.935, _A100),
    GpuPeaks("A100 PCIe 40GB", "A100-PCIE",
             {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
             1.555, _A100),
    GpuPeaks("A100 SXM 80GB", "A100",
             {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
             2.039, _A100, min_mem_gb=60.0),
    GpuPeaks("A100 SXM 40GB", "A100",
             {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
             1.555, _A100),
    GpuPeaks("V100 PCIe", "V100-PCIE",
             {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}, 0.9, _V100),
    GpuPeaks("V100 SXM2", "V100",
             {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}, 0.9, _V100),
    GpuPeaks("MI300X", "MI300X",
             {"fp64": 81.7, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4,
              "fp8": 2614.9}, 5.3, _MI300),
    GpuPeaks("MI250X (one GCD)", "MI250X",
             {"fp64": 23.95, "fp32": 23.95, "bf16": 191.5, "fp16": 191.5}, 1.6384, _MI250),
    GpuPeaks("MI250 (one GCD)", "MI250",
             {"fp64": 22.65, "fp32": 22.65, "bf16": 181.05, "fp16": 181.05}, 1.6384, _MI250),
)
"""Known GPUs, most specific name first. fp32 = vector (non-tensor) FMA peak."""


def lookup(name: str | None, total_mem_bytes: float | None = None) -> GpuPeaks | None:
    """The first ``GPUS`` entry whose ``match`` is in ``name`` (and whose memory floor
    ``total_mem_bytes`` meets, when known); None for an unknown or empty name."""
    if not name:
        return None
    for gpu in GPUS:
        if gpu.match not in name:
            continue
        if gpu.min_mem_gb and (total_mem_bytes is None
                               or total_mem_bytes < gpu.min_mem_gb * 1e9):
            continue
        return gpu
    return None


def device_properties(value: str | None) -> list[dict[str, object]]:
    """The ``deviceProperties`` list from its metadata JSON text ([] when unreadable)."""
    try:
        props = json.loads(value) if value else []
    except ValueError:
        return []
    return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
