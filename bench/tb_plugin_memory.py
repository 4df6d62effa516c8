"""Print the TensorBoard profiler plugin's Memory View numbers for one trace (JSON):
peak Total Allocated per device and per-op [SelfIncrease, SelfAllocSize, SelfAllocCount,
Increase, AllocSize, AllocCount, calls] per device. Run with /work/tb-venv/bin/python."""
import json
import sys
import tempfile

from torch_tb_profiler.profiler.data import RunProfileData

p = RunProfileData.parse("w", "s", sys.argv[1], tempfile.mkdtemp())
snap = p.memory_snapshot
peaks = {f"{t.name}{i}": v for (t, i), v in snap.get_peak_memory().items()}
stats = snap.get_memory_statistics(p.tid2tree)
print(json.dumps({"peaks": peaks, "stats": stats}))
