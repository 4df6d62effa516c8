"""Rank assignment across the files of one trace."""

from __future__ import annotations

import warnings

from traceatlas.errors import RankConflictError, RankInferredWarning
from traceatlas.ingest.partition import PartitionResult


def assign_ranks(results: list[PartitionResult]) -> dict[tuple[int, int], int]:
    """Partition key -> rank.

    Declared ranks (``distributedInfo`` or file name) are kept; two files with the same
    rank are an error. Files without one take the next free rank, with a warning.
    """
    owner: dict[int, PartitionResult] = {}
    for res in results:
        if res.rank is None:
            continue
        if res.rank in owner:
            other = owner[res.rank]
            raise RankConflictError(
                res.source.display,
                f"rank {res.rank} ({res.rank_source}) is also claimed by "
                f"{other.source.display}; pass the files of one run only",
            )
        owner[res.rank] = res
    ranks = {res.key: res.rank for res in results if res.rank is not None}
    free = 0
    for res in results:
        if res.rank is not None:
            continue
        while free in owner:
            free += 1
        owner[free] = res
        ranks[res.key] = free
        warnings.warn(
            f"{res.source.display}: {missing_rank(res)}; assigned rank {free}",
            RankInferredWarning,
            stacklevel=3,
        )
    return ranks


MISSING_RANK = {
    "kineto": "no rank in distributedInfo or the file name",
    "nsys": "no MPI rank for process {n} of the export (no MPI_RANKS table, no thread named "
            "'MPI Rank N'; processes are numbered in the order of their id)",
    "nsys-nvtx-csv": "an nsys stats CSV carries no rank",
}
"""Per source format: where a rank was looked for and not found."""


def missing_rank(res: PartitionResult) -> str:
    """Why the rank of ``res`` is unknown, in the words of its format."""
    text = MISSING_RANK.get(res.source_format, "the file does not say its rank")
    return text.format(n=res.sub + 1)
