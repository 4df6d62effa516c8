"""The output directory of ``traceatlas record``: what it may replace, and its marker.

``record`` writes ``.traceatlas-record`` (JSON: producer, command, exit code, files) into
the directory first, then the traces. A directory is reused only when it is empty or a
previous record output: its marker says traceatlas wrote it and every entry has a name
record writes (``rank-<r>.json.gz``, ``report.html``, ``report.nsys-rep``,
``report.sqlite``, and its hidden working names). Anything else is refused, so ``-o``
never deletes what traceatlas did not write. The marker has no ``.json`` suffix: reading
the directory as a trace never takes it for one.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import traceatlas
from traceatlas.errors import InputError
from traceatlas.tempfiles import write_text_atomic

MARKER = ".traceatlas-record"
TRACE = re.compile(r"^rank-\d+\.json\.gz$")
OURS = re.compile(
    r"^(?:rank-\d+\.json\.gz|report\.html|report\.nsys-rep|report\.sqlite"
    r"|\.rank-\d+\.claim|\.tmp-rank-\d+-\d+|\.traceatlas-record"
    r"|\.(?:\.traceatlas-record|report\.html)\.tmp-.+)$"
)
"""Every name record writes into its directory (traces, reports, working names)."""
WORKING = re.compile(r"^(?:\.rank-\d+\.claim|\.tmp-rank-\d+-\d+)$")
"""Names that only exist while the program runs (claims, staging of a trace)."""


def read_marker(out: Path) -> dict[str, Any] | None:
    """The marker of ``out`` when traceatlas record wrote it, else None."""
    try:
        marker = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    producer = marker.get("producer") if isinstance(marker, dict) else None
    if isinstance(producer, dict) and "traceatlas" in producer and marker.get("kind") == "record":
        return dict(marker)
    return None


def prepare(out: Path) -> None:
    """Make ``out`` an empty directory for a new recording: create it, or clear a previous
    record output; InputError (exit 2) for anything else."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise InputError(out, "exists and is not a directory; choose another -o")
    if not out.exists():
        out.mkdir(parents=True)
        return
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    if read_marker(out) is None:
        raise InputError(out, "is not empty and not a traceatlas record output; choose "
                         "another -o (record never deletes what it did not write)")
    foreign = [name for name in entries if not OURS.match(name)]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                          else "")
        raise InputError(out, f"a previous record output that now also holds {shown}; "
                         "choose another -o (record never deletes what it did not write)")
    for name in entries:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def write_marker(out: Path, info: dict[str, Any]) -> None:
    """Write the marker (atomically) with ``info`` plus who wrote it."""
    marker = {"kind": "record", "producer": {"traceatlas": traceatlas.__version__}, **info}
    write_text_atomic(out / MARKER, json.dumps(marker, indent=2, sort_keys=True) + "\n")


def tidy(out: Path) -> None:
    """Remove the working names the program's processes left (claims, staging)."""
    for path in out.iterdir():
        if WORKING.match(path.name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def traces(out: Path) -> list[Path]:
    """The per-rank traces in ``out``, by rank."""
    found = [p for p in out.iterdir() if TRACE.match(p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1].split(".")[0]))
