"""Paraver export on the real traces, checked the way a Paraver user would see it:
with the codes of the real Extrae ``.pcf`` and a plain-Python reimplementation of the
windows of real Paraver configuration files (``traceatlas.testing.paraver_cfg``:
basicanalysis ``runtime.cfg`` "MPI call" = Last Evt Val of types 50000001..50000005,
``timings.cfg`` = State As Is).

Independent sources: the original ``.prv`` text parsed in plain Python; the real Extrae
``.pcf`` of ``profet-paraver/lulesh_4+4...`` for MPI values (MPI_Allreduce = 50000002
value 10, MPI_Init = 50000003 value 31, ...) and state values (Blocking Send, Waiting a
message, Others); the ``otf2`` package (Enter/Leave walk) for the ping-pong; SQLite for
the nsys saxpy export. Extrae's state per call (MPI_Send -> Blocking Send, MPI_Recv ->
Waiting a message, MPI_Init/Finalize/Comm_* -> Others) is from Extrae's
``mpi_prv_semantics.c``; the LULESH ``.prv`` itself shows the same rule for the calls it
holds (checked in ``test_states_from_mpi_calls_equal_extraes``).
"""

from __future__ import annotations

import sqlite3
import warnings
from collections import defaultdict
from pathlib import Path
from typing import TypeVar

import otf2  # type: ignore[import-untyped]
import pytest

import traceatlas
from traceatlas.engine import LocalEngine
from traceatlas.export.paraver import ParaverExporter
from traceatlas.model.schema import CATEGORIES
from traceatlas.testing.paraver_cfg import (
    event_pairs,
    last_event_value_time,
    pcf_states,
    pcf_values,
    state_records,
    state_time,
)

pytestmark = pytest.mark.realtrace

LULESH = "profet-paraver/lulesh_4+4_with_uncores_sockets1+2.chop_5it"
PARAVER = [LULESH + ".prv", "profet-paraver/lulesh_7+1_with_uncores_sockets1+2.chop8.prv",
           "folding-paraver/444.namd.prv"]
T = TypeVar("T")
EXTRAE_STATE_OF = {"MPI_Send": "Blocking Send", "MPI_Recv": "Waiting a message",
                   "MPI_Init": "Others", "MPI_Finalize": "Others",
                   "MPI_Comm_rank": "Others", "MPI_Comm_size": "Others"}


def _quiet_export(src: Path | traceatlas.Trace, tmp: Path) -> tuple[traceatlas.Trace, Path]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = src if isinstance(src, traceatlas.Trace) else traceatlas.open(
            traceatlas.ingest(src, tmp / "store", engine=LocalEngine(max_workers=1)))
        files = ParaverExporter().write(trace, tmp / "exported.prv")
    return trace, files[0]


def _origin(prv: Path) -> int:
    second = prv.read_text().splitlines()[1]
    assert second.startswith("# traceatlas time_origin_ns=")
    return int(second.split("=")[1])


def _by_rank(per_task: dict[tuple[int, int], T]) -> list[T]:
    """Values in task order (applications one after the other): rank order."""
    return [per_task[k] for k in sorted(per_task)]


@pytest.mark.parametrize("rel", PARAVER)
def test_round_trip_keeps_every_event_and_state(traces_dir: Path, tmp_path: Path,
                                                rel: str) -> None:
    src = traces_dir / rel
    _, out = _quiet_export(src, tmp_path)
    original, exported = event_pairs(src), event_pairs(out)
    assert len(original) == len(exported) > 0
    assert _by_rank(exported) == _by_rank(original)  # every (type, value), per task
    shift = _origin(out)
    moved = {k: [(s + shift, e + shift, v) for s, e, v in recs]
             for k, recs in state_records(out).items()}
    assert _by_rank(moved) == _by_rank(state_records(src))


def test_runtime_cfg_selects_mpi_allreduce_by_value(traces_dir: Path,
                                                   tmp_path: Path) -> None:
    src = traces_dir / (LULESH + ".prv")
    allreduce = pcf_values(src.with_suffix(".pcf"), 50_000_002)["MPI_Allreduce"]
    assert allreduce == 10
    _, out = _quiet_export(src, tmp_path)
    before = last_event_value_time(src, 50_000_001, 50_000_005)
    after = last_event_value_time(out, 50_000_001, 50_000_005)
    per_task = [t.get(allreduce, 0) for t in _by_rank(before)]
    assert [t.get(allreduce, 0) for t in _by_rank(after)] == per_task
    assert sum(1 for t in per_task if t > 0) == 8  # the 8 MPI tasks
    for b, a in zip(_by_rank(before), _by_rank(after), strict=True):
        assert {v: t for v, t in a.items() if v} == {v: t for v, t in b.items() if v}


