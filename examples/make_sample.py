"""Write the shipped sample: a 2-rank DDP-like PyTorch profiler trace (Kineto JSON).

    python examples/make_sample.py            # -> examples/sample_trace/rank-{0,1}.json.gz

Each rank runs 3 ProfilerSteps. A step: a host-to-device memcpy of the batch, a
``## forward ##`` and a ``## backward ##`` annotation with 14 compute kernels each on
stream 7, an NCCL allreduce of the gradients on stream 20, then 2 optimizer kernels and a
stream synchronisation (``loss.item()``). Rank 1's kernels are 25% slower, so rank 1 reaches
the allreduce later and rank 0's NCCL kernel is longer (it waits). In step 2 the host
stalls 2.5 ms before the forward pass (a data-loader stall): the GPU is idle there.
Times are generated from a fixed seed, so the files are the same on every run.
"""

from __future__ import annotations

from pathlib import Path

from traceatlas.testing.sample import write_sample

OUT = Path(__file__).resolve().parent / "sample_trace"


def main(out: Path = OUT) -> list[Path]:
    """Write ``rank-{0,1}.json.gz`` into ``out``; returns the paths."""
    return write_sample(out)


if __name__ == "__main__":
    for path in main():
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
