"""Every real Kineto / Chrome-trace JSON file, ingested alone, against counts taken
independently from the file with the standard library (``json``/``gzip``).

Expectations, per file:

* intervals: one per ``ph == "X"`` event that has ``ts`` and ``dur``. The whole-trace
  envelope event (``cat == "Trace"``, e.g. ``PyTorch Profiler (0)``) is *kept*, as
  category ``other``, so the interval count equals the X count (the envelope is not
  subtracted). No real file has an X event without ``ts``/``dur`` (checked below).
* device kernels: ``cat`` in {kernel, Kernel} -> intervals of category kernel or
  comm_kernel; comm_kernel are those whose name matches ``nccl|rccl`` (any case).
* memcpy: ``cat`` in {gpu_memcpy, Memcpy}; memset: ``cat`` in {gpu_memset, Memset}.
* MTIA ``mtia_ccp_events``: DMA requests (``args.direction``) are memcpy, the stream events
  and wrappers of HTA's files (event_record, event_wait, pe_exe) neither, the rest kernels.
* rocprof v1 (events without ``cat``): kernels are the X events on a process named
  ``GPU<n>`` by a ``process_name`` metadata event, memcpy those on the process ``COPY``.
* every interval has ``end_ns >= start_ns``; the rank is ``distributedInfo.rank`` when
  the file has one (otherwise a DataQualityWarning says the rank was inferred).

Files that are not profiler traces (Chakra execution traces ``*_et.json.gz``) must be
rejected with UnsupportedFormatError / CLI exit 2 (HTA's ``memory_timeline.raw.gz`` is
read by its own reader: ``test_memory_readers_real.py``).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.engine import LocalEngine

pytestmark = pytest.mark.realtrace

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"

NCCL = re.compile(r"nccl|rccl", re.IGNORECASE)
KERNEL_CATS = frozenset({"kernel", "Kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "Memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "Memset"})
GPU_PROCESS = re.compile(r"GPU\s*\d+")


def _is_trace_name(name: str) -> bool:
    return name.endswith((".json", ".json.gz"))


def _kineto_files() -> list[str]:
    """Relative paths of every Kineto Chrome-trace file the brief lists."""
    if not TRACES.is_dir():
        return []
    found: list[Path] = []
    found += [
        p for p in (TRACES / "hta").rglob("*")
        if _is_trace_name(p.name) and not p.name.endswith("_et.json.gz")
    ]
    for sub in ("tracelens/traces/h100", "tracelens/traces/mi300"):
        found += (TRACES / sub).glob("*.json.gz")
    found += [p for p in (TRACES / "kineto-tb_plugin").rglob("*") if _is_trace_name(p.name)]
    found += (TRACES / "param-et_replay").glob("*_kineto.json.gz")
    found += (TRACES / "otf2_cli_chrome_trace_converter").glob("*.json.gz")
    found += (TRACES / "torch-cpu-gloo").glob("*.json.gz")
    return sorted(str(p.relative_to(TRACES)) for p in found if p.is_file())


def _non_profiler_files() -> list[str]:
    """Files that look like JSON but are not profiler traces."""
    if not TRACES.is_dir():
        return []
    found = [*(TRACES / "hta").rglob("*_et.json.gz"), *(TRACES / "param-et_replay").glob(
        "*_et.json.gz"
    )]
    # memory_timeline.raw.gz has its own reader (io/memory_timeline.py, issue 19)
    return sorted(str(p.relative_to(TRACES)) for p in found if p.is_file())


KINETO_FILES = _kineto_files()
NON_PROFILER_FILES = _non_profiler_files()
_MISSING = [pytest.param("<traces missing>", id="traces-missing")]


@dataclass(frozen=True)
class Expected:
    """Counts taken from the JSON with the standard library only."""

    x_events: int
    x_events_all: int
    envelope: int
    kernels: int
    comm_kernels: int
    memcpy: int
    memset: int
    rank: int | None


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc


def _expected(doc: dict[str, Any]) -> Expected:
    events = doc["traceEvents"]
    process_names = {
        str(e.get("pid")): (e.get("args") or {}).get("name") or ""
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }

    def device_kind(event: dict[str, Any]) -> str | None:
        cat = event.get("cat")
        if cat is None:  # rocprof v1: the process name says what runs there
            process = process_names.get(str(event.get("pid")), "")
            if GPU_PROCESS.fullmatch(process):
                return "kernel"
            return "memcpy" if process == "COPY" else None
        if cat in KERNEL_CATS:
            return "kernel"
        if cat in MEMCPY_CATS:
            return "memcpy"
        if cat in MEMSET_CATS:
            return "memset"
        if cat == "mtia_ccp_events":  # MTIA: DMA requests (a direction) are memcpy;
            if "direction" in (event.get("args") or {}):  # stream events and
                return "memcpy"  # wrappers are not kernels (test_mtia_real.py)
            return None if event.get("name") in ("event_record", "event_wait", "pe_exe") \
                else "kernel"
        return None

    x_all = [e for e in events if e.get("ph") == "X"]
    x = [e for e in x_all if e.get("ts") is not None and e.get("dur") is not None]
    kinds = [device_kind(e) for e in x]
    kernels = [e for e, k in zip(x, kinds, strict=True) if k == "kernel"]
    dist = doc.get("distributedInfo")
    rank = dist.get("rank") if isinstance(dist, dict) else None
    return Expected(
        x_events=len(x),
        x_events_all=len(x_all),
        envelope=sum(1 for e in x if e.get("cat") == "Trace"),
        kernels=len(kernels),
        comm_kernels=sum(1 for e in kernels if NCCL.search(str(e.get("name") or ""))),
        memcpy=kinds.count("memcpy"),
        memset=kinds.count("memset"),
        rank=int(rank) if rank is not None else None,
    )


@dataclass
class Ingested:
    trace: traceatlas.Trace
    summary: dict[str, Any]
    warnings: list[warnings.WarningMessage]


class _Cache:
    """Expectations and stores, computed once per file for the whole module."""

    def __init__(self, root: Path, factory: pytest.TempPathFactory) -> None:
        self.root = root
        self.factory = factory
        self.expected: dict[str, Expected] = {}
        self.ingested: dict[str, Ingested] = {}

    def expect(self, rel: str) -> Expected:
        if rel not in self.expected:
            self.expected[rel] = _expected(_load(self.root / rel))
        return self.expected[rel]

    def ingest(self, rel: str) -> Ingested:
        if rel not in self.ingested:
            out = self.factory.mktemp("kineto-real") / "store"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                store = traceatlas.ingest(
                    self.root / rel, out, engine=LocalEngine(max_workers=1)
                )
            trace = traceatlas.Trace(store)
            self.ingested[rel] = Ingested(trace, traceatlas.summarize(trace), list(caught))
        return self.ingested[rel]


@pytest.fixture(scope="module")
def cache(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> _Cache:
    return _Cache(traces_dir, tmp_path_factory)


def test_every_source_group_is_found(traces_dir: Path) -> None:
    """Guard against a silently shrinking parametrization."""
    groups = {
        "hta/": 25,
        "tracelens/traces/h100/": 5,
        "tracelens/traces/mi300/": 6,
        "kineto-tb_plugin/": 5,
        "param-et_replay/": 2,
        "otf2_cli_chrome_trace_converter/": 1,
        "torch-cpu-gloo/": 2,
    }
    for prefix, minimum in groups.items():
        n = sum(1 for f in KINETO_FILES if f.startswith(prefix))
        assert n >= minimum, f"{prefix}: {n} Kineto files found, expected >= {minimum}"
    assert len(NON_PROFILER_FILES) >= 3  # Chakra ETs (the memory timeline has a reader)


@pytest.mark.parametrize("rel", KINETO_FILES or _MISSING)
def test_interval_count_equals_x_events(cache: _Cache, rel: str) -> None:
    exp = cache.expect(rel)
    got = cache.ingest(rel)
    assert exp.x_events == exp.x_events_all, "an X event lacks ts or dur; recheck the rule"
    assert got.summary["source_format"] == "kineto"
    assert got.summary["intervals"] == exp.x_events
    # The envelope ("Trace" category) is kept, as category "other".
    envelope = (
        got.trace.intervals.filter(pl.col("source_category").cast(pl.String) == "Trace")
        .select(pl.col("category").cast(pl.String))
        .collect()
    )
    assert envelope.height == exp.envelope
    assert set(envelope["category"]) <= {"other"}


@pytest.mark.parametrize("rel", KINETO_FILES or _MISSING)
def test_device_counts(cache: _Cache, rel: str) -> None:
    exp = cache.expect(rel)
    by_cat = cache.ingest(rel).summary["by_category"]
    got = {
        "kernel+comm_kernel": by_cat.get("kernel", 0) + by_cat.get("comm_kernel", 0),
        "comm_kernel": by_cat.get("comm_kernel", 0),
        "memcpy": by_cat.get("memcpy", 0),
        "memset": by_cat.get("memset", 0),
    }
    want = {
        "kernel+comm_kernel": exp.kernels,
        "comm_kernel": exp.comm_kernels,
        "memcpy": exp.memcpy,
        "memset": exp.memset,
    }
    assert got == want


@pytest.mark.parametrize("rel", KINETO_FILES or _MISSING)
def test_intervals_well_formed(cache: _Cache, rel: str) -> None:
    trace = cache.ingest(rel).trace
    bad = (
        trace.intervals.filter(
            pl.col("end_ns").is_null()
            | pl.col("start_ns").is_null()
            | (pl.col("end_ns") < pl.col("start_ns"))
        )
        .select(pl.len())
        .collect()
        .item()
    )
    assert bad == 0


@pytest.mark.parametrize("rel", KINETO_FILES or _MISSING)
def test_rank(cache: _Cache, rel: str) -> None:
    exp = cache.expect(rel)
    got = cache.ingest(rel)
    assert len(got.trace.ranks) == 1
    if exp.rank is not None:
        assert got.trace.ranks == [exp.rank]
    else:
        # Inferred (file name or next free rank): must be said, as a DataQualityWarning
        # (RankInferredWarning is a subclass).
        categories = [w.category for w in got.warnings]
        assert any(issubclass(c, traceatlas.DataQualityWarning) for c in categories), categories


@pytest.mark.parametrize("rel", NON_PROFILER_FILES or _MISSING)
def test_non_profiler_json_is_rejected(traces_dir: Path, tmp_path: Path, rel: str) -> None:
    path = traces_dir / rel
    out = tmp_path / "store"
    with pytest.raises(traceatlas.UnsupportedFormatError) as info:
        traceatlas.ingest(path, out, engine=LocalEngine(max_workers=1))
    assert str(path) in str(info.value)
    assert not out.exists()

    proc = subprocess.run(
        [sys.executable, "-m", "traceatlas.cli.main", "ingest", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and str(path) in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
