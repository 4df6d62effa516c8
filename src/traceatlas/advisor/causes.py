"""The cause vocabulary of findings (``Finding.cause``), documented in docs/definitions.md.

A cause is what a finding says is behind the time lost, as one word a script can match on;
the terminal and HTML report show the same cause in words (``CAUSES[cause]``).
"""

from __future__ import annotations

from collections.abc import Mapping

CAUSES: Mapping[str, str] = {
    "data_loading": "data loading",
    "host_sync": "host-device synchronisation",
    "host_collective": "a collective running on the host",
    "launch_bound": "the host launching work too slowly",
    "untraced_host": "host time with nothing traced",
    "pageable_copy": "copies to or from pageable host memory",
    "copy_on_compute_stream": "copies on the compute stream",
    "load_imbalance": "load imbalance",
    "straggler": "a straggling rank",
    "late_sender": "late senders",
    "exposed_communication": "communication not overlapped with compute",
    "short_kernels": "many short kernels",
    "gpu_bound": "the GPU is the bottleneck (busy)",
    "bimodal_kernel": "a kernel with two duration modes",
    "low_tensor_use": "tensor cores mostly unused",
    "below_roofline": "ops far below their roofline (compute or memory peak)",
    "memory_growth": "memory growing step after step",
    "memory_peak": "peak memory near the device's capacity",
    "memory_fragmentation": "memory reserved by the allocator but not allocated",
    "memory_storm": "many small allocations per step",
    "inefficiency": "an efficiency below target",
    "critical_path": "the work on the critical path",
}
"""cause -> the words the report shows."""

RULE_CAUSE: Mapping[str, str] = {
    "load_imbalance": "load_imbalance",
    "host_wait": "launch_bound",
    "exposed_comm": "exposed_communication",
    "memcpy_stream": "copy_on_compute_stream",
    "short_kernels": "short_kernels",
    "straggler": "straggler",
    "late_sender": "late_sender",
    "bimodal": "bimodal_kernel",
    "low_tensor": "low_tensor_use",
    "roofline": "below_roofline",
    "efficiency": "inefficiency",
    "gpu_bound": "gpu_bound",
    "critical_path": "critical_path",
}
"""A rule's cause when its finding does not name one."""


def cause_words(cause: str) -> str:
    """The words for ``cause`` (the cause itself when it is not in the vocabulary)."""
    return CAUSES.get(cause, cause)
