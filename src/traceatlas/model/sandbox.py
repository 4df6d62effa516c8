"""User SQL over a store, sandboxed by DuckDB's own settings and read-only.

``connect`` opens an in-memory DuckDB connection with one view per canonical table, then
closes it around them (DuckDB's "Securing DuckDB" settings, in this order):

- ``allowed_paths`` = the store's part files (the only files the views read);
- ``enable_external_access = false``: any other file, directory, URL, ``ATTACH``,
  ``INSTALL``/``LOAD``, ``COPY``, ``read_csv('/etc/passwd')``, ``glob('/*')``,
  ``sniff_csv`` is refused by DuckDB's file system layer;
- spilling goes to a private temporary directory (DuckDB removes it on close), not to
  ``./.tmp``, which DuckDB would otherwise allow the query to read;
- optional ``memory_limit`` and statement timeout (``max_execution_time``);
- ``lock_configuration = true``: no ``SET`` can undo any of it.

DuckDB's allow-list permits writes as well as reads, so ``query`` also runs only a read:
DuckDB's parser reads the text, which must be one ``SELECT`` statement (``WITH``,
``VALUES``, ``FROM``-first, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE`` included); ``COPY``,
``EXPLAIN`` (``EXPLAIN ANALYZE`` runs its statement), ``PIVOT`` as a statement, ``SET``,
``PRAGMA``, ``CALL``, DDL and DML are refused.
``allow_files=True`` (``traceatlas sql --allow-files``) leaves external access on so a
query can join the user's own files; statements stay read-only.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

import duckdb
import pyarrow as pa

from traceatlas.errors import QueryError
from traceatlas.model.schema import TABLES, empty_table
from traceatlas.model.sqltext import file_list
from traceatlas.store.layout import table_parts

READ_ONLY_TYPES = frozenset({duckdb.StatementType.SELECT})
"""Statement types ``query`` runs; every other type (COPY, ATTACH, SET, ...) is refused."""

_HINT_FILES = ("sql reads only the store's tables; --allow-files (Trace.sql(allow_files=True)) "
               "lets a query read other files")


def connect(
    store: str | os.PathLike[str],
    *,
    tables: Mapping[str, pa.Table] | None = None,
    allow_files: bool = False,
    memory_limit: str | None = None,
    timeout_s: float | None = None,
) -> duckdb.DuckDBPyConnection:
    """A sandboxed connection with one view per canonical table of ``store``.

    ``tables``: Arrow tables to serve instead of the store's part files (selected rows of
    a ``Trace.select`` view); tables not given are read from the store. ``memory_limit``:
    DuckDB syntax (``"2GB"``); ``timeout_s``: seconds per statement. Run user SQL with
    ``query``: the connection alone does not refuse write statements on the part files.
    """
    tmp = Path(tempfile.gettempdir()) / f"traceatlas-sql-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    con = duckdb.connect(":memory:", config={
        "temp_directory": str(tmp),  # created by DuckDB only if it spills; removed on close
        "autoinstall_known_extensions": False,
        "allow_community_extensions": False,
        "python_enable_replacements": False,  # no Python variable is a table
    })
    try:
        allowed = _create_views(con, Path(store), tables or {})
        settings: list[tuple[str, object]] = [("allowed_paths", allowed)]
        if not allow_files:
            settings.append(("enable_external_access", False))
        if memory_limit is not None:
            settings.append(("memory_limit", memory_limit))
        if timeout_s is not None:
            if not timeout_s > 0:
                raise QueryError(f"statement timeout must be > 0 s, got {timeout_s}")
            settings.append(("max_execution_time", max(1, round(timeout_s * 1000))))
        settings.append(("lock_configuration", True))
        for name, value in settings:
            con.execute(f"SET {name} = ?", [value])
    except duckdb.Error as exc:
        con.close()
        raise QueryError("SQL sandbox: " + _one_line(exc)) from exc
    except BaseException:
        con.close()
        raise
    return con


def _create_views(con: duckdb.DuckDBPyConnection, store: Path,
                  tables: Mapping[str, pa.Table]) -> list[str]:
    """One view per canonical table; returns the part files the views read."""
    allowed: list[str] = []
    for name in TABLES:
        if name in tables:
            con.register(name, tables[name])
            continue
        parts = [str(p.absolute()) for p in table_parts(store, name)]
        if not parts:  # every table has a part per rank; an empty list is still a table
            con.register(name, empty_table(name))
            continue
        allowed += parts
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM "
                    f"read_parquet({file_list(parts)}, hive_partitioning = false)")
    return allowed


def read_statement(con: duckdb.DuckDBPyConnection, sql: str) -> duckdb.Statement:
    """The one statement of ``sql``, parsed by DuckDB; ``QueryError`` unless it is a read
    (``SELECT``) and the only statement."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError("SQL failed: " + _one_line(exc)) from exc
    if len(statements) != 1:
        raise QueryError("SQL failed: " + ("the query is empty" if not statements else
                         f"one statement at a time ({len(statements)} given)"))
    statement = statements[0]
    if statement.type not in READ_ONLY_TYPES:
        kind = statement.type.name.replace("_", " ")
        raise QueryError(f"SQL refused: {kind} statements are not allowed; sql runs "
                         "read-only queries (SELECT, WITH, DESCRIBE, SUMMARIZE) over the "
                         "store's tables")
    return statement


def check(sql: str) -> None:
    """``read_statement`` on a bare connection: refuse ``sql`` before any work is done."""
    con = duckdb.connect(":memory:")
    try:
        read_statement(con, sql)
    finally:
        con.close()


def query(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """Run ``sql`` (one read statement) on a ``connect`` connection; the result as an
    Arrow table. Refusals and failures raise ``QueryError`` with DuckDB's reason."""
    statement = read_statement(con, sql)
    try:
        return con.sql(statement).to_arrow_table()  # the parsed statement, not the text
    except duckdb.PermissionException as exc:
        raise QueryError(f"SQL refused: {_one_line(exc)} ({_HINT_FILES})") from exc
    except duckdb.Error as exc:
        raise QueryError("SQL failed: " + _one_line(exc)) from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
