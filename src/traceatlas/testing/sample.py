"""The generator of the shipped sample trace (``examples/sample_trace``, written by
``examples/make_sample.py``; ``traceatlas demo`` regenerates it when the package runs without
the repository): a 2-rank DDP-like PyTorch profiler trace (Kineto JSON), 3 ProfilerSteps,
rank 1's kernels 25% slower, a 2.5 ms data-loader stall in step 2. Fixed seed: the files
are byte-identical on every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from traceatlas.testing import Collective, TraceBuilder, write_multi_rank

BASE_TIME_NS = 1_735_689_600_000_000_000  # 2025-01-01T00:00:00Z
WORLD = 2
STEPS = (1, 2, 3)
LAYERS = 7
STALL_STEP, STALL_NS = 2, 2_500_000
SLOWDOWN = {0: 1.0, 1: 1.25}
GRAD_NELEMS = 4_194_304  # float32 gradients, 16 MiB

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>" \
       "(cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)" \
       "::launch_clamp_scalar, std::array<char*, 2ul> >(int, std::array<char*, 2ul>)"
RELU_BWD = "void at::native::vectorized_elementwise_kernel<4, at::native::" \
           "threshold_backward_kernel, std::array<char*, 3ul> >(int, std::array<char*, 3ul>)"
SGD = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::" \
      "TensorListMetadata<3>, at::native::FusedSgdMathFunctor<float, 3> >(int)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
HTOD = "Memcpy HtoD (Pinned -> Device)"


@dataclass
class Rank:
    """One rank's builder and clocks (ns since the trace start)."""

    b: TraceBuilder
    rng: random.Random
    slow: float
    host: int = 0
    gpu: int = 0  # stream 7 is free from here

    def op(self, name: str, kernel: str, gpu_ns: int) -> None:
        """A cpu_op launching one kernel on stream 7; advances both clocks."""
        start = self.host
        launch = start + self.rng.randint(4_000, 9_000)
        launch_dur = self.rng.randint(5_000, 9_000)
        end = launch + launch_dur + self.rng.randint(2_000, 6_000)
        self.b.cpu_op(name, start, end)
        gpu_start = max(self.gpu, launch + launch_dur) + self.rng.randint(1_000, 3_000)
        gpu_dur = int(gpu_ns * self.slow) + self.rng.randint(0, 999)
        self.b.launch(kernel, launch, launch_dur, gpu_start, gpu_dur, stream=7,
                      grid=(108, 1, 1), block=(256, 1, 1))
        self.gpu = gpu_start + gpu_dur
        self.host = end + self.rng.randint(1_000, 3_000)


def _until_allreduce(r: Rank, step: int) -> tuple[int, int]:
    """Step start .. backward end; returns (step start, time the gradients are ready)."""
    b = r.b
    start = r.host
    launch = start + 20_000
    gpu = max(r.gpu, launch + 12_000) + 3_000
    b.cpu_op("aten::copy_", start + 10_000, launch + 20_000)
    b.launch(HTOD, launch, 12_000, gpu, 170_000 + r.rng.randint(0, 999), kind="memcpy",
             nbytes=4 * 1024 * 1024)
    r.gpu = gpu + 170_000
    r.host = launch + 35_000
    if step == STALL_STEP:
        r.host += STALL_NS  # nothing is written: an idle gap on host and device
    fwd_start = r.host
    fwd_ops: list[tuple[str, str, int]] = []
    for _ in range(LAYERS):
        fwd_ops += [("aten::linear", GEMM, 180_000), ("aten::relu", RELU, 40_000)]
    r.host += 2_000
    for name, kernel, ns in fwd_ops:
        r.op(name, kernel, ns)
    b.annotation("## forward ##", fwd_start, r.host + 1_000, gpu=True)
    r.host += 3_000
    bwd_start = r.host
    r.host += 2_000
    for _ in range(LAYERS):
        r.op("aten::threshold_backward", RELU_BWD, 45_000)
        r.op("aten::mm", GEMM, 360_000)
    r.host += 1_000
    b.annotation("## backward ##", bwd_start, r.host, gpu=True)
    return start, r.gpu


def write_sample(out: Path) -> list[Path]:
    """Build both ranks and write ``rank-{0,1}.json.gz`` to ``out``."""
    ranks = [
        Rank(TraceBuilder(rank, WORLD, base_time_ns=BASE_TIME_NS, pid=31_400 + rank),
             random.Random(7 + rank), SLOWDOWN[rank], host=500_000, gpu=0)
        for rank in range(WORLD)
    ]
    coll = Collective("allreduce", GRAD_NELEMS, GRAD_NELEMS, dtype="Float",
                      group_ranks=tuple(range(WORLD)), pg_name="0")
    for step in STEPS:
        starts, ready = zip(*(_until_allreduce(r, step) for r in ranks), strict=True)
        # The ring finishes together once the last rank has arrived, plus the transfer.
        done = max(ready) + 900_000
        for r, start, own_ready in zip(ranks, starts, ready, strict=True):
            b = r.b
            ann = r.host
            b.annotation("nccl:all_reduce", ann, ann + 40_000)
            b.cpu_op("record_param_comms", ann + 5_000, ann + 35_000, collective=coll)
            nccl_start = max(own_ready, ann + 25_000) + 2_000
            b.launch(NCCL, ann + 10_000, 15_000, nccl_start, done - nccl_start, stream=20,
                     collective=coll, grid=(2, 1, 1), block=(640, 1, 1))
            r.host = ann + 45_000
            opt_start = r.host
            r.gpu = max(r.gpu, done)  # stream 7 waits for the allreduce
            r.op("aten::_fused_sgd_", SGD, 70_000)
            r.op("aten::_fused_sgd_", SGD, 70_000)
            b.annotation("Optimizer.step#SGD.step", opt_start, r.host)
            sync_start = r.host
            sync_end = r.gpu + 4_000
            b.sync(sync_start, sync_end - sync_start, r.gpu, 2_000)
            r.host = sync_end + 6_000
            b.step(step, start, r.host)
            r.host += 20_000
    return write_multi_rank(out, [r.b for r in ranks])

