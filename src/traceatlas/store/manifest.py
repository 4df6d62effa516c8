"""Read and write a store's ``manifest.json``; what makes a directory a traceatlas store.

A directory is a store when its ``manifest.json`` is a JSON object with ``schema_version``
and ``producer.traceatlas`` (the version that wrote it), as ingest and filter write it.
Any other ``manifest.json`` belongs to someone else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traceatlas.errors import StoreError
from traceatlas.store.layout import MANIFEST, SCHEMA_VERSION
from traceatlas.store.parts import record_parts


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def is_traceatlas_manifest(manifest: object) -> bool:
    """True when ``manifest`` (parsed JSON) was written by traceatlas (any version)."""
    if not isinstance(manifest, dict) or "schema_version" not in manifest:
        return False
    producer = manifest.get("producer")
    return isinstance(producer, dict) and "traceatlas" in producer


def traceatlas_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of the directory ``path`` when traceatlas wrote it (any schema
    version), else None."""
    try:
        manifest = _load(path / MANIFEST) if path.is_dir() else None
    except (OSError, ValueError):
        return None
    return dict(manifest) if manifest is not None and is_traceatlas_manifest(manifest) else None


def is_store(path: Path) -> bool:
    """True when ``path`` is a directory whose manifest says traceatlas wrote it."""
    return traceatlas_manifest(path) is not None


def looks_like_store(path: Path) -> bool:
    """A store, or a damaged one: a ``manifest.json`` and an ``intervals`` table directory
    (opened as a store so that the damage is reported, not read as trace files)."""
    return is_store(path) or ((path / MANIFEST).is_file() and (path / "intervals").is_dir())


def read_manifest(store: Path) -> dict[str, Any]:
    """The manifest of ``store``; StoreError when missing, corrupt, not traceatlas's, or of
    another schema version."""
    path = store / MANIFEST
    try:
        manifest = _load(path)
    except FileNotFoundError as exc:
        raise StoreError(f"{store}: not a traceatlas store (no {MANIFEST})") from exc
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError
        raise StoreError(f"{path}: corrupt manifest ({exc})") from exc
    if not is_traceatlas_manifest(manifest):
        raise StoreError(f"{store}: not a traceatlas store ({MANIFEST} was not written by "
                         "traceatlas)")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise StoreError(
            f"{store}: store schema version {version}, this traceatlas reads {SCHEMA_VERSION}; "
            "ingest the sources again"
        )
    return dict(manifest)


def write_manifest(store: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` (pretty, stable key order) as the last step of a write:
    ``parts`` is set to the records of every file now in ``store`` (``store.parts``)."""
    manifest = {**manifest, "parts": record_parts(store)}
    (store / MANIFEST).write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
