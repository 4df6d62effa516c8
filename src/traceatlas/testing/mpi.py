"""Synthetic MPI traces written as Paraver ``.prv`` / ``.pcf`` / ``.row`` text, vectorised.

Two levels:

- ``write_paraver(path, n_ranks, names, regions, messages)``: any regions (rank, name
  index, start, end; one thread per rank) and point-to-point messages, written as
  Paraver event pairs (type 2 begin/end records) and communication records (type 3).
  Names starting ``MPI_`` get the Extrae MPI event type of the call
  (``paraver_pcf.mpi_type``: 50000001 point-to-point, 50000002 collective, 50000003
  other); other names are Extrae user functions (60000019). Values are 1-based indices
  within their type, labelled in the ``.pcf``. Times are integer ns (header unit ``_ns``).
- ``write_barrier_run(path, t_ms, barrier_starts)``: ``main`` and a trailing
  ``MPI_Barrier`` per rank (ms), for runs whose useful time per rank is set by hand.
- ``write_mpi_trace(path, ranks=, iterations=, ...)``: the benchmark's iterative MPI
  program: ``MPI_Init``, then per iteration and rank ``compute`` (rank r in
  ``heavy_ranks`` works ``1 + imbalance`` times as long), ``MPI_Send`` to rank r+1,
  ``MPI_Recv`` from rank r-1 (a ring: one message per rank and iteration; the receive
  ends ``recv_ns`` after the later of its own start and the sender's send start), and
  ``MPI_Allreduce`` (every rank leaves it ``allreduce_ns`` after the last rank enters),
  then ``MPI_Finalize``; iterations are ``gap_ns`` apart. ``MpiTrace.counts`` gives the numbers the
  parameters imply.

Records are sorted by time (a region's end before a begin at the same time), as Paraver
requires. Lines are built by Arrow string kernels (no Python loop over records): 10 M
events (1,024 ranks) take ~20-27 s and ~4.4 GB on the shared 2-core machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.io.paraver_pcf import mpi_type

I64 = npt.NDArray[np.int64]
USER_FUNCTION_TYPE = 60_000_019
_TYPE_LABELS = {
    50_000_001: "MPI Point-to-point",
    50_000_002: "MPI Collective Comm",
    50_000_003: "MPI Other",
    USER_FUNCTION_TYPE: "User function",
}


@dataclass(frozen=True)
class Regions:
    """Regions (one thread per rank): ``name`` indexes the writer's ``names``; times ns."""

    rank: I64
    name: I64
    start_ns: I64
    end_ns: I64


@dataclass(frozen=True)
class Messages:
    """Point-to-point messages (times ns, sizes in bytes)."""

    src: I64
    dst: I64
    send_start_ns: I64
    send_end_ns: I64
    recv_start_ns: I64
    recv_end_ns: I64
    bytes: I64
    tag: I64


def _arr(values: object) -> I64:
    return np.ascontiguousarray(values, dtype=np.int64)


def event_types(names: Sequence[str]) -> tuple[I64, I64]:
    """(Paraver event type, value) per name: MPI calls by Extrae type, others 60000019."""
    types = _arr([mpi_type(n) if n.startswith("MPI_") else USER_FUNCTION_TYPE for n in names])
    values = np.zeros(len(names), dtype=np.int64)
    for t in np.unique(types).tolist():
        idx = np.flatnonzero(types == t)
        values[idx] = np.arange(1, len(idx) + 1)
    return types, values


def write_paraver(path: str | Path, n_ranks: int, names: Sequence[str], regions: Regions,
                  messages: Messages | None = None, end_ns: int | None = None) -> Path:
    """Write ``path`` (.prv) with its .pcf and .row; return the .prv path."""
    prv = Path(path)
    types, values = event_types(names)
    n = len(regions.rank)
    # Ends first so that, after a stable sort on time, an end precedes a begin at the
    # same time (the reader pairs LIFO by time, then file order).
    time = np.concatenate([regions.end_ns, regions.start_ns]).astype(np.int64)
    rank = np.concatenate([regions.rank, regions.rank]).astype(np.int64)
    name = np.concatenate([regions.name, regions.name]).astype(np.int64)
    value = np.concatenate([np.zeros(n, np.int64), values[regions.name]])
    etype = types[name]
    ev_order = np.argsort(time, kind="stable")
    events = _event_lines(rank[ev_order], time[ev_order], etype[ev_order], value[ev_order])
    if messages is not None and len(messages.src):
        order = np.argsort(messages.send_start_ns, kind="stable")
        comm = _comm_lines(messages, order)
        comm_time = messages.send_start_ns[order]
        # Merge by time: communication records go before events at the same time.
        ev_time = time[ev_order]
        pos = np.searchsorted(ev_time, comm_time, side="left") + np.arange(len(comm_time))
        merged = np.zeros(len(ev_time) + len(comm_time), dtype=np.int64)
        is_comm = np.zeros(len(merged), dtype=bool)
        is_comm[pos] = True
        merged[is_comm] = np.arange(len(comm_time))
        merged[~is_comm] = np.arange(len(ev_time)) + len(comm_time)
        lines = pa.concat_arrays([comm, events]).take(pa.array(merged))
    else:
        lines = events
    last = int(time.max(initial=0))
    if messages is not None and len(messages.src):
        last = max(last, int(messages.recv_end_ns.max()), int(messages.send_end_ns.max()))
    end = last if end_ns is None else end_ns
    tasks = ",".join(["1:1"] * n_ranks)
    header = f"#Paraver (01/01/2024 at 00:00):{end}_ns:1({n_ranks}):1:{n_ranks}({tasks})\n"
    with prv.open("wb") as out:
        out.write(header.encode())
        out.write(_string_bytes(lines))
    stem = prv.name.removesuffix(".prv")
    prv.with_name(stem + ".pcf").write_text(_pcf(names, types, values))
    threads = "\n".join(f"THREAD 1.{r + 1}.1" for r in range(n_ranks))
    prv.with_name(stem + ".row").write_text(
        f"LEVEL NODE SIZE 1\nnode1\n\nLEVEL THREAD SIZE {n_ranks}\n{threads}\n")
    return prv


