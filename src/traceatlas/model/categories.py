"""Mapping of source categories to the canonical ones (see ``schema.CATEGORIES``)."""

from __future__ import annotations

import re

COMM_KERNEL_RE = re.compile(r"nccl|rccl", re.IGNORECASE)
"""A device kernel whose name matches is a communication kernel (NCCL / RCCL)."""

STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
"""PyTorch profiler iteration markers; the group is the step number."""

KINETO_CATEGORIES: dict[str, str] = {
    # 2022+ Kineto
    "cpu_op": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
    "python_function": "python",
    # 2021 Kineto
    "Operator": "cpu_op",
    "Runtime": "runtime",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
    # other backends
    "hip_runtime": "runtime",
    "hip_driver": "driver",
    "mtia_runtime": "runtime",
    "xpu_runtime": "runtime",
    "xpu_driver": "driver",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "driver",
    # canonical names map to themselves (Chrome JSON written by `traceatlas export`)
    **{c: c for c in ("annotation", "gpu_annotation", "runtime", "driver", "comm_kernel",
                      "memcpy", "memset", "sync", "mpi", "nvtx", "osrt", "openmp", "region",
                      "state", "python", "other")},
}
"""Kineto ``cat`` -> canonical category; anything else is ``other``."""

PROCESS_NAME_CATEGORIES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^GPU\s*\d+$", re.IGNORECASE), "kernel"),
    (re.compile(r"^COPY$", re.IGNORECASE), "memcpy"),
    (re.compile(r"API$", re.IGNORECASE), "runtime"),
)
"""For events without ``cat`` (rocprof v1): process name -> category, first match wins."""


def category_from_process_name(process_name: str | None) -> str | None:
    """Canonical category implied by a process name, or None."""
    if not process_name:
        return None
    for pattern, category in PROCESS_NAME_CATEGORIES:
        if pattern.search(process_name):
            return category
    return None
