"""Exporter registry: format name -> exporter, imported lazily."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from traceatlas.errors import InputError

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace


class Exporter(Protocol):
    """What an exporter provides. One exporter per module in ``traceatlas.export``."""

    name: str
    description: str

    def write(self, trace: Trace, out: Path) -> list[Path]:
        """Write ``trace`` to ``out`` (a file, or the base name of several files).

        Returns the files written. Writes atomically: on error nothing is left behind.
        """
        ...


EXPORTERS: Mapping[str, str] = {
    "chrome": "traceatlas.export.chrome:ChromeExporter",
    "paraver": "traceatlas.export.paraver:ParaverExporter",
    "folded": "traceatlas.export.folded:FoldedExporter",
    "speedscope": "traceatlas.export.speedscope:SpeedscopeExporter",
}
"""Format name -> ``module:Class``."""


def get_exporter(name: str) -> Exporter:
    """Instantiate the exporter registered under ``name``; a clear error otherwise."""
    if name not in EXPORTERS:
        raise InputError(name, f"unknown export format (choose from {', '.join(EXPORTERS)})")
    module_name, _, cls_name = EXPORTERS[name].partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    exporter: Exporter = cls()
    return exporter


def export_params(name: str, exporter: Exporter, given: list[str]) -> dict[str, str]:
    """``-p KEY=VALUE`` texts checked against the exporter's ``params`` (name -> choices)."""
    known: Mapping[str, tuple[str, ...]] = getattr(exporter, "params", {})
    out: dict[str, str] = {}
    for text in given:
        key, sep, value = text.partition("=")
        if not sep or key not in known:
            listed = ", ".join(known) or "none"
            raise InputError(f"--param {text}", f"{name} export parameters: {listed} "
                             "(KEY=VALUE)")
        if value not in known[key]:
            raise InputError(f"--param {key}", f"{value!r} is not one of "
                             f"{', '.join(known[key])}")
        out[key] = value
    return out
