"""The part records of a store's manifest, and the checks that find a damaged store.

At the end of a write (ingest after clock alignment, filter), :func:`record_parts` lists
every file under the store but the manifest: relative path (POSIX), ``rows`` (Parquet
footer), ``bytes``, ``mtime_ns``, ``blake2b`` (16-byte BLAKE2b of the file's bytes, hex) and,
for intervals and tracks, ``stats`` (rows per rank and category or kind, span; see
``store/part_stats.py``). The writer makes each part's record as it writes it, from the
table in memory and the footer it wrote (:func:`remember_part`; an ingest's worker
processes hand theirs back in their results), so a part unchanged since (same inode,
size and mtime) is not read again; any other file is read for its record.

Opening a store runs :func:`find_damage`, the cheap checks: every recorded part is present
with its recorded size; a part whose mtime changed also has its footer read (row count and
schema against ``model/schema.py``) and its hash compared (a same-size rewrite is damage
too); no unrecorded file lies in a table directory or ends
``.parquet`` (reading it would change counts). :func:`find_damage` with ``deep=True`` also
compares every hash. A store written before part records existed is reported as such.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from traceatlas.errors import StoreDamagedError, StoreError
from traceatlas.model.vocab import TABLE_NAMES
from traceatlas.store.layout import MANIFEST
from traceatlas.store.part_stats import STATS_KEY, part_stats, stats_of

if TYPE_CHECKING:  # imported where footers are read: opening an unchanged store skips it
    import pyarrow as pa
    import pyarrow.parquet as pq

_CHUNK = 1 << 20
HASH_BYTES = 16
"""Digest size of the recorded BLAKE2b hashes (bytes)."""


@dataclass(frozen=True)
class Damage:
    """What is wrong with a store: ``part`` (relative path, or None for the whole store)."""

    part: str | None
    problem: str
    older: bool = False
    added: bool = False
    """The part is a file the store did not write: moving it out repairs the store."""

    def __str__(self) -> str:
        return f"part {self.part} {self.problem}" if self.part else self.problem


# -- writing -------------------------------------------------------------------------------


def record_parts(store: Path) -> list[dict[str, Any]]:
    """One record per file under ``store`` (the manifest excepted), sorted by path: the
    record :func:`remember_part` kept for a part unchanged since (same inode, size and
    mtime), else one made by reading the file."""
    files = sorted(_files(store) - {MANIFEST})
    kept = take_records(store)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda rel: _kept(store, rel, kept.get(rel)) or _record(
            store, rel), files))


def _record(store: Path, rel: str) -> dict[str, Any]:
    path = store / rel
    import pyarrow.parquet as pq

    table = rel.split("/", 1)[0]
    meta = pq.read_metadata(path)
    return _made(store, rel, meta, lambda: part_stats(path, table))[1]


def _made(store: Path, rel: str, meta: pq.FileMetaData,
          stats_of_part: Callable[[], dict[str, Any] | None]) -> tuple[int, dict[str, Any]]:
    """(inode, record) of the part ``rel`` whose footer is ``meta``."""
    path = store / rel
    table = rel.split("/", 1)[0]
    if table in TABLE_NAMES and not _schema_ok(meta, table):
        raise StoreError(f"{path}: written with a schema other than the canonical {table} "
                         "schema (a traceatlas bug)")
    st = path.stat()
    record = {"path": rel, "rows": int(meta.num_rows), "bytes": st.st_size,
              "mtime_ns": st.st_mtime_ns, "blake2b": file_hash(path)}
    stats = stats_of_part()
    if stats is not None:
        record[STATS_KEY] = stats
    return st.st_ino, record


# Records of parts this process wrote, by absolute path: (inode, record). The writer fills
# it (remember_part), record_parts empties it for its store; an ingest's workers hand
# theirs to the client in their results (take_records / keep_records).
_KEPT: dict[str, tuple[int, dict[str, Any]]] = {}
_KEPT_LOCK = threading.Lock()


def remember_part(store: Path, rel: str, data: pa.Table, meta: pq.FileMetaData) -> None:
    """Keep the record of the part ``rel`` just written from ``data`` (footer ``meta``, as
    the writer returned it), so that :func:`record_parts` need not read it again: its
    rows and schema from ``meta``, its stats from ``data``, its hash from the file."""
    table = rel.split("/", 1)[0]
    kept = _made(store, rel, meta, lambda: stats_of(data, table))
    with _KEPT_LOCK:
        _KEPT[os.path.abspath(store / rel)] = kept


def take_records(store: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """The kept records of parts under ``store`` (relative path -> (inode, record)),
    removed from this process's keeping."""
    prefix = os.path.join(os.path.abspath(store), "")
    with _KEPT_LOCK:
        mine = [k for k in _KEPT if k.startswith(prefix)]
        return {k[len(prefix):].replace(os.sep, "/"): _KEPT.pop(k) for k in mine}


