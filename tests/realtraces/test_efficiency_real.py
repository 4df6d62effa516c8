"""efficiency on real traces: the 8-rank DLRM set checked against an independent count
(stdlib json from the tar members + a plain union loop), the product identities, and
LULESH (Paraver) / ping-pong (OTF2) consistency."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.testing.compare import plain_union_length

pytestmark = pytest.mark.realtrace

DLRM = "param-et_replay/dlrm_kineto.tar.gz"
LULESH = "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
PING_PONG = "pipit/ping-pong-otf2/traces.otf2"


@pytest.fixture(scope="module")
def dlrm_plain(traces_dir: Path) -> dict[str, Any]:
    """Per rank useful (non-NCCL kernels) and active (kernels, memcpy, memset) union in us,
    and the run span over every complete event of every rank."""
    useful: dict[int, float] = {}
    active: dict[int, float] = {}
    lo, hi = float("inf"), float("-inf")
    with tarfile.open(traces_dir / DLRM) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.endswith(".json"):
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            doc = json.loads(handle.read())
            rank = int(doc["distributedInfo"]["rank"])
            comp: list[tuple[float, float]] = []
            act: list[tuple[float, float]] = []
            for e in doc["traceEvents"]:
                if e.get("ph") != "X" or "dur" not in e:
                    continue
                s, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
                lo, hi = min(lo, s), max(hi, end)
                cat = str(e.get("cat", "")).lower()
                if cat == "kernel":
                    act.append((s, end))
                    if not re.search("nccl", e["name"], re.IGNORECASE):
                        comp.append((s, end))
                elif cat in ("gpu_memcpy", "gpu_memset"):
                    act.append((s, end))
            useful[rank], active[rank] = plain_union_length(comp), plain_union_length(act)
    return {"useful": useful, "active": active, "T": hi - lo}


@pytest.fixture(scope="module")
def dlrm(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    out = tmp_path_factory.mktemp("dlrm_eff") / "store"
    return traceatlas.open(traceatlas.ingest(traces_dir / DLRM, out))


def _values(result: analysis.Result) -> dict[str, float]:
    return dict(zip(result.table["metric"], result.table["value"], strict=True))


def test_dlrm_device_model_matches_plain_count(dlrm: traceatlas.Trace,
                                               dlrm_plain: dict[str, Any]) -> None:
    v = _values(analysis.run("efficiency", dlrm))
    u, a = dlrm_plain["useful"], dlrm_plain["active"]
    assert sorted(u) == list(range(8))
    lb = (sum(u.values()) / 8) / max(u.values())
    comm = max(u.values()) / max(a.values())
    orch = max(a.values()) / dlrm_plain["T"]
    assert v["device_count"] == 8
    assert v["device_load_balance"] == pytest.approx(lb, rel=1e-6)
    assert v["device_communication_efficiency"] == pytest.approx(comm, rel=1e-6)
    assert v["device_orchestration_efficiency"] == pytest.approx(orch, rel=1e-6)
    assert v["device_parallel_efficiency"] == pytest.approx(
        v["device_load_balance"] * v["device_communication_efficiency"]
        * v["device_orchestration_efficiency"], abs=1e-12)
    assert v["device_parallel_efficiency"] == pytest.approx(
        sum(u.values()) / (8 * dlrm_plain["T"]), rel=1e-6)
    # A GPU code: the host tree is LB x CommE x device offload efficiency (TALP).
    assert v["host_parallel_efficiency"] == pytest.approx(
        v["host_load_balance"] * v["host_communication_efficiency"]
        * v["device_offload_efficiency"], abs=1e-12)


def test_dlrm_per_rank_and_step_region(dlrm: traceatlas.Trace,
                                       dlrm_plain: dict[str, Any]) -> None:
    result = analysis.run("efficiency", dlrm)
    dev = result.extra["per_rank"].filter(result.extra["per_rank"]["side"] == "device")
    for rank, useful_ns in zip(dev["rank"], dev["useful_ns"], strict=True):
        assert useful_ns == pytest.approx(dlrm_plain["useful"][rank] * 1000, abs=8)
    known = sorted(set(dlrm.sql("SELECT DISTINCT step FROM intervals WHERE "
                                "category = 'step'")["step"].to_list()))
    if known:
        region = analysis.run("efficiency", dlrm, {"region": f"step:{known[0]}"})
        rv = _values(region)
        assert rv["device_runtime_ns"] <= _values(result)["device_runtime_ns"]
        assert rv["device_parallel_efficiency"] == pytest.approx(
            rv["device_load_balance"] * rv["device_communication_efficiency"]
            * rv["device_orchestration_efficiency"], abs=1e-12)


def test_lulesh_paraver_states(traces_dir: Path, tmp_path: Path) -> None:
    trace = traceatlas.open(traceatlas.ingest(traces_dir / LULESH, tmp_path / "s"))
    result = analysis.run("efficiency", trace)
    v = _values(result)
    host = result.extra["per_rank"]
    assert host["rank"].to_list() == list(range(8))        # uncore tasks have no intervals
    # Useful = Running state: independent union per rank from the store's state rows.
    running = trace.sql(
        "SELECT rank, sum(end_ns - start_ns) AS u FROM intervals WHERE category = 'state' "
        "AND args LIKE '%\"state\": 1}' GROUP BY rank ORDER BY rank")
    assert host["useful_ns"].to_list() == running["u"].to_list()
    assert v["host_communication_efficiency"] == pytest.approx(
        v["host_serialisation_efficiency"] * v["host_transfer_efficiency"], abs=1e-12)
    assert 0 < v["host_transfer_efficiency"] <= 1
    assert 0 < v["host_serialisation_efficiency"] <= 1


def test_ping_pong_otf2(traces_dir: Path, tmp_path: Path) -> None:
    trace = traceatlas.open(traceatlas.ingest(traces_dir / PING_PONG, tmp_path / "s"))
    v = _values(analysis.run("efficiency", trace))
    assert v["host_parallel_efficiency"] == pytest.approx(
        v["host_load_balance"] * v["host_communication_efficiency"], abs=1e-12)
    assert v["host_communication_efficiency"] == pytest.approx(
        v["host_serialisation_efficiency"] * v["host_transfer_efficiency"], abs=1e-12)
    assert v["host_ideal_runtime_ns"] <= v["host_runtime_ns"]
