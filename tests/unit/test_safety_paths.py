"""Issue 18 section 8: paths are paths, commands are shell-safe.

A store or cache path holding ``[``, ``*``, ``?`` or ``{`` is opened as written, never as
a glob pattern: each test puts a *decoy* beside it, a different trace at the name the
pattern would match (``exp[lr=0.1]`` matches ``expl``), so a path that is globbed reads
the wrong numbers instead of passing by luck. Suggested ``traceatlas ...`` commands are
``shlex.join``-quoted: ``shlex.split`` gives the argv back, and bash runs them as pasted.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.advisor import Context, advise
from traceatlas.model.schema import TABLES, empty_table
from traceatlas.model.trace import scan_parts
from traceatlas.store.layout import table_parts
from traceatlas.testing.builder import TraceBuilder

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_trace"
VENV_BIN = Path(sys.executable).parent


def _raw(directory: Path, kernels: int) -> Path:
    """A one-rank Kineto trace in ``directory`` with ``kernels`` kernel launches."""
    directory.mkdir(parents=True, exist_ok=True)
    b = TraceBuilder(rank=0)
    for i in range(kernels):
        b.launch(f"k{i}", 1_000 + i * 10_000, 500, 2_000 + i * 10_000, 1_000)
    return b.write(directory / "rank-0.json")


def _kernels(trace: traceatlas.Trace) -> tuple[int, int]:
    """(kernels via Polars, kernels via SQL)."""
    import polars as pl

    lazy = trace.intervals.filter(pl.col("category") == "kernel").collect().height
    sql = trace.sql("SELECT count(*) FROM intervals WHERE category = 'kernel'").item()
    return lazy, int(sql)


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "traceatlas"), *args], cwd=cwd,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=300, check=False)


# -- stores named like glob patterns ------------------------------------------------------


@pytest.mark.parametrize(("name", "decoy"), [
    ("exp[lr=0.1].tastore", "expl.tastore"),
    ("a*b.tastore", "aXXb.tastore"),
    ("q?.tastore", "qZ.tastore"),
    ("c{1,2}.tastore", "c1.tastore"),
    ("it's [x].tastore", "it's x.tastore"),
])
def test_store_named_like_a_pattern(tmp_path: Path, name: str, decoy: str) -> None:
    store = traceatlas.ingest([str(_raw(tmp_path / "raw", 3))], tmp_path / name)
    traceatlas.ingest([str(_raw(tmp_path / "raw_decoy", 7))], tmp_path / decoy)
    trace = traceatlas.Trace(store)
    assert _kernels(trace) == (3, 3)
    assert _kernels(trace.select(ranks="0")) == (3, 3)
    filtered = tmp_path / f"f-{name}"
    from traceatlas.ops.filter_store import filter_store

    filter_store(trace, trace.select(name="^k[01]$").selections[0], filtered)
    assert _kernels(traceatlas.Trace(filtered)) == (2, 2)


def test_cli_on_a_pattern_named_store(tmp_path: Path) -> None:
    """ingest, info, sql, analyze, filter, export and report on ``exp[lr=0.1].tastore``."""
    name = "exp[lr=0.1].tastore"
    _raw(tmp_path / "raw", 3)
    traceatlas.ingest([str(_raw(tmp_path / "decoy", 7))], tmp_path / "expl.tastore")
    assert _cli("ingest", "raw", "-o", name, cwd=tmp_path).returncode == 0
    info = _cli("info", name, "--format", "json", cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["by_category"]["kernel"] == 3
    sql = _cli("sql", name, "SELECT count(*) AS n FROM intervals WHERE category='kernel'",
               "--format", "csv", cwd=tmp_path)
    assert sql.stdout.split() == ["n", "3"], sql.stderr
    kernels = _cli("analyze", "kernels", name, "--format", "json", cwd=tmp_path)
    assert kernels.returncode == 0, kernels.stderr
    assert sorted(row["name"] for row in json.loads(kernels.stdout)) == ["k0", "k1", "k2"]
    res = _cli("filter", name, "--name", "^k0$", "-o", "f[1].tastore", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert _kernels(traceatlas.Trace(tmp_path / "f[1].tastore")) == (1, 1)
    res = _cli("export", name, "--to", "chrome", "-o", "out[1].json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    events = json.loads((tmp_path / "out[1].json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "kernel") == 3
    report = _cli("report", name, "--format", "json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr


def test_cache_dir_and_tmpdir_holding_pattern_characters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Raw traces opened through a cache in ``c[1]*?{x}``; the Kineto reader's staging file
    in a ``$TMPDIR`` holding ``[1]`` (with a ``t1`` decoy directory beside it)."""
    cache = tmp_path / "c[1]*?{x}"
    tmp = tmp_path / "t[1]"
    for d in (cache, tmp, tmp_path / "t1", tmp_path / "c1"):
        d.mkdir()
    raw = _raw(tmp_path / "raw [1]", 4).parent
    env = {"TRACEATLAS_CACHE_DIR": str(cache), "TMPDIR": str(tmp)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(tempfile, "tempdir", None)  # recomputed from $TMPDIR
    trace = traceatlas.open(str(raw))
    assert trace.path.parent == cache
    assert _kernels(trace) == (4, 4)
    for args in (["info", str(raw), "--format", "json"],
                 ["sql", str(raw), "SELECT count(*) FROM intervals"],
                 ["analyze", "kernels", str(raw)], ["report", str(raw)]):
        res = _cli(*args, cwd=tmp_path, env=env)
        assert res.returncode == 0, (args, res.stderr)
    assert list((tmp_path / "t1").iterdir()) == []


def test_nvtx_csv_in_a_pattern_named_directory(tmp_path: Path) -> None:
    header = "Start (ns),End (ns),Duration (ns),Name,PID,TID\n"
    (tmp_path / "n[1]").mkdir()
    (tmp_path / "n1").mkdir()
    (tmp_path / "n[1]" / "nvtx.csv").write_text(header + "100,200,100,a,1,1\n"
                                                "120,180,60,b,1,1\n")
    (tmp_path / "n1" / "nvtx.csv").write_text(header + "100,200,100,decoy,1,1\n")
    store = traceatlas.ingest([str(tmp_path / "n[1]" / "nvtx.csv")], tmp_path / "st")
    names = traceatlas.Trace(store).sql("SELECT name FROM intervals ORDER BY 1")
    assert names["name"].to_list() == ["a", "b"]


# -- part lists ----------------------------------------------------------------------------


def test_table_parts_lists_ranks_numerically(tmp_path: Path) -> None:
    table = empty_table("metadata")
    for rank in (10, 2, 0):
        part = tmp_path / "metadata" / f"rank={rank}" / "part-0.parquet"
        part.parent.mkdir(parents=True)
        pq.write_table(table, part)
    (tmp_path / "metadata" / "rank=2" / ".part-1.parquet").write_bytes(b"hidden")
    (tmp_path / "metadata" / "notarank").mkdir()
    (tmp_path / "metadata" / "rank=x").mkdir()
    got = [p.relative_to(tmp_path).as_posix() for p in table_parts(tmp_path, "metadata")]
    assert got == ["metadata/rank=0/part-0.parquet", "metadata/rank=2/part-0.parquet",
                   "metadata/rank=10/part-0.parquet"]
    assert table_parts(tmp_path, "flows") == []


def test_a_table_without_parts_scans_as_an_empty_canonical_frame(tmp_path: Path) -> None:
    for name, spec in TABLES.items():
        frame = scan_parts(tmp_path, name).collect()
        assert frame.height == 0 and frame.columns == spec.column_names


# -- suggested commands ---------------------------------------------------------------------

HOSTILE = st.text(
    alphabet=st.one_of(st.sampled_from(list(" ()';$`\"[]*?{}\\!&|<>#~-\t\n")),
                       st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(path=HOSTILE, ranks=st.integers(0, 10**6))
def test_suggested_commands_split_back_into_their_argv(path: str, ranks: int) -> None:
    ctx = Context(cast(Any, None), path=path)
    command = ctx.command("kernels", "--ranks", str(ranks), "-p", "by=stream")
    argv = shlex.split(command)
    shown = "./" + path if path.startswith("-") else path
    assert argv == ["traceatlas", "analyze", "kernels", shown, "--ranks", str(ranks), "-p",
                    "by=stream"]


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return traceatlas.ingest([str(SAMPLE)], tmp_path_factory.mktemp("sample") / "st")


@pytest.mark.parametrize("name", ["run 1 (a)", "a;touch PWNED;$(touch PWNED2)`touch PWNED3`"])
def test_pasted_findings_commands_run_in_bash(
        sample_store: Path, tmp_path: Path, name: str) -> None:
    """Every finding's command names the store as one argument; the first one, pasted
    into bash, runs the analysis and runs nothing else."""
    import shutil

    store = tmp_path / name
    shutil.copytree(sample_store, store)
    findings = advise(traceatlas.Trace(store), path=name)
    assert findings
    for f in findings:
        assert shlex.split(f.command)[3] == name
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    res = subprocess.run(["bash", "-c", findings[0].command], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no PWNED* file
