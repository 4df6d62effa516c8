"""The words the reports show for the ``efficiency`` metrics (label and one-line
description), so that the terminal, the HTML, the JSON and the advisor say the same.

The device model counts host-device transfers (memcpy, memset) with the NCCL kernels
(BSC's device model, nsys2prv's convention), so ``device_communication_efficiency`` is
labelled "communication and transfers efficiency": a single-node run without any
collective can still score low there, because of its copies.
"""

from __future__ import annotations

from collections.abc import Mapping

LABELS: Mapping[str, str] = {
    "host_parallel_efficiency": "parallel efficiency",
    "host_load_balance": "load balance",
    "host_communication_efficiency": "communication efficiency",
    "host_serialisation_efficiency": "serialisation efficiency",
    "host_transfer_efficiency": "transfer efficiency",
    "device_offload_efficiency": "device offload efficiency",
    "host_hybrid_parallel_efficiency": "hybrid parallel efficiency",
    "host_hybrid_load_balance": "hybrid load balance",
    "host_hybrid_communication_efficiency": "hybrid communication efficiency",
    "host_mpi_parallel_efficiency": "MPI parallel efficiency",
    "host_mpi_load_balance": "MPI load balance",
    "host_mpi_communication_efficiency": "MPI communication efficiency",
    "host_openmp_parallel_efficiency": "OpenMP parallel efficiency",
    "host_openmp_load_balance": "OpenMP load balance",
    "host_openmp_communication_efficiency": "OpenMP communication efficiency",
    "device_parallel_efficiency": "parallel efficiency",
    "device_load_balance": "load balance",
    "device_communication_efficiency": "communication and transfers efficiency",
    "device_orchestration_efficiency": "orchestration efficiency",
}
"""Metric -> label (the side is shown apart: "host side", "device side")."""

DESCRIPTIONS: Mapping[str, str] = {
    "host_parallel_efficiency": "mean useful host time / runtime",
    "host_load_balance": "mean / max useful time over the ranks",
    "host_communication_efficiency": "max useful time / runtime: time lost in MPI",
    "host_serialisation_efficiency": "max useful time / ideal-network runtime",
    "host_transfer_efficiency": "ideal-network runtime / runtime",
    "device_offload_efficiency": "useful host time / host time outside MPI (the rest "
                                 "waits for or drives the device)",
    "device_parallel_efficiency": "sum of compute-kernel time / (devices x runtime)",
    "device_load_balance": "mean / max compute-kernel time over the devices",
    "device_communication_efficiency": "max compute-kernel time / max device active time: "
                                       "time lost to NCCL kernels and host-device transfers "
                                       "(memcpy, memset) that no compute kernel hides",
    "device_orchestration_efficiency": "max device active time / runtime: the device "
                                       "waits for work",
}
"""Metric -> one line on what the value measures."""

NCCL_USEFUL_LABELS: Mapping[str, str] = {
    "device_communication_efficiency": "transfers efficiency",
}
"""Labels that change with ``nccl_useful=true`` (NCCL kernels count as useful)."""


def metric_label(metric: str, nccl_useful: bool = False) -> str:
    """``device_communication_efficiency`` -> ``communication and transfers efficiency``;
    unknown metrics lose their side prefix and underscores."""
    if nccl_useful and metric in NCCL_USEFUL_LABELS:
        return NCCL_USEFUL_LABELS[metric]
    if metric in LABELS:
        return LABELS[metric]
    for side in ("host_", "device_"):
        if metric.startswith(side):
            metric = metric[len(side):]
            break
    return metric.replace("_", " ")


def description(metric: str) -> str:
    """One line on what ``metric`` measures ("" when none is written)."""
    return DESCRIPTIONS.get(metric, "")
