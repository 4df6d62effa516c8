"""The issue's gate checks on a real multi-step trace (h100-planted/healthy, 2 ranks x 5
ProfilerSteps): one kernel stretched by 20% fails ``--fail-on kernel:+10%`` and is named;
its launching op and annotation (device time by launch context: ``op_device``,
``annotation_device``) among the top changes; 1% passes ``kernel:+5%``; 3% jitter on
every kernel passes; a baseline summary of the original gives the same verdict as the
original trace.

The stretched kernel is ``nvjet_..._bias_TNT``: 120 instances per rank (24 per step),
about 0.87 ms per step with a spread of about 1% across ranks and steps, and a raw name
that is its own matching key. The copies are written by ``traceatlas.testing.stretch``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.testing.stretch import jitter_kernels, stretch_kernel

pytestmark = pytest.mark.realtrace

REL = "h100-planted/healthy"
KERNEL = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"
JITTER_SEEDS = range(5)
LAUNCH_SQL = f"""
WITH k AS (SELECT rank, external_id FROM intervals
           WHERE category = 'kernel' AND name = '{KERNEL}'),
op AS (SELECT i.rank, i.name, i.track_id, i.start_ns, i.end_ns, i.external_id
       FROM intervals i JOIN k USING (rank, external_id) WHERE i.category = 'cpu_op'),
ann AS (SELECT op.rank, op.external_id, op.name AS op, arg_max(a.name, a.depth) AS annotation
        FROM op JOIN intervals a ON a.rank = op.rank AND a.track_id = op.track_id
             AND a.category = 'annotation' AND a.start_ns <= op.start_ns
             AND op.end_ns <= a.end_ns AND a.name NOT LIKE 'ProfilerStep#%'
        GROUP BY ALL)
SELECT op, annotation, count(*) AS n FROM ann GROUP BY ALL ORDER BY n DESC
"""
"""The op that launches each instance (same rank and External id: Kineto links a kernel
to the innermost op around its launch) and the innermost annotation around that op."""


def _variant(src: Path, out: Path, make: Any) -> Path:
    out.mkdir()
    for f in sorted(src.glob("rank-*.json.gz")):
        make(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def runs(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The original (copied), its baseline summary, and the planted variants."""
    root = tmp_path_factory.mktemp("gate")
    src = traces_dir / REL
    orig = _variant(src, root / "orig", shutil.copyfile)
    paths = {"orig": orig}
    paths["s20"] = _variant(src, root / "s20", lambda a, b: stretch_kernel(a, b, KERNEL, 1.20))
    paths["s01"] = _variant(src, root / "s01", lambda a, b: stretch_kernel(a, b, KERNEL, 1.01))
    for seed in JITTER_SEEDS:
        paths[f"j{seed}"] = _variant(
            src, root / f"j{seed}",
            lambda a, b, s=seed: jitter_kernels(a, b, 0.03, 1000 * s + int(a.name[5])))
    baseline = root / "orig.json.gz"
    res = CliRunner().invoke(app, ["summary", str(orig), "-o", str(baseline)])
    assert res.exit_code == 0, res.output
    paths["baseline"] = baseline
    return paths


def _diff(base: Path, new: Path, *rules: str) -> tuple[int, dict[str, Any]]:
    args = ["diff", str(base), str(new), "--format", "json"]
    for rule in rules:
        args += ["--fail-on", rule]
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


def _verdict(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((v["kind"], v["key"]) for v in doc["violations"])


@pytest.mark.parametrize("base", ["orig", "baseline"])
def test_stretched_kernel_fails_the_gate_and_is_named(runs: dict[str, Path], base: str) -> None:
    code, doc = _diff(runs[base], runs["s20"], "kernel:+10%")
    assert code == 1
    assert doc["verdict"] == "fail"
    assert _verdict(doc) == [("kernel", KERNEL)]
    top = doc["changes"][0]
    assert (top["kind"], top["key"], top["significant"]) == ("kernel", KERNEL, True)
    assert 0.15 < top["rel_change"] < 0.25  # 20% on every instance


@pytest.mark.parametrize("base", ["orig", "baseline"])
def test_stretched_launchers_among_top_changes(runs: dict[str, Path], base: str) -> None:
    """The issue: the annotation and op that launch the kernel at the top as well (the
    launchers found in the original through the kernel's External id, with sql), as
    device time attributed to its launching op / enclosing annotations, and named in the
    headline."""
    res = CliRunner().invoke(app, ["sql", str(runs["orig"]), LAUNCH_SQL, "--format", "json"])
    assert res.exit_code == 0, res.output
    launchers = json.loads(res.stdout)
    ops = {r["op"] for r in launchers}
    annotations = {r["annotation"] for r in launchers}
    assert ops and annotations
    _, doc = _diff(runs[base], runs["s20"], "kernel:+10%")
    top = [(c["kind"], c["key"]) for c in doc["changes"][:10] if c["significant"]]
    assert any(kind == "op_device" and key in ops for kind, key in top), (ops, top)
    assert any(kind == "annotation_device" and key in annotations for kind, key in top), (
        annotations, top)
    # host times did not move: the launching op's HOST time is not a significant change
    host = {(c["kind"], c["key"]): c["significant"] for c in doc["changes"]}
    assert not any(host.get(("op", op)) for op in ops)
    who = doc["launched_by"][KERNEL]
    assert who["op"] in ops and who["annotation"] in annotations
    res = CliRunner().invoke(app, ["diff", str(runs[base]), str(runs["s20"])])
    line = next(x for x in res.stdout.splitlines() if x.startswith("largest significant"))
    assert KERNEL in line and f"launched by {who['op']} in annotation {who['annotation']}" in line


@pytest.mark.parametrize("base", ["orig", "baseline"])
def test_one_percent_passes_a_five_percent_gate(runs: dict[str, Path], base: str) -> None:
    code, doc = _diff(runs[base], runs["s01"], "kernel:+5%")
    assert (code, doc["verdict"], doc["violations"]) == (0, "pass", [])


@pytest.mark.parametrize("seed", JITTER_SEEDS)
def test_jitter_passes(runs: dict[str, Path], seed: int) -> None:
    verdicts = []
    for base in ("orig", "baseline"):
        code, doc = _diff(runs[base], runs[f"j{seed}"], "kernel:+5%")
        verdicts.append((code, _verdict(doc)))
    assert verdicts == [(0, []), (0, [])]


def test_baseline_gives_the_trace_verdict(runs: dict[str, Path]) -> None:
    """Beyond the exit code: the same changes, significance and p-values either way."""
    _, by_trace = _diff(runs["orig"], runs["s20"], "kernel:+10%")
    _, by_baseline = _diff(runs["baseline"], runs["s20"], "kernel:+10%")

    def table(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(c["kind"], c["key"], c["significant"], c["p_adjusted"], c["abs_change_ns"])
                for c in doc["changes"]]

    assert table(by_trace) == table(by_baseline)
    assert by_trace["violations"] == by_baseline["violations"]
