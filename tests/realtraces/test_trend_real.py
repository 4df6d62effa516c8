"""``traceatlas trend`` and ``report --baseline`` on a real multi-step trace
(h100-planted/healthy, 2 ranks x 5 ProfilerSteps): runs 1-3 are the original and two
copies with 3 % jitter on every kernel (no systematic change), run 4 the original with
every instance of one kernel stretched by 20 % (``traceatlas.testing.stretch``). The
change points must be at run 4 only and name that kernel; its medians must equal the
medians of its per-step time computed with SQL on each run's store.
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.testing.stretch import jitter_kernels, stretch_kernel

pytestmark = pytest.mark.realtrace

REL = "h100-planted/healthy"
KERNEL = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"
PER_STEP_SQL = f"""
SELECT rank, step, sum(end_ns - start_ns) AS ns FROM intervals
WHERE category = 'kernel' AND name = '{KERNEL}' AND step >= 0 GROUP BY ALL
"""
"""Per rank and step, the kernel's time: a sum, equal to its union because instances of
one kernel on one stream never overlap (checked below)."""


def _variant(src: Path, out: Path, make: Callable[[Path, Path], object]) -> Path:
    out.mkdir()
    for f in sorted(src.glob("rank-*.json.gz")):
        make(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def series(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trend_real")
    src = traces_dir / REL
    runs = {
        "run-1": _variant(src, root / "r1", shutil.copyfile),
        "run-2": _variant(src, root / "r2",
                          lambda a, b: jitter_kernels(a, b, 0.03, 11 + int(a.name[5]))),
        "run-3": _variant(src, root / "r3",
                          lambda a, b: jitter_kernels(a, b, 0.03, 23 + int(a.name[5]))),
        "run-4": _variant(src, root / "r4", lambda a, b: stretch_kernel(a, b, KERNEL, 1.20)),
    }
    baselines = root / "baselines"
    baselines.mkdir()
    for name, path in runs.items():
        res = CliRunner().invoke(app, ["summary", str(path), "-o",
                                       str(baselines / f"{name}.json.gz")])
        assert res.exit_code == 0, res.output
    return {**runs, "baselines": baselines}


def test_change_point_at_run_4_on_the_stretched_kernel(series: dict[str, Path],
                                                       tmp_path: Path) -> None:
    page = tmp_path / "trend.html"
    res = CliRunner().invoke(app, ["trend", str(series["baselines"]), "--top", "10",
                                   "-f", "json", "-o", str(page)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["label"] for r in doc["runs"]] == ["run-1", "run-2", "run-3", "run-4"]
    points = doc["change_points"]
    assert points and {p["run"] for p in points} == {3}, points
    assert ("kernel", KERNEL) in {(p["kind"], p["key"]) for p in points}
    kernel = next(f for f in doc["figures"] if f["key"] == KERNEL)
    assert kernel["points"][3]["change"] == pytest.approx(0.20, abs=0.03)
    for i, name in enumerate(("run-1", "run-2", "run-3", "run-4")):
        trace = traceatlas.open(str(series[name]))
        per_step = trace.sql(PER_STEP_SQL)
        assert kernel["points"][i]["value"] == pytest.approx(
            statistics.median(per_step["ns"].to_list()), abs=0.5)
        assert kernel["points"][i]["n"] == per_step.height
    assert page.is_file() and page.read_text().count('class="change-point"') >= 2


def test_instances_do_not_overlap(series: dict[str, Path]) -> None:
    """The sum above equals the union: no two instances of the kernel overlap."""
    trace = traceatlas.open(str(series["run-4"]))
    overlaps = trace.sql(f"""
        SELECT count(*) AS n FROM (
          SELECT rank, start_ns, lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns) AS pe
          FROM intervals WHERE category = 'kernel' AND name = '{KERNEL}')
        WHERE start_ns < pe""")
    assert overlaps["n"][0] == 0


def test_report_baseline_puts_the_kernel_first(series: dict[str, Path], tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(series["run-4"]), "--baseline",
                                   str(series["baselines"] / "run-1.json.gz"), "-f", "json"])
    assert res.exit_code == 0, res.output
    diff = json.loads(res.stdout)["baseline"]["diff"]
    slower = [c for c in diff["changes"] if c["significant"] and c["abs_change_ns"] > 0]
    assert slower[0]["kind"] == "kernel" and slower[0]["key"] == KERNEL
