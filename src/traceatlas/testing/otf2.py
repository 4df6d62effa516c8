"""Small OTF2 archives from a list of calls, for tests: one MPI rank per key, regions
named ``MPI_*`` are MPI calls, the others user functions; optional kernels on one CUDA
stream of rank 0. Times are ns (1 tick = 1 ns, written at ``1000 + t``). The archive's
realtime timestamp is the current time, as ``otf2.writer`` sets it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import otf2  # type: ignore[import-untyped]
from otf2.enums import (  # type: ignore[import-untyped]
    GroupType,
    LocationGroupType,
    LocationType,
    Paradigm,
    RegionRole,
)


def write_otf2(root: Path, calls: Mapping[int, Sequence[tuple[str, int, int]]],
               gpu: Sequence[tuple[str, int, int]] = ()) -> Path:
    """One MPI rank per key of ``calls`` ((name, start, end) in ns; 1 tick = 1 ns,
    written at 1000 + t); names starting with MPI_ are MPI regions; ``gpu``: kernels on
    a CUDA stream of rank 0."""
    with otf2.writer.open(str(root), timer_resolution=1_000_000_000) as trace:
        d = trace.definitions
        node = d.system_tree_node("node0", class_name="node")
        groups = {r: d.location_group(f"MPI Rank {r}", system_tree_parent=node) for r in calls}
        locs = {r: d.location("Master thread", group=g) for r, g in groups.items()}
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI,
                members=list(locs.values()))
        regions: dict[str, Any] = {}

        def region(name: str, paradigm: Any = None) -> Any:
            if name not in regions:
                mpi = name.startswith("MPI_")
                regions[name] = d.region(
                    name, paradigm=paradigm or (Paradigm.MPI if mpi else Paradigm.USER),
                    region_role=(RegionRole.KERNEL if paradigm is Paradigm.CUDA else
                                 RegionRole.POINT2POINT if mpi else RegionRole.FUNCTION))
            return regions[name]

        for r, rows in calls.items():
            events = sorted([(s, 1, -e, "enter", n) for n, s, e in rows]
                            + [(e, 0, -s, "leave", n) for n, s, e in rows])
            w = trace.event_writer_from_location(locs[r])
            for t, _, _, kind, name in events:
                getattr(w, kind)(1000 + t, region(name))
        if gpu:
            ctx = d.location_group("CUDA Context 0", system_tree_parent=node,
                                   location_group_type=LocationGroupType.ACCELERATOR,
                                   creating_location_group=groups[0])
            wg = trace.event_writer_from_location(
                d.location("CUDA[0:7]", group=ctx, type=LocationType.GPU))
            for t, _, _, kind, name in sorted([(s, 1, -e, "enter", n) for n, s, e in gpu]
                                              + [(e, 0, -s, "leave", n) for n, s, e in gpu]):
                getattr(wg, kind)(1000 + t, region(name, Paradigm.CUDA))
    return root / "traces.otf2"
