"""Rule registry: name -> ``module:function`` returning a list of findings; imported lazily.

Order matters only for ties: findings of equal cost keep this order (root causes such as
load imbalance before their symptoms such as stragglers).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from traceatlas.advisor.base import Context, Finding

Rule = Callable[[Context], list[Finding]]

RULES: Mapping[str, str] = {
    "gpu_bound": "traceatlas.advisor.gpu_bound:check",
    "load_imbalance": "traceatlas.advisor.load_imbalance:check",
    "host_wait": "traceatlas.advisor.host_wait:check",
    "host_sync": "traceatlas.advisor.host_sync:check",
    "exposed_comm": "traceatlas.advisor.exposed_comm:check",
    "memcpy_stream": "traceatlas.advisor.memcpy_stream:check",
    "short_kernels": "traceatlas.advisor.short_kernels:check",
    "straggler": "traceatlas.advisor.straggler:check",
    "late_sender": "traceatlas.advisor.late_sender:check",
    "bimodal": "traceatlas.advisor.bimodal:check",
    "low_tensor": "traceatlas.advisor.low_tensor:check",
    "roofline": "traceatlas.advisor.roofline:check",
    "memory_peak": "traceatlas.advisor.memory_peak:check",
    "memory_leak": "traceatlas.advisor.memory_leak:check",
    "memory_fragmentation": "traceatlas.advisor.memory_fragmentation:check",
    "memory_storm": "traceatlas.advisor.memory_storm:check",
    "critical_path": "traceatlas.advisor.critical_path:check",
}
"""Rule name -> ``module:function``; each module documents trigger, cost and statement."""


def get_rule(name: str) -> Rule:
    """The check function of rule ``name``."""
    module, _, func = RULES[name].partition(":")
    rule: Rule = getattr(importlib.import_module(module), func)
    return rule
