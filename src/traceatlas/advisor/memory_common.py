"""What the memory rules share: the ``memory`` result (only on traces with ``[memory]``
events, so other traces get no skip note), byte formatting, severity from the share of
device memory.

Memory findings cost memory, not time: ``Finding.cost_bytes`` carries the bytes at stake,
``cost_ns`` stays 0, and ``rank_findings`` puts them after the time findings (bytes are
never compared with ns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceatlas.advisor.base import Context
    from traceatlas.analysis.base import Result

HIGH_SHARE = 0.10
"""A memory finding whose bytes are at least this share of the device's memory is
``high`` severity (the peak rule: its own 90% threshold)."""


def memory_result(ctx: Context) -> Result | None:
    """The ``memory`` analysis result, or None when the trace has no ``[memory]`` events."""
    import polars as pl

    from traceatlas.analysis.memory_events import MEMORY_EVENT

    if not ctx.trace.instants.filter(pl.col("name") == MEMORY_EVENT
                                     ).select("rank").head(1).collect().height:
        return None
    return ctx.result("memory")


def fmt_bytes(n: float) -> str:
    """``1.5 GiB``, ``64 MiB``, ``12 KiB``, ``512 B`` (binary units)."""
    value = abs(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def severity(nbytes: float, device_total: float | None) -> str:
    """``high`` when ``nbytes`` >= ``HIGH_SHARE`` of the device's memory, else ``info``."""
    if device_total and nbytes >= HIGH_SHARE * device_total:
        return "high"
    return "info"


def where_text(rank: int, device: str) -> str:
    return f"rank {rank} {device}"
