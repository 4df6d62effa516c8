"""Allocator settings for a command that runs analyses (``analyze``, ``report``, ``diff``,
``summary``, ``trend``): freed memory kept for reuse instead of handed back to the system
at once, in this process and in the worker processes it starts.

The analyses allocate and free arrays of tens of MB over and over (numpy, Polars, Arrow's
system pool). By default glibc maps every array above its threshold afresh and trims the
heap top on free, and Polars' jemalloc hands freed pages back within 0.5-1 s (Polars'
``__init__`` sets ``dirty_decay_ms:500,muzzy_decay_ms:1000`` and appends the value it
finds in ``_RJEM_MALLOC_CONF``, whose options then win), so the kernel
faults in and zeroes every page again: on ``report`` over 8 ranks x 1 GB, 5.1 M page
faults and 35-41 s of system time of ~150 CPU-s (``bench/RESULTS.md``). Kept:

- glibc: mmap threshold 32 MiB (arrays below it come from the heap), trim threshold
  2 GiB - 1 (the heap top is kept): ``mallopt`` here, ``MALLOC_MMAP_THRESHOLD_`` /
  ``MALLOC_TRIM_THRESHOLD_`` for the processes started later (read by glibc at start);
- Polars' jemalloc: ``_RJEM_MALLOC_CONF=dirty_decay_ms:10000,muzzy_decay_ms:10000``
  (freed pages handed back over 10 s), read when Polars first allocates, so it is set
  before Polars is imported (a no-op where it already is, e.g. a library caller).

A variable the user set is left as it is (and glibc then keeps the user's value). The
cost is memory: the peak RSS of that report rose from 1.3 to 2.1 GB. Results never
depend on these settings; ingest, ``view`` and ``record`` (the user's program) do not
use them.
"""

from __future__ import annotations

import os

MMAP_THRESHOLD_B = 32 << 20
TRIM_THRESHOLD_B = (1 << 31) - 1
JEMALLOC_CONF = "dirty_decay_ms:10000,muzzy_decay_ms:10000"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters (malloc.h)
SETTINGS = {
    "MALLOC_MMAP_THRESHOLD_": (str(MMAP_THRESHOLD_B), _M_MMAP_THRESHOLD, MMAP_THRESHOLD_B),
    "MALLOC_TRIM_THRESHOLD_": (str(TRIM_THRESHOLD_B), _M_TRIM_THRESHOLD, TRIM_THRESHOLD_B),
    "_RJEM_MALLOC_CONF": (JEMALLOC_CONF, None, 0),
}
"""Environment variable -> (value, glibc mallopt parameter or None, mallopt value)."""


def keep_freed_memory() -> dict[str, str]:
    """Apply the settings (module docstring) to this process and to the processes it
    starts; returns the variables set (those the user had not set)."""
    from traceatlas.io.allocator import glibc

    libc = glibc()
    applied: dict[str, str] = {}
    for name, (value, param, number) in SETTINGS.items():
        if name in os.environ:
            continue
        if param is not None:
            if libc is None:
                continue  # another C library: its own variables, not these
            libc.mallopt(param, number)
        os.environ[name] = value
        applied[name] = value
    return applied