def test_states_from_mpi_calls_equal_extraes(traces_dir: Path, tmp_path: Path) -> None:
    """The LULESH store without its states: the states the exporter derives from the MPI
    calls are those Extrae wrote (at every MPI call begin, the same state value)."""
    src = traces_dir / (LULESH + ".prv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = traceatlas.open(traceatlas.ingest(src, tmp_path / "store",
                                                 engine=LocalEngine(max_workers=1)))
    no_states = full.select(categories=[c for c in CATEGORIES if c != "state"])
    (tmp_path / "x").mkdir()
    _, out = _quiet_export(no_states, tmp_path / "x")
    shift = _origin(out)
    original = {k: {s: v for s, _e, v in recs} for k, recs in state_records(src).items()}
    derived = {k: {s + shift: v for s, _e, v in recs}
               for k, recs in state_records(out).items()}
    begins: dict[tuple[int, int], list[int]] = defaultdict(list)
    for line in src.read_text().splitlines():
        if line.startswith("2:"):
            f = [int(x) for x in line.split(":")]
            if any(50_000_001 <= t <= 50_000_005 and v for t, v in zip(f[6::2], f[7::2],
                                                                         strict=True)):
                begins[(f[2], f[3])].append(f[5])
    tasks = sorted(original)
    checked = 0
    for i, task in enumerate(tasks):
        for time in begins.get(task, []):
            assert derived[(1, i + 1)][time] == original[task][time], (task, time)
            checked += 1
    assert checked == 2140  # MPI begins: 1740 point-to-point, 40 collective, 360 other


def _otf2_calls(anchor: Path) -> dict[int, list[tuple[str, int, int]]]:
    """rank -> (region, start ns, end ns) of every call, plain Enter/Leave walk."""
    out: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    stacks: dict[object, list[tuple[str, int]]] = defaultdict(list)
    with otf2.reader.open(str(anchor)) as reader:
        clock = reader.definitions.clock_properties
        res, off = clock.timer_resolution, clock.global_offset
        for location, event in reader.events:
            ns = ((event.time - off) * 10**9 + res // 2) // res
            rank = int(str(location.group.name).split()[-1])
            if isinstance(event, otf2.events.Enter):
                stacks[location].append((str(event.region.name), ns))
            elif isinstance(event, otf2.events.Leave):
                name, start = stacks[location].pop()
                out[rank].append((name, start, ns))
    return dict(out)


def test_otf2_ping_pong_mpi_time_in_extrae_states(traces_dir: Path, tmp_path: Path) -> None:
    anchor = traces_dir / "pipit" / "ping-pong-otf2" / "traces.otf2"
    _, out = _quiet_export(anchor.parent, tmp_path)
    states = pcf_states(traces_dir / (LULESH + ".pcf"))  # the real Extrae .pcf
    mpi_values = {**pcf_values(traces_dir / (LULESH + ".pcf"), 50_000_003)}
    shift = _origin(out)
    records = {k: [(s + shift, e + shift, v) for s, e, v in recs]
               for k, recs in state_records(out).items()}
    calls = _otf2_calls(anchor)
    assert sorted(records) == [(1, r + 1) for r in sorted(calls)]
    total = 0
    for rank, rows in calls.items():
        recs = records[(1, rank + 1)]
        for name, start, end in rows:
            if name.startswith("MPI_"):
                assert (start, end, states[EXTRAE_STATE_OF[name]]) in recs, (rank, name)
                total += 1
        running = [(s, e) for s, e, v in recs if v == states["Running"]]
        for name, start, end in rows:
            if name.startswith("MPI_") and end > start:
                assert not any(s < end and start < e for s, e in running), (rank, name)
    assert total == 40  # 2 ranks x (Init, Comm_size, Comm_rank, Finalize + 8 x Send/Recv)
    # timings.cfg (State As Is): time in Blocking Send = time in MPI_Send, per rank
    times = state_time(out)
    for rank, rows in calls.items():
        send = sum(e - s for n, s, e in rows if n == "MPI_Send")
        assert times[(1, rank + 1)].get(states["Blocking Send"], 0) == send > 0
    # runtime.cfg selection of MPI_Init by its value in the real .pcf (50000003 = 31)
    window = last_event_value_time(out, 50_000_001, 50_000_005)
    for rank, rows in calls.items():
        init = sum(e - s for n, s, e in rows if n == "MPI_Init")
        assert window[(1, rank + 1)][mpi_values["MPI_Init"]] == init > 0


def test_nsys_saxpy_mpi_and_cuda_codes(traces_dir: Path, tmp_path: Path) -> None:
    path = traces_dir / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    _, out = _quiet_export(path, tmp_path)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    mpi = dict(db.execute(
        "SELECT s.value, sum(n.\"end\" - n.start) FROM NVTX_EVENTS AS n JOIN StringIds AS s "
        "ON s.id = n.textId WHERE n.eventType = 59 AND n.domainId = (SELECT domainId FROM "
        "NVTX_EVENTS WHERE eventType = 75 AND text = 'MPI') GROUP BY 1").fetchall())
    kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    copies = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0]
    public_memcpy = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s "
        "ON s.id = r.nameId WHERE s.value = 'cudaMemcpy'").fetchone()[0]
    pairs = event_pairs(out)[(1, 1)]
    begins: dict[int, int] = defaultdict(int)
    for (t, v), n in pairs.items():
        if v:
            begins[t] += n
    assert begins[63_000_006] == kernels and begins[63_000_001] == copies
    cuda_calls = pcf_values(out.with_suffix(".pcf"), 63_000_000)
    assert pairs[(63_000_000, cuda_calls["cudaMemcpy"])] == public_memcpy == 15
    states = pcf_states(traces_dir / (LULESH + ".pcf"))
    times = state_time(out)[(1, 1)]
    assert times[states["Blocking Send"]] == mpi["MPI_Send"]
    assert times[states["Waiting a message"]] == mpi["MPI_Recv"]
