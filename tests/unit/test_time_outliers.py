"""Issue 22, "Timestamps that cannot be right": events at ts 0 or far outside the run are
set aside with one warning that counts them, and noted in the store's metadata.

Expected values come from how each test builds its file: which events it placed at ts 0
or far away, and the span of the others.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceatlas.errors import DataQualityWarning
from traceatlas.io.kineto import KinetoReader
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.io.time_outliers import FAR_FLOOR_NS, run_window, set_aside_far

BASE_NS = 1_790_000_000_000_000_000
"""A unix-clock ``baseTimeNanoseconds`` (2026)."""
RUN_US = 4_683_832_831_701
"""Where the run's raw ``ts`` lie (us after the base, as in the H100 file)."""


def _x(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op",
       args: dict[str, Any] | None = None) -> dict[str, Any]:
    event = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    if args is not None:
        event["args"] = args
    return event


def _flow(ph: str, flow_id: int, ts: float, tid: int) -> dict[str, Any]:
    return {"ph": ph, "cat": "ac2g", "name": "ac2g", "id": flow_id, "pid": 1, "tid": tid,
            "ts": ts, **({"bp": "e"} if ph == "f" else {})}


def _read(tmp_path: Path, events: list[dict[str, Any]], base_ns: int | None = BASE_NS,
          ) -> tuple[RankData, list[str]]:
    path = tmp_path / "t.json"
    top: dict[str, Any] = {"traceEvents": events}
    if base_ns is not None:
        top["baseTimeNanoseconds"] = base_ns
    path.write_text(json.dumps(top))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rank,) = KinetoReader().read(Source(str(path)))
    return rank, [str(w.message) for w in caught if w.category is DataQualityWarning]


def _notes(rank: RankData) -> list[dict[str, Any]]:
    meta = rank.tables["metadata"].to_pydict()
    values = dict(zip(meta["key"], meta["value"], strict=True))
    return json.loads(values["data_quality"]) if "data_quality" in values else []


