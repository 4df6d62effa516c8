"""FLOPs and bytes of one op instance from its recorded shapes and dtypes (Kineto
``record_shapes``: ``Input Dims``, ``Input type``, ``Concrete Inputs``).

One function per op family, registered by op name in ``MODELS``; ``work(name, ...)``
returns None for an op without a model (the caller lists it, never guesses). Conventions
(``docs/definitions.md``, section roofline):

- Matrix products, convolution, attention: ``torch`` = exactly
  ``torch.utils.flop_counter`` (2 FLOPs per multiply-add; addmm/baddbmm/conv bias not
  counted; attention forward 2·b·h·s_q·s_k·(d_q + d_v), backward 5 matmuls including
  the recomputed Q·K^T: 2.5x forward for d_q = d_v, as FlashAttention counts (Dao 2023,
  arXiv:2307.08691; flash-attention ``benchmarks/benchmark_flash_attention.py``); causal
  masks ignored). ``executed`` (default) = what the kernels execute, as TraceLens'
  PerfModel counts: the same plus M·N for a bias add (addmm, baddbmm, linear, conv
  output), and a causal mask halves attention (FlashAttention's benchmarks too).
- Elementwise: 1 FLOP per output element (TraceLens ``BinaryElementwise``); copies 0.
- Normalisation (layer, batch, group, RMS norm): forward 5 FLOPs per element, backward
  9 (TraceLens ``Normalization``, training mode, per-channel terms left out).
- Softmax: forward 3 per element, backward 6 (TraceLens ``Softmax``).
- Reductions: 1 FLOP per input element.
- Bytes: every tensor input read once plus every output written once, from shapes and
  dtype sizes: the minimum DRAM traffic (caches, re-reads and workspaces not counted).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DTYPES: Mapping[str, tuple[str, int]] = {
    "float": ("fp32", 4), "double": ("fp64", 8), "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2), "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1), "long int": ("int64", 8), "int": ("int32", 4),
    "short int": ("int16", 2), "signed char": ("int8", 1), "unsigned char": ("uint8", 1),
    "bool": ("bool", 1), "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}
"""Kineto ``Input type`` text -> (dtype name, bytes per element)."""

CONVENTIONS = ("executed", "torch")


@dataclass(frozen=True)
class OpArgs:
    """An op's recorded inputs: ``dims`` per input (a shape, [] for scalars/0-d),
    ``types`` (Kineto type text), ``concrete`` (``Concrete Inputs`` text, "" if none)."""

    dims: Sequence[Any]
    types: Sequence[str]
    concrete: Sequence[str]

    def shape(self, i: int) -> list[int] | None:
        """Input ``i``'s shape when it is a tensor with a known dtype, else None."""
        if i >= len(self.dims) or i >= len(self.types) or self.types[i] not in DTYPES:
            return None
        dims = self.dims[i]
        if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
            return None
        return dims

    def size(self, i: int) -> int:
        """Bytes per element of input ``i`` (0 when it is not a typed tensor)."""
        return DTYPES[self.types[i]][1] if self.shape(i) is not None else 0

    def dtype(self, i: int) -> str:
        return DTYPES[self.types[i]][0] if self.shape(i) is not None else ""

    def nbytes(self, i: int) -> int:
        shape = self.shape(i)
        return 0 if shape is None else math.prod(shape) * self.size(i)

    def tensors(self) -> list[int]:
        return [i for i in range(len(self.dims)) if self.shape(i) is not None]

    def value(self, i: int) -> Any:
        """``Concrete Inputs[i]`` parsed (JSON-ish: ``[1, 1]``, ``True``, ``0.``), or None."""
        if i >= len(self.concrete) or not self.concrete[i]:
            return None
        text = self.concrete[i].strip()
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        try:
            return json.loads(text.replace("True", "true").replace("False", "false"))
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return text


