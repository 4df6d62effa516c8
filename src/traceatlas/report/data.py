"""``ReportData``: everything the report shows, as plain data built from analysis results.

One ``RunReport`` per run (a file, a directory of rank files, or a store); with several
runs, ``scalability`` holds the across-runs table. Every section that could not be
computed is absent from its field and listed in ``missing`` with the reason, so the
terminal and HTML renderers say "not available" instead of failing. Times are int ns,
efficiencies are fractions in [0, 1].
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from traceatlas._version import __version__
from traceatlas.analysis.efficiency_labels import description, metric_label
from traceatlas.errors import TraceAtlasError
from traceatlas.report import compare, overview
from traceatlas.report import critical as critical_report
from traceatlas.report import flame as flame_report
from traceatlas.report import memory as memory_report
from traceatlas.report import roofline as roofline_report
from traceatlas.report.baseline import BaselineDiff
from traceatlas.report.results import Results, Unavailable

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.engine.base import Engine
    from traceatlas.model.trace import Trace

TOP_FINDINGS = 10
TOP_KERNELS = 8
HISTOGRAM_KERNELS = 6
EFFICIENCY_WORDS = ("efficiency", "balance", "scalability")
"""Efficiency-table metrics shown in the tree; the rest (``*_ns``, counts) are inputs."""


@dataclass
class EfficiencyNode:
    """One metric of the efficiency tree (``efficiency`` analysis main table, run scope)."""

    side: str
    metric: str
    value: float | None
    parent: str | None
    level: int
    label: str = ""
    """The words shown for the metric (``efficiency_labels``)."""
    description: str = ""
    """What the value measures, one line."""


@dataclass
class Finding:
    """One ranked finding of the ``advisor`` analysis."""

    rank: int
    rule: str
    statement: str
    cost_ns: int
    evidence: str
    next_step: str
    command: str
    severity: str
    cause: str = ""
    """A word of ``traceatlas.advisor.causes.CAUSES`` (shown with ``cause_words``)."""
    ranks: list[int] = field(default_factory=list)
    """The ranks the finding concerns."""
    view: str = ""
    """The ``traceatlas view`` command opening the viewer where the finding points."""
    cost_bytes: int | None = None
    """Memory findings: the bytes at stake (their ``cost_ns`` is 0)."""
    device_bytes: int | None = None
    """Memory findings: the largest GPU memory of the finding's ranks (``deviceProperties``),
    for the share shown next to ``cost_bytes``; None when unknown."""


@dataclass
class RankBar:
    """Per-rank time split (ns) for the stacked bars: useful + comm + transfer + idle.
    Device bars: comm = communication kernels, transfer = memcpy/memset under no kernel
    (host-device copies); host bars: comm = MPI, transfer = 0."""

    label: str
    useful_ns: int
    comm_ns: int
    idle_ns: int
    transfer_ns: int = 0


@dataclass
class KernelStat:
    """One kernel name over all ranks (``kernels`` analysis, by=name)."""

    name: str
    category: str
    count: int
    total_ns: int
    mean_ns: int
    p50_ns: int
    p95_ns: int
    share_pct: float
    bimodal: bool


@dataclass
class Histogram:
    """Log-binned durations of one kernel: ``bins`` = [bin_lo_ns, bin_hi_ns, count]."""

    name: str
    category: str
    bins: list[list[int]]


@dataclass
class StepTime:
    """One rank's iteration (``steps`` analysis): start and duration (ns)."""

    rank: int
    step: int
    start_ns: int
    dur_ns: int


@dataclass
class RunReport:
    """The report of one run."""

    name: str
    store: str
    source_format: str
    ranks: list[int]
    start_ns: int
    span_ns: int
    efficiency: list[EfficiencyNode] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    rank_bars: list[RankBar] = field(default_factory=list)
    rank_bars_source: str = ""
    timeline: overview.Timeline | None = None
    kernels: list[KernelStat] = field(default_factory=list)
    histograms: list[Histogram] = field(default_factory=list)
    steps: list[StepTime] = field(default_factory=list)
    memory: memory_report.MemorySection | None = None
    flame: flame_report.FlameSection | None = None
    roofline: roofline_report.RooflineSection | None = None
    critical: critical_report.CriticalSection | None = None
    missing: dict[str, str] = field(default_factory=dict)
    """Section name -> why it is not available."""
    notes: list[str] = field(default_factory=list)


