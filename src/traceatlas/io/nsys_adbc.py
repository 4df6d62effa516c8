"""SQLite queries straight into Arrow for the nsys reader, through Apache Arrow's ADBC
SQLite driver (``adbc-driver-sqlite``).

The driver infers each result column's Arrow type from the values of the first batch,
so every column a ``Shape`` selects is CAST to its SQL type, and a nullable text or
real column travels as ``coalesce(value, '')`` plus an ``IS NULL`` flag (a column that
is NULL throughout the first batch would otherwise be typed int64). Independent jobs
run on their own read-only connections, in threads: the driver releases the GIL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import adbc_driver_manager as adm
import adbc_driver_sqlite
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from adbc_driver_manager._reader import AdbcRecordBatchReader
from adbc_driver_sqlite import StatementOptions

from traceatlas.io.nsys_schema import quote

BATCH_ROWS = 1 << 18
"""Rows per Arrow batch the driver returns (and looks at to infer column types)."""
_NULL_FLAG = "__isnull_"
FLAG = "__flag"
"""Column of ``fetch_checked``'s row flag (not part of any ``Shape``)."""
_SQL_TYPES = {pa.int64(): "INTEGER", pa.string(): "TEXT", pa.float64(): "REAL"}
_EMPTY = {pa.string(): "''", pa.float64(): "0.0"}
DICT = pa.dictionary(pa.int32(), pa.string())
"""Type of the text columns with few distinct values (read as dictionaries: cheaper to
move around; the per-process tables decode them)."""


