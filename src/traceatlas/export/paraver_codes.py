"""Paraver event and state codes the exporter writes so that Paraver configuration files
(``.cfg``) made for Extrae and nsys2prv traces select the same things.

- MPI calls: Extrae's types and values. Type 50000001 point-to-point, 50000002
  collective, 50000003 other, 50000004 one-sided, 50000005 I/O; value = Extrae's
  ``MPIVal`` enum (``src/merger/paraver/MPI_EventEncoding.h``), e.g. MPI_Allreduce =
  50000002 value 10; the type of each call from ``event_mpit2prv`` in
  ``mpi_prv_events.c`` (extrae @2292a142). Calls Extrae does not know get a value from
  ``MPI_UNKNOWN_BASE`` up (in the order first met) and the type from the call name.
  Extrae's ``.pcf`` labels values 69 and 70 ``MPI_Win_complete`` and ``MPI_Win_start``
  (swapped in its label table); the values below are the calls Extrae records with them.
- States while inside an MPI call: Extrae's (``Get_State`` and the handlers of
  ``mpi_prv_semantics.c``), e.g. MPI_Send 4 Blocking Send, MPI_Recv 3 Waiting a message,
  MPI_Isend 10, MPI_Irecv 11, MPI_Wait* 8, collectives 13 Group Communication,
  MPI_Init/Finalize and communicator calls 15 Others, Sendrecv 16.
- CUDA: nsys2prv 0.5.8's types (``parse_nsys_stats.py``, ``semantics/kernels_semantic.py``):
  63000000 CUDA library call (runtime API), 63000006 CUDA kernel, 63000007 NCCL kernel,
  63000001 CUDA memcpy kernel (memory copies and sets). nsys2prv numbers their values per
  trace, so values are the exporter's own label ids there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MPI_P2P, MPI_COLLECTIVE, MPI_OTHER, MPI_RMA, MPI_IO = (50_000_001, 50_000_002, 50_000_003,
                                                      50_000_004, 50_000_005)
MPI_TYPE_LABELS: dict[int, str] = {
    MPI_P2P: "MPI Point-to-point", MPI_COLLECTIVE: "MPI Collective Comm",
    MPI_OTHER: "MPI Other", MPI_RMA: "MPI One-sided", MPI_IO: "MPI I/O",
}
"""Extrae's labels (``MPITYPE_*_LABEL``)."""
MPI_END_LABEL = "Outside MPI"
"""Label of value 0 in Extrae's MPI blocks."""
MPI_GRADIENT = 9
"""Extrae's ``MPITYPE_FLAG_COLOR``: the gradient column of the MPI types."""
MPI_UNKNOWN_BASE = 1000
"""First value given to MPI calls missing from Extrae's table."""

CUDA_TYPES: dict[str, int] = {"runtime": 63_000_000, "kernel": 63_000_006,
                              "comm_kernel": 63_000_007, "memcpy": 63_000_001,
                              "memset": 63_000_001}
"""Interval category -> nsys2prv event type."""
CUDA_TYPE_LABELS: dict[int, str] = {63_000_000: "CUDA library call", 63_000_006: "CUDA kernel",
                                    63_000_007: "NCCL kernel",
                                    63_000_001: "CUDA memcpy kernel"}
"""nsys2prv's ``.pcf`` labels."""

EXTRAE_STATES: tuple[str, ...] = (
    "Idle", "Running", "Not created", "Waiting a message", "Blocking Send",
    "Synchronization", "Test/Probe", "Scheduling and Fork/Join", "Wait/WaitAll", "Blocked",
    "Immediate Send", "Immediate Receive", "I/O", "Group Communication", "Tracing Disabled",
    "Others", "Send Receive", "Memory transfer", "Profiling", "On-line analysis",
    "Remote memory access", "Atomic memory operation", "Memory ordering operation",
    "Distributed locking", "Overhead", "One-sided op", "Startup latency", "Waiting links",
    "Data copy", "RTT", "Allocating memory", "Freeing memory", "Configuring accelerator",
    "Stream Registration",
)
"""Extrae's state values 0..33 (``labels.h``, ``events.h``)."""
RUNNING = 1
OTHERS = 15

