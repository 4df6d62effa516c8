"""Data-quality notes: what a reader could not read or dropped, kept in the store.

Readers warn (``DataQualityWarning``) about every column they lack and every row they
drop, and also record each such fact as a ``Note`` in the ``metadata`` table (key
``DATA_QUALITY_KEY``, a JSON list), so an analysis that later finds no data can say
which file, table and column it was lost from (``analysis/requirements.py``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from traceatlas.errors import DataQualityWarning

DATA_QUALITY_KEY = "data_quality"
"""``metadata`` key of the JSON list of notes (one list per rank)."""


@dataclass(frozen=True)
class Note:
    """One thing a reader lost: in ``file``, ``table`` (the source's own table or
    record kind) ``problem`` (a phrase), affecting ``rows`` rows (0: unknown or none).

    ``categories``, ``columns`` and ``tables`` say which canonical data it would have
    given (interval/instant categories, canonical column names, canonical tables), so
    a missing-data message can pick the notes that explain it.
    """

    file: str
    table: str
    problem: str
    rows: int = 0
    categories: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()

    def text(self) -> str:
        """One line: ``<file>: <table> <problem>``."""
        return f"{self.file}: {self.table} {self.problem}" if self.table else \
            f"{self.file}: {self.problem}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (lists for the tuples)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @staticmethod
    def from_json(item: Any) -> Note | None:
        """The note a ``to_json`` dict holds; None for anything else."""
        if not isinstance(item, dict) or not isinstance(item.get("file"), str):
            return None
        try:
            return Note(str(item["file"]), str(item.get("table", "")),
                        str(item.get("problem", "")), int(item.get("rows") or 0),
                        *(tuple(str(v) for v in item.get(k) or ())
                          for k in ("categories", "columns", "tables")))
        except (TypeError, ValueError):
            return None


def report(notes: list[Note], note: Note, *, stacklevel: int = 3) -> None:
    """Warn with ``note.text()`` and append the note to ``notes``."""
    warnings.warn(note.text(), DataQualityWarning, stacklevel=stacklevel)
    notes.append(note)


def notes_json(notes: Iterable[Note]) -> list[dict[str, Any]]:
    """The metadata value of ``DATA_QUALITY_KEY``."""
    return [n.to_json() for n in notes]


def parse_notes(values: Sequence[str]) -> list[Note]:
    """Notes from ``metadata`` values of ``DATA_QUALITY_KEY`` (JSON text), in order,
    without repeats (every rank of a file holds the file's notes)."""
    out: list[Note] = []
    for value in values:
        try:
            items = json.loads(value)
        except (TypeError, ValueError):
            continue
        for item in items if isinstance(items, list) else []:
            note = Note.from_json(item)
            if note is not None and note not in out:
                out.append(note)
    return out
