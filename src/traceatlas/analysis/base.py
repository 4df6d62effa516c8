"""What an analysis declares (name, parameters, data it needs) and what it returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace


MAX_NS = 10**18
"""Largest time parameter (ns, about 31.7 years): sums with epoch-ns times stay in int64."""
MAX_COUNT = 10**9
"""Largest count parameter (``top`` N rows, queue lengths, repeats)."""
MAX_BINS = 100_000
"""Most bins of a binned analysis (its table has a row per bin, or per name and bin)."""
MAX_NGRAM = 32
"""Longest n-gram of ``patterns`` (memory grows with it: 3 columns per entry)."""
MAX_LEVEL = 10**6
"""Deepest nesting level a parameter may name."""


@dataclass(frozen=True)
class Param:
    """One parameter: ``--param name=value`` on the CLI, a keyword in Python.

    ``kind`` is int, float, str or bool; the unit goes in ``help`` (and in the name's
    suffix for times, e.g. ``min_gap_ns``). ``minimum`` / ``maximum``: the documented
    range of a number, both inclusive (None: unbounded on that side); values outside it,
    and float NaN or infinity, are refused before the analysis runs.
    """

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None

    def range_text(self) -> str:
        """``"1..100000"``, ``">= 0"``, ``"<= 5"`` or ``""`` when unbounded."""
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            return f"{_number(lo)}..{_number(hi)}"
        if lo is not None:
            return f">= {_number(lo)}"
        return f"<= {_number(hi)}" if hi is not None else ""


def _number(value: float) -> str:
    """``1000000000`` -> ``1e9``-style text only for powers of ten above 10**6."""
    if isinstance(value, int) and value >= 10**7 and str(value).rstrip("0") == "1":
        return f"10^{len(str(value)) - 1}"
    return f"{value:g}" if isinstance(value, float) else str(value)


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
