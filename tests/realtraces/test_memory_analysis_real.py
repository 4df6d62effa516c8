"""``memory`` on real traces against the TensorBoard profiler plugin (torch-tb-profiler
0.4.3, its Memory View: ``RunProfileData.parse`` then the memory snapshot's
``get_peak_memory`` and ``get_memory_statistics``). Expected values were printed by

    /work/tb-venv/bin/python bench/tb_plugin_memory.py TRACE

(a side venv with ``pip install torch-tb-profiler``); on both traces every one of the
plugin's operators (66 and 56 per-device rows) matched on the six size/count columns when
this was written; a few are pinned here. ``calls`` is not compared (the plugin counts
only the operators its tree walk reaches)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import traceatlas
from traceatlas import analysis

COLS = ("self_increase_bytes", "self_alloc_bytes", "self_alloc_count", "increase_bytes",
        "alloc_bytes", "alloc_count")

LEAK = "h100-planted/leak/rank-0.json.gz"  # PyTorch 2.11: Addr, Total Allocated
LEAK_PEAKS = {"CPU": 65664, "GPU 0": 2628809216}
LEAK_OPS = {
    ("CPU", "aten::empty"): (196992, 196992, 48, 196992, 196992, 48),
    ("CPU", "aten::randint"): (0, 0, 0, 196992, 196992, 48),
    ("GPU 0", "autograd::engine::evaluate_function: AddmmBackward0"):
        (-3623878656, 0, 0, -1610170368, 9261514752, 480),
    ("GPU 0", "aten::sum"): (442368, 7248248832, 288, 442368, 7248248832, 288),
    ("GPU 0", "aten::empty_strided"): (5890332672, 5890332672, 672, 5890332672, 5890332672,
                                      672),
}
RESNET = ("kineto-tb_plugin/samples/resnet50_num_workers_0/"
          "worker0.1623143089861.pt.trace.json.gz")  # PyTorch 1.9: no Addr, no totals
RESNET_OPS = {
    ("CPU", "aten::div"): (115604736, 115605552, 198, 115605504, 115606320, 390),
    ("CPU", "aten::to"): (0, 0, 0, 115606272, 115606272, 384),
    ("GPU 0", "aten::empty"): (34000779264, 34000779264, 2694, 34000779264, 34000779264,
                              2694),
    ("GPU 0", "aten::cudnn_convolution_backward"): (0, 0, 0, 8717432832, 21368438784, 924),
    ("GPU 0", "CudnnConvolutionBackward"): (0, 0, 0, 8717432832, 21368438784, 924),
}


def _run(path: Path) -> analysis.Result:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analysis.run("memory", traceatlas.open(path))


@pytest.mark.parametrize(("name", "ops"), [(LEAK, LEAK_OPS), (RESNET, RESNET_OPS)])
def test_by_op_equals_tensorboard_plugin(traces_dir: Path, name: str,
                                         ops: dict[tuple[str, str], tuple[int, ...]]) -> None:
    by_op = _run(traces_dir / name).extra["by_op"]
    got = {(r["device"], r["op"]): tuple(r[c] for c in COLS)
           for r in by_op.iter_rows(named=True)}
    for key, expected in ops.items():
        assert got[key] == expected, key


def test_peaks_equal_tensorboard_plugin(traces_dir: Path) -> None:
    peaks = _run(traces_dir / LEAK).table
    assert dict(peaks.select("device", "peak_allocated_bytes").rows()) == LEAK_PEAKS
    assert (peaks["note"] == "").all()


def test_old_trace_curve_is_rebuilt(traces_dir: Path) -> None:
    # the plugin gives no peak without Total Allocated; ours is the running sum's
    # maximum (relative to the trace start), said in the note
    result = _run(traces_dir / RESNET)
    assert result.table["note"].str.contains("rebuilt").all()
    assert any("no Addr" in n for n in result.notes)


def test_leak_finding(traces_dir: Path) -> None:
    from traceatlas.advisor import Context, advise

    trace = traceatlas.open(traces_dir / LEAK)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = advise(trace, context=Context(trace, "leak.json.gz"),
                       rules=["memory_leak", "memory_peak", "memory_fragmentation",
                              "memory_storm"])
    # PLANTED.md: 64 MiB of logits kept per step (the LM head's matmul output)
    memory = [f for f in found if f.rule.startswith("memory_")]
    assert [f.rule for f in memory] == ["memory_leak"]
    # memory findings rank after every time finding (bytes are not ns)
    assert found[-1] is memory[0] and len(found) > 1
    leak = memory[0]
    assert leak.where == {"op": "aten::mm"} and "+64 MiB per step" in leak.statement
    assert leak.cost_ns == 0 and leak.cost_bytes == 5 * 64 * 2**20
    assert leak.command.startswith("traceatlas analyze memory leak.json.gz")


def test_healthy_has_no_memory_finding(traces_dir: Path) -> None:
    from traceatlas.advisor import Context, advise

    trace = traceatlas.open(traces_dir / "h100-planted/healthy/rank-0.json.gz")
    found = advise(trace, context=Context(trace, "x"),
                   rules=["memory_leak", "memory_peak", "memory_fragmentation",
                          "memory_storm"])
    assert [f for f in found if f.rule.startswith("memory_")] == []