@dataclass(frozen=True)
class Work:
    """FLOPs and minimum bytes of one instance; ``dtype`` of its compute; ``matrix``:
    runs on tensor / matrix units (picks the peak); ``family`` for grouping and advice."""

    flops: float
    bytes: float
    family: str
    dtype: str
    matrix: bool


Model = Callable[[OpArgs, str], Work | None]
"""(op args, convention) -> Work, or None when the shapes do not fit the model."""


# -- matrix products -----------------------------------------------------------------------

def _mm(a: OpArgs, conv: str, ia: int = 0, ib: int = 1, bias: int | None = None) -> Work | None:
    x, w = a.shape(ia), a.shape(ib)
    if x is None or w is None or len(x) != len(w) or len(x) not in (2, 3):
        return None
    batch = x[0] if len(x) == 3 else 1
    if len(x) == 3 and w[0] != batch:
        return None
    m, k, n = x[-2], x[-1], w[-1]
    out = batch * m * n
    flops = 2.0 * batch * m * k * n
    nbytes = a.nbytes(ia) + a.nbytes(ib) + out * a.size(ia)
    if bias is not None and a.shape(bias) is not None:
        nbytes += a.nbytes(bias)
        flops += out if conv == "executed" else 0
    return Work(flops, nbytes, "matmul", a.dtype(ia), True)


def mm(a: OpArgs, conv: str) -> Work | None:
    """``mm(A[M,K], B[K,N])`` / ``bmm``: 2·B·M·K·N."""
    return _mm(a, conv)


def addmm(a: OpArgs, conv: str) -> Work | None:
    """``addmm(bias, A, B)`` / ``baddbmm(input, A, B)``: 2·M·K·N (+ M·N executed)."""
    return _mm(a, conv, 1, 2, bias=0)


def scaled_mm(a: OpArgs, conv: str) -> Work | None:
    """``_scaled_mm(A, B, scale_a, scale_b, bias, ...)`` (fp8): 2·M·K·N."""
    return _mm(a, conv, 0, 1, bias=4)


def linear(a: OpArgs, conv: str) -> Work | None:
    """``linear(x[..., K], W[N, K], bias[N])``: 2·prod(x[:-1])·K·N (+ rows·N executed)."""
    x, w = a.shape(0), a.shape(1)
    if not x or w is None or len(w) != 2 or w[1] != x[-1]:
        return None
    rows, k, n = math.prod(x[:-1]), x[-1], w[0]
    flops = 2.0 * rows * k * n
    nbytes = a.nbytes(0) + a.nbytes(1) + rows * n * a.size(0)
    if a.shape(2) is not None:
        nbytes += a.nbytes(2)
        flops += rows * n if conv == "executed" else 0
    return Work(flops, nbytes, "matmul", a.dtype(0), True)


def matmul(a: OpArgs, conv: str) -> Work | None:
    """``matmul(A[..., M, K], B[..., K, N])`` with broadcast batch dims (1-D sides as
    torch: a vector is [1, K] or [K, 1])."""
    x, w = a.shape(0), a.shape(1)
    if not x or not w:
        return None
    xs = [1, x[0]] if len(x) == 1 else x
    ws = [w[0], 1] if len(w) == 1 else w
    if xs[-1] != ws[-2]:
        return None
    batch = _broadcast([xs[:-2], ws[:-2]])
    if batch is None:
        return None
    m, k, n = xs[-2], xs[-1], ws[-1]
    flops = 2.0 * math.prod(batch) * m * k * n
    nbytes = a.nbytes(0) + a.nbytes(1) + math.prod(batch) * m * n * a.size(0)
    return Work(flops, nbytes, "matmul", a.dtype(0), True)


# -- convolution ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ConvSig:
    """Argument positions of a convolution op (None: not in its signature)."""

    x: int
    w: int
    bias: int | None
    stride: int
    padding: int
    dilation: int
    transposed: int | None = None
    output_padding: int | None = None


