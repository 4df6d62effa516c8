"""The trace store: Parquet per table per rank, plus ``manifest.json``."""