def _plain(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


def text_equals(column: pa.ChunkedArray, text: str) -> pa.ChunkedArray:
    """``pc.equal(column, text)`` of a text column; a dictionary column is compared on
    its dictionary, then expanded by the indices (``pc.equal`` decodes every row)."""
    if not pa.types.is_dictionary(column.type):
        return pc.equal(column, text)
    return pa.chunked_array([pc.take(pc.equal(chunk.dictionary, text), chunk.indices)
                             for chunk in column.chunks], pa.bool_())


def fix_utf8(table: pa.Table) -> tuple[pa.Table, int]:
    """``table`` with text that is not UTF-8 (SQLite does not check what it stores; the
    driver hands it over as is) decoded with U+FFFD, and the number of rows with such a
    value. Valid text (the usual case) costs one validation pass per column."""
    rows = np.zeros(table.num_rows, dtype=bool)
    columns: list[pa.ChunkedArray] = []
    for col in table.columns:
        if not (pa.types.is_string(col.type) or pa.types.is_dictionary(col.type)):
            columns.append(col)
            continue
        chunks, at = [], 0
        for chunk in col.chunks:
            is_dict = pa.types.is_dictionary(chunk.type)
            values = chunk.dictionary if is_dict else chunk
            try:
                values.validate(full=True)
            except pa.ArrowInvalid:
                text, bad = _decode(values.cast(pa.binary()).to_pylist())
                if is_dict:
                    hit = np.isin(chunk.indices.to_numpy(zero_copy_only=False),
                                  np.flatnonzero(bad))
                    chunk = pa.DictionaryArray.from_arrays(chunk.indices, text)
                else:
                    hit, chunk = bad, text
                rows[at:at + len(chunk)] |= hit
            chunks.append(chunk)
            at += len(chunk)
        columns.append(pa.chunked_array(chunks, col.type))
    fixed = int(rows.sum())
    return (pa.Table.from_arrays(columns, schema=table.schema) if fixed else table), fixed


def _decode(raw: list[bytes | None]) -> tuple[pa.Array, np.ndarray[Any, np.dtype[np.bool_]]]:
    """UTF-8 text of ``raw`` (invalid bytes as U+FFFD) and which values were invalid."""
    text: list[str | None] = []
    bad = np.zeros(len(raw), dtype=bool)
    for i, value in enumerate(raw):
        if value is None:
            text.append(None)
            continue
        try:
            text.append(value.decode("utf-8"))
        except UnicodeDecodeError:
            text.append(value.decode("utf-8", errors="replace"))
            bad[i] = True
    return pa.array(text, pa.string()), bad


class ReadError(Exception):
    """A query result the driver could not hand over (e.g. a damaged page)."""


DriverError = adm.Error
"""Base class of the driver's errors (a failed read raises it or ``ReadError``)."""


@dataclass(frozen=True)
class Shape:
    """Column names and Arrow types (int64, float64, string, or ``DICT``) of one kind of
    result; ``nullable`` lists the text or real columns that may hold NULL (integer
    columns always may)."""

    schema: pa.Schema
    nullable: frozenset[str] = frozenset()

    def select(self, exprs: Mapping[str, str], tail: str,
               flags: Mapping[str, str] | None = None) -> tuple[str, dict[str, Any]]:
        """(``SELECT <exprs, cast> <tail>``, the constant columns left out of it: SQLite
        and the driver spend time on every column of every row). ``exprs`` maps every
        column to SQL; ``flags`` adds integer columns (name -> SQL) after them."""
        parts: list[str] = [f"CAST(({expr}) AS INTEGER) AS {quote(name)}"
                            for name, expr in (flags or {}).items()]
        constants: dict[str, Any] = {}
        for fld in self.schema:
            expr, plain = exprs[fld.name], _plain(fld.type)
            sql_type = _SQL_TYPES[plain]
            constant = _constant(expr)
            if constant is not _NOT_CONSTANT:
                constants[fld.name] = constant
            elif fld.name in self.nullable:
                parts.append(f"coalesce(CAST(({expr}) AS {sql_type}), {_EMPTY[plain]}) "
                             f"AS {quote(fld.name)}")
                parts.append(f"(({expr}) IS NULL) AS {quote(_NULL_FLAG + fld.name)}")
            else:
                parts.append(f"CAST(({expr}) AS {sql_type}) AS {quote(fld.name)}")
        return f"SELECT {', '.join(parts or ['1 AS one'])} {tail}", constants

    def decode(self, raw: pa.Table, constants: Mapping[str, Any]) -> pa.Table:
        """The result of ``select`` with the schema's types, NULLs and constants."""
        columns: list[pa.Array | pa.ChunkedArray] = []
        n = raw.num_rows
        # one zero-filled buffer (pages mapped lazily) under every constant column: the
        # validity, values and offsets of NULL columns, the indices of dictionary ones
        zeros = pa.py_buffer(bytes(8 * n + 8)) if constants else None
        for fld in self.schema:
            plain = _plain(fld.type)
            if fld.name in constants:
                assert zeros is not None
                value = pa.scalar(constants[fld.name], plain)
                if not value.is_valid:
                    columns.append(_nulls(n, fld.type, zeros))
                elif fld.type == DICT:
                    columns.append(pa.DictionaryArray.from_arrays(
                        pa.Array.from_buffers(pa.int32(), n, [None, zeros]), pa.array([value])))
                else:
                    columns.append(pa.repeat(value, n))
                continue
            col = raw.column(fld.name)
            if col.type != plain:
                col = col.cast(plain)
            if fld.name in self.nullable:
                flag = raw.column(_NULL_FLAG + fld.name)
                col = pc.if_else(pc.not_equal(flag, 0), pa.scalar(None, plain), col)
            columns.append(pc.dictionary_encode(col) if fld.type == DICT else col)
        return pa.Table.from_arrays(columns, schema=self.schema)

    def empty(self) -> pa.Table:
        """A table of this shape without rows."""
        return self.schema.empty_table()


def _nulls(n: int, type_: pa.DataType, zeros: pa.Buffer) -> pa.Array:
    """``pa.nulls(n, type_)`` (int64, float64, string or ``DICT``) on the shared buffer
    ``zeros`` (at least 8 * ``n`` zero bytes) instead of newly written memory."""
    if type_ == DICT:
        return pa.DictionaryArray.from_arrays(_nulls(n, pa.int32(), zeros),
                                              pa.array([], pa.string()))
    return pa.Array.from_buffers(type_, n, [zeros, zeros, zeros][:type_.num_buffers],
                                 null_count=n)


_NOT_CONSTANT = object()
_STRING = re.compile(r"'(?:[^']|'')*'")
_INTEGER = re.compile(r"-?\d+")


def _constant(expr: str) -> Any:
    """The value of a constant SQL expression (NULL, a string or an integer literal)."""
    expr = expr.strip()
    if expr == "NULL":
        return None
    if _STRING.fullmatch(expr):
        return expr[1:-1].replace("''", "'")
    if _INTEGER.fullmatch(expr):
        return int(expr)
    return _NOT_CONSTANT


class Db:
    """One read-only ADBC connection to an SQLite file (``uri``: a ``file:`` URI).

    Through the driver manager's low-level API: its DB-API module imports polars and
    pandas when they are installed (~0.35 s of start-up here), which the reader does
    not need."""

    def __init__(self, uri: str) -> None:
        self._db = adbc_driver_sqlite.connect(uri)
        try:
            self._con = adm.AdbcConnection(self._db)
        except BaseException:
            self._db.close()
            raise

    def arrow(self, sql: str) -> pa.Table:
        """The result of ``sql`` as an Arrow table (types as the driver infers them)."""
        stmt = adm.AdbcStatement(self._con)
        try:
            stmt.set_options(**{StatementOptions.BATCH_ROWS.value: str(BATCH_ROWS)})
            stmt.set_sql_query(sql)
            handle, _rows = stmt.execute_query()
            try:
                reader = AdbcRecordBatchReader._import_from_c(handle.address)
                return reader.read_all()
            except (OSError, pa.ArrowException) as exc:  # raised while streaming batches
                raise ReadError(str(exc)) from exc
        finally:
            stmt.close()

    def fetch(self, shape: Shape, exprs: Mapping[str, str], tail: str) -> pa.Table:
        """Rows of ``shape`` selected by ``exprs`` (column -> SQL) ``tail``."""
        sql, constants = shape.select(exprs, tail)
        return shape.decode(self.arrow(sql), constants)

    def fetch_checked(self, shape: Shape, exprs: Mapping[str, str], tail: str,
                      flag: str) -> tuple[pa.Table, np.ndarray[Any, np.dtype[np.int64]]]:
        """``fetch`` without the rows where the integer SQL ``flag`` is not 0: (rows
        kept, the flag of every row selected)."""
        sql, constants = shape.select(exprs, tail, {FLAG: flag})
        raw = self.arrow(sql)
        flags = np.asarray(pc.fill_null(raw.column(FLAG), 0).to_numpy(), dtype=np.int64) \
            if raw.num_rows else np.zeros(0, dtype=np.int64)
        kept = raw.drop_columns([FLAG])
        if flags.any():
            kept = kept.filter(pa.array(flags == 0))
        return shape.decode(kept, constants), flags

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """A small result as Python tuples."""
        table = self.arrow(sql)
        return list(zip(*(c.to_pylist() for c in table.columns), strict=True)) \
            if table.num_columns else []

    def execute(self, sql: str, rows: Sequence[Sequence[Any]] | None = None) -> None:
        """Run a statement (once per row of ``rows`` when given, binding ``?``; the rows
        go over as one Arrow batch, columns typed by pyarrow from their values)."""
        if rows is not None and not rows:
            return
        stmt = adm.AdbcStatement(self._con)
        try:
            stmt.set_sql_query(sql)
            if rows is not None:
                stmt.prepare()
                columns = [list(col) for col in zip(*rows, strict=True)]
                stmt.bind(pa.RecordBatch.from_pydict(
                    {str(i): col for i, col in enumerate(columns)}))
            stmt.execute_update()
        finally:
            stmt.close()

    def close(self) -> None:
        """Close the connection."""
        self._con.close()
        self._db.close()


Job = Callable[[Db], dict[str, pa.Table]]
"""Reads one part of the file on its own connection: result name -> table."""


def run_jobs(uri: str, jobs: Mapping[str, Job], threads: int) -> dict[str, dict[str, pa.Table]]:
    """Every job's results by job name; ``threads`` jobs at a time, started in order."""

    def run(job: Job) -> dict[str, pa.Table]:
        db = Db(uri)
        try:
            return job(db)
        finally:
            db.close()

    if threads <= 1 or len(jobs) <= 1:
        return {name: run(job) for name, job in jobs.items()}
    with ThreadPoolExecutor(max_workers=min(threads, len(jobs))) as pool:
        return dict(zip(jobs, pool.map(run, jobs.values()), strict=True))