_CONV = ConvSig(0, 1, 2, 3, 4, 5, 6, 7)            # convolution, _convolution
_CONVND = ConvSig(0, 1, 2, 3, 4, 5)                # conv1d/2d/3d
_CUDNN = ConvSig(0, 1, None, 3, 2, 4)              # cudnn_convolution(x, w, pad, stride, dil)
_MIOPEN = ConvSig(0, 1, 2, 4, 3, 5)                # miopen_convolution(x, w, b, pad, stride, dil)


def _ints(value: Any, n: int, default: int) -> list[int] | None:
    if value is None:
        return [default] * n
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * n
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value * n if len(value) == 1 else value
    return None


def _conv_out(x: list[int], w: list[int], a: OpArgs, sig: ConvSig) -> list[int] | None:
    """Output shape [N, C_out, *spatial] from the input, weight and concrete args."""
    spatial = len(x) - 2
    transposed = bool(a.value(sig.transposed)) if sig.transposed is not None else False
    stride = _ints(a.value(sig.stride), spatial, 1)
    dilation = _ints(a.value(sig.dilation), spatial, 1)
    pad_value = a.value(sig.padding)
    kernel = w[2:]
    if pad_value == "valid":
        pad_value = 0
    if pad_value == "same":
        return [x[0], w[0], *x[2:]]
    padding = _ints(pad_value, spatial, 0)
    out_pad = _ints(a.value(sig.output_padding) if sig.output_padding is not None else None,
                    spatial, 0)
    if None in (stride, dilation, padding, out_pad) or len(kernel) != spatial:
        return None
    assert stride and dilation and padding is not None and out_pad is not None
    if transposed:
        groups = x[1] // max(w[0], 1)
        c_out = w[1] * max(groups, 1)
        dims = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
                for i, s, p, d, k, op in zip(x[2:], stride, padding, dilation, kernel,
                                             out_pad, strict=True)]
    else:
        c_out = w[0]
        dims = [(i + 2 * p - d * (k - 1) - 1) // s + 1
                for i, s, p, d, k in zip(x[2:], stride, padding, dilation, kernel,
                                         strict=True)]
    return [x[0], c_out, *dims] if all(d > 0 for d in dims) else None


def _conv_count(x: list[int], w: list[int], out: list[int], transposed: bool) -> float:
    """``torch.utils.flop_counter.conv_flop_count``: 2·N·prod(conv spatial)·prod(w)."""
    spatial = (x if transposed else out)[2:]
    return 2.0 * x[0] * math.prod(spatial) * math.prod(w)


def _conv(sig: ConvSig) -> Model:
    def model(a: OpArgs, conv: str) -> Work | None:
        x, w = a.shape(sig.x), a.shape(sig.w)
        if x is None or w is None or len(x) < 3 or len(w) != len(x):
            return None
        out = _conv_out(x, w, a, sig)
        if out is None:
            return None
        transposed = bool(a.value(sig.transposed)) if sig.transposed is not None else False
        flops = _conv_count(x, w, out, transposed)
        nbytes = a.nbytes(sig.x) + a.nbytes(sig.w) + math.prod(out) * a.size(sig.x)
        if sig.bias is not None and a.shape(sig.bias) is not None:
            nbytes += a.nbytes(sig.bias)
            flops += math.prod(out) if conv == "executed" else 0
        return Work(flops, nbytes, "conv", a.dtype(sig.x), True)
    return model


def conv_backward(a: OpArgs, conv: str) -> Work | None:
    """``convolution_backward(grad_out, x, w, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask)``: the forward count per gradient
    asked for (grad_input, grad_weight), as torch's ``conv_backward_flop``."""
    go, x, w = a.shape(0), a.shape(1), a.shape(2)
    if go is None or x is None or w is None or len(x) < 3:
        return None
    transposed = bool(a.value(7))
    mask = a.value(10)
    if not (isinstance(mask, list) and len(mask) >= 2):
        mask = [True, True, False]
    fwd = _conv_count(x, w, go, transposed)
    flops = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
    if conv == "executed" and len(mask) > 2 and mask[2]:
        flops += math.prod(go)
    nbytes = (a.nbytes(0) + a.nbytes(1) + a.nbytes(2)
              + (a.nbytes(1) if mask[0] else 0) + (a.nbytes(2) if mask[1] else 0))
    return Work(flops, nbytes, "conv", a.dtype(1), True)


