"""The baseline summary (``traceatlas.compare.summary``): values worked out by hand on
traces built in code (builder times are ns after BASE), the file round trip, damaged
files, and the ``traceatlas summary`` command."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.compare.summary import FORMAT, VERSION, read_summary, summarize, write_summary
from traceatlas.errors import InputError
from traceatlas.testing import TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
STEP = 1_000_000
"""Step n's marker covers [n * STEP, n * STEP + 900_000) (n = 1..4)."""
GEMM_128 = "void gemm<float, 128>(float*, float const*)"
GEMM_256 = "void gemm<float, 256>(float*, float const*)"
RELU = "void relu_kernel<float>(float*)"


def _four_steps(rank: int = 0, world: int = 1, *, stretch: int = 0) -> TraceBuilder:
    """4 steps; in step n (s = n * STEP):

    - ``aten::mm`` [s+10k, s+200k) with a nested ``aten::mm`` [s+20k, s+50k): inclusive
      union 190k, count 2;
    - gemm<float,128> launched at s+30k runs [s+100k, s+100k+d) with d = 50k * n;
      gemm<float,256> launched at s+40k runs on another stream [s+120k, s+180k) (60k):
      both are key ``gemm<float, #>``; union = [s+100k, max(s+100k+d, s+180k));
    - relu launched at s+60k runs [s+300k, s+310k + stretch) (10k + stretch).
    """
    b = TraceBuilder(rank, world, base_time_ns=BASE, profiler_markers=False)
    for n in range(1, 5):
        s = n * STEP
        b.step(n, s, s + 900_000)
        b.cpu_op("aten::mm", s + 10_000, s + 200_000)
        b.cpu_op("aten::mm", s + 20_000, s + 50_000)
        b.launch(GEMM_128, s + 30_000, 5_000, s + 100_000, 50_000 * n)
        b.launch(GEMM_256, s + 40_000, 5_000, s + 120_000, 60_000, stream=8)
        b.launch(RELU, s + 60_000, 5_000, s + 300_000, 10_000 + stretch)
    return b


def _summary(tmp_path: Path, builders: list[TraceBuilder]) -> dict[str, Any]:
    paths = write_multi_rank(tmp_path / "run", builders)
    return summarize(traceatlas.open(traceatlas.ingest(paths, tmp_path / "store")))


def _entity(summary: dict[str, Any], kind: str, key: str) -> dict[str, Any]:
    found = [e for e in summary["entities"][kind] if e["key"] == key]
    assert len(found) == 1, [e["key"] for e in summary["entities"][kind]]
    return found[0]


def test_per_step_kernel_times_by_hand(tmp_path: Path) -> None:
    s = _summary(tmp_path, [_four_steps()])
    assert s["format"] == FORMAT and s["ranks"] == [0]
    assert s["iterations"] == {"source": "steps", "labels": [1, 2, 3, 4]}
    gemm = _entity(s, "kernel", "gemm<float, #>")
    # union of [100k, 100k + 50k n) and [120k, 180k): n=1 -> 80k, n=2 -> 100k (covers
    # 120k-180k), n=3 -> 150k, n=4 -> 200k.
    assert gemm["ns"] == [[80_000, 100_000, 150_000, 200_000]]
    assert gemm["count"] == [[2, 2, 2, 2]]
    assert sorted(gemm["names"]) == sorted([GEMM_128, GEMM_256]) and gemm["n_names"] == 2
    relu = _entity(s, "kernel", "relu_kernel<float>")
    assert relu["ns"] == [[10_000] * 4] and relu["count"] == [[1] * 4]
    # Kernel category: gemm union + relu (disjoint).
    kernels = _entity(s, "category", "kernel")
    assert kernels["ns"] == [[90_000, 110_000, 160_000, 210_000]]
    # Inclusive op time: the nested call is inside the outer one.
    mm = _entity(s, "op", "aten::mm")
    assert mm["ns"] == [[190_000] * 4] and mm["count"] == [[2] * 4] and mm["names"] == []
    step = s["entities"]["step"][0]
    assert step["key"] == "ProfilerStep#" and step["count"] == [[1] * 4]
    # The step window ends at the later of the marker end (900k) and its device work.
    assert step["ns"] == [[900_000] * 4]
    assert s["total_ns"] == 4 * 900_000


def test_two_ranks_rank_keyed_and_missing_step(tmp_path: Path) -> None:
    r0 = _four_steps(0, 2)
    r1 = _four_steps(1, 2, stretch=5_000)
    s = _summary(tmp_path, [r0, r1])
    assert s["ranks"] == [0, 1]
    assert [i["rank"] for i in s["rank_info"]] == [0, 1]
    assert s["rank_info"][0]["pids"] != s["rank_info"][1]["pids"]
    relu = _entity(s, "kernel", "relu_kernel<float>")
    assert relu["ns"] == [[10_000] * 4, [15_000] * 4]