@dataclass
class ReportData:
    """The whole report: one entry per run, plus the across-runs table.

    ``runs_mode``: ``comparison`` when every run has the same rank count (before/after,
    not a scaling study), else ``strong`` or ``weak`` scaling; ``comparison``: the runs'
    main numbers side by side (``compare.rows``)."""

    version: str
    runs: list[RunReport]
    scalability: list[dict[str, Any]] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    runs_mode: str = ""
    comparison: list[compare.Row] = field(default_factory=list)
    baseline: BaselineDiff | None = None
    """``report --baseline``: the diff against the baseline (its JSON document kept whole)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``--format json`` output)."""
        return asdict(self)


def build(runs: list[tuple[str, Trace]], *, top_findings: int = TOP_FINDINGS,
          top_kernels: int = TOP_KERNELS, engine: Engine | None = None) -> ReportData:
    """The report of ``runs`` (the user's path, opened trace); each analysis runs once
    per trace (those declared per rank in rank batches on ``engine`` when given)."""
    caches = [Results(trace, name, engine) for name, trace in runs]
    reports = [build_run(name, cache, top_findings=top_findings, top_kernels=top_kernels)
               for (name, _), cache in zip(runs, caches, strict=True)]
    data = ReportData(__version__, reports)
    if len(runs) > 1:
        try:
            data.scalability = _scalability(runs, caches)
        except Unavailable as exc:
            data.missing["scalability"] = exc.reason
        data.runs_mode = (str(data.scalability[0]["scaling"]) if data.scalability
                          else compare.mode(reports))
        data.comparison = compare.rows(reports, data.scalability)
    return data


def build_run(name: str, results: Results, *, top_findings: int = TOP_FINDINGS,
              top_kernels: int = TOP_KERNELS) -> RunReport:
    """The report of one run from its (shared) analysis results."""
    trace = results.trace
    lo, hi = results.context.window  # = overview.span, one scan shared with the advisor
    run = RunReport(name, str(trace.path), trace.source_format, list(trace.ranks), lo, hi - lo)
    act = overview.activity(trace)
    # the advisor's kernels (by rank) and the report's (by name) in one pass over the
    # batches; an error here is raised again, in its section, when that section asks
    with contextlib.suppress(Exception):
        results.context.results_together("kernels", [{}, {"by": "name", "top": top_kernels}])
    sections: dict[str, Callable[[], None]] = {
        "efficiency": lambda: _efficiency(run, results),
        "findings": lambda: _findings(run, results, top_findings),
        "rank_bars": lambda: _rank_bars(run, results, act),
        "timeline": lambda: _timeline(run, trace, act, results.context.engine),
        "kernels": lambda: _kernels(run, results, top_kernels),
        "steps": lambda: _steps(run, results),
        "memory": lambda: setattr(run, "memory", memory_report.build(results)),
        "flame": lambda: setattr(run, "flame", flame_report.build(results)),
        "roofline": lambda: setattr(run, "roofline", roofline_report.build(results)),
        "critical": lambda: setattr(run, "critical", critical_report.build(results)),
    }
    for section, fill in sections.items():
        try:
            fill()
        except Unavailable as exc:
            run.missing[section] = exc.reason
    return run


def _efficiency(run: RunReport, results: Results) -> None:
    table = results.get("efficiency").table
    import polars as pl

    rows = table.filter(pl.col("scope") == "run") if "scope" in table.columns else table
    run.efficiency = [
        EfficiencyNode(str(r["side"]), str(r["metric"]),
                       None if r["value"] is None else float(r["value"]),
                       r.get("parent"), int(r.get("level") or 0),
                       str(r.get("label") or metric_label(str(r["metric"]))),
                       description(str(r["metric"])))
        for r in rows.iter_rows(named=True)
        if any(word in str(r["metric"]) for word in EFFICIENCY_WORDS)
    ]
    if not run.efficiency:
        raise Unavailable("the efficiency analysis returned no run-level metrics")


def _findings(run: RunReport, results: Results, top: int) -> None:
    run.findings = [
        Finding(int(r["rank"]), str(r["rule"]), str(r["statement"]), int(r["cost_ns"] or 0),
                str(r.get("evidence") or ""), str(r.get("next_step") or ""),
                str(r.get("command") or ""), str(r.get("severity") or "info"),
                str(r.get("cause") or ""), [int(x) for x in r.get("ranks") or []],
                str(r.get("view") or ""), r.get("cost_bytes"))
        for r in results.findings(top)[:top]
    ]
    if any(f.cost_bytes is not None for f in run.findings):
        memory_report.device_bytes(run.findings, results)


