"""The matching key of a kernel, op or annotation name across runs.

Two runs of the same program name "the same" work differently: template arguments
change with tile sizes, generated kernels carry counters and hashes, step annotations
carry the iteration number, nsys NVTX ranges of ``emit_nvtx`` carry op ids. ``normalize``
maps such names to one key. The raw names are always kept beside the key (the baseline
summary lists them); the key is only for matching. Rules, in order (each with an example):

1. Demangle Itanium names (``traceatlas.names.demangle``):
   ``_Z3fooIfLi128EEvPf`` -> ``void foo<float, 128>(float*)``.
2. ``emit_nvtx`` fields dropped: ``aten::mm, seq = 12, op_id = 990361, sizes = [[2, 3]]``
   -> ``aten::mm``.
3. Spelling made uniform (Kineto and nsys print one kernel differently): ``<unnamed>`` ->
   ``(anonymous namespace)``; C-style casts of numbers dropped (``(int)128`` -> ``128``,
   ``(bool)0`` -> ``0``); no space before ``*`` / ``&``; ``> >`` -> ``>>``; runs of
   spaces -> one space.
4. A leading ``void`` return type and the parameter list are dropped
   (``traceatlas.names.shorten`` at unlimited depth: template arguments are kept here):
   ``void foo<float, 128>(float*)`` -> ``foo<float, 128>``;
   ``ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)`` -> ``ncclDevKernel_SendRecv``.
5. Numbers that are whole template arguments (non-type arguments: tile sizes, vector
   widths, flags) become ``#``; type arguments stay, so kernels of different element
   types or functors stay apart: ``foo<float, 128>`` and ``foo<float, 256>`` ->
   ``foo<float, #>``, ``foo<c10::BFloat16, 128>`` -> ``foo<c10::BFloat16, #>``.
6. Hexadecimal addresses become ``0x#``: ``launch@0x7f3a2c001000`` -> ``launch@0x#``.
7. Generated-name suffixes of the last word (not for NCCL/RCCL kernels, whose names are
   their collective, algorithm, protocol, reduction and type, kept whole:
   ``ncclKernel_AllReduce_RING_LL_Sum_float``):

   - Triton specialisation suffixes removed: ``triton__0d1d2de3de`` -> ``triton_``;
   - hexadecimal hashes of 8+ digits (with a digit) -> ``#``:
     ``fused_kernel_9f1c2ab03d4e`` -> ``fused_kernel_#``;
   - a trailing number after ``#`` removed: ``ProfilerStep#12`` -> ``ProfilerStep#``;
   - a trailing counter after ``_``, a space or ``-`` -> ``#``: ``triton_poi_fused_add_0`` ->
     ``triton_poi_fused_add_#``, ``train_step 41`` -> ``train_step #``.

The rules are applied until the key no longer changes (at most a few rounds), so
``normalize(normalize(x)) == normalize(x)``. Phrases such as ``Memcpy HtoD (Pageable ->
Device)`` only go through the spelling rules. Cached per name.
"""

from __future__ import annotations

import re
from functools import lru_cache

from traceatlas.names import demangle, shorten

_DEPTH = 1 << 30
"""Template depth kept by ``shorten``: all of it."""
_ROUNDS = 6
"""Most rounds of the rules before a key is returned as it stands."""

_NVTX_FIELDS = re.compile(r", (?:seq|op_id|sizes|input_op_ids|stashed seq) = .*\Z", re.S)
_CAST = re.compile(
    r"\((?:(?:unsigned|signed|long|short|int|char|bool|size_t|std::size_t|u?int\d+_t)\s*)+\)"
    r"(?=-?\d|true\b|false\b)")
_SPACE_PTR = re.compile(r"\s+(?=[*&])")
_SPACES = re.compile(r"\s+")
_NUMBER_ARG = re.compile(r"(?<=[<,])(\s*)(?:-?\d+[uUlL]*|true|false)(?=\s*[,>])")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_COLLECTIVE = re.compile(r"^(?:nccl|rccl)", re.I)
_TRITON_SPEC = re.compile(r"(?<=_)(?:\d+(?:de|d|e|c))+\Z")
_HASH = re.compile(r"(?<=[_.\-])(?=[0-9a-f]*\d)[0-9a-f]{8,}\Z")
_STEP_NUMBER = re.compile(r"(?<=#)\d+\Z")
_COUNTER = re.compile(r"(?<=[_ \-])\d+\Z")


@lru_cache(maxsize=262_144)
def normalize(name: str) -> str:
    """The matching key of ``name`` (see the module docstring for the rules)."""
    key = name
    for _ in range(_ROUNDS):
        nxt = _round(key)
        if nxt == key:
            break
        key = nxt
    return key


def _round(name: str) -> str:
    """One application of every rule."""
    text = demangle(name)
    text = _NVTX_FIELDS.sub("", text)
    text = text.replace("<unnamed>", "(anonymous namespace)")
    text = _CAST.sub("", text)
    text = _SPACE_PTR.sub("", text)
    text = _SPACES.sub(" ", text).strip()
    while "> >" in text:
        text = text.replace("> >", ">>")
    text = shorten(text, _DEPTH)
    text = _template_numbers(text)
    text = _HEX.sub("0x#", text)
    if not _COLLECTIVE.match(text):
        text = _TRITON_SPEC.sub("", text)
        text = _HASH.sub("#", text)
        text = _STEP_NUMBER.sub("", text)
        text = _COUNTER.sub("#", text)
    return text


def _template_numbers(text: str) -> str:
    """Numbers that are whole template arguments -> ``#`` (repeated: ``<1, 2>`` has
    two neighbouring matches that share a comma)."""
    if "<" not in text:
        return text
    while True:
        out = _NUMBER_ARG.sub(r"\1#", text)
        if out == text:
            return out
        text = out
