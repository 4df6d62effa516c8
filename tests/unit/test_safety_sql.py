"""Issue 18 section 2: ``sql`` reads the store, not the machine.

The reproductions of the issue (``read_csv('/etc/passwd')``, ``COPY ... TO`` anywhere or
into the store, ``ATTACH``, ``INSTALL``/``LOAD``) are refused with exit code 2 and
DuckDB's reason, nothing is written, and ordinary queries over the store still give the
values built into the trace. The two layers are tested apart: DuckDB's file-system
sandbox (a statement run on the raw connection) and the read-only statement check.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest

import traceatlas
from traceatlas.errors import QueryError
from traceatlas.model import sandbox
from traceatlas.model.schema import TABLES
from traceatlas.testing.builder import TraceBuilder, write_multi_rank

KERNELS = {0: [("gemm", 1_000), ("gemm", 2_000), ("gemm", 3_000)],
           1: [("gemm", 4_000), ("gemm", 5_000), ("relu", 600)]}
"""Device kernels per rank: (name, duration in ns); one launch each on stream 7."""


def _write_trace(directory: Path) -> None:
    builders = []
    for rank, kernels in KERNELS.items():
        b = TraceBuilder(rank=rank, world_size=len(KERNELS))
        t = 10_000
        b.step(1, 0, 100_000)
        for name, dur in kernels:
            b.launch(name, t, 500, t + 1_000, dur)
            t += 10_000
        builders.append(b)
    write_multi_rank(directory, builders)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sqlsafety")
    _write_trace(root / "raw")
    return traceatlas.ingest([str(root / "raw")], root / "st.tastore")


def _snapshot(directory: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``directory``."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "traceatlas"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


# -- ordinary queries still work ----------------------------------------------------------


def test_select_aggregates_match_the_built_trace(store: Path) -> None:
    got = traceatlas.Trace(store).sql(
        "SELECT rank, count(*) AS n, sum(dur_ns) AS total FROM intervals "
        "WHERE category = 'kernel' GROUP BY rank ORDER BY rank").rows()
    want = [(r, len(k), sum(d for _, d in k)) for r, k in sorted(KERNELS.items())]
    assert got == want


def test_join_with_and_describe(store: Path) -> None:
    trace = traceatlas.Trace(store)
    joined = trace.sql(
        "WITH k AS (SELECT * FROM intervals WHERE category = 'kernel') "
        "SELECT t.stream, k.name, count(*) AS n FROM k JOIN tracks t "
        "ON k.rank = t.rank AND k.track_id = t.track_id GROUP BY ALL ORDER BY ALL").rows()
    names = [n for kernels in KERNELS.values() for n, _ in kernels]
    assert joined == [(7, name, names.count(name)) for name in sorted(set(names))]
    described = trace.sql("DESCRIBE intervals")["column_name"].to_list()
    assert described == TABLES["intervals"].column_names
    assert trace.sql("SELECT 42 AS x;").rows() == [(42,)]  # a trailing ';' is one statement


def test_selection_views_work_in_the_sandbox(store: Path) -> None:
    view = traceatlas.Trace(store).select(ranks="1")
    got = view.sql("SELECT count(*) FROM intervals WHERE category = 'kernel'").rows()
    assert got == [(len(KERNELS[1]),)]
    with pytest.raises(QueryError, match="Permission"):
        view.sql("SELECT * FROM read_csv('/etc/passwd')")


# -- nothing outside the store is read ----------------------------------------------------


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd', sep = ':')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM read_json('/etc/passwd')",
])
def test_files_outside_the_store_cannot_be_read(store: Path, sql: str) -> None:
    with pytest.raises(QueryError, match="Permission Error") as err:
        traceatlas.Trace(store).sql(sql)
    assert "root:" not in str(err.value)


def test_parquet_outside_the_store_and_paths_escaping_it(store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "other.parquet"
    duckdb.sql(f"COPY (SELECT 1 AS a) TO '{outside}'")
    (tmp_path / "secret.csv").write_text("a,b\n1,2\n")
    trace = traceatlas.Trace(store)
    part = next((store / "intervals").rglob("*.parquet"))
    for sql in [f"SELECT * FROM read_parquet('{outside}')",
                f"SELECT * FROM '{outside}'",
                f"SELECT * FROM '{tmp_path / 'secret.csv'}'",
                f"SELECT * FROM parquet_metadata('{outside}')",
                f"SELECT * FROM read_text('{store}/../../../etc/passwd')",
                f"SELECT * FROM read_text('{store / 'manifest.json'}')",
                f"SELECT * FROM glob('{store}/*')"]:
        with pytest.raises(QueryError, match="Permission Error"):
            trace.sql(sql)
    # the store's own parts are what the views read: reading one directly is allowed
    assert trace.sql(f"SELECT count(*) > 0 FROM read_parquet('{part}')").rows() == [(True,)]


def test_duckdb_default_temp_directory_is_not_readable(
        store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB allows its temp directory (``./.tmp`` by default); the sandbox moves it."""
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "notes.txt").write_text("private")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(QueryError, match="Permission Error"):
        traceatlas.Trace(store).sql("SELECT * FROM read_text('.tmp/notes.txt')")


# -- nothing is written, nothing is loaded, nothing is reconfigured -------------------------