_TYPE_OF = {"P": MPI_P2P, "C": MPI_COLLECTIVE, "O": MPI_OTHER, "R": MPI_RMA, "I": MPI_IO}
_EXTRAE_MPI: tuple[tuple[int, str, str, int], ...] = (
    (1, "MPI_Send", "P", 4), (2, "MPI_Recv", "P", 3), (3, "MPI_Isend", "P", 10),
    (4, "MPI_Irecv", "P", 11), (5, "MPI_Wait", "P", 8), (6, "MPI_Waitall", "P", 8),
    (7, "MPI_Bcast", "C", 13), (8, "MPI_Barrier", "C", 13), (9, "MPI_Reduce", "C", 13),
    (10, "MPI_Allreduce", "C", 13), (11, "MPI_Alltoall", "C", 13),
    (12, "MPI_Alltoallv", "C", 13), (13, "MPI_Gather", "C", 13),
    (14, "MPI_Gatherv", "C", 13), (15, "MPI_Scatter", "C", 13),
    (16, "MPI_Scatterv", "C", 13), (17, "MPI_Allgather", "C", 13),
    (18, "MPI_Allgatherv", "C", 13), (19, "MPI_Comm_rank", "O", 15),
    (20, "MPI_Comm_size", "O", 15), (21, "MPI_Comm_create", "O", 15),
    (22, "MPI_Comm_dup", "O", 15), (23, "MPI_Comm_split", "O", 15),
    (24, "MPI_Comm_group", "O", 15), (25, "MPI_Comm_free", "O", 15),
    (26, "MPI_Comm_remote_group", "O", 15), (27, "MPI_Comm_remote_size", "O", 15),
    (28, "MPI_Comm_test_inter", "O", 15), (29, "MPI_Comm_compare", "O", 15),
    (30, "MPI_Scan", "C", 13), (31, "MPI_Init", "O", 15), (32, "MPI_Finalize", "O", 15),
    (33, "MPI_Bsend", "P", 4), (34, "MPI_Ssend", "P", 4), (35, "MPI_Rsend", "P", 4),
    (36, "MPI_Ibsend", "P", 10), (37, "MPI_Issend", "P", 10), (38, "MPI_Irsend", "P", 10),
    (39, "MPI_Test", "O", 8), (40, "MPI_Cancel", "P", 15), (41, "MPI_Sendrecv", "P", 16),
    (42, "MPI_Sendrecv_replace", "P", 16), (43, "MPI_Cart_create", "O", 15),
    (44, "MPI_Cart_shift", "O", 15), (45, "MPI_Cart_coords", "O", 15),
    (46, "MPI_Cart_get", "O", 15), (47, "MPI_Cart_map", "O", 15),
    (48, "MPI_Cart_rank", "O", 15), (49, "MPI_Cart_sub", "O", 15),
    (50, "MPI_Cartdim_get", "O", 15), (51, "MPI_Dims_create", "O", 15),
    (52, "MPI_Graph_get", "O", 15), (53, "MPI_Graph_map", "O", 15),
    (54, "MPI_Graph_create", "O", 15), (55, "MPI_Graph_neighbors", "O", 15),
    (56, "MPI_Graphdims_get", "O", 15), (57, "MPI_Graph_neighbors_count", "O", 15),
    (58, "MPI_Topo_test", "O", 15), (59, "MPI_Waitany", "P", 8),
    (60, "MPI_Waitsome", "P", 8), (61, "MPI_Probe", "P", 6), (62, "MPI_Iprobe", "P", 6),
    (63, "MPI_Win_create", "R", 15), (64, "MPI_Win_free", "R", 15),
    (65, "MPI_Put", "R", 17), (66, "MPI_Get", "R", 17), (67, "MPI_Accumulate", "R", 15),
    (68, "MPI_Win_fence", "R", 17), (69, "MPI_Win_start", "R", 15),
    (70, "MPI_Win_complete", "R", 15), (71, "MPI_Win_post", "R", 15),
    (72, "MPI_Win_wait", "R", 8), (73, "MPI_Win_test", "R", 15),
    (74, "MPI_Win_lock", "R", 15), (75, "MPI_Win_unlock", "R", 15),
    (76, "MPI_Pack", "O", 15), (77, "MPI_Unpack", "O", 15), (78, "MPI_Op_create", "O", 15),
    (79, "MPI_Op_free", "O", 15), (80, "MPI_Reduce_scatter", "C", 13),
    (81, "MPI_Attr_delete", "O", 15), (82, "MPI_Attr_get", "O", 15),
    (83, "MPI_Attr_put", "O", 15), (84, "MPI_Group_difference", "O", 15),
    (85, "MPI_Group_excl", "O", 15), (86, "MPI_Group_free", "O", 15),
    (87, "MPI_Group_incl", "O", 15), (88, "MPI_Group_intersection", "O", 15),
    (89, "MPI_Group_rank", "O", 15), (90, "MPI_Group_range_excl", "O", 15),
    (91, "MPI_Group_range_incl", "O", 15), (92, "MPI_Group_size", "O", 15),
    (93, "MPI_Group_translate_ranks", "O", 15), (94, "MPI_Group_union", "O", 15),
    (95, "MPI_Group_compare", "O", 15), (96, "MPI_Intercomm_create", "O", 15),
    (97, "MPI_Intercomm_merge", "O", 15), (98, "MPI_Keyval_free", "O", 15),
    (99, "MPI_Keyval_create", "O", 15), (100, "MPI_Abort", "O", 15),
    (101, "MPI_Error_class", "O", 15), (102, "MPI_Errhandler_create", "O", 15),
    (103, "MPI_Errhandler_free", "O", 15), (104, "MPI_Errhandler_get", "O", 15),
    (105, "MPI_Error_string", "O", 15), (106, "MPI_Errhandler_set", "O", 15),
    (107, "MPI_Get_processor_name", "O", 15), (108, "MPI_Initialized", "O", 15),
    (109, "MPI_Wtick", "O", 15), (110, "MPI_Wtime", "O", 15),
    (111, "MPI_Address", "O", 15), (112, "MPI_Bsend_init", "P", 10),
    (113, "MPI_Buffer_attach", "O", 15), (114, "MPI_Buffer_detach", "O", 15),
    (115, "MPI_Request_free", "O", 8), (116, "MPI_Recv_init", "P", 11),
    (117, "MPI_Send_init", "P", 10), (118, "MPI_Get_count", "O", 15),
    (119, "MPI_Get_elements", "O", 15), (120, "MPI_Pack_size", "O", 15),
    (121, "MPI_Rsend_init", "P", 10), (122, "MPI_Ssend_init", "P", 10),
    (123, "MPI_Start", "O", 15), (124, "MPI_Startall", "O", 15),
    (125, "MPI_Testall", "O", 8), (126, "MPI_Testany", "O", 8),
    (127, "MPI_Test_cancelled", "O", 15), (128, "MPI_Testsome", "O", 8),
    (129, "MPI_Type_commit", "O", 15), (130, "MPI_Type_contiguous", "O", 15),
    (131, "MPI_Type_extent", "O", 15), (132, "MPI_Type_free", "O", 15),
    (133, "MPI_Type_hindexed", "O", 15), (134, "MPI_Type_hvector", "O", 15),
    (135, "MPI_Type_indexed", "O", 15), (136, "MPI_Type_lb", "O", 15),
    (137, "MPI_Type_size", "O", 15), (138, "MPI_Type_struct", "O", 15),
    (139, "MPI_Type_ub", "O", 15), (140, "MPI_Type_vector", "O", 15),
    (141, "MPI_File_open", "I", 12), (142, "MPI_File_close", "I", 12),
    (143, "MPI_File_read", "I", 12), (144, "MPI_File_read_all", "I", 12),
    (145, "MPI_File_write", "I", 12), (146, "MPI_File_write_all", "I", 12),
    (147, "MPI_File_read_at", "I", 12), (148, "MPI_File_read_at_all", "I", 12),
    (149, "MPI_File_write_at", "I", 12), (150, "MPI_File_write_at_all", "I", 12),
    (151, "MPI_Comm_spawn", "O", 15), (152, "MPI_Comm_spawn_multiple", "O", 15),
    (153, "MPI_Request_get_status", "O", 15), (154, "MPI_Ireduce", "C", 13),
    (155, "MPI_Iallreduce", "C", 13), (156, "MPI_Ibarrier", "C", 13),
    (157, "MPI_Ibcast", "C", 13), (158, "MPI_Ialltoall", "C", 13),
    (159, "MPI_Ialltoallv", "C", 13), (160, "MPI_Iallgather", "C", 13),
    (161, "MPI_Iallgatherv", "C", 13), (162, "MPI_Igather", "C", 13),
    (163, "MPI_Igatherv", "C", 13), (164, "MPI_Iscatter", "C", 13),
    (165, "MPI_Iscatterv", "C", 13), (166, "MPI_Ireduce_scatter", "C", 13),
    (167, "MPI_Iscan", "C", 13), (168, "MPI_Reduce_scatter_block", "C", 13),
    (169, "MPI_Ireduce_scatter_block", "C", 13), (170, "MPI_Alltoallw", "C", 13),
    (171, "MPI_Ialltoallw", "C", 13), (172, "MPI_Get_accumulate", "R", 17),
    (173, "MPI_Dist_graph_create", "O", 15), (174, "MPI_Neighbor_allgather", "C", 13),
    (175, "MPI_Ineighbor_allgather", "C", 13), (176, "MPI_Neighbor_allgatherv", "C", 13),
    (177, "MPI_Ineighbor_allgatherv", "C", 13), (178, "MPI_Neighbor_alltoall", "C", 13),
    (179, "MPI_Ineighbor_alltoall", "C", 13), (180, "MPI_Neighbor_alltoallv", "C", 13),
    (181, "MPI_Ineighbor_alltoallv", "C", 13), (182, "MPI_Neighbor_alltoallw", "C", 13),
    (183, "MPI_Ineighbor_alltoallw", "C", 13), (184, "MPI_Fetch_and_op", "R", 17),
    (185, "MPI_Compare_and_swap", "R", 17), (186, "MPI_Win_flush", "R", 15),
    (187, "MPI_Win_flush_all", "R", 15), (188, "MPI_Win_flush_local", "R", 15),
    (189, "MPI_Win_flush_local_all", "R", 15), (190, "MPI_Mprobe", "P", 6),
    (191, "MPI_Improbe", "P", 6), (192, "MPI_Mrecv", "P", 3), (193, "MPI_Imrecv", "P", 11),
    (194, "MPI_Comm_split_type", "O", 15), (195, "MPI_File_write_all_begin", "I", 12),
    (196, "MPI_File_write_all_end", "I", 12), (197, "MPI_File_read_all_begin", "I", 12),
    (198, "MPI_File_read_all_end", "I", 12), (199, "MPI_File_write_at_all_begin", "I", 12),
    (200, "MPI_File_write_at_all_end", "I", 12),
    (201, "MPI_File_read_at_all_begin", "I", 12),
    (202, "MPI_File_read_at_all_end", "I", 12), (203, "MPI_File_read_ordered", "I", 12),
    (204, "MPI_File_read_ordered_begin", "I", 12),
    (205, "MPI_File_read_ordered_end", "I", 12), (206, "MPI_File_read_shared", "I", 12),
    (207, "MPI_File_write_ordered", "I", 12),
    (208, "MPI_File_write_ordered_begin", "I", 12),
    (209, "MPI_File_write_ordered_end", "I", 12), (210, "MPI_File_write_shared", "I", 12),
    (211, "MPI_Comm_dup_with_info", "O", 15),
    (212, "MPI_Dist_graph_create_adjacent", "O", 15),
    (213, "MPI_Comm_create_group", "O", 15), (214, "MPI_Exscan", "C", 13),
    (215, "MPI_Iexscan", "C", 13),
)
"""(value, call, type letter, state) of every MPI call in Extrae's table."""


