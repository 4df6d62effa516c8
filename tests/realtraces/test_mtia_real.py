"""HTA's MTIA traces: device events (``mtia_ccp_events``) and runtime launches
(``mtia_runtime``) in the canonical categories, and ``breakdown``, ``kernels``, ``launch``,
``idle`` and ``queue`` against an independent stdlib-json computation.

The reference reads the gz JSON with ``json`` (``Decimal`` times, exact ns) and plain
loops: DMA requests (``args.direction``) are memory, the other device events of this file
are compute kernels; launches are matched by ``args.correlation``. HTA's own test suite
(``tests/test_trace_analysis.py``, ``test_get_mtia_*``) publishes numbers for the same
file; those are checked too, at HTA's precision (it rounds times to 1 us).
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.errors import DataQualityWarning
from traceatlas.model.trace import Trace
from traceatlas.testing.compare import plain_union_length

pytestmark = pytest.mark.realtrace

TRAINING = "hta/mtia_trace_single_rank/mtia_rank_0.json.gz"
INFERENCE = "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"
Span = tuple[int, int]


def _ns(value: Any) -> int:
    return round(Decimal(value) * 1000)


class Reference:
    """The trace read with the standard library."""

    def __init__(self, path: Path) -> None:
        with gzip.open(path, "rt") as fh:
            doc = json.load(fh, parse_float=Decimal)
        self.base_ns = int(doc.get("baseTimeNanoseconds", 0))
        events = doc["traceEvents"]
        self.metadata = sum(1 for e in events if e.get("ph") == "M")
        self.device = [e for e in events
                       if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events"]
        self.runtime = [e for e in events
                        if e.get("ph") == "X" and e.get("cat") == "mtia_runtime"]

    def span(self, e: dict[str, Any]) -> Span:
        start = self.base_ns + _ns(e["ts"])
        return start, start + _ns(e["dur"])

    @staticmethod
    def is_dma(e: dict[str, Any]) -> bool:
        return "direction" in (e.get("args") or {})

    def stream(self, e: dict[str, Any]) -> int:
        """The ``stream`` arg, else the thread id (HTA's fix for memory kernels)."""
        return int(e["args"].get("stream", e["tid"]))

    def launch_by_corr(self) -> dict[int, Span]:
        first: dict[int, Span] = {}
        for e in self.runtime:
            corr = e["args"].get("correlation")
            if corr is not None and (corr not in first or self.span(e) < first[corr]):
                first[corr] = self.span(e)
        return first


@pytest.fixture(scope="module")
def training(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Reference, Trace, list[str]]:
    path = traces_dir / TRAINING
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = traceatlas.ingest(path, tmp_path_factory.mktemp("mtia") / "s")
    messages = [str(w.message) for w in caught if issubclass(w.category, DataQualityWarning)]
    return Reference(path), traceatlas.open(store), messages


def test_metadata_events_are_not_time_outliers(training: tuple[Reference, Trace, list[str]]
                                               ) -> None:
    ref, trace, messages = training
    assert ref.metadata == 310_046  # 310,030 of them at ts 0
    assert not [m for m in messages if "ts 0" in m or "set aside" in m], messages
    meta = trace.metadata.filter(pl.col("key") == "chrome_metadata_events").collect()
    assert len(json.loads(meta["value"][0])) == ref.metadata  # every M event kept
    tracks = trace.tracks.filter(pl.col("kind") == "gpu_stream").collect()
    assert set(tracks["name"]) == {"Stream 1 FW", "Stream 102 FW", "DMA_REQUEST"}  # thread_name


def test_device_events_and_launches_are_categorised(
        training: tuple[Reference, Trace, list[str]]) -> None:
    ref, trace, _ = training
    kinds = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH"}
    expected = Counter(("memcpy", kinds[e["args"]["direction"]], int(e["args"]["size"]))
                       if ref.is_dma(e) else ("kernel", None, None) for e in ref.device)
    rows = trace.intervals.filter(pl.col("source_category") == "mtia_ccp_events").select(
        pl.col("category").cast(pl.String), pl.col("memcpy_kind").cast(pl.String), "bytes",
        "device", "stream").collect()
    assert Counter(zip(rows["category"], rows["memcpy_kind"], rows["bytes"], strict=True)
                   ) == expected
    assert len(ref.device) == 25_814 and expected[("kernel", None, None)] == 3_453
    assert set(rows["device"]) == {9}  # pid 9, "MTIA 9"
    assert Counter(rows["stream"]) == Counter(ref.stream(e) for e in ref.device)
    runtime = trace.intervals.filter(pl.col("source_category") == "mtia_runtime").collect()
    assert runtime.height == len(ref.runtime) == 3_453
    assert set(runtime["category"].cast(pl.String)) == {"runtime"}


def test_breakdown_equals_plain_unions(training: tuple[Reference, Trace, list[str]]) -> None:
    ref, trace, _ = training
    compute = [ref.span(e) for e in ref.device if not ref.is_dma(e)]
    memory = [ref.span(e) for e in ref.device if ref.is_dma(e)]
    every = compute + memory
    span = max(e for _, e in every) - min(s for s, _ in every)
    busy = plain_union_length(every)
    row = analysis.run("breakdown", trace).table.row(0, named=True)
    assert analysis.run("breakdown", trace).table.height == 1
    assert (row["device"], row["span_ns"], row["busy_ns"], row["compute_ns"],
            row["memory_ns"], row["exposed_memory_ns"], row["idle_ns"], row["comm_ns"]) == (
        9, span, busy, plain_union_length(compute), plain_union_length(memory),
        busy - plain_union_length(compute), span - busy, 0)


def test_kernels_totals_equal_sums(training: tuple[Reference, Trace, list[str]]) -> None:
    ref, trace, _ = training
    table = analysis.run("kernels", trace, {"memory": True}).table
    total: dict[str, int] = defaultdict(int)
    count: Counter[str] = Counter()
    for e in ref.device:
        start, end = ref.span(e)
        total[e["name"]] += end - start
        count[e["name"]] += 1
    assert dict(zip(table["name"], table["total_ns"], strict=True)) == dict(total)
    assert dict(zip(table["name"], table["count"], strict=True)) == dict(count)
    kernel_ns = sum(v for k, v in total.items() if k != "dma_request")
    assert table.filter(pl.col("category") == "kernel")["total_ns"].sum() == kernel_ns
    # HTA publishes 7,305,597 us of COMPUTATION (times rounded to 1 us, a few dropped):
    assert abs(kernel_ns / 1000 - 7_305_597) / 7_305_597 < 1e-3


def test_launch_rows_equal_correlation_join(training: tuple[Reference, Trace, list[str]]
                                            ) -> None:
    ref, trace, _ = training
    launches = ref.launch_by_corr()
    expected = {}
    for e in ref.device:
        corr = e["args"].get("correlation")
        if corr in launches:
            (cs, ce), (gs, ge) = launches[corr], ref.span(e)
            expected[corr] = (ce - cs, ge - gs, max(0, gs - ce))
    result = analysis.run("launch", trace)
    got = {r["correlation"]: (r["cpu_launch_ns"], r["gpu_ns"], r["launch_delay_ns"])
           for r in result.table.iter_rows(named=True)}
    assert len(got) == result.table.height == len(expected) == 3_453
    assert got == expected
    assert result.extra["summary"]["launches"].to_list() == [3_453]
    # HTA test_get_mtia_kernel_launch_stats_inference_single_rank (delta 2 us):
    cpu, gpu, delay = got[423]
    assert abs(cpu - 435_200) <= 2_000 and abs(gpu - 124_768) <= 2_000 and delay <= 2_000


def test_idle_equals_span_minus_union_per_stream(
        training: tuple[Reference, Trace, list[str]]) -> None:
    ref, trace, _ = training
    launches = ref.launch_by_corr()
    streams: dict[int, list[tuple[Span, int | None]]] = defaultdict(list)
    for e in ref.device:
        corr = e["args"].get("correlation")
        launch = launches[corr][0] if corr in launches else None
        streams[ref.stream(e)].append((ref.span(e), launch))
    expected = {}
    for stream, items in streams.items():
        spans = [s for s, _ in items]
        span = max(e for _, e in spans) - min(s for s, _ in spans)
        host_wait, prev_end = 0, None
        for (start, end), launch in sorted(items):
            if prev_end is not None and start > prev_end and launch is not None \
                    and launch > prev_end:
                host_wait += start - prev_end
            prev_end = end if prev_end is None else max(prev_end, end)
        expected[stream] = (span - plain_union_length(spans), host_wait)
    table = analysis.run("idle", trace).table
    got = {r["stream"]: (r["idle_ns"], r["host_wait_ns"]) for r in table.iter_rows(named=True)}
    assert got == expected
    assert set(got) == {1, 102, 801}  # HTA's {1, 102} and the DMA thread without a stream
    for r in table.iter_rows(named=True):
        assert r["host_wait_ns"] + r["kernel_wait_ns"] + r["other_ns"] == r["idle_ns"]


def test_queue_matches_launch_counts_and_hta(training: tuple[Reference, Trace, list[str]]
                                             ) -> None:
    ref, trace, _ = training
    launches = ref.launch_by_corr()
    per_stream = Counter(ref.stream(e) for e in ref.device
                         if e["args"].get("correlation") in launches)
    result = analysis.run("queue", trace, {"until": "start", "max_queue": 1})
    got = dict(zip(result.table["stream"], result.table["launches"], strict=True))
    assert got == dict(per_stream) == {1: 3_450, 102: 3}
    # HTA test_get_mtia_queue_length_stats: stream 102 has 6 change points, mean 0.5, max 1;
    # blocked on a full queue (max length 1) for 1,060 us.
    series = result.extra["series"].filter(pl.col("stream") == 102)["queue_length"]
    assert (len(series), series.mean(), series.max()) == (6, 0.5, 1)
    full = result.table.filter(pl.col("stream") == 102)["full_ns"][0]
    assert abs(full - 1_060_000) < 1_000


def test_inference_trace_categories(traces_dir: Path, tmp_path: Path) -> None:
    """The other MTIA trace: stream events (event_record/event_wait) are ``sync``, the
    execution wrapper ``pe_exe`` is ``other``, DMA requests memcpy, the rest kernels."""
    path = traces_dir / INFERENCE
    ref = Reference(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traceatlas.ingest(path, tmp_path / "s"))

    def expected(e: dict[str, Any]) -> str:
        if ref.is_dma(e):
            return "memcpy"
        return {"event_record": "sync", "event_wait": "sync", "pe_exe": "other"}.get(
            e["name"], "kernel")

    rows = trace.intervals.filter(pl.col("source_category") == "mtia_ccp_events").select(
        pl.col("name").cast(pl.String), pl.col("category").cast(pl.String)).collect()
    assert Counter(zip(rows["name"], rows["category"], strict=True)) == Counter(
        (e["name"], expected(e)) for e in ref.device)
    per_device: dict[Any, list[Span]] = defaultdict(list)
    for e in ref.device:
        if expected(e) in ("memcpy", "kernel"):
            per_device[e["pid"]].append(ref.span(e))
    table = analysis.run("breakdown", trace).table
    assert dict(zip(table["device"], table["busy_ns"], strict=True)) == {
        int(pid): plain_union_length(spans) for pid, spans in per_device.items()}
