"""Kineto ``[memory]`` instants -> per-device memory counter tracks (bytes).

Part of the Kineto reader (``kineto_tables.py`` calls ``memory_counters``). With
``profile_memory=True`` PyTorch writes one instant ``[memory]`` per allocator call, args
``Device Type`` (c10 ``DeviceType``: 0 CPU, 1 CUDA, 6 HIP, ...), ``Device Id``, ``Addr``,
``Bytes`` (negative = free), ``Total Allocated`` and ``Total Reserved`` (the allocator's
totals after the call, bytes). Per (device type, device id) this gives two counter
tracks: ``<device> memory allocated`` and ``<device> memory reserved``, one sample per
event, series named ``<device> memory allocated (bytes)`` / ``... reserved (bytes)``.

Events are ordered by time, then by their place in the file (on the real traces checked,
consecutive ``Total Allocated`` differences then equal ``Bytes`` exactly). When a device's
events lack ``Total Allocated`` (PyTorch before about 1.10), the allocated curve is the
running sum of ``Bytes`` from 0 at the device's first event, so it is relative to what was
allocated before the profile; one ``DataQualityWarning`` says so. Such traces have no
reserved curve. The instants themselves stay in ``instants`` unchanged.

Columnar: pyarrow picks the rows, DuckDB ``json_transform`` types the args and a window
sum rebuilds the curve; Python loops only over devices. Args whose value cannot be read
as an integer (text, overflow) are null: such events are counted and warned.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import DataQualityWarning

MEMORY_EVENT = "[memory]"

DEVICE_TYPES: dict[int, str] = {
    0: "CPU", 1: "GPU", 2: "MKLDNN", 3: "OpenGL", 4: "OpenCL", 5: "IDEEP", 6: "GPU",
    7: "FPGA", 8: "MAIA", 9: "XLA", 10: "Vulkan", 11: "Metal", 12: "XPU", 13: "MPS",
    14: "Meta", 15: "HPU", 16: "VE", 17: "Lazy", 18: "IPU", 19: "MTIA", 20: "PrivateUse1",
}
"""c10 ``DeviceType`` -> label (c10/core/DeviceType.h). CUDA (1) and HIP (6) are both
"GPU": the rest of traceatlas calls NVIDIA and AMD accelerators GPUs."""

_FIELDS = {"Device Type": "BIGINT", "Device Id": "BIGINT", "Bytes": "BIGINT",
           "Total Allocated": "BIGINT", "Total Reserved": "BIGINT"}

_SQL = """
WITH m AS (
  SELECT ts_ns, seq, json_transform(args, {fields}) AS j FROM mem_ev
), x AS (
  SELECT ts_ns, seq, j."Device Type" AS dt, coalesce(j."Device Id", -1) AS di,
         j."Bytes" AS bytes, j."Total Allocated" AS alloc, j."Total Reserved" AS res
  FROM m WHERE j."Device Type" IS NOT NULL AND j."Bytes" IS NOT NULL
)
SELECT dt, di, ts_ns, seq, alloc, res,
       sum(bytes) OVER (PARTITION BY dt, di ORDER BY ts_ns, seq
                        ROWS UNBOUNDED PRECEDING) AS running,
       count(alloc) OVER (PARTITION BY dt, di) = count(*) OVER (PARTITION BY dt, di)
         AS has_totals
FROM x
"""


@dataclass(frozen=True)
class _Device:
    dtype: int
    index: int

    @property
    def label(self) -> str:
        return device_label(self.dtype, self.index)

    @property
    def device(self) -> int:
        """The tracks table's device index: -1 for the CPU."""
        return -1 if self.dtype == 0 else self.index


def device_label(dtype: int, index: int) -> str:
    """A device's name in track, series and analysis output: ``CPU``, ``GPU 0`` (CUDA and
    HIP), ``XPU 1``, ``device type 42 0`` for a type c10 does not name."""
    kind = DEVICE_TYPES.get(dtype, f"device type {dtype}")
    return kind if dtype == 0 else f"{kind} {index}"


MEMORY_SERIES = r" memory (allocated|reserved) \(bytes\)$"
"""Regex matching the counter series names ``series_name`` gives (bytes, not GPU metrics)."""


def series_name(label: str, series: str) -> str:
    """Counter series name, e.g. ``GPU 0 memory allocated (bytes)``."""
    return f"{label} memory {series} (bytes)"


