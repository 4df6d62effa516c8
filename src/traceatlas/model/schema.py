"""The canonical model, declared once as data.

Every table is stored one Parquet file per rank. Times are integer nanoseconds on the
trace's common clock (``*_ns``); sizes are bytes. Readers and the store (``conform``:
column order and types) read these declarations; nothing else spells out a column list.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

# The categories are plain data in their own module (no Arrow: the CLI's help lists them
# without this one); re-exported here.
from traceatlas.model.vocab import CATEGORIES as CATEGORIES
from traceatlas.model.vocab import DEVICE_CATEGORIES as DEVICE_CATEGORIES

DICT_STR = pa.dictionary(pa.int32(), pa.string())


@dataclass(frozen=True)
class Column:
    """One column: name (unit in the suffix), Arrow type, unit, doc."""

    name: str
    dtype: pa.DataType
    unit: str
    doc: str
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    """One canonical table."""

    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the table."""
        return pa.schema([pa.field(c.name, c.dtype, c.nullable) for c in self.columns])

    @property
    def column_names(self) -> list[str]:
        """Column names in declaration order."""
        return [c.name for c in self.columns]


def _c(name: str, dtype: pa.DataType, unit: str, doc: str, nullable: bool = True) -> Column:
    return Column(name, dtype, unit, doc, nullable)


RANK = _c("rank", pa.int32(), "", "Rank (process index in the job).", False)
TRACK = _c("track_id", pa.int32(), "", "Track id, unique within a rank; key is (rank, track_id).")

TRACKS = Table(
    "tracks",
    "One row per timeline: a host thread, a device stream or queue, a counter source.",
    (
        RANK,
        _c("track_id", pa.int32(), "", "Track id, unique within a rank.", False),
        _c("kind", DICT_STR, "", "host_thread | gpu_stream | device | counter | other.", False),
        _c("name", pa.string(), "", "Display name (thread or stream name from the source)."),
        _c("host", pa.string(), "", "Host name when the source records it."),
        _c("pid", pa.int64(), "", "OS process id (host) or device index (GPU rows of Kineto)."),
        _c("tid", pa.int64(), "", "OS thread id, or stream id for device rows."),
        _c("device", pa.int32(), "", "Device index; -1 for host tracks.", False),
        _c("stream", pa.int64(), "", "Stream or queue id; -1 for host tracks.", False),
        _c("source_pid", pa.string(), "", "The pid exactly as the source wrote it."),
        _c("source_tid", pa.string(), "", "The tid exactly as the source wrote it."),
    ),
)

INTERVALS = Table(
    "intervals",
    "Complete events with a start and an end. Overlapping, non-nested events are kept.",
    (
        RANK,
        TRACK,
        _c("start_ns", pa.int64(), "ns", "Start on the common clock.", False),
        _c("end_ns", pa.int64(), "ns", "End on the common clock.", False),
        _c("dur_ns", pa.int64(), "ns", "end_ns - start_ns.", False),
        _c("name", DICT_STR, "", "Event name.", False),
        _c("category", DICT_STR, "", "Canonical category (see CATEGORIES).", False),
        _c("source_category", DICT_STR, "", "Category exactly as the source wrote it."),
        _c("depth", pa.int32(), "", "Nesting depth on its track (0 = top level).", False),
        _c("correlation", pa.int64(), "", "Host launch <-> device activity id (CUDA/HIP)."),
        _c("external_id", pa.int64(), "", "Id linking device activity to the framework op."),
        _c("step", pa.int32(), "", "Iteration number, -1 if none.", False),
        _c("bytes", pa.int64(), "bytes", "Bytes moved (memcpy, memset)."),
        _c("device", pa.int32(), "", "Device index of device activity; null on host."),
        _c("stream", pa.int64(), "", "Stream id of device activity; null on host."),
        _c("collective", DICT_STR, "", "Collective op name (e.g. allreduce)."),
        _c("process_group", pa.string(), "", "Process group name of a collective."),
        _c("group_ranks", pa.string(), "", "Ranks of the process group, as the source lists them."),
        _c("in_msg_nelems", pa.int64(), "elements", "Input message size of a collective."),
        _c("out_msg_nelems", pa.int64(), "elements", "Output message size of a collective."),
        _c("dtype", pa.string(), "", "Element type of a collective."),
        _c("grid", pa.list_(pa.int32()), "", "Kernel grid [x, y, z]."),
        _c("block", pa.list_(pa.int32()), "", "Kernel block [x, y, z]."),
        _c("memcpy_kind", DICT_STR, "", "HtoD, DtoH, DtoD, ... for memcpy."),
        _c("args", pa.string(), "", "Every source argument, as a JSON object text."),
    ),
)

