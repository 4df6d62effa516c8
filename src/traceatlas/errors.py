"""Errors and warnings raised by traceatlas.

Tree::

    TraceAtlasError
    ├── InputError                 bad input; the CLI exits with code 2
    │   ├── InputNotFoundError     a path that does not exist, or an empty directory
    │   ├── UnsupportedFormatError no reader recognises the file
    │   ├── CorruptTraceError      a reader recognised the file but cannot parse it
    │   └── RankConflictError      two files claim the same rank
    ├── QueryError                 user SQL failed (exit code 2 in the CLI)
    ├── StoreError                 a store directory is missing, partial or of another version
    │   └── StoreDamagedError      a part is missing, truncated, replaced or added
    └── EngineError                an engine failed (unknown engine, a worker died)

    DataQualityWarning             data was inferred, clipped or is missing evidence
    └── RankInferredWarning        a file without ``distributedInfo.rank``

Every ``InputError`` message names the file and the problem in one line.
"""

from __future__ import annotations

from pathlib import Path


class TraceAtlasError(Exception):
    """Base class of every error raised by traceatlas."""


class InputError(TraceAtlasError):
    """Bad input: the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        """Keep (path, problem) when the error crosses a process boundary."""
        return (type(self), (self.path, self.problem))


class InputNotFoundError(InputError):
    """A path that does not exist, or a directory without trace files."""


class UnsupportedFormatError(InputError):
    """No registered reader recognises the file."""


class CorruptTraceError(InputError):
    """A reader recognised the file but could not parse it (truncated, wrong shape)."""


class RankConflictError(InputError):
    """Two input files claim the same rank."""


class QueryError(TraceAtlasError):
    """A user's SQL query failed (syntax, unknown table or column)."""


class StoreError(TraceAtlasError):
    """A store directory is missing, incomplete, or written by an incompatible version."""


class StoreDamagedError(StoreError):
    """A store's files disagree with its manifest; ``part`` names the file (relative to
    the store; None when the store as a whole, e.g. it has no part records)."""

    def __init__(self, message: str, *, part: str | None = None, problem: str = "") -> None:
        self.part = part
        self.problem = problem
        super().__init__(message)


class EngineError(TraceAtlasError):
    """An engine failed to run a partition."""


class DataQualityWarning(UserWarning):
    """Data was inferred, clipped, or lacks evidence (e.g. a rank without a clock)."""


class RankInferredWarning(DataQualityWarning):
    """A file had no ``distributedInfo.rank``; its rank was inferred."""


class MissingDataError(InputError):
    """The trace lacks what an analysis needs (no device events, no correlation, ...)."""
