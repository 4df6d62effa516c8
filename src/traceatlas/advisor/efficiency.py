"""POP efficiencies: severities of the rules' findings, and a finding for each low
efficiency no rule explains.

Values come from the ``efficiency`` analysis (scope ``run``) when it is registered and
runs on the trace; otherwise each finding keeps its rule's own estimate.

Severity: ``high`` when the finding's metric (the analysis' value, else the rule's
estimate) is below ``POP_THRESHOLD`` (0.8), else ``info``.
Extra findings (rule ``efficiency``): each metric below 0.8 that is a fraction (not a
``*_ns`` input), is not the parent of another metric below 0.8 (POP practice: report the
deepest factor that explains the loss), and that no rule's finding names.
Cost (ns): (1 - value) x the trace duration: the share of the run the factor loses.
Statement: "Host load balance is 0.72, below POP's 0.8 target".
GPU-bound runs (a ``gpu_bound`` finding among the rules' findings): a low offload or
orchestration efficiency is the host waiting for a busy device, the healthy state: its
finding is ``info`` and says so. Fields: ``cause`` ``inefficiency``, ``ranks`` every rank
(a run-scope value).
"""

from __future__ import annotations

from collections.abc import Mapping

from traceatlas.advisor.base import POP_THRESHOLD, Context, Finding, fmt_ns
from traceatlas.advisor.commands import first_runnable
from traceatlas.analysis.efficiency_labels import metric_label

NAME = "efficiency"

NEXT: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "load_balance": ("Some ranks compute more than others: look at the per-rank useful "
                     "time and the most imbalanced regions.", ("load_imbalance", "efficiency")),
    "communication_efficiency": ("Time goes to communication instead of useful work: "
                                 "look at waits and transfers.", ("efficiency",)),
    "serialisation_efficiency": ("Ranks wait for each other (dependencies, late senders): "
                                 "look at wait states.",
                                 ("mpi_wait", "mpi_collectives", "efficiency")),
    "transfer_efficiency": ("Data transfer itself is slow: fewer or larger messages, "
                            "overlap them with compute.",
                            ("comm_matrix", "mpi_collectives", "efficiency")),
    "orchestration_efficiency": ("The device has nothing to run: look at idle time "
                                 "waiting for the host.", ("idle", "efficiency")),
    "offload_efficiency": ("The host spends this share of its time outside MPI in "
                           "device synchronisations and runtime calls instead of its own "
                           "work: expected while the GPU is the bottleneck (check the "
                           "device side first); otherwise overlap host work with device "
                           "work and remove synchronisations.", ("idle", "efficiency")),
}
"""Metric suffix -> (next step, analyses that zoom in: the first whose command runs on
the trace is suggested)."""
DEVICE_COMM_NEXT = ("The device moves data while no compute kernel runs: NCCL kernels and "
                    "memory transfers (memcpy/memset, host-device copies included) count "
                    "here; see which dominates per stream.", ("breakdown", "efficiency"))
"""Next step for the device communication and transfers efficiency."""
HOST_WAITS_FOR_DEVICE = ("offload_efficiency", "orchestration_efficiency")
"""Metrics whose loss is the host waiting for the device (healthy when GPU-bound)."""


def _device_split(ctx: Context, metric: str) -> str:
    """For the device communication and transfers efficiency: how its loss splits into
    communication kernels and memory transfers, summed over the devices (ns)."""
    result = ctx.result("efficiency") if metric == "device_communication_efficiency" else None
    per = None if result is None else result.extra.get("per_rank")
    if per is None or "transfer_ns" not in per.columns:
        return ""
    per = per.filter((per["side"] == "device") & (per["scope"] == "run"))
    comm, transfer = int(per["comm_kernel_ns"].sum()), int(per["transfer_ns"].sum())
    return (f"; not hidden by compute kernels, summed over the devices: communication "
            f"kernels {fmt_ns(comm)}, memory transfers {fmt_ns(transfer)}")


def apply(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """Set severities in place and return the extra low-efficiency findings."""
    values = ctx.efficiency
    for finding in findings:
        value = values.get(finding.metric or "", finding.efficiency)
        if value is not None:
            finding.efficiency = value
            finding.severity = "high" if value < POP_THRESHOLD else "info"
    low = {m: v for m, v in values.items()
           if not m.endswith("_ns") and 0.0 <= v < POP_THRESHOLD}
    explained = {f.metric for f in findings}
    has_low_child = {ctx.parents.get(m) for m in low}
    busy = any(f.rule == "gpu_bound" for f in findings)
    return [_finding(ctx, m, v, gpu_bound=busy) for m, v in sorted(low.items())
            if m not in explained and m not in has_low_child]


def words(metric: str) -> str:
    """``device_communication_efficiency`` -> ``Device communication and transfers
    efficiency`` (the report's label, with its side)."""
    label = metric_label(metric)
    side = metric.split("_", 1)[0]
    if side in ("host", "device") and not label.lower().startswith(side):
        label = f"{side} {label}"
    return label[0].upper() + label[1:]


def _finding(ctx: Context, metric: str, value: float, *, gpu_bound: bool = False
             ) -> Finding:
    suffix = next((k for k in NEXT if metric.endswith(k)), None)
    step, analyses = NEXT[suffix] if suffix else (
        "Look at the efficiency tree for the factor below it.", ("efficiency",))
    if metric == "device_communication_efficiency":
        step, analyses = DEVICE_COMM_NEXT
    healthy = gpu_bound and metric.endswith(HOST_WAITS_FOR_DEVICE)
    if healthy:
        step = ("Expected while the GPU is the bottleneck: the host waits for a busy "
                "device. Speed up the device work (see the GPU-bound finding).")
    cost = round((1 - value) * ctx.span_ns)
    return Finding(
        rule=NAME,
        statement=(f"{words(metric)} is {value:.2f}, below POP's {POP_THRESHOLD} target"
                   + ("; expected, the run is GPU-bound (the host waits for a busy "
                      "device)" if healthy else "")),
        cost_ns=cost,
        evidence=(f"{metric} = {value:.3f} (efficiency analysis, whole run); (1 - value) x "
                  f"run duration {fmt_ns(ctx.span_ns)} = {fmt_ns(cost)}"
                  + _device_split(ctx, metric)),
        next_step=step,
        command=first_runnable(ctx, analyses),
        metric=metric,
        efficiency=value,
        severity="info" if healthy else "high",
        cause="inefficiency",
        ranks=list(ctx.trace.ranks),
    )