@pytest.mark.parametrize("template", [
    "COPY (SELECT 42) TO '{out}'",
    "COPY intervals TO '{out}' (FORMAT parquet)",
    "COPY (SELECT 42) TO '{manifest}'",
    "COPY (SELECT 42 AS rank) TO '{part}' (FORMAT parquet)",
    "EXPLAIN ANALYZE COPY (SELECT 42) TO '{part}'",
    "EXPORT DATABASE '{outdir}'",
    "ATTACH '{outdir}/x.duckdb' AS x",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET enable_external_access",
    "PRAGMA enable_profiling",
    "CALL pragma_version()",
    "CREATE TABLE t AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "DROP VIEW intervals",
    "INSERT INTO intervals SELECT * FROM intervals",
    "SELECT 1; COPY (SELECT 42) TO '{out}'",
])
def test_statements_that_write_or_reconfigure_are_refused(
        store: Path, tmp_path: Path, template: str) -> None:
    part = next((store / "intervals").rglob("*.parquet"))
    sql = template.format(out=tmp_path / "x.csv", manifest=store / "manifest.json",
                          part=part, outdir=tmp_path / "exported")
    before = _snapshot(store)
    with pytest.raises(QueryError, match=r"refused|one statement"):
        traceatlas.Trace(store).sql(sql)
    assert _snapshot(store) == before
    assert list(tmp_path.iterdir()) == []


def test_duckdb_layer_alone_refuses_files_and_settings(store: Path, tmp_path: Path) -> None:
    """Without the statement check, DuckDB's own sandbox still refuses writes outside the
    store, attaching, loading and unlocking (defence in depth)."""
    con = sandbox.connect(store)
    try:
        for sql in [f"COPY (SELECT 42) TO '{tmp_path / 'x.csv'}'",
                    f"ATTACH '{tmp_path / 'x.duckdb'}'", "LOAD httpfs", "INSTALL httpfs",
                    "SET enable_external_access = true", "SET allowed_paths = ['/']",
                    "SET lock_configuration = false"]:
            with pytest.raises(duckdb.Error):
                con.execute(sql)
        assert con.sql("SELECT current_setting('enable_external_access')").fetchall() == [
            (False,)]
    finally:
        con.close()
    assert list(tmp_path.iterdir()) == []


def test_cli_reproductions_exit_2_with_duckdb_reason(store: Path, tmp_path: Path) -> None:
    before = _snapshot(store)
    res = _cli("sql", str(store), "select * from read_csv('/etc/passwd')", cwd=tmp_path)
    assert res.returncode == 2
    assert "root:" not in res.stdout + res.stderr and "Traceback" not in res.stderr
    assert "Permission Error" in res.stderr and "/etc/passwd" in res.stderr
    res = _cli("sql", str(store), "COPY (select 42) TO 'x.csv'", cwd=tmp_path)
    assert res.returncode == 2 and "COPY" in res.stderr and res.stdout == ""
    res = _cli("sql", str(store), f"COPY (select 42) TO '{store / 'manifest.json'}'",
               cwd=tmp_path)
    assert res.returncode == 2
    assert not (tmp_path / "x.csv").exists()
    assert _snapshot(store) == before
    assert traceatlas.Trace(store).ranks == sorted(KERNELS)  # the manifest still reads


# -- the opt-in: the user's own files ------------------------------------------------------


def test_allow_files_joins_a_csv_but_stays_read_only(store: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text("rank,node\n0,alpha\n1,beta\n")
    sql = (f"SELECT l.node, count(*) AS n FROM intervals i JOIN read_csv('{labels}') l "
           "ON i.rank = l.rank WHERE i.category = 'kernel' GROUP BY 1 ORDER BY 1")
    got = traceatlas.Trace(store).sql(sql, allow_files=True).rows()
    assert got == [("alpha", len(KERNELS[0])), ("beta", len(KERNELS[1]))]
    with pytest.raises(QueryError, match="Permission Error"):
        traceatlas.Trace(store).sql(sql)  # not without the opt-in
    res = _cli("sql", str(store), sql, "--allow-files", "--format", "csv", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["node,n", f"alpha,{len(KERNELS[0])}",
                                  f"beta,{len(KERNELS[1])}"]
    res = _cli("sql", str(store), "COPY (select 42) TO 'x.csv'", "--allow-files",
               cwd=tmp_path)
    assert res.returncode == 2 and not (tmp_path / "x.csv").exists()


# -- limits, empty tables, temporary files --------------------------------------------------


def test_statement_timeout_and_memory_limit(store: Path) -> None:
    trace = traceatlas.Trace(store)
    with pytest.raises(QueryError, match="execution time"):
        trace.sql("SELECT count(*) FROM range(1000000000000) a", timeout_s=0.2)
    with pytest.raises(QueryError, match=r"(?i)out of memory"):
        trace.sql("SELECT list(range) FROM range(50000000)", memory_limit="40MB")
    with pytest.raises(QueryError, match="timeout"):
        trace.sql("SELECT 1", timeout_s=0)


def test_a_table_without_parts_is_empty_with_its_columns(store: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()  # no table directories at all: every view is an empty canonical table
    con = sandbox.connect(bare)
    try:
        for name, table in TABLES.items():
            got = sandbox.query(con, f"SELECT * FROM {name}")
            assert got.num_rows == 0 and got.column_names == table.column_names
    finally:
        con.close()


def test_spilled_temp_files_are_private_and_removed(
        store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    con = sandbox.connect(store, memory_limit="64MB")
    try:
        rows = sandbox.query(con, "SELECT i, md5(i::VARCHAR) AS h FROM range(2000000) t(i) "
                                  "ORDER BY h").num_rows
        spilled = [p.name for p in tmp_path.iterdir()]
    finally:
        con.close()
    assert rows == 2_000_000
    assert all(name.startswith(f"traceatlas-sql-{os.getpid()}-") for name in spilled)
    assert list(tmp_path.iterdir()) == []
