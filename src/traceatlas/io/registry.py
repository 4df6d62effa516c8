"""Reader registry: format name -> reader, and detection of a file's format."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Protocol

from traceatlas.errors import UnsupportedFormatError
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source


class Reader(Protocol):
    """What a reader provides. One reader per module in ``traceatlas.io``."""

    name: str
    description: str

    def sniff(self, head: bytes, source: Source) -> bool:
        """True when ``head`` (the first decompressed bytes) looks like this format."""
        ...

    def read(self, source: Source, *, threads: int) -> list[RankData]:
        """Parse one source into canonical tables, one ``RankData`` per rank it holds.

        A Kineto file holds one rank; an OTF2 archive, a Paraver trace or an nsys report
        of several processes hold several. Times are integer ns; when the source gives an
        absolute session start they are on the unix epoch (``RankData.clock`` says).
        """
        ...


READERS: Mapping[str, str] = {
    # before kineto, whose sniff takes any JSON array or object
    "memory-timeline": "traceatlas.io.memory_timeline:MemoryTimelineReader",
    "kineto": "traceatlas.io.kineto:KinetoReader",
    "nsys": "traceatlas.io.nsys:NsysReader",
    "nsys-nvtx-csv": "traceatlas.io.nsys_nvtx_csv:NsysNvtxCsvReader",
    "paraver": "traceatlas.io.paraver:ParaverReader",
    "otf2": "traceatlas.io.otf2:Otf2Reader",
}
"""Format name -> ``module:Class``; imported lazily on first use."""


def get_reader(name: str) -> Reader:
    """Instantiate the reader registered under ``name``."""
    module_name, _, cls_name = READERS[name].partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    reader: Reader = cls()
    return reader


def detect(source: Source) -> Reader:
    """The first registered reader that recognises the file; a clear error otherwise."""
    head = source.head()
    if not head.strip():
        raise UnsupportedFormatError(
            source.display, "empty file" if not head else "file holds only whitespace"
        )
    reader = sniff(head, source)
    if reader is not None:
        return reader
    known = ", ".join(READERS)
    raise UnsupportedFormatError(
        source.display, f"not a recognised trace format (readers tried: {known})"
    )


def sniff(head: bytes, source: Source) -> Reader | None:
    """The first registered reader whose ``sniff`` takes ``head``; None when none does."""
    for name in READERS:
        reader = get_reader(name)
        if reader.sniff(head, source):
            return reader
    return None