# -- attention -----------------------------------------------------------------------------

@dataclass(frozen=True)
class AttnSig:
    """Positions of q, k, v (and grad_out, out for a backward), the causal flag, and
    whether tensors are [B, S, H, D] (``_flash``/``_efficient`` kernels' layout)."""

    q: int
    causal: int
    backward: bool = False
    bshd: bool = False
    mask_type: bool = False
    """Causal flag is ``custom_mask_type`` (0 none, 1/2 causal) instead of a bool."""


ATTENTION: Mapping[str, AttnSig] = {
    "aten::scaled_dot_product_attention": AttnSig(0, 5),
    "aten::_scaled_dot_product_flash_attention": AttnSig(0, 4),
    "aten::_scaled_dot_product_efficient_attention": AttnSig(0, 6),
    "aten::_scaled_dot_product_cudnn_attention": AttnSig(0, 6),
    "aten::_scaled_dot_product_flash_attention_for_cpu": AttnSig(0, 4),
    "aten::_cudnn_attention_forward": AttnSig(0, 10),
    "aten::_flash_attention_forward": AttnSig(0, 8, bshd=True),
    "aten::_efficient_attention_forward": AttnSig(0, 9, bshd=True, mask_type=True),
    "aten::_scaled_dot_product_flash_attention_backward": AttnSig(1, 11, backward=True),
    "aten::_scaled_dot_product_efficient_attention_backward": AttnSig(1, 11, backward=True),
    "aten::_scaled_dot_product_cudnn_attention_backward": AttnSig(1, 14, backward=True),
    "aten::_cudnn_attention_backward": AttnSig(1, 14, backward=True),
    "aten::_flash_attention_backward": AttnSig(1, 11, backward=True, bshd=True),
    "aten::_efficient_attention_backward": AttnSig(1, 14, backward=True, bshd=True,
                                                    mask_type=True),
}
"""Attention op name -> argument positions (PyTorch ``native_functions.yaml``)."""


def attention_flops(b: int, h: int, s_q: int, s_k: int, d_q: int, d_v: int, *,
                    backward: bool, causal: bool, conv: str) -> float:
    """FLOPs of one attention call (see the module docstring for the conventions)."""
    fwd = 2.0 * b * h * s_q * s_k * (d_q + d_v)
    # backward: Q·K^T recomputed, then dP = dO·V^T, dV = P^T·dO, dQ = dS·K, dK = dS^T·Q
    total = 2 * fwd + 2.0 * b * h * s_q * s_k * d_q if backward else fwd
    return total / 2 if causal and conv == "executed" else total


def _attention(sig: AttnSig) -> Model:
    def model(a: OpArgs, conv: str) -> Work | None:
        q, k, v = a.shape(sig.q), a.shape(sig.q + 1), a.shape(sig.q + 2)
        if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 4:
            return None
        if sig.bshd:
            q, k, v = ([t[0], t[2], t[1], t[3]] for t in (q, k, v))
        (b, h, s_q, d_q), s_k, d_v = q, k[2], v[3]
        flag = a.value(sig.causal)
        causal = bool(flag) if not sig.mask_type else flag in (1, 2)
        flops = attention_flops(b, h, s_q, s_k, d_q, d_v, backward=sig.backward,
                                causal=causal, conv=conv)
        qkv = a.nbytes(sig.q) + a.nbytes(sig.q + 1) + a.nbytes(sig.q + 2)
        out = b * h * s_q * d_v * a.size(sig.q)
        # backward: reads q, k, v, out, grad_out; writes grad q, k, v
        nbytes = qkv + out if not sig.backward else 2 * qkv + 2 * out
        return Work(flops, nbytes, "attention", a.dtype(sig.q), True)
    return model


