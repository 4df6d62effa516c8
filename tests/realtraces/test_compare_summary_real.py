"""Baseline summaries of real traces: small next to the trace, and the same steps as a
``traceatlas sql`` count of the ProfilerStep intervals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.compare.summary import read_summary

STEP_SQL = ("SELECT rank, count(DISTINCT step) AS n FROM intervals "
            "WHERE category = 'step' AND name LIKE 'ProfilerStep#%' GROUP BY rank ORDER BY rank")


def _summary(path: Path, out: Path) -> dict[str, object]:
    res = CliRunner().invoke(app, ["summary", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    return read_summary(out)


def _trace_bytes(path: Path) -> int:
    files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
    return sum(os.path.getsize(p) for p in files)


def _steps_per_rank(path: Path) -> dict[int, int]:
    res = CliRunner().invoke(app, ["sql", str(path), STEP_SQL, "--format", "json"])
    assert res.exit_code == 0, res.output
    return {int(row["rank"]): int(row["n"]) for row in json.loads(res.stdout)}


@pytest.mark.parametrize("rel", ["h100-planted/healthy", "hta/trace_compare/base",
                                 "hta/trace_compare/test"])
def test_step_counts_match_sql(traces_dir: Path, tmp_path: Path, rel: str) -> None:
    path = traces_dir / rel
    s = _summary(path, tmp_path / "baseline.json.gz")
    assert s["iterations"]["source"] == "steps"  # type: ignore[index]
    step = s["entities"]["step"][0]  # type: ignore[index]
    ranks = s["ranks"]
    got = {int(r): sum(1 for v in row if v >= 0) for r, row in zip(ranks, step["ns"],  # type: ignore[call-overload]
                                                                   strict=True)}
    assert got == _steps_per_rank(path)


@pytest.mark.parametrize("rel", ["h100-planted/healthy", "nsys-ai/mfu_2gpu_before.sqlite",
                                 "nsys-ai/mfu_2gpu_after.sqlite"])
def test_compressed_summary_under_one_percent(traces_dir: Path, tmp_path: Path,
                                              rel: str) -> None:
    path = traces_dir / rel
    out = tmp_path / "baseline.json.gz"
    _summary(path, out)
    assert os.path.getsize(out) < 0.01 * _trace_bytes(path)


def test_plain_json_under_one_percent_of_the_json_text(traces_dir: Path,
                                                      tmp_path: Path) -> None:
    """Plain JSON against the uncompressed Kineto text (the .json.gz files hold ~13x
    more JSON than their size)."""
    import gzip

    path = traces_dir / "h100-planted/healthy"
    out = tmp_path / "baseline.json"
    _summary(path, out)
    text = sum(len(gzip.decompress(p.read_bytes())) for p in path.glob("*.json.gz"))
    assert os.path.getsize(out) < 0.01 * text


def test_tiny_excerpt_summary_is_small(traces_dir: Path, tmp_path: Path) -> None:
    """The HTA excerpts are 1.6 kB of gzip: 1% (16 bytes) cannot hold a summary; the
    summary stays a small fixed size instead."""
    out = tmp_path / "baseline.json.gz"
    _summary(traces_dir / "hta/trace_compare/base", out)
    assert os.path.getsize(out) < 2_000