def keep_records(store: Path, records: dict[str, tuple[int, dict[str, Any]]]) -> None:
    """Keep ``records`` (as :func:`take_records` returned them, possibly from another
    process on this file system) for ``store``."""
    with _KEPT_LOCK:
        for rel, kept in records.items():
            _KEPT[os.path.abspath(store / rel)] = kept


def _kept(store: Path, rel: str,
          kept: tuple[int, dict[str, Any]] | None) -> dict[str, Any] | None:
    """The kept record when the file is still the one it describes (inode, size and mtime),
    else None."""
    if kept is None:
        return None
    inode, record = kept
    try:
        st = (store / rel).stat()
    except OSError:
        return None
    same = (st.st_ino, st.st_size, st.st_mtime_ns) == (inode, record["bytes"],
                                                     record["mtime_ns"])
    return record if same and record["path"] == rel else None


def file_hash(path: Path) -> str:
    """BLAKE2b (``HASH_BYTES``) of the file's bytes, hex."""
    digest = hashlib.blake2b(digest_size=HASH_BYTES)
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# -- reading -------------------------------------------------------------------------------


def find_damage(store: Path, manifest: dict[str, Any], *, deep: bool = False) -> Damage | None:
    """The first problem found in ``store`` against its ``manifest``, or None."""
    records = manifest.get("parts")
    if records is None:
        return Damage(None, "was written by an older traceatlas (no part records)", older=True)
    if not isinstance(records, list) or not all(_valid_record(r) for r in records):
        return Damage(None, f"has a corrupt {MANIFEST} (bad part records)")
    for rec in records:
        damage = _check_part(store, rec, deep)
        if damage is not None:
            return damage
    listed = {rec["path"] for rec in records}
    extra = sorted(f for f in _files(store) - listed - {MANIFEST} if _is_data(f))
    if extra:
        return Damage(extra[0], "is not listed in the manifest (a file added to the store?)",
                      added=True)
    return None


def _check_part(store: Path, rec: dict[str, Any], deep: bool) -> Damage | None:
    rel = rec["path"]
    path = store / rel
    try:
        st = path.stat()
    except FileNotFoundError:
        return Damage(rel, "is missing")
    except OSError as exc:
        return Damage(rel, f"cannot be read ({exc.strerror})")
    if st.st_size != rec["bytes"]:
        return Damage(rel, f"has {st.st_size:,} bytes, the manifest says {rec['bytes']:,}")
    if st.st_mtime_ns != rec.get("mtime_ns") or deep:
        import pyarrow.parquet as pq

        try:
            meta = pq.read_metadata(path)
        except (OSError, ValueError) as exc:
            return Damage(rel, f"is not a readable Parquet file ({' '.join(str(exc).split())})")
        if meta.num_rows != rec["rows"]:
            return Damage(rel, f"has {meta.num_rows:,} rows, the manifest says {rec['rows']:,}")
        table = rel.split("/", 1)[0]
        if table in TABLE_NAMES and not _schema_ok(meta, table):
            return Damage(rel, f"does not have the {table} table's schema")
    # a part rewritten since the store recorded it: same size and footer are not enough
    changed = st.st_mtime_ns != rec.get("mtime_ns")
    if (deep or changed) and file_hash(path) != rec.get("blake2b"):
        return Damage(rel, "has other contents than the store wrote (hash differs)")
    return None