# -- elementwise, copies, reductions, normalisation, softmax -------------------------------

def _broadcast(shapes: Sequence[Sequence[int]]) -> list[int] | None:
    """numpy/torch broadcast of ``shapes`` (None when they do not broadcast)."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for axis in range(ndim):
        sizes = {s[len(s) - ndim + axis] for s in shapes if len(s) - ndim + axis >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out


def elementwise(a: OpArgs, conv: str, arity: int = 2) -> Work | None:
    """One FLOP per output element. The first ``arity`` typed tensors are read; the output
    is their broadcast, its element size the widest non-0-d input's (a 0-d tensor is a
    wrapped Python number: it does not promote); tensors past ``arity`` are ``out=``
    arguments (written, not read)."""
    tensors = a.tensors()
    if not tensors:
        return None
    ins, outs = tensors[:arity], tensors[arity:]
    out = _broadcast([a.shape(i) or [] for i in ins])
    if out is None:
        return None
    numel = math.prod(out)
    sized = [i for i in ins if a.shape(i)] or ins
    size = max(a.size(i) for i in sized)
    written = sum(a.nbytes(i) for i in outs) if outs else numel * size
    nbytes = sum(a.nbytes(i) for i in ins) + written
    return Work(float(numel), float(nbytes), "elementwise", a.dtype(sized[0]), False)


def _elementwise(arity: int) -> Model:
    def model(a: OpArgs, conv: str) -> Work | None:
        return elementwise(a, conv, arity)
    return model


def copy(a: OpArgs, conv: str) -> Work | None:
    """``copy_(dst, src)``: 0 FLOPs; reads src, writes dst."""
    if a.shape(0) is None or a.shape(1) is None:
        return None
    return Work(0.0, float(a.nbytes(0) + a.nbytes(1)), "copy", a.dtype(1), False)


def reduction(a: OpArgs, conv: str) -> Work | None:
    """One FLOP per input element; output: the input with the ``dim`` list reduced
    (``keepdim`` irrelevant to the count), a single element when no dim is given."""
    x = a.shape(0)
    if x is None:
        return None
    dims = a.value(1)
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = [dims]
    if isinstance(dims, list) and dims and all(isinstance(d, int) for d in dims) and x:
        kept = [n for i, n in enumerate(x) if i not in {d % len(x) for d in dims}]
        out = math.prod(kept)
    else:
        out = 1
    numel = math.prod(x)
    return Work(float(numel), float(a.nbytes(0) + out * a.size(0)), "reduction",
                a.dtype(0), False)


def _per_element(family: str, flops_per: float, reads: int, writes: int) -> Model:
    """``flops_per`` FLOPs per element of input 0; bytes: the typed tensor inputs read
    (the first ``reads`` of them, at least input 0) + ``writes`` outputs of input 0's size
    plus, for norms, the parameters (any further 1-D..n-D tensor inputs)."""
    def model(a: OpArgs, conv: str) -> Work | None:
        x = a.shape(0)
        if x is None:
            return None
        numel = math.prod(x)
        tensors = a.tensors()
        nbytes = sum(a.nbytes(i) for i in tensors[:max(reads, 1)]) + writes * a.nbytes(0)
        if family == "norm":
            nbytes += sum(a.nbytes(i) for i in tensors[max(reads, 1):])
        return Work(flops_per * numel, float(nbytes), family, a.dtype(0), False)
    return model


_ELEMENTWISE: Mapping[int, tuple[str, ...]] = {
    1: ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "silu",
        "abs", "reciprocal", "cos", "sin", "hardtanh", "leaky_relu", "erf", "square",
        "logical_not", "bitwise_not", "floor", "ceil", "round", "sign"),
    2: ("add", "sub", "mul", "div", "rsub", "pow", "masked_fill", "maximum", "minimum",
        "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
        "tanh_backward", "eq", "ne", "lt", "gt", "le", "ge"),
    3: ("where", "addcmul", "addcdiv", "lerp", "clamp"),
}
"""Elementwise ops by the number of tensor inputs they read."""
_REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin",
               "linalg_vector_norm", "norm", "var", "std", "any", "all")
_NORM_FWD = ("native_layer_norm", "native_batch_norm", "cudnn_batch_norm",
             "miopen_batch_norm", "native_group_norm", "_fused_rms_norm",
             "_native_batch_norm_legit", "_native_batch_norm_legit_no_training")
_NORM_BWD = ("native_layer_norm_backward", "native_batch_norm_backward",
             "cudnn_batch_norm_backward", "miopen_batch_norm_backward",
             "native_group_norm_backward", "_fused_rms_norm_backward")


def _registry() -> dict[str, Model]:
    models: dict[str, Model] = {
        "aten::mm": mm, "aten::bmm": mm, "aten::addmm": addmm, "aten::baddbmm": addmm,
        "aten::_scaled_mm": scaled_mm, "aten::linear": linear, "aten::matmul": matmul,
        "aten::convolution": _conv(_CONV), "aten::_convolution": _conv(_CONV),
        "aten::conv1d": _conv(_CONVND), "aten::conv2d": _conv(_CONVND),
        "aten::conv3d": _conv(_CONVND), "aten::cudnn_convolution": _conv(_CUDNN),
        "aten::miopen_convolution": _conv(_MIOPEN),
        "aten::convolution_backward": conv_backward,
        "aten::copy_": copy,
        "aten::_softmax": _per_element("softmax", 3, 1, 1),
        "aten::softmax": _per_element("softmax", 3, 1, 1),
        "aten::_log_softmax": _per_element("softmax", 3, 1, 1),
        "aten::log_softmax": _per_element("softmax", 3, 1, 1),
        "aten::_softmax_backward_data": _per_element("softmax", 6, 2, 1),
        "aten::_log_softmax_backward_data": _per_element("softmax", 6, 2, 1),
    }
    for name, sig in ATTENTION.items():
        models[name] = _attention(sig)
    for arity, names in _ELEMENTWISE.items():
        for op in names:
            models[f"aten::{op}"] = models[f"aten::{op}_"] = _elementwise(arity)
    for op in _REDUCTIONS:
        models[f"aten::{op}"] = reduction
    for op in _NORM_FWD:
        models[f"aten::{op}"] = _per_element("norm", 5, 1, 1)
    for op in _NORM_BWD:
        models[f"aten::{op}"] = _per_element("norm", 9, 2, 1)
    return models


MODELS: Mapping[str, Model] = _registry()
"""Op name (as Kineto writes it) -> its model."""

_LIST = re.compile(r"^\s*\[.*\]\s*$", re.S)


def parse(dims: str | None, types: str | None, concrete: str | None) -> OpArgs | None:
    """The ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` JSON texts as OpArgs
    (None when dims or types are missing or not JSON lists)."""
    if not dims or not types or not _LIST.match(dims) or not _LIST.match(types):
        return None
    try:
        d, t = json.loads(dims), json.loads(types)
        c = json.loads(concrete) if concrete and _LIST.match(concrete) else []
    except ValueError:
        return None
    if not isinstance(d, list) or not isinstance(t, list) or not isinstance(c, list):
        return None
    return OpArgs(d, [str(x) for x in t], [str(x) for x in c])


def work(name: str, args: OpArgs | None, convention: str = "executed") -> Work | None:
    """FLOPs and bytes of op ``name`` with ``args``; None without a model or shapes."""
    model = MODELS.get(name)
    if model is None or args is None:
        return None
    try:
        return model(args, convention)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None