def _rank_bars(run: RunReport, results: Results, act: overview.Activity) -> None:
    try:
        per_rank = results.get("efficiency").extra.get("per_rank")
    except Unavailable:
        per_rank = None
    if per_rank is not None and {"useful_ns", "idle_ns"} <= set(per_rank.columns):
        if "scope" in per_rank.columns:
            per_rank = per_rank.filter(per_rank["scope"] == "run")
        side = ""
        if "side" in per_rank.columns:  # device bars when the run has devices, else host
            sides = set(per_rank["side"].to_list())
            side = "device" if "device" in sides else "host"
            per_rank = per_rank.filter(per_rank["side"] == side)
        run.rank_bars = [_bar(r) for r in per_rank.iter_rows(named=True)]
        run.rank_bars_source = (f"{side} side of the efficiency model: " if side else "") + \
            RANK_BAR_SOURCES.get(side, "efficiency analysis, per_rank table")
        return
    window = (run.start_ns, run.start_ns + run.span_ns)
    run.rank_bars = [RankBar(f"rank {t.rank}", t.useful_ns, t.comm_ns, t.idle_ns,
                             t.transfer_ns)
                     for t in overview.rank_times(results.trace, act, window)]
    run.rank_bars_source = {
        "device": "device activity: " + RANK_BAR_SOURCES["device"],
        "mpi": "MPI calls: communication = inside MPI, useful = the rest of the run",
    }.get(act.kind, "host events: useful = any event, idle = none")


RANK_BAR_SOURCES = {
    "device": "useful = compute kernels, communication = communication (NCCL) kernels not "
              "under a compute kernel, transfers = memory copies and sets (host-device "
              "included) under no kernel, idle = no device activity",
    "host": "useful = host time outside MPI and synchronisation, communication = MPI, "
            "idle = the rest",
}


def _bar(row: dict[str, Any]) -> RankBar:
    """The bar of an efficiency ``per_rank`` row: device rows split ``comm_ns`` into
    communication kernels and transfers; host rows are all communication (MPI)."""
    comm, transfer = int(row.get("comm_ns") or 0), 0
    if row.get("side") == "device" and row.get("transfer_ns") is not None:
        transfer = int(row["transfer_ns"])
    return RankBar(_rank_label(row), useful_ns=int(row["useful_ns"] or 0),
                   comm_ns=comm - transfer, idle_ns=int(row["idle_ns"] or 0),
                   transfer_ns=transfer)


def _rank_label(row: dict[str, Any]) -> str:
    label = f"rank {row['rank']}"
    if row.get("device") is not None:
        label += f" gpu {row['device']}"
    if row.get("thread") is not None:
        label += f" thread {row['thread']}"
    return label


def _timeline(run: RunReport, trace: Trace, act: overview.Activity,
              engine: Engine | None) -> None:
    if run.span_ns <= 0:
        raise Unavailable("the trace has no intervals")
    run.timeline = overview.timeline(trace, act, (run.start_ns, run.start_ns + run.span_ns),
                                     engine=engine)


def _kernels(run: RunReport, results: Results, top: int) -> None:
    import polars as pl

    result = results.get("kernels", {"by": "name", "top": top})
    run.kernels = [KernelStat(**{k: r[k] for k in KernelStat.__dataclass_fields__})
                   for r in result.table.iter_rows(named=True)]
    hist = result.extra["histogram"]
    for k in run.kernels[:HISTOGRAM_KERNELS]:
        part = hist.filter((pl.col("name") == k.name) & (pl.col("category") == k.category))
        run.histograms.append(Histogram(k.name, k.category, _bins(part)))


def _bins(part: pl.DataFrame) -> list[list[int]]:
    cols = part.sort("bin_lo_ns").select("bin_lo_ns", "bin_hi_ns", "count")
    return [[int(a), int(b), int(c)] for a, b, c in cols.iter_rows()]


def _steps(run: RunReport, results: Results) -> None:
    table = results.get("steps").table
    run.steps = [StepTime(int(r["rank"]), int(r["step"]), int(r["start_ns"]), int(r["dur_ns"]))
                 for r in table.sort("rank", "step").iter_rows(named=True)]
    if not run.steps:
        raise Unavailable("the trace has no iteration markers")


def _scalability(runs: list[tuple[str, Trace]], caches: list[Results]) -> list[dict[str, Any]]:
    """The scalability table, from the runs' efficiency results already computed for the
    report (``Unavailable`` when a run has none)."""
    from traceatlas.analysis.scalability import scalability

    efficiency = [c.get("efficiency") for c in caches]
    try:
        table: pl.DataFrame = scalability(runs, efficiency).table
    except TraceAtlasError as exc:  # e.g. runs the model cannot compare
        raise Unavailable(f"{type(exc).__name__}: {exc}") from None
    return [dict(r) for r in table.iter_rows(named=True)]
