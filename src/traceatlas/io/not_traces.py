"""Which files found in a directory are not traces (``package.json``, a config file, an
SQLite database of another tool), judged cheaply from the first 64 KiB.

The format comes from the readers' own ``sniff`` (``io/registry.py``); this only adds the
checks a permissive sniff leaves open: Kineto's takes any JSON object or array, nsys's any
SQLite file. A file is called "not a trace" only when that is certain from its head; one
that may be a trace (a damaged one included) is kept, so its reader reports the damage.
Files named explicitly are never filtered: their reader's error stands (exit 2)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import msgspec

from traceatlas.errors import CorruptTraceError
from traceatlas.io.registry import sniff
from traceatlas.io.sources import Source

HEAD_BYTES = 1 << 16
"""Decompressed bytes read from each file (64 KiB)."""
_SPACE = b"\xef\xbb\xbf \t\r\n"
_LISTED = 8
"""Skipped files named in one message; the rest are counted."""
TRACE_KEYS = frozenset({
    "schemaVersion", "deviceProperties", "distributedInfo", "record_shapes", "metadata",
    "displayTimeUnit", "otherData", "traceName", "baseTimeNanoseconds", "systemTraceEvents",
})
"""Top-level keys of Kineto / Chrome trace objects seen before ``traceEvents``: a head that
opens with one is kept even when ``traceEvents`` lies past the first 64 KiB."""
_FIRST_KEY = re.compile(rb'\{\s*"([A-Za-z_]+)"\s*:')


def why_not_a_trace(source: Source) -> str | None:
    """Why ``source`` is not a trace, or None when it is or may be one."""
    try:
        head = source.head(HEAD_BYTES)
    except CorruptTraceError:
        return None  # unreadable: its reader says so
    if not head.strip(_SPACE):
        return "empty file"
    reader = sniff(head, source)
    if reader is None:
        return "not a recognised trace format"
    if reader.name == "kineto":
        return _json_reason(head.lstrip(_SPACE), complete=len(head) < HEAD_BYTES)
    if reader.name == "nsys" and source.member is None and head.startswith(b"SQLite"):
        return _sqlite_reason(source.path)
    return None


def split(sources: Sequence[Source]) -> tuple[list[Source], list[tuple[Source, str]]]:
    """(the sources that are or may be traces, (source, why) for the others)."""
    kept: list[Source] = []
    skipped: list[tuple[Source, str]] = []
    for source in sources:
        why = why_not_a_trace(source)
        if why is None:
            kept.append(source)
        else:
            skipped.append((source, why))
    return kept, skipped


def describe(skipped: Sequence[tuple[Source, str]]) -> str:
    """``N file(s) that are not traces: a.json (why), b.json (why)`` (the first few named)."""
    named = ", ".join(f"{s.file_name} ({why})" for s, why in skipped[:_LISTED])
    more = f" and {len(skipped) - _LISTED} more" if len(skipped) > _LISTED else ""
    return f"{len(skipped)} file(s) that are not traces: {named}{more}"


def _json_reason(text: bytes, *, complete: bool) -> str | None:
    """A JSON head (Kineto's sniff took it): an object needs ``traceEvents``, an array
    event objects (with ``ph``). ``complete``: ``text`` is the whole file."""
    if complete:
        try:
            if text[:1] == b"{":
                keys = sorted(msgspec.json.decode(text, type=dict[str, msgspec.Raw]))
                if "traceEvents" in keys:
                    return None
                shown = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
                return f"JSON object without 'traceEvents' (keys: {shown or 'none'})"
            items = msgspec.json.decode(text, type=list[msgspec.Raw])
            if not items:
                return "empty JSON array (no events)"
            first = msgspec.json.decode(items[0])
            if isinstance(first, dict) and "ph" in first:
                return None
            return "JSON array whose first item is not a trace event (no 'ph')"
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass  # invalid JSON: judged on the text below; a damaged trace stays
    if b'"traceEvents"' in text or b'"ph"' in text:
        return None
    first = _FIRST_KEY.match(text)
    if first and first.group(1).decode() in TRACE_KEYS:
        return None  # metadata longer than the head before traceEvents: may be a trace
    if text[:1] == b"{":
        return "JSON object without 'traceEvents' or trace events in its first 64 KiB"
    return "JSON array without trace events in its first 64 KiB"


def _sqlite_reason(path: str) -> str | None:
    """An SQLite file without Nsight Systems' tables; None when it has them or cannot be
    opened (its reader then reports why)."""
    from traceatlas.io.nsys import is_export  # lazy: pyarrow and the ADBC driver

    try:
        con = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    if is_export({str(r[0]) for r in rows}):
        return None
    return "SQLite database without Nsight Systems tables (StringIds, TARGET_INFO_*)"
