"""``advisor -p top=N`` keeps N time findings AND N memory findings: memory findings rank
after every time finding, so a plain cut at N dropped them whenever a trace had N time
findings (e.g. the leak finding of a run with 10 time findings)."""

from __future__ import annotations

from traceatlas.advisor.base import Finding
from traceatlas.analysis.advisor import keep_top


def _f(rule: str, cost_ns: int, cost_bytes: int | None = None) -> Finding:
    return Finding(rule=rule, statement=rule, cost_ns=cost_ns, evidence="", next_step="",
                   command="", cost_bytes=cost_bytes)


def test_top_keeps_memory_findings_after_many_time_findings() -> None:
    ranked = ([_f(f"t{i}", 1000 - i) for i in range(12)]
              + [_f("leak", 0, 5 << 20), _f("peak", 0, 1 << 20), _f("storm", 0, 1 << 10)])
    kept = [f.rule for f in keep_top(ranked, 10)]
    # by hand: the 10 costliest time findings, then the (up to 10) memory findings: all 3
    assert kept == [f"t{i}" for i in range(10)] + ["leak", "peak", "storm"]
    assert [f.rule for f in keep_top(ranked, 2)] == ["t0", "t1", "leak", "peak"]
    assert keep_top(ranked, 0) == ranked  # 0 = all