def _schema_ok(meta: pq.FileMetaData, table: str) -> bool:
    from traceatlas.model.schema import TABLES  # Arrow: imported with the footer reader

    try:
        schema = meta.schema.to_arrow_schema()
    except Exception:  # any undecodable schema is a mismatch
        return False
    return bool(schema.equals(TABLES[table].arrow_schema, check_metadata=False))


def _valid_record(rec: object) -> bool:
    if not isinstance(rec, dict) or not isinstance(rec.get("path"), str):
        return False
    rel = PurePosixPath(rec["path"])
    safe = not rel.is_absolute() and ".." not in rel.parts and str(rel) not in ("", ".")
    return safe and isinstance(rec.get("rows"), int) and isinstance(rec.get("bytes"), int)


def _is_data(rel: str) -> bool:
    """A file that a reader of the store could pick up."""
    return rel.split("/", 1)[0] in TABLE_NAMES or rel.endswith(".parquet")


def _files(store: Path) -> set[str]:
    """Every non-directory entry under ``store`` (symlinks included, not followed), as
    POSIX paths relative to ``store``."""
    found = set()
    for root, dirs, names in os.walk(store):
        rel_root = Path(root).relative_to(store)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            found.add((rel_root / name).as_posix())
    return found


def foreign_entries(store: Path, manifest: dict[str, Any]) -> list[str]:
    """Entries under ``store`` that traceatlas did not write: files other than the
    manifest and its parts, and directories that hold none of the parts. A manifest
    without part records (an older store) is taken to own its tables' rank parts."""
    records = manifest.get("parts")
    if isinstance(records, list) and all(_valid_record(r) for r in records):
        owned = {r["path"] for r in records}
    else:
        owned = {f"{t}/rank={r}/part-0.parquet" for t in manifest.get("tables", ())
                 for r in manifest.get("ranks", ())}
    owned_dirs = {str(p) for rel in owned for p in PurePosixPath(rel).parents}
    foreign = sorted(f for f in _files(store) - owned - {MANIFEST})
    for root, dirs, _names in os.walk(store):
        for d in dirs:
            rel = (Path(root) / d).relative_to(store).as_posix()
            if rel not in owned_dirs and not os.path.islink(os.path.join(root, d)):
                foreign.append(rel + "/")
    return sorted(set(foreign))


# -- messages ------------------------------------------------------------------------------


def rebuild_command(store: str | Path, manifest: dict[str, Any]) -> str:
    """The shell command that writes ``store`` again from what its manifest recorded."""
    out = os.fspath(store)
    if manifest.get("filtered_from"):
        spec = manifest.get("filter", {}).get("spec", {})
        words = ["traceatlas", "filter", str(manifest["filtered_from"]), "-o", out]
        for key, option in (("category", "--category"), ("name", "--name"),
                            ("min_dur", "--min-dur"), ("ranks", "--ranks"),
                            ("window", "--window"), ("step", "--step")):
            value = spec.get(key)
            for v in value if isinstance(value, list) else [] if value is None else [value]:
                words += [option, str(v)]
        return shlex.join(words)
    paths = _unique(str(s["path"]) for s in manifest.get("sources", ()) if "path" in s)
    words = ["traceatlas", "ingest", *paths, "-o", out]
    if manifest.get("clock_alignment", "auto") != "auto":
        words += ["--align", str(manifest["clock_alignment"])]
    return shlex.join(words)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def verify_store(store: Path, manifest: dict[str, Any]) -> None:
    """Raise :class:`StoreDamagedError` when :func:`find_damage` finds a problem: it names
    the part and the repair (move an added file out, else the command that rebuilds the
    store)."""
    damage = find_damage(store, manifest)
    if damage is None:
        return
    if damage.added:
        repair = "move it out of the store"
    else:
        filtered = bool(manifest.get("filtered_from"))
        again = ("filter again" if filtered else "ingest again") if damage.older else (
            "rebuild it")
        repair = f"{again}: {rebuild_command(store, manifest)}"
    raise StoreDamagedError(f"{store}: {damage}; {repair}", part=damage.part,
                            problem=damage.problem)
