"""Allocator settings for a command that runs analyses (``analyze``, ``report``, ``diff``,
``summary``, ``trend``): glibc keeps freed memory for reuse instead of handing it back to
the system at once, in this process and in the worker processes it starts.

The analyses allocate and free arrays of tens of MB over and over (numpy, and Arrow's
system pool). By default glibc maps every array above its threshold afresh and trims the
heap top on free, so the kernel faults in and zeroes every page again: on ``report`` over
8 ranks x 1 GB, 5.1 M page faults and 35-41 s of system time of ~150 CPU-s
(``bench/RESULTS.md``). Kept: mmap threshold 32 MiB (arrays below it come from the
heap), trim threshold 2 GiB - 1 (the heap top is kept): ``mallopt`` here,
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` for the processes started later
(glibc reads them at start). A variable the user set is left as it is (glibc then keeps
the user's value). Polars' jemalloc is left at Polars' own setting: a 10 s decay there
(``_RJEM_MALLOC_CONF``) saved little more time for ~0.6 GB more peak memory on that
report (measured, not kept).

Results never depend on these settings; ingest, ``info``, ``view`` and ``record`` (the
user's program) do not use them.
"""

from __future__ import annotations

import os

MMAP_THRESHOLD_B = 32 << 20
TRIM_THRESHOLD_B = (1 << 31) - 1
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters (malloc.h)
SETTINGS: dict[str, tuple[str, int, int]] = {
    "MALLOC_MMAP_THRESHOLD_": (str(MMAP_THRESHOLD_B), _M_MMAP_THRESHOLD, MMAP_THRESHOLD_B),
    "MALLOC_TRIM_THRESHOLD_": (str(TRIM_THRESHOLD_B), _M_TRIM_THRESHOLD, TRIM_THRESHOLD_B),
}
"""Environment variable -> (value, glibc mallopt parameter, mallopt value)."""


def keep_freed_memory() -> dict[str, str]:
    """Apply the settings (module docstring) to this process and to the processes it
    starts; returns the variables set (those the user had not set)."""
    from traceatlas.io.allocator import glibc

    libc = glibc()
    applied: dict[str, str] = {}
    if libc is None:
        return applied  # another C library: its own variables, not these
    for name, (value, param, number) in SETTINGS.items():
        if name in os.environ:
            continue
        libc.mallopt(param, number)
        os.environ[name] = value
        applied[name] = value
    return applied
