"""The worker's view of a store for one batch of ranks (``analysis.partitioned``).

``rank_view``: the client's selections plus ``Selection(ranks=batch)`` (every table by
rank; a message is kept when either side is in the batch).

``message_view``: the same for every table but ``messages``, which is read from the
batch's own parts only (a message row lives in one rank's part: the sender's in every
reader here) and filtered by the client's selections alone. Each message is then seen by
exactly one batch when the batches cover every rank of the store, so partial counts add
up without double counting.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from traceatlas.model.trace import Trace, scan_parts

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.ops.select import Selection


def rank_view(base: Trace, client: tuple[Selection, ...], batch: tuple[int, ...]) -> Trace:
    """``base`` (no selections) with the client's selections and the batch's ranks."""
    from traceatlas.ops.select import Selection

    view = copy.copy(base)
    view.selections = (*client, Selection(ranks=batch))
    return view


class MessageOwnerView(Trace):
    """A batch's view whose ``messages`` are the rows stored in the batch's parts."""

    client: tuple[Selection, ...]
    owners: frozenset[int]

    def scan(self, table: str) -> pl.LazyFrame:
        """As ``Trace.scan``; ``messages``: the owners' parts, the client's selections."""
        if table != "messages":
            return super().scan(table)
        frame = scan_parts(self.path, table, self.owners)
        for sel in self.client:
            frame = sel.apply(frame, table)
        return frame


def message_view(base: Trace, client: tuple[Selection, ...],
                 batch: tuple[int, ...]) -> Trace:
    """``rank_view`` whose messages are those stored in ``batch``'s parts."""
    from traceatlas.ops.select import Selection

    view = MessageOwnerView.__new__(MessageOwnerView)
    view.path, view.manifest = base.path, base.manifest
    view.selections = (*client, Selection(ranks=batch))
    view.client = client
    view.owners = frozenset(batch)
    return view


def widened(view: Trace, ranks: set[int]) -> Trace:
    """A ``message_view`` whose tables other than ``messages`` also cover ``ranks`` (the
    peers of its messages); any other view unchanged."""
    if not isinstance(view, MessageOwnerView):
        return view
    from traceatlas.ops.select import Selection

    wide = copy.copy(view)
    wide.selections = (*view.client, Selection(ranks=tuple(sorted(view.owners | ranks))))
    return wide
