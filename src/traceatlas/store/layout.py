"""Paths inside a store directory (hive layout, one Parquet file per table per rank)."""

from __future__ import annotations

from pathlib import Path

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


def part_path(store: Path, table: str, rank: int) -> Path:
    """``<store>/<table>/rank=<rank>/part-0.parquet``."""
    return store / table / f"rank={rank}" / "part-0.parquet"


def table_glob(store: Path, table: str) -> str:
    """Glob matching every rank file of ``table``."""
    return str(store / table / "rank=*" / "*.parquet")
