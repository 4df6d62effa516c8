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
"""

from __future__ import annotations

from collections.abc import Mapping

from traceatlas.advisor.base import POP_THRESHOLD, Context, Finding, fmt_ns

NAME = "efficiency"

NEXT: Mapping[str, tuple[str, str]] = {
    "load_balance": ("Some ranks compute more than others: look at the per-rank useful "
                     "time and the most imbalanced regions.", "load_imbalance"),
    "communication_efficiency": ("Time goes to communication instead of useful work: "
                                 "look at waits and transfers.", "efficiency"),
    "serialisation_efficiency": ("Ranks wait for each other (dependencies, late senders): "
                                 "look at wait states.", "mpi_wait"),
    "transfer_efficiency": ("Data transfer itself is slow: fewer or larger messages, "
                            "overlap them with compute.", "comm_matrix"),
    "orchestration_efficiency": ("The device has nothing to run: look at idle time "
                                 "waiting for the host.", "idle"),
    "offload_efficiency": ("The host spends this share of its time outside MPI in "
                           "device synchronisations and runtime calls instead of its own "
                           "work: expected while the GPU is the bottleneck (check the "
                           "device side first); otherwise overlap host work with device "
                           "work and remove synchronisations.", "idle"),
}
"""Metric suffix -> (next step, analysis that zooms in)."""


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
    return [_finding(ctx, m, v) for m, v in sorted(low.items())
            if m not in explained and m not in has_low_child]


def _finding(ctx: Context, metric: str, value: float) -> Finding:
    words = metric.replace("_", " ")
    suffix = next((k for k in NEXT if metric.endswith(k)), None)
    step, analysis = NEXT[suffix] if suffix else (
        "Look at the efficiency tree for the factor below it.", "efficiency")
    cost = round((1 - value) * ctx.span_ns)
    return Finding(
        rule=NAME,
        statement=f"{words[0].upper()}{words[1:]} is {value:.2f}, below POP's "
                  f"{POP_THRESHOLD} target",
        cost_ns=cost,
        evidence=(f"{metric} = {value:.3f} (efficiency analysis, whole run); (1 - value) x "
                  f"run duration {fmt_ns(ctx.span_ns)} = {fmt_ns(cost)}"),
        next_step=step,
        command=ctx.command(analysis),
        metric=metric,
        efficiency=value,
        severity="high",
    )
