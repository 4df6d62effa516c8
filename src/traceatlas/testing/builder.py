"""Write genuine PyTorch profiler (Kineto, 2022+ schema) JSON traces from a few calls.

All times given to the builder are integer nanoseconds relative to the trace start,
``base_time_ns`` (the file's ``baseTimeNanoseconds``). They are written the way Kineto
writes them: ``ts`` / ``dur`` in microseconds with exactly 3 decimals, so that a reader
recovers ``start_ns = base_time_ns + start`` to the nanosecond.

Example::

    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 1_000_000)                                      # ProfilerStep#1, 0-1 ms
    corr = b.launch("void gemm()", 10_000, 5_000, 20_000, 40_000)  # ns
    b.write("rank-0.json.gz")

What is written, per call (``pid`` = OS pid, main thread ``tid`` = pid, GPU ``pid`` =
device index, GPU ``tid`` = stream, as Kineto does):

- ``step`` / ``annotation``: a ``user_annotation`` X event (``ProfilerStep#N`` for a step);
  ``annotation(gpu=True)`` adds, per stream, a ``gpu_user_annotation`` over the device
  events launched inside the range, 1 ns earlier and 2 ns longer (Kineto's display fix).
- ``cpu_op``: a ``cpu_op`` X event (with collective args when ``collective`` is given).
- ``launch``: a ``cuda_runtime`` launch on the host, a ``kernel`` / ``gpu_memcpy`` /
  ``gpu_memset`` event on the device stream, both with the same fresh ``correlation``,
  and the ``ac2g`` flow pair (``s`` on the launch, ``f`` with ``bp: "e"`` on the device
  event, ``id`` = correlation). The runtime and the device event carry the ``External
  id`` of the innermost host op enclosing the launch on its thread, as Kineto links them.
- ``sync``: a ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` runtime call and its
  ``cuda_sync`` device event.
- ``instant``: a ``cpu_instant_event`` (``ph: "i"``, scope ``t``).
- ``write``: metadata (``M``: process_name, process_labels, process_sort_index,
  thread_name, thread_sort_index) and, with ``profiler_markers``, the profiler's own span
  (``cat: "Trace"``, pid ``Spans``) and the global ``Iteration Start`` / ``Record Window
  End`` instants, over [first event start, last event end].
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

DEFAULT_BASE_TIME_NS = 1_700_000_000_000_000_000
"""Default ``baseTimeNanoseconds`` (2023-11-14T22:13:20Z, in ns since the unix epoch)."""

LaunchKind = Literal["kernel", "memcpy", "memset"]
SyncKind = Literal["Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event"]

_DEVICE_CAT: dict[str, str] = {"kernel": "kernel", "memcpy": "gpu_memcpy",
                               "memset": "gpu_memset"}
_RUNTIME: dict[str, tuple[str, int]] = {
    "kernel": ("cudaLaunchKernel", 211),
    "memcpy": ("cudaMemcpyAsync", 41),
    "memset": ("cudaMemsetAsync", 51),
}
_STREAM_SYNC_TID_OFFSET = 1_000_000
"""Kineto moves ``Stream Sync`` events to a virtual row, tid = stream + 1,000,000."""


@dataclass(frozen=True)
class Collective:
    """Collective metadata, as Kineto writes it on ``record_param_comms`` and NCCL kernels.

    ``in_msg_nelems`` / ``out_msg_nelems`` are element counts (not bytes).
    """

    name: str = "allreduce"
    in_msg_nelems: int = 0
    out_msg_nelems: int = 0
    dtype: str = "Float"
    group_ranks: tuple[int, ...] = (0, 1)
    pg_name: str = "0"
    pg_desc: str = "default_pg"
    seq: int | None = None

    def args(self) -> dict[str, Any]:
        """The Kineto ``args`` keys of this collective."""
        out: dict[str, Any] = {
            "Collective name": self.name,
            "In msg nelems": self.in_msg_nelems,
            "Out msg nelems": self.out_msg_nelems,
            "Group size": len(self.group_ranks),
            "dtype": self.dtype,
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": self.pg_name,
            "Process Group Description": self.pg_desc,
            "Process Group Ranks": "[" + ", ".join(map(str, self.group_ranks)) + "]",
        }
        if self.seq is not None:
            out["Seq"] = self.seq
        return out


@dataclass
class _HostOp:
    cat: str
    name: str
    tid: int
    start_ns: int
    end_ns: int
    external_id: int
    args: dict[str, Any]
    gpu: bool = False


@dataclass
class _Launch:
    kind: str
    name: str
    runtime_name: str
    cbid: int
    tid: int
    cpu_start_ns: int
    cpu_dur_ns: int
    gpu_start_ns: int
    gpu_dur_ns: int
    stream: int
    gpu_tid: int
    correlation: int
    device_args: dict[str, Any] = field(default_factory=dict)
    flow: bool = True
    host_call: bool = True
    """False for the 2nd.. kernels of a graph launch: they share the first one's call."""