def test_rank_without_a_step_is_minus_one(tmp_path: Path) -> None:
    r0 = _four_steps(0, 2)
    r1 = TraceBuilder(1, 2, base_time_ns=BASE, profiler_markers=False)
    for n in (1, 2, 3):  # rank 1 has no step 4
        r1.step(n, n * STEP, n * STEP + 900_000)
        r1.launch(RELU, n * STEP + 60_000, 5_000, n * STEP + 300_000, 20_000)
    s = _summary(tmp_path, [r0, r1])
    relu = _entity(s, "kernel", "relu_kernel<float>")
    assert relu["ns"] == [[10_000] * 4, [20_000, 20_000, 20_000, -1]]
    assert relu["count"][1] == [1, 1, 1, -1]
    assert any("rank" in n and "1" in n for n in s["notes"])


def test_folding_into_other(tmp_path: Path) -> None:
    paths = write_multi_rank(tmp_path / "run", [_four_steps()])
    trace = traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))
    # total_ns = 3.6 ms; relu (40k in all, 1.1%) folds at min_share 0.02 with top=1,
    # gemm (530k, 14.7%) stays.
    s = summarize(trace, min_share=0.02, top=1)
    assert [e["key"] for e in s["entities"]["kernel"]] == ["gemm<float, #>"]
    assert s["other"]["kernel"]["keys"] == ["relu_kernel<float>"]
    assert s["other"]["kernel"]["ns"] == [[10_000] * 4]
    keep_all = summarize(trace, min_share=0.02, top=5)
    assert len(keep_all["entities"]["kernel"]) == 2 and "kernel" not in keep_all["other"]


def test_no_steps_is_one_sample(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.cpu_op("aten::mm", 0, 100_000)
    b.launch(RELU, 10_000, 5_000, 200_000, 30_000)  # the run is [0, 230k)
    s = _summary(tmp_path, [b])
    assert s["iterations"] == {"source": "run", "labels": [0]}
    assert s["entities"]["step"][0]["ns"] == [[230_000]]
    assert _entity(s, "kernel", "relu_kernel<float>")["ns"] == [[30_000]]
    assert any("one sample" in n for n in s["notes"])


@pytest.mark.parametrize("name", ["baseline.json", "baseline.json.gz"])
def test_round_trip(tmp_path: Path, name: str) -> None:
    s = _summary(tmp_path, [_four_steps(0, 2), _four_steps(1, 2, stretch=7)])
    out = write_summary(s, tmp_path / name)
    assert read_summary(out) == s
    raw = out.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    tmp = tmp_path_factory.mktemp("written")
    s = _summary(tmp, [_four_steps()])
    return write_summary(s, tmp / "s.json").read_bytes()


def _damaged(written: bytes) -> dict[str, bytes]:
    text = written.decode()
    return {
        "truncated": written[: len(written) // 2],
        "empty": b"",
        "foreign": b'{"traceEvents": []}',
        "array": b"[1, 2, 3]",
        "newer": text.replace(f'"version":{VERSION}', '"version":99').encode(),
        "bad-type": text.replace('"total_ns":', '"total_ns":"x","_":', 1).encode(),
        "bad-shape": text.replace("[[1,1,1,1]]", "[[1,1,1]]", 1).encode(),
        "gzip-truncated": gzip.compress(written)[:40],
    }


@pytest.mark.parametrize("case", ["truncated", "empty", "foreign", "array", "newer",
                                  "bad-type", "bad-shape", "gzip-truncated"])
def test_damaged_files_name_the_file(tmp_path: Path, written: bytes, case: str) -> None:
    path = tmp_path / f"{case}.json"
    path.write_bytes(_damaged(written)[case])
    with pytest.raises(InputError) as err:
        read_summary(path)
    assert str(path) in str(err.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_summary(tmp_path / "absent.json")
    with pytest.raises(InputError, match="directory"):
        read_summary(tmp_path)


def test_cli_summary(tmp_path: Path) -> None:
    paths = write_multi_rank(tmp_path / "run", [_four_steps()])
    runner = CliRunner()
    out = tmp_path / "baseline.json"
    res = runner.invoke(app, ["summary", str(paths[0].parent), "-o", str(out)])
    assert res.exit_code == 0, res.output
    s = read_summary(out)
    assert _entity(s, "kernel", "relu_kernel<float>")["ns"] == [[10_000] * 4]
    # A directory is never replaced; a bad input writes nothing; exit 2, one line.
    res = runner.invoke(app, ["summary", str(paths[0].parent), "-o", str(tmp_path)])
    assert res.exit_code == 2 and "is a directory" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    target = tmp_path / "never.json"
    res = runner.invoke(app, ["summary", str(bad), "-o", str(target)])
    assert res.exit_code == 2 and str(bad) in res.output and "Traceback" not in res.output
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".never.json")]
    # Never onto its own input.
    res = runner.invoke(app, ["summary", str(paths[0]), "-o", str(paths[0])])
    assert res.exit_code == 2 and "input trace" in res.output
