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


MTIA_DEVICE_CATEGORY = "mtia_ccp_events"
"""Kineto ``cat`` of the events an MTIA accelerator ran (one category for compute kernels,
DMA transfers and stream events alike); split by ``mtia_category``."""

MTIA_DIRECTIONS: dict[str, str] = {
    "HOST_TO_DEVICE": "HtoD",
    "DEVICE_TO_HOST": "DtoH",
    "DEVICE_TO_DEVICE": "DtoD",
    "HOST_TO_HOST": "HtoH",
}
"""MTIA DMA ``args.direction`` -> ``memcpy_kind`` (other directions are kept as written)."""

MTIA_NAME_CATEGORIES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^dma", re.IGNORECASE), "memcpy"),
    (re.compile(r"^event_(record|wait)$", re.IGNORECASE), "sync"),
    (re.compile(r"^hccl", re.IGNORECASE), "comm_kernel"),
    (re.compile(r"^(job_exe|packet|pe_exe|cpum_exe_subgraph|collective_subgraph_execution)",
                re.IGNORECASE), "other"),
)
"""MTIA device event name -> category, first match wins; any other name is a compute
``kernel``. HTA's patterns (``hta/common/types.py``): ``^dma`` is MTIA memory; ``^hccl``
communication; the execution wrappers (``job_exe``, ``packet``, ``pe_exe``, ...) are
neither compute nor memory. ``event_record``/``event_wait`` are stream events (``sync``,
as Kineto's CUDA ``Event Sync``/``Stream Wait Event``)."""


def mtia_category(name: str, has_direction: bool = False) -> str:
    """Canonical category of an ``mtia_ccp_events`` event: a DMA request (an event with a
    transfer ``direction`` in its args, or a ``dma*`` name) is ``memcpy``; else by name."""
    if has_direction:
        return "memcpy"
    for pattern, category in MTIA_NAME_CATEGORIES:
        if pattern.search(name):
            return category
    return "kernel"
