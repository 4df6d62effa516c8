"""The name normaliser (``traceatlas.compare.normalize``): real kernel names copied from
``../shared/traces`` (h100-planted/compiled and regress, nsys-ai/mfu_2gpu_before), the
documented rules, and properties (idempotent, never raises)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.compare.normalize import normalize

SAME: list[tuple[str, ...]] = [
    # Non-type template arguments differ (nsys spelling: (int)4 vs (int)8).
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<"
     "float>, std::array<char *, (unsigned long)3>>(int, T2, T3)",
     "void at::native::vectorized_elementwise_kernel<(int)8, at::native::CUDAFunctor_add<"
     "float>, std::array<char *, (unsigned long)3>>(int, T2, T3)",
     # Kineto's spelling of the same kernel.
     "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,"
     " std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*,"
     " 3ul>)"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
     "(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::"
     "FusedSgdMathFunctor<float, 1> >(int)",
     "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
     "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
     "FusedSgdMathFunctor<float, 2> >(int)"),
    ("void at::native::<unnamed>::vectorized_layer_norm_kernel<float, float, (bool)0>(int,"
     " T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
     "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, "
     "false>(int, float, float const*, float const*, float const*, float*, float*, float*)"),
    ("triton_poi_fused__to_copy_0", "triton_poi_fused__to_copy_14"),
    ("triton_per_fused__to_copy_native_layer_norm_backward_view_1",
     "triton_per_fused__to_copy_native_layer_norm_backward_view_3"),
    ("ProfilerStep#3", "ProfilerStep#1010"),
    ("aten::to, seq = 45331, op_id = 990361", "aten::to, op_id = 990347", "aten::to"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"),
    ("void foo<float, 128>(float*)", "void foo<float, 256>(float*)", "_Z3fooIfLi128EEvPf"),
    ("launch@0x7f3a2c001000", "launch@0x55d0c0ffee00"),
]

DIFFERENT: list[str] = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
    "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::"
    "BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul>)",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT",
    "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NTT",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_"
    "aligna4_alignc4_execute_kernel__5x_cublas",
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
    "aligna4_alignc4_execute_kernel__5x_cublas",
    "triton_poi_fused__to_copy_0",
    "triton_poi_fused__to_copy_t_15",
    "triton_red_fused_sum_4",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    "ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclWorkElem)",
    "ncclKernel_AllGather_RING_LL_Sum_float(ncclWorkElem)",
    "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
    "Memcpy HtoD (Pageable -> Device)",
    "Memcpy DtoH (Device -> Pageable)",
    "aten::mm",
    "aten::addmm",
]


@pytest.mark.parametrize("names", SAME, ids=lambda names: names[-1][:40])
def test_variants_map_together(names: tuple[str, ...]) -> None:
    keys = {normalize(n) for n in names}
    assert len(keys) == 1, keys


def test_different_kernels_stay_apart() -> None:
    keys = [normalize(n) for n in DIFFERENT]
    assert len(set(keys)) == len(DIFFERENT), sorted(keys)


@pytest.mark.parametrize(("raw", "key"), [
    ("void foo<float, 128>(float*)", "foo<float, #>"),
    ("ProfilerStep#12", "ProfilerStep#"),
    ("triton_poi_fused_add_0", "triton_poi_fused_add_#"),
    ("triton__0d1d2de3de", "triton__"),
    ("fused_kernel_9f1c2ab03d4e", "fused_kernel_#"),
    ("train_step 41", "train_step #"),
    ("launch@0x7f3a2c001000", "launch@0x#"),
    ("aten::mm, seq = 12, op_id = 990361, sizes = [[2, 3]]", "aten::mm"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
     "ncclKernel_AllReduce_RING_LL_Sum_float"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
])
def test_documented_examples(raw: str, key: str) -> None:
    assert normalize(raw) == key


NAMEISH = st.text(alphabet=st.sampled_from(list("abAZ_:<>(),#*& 0123456789x.-[]{}")),
                  max_size=60)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=80), NAMEISH, st.sampled_from(DIFFERENT),
                 st.tuples(st.sampled_from(DIFFERENT), NAMEISH).map("".join)))
def test_idempotent_and_total(name: str) -> None:
    key = normalize(name)
    assert isinstance(key, str)
    assert normalize(key) == key
