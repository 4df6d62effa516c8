"""Read and write a store's ``manifest.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traceatlas.errors import StoreError
from traceatlas.store.layout import MANIFEST, SCHEMA_VERSION


def is_store(path: Path) -> bool:
    """True when ``path`` is a directory holding a manifest."""
    return path.is_dir() and (path / MANIFEST).is_file()


def read_manifest(store: Path) -> dict[str, Any]:
    """The manifest of ``store``; StoreError when missing or of another schema version."""
    path = store / MANIFEST
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise StoreError(f"{store}: not a traceatlas store (no {MANIFEST})") from exc
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}: corrupt manifest ({exc})") from exc
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise StoreError(
            f"{store}: store schema version {version}, this traceatlas reads {SCHEMA_VERSION}; "
            "ingest the sources again"
        )
    return manifest


def write_manifest(store: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` (pretty, stable key order)."""
    (store / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
