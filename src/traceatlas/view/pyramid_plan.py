"""The viewer tracks of one rank: order, synthetic rank rows, finest level of each.

Order within a rank: ``rank_device`` (union of its gpu_stream/device tracks), the
devices/streams (each device's counters, e.g. its memory curves, after its streams),
``rank_host`` (union of its host threads), the host threads, other tracks, host
counters. Ids are local (0..); the builder shifts them by the tracks of the ranks before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceatlas.view.pyramid_bins import finest_level
from traceatlas.view.pyramid_types import TrackInfo

if TYPE_CHECKING:
    import polars as pl

DEVICE_KINDS = ("gpu_stream", "device")
HOST_KINDS = ("host_thread",)
_KIND_ORDER = {"gpu_stream": 1, "device": 1, "host_thread": 3, "other": 4, "counter": 5}
_AFTER_STREAMS = 2**62
"""Sort key placing a device's counters (memory, metrics) after its streams."""


def plan_rank(rank: int, tracks: pl.DataFrame, istats: pl.DataFrame, cstats: pl.DataFrame,
              origin: int, top: int) -> list[TrackInfo]:
    """Every viewer track of ``rank`` from its tracks table (track_id, kind, name, device,
    stream), interval stats (track_id, n, first, last, depth) and counter stats
    (track_id, n, first, last, series); ``origin``: the pyramid's origin (ns)."""
    import polars as pl

    key = ["track_id"]
    merged = tracks.join(istats, on=key, how="full", coalesce=True).join(
        cstats.rename({"n": "cn", "first": "cfirst", "last": "clast"}), on=key, how="full",
        coalesce=True)
    merged = merged.with_columns(
        pl.col("kind").fill_null("other"), pl.col("device").fill_null(-1),
        pl.col("stream").fill_null(-1), pl.col("n").fill_null(0), pl.col("cn").fill_null(0),
        pl.col("depth").fill_null(0),
    ).with_columns(
        pl.when(pl.col("n") == 0).then(pl.col("cn") > 0).otherwise(False).alias("is_counter"),
    )
    rows = merged.to_dicts()

    def order(row: dict[str, Any]) -> tuple[int, int, int, int]:
        kind = "counter" if row["is_counter"] else row["kind"]
        if kind == "counter" and row["device"] >= 0:  # e.g. "GPU 0 memory allocated"
            return (_KIND_ORDER["gpu_stream"], row["device"], _AFTER_STREAMS, row["track_id"])
        return (_KIND_ORDER.get(kind, 4), row["device"], row["stream"], row["track_id"])

    rows.sort(key=order)
    for synthetic, kinds, label in (("rank_device", DEVICE_KINDS, "devices"),
                                     ("rank_host", HOST_KINDS, "host")):
        members = [r for r in rows if r["kind"] in kinds and not r["is_counter"]]
        if members:
            n = sum(r["n"] for r in members)
            fin = finest_level(n, min((r["first"] or 0) for r in members) - origin,
                               max((r["last"] or 0) for r in members) - origin, top)
            insert = next(i for i, r in enumerate(rows) if r is members[0])
            rows.insert(insert, {"synthetic": synthetic, "kind": synthetic,
                                 "is_counter": False, "n": n, "fin": fin,
                                 "label": f"rank {rank} {label}",
                                 "depth": max(r["depth"] for r in members)})
    out: list[TrackInfo] = []
    for row in rows:
        if "synthetic" in row:
            out.append(TrackInfo(len(out), rank, None, row["label"], row["synthetic"], -1,
                                 -1, row["n"], int(row["depth"]), row["fin"], []))
            continue
        if row["n"] > 0:
            fin = finest_level(row["n"], row["first"] - origin, row["last"] - origin, top)
        elif row["cn"] > 0:
            fin = finest_level(row["cn"], row["cfirst"] - origin, row["clast"] - origin, top)
        else:
            fin = top
        name = row["name"] if row["name"] is not None else f"track {row['track_id']}"
        kind = "counter" if row["is_counter"] and row["kind"] == "other" else row["kind"]
        out.append(TrackInfo(len(out), rank, int(row["track_id"]), str(name), str(kind),
                             int(row["device"]), int(row["stream"]), int(row["n"]),
                             int(row["depth"]), fin, list(row["series"] or [])))
    return out
