"""The rules the OTF2 event-object path (``Collector``) and the fast path share
(``otf2_events``): checked against hand-written expectations on small inputs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from traceatlas.io.otf2_events import message_table, split_by_rank, summary_warnings


def test_split_by_rank_keeps_row_order_within_a_rank() -> None:
    table = pa.table({"rank": pa.array([2, 0, 2, 1, 0], pa.int32()),
                      "v": ["a", "b", "c", "d", "e"]})
    out = split_by_rank(table, [0, 1, 2, 3])
    assert {r: t.column("v").to_pylist() for r, t in out.items()} == {
        0: ["b", "e"], 1: ["d"], 2: ["a", "c"], 3: []}
    assert all(t.column_names == ["v"] for t in out.values())


def test_split_by_rank_grouped_rows_and_ranks_not_asked() -> None:
    table = pa.table({"rank": pa.array([0, 0, 1, 5], pa.int32()), "v": [1, 2, 3, 4]})
    out = split_by_rank(table, [0, 1])
    assert {r: t.column("v").to_pylist() for r, t in out.items()} == {0: [1, 2], 1: [3]}


def test_summary_warnings_order_and_text() -> None:
    got = summary_warnings("t.otf2", (3, 2), (1, 0), {"zeta": 2, "alpha": 1})
    assert got == [
        "t.otf2: 3 Enter event(s) without a Leave on 2 location(s); closed at the last "
        "event time of their location",
        "t.otf2: 1 MPI send(s) without a matching receive and 0 receive(s) without a "
        "matching send; kept with the other side null",
        "t.otf2: 1 x alpha",
        "t.otf2: 2 x zeta",
    ]
    assert summary_warnings("t.otf2", (0, 0), (0, 0), {}) == []


def test_message_rank_is_sender_when_read_else_owner() -> None:
    nulls = pa.array([None, None], pa.int64())
    table = message_table(np.asarray([0, 7]), np.asarray([1, 0]), np.asarray([0, 0]), {0, 1},
                          (nulls, nulls, nulls, nulls), pa.array([8, 8], pa.int64()),
                          pa.array([1, 1], pa.int64()), pa.array(["w", "w"], pa.string()))
    # message 1's sender (rank 7) is not in this archive's ranks: it goes to its owner 0
    assert table.column("rank").to_pylist() == [0, 0]
    assert table.column("src_rank").to_pylist() == [0, 7]