def _run(n: int) -> list[dict[str, Any]]:
    """``n`` ops 10 us apart, 5 us long, each with a launch flow pair (s on tid 1 at the
    op's start, f on tid 2 at +2 us)."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        ts = RUN_US + 10 * i
        events += [_x(f"op{i}", ts, 5), _flow("s", i, ts, 1), _flow("f", i, ts + 2, 2)]
    return events


def test_zero_timestamps_are_set_aside_and_counted(tmp_path: Path) -> None:
    """The H100 defect: complete events (one with a dur reaching the unix clock) and
    flow events at ts 0 beside a run 54 days after the base."""
    zeros = [_x("cudaLaunchKernel", 0, 0, cat="cuda_runtime"),
             _x("kernel", 0, 1_795_540_858_831_984.178, tid=7, cat="kernel"),
             _x("memset", 0, 0, tid=7, cat="gpu_memset"),
             _flow("s", 1000, 0, 1), _flow("f", 1000, 0, 2), _flow("f", 1001, 0, 2)]
    rank, warned = _read(tmp_path, [*_run(20), *zeros])
    intervals = rank.tables["intervals"].to_pydict()
    assert sorted(intervals["name"]) == sorted(f"op{i}" for i in range(20))
    # The run: first op at RUN_US, last op (19) ends 190 + 5 us later.
    assert min(intervals["start_ns"]) == BASE_NS + RUN_US * 1000
    assert max(intervals["end_ns"]) == BASE_NS + (RUN_US + 195) * 1000
    flows = rank.tables["flows"].to_pydict()
    assert sorted(flows["flow_id"]) == sorted(str(i) for i in range(20))
    assert all(ts is not None and ts > BASE_NS for ts in flows["src_ts_ns"])
    (line,) = [w for w in warned if "ts 0" in w]
    assert "had 6 event(s) at ts 0" in line and "(3 complete, 3 flow)" in line
    (note,) = _notes(rank)
    assert note["rows"] == 6 and "intervals" in note["tables"] and "flows" in note["tables"]


def test_zeros_outnumbering_the_run_do_not_move_it(tmp_path: Path) -> None:
    """Three of four events at ts 0: the run is still where the others are."""
    zeros = [_x(f"z{i}", 0, 1) for i in range(30)]
    rank, warned = _read(tmp_path, [*zeros, *[_x(f"op{i}", RUN_US + i, 1) for i in range(10)]])
    assert sorted(rank.tables["intervals"]["name"].to_pylist()) == sorted(
        f"op{i}" for i in range(10))
    assert any("had 30 event(s) at ts 0" in w for w in warned)


def test_far_events_are_set_aside(tmp_path: Path) -> None:
    """An op two hours after a 1 ms run and an instant years before it."""
    hours2_us = 2 * 3600 * 10**6
    events = [*[_x(f"op{i}", RUN_US + 10 * i, 5) for i in range(100)],
              _x("late", RUN_US + hours2_us, 5),
              {"ph": "i", "s": "t", "name": "mark", "pid": 1, "tid": 1, "ts": 1234.0},
              {"ph": "i", "s": "t", "name": "ok", "pid": 1, "tid": 1, "ts": RUN_US + 3}]
    rank, warned = _read(tmp_path, events)
    names = rank.tables["intervals"]["name"].to_pylist()
    assert "late" not in names and len(names) == 100
    assert rank.tables["instants"]["name"].to_pylist() == ["ok"]
    (line,) = [w for w in warned if "set aside" in w]
    assert "had 2 event(s)" in line and "(1 complete, 1 other)" in line


def test_an_event_whose_end_is_far_is_set_aside(tmp_path: Path) -> None:
    """A start inside the run but a ``dur`` of three days."""
    events = [*[_x(f"op{i}", RUN_US + 10 * i, 5) for i in range(50)],
              _x("endless", RUN_US + 7, 3 * 86_400 * 10**6)]
    rank, _ = _read(tmp_path, events)
    assert "endless" not in rank.tables["intervals"]["name"].to_pylist()


@pytest.mark.parametrize("base_ns", [None, BASE_NS])
def test_real_runs_keep_every_event(tmp_path: Path, base_ns: int | None) -> None:
    """Nothing is set aside from runs that merely start at ts 0, have a few-minute pause,
    or spread evenly over five hours."""
    starting_at_zero = [_x(f"a{i}", 1000 * i, 10) for i in range(50)]  # first at ts 0
    pause = [_x(f"b{i}", 1000 * i, 10) for i in range(50)] + [_x("after", 300 * 10**6, 10)]
    long_run = [_x(f"c{i}", i * 60 * 10**6, 10) for i in range(300)]  # 5 hours
    for events in (starting_at_zero, pause, long_run):
        rank, warned = _read(tmp_path, events, base_ns)
        assert rank.tables["intervals"].num_rows == len(events)
        assert not any("set aside" in w for w in warned)
        assert _notes(rank) == []


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(starts=st.lists(st.integers(0, 10**6), min_size=1, max_size=60),
       zeros=st.integers(0, 80), zero_flows=st.integers(0, 20))
def test_exactly_the_zeros_go(tmp_path: Path, starts: list[int], zeros: int,
                              zero_flows: int) -> None:
    """Any run of up to 1 s (ns-resolution starts) 54 days after the base: exactly the
    events placed at ts 0 go, however many, and every other event stays."""
    run = [_x(f"op{i}", RUN_US + s / 1000, 1) for i, s in enumerate(starts)]
    run.append(_flow("s", 1, RUN_US, 1))
    zero = [_x(f"z{i}", 0, 1) for i in range(zeros)]
    zero += [_flow("f", 100 + i, 0, 2) for i in range(zero_flows)]
    rank, warned = _read(tmp_path, [*zero, *run])
    assert rank.tables["intervals"].num_rows == len(starts)
    assert rank.tables["flows"].num_rows == 1
    noted = sum(n["rows"] for n in _notes(rank))
    assert noted == zeros + zero_flows
    assert any(f"had {noted} event(s) at ts 0" in w for w in warned) == (noted > 0)


def test_other_readers_far_rows(tmp_path: Path) -> None:
    """``set_aside_far`` on tables as any reader returns them: rows more than an hour
    (and 1000 deviations) from the median go, from every table, noted in metadata."""
    s = 10**18
    tables = {
        "intervals": pa.table({"start_ns": [s, s + 10, s + 20, 5],
                               "end_ns": [s + 5, s + 15, s + 25, 6]}),
        "instants": pa.table({"ts_ns": [s + 1, s + FAR_FLOOR_NS * 2]}),
        "flows": pa.table({"src_ts_ns": pa.array([s, None], pa.int64()),
                           "dst_ts_ns": pa.array([s + 1, 0], pa.int64())}),
        "metadata": pa.table({"key": ["data_quality"], "value": ['[{"file": "f"}]']}),
    }
    with pytest.warns(DataQualityWarning, match=r"had 3 event\(s\).*1 intervals, "
                      r"1 instants, 1 flows"):
        set_aside_far(tables, "f")
    assert tables["intervals"]["start_ns"].to_pylist() == [s, s + 10, s + 20]
    assert tables["instants"]["ts_ns"].to_pylist() == [s + 1]
    assert tables["flows"]["src_ts_ns"].to_pylist() == [s]
    notes = json.loads(tables["metadata"]["value"][0].as_py())
    assert [n.get("rows") for n in notes] == [None, 3]


def test_window_uses_integers() -> None:
    """The median and deviation are exact integers of ns even on the unix clock."""
    import numpy as np

    window = run_window([np.array([BASE_NS + 1, BASE_NS + 3, BASE_NS + 7], np.int64)])
    assert window is not None
    assert (window.median_ns, window.deviation_ns) == (BASE_NS + 3, 2)
