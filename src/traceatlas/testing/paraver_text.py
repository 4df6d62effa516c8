"""Hand-written Paraver traces for tests: MPI call and message records as text, ``.pcf``
text (STATES and EVENT_TYPE blocks), and a one-application ``.prv`` (unit ns, one thread
per task) with its ``.pcf``.

Record helpers take times in ms and write integer ns; tasks are 1-based (rank + 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

MS = 1_000_000
MPI_P2P = 50_000_001
"""Extrae's MPI point-to-point event type."""
MPI_COLLECTIVE = 50_000_002
"""Extrae's MPI collective event type."""
USER_FUNCTION = 60_000_019
"""Extrae's user function event type."""
_MPI_LABELS = {MPI_P2P: "MPI Point-to-point", MPI_COLLECTIVE: "MPI Collective Comm"}
PAPI_TOT_INS_PCF = "EVENT_TYPE\n7  42000050 PAPI_TOT_INS\n"
"""The ``.pcf`` block of counter PAPI_TOT_INS (type 42000050, gradient 7, no VALUES)."""


def pcf(states: Mapping[int, str], *blocks: str) -> str:
    """``.pcf`` text: STATES (value -> label), then ``blocks`` (``pcf_events``,
    ``mpi_events``), each after a blank line."""
    return "\n".join(["STATES\n" + "".join(f"{v}    {s}\n" for v, s in states.items()),
                      *blocks])


def pcf_events(event_type: int, label: str, values: Mapping[int, str],
               gradient: int = 0) -> str:
    """An ``EVENT_TYPE`` block of ``event_type`` with its VALUES (value -> label)."""
    return (f"EVENT_TYPE\n{gradient}    {event_type}    {label}\nVALUES\n"
            + "".join(f"{v:<4}{s}\n" for v, s in values.items()))


def mpi_events(event_type: int, values: Mapping[int, str]) -> str:
    """Extrae's block of MPI type ``event_type`` (``MPI_P2P``, ``MPI_COLLECTIVE``;
    gradient 9): 0 Outside MPI, then ``values`` (value -> call name)."""
    return pcf_events(event_type, _MPI_LABELS[event_type], {0: "Outside MPI", **values}, 9)


def mpi_call(task: int, value: int, start_ms: float, end_ms: float,
             event_type: int = MPI_P2P) -> str:
    """Begin and end records of an MPI call (``value`` from the .pcf VALUES) on ``task``."""
    s, e = int(start_ms * MS), int(end_ms * MS)
    return (f"2:{task}:1:{task}:1:{s}:{event_type}:{value}\n"
            f"2:{task}:1:{task}:1:{e}:{event_type}:0\n")


def message(src: int, dst: int, ls: float, ps: float, lr: float, pr: float,
            size: int) -> str:
    """Type-3 record from rank ``src`` to rank ``dst``: logical/physical send and
    logical/physical receive times (ms), ``size`` bytes, tag 1."""
    t = [int(x * MS) for x in (ls, ps, lr, pr)]
    return (f"3:{src + 1}:1:{src + 1}:1:{t[0]}:{t[1]}:{dst + 1}:1:{dst + 1}:1:"
            f"{t[2]}:{t[3]}:{size}:1\n")


def write_prv(directory: Path, body: str, pcf: str, tasks: int = 3,
              end_ns: int = 100 * MS) -> Path:
    """``directory/t.prv`` (header ending at ``end_ns``) and ``t.pcf``; returns the .prv."""
    prv = directory / "t.prv"
    threads = ",".join("1:0" for _ in range(tasks))
    prv.write_text(f"#Paraver (01/02/2024 at 10:00):{end_ns}_ns:0:1:{tasks}({threads})\n"
                   f"{body}")
    (directory / "t.pcf").write_text(pcf)
    return prv
