"""Per-name values of the nsys reader (communication kernels, ProfilerStep ranges, NCCL
collective and dtype) computed only for names holding a substring (issue 14 speed-up):
equal to a plain Python loop applying the regular expressions to every row's name."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.io.nsys_tables import _nccl_parts, _per_name, _refine_categories
from traceatlas.model.categories import COMM_KERNEL_RE, STEP_RE

NAMES = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "NCCLKernel_Broadcast_RING_LL_Sum_half",
         "rcclKernel_AllGather", "RcCl_thing", "my_nccl_wrapper", "ncclDevKernel_Generic",
         "nCcLDevKernel_ReduceScatter_Sum_bf16", "gemm", "ccl", "NcC", "ProfilerStep#3",
         "ProfilerStep #12", "ProfilerStep#4\n", "profilerstep#5", "ProfilerStep#x",
         "xProfilerStep#1", "", "ProfilerStep\u00a0#7", "ProfilerStep#\u0663"]


def _dictionary(names: list[str]) -> pa.DictionaryArray:
    return pc.dictionary_encode(pa.array(names, pa.string()))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(NAMES) | st.text(max_size=12),
                               st.sampled_from(["kernel", "nvtx", "runtime"])), max_size=30))
def test_per_name_equals_a_plain_loop(rows: list[tuple[str, str]]) -> None:
    names = [n for n, _c in rows]
    cats = [c for _n, c in rows]
    name = _dictionary(names)
    got = _refine_categories(name, pa.array(cats, pa.string())).to_pylist()
    want = ["comm_kernel" if c == "kernel" and COMM_KERNEL_RE.search(n) else
            "step" if c == "nvtx" and STEP_RE.match(n) else c for n, c in rows]
    assert got == want
    collective = _per_name(name, lambda n: _nccl_parts(n)[0], "ccl")
    dtype = _per_name(name, lambda n: _nccl_parts(n)[1], "ccl")
    assert collective.to_pylist() == [_nccl_parts(n)[0] for n in names]
    assert dtype.to_pylist() == [_nccl_parts(n)[1] for n in names]


def test_known_names_by_hand() -> None:
    name = _dictionary(["NCCLKernel_Broadcast_RING_LL_Sum_half", "ProfilerStep#4\n", "gemm"])
    got = _refine_categories(name, pa.array(["kernel", "nvtx", "kernel"])).to_pylist()
    assert got == ["comm_kernel", "step", "kernel"]  # Python's $ matches before a final \n
    assert _per_name(name, lambda n: _nccl_parts(n)[0], "ccl").to_pylist() == \
        ["broadcast", None, None]
