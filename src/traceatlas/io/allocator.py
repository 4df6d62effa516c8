"""Allocator settings for a reader that allocates and frees many big short-lived arrays.

``reusing_memory()`` wraps one read (the Paraver reader's): numpy's transparent-huge-page
advice off, and glibc's malloc keeping freed memory for reuse; both set back after.
Process-wide settings: reads in other threads at the same time only lose (or share) the
effect; results never depend on it (tests compare tables with and without).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


@contextmanager
def reusing_memory() -> Iterator[None]:
    """Huge-page advice off and glibc's freed memory retained for the block; both set
    back after (see ``huge_pages`` and ``malloc_retain`` for the measured costs)."""
    previous = huge_pages(False)
    retained = malloc_retain(True)
    try:
        yield
    finally:
        if retained:
            malloc_retain(False)
        huge_pages(previous)


def huge_pages(enabled: bool) -> bool:
    """Set numpy's huge-page advice for new arrays; the previous setting (True when this
    numpy has no such switch, so restoring is a no-op).

    Where the kernel compacts memory to fault in huge pages (THP ``defrag=madvise``),
    that cost more system time than the rest of a Paraver parse (178 MB trace: 1.8-2.8 s
    of system time with the advice, 1.1 s without)."""
    multiarray = getattr(getattr(np, "_core", None), "multiarray", None)
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    return bool(switch(enabled)) if switch is not None else True


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_RETAIN_MMAP_B, _RETAIN_TRIM_B = 1 << 30, (1 << 31) - 1
_AFTER_MMAP_B, _AFTER_TRIM_B = 32 << 20, 64 << 20  # glibc's dynamic thresholds at most


@functools.cache
def _libc() -> Any:
    """glibc through ctypes (soname ``libc.so.6``), or None (another C library)."""
    try:
        glibc = sys.platform.startswith("linux") and os.confstr(
            "CS_GNU_LIBC_VERSION") is not None
        return ctypes.CDLL("libc.so.6") if glibc else None
    except (OSError, ValueError):
        return None


def malloc_retain(on: bool) -> bool:
    """glibc's malloc keeps freed memory for reuse (``on``) or is set back; False
    where the C library is not glibc (nothing set).

    The Paraver reader allocates and frees arrays of tens to hundreds of MB one after the other;
    by default glibc maps each one afresh (mmap above its threshold, the heap top trimmed
    on free) and every page of it is faulted in and zeroed again: on a 178 MB trace
    ~510,000 page faults, 1.0-2.5 s of system time (more on a busier machine) for ~1.9 s
    of user time. With mmap threshold 1 GiB and trim threshold 2 GiB - 1 freed arrays
    are reused: ~330,000 faults (the peak RSS, about the same), user + system time
    3.2 -> 2.9 s (mean of 4 reads each, load 4-5 on 2 cores). Off again: mallopt
    cannot give back glibc's dynamic thresholds, so they are set to the most the
    dynamic ones reach (mmap 32 MiB, trim 64 MiB) and the free memory is returned to
    the system (``malloc_trim``). Process-wide: reads in other threads at the same time
    only lose (or share) the reuse; results never depend on it."""
    libc = _libc()
    if libc is None:
        return False
    mmap_b, trim_b = (_RETAIN_MMAP_B, _RETAIN_TRIM_B) if on else (_AFTER_MMAP_B,
                                                                  _AFTER_TRIM_B)
    libc.mallopt(_M_MMAP_THRESHOLD, mmap_b)
    libc.mallopt(_M_TRIM_THRESHOLD, trim_b)
    if not on:
        libc.malloc_trim(0)
    return True
