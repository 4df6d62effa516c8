"""What a Paraver configuration file (``.cfg``) shows, recomputed in plain Python from the
``.prv``/``.pcf`` text, for tests: independent of the reader and the exporter.

- ``last_event_value_time``: the window of basicanalysis' ``cfgs/runtime.cfg`` ("MPI
  call": thread function ``Last Evt Val``, ``evt_type [x,y]`` 50000001..50000005) with a
  histogram of time per value, i.e. how long each thread spends with each value of the
  selected types as its last event value (a ``.cfg`` that selects MPI_Allreduce picks
  value 10 of that window). Per task (application, task), ns; the time after a thread's
  last selected event, up to the header's end time, counts too.
- ``state_time``: the ``State As Is`` window of ``cfgs/timings.cfg``: time per state
  value per task, ns.
- ``pcf_values`` / ``pcf_states``: label -> value of an event type / of the states, as a
  ``.pcf`` declares them.

Times: the header's unit (``_ns``, ``_us``, ``_ms``; none = us) converted to ns.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

_UNIT = {"ns": 1, "us": 1_000, "ms": 1_000_000}

Task = tuple[int, int]
"""(application, task), both 1-based, as the ``.prv`` writes them."""


def _header(line: str) -> tuple[int, int]:
    """(end time, ns per unit) of a ``#Paraver`` header line."""
    m = re.match(r"^#Paraver \([^)]*\):(\d+)(?:_(ns|us|ms))?:", line)
    if m is None:
        raise ValueError(f"not a Paraver header: {line[:80]!r}")
    unit = _UNIT[m.group(2) or "us"]
    return int(m.group(1)) * unit, unit


def event_pairs(prv: Path) -> dict[Task, dict[tuple[int, int], int]]:
    """Per task, how many times each (type, value) pair occurs in the event records."""
    out: dict[Task, dict[tuple[int, int], int]] = defaultdict(lambda: defaultdict(int))
    with prv.open() as fh:
        next(fh)
        for line in fh:
            if line.startswith("2:"):
                f = line.strip().split(":")
                counts = out[(int(f[2]), int(f[3]))]
                for t, v in zip(f[6::2], f[7::2], strict=True):
                    counts[(int(t), int(v))] += 1
    return {k: dict(v) for k, v in out.items()}


def state_records(prv: Path) -> dict[Task, list[tuple[int, int, int]]]:
    """Per task, the state records (start ns, end ns, value) in file order."""
    out: dict[Task, list[tuple[int, int, int]]] = defaultdict(list)
    with prv.open() as fh:
        _, unit = _header(next(fh))
        for line in fh:
            if line.startswith("1:"):
                f = [int(x) for x in line.strip().split(":")]
                out[(f[2], f[3])].append((f[5] * unit, f[6] * unit, f[7]))
    return dict(out)


def state_time(prv: Path) -> dict[Task, dict[int, int]]:
    """Per task, total ns per state value (``State As Is``, summed over threads)."""
    out: dict[Task, dict[int, int]] = {}
    for task, records in state_records(prv).items():
        acc: dict[int, int] = defaultdict(int)
        for start, end, value in records:
            acc[value] += end - start
        out[task] = dict(acc)
    return out


def last_event_value_time(prv: Path, lo: int, hi: int) -> dict[Task, dict[int, int]]:
    """Per task, total ns per value of ``Last Evt Val`` over event types ``lo..hi``."""
    with prv.open() as fh:
        end, unit = _header(next(fh))
        events: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
        for line in fh:
            if line.startswith("2:"):
                f = line.strip().split(":")
                thread = (int(f[2]), int(f[3]), int(f[4]))
                for t, v in zip(f[6::2], f[7::2], strict=True):
                    if lo <= int(t) <= hi:
                        events[thread].append((int(f[5]) * unit, int(v)))
    out: dict[Task, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for (appl, task, _thread), evs in events.items():
        acc = out[(appl, task)]
        for (time, value), (nxt, _) in zip(evs, [*evs[1:], (end, 0)], strict=True):
            acc[value] += nxt - time
    return {k: dict(v) for k, v in out.items()}


def _pcf_blocks(pcf: Path) -> list[tuple[list[int], dict[str, int]]]:
    """(types, label -> value) per ``EVENT_TYPE`` block."""
    blocks: list[tuple[list[int], dict[str, int]]] = []
    section, in_values = "", False
    for raw in pcf.read_text(errors="replace").splitlines():
        line = raw.replace("\t", " ").strip()
        if not line:
            continue
        if line.isupper() and " " not in line:
            section, in_values = line, False
            if section == "EVENT_TYPE":
                blocks.append(([], {}))
            elif section == "VALUES" and blocks:
                section, in_values = "EVENT_TYPE", True
            continue
        if section != "EVENT_TYPE" or not blocks:
            continue
        parts = line.split(None, 2 if not in_values else 1)
        if in_values and len(parts) == 2 and parts[0].isdigit():
            blocks[-1][1][parts[1].strip()] = int(parts[0])
        elif not in_values and len(parts) >= 2 and parts[1].isdigit():
            blocks[-1][0].append(int(parts[1]))
    return blocks


def pcf_values(pcf: Path, etype: int) -> dict[str, int]:
    """Label -> value of event type ``etype`` in a ``.pcf``."""
    for types, values in _pcf_blocks(pcf):
        if etype in types:
            return values
    return {}


def pcf_states(pcf: Path) -> dict[str, int]:
    """Label -> value of the ``STATES`` section of a ``.pcf``."""
    out: dict[str, int] = {}
    section = ""
    for raw in pcf.read_text(errors="replace").splitlines():
        line = raw.replace("\t", " ").strip()
        if line.isupper() and " " not in line:
            section = line
            continue
        if section == "STATES" and line:
            value, _, label = line.partition(" ")
            if value.isdigit():
                out[label.strip()] = int(value)
    return out
