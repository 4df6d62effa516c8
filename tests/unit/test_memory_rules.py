"""Advisor memory rules ``memory_peak``, ``memory_fragmentation`` and ``memory_storm`` on
traces built here: each fires on its construction and stays silent on a near miss just on
the other side of its threshold. Expected values are the construction's own numbers.

Builder times are ns from the trace start; a ``_SmallGpu`` trace says its GPU has
``total`` bytes (``deviceProperties`` totalGlobalMem) so small allocations reach the
thresholds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import traceatlas
from traceatlas.advisor import Context
from traceatlas.advisor import memory_fragmentation as frag_rule
from traceatlas.advisor import memory_peak as peak_rule
from traceatlas.advisor import memory_storm as storm_rule
from traceatlas.testing.builder import TraceBuilder


class _SmallGpu(TraceBuilder):
    """A trace whose GPUs have ``total`` bytes of memory."""

    def __init__(self, total: int | None) -> None:
        super().__init__(rank=0)
        self.total = total

    def top_level(self) -> dict[str, Any]:
        top = super().top_level()
        for prop in top["deviceProperties"]:
            prop["totalGlobalMem"] = self.total
        return top


def _context(b: TraceBuilder, path: Path) -> Context:
    return Context(traceatlas.open(b.write(path)))


# -- memory_peak --------------------------------------------------------------------------

def _peak_trace(last: int) -> _SmallGpu:
    """Device of 1000 B. Four ops each allocate once, nothing is freed: the peak is
    500 + 300 + ``last`` + 1 at t=400; holders big_a 500 (in fwd), big_b 300, mid ``last``,
    tiny 1."""
    b = _SmallGpu(total=1000)
    b.step(1, 0, 1000)
    b.annotation("fwd", 50, 200)
    b.cpu_op("big_a", 100, 150)
    b.cpu_op("big_b", 200, 250)
    b.cpu_op("mid", 300, 350)
    b.cpu_op("tiny", 390, 450)
    total = 0
    for ts, nbytes, addr in ((110, 500, 0x10), (210, 300, 0x20), (310, last, 0x30),
                             (400, 1, 0x40)):
        total += nbytes
        b.memory(ts, nbytes, addr=addr, total_allocated=total, total_reserved=1000)
    return b


def test_peak_names_top_holders_in_order(tmp_path: Path) -> None:
    [found] = peak_rule.check(_context(_peak_trace(100), tmp_path / "p.json"))
    # 500 + 300 + 100 + 1 = 901 B > 90% of 1000 B
    assert found.cost_bytes == 901 and found.cost_ns == 0 and found.severity == "high"
    assert found.ranks == [0] and found.where == {"op": "tiny"}
    assert "901 B" in found.statement and "rank 0 GPU 0" in found.statement
    holders = found.statement.split("top holders: ")[1]
    assert holders == "big_a in fwd 500 B; big_b 300 B; mid 100 B"  # TOP = 3: tiny left out
    assert "--table holders" in (found.command or "")


def test_peak_at_90_percent_is_no_finding(tmp_path: Path) -> None:
    # 500 + 300 + 99 + 1 = 900 B: exactly 90%, not above
    assert peak_rule.check(_context(_peak_trace(99), tmp_path / "p.json")) == []


def test_peak_without_device_size_is_no_finding(tmp_path: Path) -> None:
    b = _peak_trace(100)
    b.total = None  # deviceProperties with totalGlobalMem null
    assert peak_rule.check(_context(b, tmp_path / "p.json")) == []


# -- memory_fragmentation -----------------------------------------------------------------

def _frag_trace(allocated: int, reserved: int, *, device_type: int = 1,
                total: int = 10_000) -> _SmallGpu:
    """One allocation of ``allocated`` bytes with ``reserved`` bytes reserved then."""
    b = _SmallGpu(total=total)
    b.cpu_op("op", 0, 100)
    b.memory(10, allocated, addr=0x10, total_allocated=allocated, total_reserved=reserved,
             device_type=device_type)
    return b


def test_fragmentation_fires_at_a_quarter_of_reserved(tmp_path: Path) -> None:
    # reserved 4000, allocated 3000: 1000 B unused = 25% of reserved, >= 5% of 10000 B
    [found] = frag_rule.check(_context(_frag_trace(3000, 4000), tmp_path / "f.json"))
    assert found.cost_bytes == 1000 and found.cost_ns == 0
    assert found.severity == "high"  # 1000 B >= 10% of the device's 10000 B
    assert "25%" in found.statement and "GPU 0" in found.statement
    assert "expandable_segments" in found.next_step


def test_fragmentation_near_misses(tmp_path: Path) -> None:
    # 999 B unused < 25% of 4000 B
    assert frag_rule.check(_context(_frag_trace(3001, 4000), tmp_path / "a.json")) == []
    # 499 B unused: 33% of reserved but under 5% of the device (500 B)
    assert frag_rule.check(_context(_frag_trace(1000, 1499), tmp_path / "b.json")) == []


def test_fragmentation_unknown_device_size_needs_2_gib(tmp_path: Path) -> None:
    gib = 2**30
    # CPU: no device size, so the floor is MIN_BYTES = 2 GiB
    [found] = frag_rule.check(_context(_frag_trace(gib, 3 * gib, device_type=0),
                                       tmp_path / "a.json"))
    assert found.cost_bytes == 2 * gib and found.severity == "info"
    assert "CPU" in found.statement
    assert frag_rule.check(_context(_frag_trace(gib, 3 * gib - 1, device_type=0),
                                    tmp_path / "b.json")) == []


# -- memory_storm -------------------------------------------------------------------------

def _storm_trace(counts: list[int], size: int) -> TraceBuilder:
    """Steps of 10000 ns; step i makes ``counts[i]`` allocations of ``size`` bytes (each
    freed right after) at 2 ns intervals from the step's start + 1."""
    b = TraceBuilder(rank=0)
    total, addr = 0, 0x1000
    for i, count in enumerate(counts):
        start = i * 10_000
        b.step(i + 1, start, start + 10_000)
        for k in range(count):
            addr += 0x100
            b.memory(start + 1 + 2 * k, size, addr=addr, total_allocated=total + size,
                     total_reserved=2**30)
            b.memory(start + 2 + 2 * k, -size, addr=addr, total_allocated=total,
                     total_reserved=2**30)
    return b


def test_storm_fires_on_median_2000_small_allocations(tmp_path: Path) -> None:
    # median of 1999, 2000, 2001 allocations = 2000 >= MIN_PER_STEP, 1 KiB each
    [found] = storm_rule.check(_context(_storm_trace([1999, 2000, 2001], 1024),
                                        tmp_path / "s.json"))
    assert found.per_step == {"count": 2000.0}
    assert found.cost_bytes == 2000 * 1024 and found.cost_ns == 0
    assert "2000 allocations per step of 1 KiB" in found.statement
    assert "median over 3 steps" in found.evidence


def test_storm_near_misses(tmp_path: Path) -> None:
    # median 1999 allocations per step
    assert storm_rule.check(_context(_storm_trace([1999, 1999, 2001], 1024),
                                     tmp_path / "a.json")) == []
    # 2000 per step but 64 KiB each: not small
    assert storm_rule.check(_context(_storm_trace([2000, 2000, 2000], 64 * 1024),
                                     tmp_path / "b.json")) == []
