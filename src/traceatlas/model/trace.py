"""``Trace``: the tables of one store, as Polars frames, plus SQL. Data and accessors only."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceatlas.model.vocab import TABLE_NAMES
from traceatlas.store.layout import store_location, table_parts
from traceatlas.store.manifest import read_manifest
from traceatlas.store.parts import verify_store
from traceatlas.store.remote import is_mirror, mirror_at

if TYPE_CHECKING:  # polars and DuckDB are imported on first use: commands that only
    # ingest, or only count rows (``info``), skip them
    import duckdb
    import polars as pl

    from traceatlas.ops.select import Selection


def scan_parts(store: Path, table: str, ranks: frozenset[int] | None = None
               ) -> pl.LazyFrame:
    """A lazy frame over the part files of ``table`` in ``store`` (an empty frame with
    the canonical schema when there is none). The parts are listed, never globbed, so a
    store path may hold ``[``, ``*`` or ``?``. ``ranks``: only those ranks' parts (a part
    holds the rows of its own rank)."""
    import polars as pl

    parts = table_parts(store, table, ranks)  # a remote store's mirror: fetched first
    if not parts:
        from traceatlas.model.schema import empty_table  # Arrow: only when there is no part

        return pl.from_arrow(empty_table(table)).lazy()  # type: ignore[union-attr]
    return pl.scan_parquet(parts, hive_partitioning=False, glob=False)


class Trace:
    """A trace store opened for reading. Tables are lazy: nothing loads until collected."""

    def __init__(self, store: str | Path) -> None:
        self.path = store_location(store)  # a path, a file:// URL or a remote store's mirror
        self.manifest: dict[str, Any] = read_manifest(self.path)
        if not is_mirror(self.path):  # a mirror: the remote store was checked on opening,
            # each part is checked against its hash when fetched (store/remote.py)
            verify_store(self.path, self.manifest)  # StoreDamagedError: part, rebuild command
        self.selections: tuple[Selection, ...] = ()

    @property
    def location(self) -> str:
        """Where the store is, as a worker opens it: the remote store's URL for a mirror,
        else the local path."""
        mirror = mirror_at(self.path)
        return mirror.url if mirror is not None else str(self.path)

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
        clip: bool = False,
    ) -> Trace:
        """A view of this trace keeping the rows that match every condition given.

        ``ranks`` ("0,3-5" or ints); ``step`` (one iteration); ``window``: absolute ns
        ``(start_ns, end_ns)`` or text relative to the trace start ("1.5s:2s", "@<ns>:");
        ``categories`` (canonical names); ``name`` (regex); ``min_dur_ns``; ``clip``: cut
        intervals to the window (``dur_ns`` = time inside it; what analyses of a window
        use), otherwise they are kept whole. Views compose:
        ``trace.select(ranks="0-3").select(step=2)``. Rules: ``traceatlas.ops.select``.
        """
        from traceatlas.ops import select as sel

        spec = sel.selection_from(
            self, ranks=ranks, step=step, window=window, categories=categories, name=name,
            min_dur_ns=min_dur_ns, clip=clip,
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
        if table not in TABLE_NAMES:
            raise KeyError(f"unknown table {table!r}; tables: {', '.join(sorted(TABLE_NAMES))}")
        kept = None  # the parts of the selected ranks only (messages: either side's part)
        if table != "messages":
            for sel in self.selections:
                if sel.ranks is not None:
                    kept = frozenset(sel.ranks) if kept is None else kept & set(sel.ranks)
        frame = scan_parts(self.path, table, kept)
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

    def connect(self, *, allow_files: bool = False, memory_limit: str | None = None,
                timeout_s: float | None = None) -> duckdb.DuckDBPyConnection:
        """A sandboxed DuckDB connection with one view per canonical table (selected rows
        only): it reads the store's parts and no other file unless ``allow_files``.
        ``memory_limit`` (``"2GB"``), ``timeout_s`` (seconds per statement): see
        ``traceatlas.model.sandbox``. User SQL goes through ``sql`` (read-only)."""
        from traceatlas.model import sandbox

        tables = ({name: self.scan(name).collect().to_arrow() for name in TABLE_NAMES}
                  if self.selections else None)
        return sandbox.connect(self.path, tables=tables, allow_files=allow_files,
                               memory_limit=memory_limit, timeout_s=timeout_s)

    def sql(self, query: str, *, allow_files: bool = False, memory_limit: str | None = None,
            timeout_s: float | None = None) -> pl.DataFrame:
        """Run one read-only DuckDB SQL statement over the store's tables; the result as
        a Polars frame. Sandboxed: no file outside the store is read (unless
        ``allow_files``) and none is written; refusals raise ``QueryError``."""
        import polars as pl

        from traceatlas.model import sandbox

        con = self.connect(allow_files=allow_files, memory_limit=memory_limit,
                           timeout_s=timeout_s)
        try:
            return pl.from_arrow(sandbox.query(con, query))  # type: ignore[return-value]
        finally:
            con.close()
