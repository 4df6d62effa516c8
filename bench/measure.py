"""Run one command and report its wall time and peak memory as JSON.

Usage: python bench/measure.py [--timeout S] [--stdout FILE] [--stderr FILE] -- CMD [ARG ...]

This wrapper exists so every measured command gets its own process tree: the
kernel's RUSAGE_CHILDREN high-water mark (ru_maxrss) is then that command's
alone, not the maximum over everything the benchmark driver ever ran.

Two memory figures are reported:

* ``maxrss_bytes``: ru_maxrss of the children, i.e. the exact kernel peak of
  the single largest process in the tree (pool workers included once reaped);
* ``tree_rss_peak_bytes``: the peak of the *sum* of RSS over the whole process
  tree, sampled every ``--interval`` seconds with psutil (absent without
  psutil). It matters when the command forks a worker pool; pages shared
  copy-on-write are counted once per process, so it is an upper bound.

CPU time is reported too, because wall time on a shared 2-core box is noisy:

* ``cpu_s``: user + system CPU seconds of the command's whole tree;
* ``other_cpu_s``: CPU seconds the rest of the machine burnt meanwhile (system
  busy time from /proc/stat minus ``cpu_s``, so it includes this wrapper's
  sampling); ``other_cpu_s / wall_s`` is the average number of cores taken by
  other work, i.e. how contaminated the wall time is.

The JSON line is printed on stdout; the command's own stdout/stderr go to the
given files (or are discarded).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

try:
    import psutil  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - psutil is optional
    psutil = None


def _tree_rss(proc: Any) -> int:
    """Sum of RSS over ``proc`` and all its descendants (0 once gone)."""
    total = 0
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in members:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def system_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    ticks = [int(x) for x in fields]
    # user nice system idle iowait irq softirq steal (guest is inside user)
    busy = sum(ticks[:3]) + sum(ticks[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def _open_sink(path: str | None) -> IO[bytes] | int:
    if path is None:
        return subprocess.DEVNULL
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return open(path, "wb")  # closed in run()


def run(
    cmd: list[str], timeout: float | None, out: str | None, err: str | None, interval: float
) -> dict[str, Any]:
    """Run ``cmd`` to completion and return the measurement record."""
    sink_out, sink_err = _open_sink(out), _open_sink(err)
    busy0 = system_busy_s()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=sink_out, stderr=sink_err)
    ps = psutil.Process(proc.pid) if psutil is not None else None
    tree_peak = 0
    timed_out = False
    while proc.poll() is None:
        if ps is not None:
            tree_peak = max(tree_peak, _tree_rss(ps))
        if timeout is not None and time.perf_counter() - t0 > timeout:
            timed_out = True
            proc.kill()
            proc.wait()
            break
        time.sleep(interval)
    wall = time.perf_counter() - t0
    busy = system_busy_s() - busy0
    for sink in (sink_out, sink_err):
        if not isinstance(sink, int):
            sink.close()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "cmd": cmd,
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "wall_s": wall,
        "cpu_s": cpu,
        "other_cpu_s": max(busy - cpu, 0.0),
        "maxrss_bytes": usage.ru_maxrss * 1024,  # ru_maxrss is KiB on Linux
        "tree_rss_peak_bytes": tree_peak if ps is not None else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--stdout", default=None, help="file for the command's stdout")
    ap.add_argument("--stderr", default=None, help="file for the command's stderr")
    ap.add_argument("--interval", type=float, default=0.05, help="RSS sampling period, s")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command given")
    try:
        rec = run(cmd, a.timeout, a.stdout, a.stderr, a.interval)
    except OSError as exc:  # e.g. executable not found
        rec = {"cmd": cmd, "returncode": None, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
