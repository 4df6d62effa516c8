"""The ``torch`` convention equals torch.utils.flop_counter (skipped without torch).

Matmuls and convolutions run under ``FlopCounterMode`` on small CPU tensors (so torch
also checks our output-shape arithmetic for stride / padding / dilation / groups);
attention is compared with torch's published formulas ``sdpa_flop_count`` and
``sdpa_backward_flop_count``.
"""

from __future__ import annotations

import json

import pytest

from traceatlas.analysis import flops as fl

torch = pytest.importorskip("torch")
flop_counter = pytest.importorskip("torch.utils.flop_counter")
F32 = "float"


def counted(fn: object, *tensors: object) -> int:
    with flop_counter.FlopCounterMode(display=False) as mode:
        fn(*tensors)  # type: ignore[operator]
    return int(mode.get_total_flops())


def ours(name: str, dims: list[object], types: list[str], concrete: list[str]) -> float:
    got = fl.work(name, fl.parse(json.dumps(dims), json.dumps(types), json.dumps(concrete)),
                  "torch")
    assert got is not None
    return got.flops


def test_matmuls_equal_flop_counter_mode() -> None:
    a, b = torch.ones(6, 5), torch.ones(5, 7)
    assert ours("aten::mm", [[6, 5], [5, 7]], [F32, F32], []) == counted(torch.mm, a, b)
    bias = torch.ones(7)
    assert ours("aten::addmm", [[7], [6, 5], [5, 7]], [F32] * 3, []) == counted(
        torch.addmm, bias, a, b)
    x, y = torch.ones(3, 6, 5), torch.ones(3, 5, 7)
    assert ours("aten::bmm", [[3, 6, 5], [3, 5, 7]], [F32, F32], []) == counted(torch.bmm, x, y)
    inp = torch.ones(3, 6, 7)
    assert ours("aten::baddbmm", [[3, 6, 7], [3, 6, 5], [3, 5, 7]], [F32] * 3, []) == counted(
        torch.baddbmm, inp, x, y)


@pytest.mark.parametrize(("stride", "padding", "dilation", "groups"),
                         [(1, 0, 1, 1), (2, 1, 1, 1), (3, 2, 2, 1), (1, 1, 1, 4)])
def test_conv2d_equals_flop_counter_mode(stride: int, padding: int, dilation: int,
                                         groups: int) -> None:
    x, w = torch.ones(2, 8, 17, 19), torch.ones(12, 8 // groups, 3, 5)
    expected = counted(lambda a, b: torch.nn.functional.conv2d(
        a, b, None, stride, padding, dilation, groups), x, w)
    concrete = ["", "", "", f"[{stride}, {stride}]", f"[{padding}, {padding}]",
                f"[{dilation}, {dilation}]", str(groups)]
    got = ours("aten::conv2d", [[2, 8, 17, 19], [12, 8 // groups, 3, 5], [], [], [], [], []],
               [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"], concrete)
    assert got == expected


def test_conv_transpose_equals_flop_counter_mode() -> None:
    x, w = torch.ones(1, 4, 6, 6), torch.ones(4, 3, 3, 3)
    expected = counted(lambda a, b: torch.nn.functional.conv_transpose2d(a, b, stride=2), x, w)
    concrete = ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"]
    got = ours("aten::convolution", [[1, 4, 6, 6], [4, 3, 3, 3], [], [], [], [], [], [], []],
               [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar",
                "ScalarList", "Scalar"], concrete)
    assert got == expected


@pytest.mark.parametrize(("b", "h", "s_q", "s_k", "d"), [(2, 4, 64, 64, 32), (1, 8, 7, 300, 64)])
def test_sdpa_equals_torch_formulas(b: int, h: int, s_q: int, s_k: int, d: int) -> None:
    q, k = [b, h, s_q, d], [b, h, s_k, d]
    fwd = ours("aten::_scaled_dot_product_flash_attention", [q, k, k, [], [], [], []],
               ["float"] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "True", "False", ""])
    assert fwd == flop_counter.sdpa_flop_count(q, k, k)
    bwd = ours("aten::_scaled_dot_product_flash_attention_backward",
               [q, q, k, k, q, [b, h, s_q], *[[]] * 9], ["float"] * 6 + [""] * 9,
               [""] * 11 + ["True"] + [""] * 3)
    assert bwd == flop_counter.sdpa_backward_flop_count(q, q, k, k)
