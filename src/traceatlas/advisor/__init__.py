"""Ranked findings: rules over the analysis results, each finding with the time it costs.

>>> import traceatlas
>>> from traceatlas import advisor
>>> for f in advisor.advise(traceatlas.open("run.tastore")):  # doctest: +SKIP
...     print(f.cost_ns, f.statement)

Rules live one per module (``registry.RULES``); ``efficiency`` sets POP severities.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceatlas.advisor import view_link
from traceatlas.advisor.base import POP_THRESHOLD, Context, Finding
from traceatlas.advisor.causes import RULE_CAUSE
from traceatlas.advisor.commands import view_why_not, why_not
from traceatlas.advisor.registry import RULES, get_rule

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace

__all__ = ["POP_THRESHOLD", "RULES", "Context", "Finding", "advise", "rank_findings"]


def advise(trace: Trace, *, path: str = "PATH", min_cost_pct: float = 0.0,
           rules: list[str] | None = None, context: Context | None = None) -> list[Finding]:
    """Every rule's findings on ``trace`` plus low-efficiency findings, ranked by cost.

    ``min_cost_pct`` drops findings costing less than that percent of the trace duration.
    ``context`` (optional) collects the notes of skipped rules and caches results.
    """
    from traceatlas.advisor import critical_path, efficiency, gpu_bound

    ctx = context if context is not None else Context(trace, path)
    order = list(rules if rules is not None else RULES)
    findings: list[Finding] = []
    for name in order:
        findings.extend(get_rule(name)(ctx))
    findings.extend(efficiency.apply(ctx, findings))
    gpu_bound.cap_host_side(findings)  # a host waiting for a busy GPU is healthy
    floor = min_cost_pct / 100 * ctx.span_ns
    kept = [f for f in findings if (f.cost_ns >= floor and f.cost_ns > 0)
            or f.cost_bytes]  # memory findings cost bytes: no time floor
    for finding in kept:
        finding.cause = finding.cause or RULE_CAUSE.get(finding.rule, "inefficiency")
    for finding in kept:  # every command shown must run on this trace
        why = why_not(ctx, finding.command) if finding.command else None
        if why is not None:
            ctx.notes.append(f"{finding.rule}: suggested command dropped ({why}): "
                             f"{finding.command}")
            finding.command = ""
    view_link.attach(ctx, kept)  # the viewer command opening the map where it points
    for finding in kept:
        why = view_why_not(ctx, finding.view) if finding.view else None
        if why is not None:
            ctx.notes.append(f"{finding.rule}: view command dropped ({why}): {finding.view}")
            finding.view = ""
    ranked = rank_findings(kept, order)  # a GPU-bound run: that is the top finding
    ranked = critical_path.order(ctx, ranked)  # work off the critical path after the rest
    return ([f for f in ranked if f.rule == gpu_bound.NAME]
            + [f for f in ranked if f.rule != gpu_bound.NAME])


def rank_findings(findings: list[Finding], order: list[str] | None = None) -> list[Finding]:
    """Sorted by cost (ns) descending; ties: high severity first, then rule order.
    Memory findings (``cost_bytes`` set) come after every time finding, high severity
    first, then by bytes: bytes and ns are never compared."""
    position = {name: i for i, name in enumerate(order or RULES)}
    return sorted(findings, key=lambda f: (f.cost_bytes is not None, -f.cost_ns,
                                           f.severity != "high", -(f.cost_bytes or 0),
                                           position.get(f.rule, len(position))))
