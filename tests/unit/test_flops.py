"""FLOP and byte models per op family (analysis/flops.py) against hand-computed counts.

Expected values are written out from the formulas (2 FLOPs per multiply-add, element
counts times dtype sizes) on shapes chosen here; torch.utils.flop_counter is the second,
independent reference in test_flops_torch.py.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.analysis import flops as fl

BF16, F32 = "c10::BFloat16", "float"


def args(dims: list[object], types: list[str], concrete: list[str] | None = None) -> fl.OpArgs:
    parsed = fl.parse(json.dumps(dims), json.dumps(types),
                      json.dumps(concrete) if concrete is not None else None)
    assert parsed is not None
    return parsed


def work(name: str, a: fl.OpArgs, convention: str = "executed") -> fl.Work:
    got = fl.work(name, a, convention)
    assert got is not None, name
    return got


def test_mm_counts_two_flops_per_multiply_add_and_reads_both_writes_the_product() -> None:
    m, k, n = 48, 64, 80
    w = work("aten::mm", args([[m, k], [k, n]], [BF16, BF16]))
    assert w.flops == 2 * m * k * n
    assert w.bytes == 2 * (m * k + k * n + m * n)
    assert (w.family, w.dtype, w.matrix) == ("matmul", "bf16", True)


def test_addmm_bias_add_counted_only_in_the_executed_convention() -> None:
    m, k, n = 32, 16, 8
    a = args([[n], [m, k], [k, n], [], []], [F32, F32, F32, "Scalar", "Scalar"],
             ["", "", "", "1", "1"])
    assert work("aten::addmm", a).flops == 2 * m * k * n + m * n
    assert work("aten::addmm", a, "torch").flops == 2 * m * k * n
    assert work("aten::addmm", a).bytes == 4 * (n + m * k + k * n + m * n)


def test_bmm_and_baddbmm() -> None:
    b, m, k, n = 3, 5, 7, 11
    assert work("aten::bmm", args([[b, m, k], [b, k, n]], [BF16, BF16])).flops == (
        2 * b * m * k * n)
    bad = args([[b, m, n], [b, m, k], [b, k, n], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    assert work("aten::baddbmm", bad, "torch").flops == 2 * b * m * k * n
    assert work("aten::baddbmm", bad).flops == 2 * b * m * k * n + b * m * n


def test_bmm_with_mismatched_batch_has_no_model() -> None:
    assert fl.work("aten::bmm", args([[2, 4, 4], [3, 4, 4]], [F32, F32])) is None


def test_linear_and_matmul_with_batch_dimensions() -> None:
    # linear: x [8, 512, 1024], W [3072, 1024], bias [3072] (a real h100-planted shape)
    lin = args([[8, 512, 1024], [3072, 1024], [3072]], [BF16, BF16, BF16])
    rows = 8 * 512
    assert work("aten::linear", lin, "torch").flops == 2 * rows * 1024 * 3072
    assert work("aten::linear", lin).flops == 2 * rows * 1024 * 3072 + rows * 3072
    # matmul broadcasts [2, 1, 4, 6] x [3, 6, 5] -> batch [2, 3]
    mat = args([[2, 1, 4, 6], [3, 6, 5]], [F32, F32])
    assert work("aten::matmul", mat).flops == 2 * (2 * 3) * 4 * 6 * 5
    # a vector on the right: [4, 6] x [6] -> [4]
    assert work("aten::matmul", args([[4, 6], [6]], [F32, F32])).flops == 2 * 4 * 6


def test_conv2d_output_shape_from_stride_padding_dilation() -> None:
    # x [2, 3, 32, 32], w [16, 3, 5, 5], stride 2, padding 1, dilation 1 ->
    # out side = (32 + 2 - 4 - 1) // 2 + 1 = 15
    concrete = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    a = args([[2, 3, 32, 32], [16, 3, 5, 5], [16], [], [], [], [], [], []],
             [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar",
              "ScalarList", "Scalar"], concrete)
    out = 2 * 16 * 15 * 15
    macs = out * 3 * 5 * 5
    assert work("aten::convolution", a, "torch").flops == 2 * macs
    assert work("aten::convolution", a).flops == 2 * macs + out
    assert work("aten::convolution", a).bytes == 4 * (2 * 3 * 32 * 32 + 16 * 75 + 16 + out)


def test_cudnn_convolution_argument_order_and_groups() -> None:
    # cudnn_convolution(x, w, padding, stride, dilation, groups, ...): the ViT patch
    # embedding of the TraceLens H100 Falconsai trace: 224 / 16 = 14 patches per side
    a = args([[4, 3, 224, 224], [768, 3, 16, 16], [], [], [], [], [], [], []],
             [BF16, BF16, "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar",
              "Scalar", "Scalar"],
             ["", "", "[0, 0]", "[16, 16]", "[1, 1]", "1", "False", "False", "True"])
    assert work("aten::cudnn_convolution", a).flops == 2 * (4 * 768 * 14 * 14) * (3 * 16 * 16)
    # depthwise: groups = 8, w [8, 1, 3, 3], padding 1: out 8 x 10 x 10, 9 MACs each
    dw = args([[1, 8, 10, 10], [8, 1, 3, 3], [], [], [], [], []],
              [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
              ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "8"])
    assert work("aten::conv2d", dw).flops == 2 * 8 * 10 * 10 * 9


def test_transposed_convolution_counts_over_the_input() -> None:
    # torch's conv_flop_count: transposed -> spatial of x: 2 * N * prod(x spatial) * prod(w)
    concrete = ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"]
    a = args([[1, 4, 6, 6], [4, 2, 2, 2], [], [], [], [], [], [], []],
             [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar",
              "ScalarList", "Scalar"], concrete)
    assert work("aten::convolution", a).flops == 2 * 1 * 36 * (4 * 2 * 2 * 2)


def test_convolution_backward_counts_the_gradients_asked_for() -> None:
    fwd = 2 * (2 * 8 * 6 * 6) * (4 * 3 * 3)
    dims = [[2, 8, 6, 6], [2, 4, 8, 8], [8, 4, 3, 3], [], [], [], [], [], [], [], []]
    types = [F32, F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar",
             "ScalarList", "Scalar", "ScalarList"]
    both = ["", "", "", "[8]", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1",
            "[True, True, False]"]
    only_w = [*both[:10], "[False, True, False]"]
    assert work("aten::convolution_backward", args(dims, types, both)).flops == 2 * fwd
    assert work("aten::convolution_backward", args(dims, types, only_w)).flops == fwd


def test_sdpa_forward_backward_and_causal_under_both_conventions() -> None:
    b, h, s, d = 8, 16, 512, 64
    qkv = [[b, h, s, d]] * 3
    fwd_types = [BF16] * 3 + ["", "Scalar", "Scalar", "", "Scalar"]
    causal = args([*qkv, [], [], [], [], []], fwd_types, ["", "", "", "", "0.", "True", "",
                                                          "False"])
    full = 4 * b * h * s * s * d          # QK^T and PV: 2 * s * s * d each
    assert work("aten::scaled_dot_product_attention", causal, "torch").flops == full
    assert work("aten::scaled_dot_product_attention", causal).flops == full / 2
    assert work("aten::scaled_dot_product_attention", causal).bytes == 2 * 4 * b * h * s * d
    # backward (cuDNN signature: grad_out, q, k, v, out, lse, ..., is_causal at 14)
    bwd_dims = [[b, h, s, d]] * 5 + [[b, h, s, 1]] + [[]] * 10
    bwd_types = [BF16] * 5 + [F32] + ["long int"] * 2 + [""] * 3 + ["Scalar"] * 4 + [""]
    not_causal = ["", "", "", "", "", "", "", "", "", "", "", "512", "512", "0.", "False", ""]
    a = args(bwd_dims, bwd_types, not_causal)
    # 5 matmuls of 2 * s * s * d each (Q K^T recomputed): 2.5x forward in both conventions
    assert work("aten::_cudnn_attention_backward", a, "torch").flops == 2.5 * full
    assert work("aten::_cudnn_attention_backward", a).flops == 2.5 * full


def test_flash_kernel_layout_is_batch_seq_heads_dim() -> None:
    # _flash_attention_forward takes [B, S, H, D]: the Falconsai trace's [4, 197, 12, 64]
    a = args([[4, 197, 12, 64]] * 3 + [[]] * 12, [BF16] * 3 + [""] * 12,
             ["", "", "", "", "", "197", "197", "0.", "False", "False", "0.125", "", "", "",
              ""])
    assert work("aten::_flash_attention_forward", a).flops == 4 * 4 * 12 * 197 * 197 * 64


def test_elementwise_broadcast_wrapped_scalar_and_out_argument() -> None:
    a = work("aten::add", args([[8, 1, 4], [3, 1], []], [BF16, F32, "Scalar"]))
    assert a.flops == 8 * 3 * 4
    assert a.bytes == 2 * 32 + 4 * 3 + 4 * 96        # output promoted to float
    # x * 0.5 with the Python number as a 0-d double tensor: output stays bf16
    scaled = work("aten::mul", args([[1000], []], [BF16, "double"]))
    assert scaled.bytes == 2 * 1000 + 8 + 2 * 1000
    # mul.out(x, scalar, out=y): y is written, not read, and not written twice
    out = work("aten::mul", args([[4096, 1024], [], [4096, 1024]], [F32, "double", F32]))
    assert out.bytes == 4 * 4096 * 1024 + 8 + 4 * 4096 * 1024
    gelu = work("aten::gelu", args([[10, 10], []], [BF16, ""]))
    assert (gelu.flops, gelu.bytes) == (100, 400)


def test_copy_reductions_norms_softmax() -> None:
    cp = work("aten::copy_", args([[8, 512], [8, 512], []], [BF16, F32, "Scalar"]))
    assert (cp.flops, cp.bytes) == (0, 8 * 512 * (2 + 4))
    s = work("aten::sum", args([[4096, 1024], [], [], []], [BF16, "ScalarList", "Scalar", ""],
                               ["", "[0]", "True", ""]))
    assert (s.flops, s.bytes) == (4096 * 1024, 2 * (4096 * 1024 + 1024))
    everything = work("aten::mean", args([[6, 7], [], [], []], [F32, "ScalarList", "", ""]))
    assert everything.bytes == 4 * (42 + 1)
    ln = work("aten::native_layer_norm", args(
        [[8, 512, 1024], [], [1024], [1024], []], [F32, "ScalarList", F32, F32, "Scalar"]))
    n = 8 * 512 * 1024
    assert (ln.flops, ln.bytes) == (5 * n, 4 * (n + n + 2 * 1024))
    sm = work("aten::_softmax", args([[16, 100, 100], [], []], [BF16, "Scalar", "Scalar"]))
    assert (sm.flops, sm.bytes) == (3 * 160000, 2 * 2 * 160000)


def test_unknown_op_and_missing_shapes_have_no_model() -> None:
    assert fl.work("aten::embedding", args([[10, 4], [3]], [F32, "long int"])) is None
    assert fl.work("aten::mm", None) is None
    assert fl.parse(None, '["float"]', None) is None
    assert fl.parse("[[1, 2]", '["float"]', None) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64), st.integers(1, 4))
def test_bmm_is_batch_times_mm(m: int, k: int, n: int, b: int) -> None:
    mm = work("aten::mm", args([[m, k], [k, n]], [F32, F32]))
    bmm = work("aten::bmm", args([[b, m, k], [b, k, n]], [F32, F32]))
    assert bmm.flops == b * mm.flops
    assert bmm.bytes == b * mm.bytes


@pytest.mark.parametrize("name", sorted(fl.MODELS))
def test_every_model_survives_garbage(name: str) -> None:
    garbage = fl.OpArgs([[2, "x"], [], [1, 2, 3]], [F32, "Scalar", BF16], ["[", "", "True"])
    got = fl.work(name, garbage)
    assert got is None or got.flops >= 0