def memory_counters(
    con: duckdb.DuckDBPyConnection, rest: pa.Table, first_track_id: int, display: str
) -> tuple[pa.Table, pa.Table]:
    """(tracks rows, counter rows) of the ``[memory]`` instants in ``rest`` (the parsed
    events that are not complete events: ``name``, ``ph``, ``ts_ns``, ``args`` text).

    New track ids start at ``first_track_id``; counters are sorted by (track, time).
    """
    is_memory = pc.and_(pc.equal(rest["name"], MEMORY_EVENT),
                        pc.is_in(rest["ph"], value_set=pa.array(["i", "I"])))
    is_memory = pc.and_(pc.fill_null(is_memory, False), pc.is_valid(rest["ts_ns"]))
    mem = rest.select(["ts_ns", "args"]).filter(is_memory)
    if mem.num_rows == 0:
        return _empty_tracks(), _empty_counters()
    mem = mem.append_column("seq", pa.array(np.arange(mem.num_rows, dtype=np.int64)))
    try:
        con.register("mem_ev", mem)
        sql = _SQL.format(fields=_quote(json.dumps(_FIELDS)))
        con.execute(f"CREATE TEMP TABLE mem_x AS {sql}")
        devices = [(_Device(int(dt), int(di)), bool(ok), bool(res)) for dt, di, ok, res
                   in con.execute(
            "SELECT dt, di, bool_and(has_totals), count(res) > 0 FROM mem_x "
            "GROUP BY dt, di ORDER BY dt <> 0, dt, di").fetchall()]
        tracks, catalog = _tracks(devices, first_track_id)
        con.register("mem_dev", catalog)
        counters = con.sql("""
            SELECT d.alloc_track AS track_id, ts_ns, d.alloc_name AS name,
                   CAST(CASE WHEN d.rebuilt THEN running ELSE alloc END AS DOUBLE) AS value,
                   seq
            FROM mem_x JOIN mem_dev d USING (dt, di)
            UNION ALL
            SELECT d.res_track, ts_ns, d.res_name, CAST(res AS DOUBLE), seq
            FROM mem_x JOIN mem_dev d USING (dt, di) WHERE res IS NOT NULL
            ORDER BY track_id, ts_ns, seq
        """).to_arrow_table().drop_columns(["seq"])
        used = con.execute("SELECT count(*) FROM mem_x").fetchone()
    finally:
        con.execute("DROP TABLE IF EXISTS mem_x")
        for name in ("mem_ev", "mem_dev"):
            con.unregister(name)
    unused = mem.num_rows - (used[0] if used else 0)
    if unused:
        _warn(f"{display}: {unused} {MEMORY_EVENT} event(s) without a readable 'Device "
              "Type' or 'Bytes' are not in the memory counters (kept in instants)")
    rebuilt = [dev.label for dev, ok, _ in devices if not ok]
    if rebuilt:
        _warn(f"{display}: {MEMORY_EVENT} events of {', '.join(rebuilt)} carry no 'Total "
              "Allocated' (older PyTorch); the allocated-memory curve is rebuilt as the "
              "running sum of 'Bytes' from 0 at the first event, so it is relative to "
              "what was allocated before the profile started")
    return tracks, _conform_counters(counters)


def _tracks(devices: list[tuple[_Device, bool, bool]], first: int
            ) -> tuple[pa.Table, pa.Table]:
    """The tracks rows (allocated, and reserved when the events carry it, per device)
    and the (dt, di) -> track/series catalog the SQL joins on."""
    ids: list[int] = []
    names: list[str] = []
    device: list[int] = []
    cat: dict[str, list[object]] = {k: [] for k in (
        "dt", "di", "alloc_track", "alloc_name", "res_track", "res_name", "rebuilt")}
    for dev, has_totals, has_reserved in devices:
        alloc_id = first + len(ids)
        res_id = alloc_id + 1 if has_reserved else -1
        for track, series in ((alloc_id, "allocated"), (res_id, "reserved")):
            if track >= 0:
                ids.append(track)
                names.append(f"{dev.label} memory {series}")
                device.append(dev.device)
        for key, value in (("dt", dev.dtype), ("di", dev.index), ("alloc_track", alloc_id),
                           ("alloc_name", series_name(dev.label, "allocated")),
                           ("res_track", res_id),
                           ("res_name", series_name(dev.label, "reserved")),
                           ("rebuilt", not has_totals)):
            cat[key].append(value)
    n = len(ids)
    tracks = pa.table({
        "track_id": pa.array(ids, pa.int32()),
        "kind": pa.array(["counter"] * n, pa.string()),
        "name": pa.array(names, pa.string()),
        "host": pa.nulls(n, pa.string()),
        "pid": pa.nulls(n, pa.int64()),
        "tid": pa.nulls(n, pa.int64()),
        "device": pa.array(device, pa.int32()),
        "stream": pa.array([-1] * n, pa.int64()),
        "source_pid": pa.nulls(n, pa.string()),
        "source_tid": pa.nulls(n, pa.string()),
    })
    catalog = pa.table({
        "dt": pa.array(cat["dt"], pa.int64()), "di": pa.array(cat["di"], pa.int64()),
        "alloc_track": pa.array(cat["alloc_track"], pa.int32()),
        "alloc_name": pa.array(cat["alloc_name"], pa.string()),
        "res_track": pa.array(cat["res_track"], pa.int32()),
        "res_name": pa.array(cat["res_name"], pa.string()),
        "rebuilt": pa.array(cat["rebuilt"], pa.bool_()),
    })
    return tracks, catalog


def _conform_counters(table: pa.Table) -> pa.Table:
    return pa.table({
        "track_id": table["track_id"].cast(pa.int32()),
        "ts_ns": table["ts_ns"].cast(pa.int64()),
        "name": table["name"].cast(pa.string()),
        "value": table["value"].cast(pa.float64()),
    })


def _empty_tracks() -> pa.Table:
    return _tracks([], 0)[0]


def _empty_counters() -> pa.Table:
    return pa.table({"track_id": pa.array([], pa.int32()), "ts_ns": pa.array([], pa.int64()),
                     "name": pa.array([], pa.string()), "value": pa.array([], pa.float64())})


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=4)
