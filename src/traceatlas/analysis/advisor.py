"""``advisor``: ranked findings, each with the time it costs and what to do next.

Rules (``traceatlas.advisor``, one module per rule, each documenting its trigger, cost
definition and statement) run over the other analyses' results; rules whose data is
missing produce nothing (a note says which analyses could not run). POP practice: a
finding whose efficiency (the ``efficiency`` analysis, or the rule's own estimate) is
below 0.8 is ``high`` severity, and each efficiency below 0.8 that no rule explains gets
its own finding.

Main table, one row per finding, ranked by cost: ``rank`` (1 = costliest), ``rule``,
``statement`` (one line with the trace's own kernel, region and rank names),
``cost_ns`` (time it costs, ns; the rule's definition), ``evidence`` (numbers, ranks,
time window in seconds from the trace start), ``next_step``, ``command`` (the traceatlas
command that zooms in), ``severity`` (``high`` | ``info``), ``cause`` (a word of
``traceatlas.advisor.causes.CAUSES``), ``ranks`` (the ranks it concerns), ``per_step``
(``ms``: median cost per step in ms; ``count``: events per step, where counted; null
without steps), ``where`` (``annotation``, ``op``, ``kernel``, ``call_site``), ``view`` (the
``traceatlas view PATH --window @A:@B --ranks R`` command opening the trace viewer where
the finding points: ``traceatlas.advisor.view_link``; "" when none). ``cost_bytes``: memory
findings' bytes at stake (their ``cost_ns`` is 0; they rank after the time findings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_COUNT, Param, Result

if TYPE_CHECKING:
    from traceatlas.advisor.base import Finding
    from traceatlas.model.trace import Trace



WHERE_KEYS = ("annotation", "op", "kernel", "call_site")
"""Keys of the ``where`` column (null when the finding does not point there)."""


def _per_step(value: Mapping[str, float] | None) -> dict[str, float | None] | None:
    """``{"ms", "count"}`` with nulls for what the finding does not give."""
    if value is None:
        return None
    return {"ms": value.get("ms"), "count": value.get("count")}


class Advisor:
    """Ranked findings (load imbalance, exposed communication, host wait, ...)."""

    name = "advisor"
    description = "Ranked findings: what costs time, the evidence, and what to try next"
    params = (
        Param("top", int, 10, "keep the N costliest time findings and the N largest "
              "memory findings; 0 = all", minimum=0, maximum=MAX_COUNT),
        Param("path", str, "PATH", "trace path written into the suggested commands"),
        Param("min_cost_pct", float, 1.0, "drop findings costing less than this percent "
              "of the trace duration", minimum=0.0, maximum=100.0),
    )
    requires = ("intervals",)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Run every rule, rank by cost, keep ``top``."""
        import polars as pl

        from traceatlas.advisor import Context, advise

        ctx = Context(trace, str(params["path"]))
        findings = advise(trace, min_cost_pct=float(params["min_cost_pct"]), context=ctx)
        findings = keep_top(findings, int(params["top"]))
        rows = [(i + 1, f.rule, f.statement, f.cost_ns, f.evidence, f.next_step, f.command,
                 f.severity, f.cause, sorted(f.ranks), _per_step(f.per_step),
                 {k: f.where.get(k) for k in WHERE_KEYS}, f.view, f.cost_bytes)
                for i, f in enumerate(findings)]
        schema: dict[str, pl.DataType] = {
            "rank": pl.Int64(), "rule": pl.String(), "statement": pl.String(),
            "cost_ns": pl.Int64(), "evidence": pl.String(), "next_step": pl.String(),
            "command": pl.String(), "severity": pl.String(), "cause": pl.String(),
            "ranks": pl.List(pl.Int64),
            "per_step": pl.Struct({"ms": pl.Float64, "count": pl.Float64}),
            "where": pl.Struct({k: pl.String for k in WHERE_KEYS}), "view": pl.String(),
            "cost_bytes": pl.Int64()}
        table = pl.DataFrame(rows, schema=schema, orient="row")
        return Result(table, notes=list(ctx.notes))


def keep_top(findings: list[Finding], top: int) -> list[Finding]:
    """The ``top`` first time findings and the ``top`` first memory findings (``cost_bytes``
    set), in their ranked order; all when ``top`` is 0. Memory findings rank after every
    time finding, so a plain cut at ``top`` would drop them whenever there are ``top``
    time findings."""
    if top <= 0:
        return findings
    memory = [getattr(f, "cost_bytes", None) is not None for f in findings]
    kept = {id(f) for f in [f for f, m in zip(findings, memory, strict=True) if not m][:top]
            + [f for f, m in zip(findings, memory, strict=True) if m][:top]}
    return [f for f in findings if id(f) in kept]
