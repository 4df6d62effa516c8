"""Findings agree with the data they come from, on every real trace ``report`` and
``advisor`` read (issue 22): each file of ``../shared/traces`` a reader recognises, and
each folder of ``rank-N.*`` files (one run) as one input.

Per finding of ``traceatlas analyze advisor`` (default threshold, every finding):

- ``cost_ns`` <= ranks x span (span and ranks: what ``traceatlas info`` prints,
  ``traceatlas.summarize``): no rank loses more than the whole run;
- every share ``NN%`` in the statement <= 100 %;
- ``per_step.ms`` <= the longest step (``analyze steps``' ``dur_ns``);
- every time window ``window A-B s`` in the evidence lies in [0, span];
- ``cause`` is a word of the vocabulary; ``ranks`` are ranks of the store.

Left out (documented): inputs that take long to ingest and analyse (``SLOW``) and inputs
a reader sniffs but that are not traces (``NOT_TRACES``). Stores come from the cache
(``traceatlas.open`` on the raw path), so a second run reuses them.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.advisor.causes import CAUSES
from traceatlas.errors import InputError, TraceAtlasError

pytestmark = pytest.mark.realtrace

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"

SLOW: dict[str, str] = {
    "tracelens/traces/inference/vllm_decode_full/capture_traces": "graph-capture trace, "
    "not a run (2.4 MB of capture events)",
    "tracelens/traces/inference/vllm_prefilldecode_piecewise/capture_traces":
    "graph-capture trace, not a run",
    "tracelens/traces/inference/sglang_decode/capture_traces": "graph-capture trace, not a run",
}
"""Path prefixes left out, and why."""

NOT_TRACES = ("execution_details.json", "_et.json.gz")
"""Name endings of files a reader sniffs that are not profiler traces (TraceLens run
metadata, PyTorch execution-trace graphs)."""

XFAIL: dict[tuple[str, str], str] = {}
"""(input, rule) -> why a check fails there (a bug in a rule owned elsewhere)."""

WINDOW = re.compile(r"window (-?[\d.]+)-(-?[\d.]+) s")
SHARE = re.compile(r"(\d+(?:\.\d+)?)\s?%")
ROUNDING_S = 0.0015
"""Windows are printed to 1 ms (``%.3f`` s)."""


def _inputs() -> list[str]:
    """Inputs relative to the traces folder: run folders of rank files, else files."""
    if not (TRACES / "SOURCES.md").is_file():
        return []
    from traceatlas.io.registry import detect
    from traceatlas.io.sources import resolve_inputs

    out: list[str] = []
    rank_dirs = {p.parent for p in TRACES.rglob("rank-*.json*")
                 if sum(1 for _ in p.parent.glob("rank-*.json*")) > 1}
    out += [str(d.relative_to(TRACES)) for d in sorted(rank_dirs)]
    for path in sorted(TRACES.rglob("*")):
        rel = str(path.relative_to(TRACES))
        if (not path.is_file() or path.parent in rank_dirs or rel.endswith(NOT_TRACES)
                or any(rel.startswith(p) for p in SLOW)):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                [detect(s) for s in resolve_inputs([str(path)])]
        except TraceAtlasError:
            continue
        out.append(rel)
    return out


INPUTS = _inputs()
NOT_TRACES = {
    "tracelens/rocprof/908_results.json.gz": "rocprofiler-sdk's own JSON, no traceEvents",
}
"""Inputs no reader accepts, by design (exit 2 with one line); any other must be read."""


@pytest.fixture(scope="module", params=INPUTS or ["(no traces)"])
def checked(request: pytest.FixtureRequest, traces_dir: Path
            ) -> tuple[str, dict[str, Any], list[dict[str, Any]], float | None]:
    """(input, info summary, advisor findings, longest step in ms or None)."""
    name = str(request.param)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = traceatlas.open(traces_dir / name)
    except InputError as err:  # read as a user would: exit 2 with one line
        if name not in NOT_TRACES:  # a reader regression must fail, not skip
            raise
        pytest.skip(f"{name}: not readable: {err}")
    summary = traceatlas.summarize(trace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if summary["intervals"] == 0:  # a counters-only input (the
            # PyTorch memory timeline): the advisor refuses it by its requirement
            with pytest.raises(TraceAtlasError, match="no events with a duration"):
                analysis.run("advisor", trace, {"top": "0"})
            return name, summary, [], None
        findings = analysis.run("advisor", trace, {"top": "0"}).table.to_dicts()
        try:
            steps = analysis.run("steps", trace, {}).table
            longest = max(steps["dur_ns"].to_list()) / 1e6 if steps.height else None
        except TraceAtlasError:
            longest = None
    return name, summary, findings, longest


def _each(checked: tuple[str, dict[str, Any], list[dict[str, Any]], float | None]
          ) -> list[tuple[str, dict[str, Any], list[str]]]:
    """(rule, finding, problems) per finding."""
    _, summary, findings, longest = checked
    span_ns, ranks = int(summary["span_ns"]), set(summary["ranks"])
    span_s = span_ns / 1e9
    out = []
    for f in findings:
        problems = []
        if f["cost_ns"] > max(len(ranks), 1) * span_ns:
            problems.append(f"cost {f['cost_ns']} ns > {len(ranks)} ranks x span {span_ns}")
        shares = [float(s) for s in SHARE.findall(f["statement"])]
        if any(s > 100 for s in shares):
            problems.append(f"a share above 100%: {shares}")
        per_step = f["per_step"] or {}
        ms = per_step.get("ms")
        if ms is not None and (longest is None or ms > longest * (1 + 1e-9)):
            problems.append(f"per_step.ms {ms} > longest step {longest} ms")
        for a, b in WINDOW.findall(f["evidence"]):
            lo, hi = float(a), float(b)
            if lo < -ROUNDING_S or hi > span_s + ROUNDING_S or lo > hi:
                problems.append(f"window {a}-{b} s outside the span 0-{span_s:.3f} s")
        if f["cause"] not in CAUSES:
            problems.append(f"cause {f['cause']!r} not in the vocabulary")
        if not set(f["ranks"] or []) <= ranks:
            problems.append(f"ranks {f['ranks']} not in the store's {sorted(ranks)}")
        out.append((str(f["rule"]), f, problems))
    return out


def test_findings_agree_with_the_data(
        checked: tuple[str, dict[str, Any], list[dict[str, Any]], float | None]) -> None:
    name = checked[0]
    bad = []
    for rule, f, problems in _each(checked):
        if problems and (name, rule) not in XFAIL:
            bad.append(f"{rule}: {'; '.join(problems)} | {f['statement'][:120]}")
    known = [XFAIL[(name, rule)] for rule, _, problems in _each(checked)
             if problems and (name, rule) in XFAIL]
    assert not bad, f"{name}:\n" + "\n".join(bad)
    if known:
        pytest.xfail("; ".join(sorted(set(known))))


def test_every_input_is_listed() -> None:
    """The walk found the planted runs as folders and the single files beside them."""
    if not INPUTS:
        pytest.skip("no traces")
    assert "h100-planted/imbalance" in INPUTS and "torch-cpu-gloo" in INPUTS
    assert "pipit/ping-pong-otf2/traces.otf2" in INPUTS
    assert not any(i.startswith("h100-planted/imbalance/") for i in INPUTS)


def test_the_checks_catch_each_inconsistency() -> None:
    """The checker on hand-made findings: one sound, each other breaking one rule."""
    summary = {"span_ns": 2_000_000_000, "ranks": [0, 1]}
    sound = {"rule": "r", "statement": "x takes 40% of the step", "cost_ns": 4 * 10**9,
             "evidence": "window 0.000-2.000 s", "cause": "host_sync", "ranks": [1],
             "per_step": {"ms": 50.0, "count": 8.0}}
    broken = [dict(sound, cost_ns=4 * 10**9 + 1), dict(sound, statement="x takes 101% of it"),
              dict(sound, per_step={"ms": 50.1}), dict(sound, evidence="window 0.5-2.1 s"),
              dict(sound, cause="bad_luck"), dict(sound, ranks=[2])]
    found = _each(("t", summary, [sound, *broken], 50.0))
    assert [bool(p) for _, _, p in found] == [False] + [True] * len(broken)
    assert all(len(p) == 1 for _, _, p in found[1:])
