"""Records of the viewer's pyramid: a track (``TrackInfo``), one track's bins (``TrackTiles``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class TrackInfo:
    """One viewer row. ``id`` is its index in ``Pyramid.tracks``.

    ``kind``: the store's kind (host_thread | gpu_stream | device | counter | other) or a
    synthetic per-rank row (``rank_device``: union of the rank's gpu_stream/device tracks;
    ``rank_host``: union of its host threads), whose ``track_id`` is None. ``events``:
    intervals on it; ``finest_level``: the finest level stored (finer: raw events);
    ``series``: counter names (counter rows index this list).
    """

    id: int
    rank: int
    track_id: int | None
    name: str
    kind: str
    device: int
    stream: int
    events: int
    max_depth: int
    finest_level: int
    series: list[str] = field(default_factory=list)


@dataclass
class TrackTiles:
    """Bins of one track in a window. ``level``: the level used (max of the one asked and
    the track's finest); ``bin_ns``: its bin width; ``raw``: the level asked was finer than
    the finest stored (ask ``/api/events`` for this track); ``table``: the bin rows
    (intervals: bin, cat, busy_ns, count, name; counters: bin, series, min, mean, max,
    count), a zero-copy slice of the memory-mapped level file."""

    id: int
    level: int
    bin_ns: int
    raw: bool
    table: pa.Table