@dataclass
class _Instant:
    name: str
    tid: int
    ts_ns: int
    args: dict[str, Any] | None = None


def micros(ns: int) -> str:
    """Integer ns -> Kineto's microsecond text with 3 decimals (``1234`` -> ``1.234``)."""
    if ns < 0:
        raise ValueError(f"times must be >= 0 ns relative to the trace start, got {ns}")
    return f"{ns // 1000}.{ns % 1000:03d}"


def _check_range(start_ns: int, end_ns: int) -> None:
    if start_ns < 0 or end_ns < start_ns:
        raise ValueError(f"need 0 <= start_ns <= end_ns, got [{start_ns}, {end_ns}]")


class TraceBuilder:
    """Builds one rank's Kineto trace. Times are integer ns relative to ``base_time_ns``.

    ``rank=None`` writes no ``distributedInfo`` (a file whose rank a reader must infer).
    ``device`` defaults to the rank (one GPU per rank), ``pid`` to ``4242 + rank``.
    """

    def __init__(
        self,
        rank: int | None = 0,
        world_size: int = 1,
        *,
        base_time_ns: int = DEFAULT_BASE_TIME_NS,
        device: int | None = None,
        pid: int | None = None,
        backend: str = "nccl",
        process_name: str = "python",
        profiler_markers: bool = True,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.base_time_ns = base_time_ns
        self.device = device if device is not None else (rank or 0)
        self.pid = pid if pid is not None else 4242 + (rank or 0)
        self.backend = backend
        self.process_name = process_name
        self.profiler_markers = profiler_markers
        self._host: list[_HostOp] = []
        self._launches: list[_Launch] = []
        self._instants: list[_Instant] = []
        self._next_external_id = 1
        self._next_correlation = 1

    # -- recording ---------------------------------------------------------------------

    @property
    def main_tid(self) -> int:
        """The main thread's OS tid (equal to the pid, as for a Python main thread)."""
        return self.pid

    def _host_op(self, cat: str, name: str, start_ns: int, end_ns: int, tid: int | None,
                 args: dict[str, Any] | None = None, gpu: bool = False) -> int:
        _check_range(start_ns, end_ns)
        ext = self._next_external_id
        self._next_external_id += 1
        self._host.append(_HostOp(cat, name, self.main_tid if tid is None else tid, start_ns,
                                  end_ns, ext, dict(args or {}), gpu))
        return ext

    def step(self, n: int, start_ns: int, end_ns: int) -> int:
        """``ProfilerStep#n`` user annotation on the main thread over [start_ns, end_ns).

        Returns its External id.
        """
        return self._host_op("user_annotation", f"ProfilerStep#{n}", start_ns, end_ns, None)

    def annotation(self, name: str, start_ns: int, end_ns: int, *, gpu: bool = False,
                   tid: int | None = None) -> int:
        """A ``record_function`` range (``user_annotation``) over [start_ns, end_ns) ns.

        ``gpu=True`` also writes a ``gpu_user_annotation`` on each stream that runs device
        events launched inside the range: from the first such event's start - 1 ns to the
        last one's end + 1 ns. Returns the External id.
        """
        return self._host_op("user_annotation", name, start_ns, end_ns, tid, gpu=gpu)

    def cpu_op(self, name: str, start_ns: int, end_ns: int, *, tid: int | None = None,
               collective: Collective | None = None,
               args: dict[str, Any] | None = None) -> int:
        """An operator (``cpu_op``) over [start_ns, end_ns) ns; returns its External id.

        ``collective`` adds the collective args (for ``record_param_comms``).
        """
        extra = dict(args or {})
        if collective is not None:
            extra.update(collective.args())
            extra["Rank"] = self.rank if self.rank is not None else 0
        return self._host_op("cpu_op", name, start_ns, end_ns, tid, extra)

    def launch(
        self,
        name: str,
        cpu_start_ns: int,
        cpu_dur_ns: int,
        gpu_start_ns: int,
        gpu_dur_ns: int,
        *,
        stream: int = 7,
        kind: LaunchKind = "kernel",
        nbytes: int | None = None,
        collective: Collective | None = None,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
        tid: int | None = None,
        runtime_name: str | None = None,
    ) -> int:
        """A host launch and the device activity it starts; returns the correlation id.

        ``name`` is the device event's name (a kernel signature, ``Memcpy HtoD (Pageable ->
        Device)``, ``Memset (Device)``). The runtime call (``cudaLaunchKernel``,
        ``cudaMemcpyAsync`` or ``cudaMemsetAsync`` unless ``runtime_name`` is given) runs
        on the host over [cpu_start_ns, cpu_start_ns + cpu_dur_ns); the device event over
        [gpu_start_ns, gpu_start_ns + gpu_dur_ns) on ``stream``. ``nbytes`` (bytes) is
        written for memcpy / memset; ``collective`` adds collective args to the kernel.
        """
        _check_range(cpu_start_ns, cpu_start_ns + cpu_dur_ns)
        _check_range(gpu_start_ns, gpu_start_ns + gpu_dur_ns)
        if kind not in _DEVICE_CAT:
            raise ValueError(f"kind must be kernel, memcpy or memset, got {kind!r}")
        default_runtime, cbid = _RUNTIME[kind]
        corr = self._new_correlation()
        dev: dict[str, Any]
        if kind == "kernel":
            dev = {
                "queued": 0, "device": self.device, "context": 1, "stream": stream,
                "correlation": corr, "registers per thread": 32, "shared memory": 0,
                "blocks per SM": 0.5, "warps per SM": 2.0, "grid": list(grid),
                "block": list(block), "est. achieved occupancy %": 0,
            }
            if collective is not None:
                dev.update(collective.args())
        else:
            size = nbytes if nbytes is not None else 0
            dev = {
                "device": self.device, "context": 1, "stream": stream, "correlation": corr,
                "bytes": size,
                "memory bandwidth (GB/s)": size / gpu_dur_ns if gpu_dur_ns else 0.0,
            }
        self._launches.append(_Launch(
            kind=kind, name=name, runtime_name=runtime_name or default_runtime, cbid=cbid,
            tid=self.main_tid if tid is None else tid, cpu_start_ns=cpu_start_ns,
            cpu_dur_ns=cpu_dur_ns, gpu_start_ns=gpu_start_ns, gpu_dur_ns=gpu_dur_ns,
            stream=stream, gpu_tid=stream, correlation=corr, device_args=dev,
        ))
        return corr

    def graph_launch(
        self,
        kernels: Sequence[tuple[str, int, int]],
        cpu_start_ns: int,
        cpu_dur_ns: int,
        *,
        stream: int = 7,
        tid: int | None = None,
        runtime_name: str = "cudaGraphLaunch",
    ) -> int:
        """A CUDA graph replay: one ``cudaGraphLaunch`` call over [cpu_start_ns,
        cpu_start_ns + cpu_dur_ns) and one ``kernel`` event per ``(name, gpu_start_ns,
        gpu_dur_ns)``, all with the call's correlation id (and one ``f`` flow each), as
        Kineto writes a graph launch. Returns the correlation id."""
        if not kernels:
            raise ValueError("a graph launch needs at least one kernel")
        first = len(self._launches)
        corr = 0
        for i, (name, gpu_start_ns, gpu_dur_ns) in enumerate(kernels):
            if i == 0:
                corr = self.launch(name, cpu_start_ns, cpu_dur_ns, gpu_start_ns, gpu_dur_ns,
                                   stream=stream, tid=tid, runtime_name=runtime_name)
                continue
            _check_range(gpu_start_ns, gpu_start_ns + gpu_dur_ns)
            head = self._launches[first]
            self._launches.append(_Launch(
                kind="kernel", name=name, runtime_name=runtime_name, cbid=head.cbid,
                tid=head.tid, cpu_start_ns=cpu_start_ns, cpu_dur_ns=cpu_dur_ns,
                gpu_start_ns=gpu_start_ns, gpu_dur_ns=gpu_dur_ns, stream=stream,
                gpu_tid=stream, correlation=corr, device_args=dict(head.device_args),
                host_call=False))
        return corr

    def sync(
        self,
        cpu_start_ns: int,
        cpu_dur_ns: int,
        gpu_start_ns: int,
        gpu_dur_ns: int,
        *,
        stream: int = 7,
        kind: SyncKind = "Stream Sync",
        tid: int | None = None,
    ) -> int:
        """A synchronisation: host runtime call and its ``cuda_sync`` event (ns).

        ``Stream Sync`` goes to Kineto's virtual row tid = stream + 1,000,000. No ac2g
        flow is written (Kineto writes none for syncs). Returns the correlation id.
        """
        _check_range(cpu_start_ns, cpu_start_ns + cpu_dur_ns)
        _check_range(gpu_start_ns, gpu_start_ns + gpu_dur_ns)
        corr = self._new_correlation()
        runtime = "cudaStreamSynchronize" if kind == "Stream Sync" else "cudaDeviceSynchronize"
        cbid = 131 if kind == "Stream Sync" else 165
        gpu_tid = stream + _STREAM_SYNC_TID_OFFSET if kind == "Stream Sync" else stream
        self._launches.append(_Launch(
            kind="sync", name=kind, runtime_name=runtime, cbid=cbid,
            tid=self.main_tid if tid is None else tid, cpu_start_ns=cpu_start_ns,
            cpu_dur_ns=cpu_dur_ns, gpu_start_ns=gpu_start_ns, gpu_dur_ns=gpu_dur_ns,
            stream=stream, gpu_tid=gpu_tid, correlation=corr,
            device_args={"cuda_sync_kind": kind, "stream": stream, "correlation": corr,
                         "device": self.device, "context": 1},
            flow=False,
        ))
        return corr

    def instant(self, name: str, ts_ns: int, *, tid: int | None = None) -> None:
        """A thread-scoped instant marker (``cpu_instant_event``) at ``ts_ns``."""
        _check_range(ts_ns, ts_ns)
        self._instants.append(_Instant(name, self.main_tid if tid is None else tid, ts_ns))

    def memory(self, ts_ns: int, nbytes: int, *, addr: int | None = None,
               total_allocated: int | None = None, total_reserved: int | None = None,
               device_type: int = 1, device_id: int | None = None,
               tid: int | None = None) -> None:
        """A ``[memory]`` instant as PyTorch's ``profile_memory=True`` writes it: ``Bytes``
        (negative on a free), ``Addr``, ``Total Allocated``/``Total Reserved`` (left out
        when None, as older PyTorch did), ``Device Type`` (1 CUDA, 0 CPU), ``Device Id``
        (default: this rank's device; -1 for the CPU)."""
        _check_range(ts_ns, ts_ns)
        dev = device_id if device_id is not None else (self.device if device_type else -1)
        args: dict[str, Any] = {}
        if total_reserved is not None:
            args["Total Reserved"] = total_reserved
        if total_allocated is not None:
            args["Total Allocated"] = total_allocated
        args.update({"Bytes": nbytes, "Device Id": dev, "Device Type": device_type})
        if addr is not None:
            args["Addr"] = addr
        self._instants.append(_Instant("[memory]", self.main_tid if tid is None else tid,
                                       ts_ns, args))

    def _new_correlation(self) -> int:
        corr = self._next_correlation
        self._next_correlation += 1
        return corr

    # -- output ------------------------------------------------------------------------

    def _linked_op(self, tid: int, ts_ns: int) -> _HostOp | None:
        """Innermost host op on ``tid`` whose [start, end) holds ``ts_ns``."""
        best: _HostOp | None = None
        for op in self._host:
            if op.tid == tid and op.start_ns <= ts_ns < op.end_ns and (
                best is None
                or (op.start_ns, -op.end_ns) > (best.start_ns, -best.end_ns)
            ):
                best = op
        return best

    def _window(self) -> tuple[int, int]:
        starts = [op.start_ns for op in self._host]
        ends = [op.end_ns for op in self._host]
        for ln in self._launches:
            starts += [ln.cpu_start_ns, ln.gpu_start_ns]
            ends += [ln.cpu_start_ns + ln.cpu_dur_ns, ln.gpu_start_ns + ln.gpu_dur_ns]
        starts += [i.ts_ns for i in self._instants]
        ends += [i.ts_ns for i in self._instants]
        return (min(starts), max(ends)) if starts else (0, 0)

    def events(self) -> list[str]:
        """The ``traceEvents`` entries, each one JSON object text."""
        out: list[str] = []
        pid = self.pid
        for ev_idx, host in enumerate(self._host):
            args = {"External id": host.external_id, "Record function id": 0, **host.args,
                    "Ev Idx": ev_idx}
            out.append(_x(host.cat, host.name, pid, host.tid, host.start_ns,
                          host.end_ns - host.start_ns, args))
        linked: dict[int, int | None] = {}
        for ln in self._launches:
            op = self._linked_op(ln.tid, ln.cpu_start_ns)
            link = op.external_id if op is not None else None
            linked[ln.correlation] = link
            if not ln.host_call:
                continue
            head = {"External id": link} if link is not None else {}
            out.append(_x("cuda_runtime", ln.runtime_name, pid, ln.tid, ln.cpu_start_ns,
                          ln.cpu_dur_ns,
                          {**head, "cbid": ln.cbid, "correlation": ln.correlation}))
            if ln.flow:
                out.append(_flow("s", ln.correlation, pid, ln.tid, ln.cpu_start_ns))
        for ln in self._launches:
            link = linked[ln.correlation]
            head = {"External id": link} if link is not None else {}
            cat = "cuda_sync" if ln.kind == "sync" else _DEVICE_CAT[ln.kind]
            out.append(_x(cat, ln.name, self.device, ln.gpu_tid, ln.gpu_start_ns,
                          ln.gpu_dur_ns, {**head, **ln.device_args}))
            if ln.flow:
                out.append(_flow("f", ln.correlation, self.device, ln.gpu_tid,
                                 ln.gpu_start_ns))
        out += self._gpu_annotations()
        for inst in self._instants:
            out.append(_obj([("ph", '"i"'), ("cat", '"cpu_instant_event"'),
                             ("s", '"t"'), ("name", json.dumps(inst.name)),
                             ("pid", str(pid)), ("tid", str(inst.tid)),
                             ("ts", micros(inst.ts_ns)),
                             *([("args", json.dumps(inst.args))] if inst.args else [])]))
        out += self._metadata_events()
        return out

    def _gpu_annotations(self) -> list[str]:
        out: list[str] = []
        for op in self._host:
            if not op.gpu:
                continue
            spans: dict[int, tuple[int, int]] = {}
            for ln in self._launches:
                if ln.kind == "sync" or ln.tid != op.tid:
                    continue
                if not op.start_ns <= ln.cpu_start_ns < op.end_ns:
                    continue
                lo, hi = ln.gpu_start_ns, ln.gpu_start_ns + ln.gpu_dur_ns
                if ln.stream in spans:
                    lo, hi = min(lo, spans[ln.stream][0]), max(hi, spans[ln.stream][1])
                spans[ln.stream] = (lo, hi)
            for stream, (lo, hi) in sorted(spans.items()):
                start = max(lo - 1, 0)
                out.append(_x("gpu_user_annotation", op.name, self.device, stream, start,
                              hi + 1 - start, {"External id": op.external_id}))
        return out

    def _metadata_events(self) -> list[str]:
        lo, hi = self._window()
        pid = self.pid
        out = [
            _meta("process_name", pid, 0, lo, {"name": self.process_name}),
            _meta("process_labels", pid, 0, lo, {"labels": "CPU"}),
            _meta("process_sort_index", pid, 0, lo, {"sort_index": pid}),
        ]
        tids = sorted({op.tid for op in self._host} | {ln.tid for ln in self._launches}
                      | {i.tid for i in self._instants} | {self.main_tid})
        for tid in tids:
            out.append(_meta("thread_name", pid, tid, lo,
                             {"name": f"thread {tid} ({self.process_name})"}))
            out.append(_meta("thread_sort_index", pid, tid, lo, {"sort_index": tid}))
        dev = self.device
        out += [
            _meta("process_name", dev, 0, lo, {"name": self.process_name}),
            _meta("process_labels", dev, 0, lo, {"labels": f"GPU {dev}"}),
            _meta("process_sort_index", dev, 0, lo, {"sort_index": 5_000_000 + dev}),
        ]
        for gpu_tid in sorted({ln.gpu_tid for ln in self._launches}):
            out.append(_meta("thread_name", dev, gpu_tid, lo, {"name": f"stream {gpu_tid} "}))
            out.append(_meta("thread_sort_index", dev, gpu_tid, lo, {"sort_index": gpu_tid}))
        if self.profiler_markers:
            out.append(_obj([("ph", '"X"'), ("cat", '"Trace"'), ("ts", micros(lo)),
                             ("dur", micros(hi - lo)), ("pid", '"Spans"'),
                             ("tid", '"PyTorch Profiler"'),
                             ("name", '"PyTorch Profiler (0)"'),
                             ("args", '{"Op count": 0}')]))
            out.append(_meta("process_sort_index", "Spans", 0, lo,
                             {"sort_index": 536870912}))
            out.append(_obj([("name", '"Iteration Start: PyTorch Profiler"'), ("ph", '"i"'),
                             ("s", '"g"'), ("pid", '"Traces"'),
                             ("tid", '"Trace PyTorch Profiler"'), ("ts", micros(lo))]))
            out.append(_obj([("name", '"Record Window End"'), ("ph", '"i"'), ("s", '"g"'),
                             ("pid", '""'), ("tid", '""'), ("ts", micros(hi))]))
        return out

    def top_level(self) -> dict[str, Any]:
        """The top-level keys other than ``traceEvents``, in Kineto's order."""
        props = [_device_properties(i) for i in range(self.device + 1)]
        top: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": props}
        if self.rank is not None:
            ranks = list(range(self.world_size))
            top["distributedInfo"] = {
                "backend": self.backend, "rank": self.rank, "world_size": self.world_size,
                "pg_count": 1,
                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                               "backend_config": f"cuda:{self.backend}",
                               "pg_size": self.world_size, "ranks": ranks}],
            }
        top["record_shapes"] = 0
        top["with_stack"] = 0
        top["displayTimeUnit"] = "ms"
        top["baseTimeNanoseconds"] = self.base_time_ns
        return top

    def to_json(self) -> str:
        """The whole trace as Kineto JSON text."""
        parts = ["{"]
        for key, value in self.top_level().items():
            parts.append(f"  {json.dumps(key)}: {json.dumps(value)},")
        parts.append('  "traceEvents": [')
        parts.append(",\n".join("  " + e for e in self.events()))
        parts.append("  ],")
        parts.append('  "traceName": "traceatlas-testing.json"')
        parts.append("}")
        return "\n".join(parts) + "\n"

    def write(self, path: str | Path) -> Path:
        """Write the trace to ``path``; gzip-compressed when the name ends in ``.gz``."""
        out = Path(path)
        data = self.to_json().encode()
        if out.name.endswith(".gz"):
            data = gzip.compress(data, compresslevel=9, mtime=0)
        out.write_bytes(data)
        return out


