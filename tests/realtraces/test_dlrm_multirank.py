"""Multi-rank real traces: the 8-rank NCCL DLRM archive (one input: the tar itself) and
the 2-rank CPU-only gloo directory. Expectations come from the members / files, read
independently with ``tarfile``/``gzip``/``json``."""

from __future__ import annotations

import gzip
import json
import re
import tarfile
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas

pytestmark = pytest.mark.realtrace

DLRM = "param-et_replay/dlrm_kineto.tar.gz"
GLOO = "torch-cpu-gloo"
NCCL_PER_RANK = 8  # SOURCES.md: 8 NCCL kernels on each rank (all_to_all + all_reduce)
DEVICE_CATEGORIES = ("kernel", "comm_kernel", "memcpy", "memset", "gpu_annotation")


@dataclass(frozen=True)
class RankExpected:
    member: str
    kernels: int
    nccl_kernels: int
    x_events: int
    # ac2g flow id -> (start ts in us, end ts in us) for ids with both a start and an end
    paired: dict[str, tuple[float, float]]
    ac2g_ids: frozenset[str]


def _rank_expected(name: str, doc: dict[str, Any]) -> tuple[int, RankExpected]:
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    flows = [e for e in events if e.get("cat") == "ac2g" and e.get("ph") in ("s", "f", "t")]
    per_id: dict[str, dict[str, list[float]]] = {}
    for e in flows:
        side = "s" if e["ph"] == "s" else "f"
        per_id.setdefault(str(e["id"]), {"s": [], "f": []})[side].append(e["ts"])
    # Every id occurs at most once per side in these files, so pairing is unambiguous.
    assert all(len(v["s"]) <= 1 and len(v["f"]) <= 1 for v in per_id.values())
    paired = {k: (v["s"][0], v["f"][0]) for k, v in per_id.items() if v["s"] and v["f"]}
    rank = int(doc["distributedInfo"]["rank"])
    return rank, RankExpected(
        member=name,
        kernels=len(kernels),
        nccl_kernels=sum(1 for e in kernels if re.search("nccl", e["name"], re.IGNORECASE)),
        x_events=sum(1 for e in events if e.get("ph") == "X"),
        paired=paired,
        ac2g_ids=frozenset(per_id),
    )


@pytest.fixture(scope="module")
def dlrm_expected(traces_dir: Path) -> dict[int, RankExpected]:
    out: dict[int, RankExpected] = {}
    with tarfile.open(traces_dir / DLRM) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.endswith((".json", ".json.gz")):
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            raw = handle.read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            rank, exp = _rank_expected(member.name, json.loads(raw))
            assert rank not in out
            out[rank] = exp
    return out


@pytest.fixture(scope="module")
def dlrm(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    out = tmp_path_factory.mktemp("dlrm") / "store"
    store = traceatlas.ingest(traces_dir / DLRM, out)
    return traceatlas.Trace(store)


def test_dlrm_archive_gives_eight_ranks(
    dlrm: traceatlas.Trace, dlrm_expected: dict[int, RankExpected]
) -> None:
    assert sorted(dlrm_expected) == list(range(8))
    assert dlrm.ranks == list(range(8))
    assert traceatlas.summarize(dlrm)["ranks"] == list(range(8))
    # Each rank's data came from the member that declares that rank.
    by_rank = {s["rank"]: s for s in dlrm.manifest["sources"]}
    for rank, exp in dlrm_expected.items():
        assert by_rank[rank]["member"] == exp.member
        assert f"worker{rank}_" in exp.member


def test_dlrm_per_rank_counts(
    dlrm: traceatlas.Trace, dlrm_expected: dict[int, RankExpected]
) -> None:
    per_rank = {r["rank"]: r for r in traceatlas.summarize(dlrm)["per_rank"]}
    got = {}
    want = {}
    for rank, exp in dlrm_expected.items():
        cats = per_rank[rank]["by_category"]
        got[rank] = (
            per_rank[rank]["intervals"],
            cats.get("kernel", 0) + cats.get("comm_kernel", 0),
            cats.get("comm_kernel", 0),
        )
        want[rank] = (exp.x_events, exp.kernels, exp.nccl_kernels)
        assert exp.nccl_kernels == NCCL_PER_RANK
    assert got == want


def test_dlrm_flows_pair_ac2g_ids(
    dlrm: traceatlas.Trace, dlrm_expected: dict[int, RankExpected]
) -> None:
    flows = (
        dlrm.flows.filter(pl.col("name").cast(pl.String) == "ac2g")
        .select("rank", "flow_id", "src_track_id", "src_ts_ns", "dst_track_id", "dst_ts_ns")
        .collect()
    )
    kinds = dlrm.tracks.select(
        "rank", "track_id", pl.col("kind").cast(pl.String)
    ).collect()
    for rank, exp in dlrm_expected.items():
        mine = flows.filter(pl.col("rank") == rank)
        assert mine.height == len(exp.ac2g_ids), f"rank {rank}"
        assert set(mine["flow_id"]) == set(exp.ac2g_ids), f"rank {rank}"
        both = mine.filter(
            pl.col("src_track_id").is_not_null() & pl.col("dst_track_id").is_not_null()
        )
        assert set(both["flow_id"]) == set(exp.paired), f"rank {rank}"
        # The launch -> kernel delay is the one in the file (clock offsets cancel out).
        for flow_id, src_ts, dst_ts in both.select("flow_id", "src_ts_ns", "dst_ts_ns").iter_rows():
            s_us, f_us = exp.paired[flow_id]
            assert dst_ts - src_ts == round((f_us - s_us) * 1000), (rank, flow_id)
        # Launch on a host thread, arrival on a GPU stream.
        k = kinds.filter(pl.col("rank") == rank)
        src_kinds = both.join(k, left_on="src_track_id", right_on="track_id")["kind"]
        dst_kinds = both.join(k, left_on="dst_track_id", right_on="track_id")["kind"]
        assert Counter(src_kinds) == {"host_thread": both.height}, f"rank {rank}"
        assert Counter(dst_kinds) == {"gpu_stream": both.height}, f"rank {rank}"


def test_gloo_directory_two_cpu_ranks(traces_dir: Path, tmp_path: Path) -> None:
    x_events = {}
    for path in sorted((traces_dir / GLOO).glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        x_events[int(doc["distributedInfo"]["rank"])] = sum(
            1 for e in doc["traceEvents"] if e.get("ph") == "X"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = traceatlas.ingest(traces_dir / GLOO, tmp_path / "store")
    trace = traceatlas.Trace(store)
    assert trace.ranks == [0, 1] == sorted(x_events)
    summary = traceatlas.summarize(trace)
    assert {r["rank"]: r["intervals"] for r in summary["per_rank"]} == x_events
    assert not set(summary["by_category"]) & set(DEVICE_CATEGORIES), summary["by_category"]
    device_rows = (
        trace.intervals.filter(pl.col("category").cast(pl.String).is_in(DEVICE_CATEGORIES))
        .select(pl.len())
        .collect()
        .item()
    )
    assert device_rows == 0
    gpu_tracks = (
        trace.tracks.filter(pl.col("kind").cast(pl.String) == "gpu_stream")
        .select(pl.len())
        .collect()
        .item()
    )
    assert gpu_tracks == 0