def write_barrier_run(path: str | Path, t_ms: int, barrier_starts: Sequence[int]) -> Path:
    """A run of ``len(barrier_starts)`` ranks: ``main`` [0, t] on each rank and
    ``MPI_Barrier`` [start_r, t] on rank r (ms), so that rank r's useful time is start_r.
    Writes ``path`` (.prv) with its .pcf and .row; returns the .prv path."""
    ms = 1_000_000
    n = len(barrier_starts)
    rows = [(r, 0, 0, t_ms) for r in range(n)] + [
        (r, 1, s, t_ms) for r, s in enumerate(barrier_starts)]
    a = np.array(rows, dtype=np.int64)
    return write_paraver(path, n, ["main", "MPI_Barrier"],
                         Regions(a[:, 0], a[:, 1], a[:, 2] * ms, a[:, 3] * ms))


def _text(values: I64) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def _event_lines(rank: I64, time: I64, etype: I64, value: I64) -> pa.Array:
    """``2:cpu:1:task:1:time:type:value\\n`` (cpu = task = rank + 1)."""
    task = _text(rank + 1)
    return _join(["2", task, "1", task, "1", _text(time), _small(etype, ""),
                  _small(value, "\n")])


def _comm_lines(m: Messages, order: I64) -> pa.Array:
    """``3:cpu:1:task:1:lsend:psend:cpu:1:task:1:lrecv:precv:size:tag\\n``."""
    src, dst = _text(m.src[order] + 1), _text(m.dst[order] + 1)
    return _join(["3", src, "1", src, "1", _text(m.send_start_ns[order]),
                  _text(m.send_end_ns[order]), dst, "1", dst, "1",
                  _text(m.recv_start_ns[order]), _text(m.recv_end_ns[order]),
                  _small(m.bytes[order], ""), _small(m.tag[order], "\n")])


def _small(values: I64, suffix: str) -> pa.Array:
    """Text of ``values`` + ``suffix`` through a dictionary (few distinct values)."""
    uniq, inverse = np.unique(values, return_inverse=True)
    if len(uniq) > len(values) // 4:
        return pc.binary_join_element_wise(_text(values), suffix, "")
    words = pa.array([f"{v}{suffix}" for v in uniq.tolist()], pa.string())
    return words.take(pa.array(inverse.astype(np.int32)))


def _join(parts: list[object]) -> pa.Array:
    """Parts joined by ``:`` (the last part carries the newline)."""
    return pc.binary_join_element_wise(*parts, ":").cast(pa.large_string())


