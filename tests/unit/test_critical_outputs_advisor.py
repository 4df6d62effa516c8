"""The ``critical_path`` advisor rule and its ranking effect, on traces built here.

Paths by construction (times in ns from the step start; see test_critical_path.py for
the rules: host time is cpu, a kernel's start after its launch call's start is launch)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

import traceatlas
from traceatlas import advisor
from traceatlas.advisor import critical_path as rule
from traceatlas.advisor.base import Context, Finding
from traceatlas.advisor.commands import why_not
from traceatlas.testing.builder import TraceBuilder

STEP = 30_000


def _cpu_bound(tmp_path: Path) -> traceatlas.Trace:
    """Three steps of 28 us: ProfilerStep [0, 28k]; launch calls [1k,6k], [11k,16k],
    [21k,26k]; kernels of 1 us at 7k, 17k, 27k. Path of a step: step annotation 1k, call
    1 5k, step 5k, call 2 5k, step 5k (cpu 21k), launch of the third kernel from 21k to
    27k (6k), the kernel 1k. Shares: cpu 21/28 = 75%, launch 6/28 = 21%, gpu 1/28 = 4%."""
    b = TraceBuilder(rank=0)
    for n in range(3):
        t = n * STEP
        b.step(n, t, t + 28_000)
        for i in range(3):
            b.launch(f"k{i}", t + 1_000 + 10_000 * i, 5_000, t + 7_000 + 10_000 * i, 1_000)
    return traceatlas.open(b.write(tmp_path / "cpu.json"))


def _gpu_bound(tmp_path: Path) -> traceatlas.Trace:
    """Three steps: ProfilerStep [0, 5k]; launches [0,1k], [2k,3k], [4k,5k]; kernels of
    10 us back to back from 1.5k (to 31.5k). Path: launch 1.5k, three kernels 30k:
    gpu_compute 30/31.5 = 95%, each kernel 10k (k0 first by name on the tie)."""
    b = TraceBuilder(rank=0)
    for n in range(3):
        t = n * 40_000
        b.step(n, t, t + 5_000)
        for i in range(3):
            b.launch(f"k{i}", t + 2_000 * i, 1_000, t + 1_500 + 10_000 * i, 10_000)
    return traceatlas.open(b.write(tmp_path / "gpu.json"))


def test_cpu_bound_loop_gives_a_cpu_finding(tmp_path: Path) -> None:
    ctx = Context(_cpu_bound(tmp_path), "my run.json")
    [f] = rule.check(ctx)
    assert f.statement == ("step 1 is 75% cpu-bound on the critical path "
                           "(launch 21%, gpu_compute 4%)")
    # cost: on-path cpu ns while the device is idle: 21k minus kernels k0 [7k,8k] and k1
    # [17k,18k] that run under the step's cpu segments = 19k per step, x 3 steps
    assert f.cost_ns == 19_000 * 3
    assert f.per_step == {"ms": pytest.approx(0.019)}  # the per-step cost
    assert shlex.split(f.command) == ["traceatlas", "analyze", "critical_path",
                                      "my run.json", "--step", "1"]
    assert why_not(ctx, f.command) is None  # the suggested command runs
    assert "cudaLaunchKernel" in f.evidence


def test_gpu_bound_gives_no_launch_finding_but_a_whatif(tmp_path: Path) -> None:
    ctx = Context(_gpu_bound(tmp_path), "gpu.json")
    [f] = rule.check(ctx)
    assert f.cause == "gpu_bound" and f.severity == "info"
    assert f.statement.startswith("step 1 is 95% gpu_compute-bound on the critical path")
    assert f.where == {"kernel": "k0"} and f.cost_ns == 10_000 * 3
    assert shlex.split(f.command)[-2:] == ["-p", "speedup=^k0$:2"]
    assert why_not(ctx, f.command) is None
    found = advisor.advise(ctx.trace, path="gpu.json")
    assert not [g for g in found if g.rule == rule.NAME and g.cause == "launch_bound"]


def test_findings_off_the_path_rank_after_the_path_finding(tmp_path: Path) -> None:
    """In the CPU-bound loop k2 is on the path, k0 is not: a costlier finding about k0
    moves to just after the critical-path finding, noted; one about k2 keeps its place;
    a finding without a kernel/op is neither moved nor noted."""
    ctx = Context(_cpu_bound(tmp_path), "cpu.json")
    [cp] = rule.check(ctx)

    def finding(name: str, cost: int, where: dict[str, str]) -> Finding:
        return Finding(rule=name, statement=name, cost_ns=cost, evidence="e",
                       next_step="", command="", where=where)

    off = finding("off", cp.cost_ns + 2, {"kernel": "k0"})
    on = finding("on", cp.cost_ns + 1, {"kernel": "k2"})
    plain = finding("plain", 1_000, {})
    ranked = rule.order(ctx, [off, on, cp, plain])
    assert [f.rule for f in ranked] == ["on", rule.NAME, "off", "plain"]
    assert "off the critical path of step 1" in off.evidence
    assert on.evidence == "e" and plain.evidence == "e"


def test_order_is_unchanged_without_the_rule(tmp_path: Path) -> None:
    ctx = Context(_cpu_bound(tmp_path), "cpu.json")
    a = Finding(rule="a", statement="a", cost_ns=2, evidence="", next_step="", command="",
                where={"kernel": "k0"})
    assert rule.order(ctx, [a]) == [a]