INSTANTS = Table(
    "instants",
    "Events without a duration (instant markers, and phases kept as-is).",
    (
        RANK,
        TRACK,
        _c("ts_ns", pa.int64(), "ns", "Time on the common clock."),
        _c("name", DICT_STR, "", "Event name."),
        _c("category", DICT_STR, "", "Canonical category.", False),
        _c("source_category", DICT_STR, "", "Category as the source wrote it."),
        _c("phase", DICT_STR, "", "Source phase letter (Chrome 'ph'), e.g. i, I, B, E."),
        _c("scope", pa.string(), "", "Instant scope: t (thread), p (process), g (global)."),
        _c("args", pa.string(), "", "Every source argument, as a JSON object text."),
    ),
)

COUNTERS = Table(
    "counters",
    "Sampled values (GPU metrics, PAPI, power, memory).",
    (
        RANK,
        TRACK,
        _c("ts_ns", pa.int64(), "ns", "Sample time on the common clock.", False),
        _c("name", DICT_STR, "", "Counter name (series).", False),
        _c("value", pa.float64(), "", "Sample value, in the counter's own unit."),
    ),
)

MESSAGES = Table(
    "messages",
    "Point-to-point communication (MPI and similar).",
    (
        RANK,
        _c("src_rank", pa.int32(), "", "Sender rank.", False),
        _c("dst_rank", pa.int32(), "", "Receiver rank.", False),
        _c("send_start_ns", pa.int64(), "ns", "Send start."),
        _c("send_end_ns", pa.int64(), "ns", "Send end."),
        _c("recv_start_ns", pa.int64(), "ns", "Receive start."),
        _c("recv_end_ns", pa.int64(), "ns", "Receive end."),
        _c("bytes", pa.int64(), "bytes", "Message size."),
        _c("tag", pa.int64(), "", "Message tag."),
        _c("communicator", pa.string(), "", "Communicator name or id."),
    ),
)

FLOWS = Table(
    "flows",
    "Links between events (Kineto ac2g launch -> kernel, fwdbwd): one row per link; a "
    "repeated id gives several rows, a missing side is null.",
    (
        RANK,
        _c("flow_id", pa.string(), "", "Flow id as the source wrote it.", False),
        _c("name", DICT_STR, "", "Flow name / category (ac2g, fwdbwd, async, ...)."),
        _c("src_track_id", pa.int32(), "", "Track of the flow start; null if missing."),
        _c("src_ts_ns", pa.int64(), "ns", "Time of the flow start; null if missing."),
        _c("dst_track_id", pa.int32(), "", "Track of the flow end; null if missing."),
        _c("dst_ts_ns", pa.int64(), "ns", "Time of the flow end; null if missing."),
    ),
)

METADATA = Table(
    "metadata",
    "Per-rank key/value metadata from the source (device properties, distributed info...).",
    (
        RANK,
        _c("key", pa.string(), "", "Metadata key.", False),
        _c("value", pa.string(), "", "Value as JSON text."),
    ),
)

TABLES: dict[str, Table] = {
    t.name: t for t in (TRACKS, INTERVALS, INSTANTS, COUNTERS, MESSAGES, FLOWS, METADATA)
}



def empty_table(name: str) -> pa.Table:
    """A zero-row table with the canonical schema of ``name``."""
    return TABLES[name].arrow_schema.empty_table()


def conform(name: str, table: pa.Table) -> pa.Table:
    """Reorder and cast ``table`` to the canonical schema of ``name``.

    Missing nullable columns are filled with nulls; a missing non-nullable column is an error.
    """
    spec = TABLES[name]
    arrays = []
    for col in spec.columns:
        if col.name in table.column_names:
            arr = table.column(col.name)
            if arr.type != col.dtype:
                arr = arr.cast(col.dtype)
            arrays.append(arr)
        elif col.nullable:
            arrays.append(pa.nulls(table.num_rows, col.dtype))
        else:
            raise KeyError(f"table {name!r} is missing required column {col.name!r}")
    return pa.Table.from_arrays(arrays, schema=spec.arrow_schema)