def _string_bytes(lines: pa.Array) -> memoryview:
    """The characters of a large string array back to back (each line ends in \\n)."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64, count=len(lines) + 1,
                            offset=8 * lines.offset)
    data = lines.buffers()[2]
    if data is None:
        return memoryview(b"")
    return memoryview(data)[int(offsets[0]):int(offsets[-1])]


def _pcf(names: Sequence[str], types: I64, values: I64) -> str:
    out = ["DEFAULT_OPTIONS", "", "LEVEL               THREAD", "UNITS               NANOSEC",
           "", "STATES", "0    Idle", "1    Running", ""]
    for t in sorted(set(types.tolist()) | set(_TYPE_LABELS)):
        out += ["EVENT_TYPE", f"0    {t}    {_TYPE_LABELS.get(t, str(t))}", "VALUES",
                "0   End"]
        out += [f"{int(values[i])}   {names[i]}" for i in np.flatnonzero(types == t).tolist()]
        out.append("")
    return "\n".join(out) + "\n"


MPI_NAMES = ("MPI_Init", "compute", "MPI_Send", "MPI_Recv", "MPI_Allreduce", "MPI_Finalize")
"""Region names of ``write_mpi_trace`` (name index = position)."""


@dataclass(frozen=True)
class MpiTrace:
    """What ``write_mpi_trace`` wrote: the .prv path and the counts its parameters imply."""

    path: Path
    counts: dict[str, int] = field(default_factory=dict)


def mpi_arrays(ranks: int, iterations: int, *, compute_ns: int = 1_000_000,
               imbalance: float = 0.0, heavy_ranks: Sequence[int] = (0,),
               send_ns: int = 10_000, recv_ns: int = 20_000, allreduce_ns: int = 30_000,
               gap_ns: int = 5_000, message_bytes: Sequence[int] = (4096,),
               init_ns: int = 100_000, start_ns: int = 0) -> tuple[Regions, Messages]:
    """Regions and messages of the iterative ring + allreduce program (see module doc)."""
    r = np.arange(ranks, dtype=np.int64)
    work = np.full(ranks, compute_ns, dtype=np.int64)
    heavy = [h for h in heavy_ranks if 0 <= h < ranks]
    work[heavy] = round(compute_ns * (1.0 + imbalance))
    src = (r - 1) % ranks
    # Offsets within an iteration (per rank): a receive ends recv_ns after both its own
    # start and the matching send's start; the allreduce ends allreduce_ns after the last
    # rank enters it.
    o_send = work
    o_recv = work + send_ns
    o_recv_end = np.maximum(o_recv, o_send[src]) + recv_ns
    o_done = int(o_recv_end.max()) + allreduce_ns
    period = o_done + gap_ns
    it = np.arange(iterations, dtype=np.int64)
    base = (start_ns + init_ns + it * period)[:, None] + np.zeros((1, ranks), np.int64)
    c_end = base + o_send[None, :]  # (I, R)
    s_end = base + o_recv[None, :]
    r_end = base + o_recv_end[None, :]
    a_end = base + o_done
    starts = np.stack([base, c_end, s_end, r_end], axis=2)  # (I, R, 4)
    ends = np.stack([c_end, s_end, r_end, a_end], axis=2)
    names = np.broadcast_to(np.arange(1, 5, dtype=np.int64), starts.shape)
    rank_col = np.broadcast_to(r[None, :, None], starts.shape)
    end_all = start_ns + init_ns + iterations * period
    fin = np.full(ranks, end_all, np.int64)
    regions = Regions(
        rank=_arr(np.concatenate([r, rank_col.ravel(), r])),
        name=_arr(np.concatenate([np.zeros(ranks, np.int64), names.ravel(),
                                  np.full(ranks, 5, np.int64)])),
        start_ns=_arr(np.concatenate([np.full(ranks, start_ns, np.int64), starts.ravel(),
                                      fin])),
        end_ns=_arr(np.concatenate([np.full(ranks, start_ns + init_ns // 2, np.int64),
                                    ends.ravel(), fin + init_ns // 2])),
    )
    dst = (r + 1) % ranks  # the message of rank r is received by rank r + 1
    sizes = _arr(message_bytes)
    messages = Messages(
        src=_arr(np.broadcast_to(r, (iterations, ranks)).ravel()),
        dst=_arr(np.broadcast_to(dst, (iterations, ranks)).ravel()),
        send_start_ns=_arr(c_end.ravel()), send_end_ns=_arr(s_end.ravel()),
        recv_start_ns=_arr(s_end[:, dst].ravel()), recv_end_ns=_arr(r_end[:, dst].ravel()),
        bytes=_arr(np.broadcast_to(sizes[it % len(sizes)][:, None],
                                   (iterations, ranks)).ravel()),
        tag=_arr(np.broadcast_to(it[:, None], (iterations, ranks)).ravel()),
    )
    return regions, messages


def write_mpi_trace(path: str | Path, *, ranks: int = 4, iterations: int = 10,
                    compute_ns: int = 1_000_000, imbalance: float = 0.0,
                    heavy_ranks: Sequence[int] = (0,), send_ns: int = 10_000,
                    recv_ns: int = 20_000, allreduce_ns: int = 30_000, gap_ns: int = 5_000,
                    message_bytes: Sequence[int] = (4096,), init_ns: int = 100_000
                    ) -> MpiTrace:
    """Write the iterative MPI program (module doc) for ``ranks`` x ``iterations``.

    ``message_bytes`` cycles by iteration (iteration i sends ``message_bytes[i % len]``).
    ``counts``: ``intervals`` (4 per rank and iteration + MPI_Init + MPI_Finalize per rank),
    ``messages`` (one per rank and iteration), ``ranks``, ``events`` (intervals +
    messages), ``message_bytes`` (total).
    """
    regions, messages = mpi_arrays(
        ranks, iterations, compute_ns=compute_ns, imbalance=imbalance,
        heavy_ranks=heavy_ranks, send_ns=send_ns, recv_ns=recv_ns,
        allreduce_ns=allreduce_ns, gap_ns=gap_ns, message_bytes=message_bytes,
        init_ns=init_ns)
    prv = write_paraver(path, ranks, MPI_NAMES, regions, messages)
    n_iv = ranks * (4 * iterations + 2)
    n_msg = ranks * iterations
    counts = {"ranks": ranks, "intervals": n_iv, "messages": n_msg,
              "events": n_iv + n_msg, "message_bytes": int(messages.bytes.sum())}
    return MpiTrace(prv, counts)
