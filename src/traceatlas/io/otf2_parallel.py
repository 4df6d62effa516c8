"""Reading an OTF2 archive's locations in worker processes (the ingest's ``LocalEngine``).

Each worker reads a run of consecutive locations (``otf2_raw.read_part``: its own
definitions, raw callbacks into arrays) and returns the arrays; the parent concatenates
them in location order (``otf2_raw.merge``), so ``otf2_fast.build`` sees exactly what one
serial pass gives. The engine is the one ingest uses (spawned processes that unwind on
SIGTERM, a dead worker reported as ``EngineError``); ``threads`` is the share of cores
the ingest gives this source, so several sources ingested at once do not oversubscribe.
"""

from __future__ import annotations

from traceatlas.io.otf2_raw import PartJob, RawEvents, merge, read_part

PARALLEL_MIN_EVENTS = 2_000_000
"""Below this many events the serial pass is as fast (worker start-up, ~0.5 s of CPU each
on this machine, and the pickled arrays' copy): see bench/results_otf2.json."""

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
                  threads: int) -> RawEvents:
    """Every location's events, read by up to ``threads`` worker processes."""
    from traceatlas.engine.local import LocalEngine

    runs = split(refs, sizes, threads * PARTS_PER_WORKER)
    engine = LocalEngine(max_workers=threads)
    try:
        parts = engine.map(read_part, [PartJob(anchor, tuple(run)) for run in runs])
    finally:
        engine.close()
    return merge(parts)
