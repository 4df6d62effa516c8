"""Open an OTF2 archive once in a child process before this process opens it.

The OTF2 C library ends the process (``abort()``) on some damaged anchor or definitions
files instead of returning an error (the fuzz test of byte flips found one in CI). The
child opens the archive with the ``otf2`` wheel (anchor and global definitions, what
``otf2.reader.Reader`` reads on opening); when a signal ends it, the archive is refused
with ``CorruptTraceError`` before this process can be taken down. Any other failure is
left to the reader's own open, which names it. Cost: one interpreter start and the
``otf2`` import (~0.2 s) per archive.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from traceatlas.errors import CorruptTraceError

_OPEN = "import sys, otf2; otf2.reader.Reader(sys.argv[1]).close()"
TIMEOUT_S = 120.0
"""Seconds the child may take to open the archive (definitions of a huge run included)."""


def check_opens(display: str, anchor: str) -> None:
    """Raise ``CorruptTraceError`` naming ``display`` when opening ``anchor`` with the
    OTF2 library kills the process that does it (a signal: abort, segmentation fault)."""
    try:
        done = subprocess.run([sys.executable, "-c", _OPEN, anchor], capture_output=True,
                              timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise CorruptTraceError(display, f"the OTF2 library did not open the archive in "
                                f"{TIMEOUT_S:.0f} s") from None
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        raise CorruptTraceError(display, f"the OTF2 library crashed ({name}) opening the "
                                "archive: a damaged anchor or definitions file")
