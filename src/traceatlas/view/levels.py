"""Zoom levels of the viewer's pyramid: level L has bins of ``1024 * 4**L`` ns.

Bins are aligned on ``origin_ns`` (the store's first start): bin ``b`` of level
``L`` covers ``[origin_ns + b * bin_ns(L), origin_ns + (b + 1) * bin_ns(L))``.
"""

from __future__ import annotations

BASE_BIN_NS = 1024
"""Bin width of level 0, in ns (about 1 us)."""
FACTOR = 4
"""Each level's bins are this many times wider than the level below."""
MAX_LEVEL = 30
"""The coarsest level ever used (``bin_ns(30)`` is about 1.2e21 ns)."""


def bin_ns(level: int) -> int:
    """Width in ns of one bin of ``level`` (0 .. MAX_LEVEL)."""
    if not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"level {level} is outside 0..{MAX_LEVEL}")
    return BASE_BIN_NS << (2 * level)  # 1024 * 4**level, as an int for mypy


def top_level(span_ns: int) -> int:
    """The smallest level whose 4 bins cover ``span_ns`` ns (clamped to MAX_LEVEL)."""
    for level in range(MAX_LEVEL + 1):
        if span_ns <= bin_ns(level) * FACTOR:
            return level
    return MAX_LEVEL


def levels(span_ns: int) -> list[int]:
    """Levels ``0 .. top`` for a run of ``span_ns`` ns; top = smallest L with span <= 4 bins."""
    return list(range(top_level(span_ns) + 1))


def level_for(window_ns: int, pixels: int) -> int:
    """The finest level whose bin is at least ``window_ns / pixels`` ns (clamped to 0..30)."""
    if pixels <= 0:
        raise ValueError("pixels must be positive")
    for level in range(MAX_LEVEL + 1):
        # bin_ns >= window/pixels  <=>  bin_ns * pixels >= window (exact in integers).
        if bin_ns(level) * pixels >= window_ns:
            return level
    return MAX_LEVEL


def bin_index(t_ns: int, origin_ns: int, level: int) -> int:
    """Index of the bin of ``level`` holding absolute time ``t_ns`` (floor; may be negative)."""
    return (t_ns - origin_ns) // bin_ns(level)


def bin_start(index: int, origin_ns: int, level: int) -> int:
    """Absolute start in ns of bin ``index`` of ``level``."""
    return origin_ns + index * bin_ns(level)
