"""What an analysis declares (name, parameters, data it needs) and what it returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace


@dataclass(frozen=True)
class Param:
    """One parameter: ``--param name=value`` on the CLI, a keyword in Python.

    ``kind`` is int, float, str or bool; the unit goes in ``help`` (and in the name's
    suffix for times, e.g. ``min_gap_ns``).
    """

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None


@dataclass
class Result:
    """An analysis answer: the main table, named extra tables (series, histograms), and
    notes (conventions applied, data that was missing or clipped). Times in ns."""

    table: pl.DataFrame
    extra: dict[str, pl.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class Analysis(Protocol):
    """One analysis per module in ``traceatlas.analysis``, registered in ``registry``."""

    name: str
    description: str
    params: tuple[Param, ...]
    requires: tuple[str, ...]
    """Names of ``requirements.REQUIREMENTS`` the trace must meet."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Compute the answer on ``trace`` (possibly a ``Trace.select`` view)."""
        ...