def write_multi_rank(directory: str | Path, builders: Iterable[TraceBuilder], *,
                     gz: bool = True) -> list[Path]:
    """Write each builder to ``directory/rank-<rank>.json(.gz)``; returns the paths.

    Every builder needs a rank (``rank=None`` is rejected: use ``write`` with a name).
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for b in builders:
        if b.rank is None:
            raise ValueError("write_multi_rank needs builders with a rank")
        paths.append(b.write(root / f"rank-{b.rank}.json{'.gz' if gz else ''}"))
    return paths


def _device_properties(device: int) -> dict[str, Any]:
    return {
        "id": device, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929347584,
        "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
        "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
    }


def _obj(pairs: Sequence[tuple[str, str]]) -> str:
    """A JSON object from (key, raw JSON value text) pairs."""
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in pairs) + "}"


def _x(cat: str, name: str, pid: int, tid: int, ts_ns: int, dur_ns: int,
       args: dict[str, Any]) -> str:
    return _obj([("ph", '"X"'), ("cat", json.dumps(cat)), ("name", json.dumps(name)),
                 ("pid", str(pid)), ("tid", str(tid)), ("ts", micros(ts_ns)),
                 ("dur", micros(dur_ns)), ("args", json.dumps(args))])


def _flow(ph: str, corr: int, pid: int, tid: int, ts_ns: int) -> str:
    pairs = [("ph", json.dumps(ph)), ("id", str(corr)), ("pid", str(pid)), ("tid", str(tid)),
             ("ts", micros(ts_ns)), ("cat", '"ac2g"'), ("name", '"ac2g"')]
    if ph == "f":
        pairs.append(("bp", '"e"'))
    return _obj(pairs)


def _meta(name: str, pid: int | str, tid: int, ts_ns: int, args: dict[str, Any]) -> str:
    return _obj([("name", json.dumps(name)), ("ph", '"M"'), ("ts", micros(ts_ns)),
                 ("pid", json.dumps(pid)), ("tid", str(tid)), ("args", json.dumps(args))])
