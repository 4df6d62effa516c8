"""Reading an OTF2 archive's locations in worker processes (the ingest's ``LocalEngine``).

Each worker reads a run of consecutive locations (``otf2_local.read_part``: its own
definitions, raw callbacks into arrays, then the per-location pairing on numpy) and returns
a ``LocalPart``; the parent hands the parts, in location order, to ``otf2_fast.build``,
which takes one part (the serial pass) or several the same way. The engine is the one
ingest uses (spawned processes that unwind on SIGTERM, a dead worker reported as
``EngineError``); ``threads`` is the share of cores the ingest gives this source, so
several sources ingested at once do not oversubscribe.
"""

from __future__ import annotations

import os

from traceatlas.io.otf2_local import LocalPart, PartJob, read_part

PARALLEL_MIN_EVENTS = 2_000_000
"""Below this many events the serial pass is faster: two workers cost ~1-2 s of CPU more
(start-up ~0.4 s each, definitions read per part, the parts pickled back); measured in
bench/results_otf2.json (230 k events: parallel 4x slower; 10 M: no gain on a loaded
machine)."""

IDLE_CORES = 1.0
"""Workers only pay when the cores are not already busy: the 1-minute load average must
leave at least this many cores idle (on a busy machine the parallel read was slower)."""


def worth_it(threads: int) -> bool:
    """Whether reading in ``threads`` workers can gain: an idle core (load average)."""
    cores = os.cpu_count() or 1
    return os.getloadavg()[0] <= cores - IDLE_CORES

PARTS_PER_WORKER = 2
"""Runs of locations per worker, for balance when location sizes differ."""


def split(refs: list[int], sizes: list[int], parts: int) -> list[list[int]]:
    """Consecutive runs of ``refs`` with about equal event counts (at most ``parts``, none
    empty): run k starts at the first location with at least ``k * total / parts`` events
    before it."""
    total = sum(sizes)
    out: list[list[int]] = [[]]
    done = 0
    for ref, size in zip(refs, sizes, strict=True):
        if out[-1] and len(out) < parts and done >= total * len(out) / parts:
            out.append([])
        out[-1].append(ref)
        done += size
    return out


def read_parallel(anchor: str, refs: list[int], sizes: list[int],
                  threads: int) -> list[LocalPart]:
    """Every location's events, read and paired by up to ``threads`` worker processes;
    the parts in location order."""
    from traceatlas.engine.local import LocalEngine

    runs = split(refs, sizes, threads * PARTS_PER_WORKER)
    engine = LocalEngine(max_workers=threads)
    try:
        parts = engine.map(read_part, [PartJob(anchor, tuple(run)) for run in runs])
    finally:
        engine.close()
    return parts
