"""``Trace``: the tables of one store, as Polars frames, plus SQL. Data and accessors only."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from traceatlas.errors import QueryError
from traceatlas.model.schema import TABLES
from traceatlas.store.layout import table_glob
from traceatlas.store.manifest import read_manifest

if TYPE_CHECKING:  # polars is imported on first use: commands that only ingest skip it
    import polars as pl

    from traceatlas.ops.select import Selection


class Trace:
    """A trace store opened for reading. Tables are lazy: nothing loads until collected."""

    def __init__(self, store: str | Path) -> None:
        self.path = Path(store)
        self.manifest: dict[str, Any] = read_manifest(self.path)
        self.selections: tuple[Selection, ...] = ()

    def __repr__(self) -> str:
        sel = f", selections={len(self.selections)}" if self.selections else ""
        return f"Trace({str(self.path)!r}, ranks={self.ranks}{sel})"

    @property
    def ranks(self) -> list[int]:
        """Ranks in the store (kept by the selections), ascending."""
        ranks = sorted(int(r) for r in self.manifest["ranks"])
        for sel in self.selections:
            if sel.ranks is not None:
                ranks = [r for r in ranks if r in sel.ranks]
        return ranks

    def select(
        self,
        *,
        ranks: Iterable[int] | str | None = None,
        step: int | None = None,
        window: tuple[int | None, int | None] | str | None = None,
        categories: Iterable[str] | str | None = None,
        name: str | None = None,
        min_dur_ns: int | None = None,
    ) -> Trace:
        """A view of this trace keeping the rows that match every condition given.

        ``ranks`` ("0,3-5" or ints); ``step`` (one iteration); ``window``: absolute ns
        ``(start_ns, end_ns)`` or text relative to the trace start ("1.5s:2s", "@<ns>:");
        ``categories`` (canonical names); ``name`` (regex); ``min_dur_ns``. Views compose:
        ``trace.select(ranks="0-3").select(step=2)``. Rules: ``traceatlas.ops.select``.
        """
        from traceatlas.ops import select as sel

        spec = sel.selection_from(
            self, ranks=ranks, step=step, window=window, categories=categories, name=name,
            min_dur_ns=min_dur_ns,
        )
        view = Trace.__new__(Trace)
        view.path, view.manifest = self.path, self.manifest
        view.selections = (*self.selections, spec)
        return view

    @property
    def source_format(self) -> str:
        """The reader that produced the store (e.g. ``kineto``)."""
        return str(self.manifest["source_format"])

    def scan(self, table: str) -> pl.LazyFrame:
        """A lazy frame over every rank of ``table``."""
        import polars as pl

        if table not in TABLES:
            raise KeyError(f"unknown table {table!r}; tables: {', '.join(sorted(TABLES))}")
        frame = pl.scan_parquet(table_glob(self.path, table), hive_partitioning=False)
        for sel in self.selections:
            frame = sel.apply(frame, table)
        return frame

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
        """A DuckDB connection with one view per canonical table (selected rows only)."""
        con = duckdb.connect(":memory:")
        if self.selections:
            for name in TABLES:
                con.register(name, self.scan(name).collect().to_arrow())
            return con
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
