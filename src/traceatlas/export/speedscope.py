"""speedscope JSON (https://www.speedscope.app/file-format-schema.json) from the CCT.

One ``sampled`` profile per rank, host thread and time kind: each context with a non-zero
exclusive value is a sample whose stack is its path of frames (outermost first) and whose
weight is that value in nanoseconds (``unit: "nanoseconds"``, ``startValue`` 0,
``endValue`` the sum of the weights). ``host`` profiles weigh host exclusive time;
``device`` profiles (only where the thread launched device work) weigh the device time of
the kernels, memcpys and memsets under each launch call. Each thread's own call stacks
(backward threads are not moved under their forward context here, so a profile never
mixes threads). Frames are shared between profiles, one per distinct name; names are JSON
strings (any character is kept).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from traceatlas import tempfiles

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
KINDS = {"host": "host_exclusive_ns", "device": "device_exclusive_ns"}


def speedscope_document(trace: Trace, name: str = "traceatlas") -> dict[str, Any]:
    """The speedscope file as a dict (see the module doc)."""
    import polars as pl

    from traceatlas.ops.cct import ancestors, build_cct

    cct = build_cct(trace, by_thread=True, link_threads=False)
    nodes = cct.nodes
    frame_names = nodes.filter(pl.col("depth") > 0)["name"].unique(maintain_order=True)
    frame_of = {n: i for i, n in enumerate(frame_names.to_list())}
    node_frame = nodes.select("node_id", pl.col("name").replace_strict(
        frame_of, default=-1, return_dtype=pl.Int64).alias("_frame"), "depth")
    stacks = (ancestors(nodes).join(node_frame.rename({"node_id": "ancestor_id"}),
                                    on="ancestor_id")
              .filter(pl.col("depth") > 0).sort("depth").group_by("node_id")
              .agg(pl.col("_frame").alias("_stack")))
    threads = trace.tracks.select("rank", "track_id", pl.col("name").alias("_thread")).collect()
    rows = (cct.metrics.join(stacks, on="node_id", how="inner")
            .join(threads, on=["rank", "track_id"], how="left")
            .sort("rank", "track_id", "node_id"))
    profiles: list[dict[str, Any]] = []
    for (rank, track, thread), part in rows.group_by(["rank", "track_id", "_thread"],
                                                     maintain_order=True):
        for kind, column in KINDS.items():
            used = part.filter(pl.col(column) > 0)
            if used.height == 0:
                continue
            weights = used[column].to_list()
            label = thread if thread is not None else f"track {track}"
            profiles.append({
                "type": "sampled", "name": f"rank {rank} / {label} / {kind} time",
                "unit": "nanoseconds", "startValue": 0, "endValue": sum(weights),
                "samples": used["_stack"].to_list(), "weights": weights})
    return {"$schema": SCHEMA, "shared": {"frames": [{"name": n} for n in frame_of]},
            "profiles": profiles, "name": name, "activeProfileIndex": 0,
            "exporter": "traceatlas"}


class SpeedscopeExporter:
    """speedscope JSON: sampled profiles per rank, thread and host/device time."""

    name = "speedscope"
    description = "speedscope JSON of the calling-context tree (per rank and thread)"

    def write(self, trace: Trace, out: Path) -> list[Path]:
        """Write the speedscope file of ``trace`` to ``out`` atomically."""
        doc = speedscope_document(trace, name=Path(out).name)
        target = tempfiles.replaceable_file(Path(out))
        tempfiles.write_text_atomic(target, orjson.dumps(doc).decode())
        return [Path(out)]
