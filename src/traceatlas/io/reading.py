"""What a reader returns for one rank."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class RankData:
    """Canonical tables of one source file (one rank) plus what the reader learned.

    ``rank`` is None when the file does not say; ``rank_source`` tells where it came
    from (``distributedInfo``, ``file name``). ``clock`` records how times were put on
    the common clock (method and base offset in ns).
    """

    tables: dict[str, pa.Table]
    source_format: str
    rank: int | None = None
    rank_source: str | None = None
    clock: dict[str, object] = field(default_factory=dict)
    world_size: int | None = None
    host: str | None = None
