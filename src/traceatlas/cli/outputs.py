"""``-o`` of the file-writing commands (report, export): never onto their own inputs."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from traceatlas.errors import InputError, TraceAtlasError


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def refuse_inputs(out: Path, inputs: Sequence[Path], *, directory: bool = False) -> None:
    """InputError when writing ``out`` would replace one of the trace files ``inputs``
    stand for, or write into an input store. ``directory``: ``out`` is a directory of
    files (``export --split-ranks``), refused when it holds an input file."""
    from traceatlas.io.sources import resolve_inputs  # here: the CLI starts without them
    from traceatlas.store.manifest import is_store

    target = os.path.realpath(out)
    files: list[str] = []
    for item in inputs:
        real = os.path.realpath(item)
        if is_store(Path(item)):
            if _inside(target, real) or (directory and _inside(real, target)):
                raise InputError(out, f"is inside the input store {item}; choose another -o")
            continue
        try:
            with warnings.catch_warnings():  # opening the input warns once, not here too
                warnings.simplefilter("ignore")
                files.extend(os.path.realpath(s.path) for s in resolve_inputs([item]))
        except TraceAtlasError:
            continue  # opening the input reports its own error
    for source in files:
        if source == target or (directory and _inside(source, target)):
            raise InputError(out, f"would overwrite the input trace {source}; choose another -o")
