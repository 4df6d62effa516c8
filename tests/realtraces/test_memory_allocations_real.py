"""``memory``'s ``allocations`` table on a real trace against a second, plain reading of
the file: ``json`` (``ts`` as Decimal µs), the ``[memory]`` events sorted by (time, file
order), and the alloc/free pairs found with a dict loop (an allocation pairs with the next
event at its (device, address) when that is a free)."""

from __future__ import annotations

import gzip
import json
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import traceatlas
from traceatlas import analysis

LEAK = "h100-planted/leak/rank-0.json.gz"  # PyTorch 2.11: Addr, Total Allocated


def _reference(path: Path) -> list[tuple[Any, ...]]:
    """(device label, addr, bytes, action, paired - time in ns or None) per event."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    events = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    events = sorted(enumerate(events), key=lambda ie: (Decimal(ie[1]["ts"]), ie[0]))
    rows: list[list[Any]] = []
    open_at: dict[tuple[int, int, int], int] = {}
    for _, e in events:
        a = e["args"]
        dtype, dev, addr, nbytes = a["Device Type"], a["Device Id"], a["Addr"], a["Bytes"]
        label = "CPU" if dtype == 0 else f"GPU {dev}"
        ts_ns = Decimal(e["ts"]) * 1000
        key = (dtype, dev, addr)
        row = [label, addr, nbytes, "alloc" if nbytes > 0 else "free", None, ts_ns]
        if nbytes < 0 and key in open_at:
            other = rows[open_at.pop(key)]
            other[4] = int(ts_ns - other[5])
            row[4] = int(other[5] - ts_ns)
        elif nbytes > 0:
            open_at[key] = len(rows)
        else:
            open_at.pop(key, None)
        rows.append(row)
    return [tuple(r[:5]) for r in rows]


def test_allocations_equal_a_plain_reading(traces_dir: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traces_dir / LEAK)
        table = analysis.run("memory", trace).extra["allocations"]
    got = [(d, a, b, act, None if p is None else p - t) for d, a, b, act, p, t in
           table.select("device", "addr", "bytes", "action", "paired_time_ns",
                        "time_ns").iter_rows()]
    want = _reference(traces_dir / LEAK)
    assert len(want) > 1000
    assert got == want
    # every pair is seen from both sides
    paired = [r for r in got if r[4] is not None]
    assert sum(r[3] == "alloc" for r in paired) == sum(r[3] == "free" for r in paired) > 0