@dataclass(frozen=True)
class MpiCode:
    """An MPI call as Extrae writes it: event type, value, label and state value."""

    etype: int
    value: int
    label: str
    state: int


MPI_CALLS: dict[str, MpiCode] = {
    call.lower(): MpiCode(_TYPE_OF[kind], value, call, state)
    for value, call, kind, state in _EXTRAE_MPI
}
"""Lower-case call name -> Extrae code."""


def mpi_code(name: str, unknown: dict[str, int]) -> MpiCode:
    """Extrae's code of an MPI call; a call outside Extrae's table gets the next free
    value from ``MPI_UNKNOWN_BASE`` (kept in ``unknown``), its type from the name and
    state 15 (Others)."""
    known = MPI_CALLS.get(name.lower())
    if known is not None:
        return known
    value = unknown.setdefault(name, MPI_UNKNOWN_BASE + len(unknown))
    return MpiCode(mpi_type(name), value, name, OTHERS)


class Codebook:
    """The event types and value labels of one export, rendered as ``.pcf`` blocks.

    Codes kept from the source (``keep``) are registered first; the values the exporter
    numbers itself (``label_id``: one id per distinct label, shared by every type, as
    nsys2prv does) then skip every value a kept code uses.
    """

    def __init__(self) -> None:
        self.types: dict[int, tuple[int, str]] = {}
        self.values: dict[int, dict[int, str]] = {}
        self._reserved: set[int] = set()
        self._ids: dict[str, int] = {}
        self._next = 1

    def declare(self, etype: int, gradient: int, label: str) -> None:
        """Declare a type (the first declaration wins)."""
        self.types.setdefault(etype, (gradient, label))
        self.values.setdefault(etype, {})

    def keep(self, etype: int, value: int, label: str | None) -> None:
        """A (type, value) written as the source wrote it, with its value label."""
        self._reserved.add(value)
        if label is not None and value != 0:
            self.values.setdefault(etype, {}).setdefault(value, label)

    def label_id(self, etype: int, label: str) -> int:
        """The exporter's value for ``label`` (1, 2, ...: not a kept value), recorded
        as a value label of ``etype``."""
        value = self._ids.get(label)
        if value is None:
            while self._next in self._reserved:
                self._next += 1
            value = self._ids[label] = self._next
            self._next += 1
        self.values.setdefault(etype, {}).setdefault(value, label)
        return value

    def pcf_lines(self) -> list[str]:
        """``EVENT_TYPE`` blocks, one per type, ascending."""
        out: list[str] = []
        for etype in sorted(self.types):
            gradient, label = self.types[etype]
            out += ["EVENT_TYPE", f"{gradient}    {etype}    {label}"]
            values = self.values.get(etype, {})
            if values or gradient != 7:
                end = MPI_END_LABEL if etype in MPI_TYPE_LABELS else "End"
                out += ["VALUES", f"0      {end}"]
                out += [f"{v}      {s}" for v, s in sorted(values.items())]
            out += ["", ""]
        return out


def mpi_type(name: str) -> int:
    """Type of an MPI call missing from Extrae's table, from its name (point-to-point,
    collective, one-sided, I/O, else other)."""
    low = name.lower()
    if re.match(r"^mpi_i?(allreduce|barrier|bcast|reduce\w*|allgather\w*|alltoall\w*|"
                r"gather\w*|scatter\w*|scan|exscan|neighbor\w*)$", low):
        return MPI_COLLECTIVE
    if re.match(r"^mpi_(i?[bsr]?send\w*|i?m?recv\w*|sendrecv\w*|wait\w*|i?m?probe)$", low):
        return MPI_P2P
    if low.startswith("mpi_file"):
        return MPI_IO
    if re.match(r"^mpi_(win_\w+|put|get|r?accumulate|get_accumulate|fetch_and_op|"
                r"compare_and_swap|rput|rget)$", low):
        return MPI_RMA
    return MPI_OTHER
