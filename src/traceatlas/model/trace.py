"""``Trace``: the tables of one store, as Polars frames, plus SQL. Data and accessors only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from traceatlas.errors import QueryError
from traceatlas.model.schema import TABLES
from traceatlas.store.layout import table_glob
from traceatlas.store.manifest import read_manifest

if TYPE_CHECKING:  # polars is imported on first use: commands that only ingest skip it
    import polars as pl


class Trace:
    """A trace store opened for reading. Tables are lazy: nothing loads until collected."""

    def __init__(self, store: str | Path) -> None:
        self.path = Path(store)
        self.manifest: dict[str, Any] = read_manifest(self.path)

    def __repr__(self) -> str:
        return f"Trace({str(self.path)!r}, ranks={self.ranks})"

    @property
    def ranks(self) -> list[int]:
        """Ranks in the store, ascending."""
        return sorted(int(r) for r in self.manifest["ranks"])

    @property
    def source_format(self) -> str:
        """The reader that produced the store (e.g. ``kineto``)."""
        return str(self.manifest["source_format"])

    def scan(self, table: str) -> pl.LazyFrame:
        """A lazy frame over every rank of ``table``."""
        import polars as pl

        if table not in TABLES:
            raise KeyError(f"unknown table {table!r}; tables: {', '.join(sorted(TABLES))}")
        return pl.scan_parquet(table_glob(self.path, table), hive_partitioning=False)

    @property
    def tracks(self) -> pl.LazyFrame:
        """Tracks table (lazy)."""
        return self.scan("tracks")

    @property
    def intervals(self) -> pl.LazyFrame:
        """Intervals table (lazy)."""
        return self.scan("intervals")

    @property
    def instants(self) -> pl.LazyFrame:
        """Instants table (lazy)."""
        return self.scan("instants")

    @property
    def counters(self) -> pl.LazyFrame:
        """Counters table (lazy)."""
        return self.scan("counters")

    @property
    def messages(self) -> pl.LazyFrame:
        """Messages table (lazy)."""
        return self.scan("messages")

    @property
    def flows(self) -> pl.LazyFrame:
        """Flows table (lazy)."""
        return self.scan("flows")

    @property
    def metadata(self) -> pl.LazyFrame:
        """Metadata table (lazy)."""
        return self.scan("metadata")

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with one view per canonical table."""
        con = duckdb.connect(":memory:")
        for name in TABLES:
            glob = table_glob(self.path, name).replace("'", "''")
            con.execute(
                f"CREATE VIEW {name} AS SELECT * FROM "
                f"read_parquet('{glob}', hive_partitioning = false)"
            )
        return con

    def sql(self, query: str) -> pl.DataFrame:
        """Run DuckDB SQL over the store's tables; the result as a Polars frame."""
        import polars as pl

        con = self.connect()
        try:
            return pl.from_arrow(con.sql(query).to_arrow_table())  # type: ignore[return-value]
        except duckdb.Error as exc:
            raise QueryError("SQL failed: " + " ".join(str(exc).split())) from exc
        finally:
            con.close()
