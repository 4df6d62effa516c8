"""Analysis registry: name -> ``module:Class``; parameter parsing; requirement checks."""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Analysis, Param, Result
from traceatlas.analysis.requirements import REQUIREMENTS, explain
from traceatlas.errors import InputError, MissingDataError

if TYPE_CHECKING:
    from traceatlas.engine.base import Engine
    from traceatlas.model.trace import Trace

ANALYSES: Mapping[str, str] = {
    "breakdown": "traceatlas.analysis.breakdown:Breakdown",
    "profile": "traceatlas.analysis.profile:Profile",
    "time_profile": "traceatlas.analysis.time_profile:TimeProfile",
    "load_imbalance": "traceatlas.analysis.load_imbalance:LoadImbalance",
    "annotations": "traceatlas.analysis.annotations:Annotations",
    "patterns": "traceatlas.analysis.patterns:Patterns",
    "counters": "traceatlas.analysis.counters:Counters",
    "collectives": "traceatlas.analysis.collectives:Collectives",
    "steps": "traceatlas.analysis.steps:Steps",
    "kernels": "traceatlas.analysis.kernels:Kernels",
    "launch": "traceatlas.analysis.launch:Launch",
    "queue": "traceatlas.analysis.queue:Queue",
    "idle": "traceatlas.analysis.idle:Idle",
    "syncs": "traceatlas.analysis.syncs:Syncs",
    "overlap": "traceatlas.analysis.overlap:Overlap",
    "comm_matrix": "traceatlas.analysis.comm_matrix:CommMatrix",
    "message_histogram": "traceatlas.analysis.message_histogram:MessageHistogram",
    "comm_over_time": "traceatlas.analysis.comm_over_time:CommOverTime",
    "comm_by_rank": "traceatlas.analysis.comm_by_rank:CommByRank",
    "mpi_collectives": "traceatlas.analysis.mpi_collectives:MpiCollectives",
    "mpi_wait": "traceatlas.analysis.mpi_wait:MpiWait",
    "phases": "traceatlas.analysis.phases:Phases",
    "efficiency": "traceatlas.analysis.efficiency:Efficiency",
    "memory": "traceatlas.analysis.memory:Memory",
    "advisor": "traceatlas.analysis.advisor:Advisor",
    "critical_path": "traceatlas.analysis.critical_path:CriticalPath",
    "tree": "traceatlas.analysis.tree:Tree",
    "roofline": "traceatlas.analysis.roofline:Roofline",
}
"""Analysis name -> ``module:Class``; imported lazily."""


def get_analysis(name: str) -> Analysis:
    """The analysis registered under ``name``; a clear error listing the others."""
    if name not in ANALYSES:
        raise InputError(name, f"unknown analysis (available: {', '.join(sorted(ANALYSES))})")
    module_name, _, cls_name = ANALYSES[name].partition(":")
    analysis: Analysis = getattr(importlib.import_module(module_name), cls_name)()
    return analysis


def parse_params(analysis: Analysis, given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with ``given`` (text from the CLI or Python values), typed."""
    known = {p.name: p for p in analysis.params}
    unknown = sorted(set(given) - set(known))
    if unknown:
        listed = ", ".join(known) or "none"
        raise InputError(f"--param {unknown[0]}",
                         f"{analysis.name} has no such parameter (parameters: {listed})")
    out = {p.name: p.default for p in analysis.params}
    for key, value in given.items():
        out[key] = _convert(known[key], value, analysis.name)
    return out


def _convert(param: Param, value: Any, analysis: str) -> Any:
    """``value`` (CLI text or a Python value) typed and checked against ``param``."""
    if isinstance(value, str):
        value = _parse(param, value, analysis)
    if param.kind in (int, float) and not isinstance(value, bool):
        _check_range(param, value, analysis)
    return value


def _parse(param: Param, value: str, analysis: str) -> Any:
    where = f"--param {param.name}"
    if param.choices is not None and value not in param.choices:
        raise InputError(where, f"{value!r} is not one of {', '.join(param.choices)}")
    try:
        if param.kind is bool:
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        return param.kind(value)
    except ValueError:
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise InputError(where, f"{analysis} expects {param.kind.__name__}, got {shown!r}"
                         ) from None


def _check_range(param: Param, value: Any, analysis: str) -> None:
    """InputError unless ``param.minimum <= value <= param.maximum`` (and finite)."""
    where = f"--param {param.name}"
    if not isinstance(value, int | float):
        raise InputError(where, f"{analysis} expects {param.kind.__name__}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(where, f"{analysis} expects a finite number, got {value!r}")
    lo, hi = param.minimum, param.maximum
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        shown = "a number of more than 40 digits" if abs(value) >= 10**40 else str(value)
        raise InputError(where, f"{shown} is out of range for {analysis} "
                         f"(allowed: {param.range_text()})")


def check_requirements(analysis: Analysis, trace: Trace) -> None:
    """Raise MissingDataError naming what is missing and which analyses still apply."""
    require(analysis.name, analysis.requires, trace)


def require(name: str, requirements: Sequence[str], trace: Trace) -> None:
    """``check_requirements`` for requirements known only at run time (e.g. they depend
    on a parameter): MissingDataError naming what is missing and what still applies."""
    missing = [r for r in requirements if not REQUIREMENTS[r].check(trace)]
    if not missing:
        return
    met = {n: req.check(trace) for n, req in REQUIREMENTS.items()}
    usable = [n for n in sorted(ANALYSES) if n != name
              and all(met[r] for r in get_analysis(n).requires)]
    what = "; ".join(REQUIREMENTS[r].description for r in missing)
    raise MissingDataError(
        name,
        f"this trace has no {what}{explain(trace, missing)}. Analyses that apply to it: "
        f"{', '.join(usable) or 'none'}",
    )


def run_together(name: str, trace: Trace, param_sets: Sequence[Mapping[str, Any]],
                 engine: Engine | None = None) -> list[Result]:
    """``[run(name, trace, p, engine) for p in param_sets]``; on an engine, in one map
    over the rank batches when the analysis shares work between the sets
    (``partitioned.run_partitioned_together``). Requirements are checked once (one
    analysis)."""
    analysis = get_analysis(name)
    typed = [parse_params(analysis, p) for p in param_sets]
    check_requirements(analysis, trace)
    if engine is not None:
        from traceatlas.analysis import partitioned

        if len(typed) > 1 and partitioned.can_run_together(analysis, typed):
            return partitioned.run_partitioned_together(analysis, trace, typed, engine)
    return [run(name, trace, p, engine) for p in typed]


def run(name: str, trace: Trace, params: Mapping[str, Any] | None = None,
        engine: Engine | None = None) -> Result:
    """Run the analysis ``name`` on ``trace`` with ``params`` (text or typed values).
    With an ``engine``, an analysis declared per rank (``analysis.partitioned``) runs
    batch by batch of ranks on it (same result, bounded memory); others run whole: as
    one task on a worker when the engine's workers run elsewhere (Dask), else here."""
    analysis = get_analysis(name)
    typed = parse_params(analysis, params or {})
    check_requirements(analysis, trace)
    if engine is not None:
        from traceatlas.analysis import partitioned

        if partitioned.is_partitioned(analysis, typed):
            return partitioned.run_partitioned(analysis, trace, typed, engine)
        if engine.runs_elsewhere:  # needs every rank: one task on a worker
            return partitioned.run_whole(analysis, trace, typed, engine)
    return analysis.run(trace, typed)
