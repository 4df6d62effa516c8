"""``critical_path`` across ranks on real multi-rank OTF2 archives (pipit's Score-P MPI
ping-pong, with and without PAPI counters): the messages give the cross-rank edges.

Expected values: the number of message edges equals the number of ``MpiSend`` events a
plain ``otf2.reader`` loop counts (each matched by an ``MpiRecv`` on the other rank: the
same count), and the store's messages table; the breakdown must add up to the region
(first start to last end of the intervals); every change of rank along the path happens
at a message between those two ranks (the send point on the rank left, the receive on
the rank entered)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import otf2  # type: ignore[import-untyped]
import polars as pl
import pytest

import traceatlas
from traceatlas import analysis

pytestmark = pytest.mark.realtrace


def _plain(anchor: Path) -> Counter[str]:
    kinds: Counter[str] = Counter()
    with otf2.reader.open(str(anchor)) as reader:
        for _, event in reader.events:
            kinds[type(event).__name__] += 1
    return kinds


@pytest.mark.parametrize("name", ["ping-pong-otf2", "ping-pong-otf2-papi"])
def test_ping_pong_cross_rank_path(traces_dir: Path, name: str) -> None:
    folder = traces_dir / "pipit" / name
    plain = _plain(folder / "traces.otf2")
    assert plain["MpiSend"] == plain["MpiRecv"] > 0
    trace = traceatlas.open(str(folder))
    res = analysis.run("critical_path", trace)
    deps = dict(res.extra["dependencies"].iter_rows())
    assert deps["messages"] == plain["MpiSend"]
    msgs = trace.messages.collect()
    assert msgs.select("src_rank", "dst_rank", "send_start_ns", "recv_end_ns").unique(
        ).height == deps["messages"]

    # the breakdown adds up to the region, and the segments tile it
    lo, hi = trace.intervals.select(pl.col("start_ns").min(), pl.col("end_ns").max()
                                    ).collect().row(0)
    tab = res.table
    assert tab["on_path_ns"].sum() == hi - lo
    assert res.extra["by_bound"]["ns"].sum() == hi - lo
    assert res.extra["by_rank"]["ns"].sum() == hi - lo
    assert tab["start_ns"][0] == lo and tab["end_ns"][-1] == hi
    assert (tab["start_ns"][1:] == tab["end_ns"][:-1]).all()

    # the path crosses ranks, and only at messages
    ranks = tab["rank"].to_list()
    switches = [i for i in range(1, len(ranks)) if ranks[i] != ranks[i - 1]]
    assert switches, "the path never leaves one rank"
    assert set(ranks) == {0, 1}
    sends = {(int(r["src_rank"]), int(r["dst_rank"]), int(r["send_start_ns"]),
              int(r["recv_end_ns"])) for r in msgs.iter_rows(named=True)}
    for i in switches:
        row = tab.row(i, named=True)
        prev = tab.row(i - 1, named=True)
        # the message segment: [send start, receive end], bound comm, on the receiver
        assert row["bound"] == "comm"
        assert (prev["rank"], row["rank"], row["start_ns"], row["end_ns"]) in sends
        assert row["name"] == "MPI_Recv"
