"""What a reader returns for one rank."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class RankData:
    """Canonical tables of one rank of a source, plus what the reader learned.

    ``rank`` is None when the file does not say; ``rank_source`` tells where it came
    from (``distributedInfo``, ``file name``, ``MPI_RANKS``, ``OTF2 location group``...).
    ``clock`` records how times were put on the common clock: ``method`` (the evidence,
    e.g. ``baseTimeNanoseconds``, ``TARGET_INFO_SESSION_START_TIME``; a method starting
    with ``none`` means no absolute start was found), ``base_ns`` (ns added to the
    source's own times) and ``offset_ns`` (0 from readers; set by alignment).
    """

    tables: dict[str, pa.Table]
    source_format: str
    rank: int | None = None
    rank_source: str | None = None
    clock: dict[str, object] = field(default_factory=dict)
    world_size: int | None = None
    host: str | None = None
