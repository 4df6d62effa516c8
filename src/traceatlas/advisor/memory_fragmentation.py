"""Rule ``memory_fragmentation``: the caching allocator reserves far more than is allocated.

From the ``memory`` analysis' ``peaks``: at the allocated peak, ``fragmentation_bytes``
(reserved minus allocated) is at least ``MIN_SHARE_OF_RESERVED`` of the reserved bytes and
at least ``MIN_SHARE_OF_DEVICE`` of the device's memory (``MIN_BYTES`` when the device's
size is unknown): memory the process holds but cannot use for its largest requests.
Cost: ``cost_bytes`` = that difference; severity from the share of device memory.
"""

from __future__ import annotations

from traceatlas.advisor.base import Context, Finding
from traceatlas.advisor.memory_common import fmt_bytes, memory_result, severity

NAME = "memory_fragmentation"
MIN_SHARE_OF_RESERVED = 0.25
MIN_SHARE_OF_DEVICE = 0.05
MIN_BYTES = 2 * 2**30
NEXT_STEP = ("Let the allocator grow segments instead of caching many fixed blocks: run "
             "with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; allocate long-lived "
             "buffers first and reuse them, and avoid many tensors of changing sizes "
             "(pad to a few bucket sizes).")


def check(ctx: Context) -> list[Finding]:
    """One finding per (rank, device) with much more reserved than allocated at the peak."""
    result = memory_result(ctx)
    if result is None:
        return []
    out = []
    for row in result.table.iter_rows(named=True):
        frag, reserved = row["fragmentation_bytes"], row["reserved_at_peak_bytes"]
        total = row["device_total_bytes"]
        floor = MIN_SHARE_OF_DEVICE * total if total else MIN_BYTES
        if frag is None or not reserved or frag < MIN_SHARE_OF_RESERVED * reserved \
                or frag < floor:
            continue
        statement = (f"The allocator holds {fmt_bytes(frag)} more than is allocated at the "
                     f"peak on rank {row['rank']} {row['device']} ({frag / reserved:.0%} of "
                     f"the {fmt_bytes(reserved)} reserved): fragmentation")
        evidence = (f"at {ctx.when(row['peak_ns'], row['peak_ns'])}: allocated "
                    f"{fmt_bytes(row['peak_allocated_bytes'])}, reserved {fmt_bytes(reserved)}"
                    f"; largest reserved {fmt_bytes(row['peak_reserved_bytes'] or 0)}")
        out.append(Finding(
            rule=NAME, statement=statement, cost_ns=0, evidence=evidence, next_step=NEXT_STEP,
            command=ctx.command("memory", "--ranks", str(row["rank"])),
            severity=severity(frag, total), cause="memory_fragmentation",
            ranks=[int(row["rank"])], window_ns=(int(row["peak_ns"]), int(row["peak_ns"]) + 1),
            cost_bytes=int(frag)))
    return out
