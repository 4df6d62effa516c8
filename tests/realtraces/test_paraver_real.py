"""Paraver reader on the real Extrae traces (PROFET lulesh, folding 444.namd), checked
against plain independent counts of the ``.prv`` text, and the exporter's round trip on
the real torch-cpu-gloo Kineto trace and on a real Paraver trace."""

from __future__ import annotations

import json
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.export.paraver import ParaverExporter

pytestmark = pytest.mark.realtrace

PARAVER = [
    "profet-paraver/lulesh_7+1_with_uncores_sockets1+2.chop8.prv",
    "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
    "folding-paraver/444.namd.prv",
]


def _plain_counts(prv: Path) -> tuple[Counter[str], list[tuple[int, int]]]:
    """Lines per record type and every (type, value) event pair, by plain text parsing."""
    kinds: Counter[str] = Counter()
    pairs: list[tuple[int, int]] = []
    with prv.open() as fh:
        next(fh)
        for line in fh:
            kinds[line[:2]] += 1
            if line.startswith("2:"):
                f = line.strip().split(":")
                pairs += [(int(t), int(v)) for t, v in zip(f[6::2], f[7::2], strict=True)]
    return kinds, pairs


def _gradient7_types(pcf: Path) -> set[int]:
    """Types declared with gradient 7 (Extrae's hardware counters), plain regex."""
    return {int(m) for m in re.findall(r"(?m)^7\s+(\d+)\s", pcf.read_text())} - {41999999}


def _meta(trace: traceatlas.Trace, key: str) -> list[Any]:
    rows = trace.metadata.filter(pl.col("key") == key).sort("rank").collect()
    return [json.loads(v) for v in rows["value"]]


def _count(trace: traceatlas.Trace, table: str, where: Any = None) -> int:
    frame = trace.scan(table)
    if where is not None:
        frame = frame.filter(where)
    return int(frame.select(pl.len()).collect().item())


@pytest.mark.parametrize("rel", PARAVER)
def test_records_and_event_pairs_accounted(traces_dir: Path, tmp_path: Path, rel: str) -> None:
    prv = traces_dir / rel
    kinds, pairs = _plain_counts(prv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traceatlas.ingest(prv, tmp_path / "store"))
    cat = pl.col("category").cast(pl.String)
    # Records per type: the file counts in metadata, and the per-rank counts add up.
    file_counts = _meta(trace, "paraver_record_counts_file")[0]
    assert [file_counts[k] for k in "123"] == [kinds["1:"], kinds["2:"], kinds["3:"]]
    per_rank = _meta(trace, "paraver_record_counts_rank")
    assert [sum(r[k] for r in per_rank) for k in "123"] == [kinds["1:"], kinds["2:"],
                                                            kinds["3:"]]
    assert _count(trace, "intervals", cat == "state") == kinds["1:"]
    assert _count(trace, "messages") == kinds["3:"]
    # Event pairs: instants + counters + region begins + region ends = pairs in the text.
    regions = _count(trace, "intervals", cat != "state")
    unclosed = _count(trace, "intervals", pl.col("args").str.contains("closed_at_trace_end"))
    n_inst, n_cnt = _count(trace, "instants"), _count(trace, "counters")
    assert n_inst + n_cnt + regions + (regions - unclosed) == len(pairs)
    # Counters: PAPI range 42000000-42999999 and the .pcf's gradient-7 types.
    counter_types = _gradient7_types(prv.with_suffix(".pcf"))
    expected = sum(1 for t, _ in pairs if 42_000_000 <= t <= 42_999_999 or t in counter_types)
    assert n_cnt == expected > 0
    # MPI regions: one per non-zero MPI value (no MPI region is left open in these files).
    mpi_begins = sum(1 for t, v in pairs if 50_000_001 <= t <= 50_000_005 and v != 0)
    assert _count(trace, "intervals", cat == "mpi") == mpi_begins
    user = sum(1 for t, v in pairs if t == 60_000_019 and v != 0)
    assert _count(trace, "intervals", cat == "region") == user


def test_profet_layout_and_messages(traces_dir: Path, tmp_path: Path) -> None:
    prv = traces_dir / PARAVER[0]
    with pytest.warns(Warning):
        trace = traceatlas.open(traceatlas.ingest(prv, tmp_path / "store"))
    assert trace.ranks == list(range(20))  # 8 MPI tasks + 12 uncore readers
    # First communication line of the file, plain parse.
    first = next(line for line in prv.open() if line.startswith("3:")).strip().split(":")
    f = [int(x) for x in first]
    row = trace.messages.filter(
        (pl.col("send_start_ns") == f[5]) & (pl.col("src_rank") == f[3] - 1)
        & (pl.col("dst_rank") == f[9] - 1)).collect().to_dicts()
    assert row and row[0]["recv_end_ns"] == f[12] and row[0]["bytes"] == f[13]
    assert row[0]["tag"] == f[14] and row[0]["rank"] == f[3] - 1
    names = trace.tracks.sort("rank").select("name").collect()["name"].to_list()
    assert names[0] == "THREAD 1.1.1" and names[8] == "THREAD 2.1.1"


def _round_trip(trace: traceatlas.Trace, tmp: Path) -> traceatlas.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = ParaverExporter().write(trace, tmp / "exported.prv")
        return traceatlas.open(traceatlas.ingest(files[0], tmp / "back"))


def _intervals(trace: traceatlas.Trace) -> list[tuple[Any, ...]]:
    frame = trace.intervals.select("rank", pl.col("category").cast(pl.String), "start_ns",
                                   "end_ns").collect()
    return sorted(frame.iter_rows())


def test_export_round_trip_torch_cpu_gloo(traces_dir: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traceatlas.ingest(traces_dir / "torch-cpu-gloo",
                                                  tmp_path / "store"))
    back = _round_trip(trace, tmp_path)
    assert back.ranks == trace.ranks == [0, 1]
    assert _intervals(back) == _intervals(trace)
    assert _count(back, "instants") == _count(trace, "instants")


def test_export_round_trip_real_paraver(traces_dir: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traceatlas.ingest(traces_dir / PARAVER[0],
                                                  tmp_path / "store"))
    back = _round_trip(trace, tmp_path)
    assert _intervals(back) == _intervals(trace)
    for table in ("counters", "messages", "instants"):
        assert _count(back, table) == _count(trace, table)
