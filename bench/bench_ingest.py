"""Ingest benchmark: traceatlas vs HTA (Holistic Trace Analysis).

For each case (a directory of Kineto rank files made by
``shared/tools/scale_trace.py``) this measures, each in a fresh process so
memory is isolated (see ``bench/measure.py``):

* HTA:        ``TraceAnalysis(trace_dir=DIR)`` in HTA's own venv;
* traceatlas: ``traceatlas ingest DIR -o STORE``;
* raw decode: ``Path.read_bytes()`` + untyped ``msgspec.json.decode`` of every
  rank file, timed inside the process (GC off): the reference for how close
  an ingest gets to merely decoding the JSON.

It prints a markdown table and, with ``--json-out``, writes every record as
JSON. Inputs are generated under ``--gen-dir`` when missing.

Example::

    .venv/bin/python bench/bench_ingest.py --case all --gen-dir /tmp/tabench \\
        --json-out bench/results.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from measure import system_busy_s

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
SHARED = REPO_ROOT.parent / "shared"
DEFAULT_SCALER = SHARED / "tools" / "scale_trace.py"
DEFAULT_SOURCE = SHARED / "traces" / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
DEFAULT_HTA_PYTHON = "/work/hta-venv/bin/python"
RESULT_TAG = "BENCH_RESULT "
# Peak RSS of HTA's parser per rank, as a multiple of the file size (measured
# ~4.7x); used only for the pre-flight "does it fit in RAM" check.
HTA_RSS_FACTOR = 4.7


@dataclass(frozen=True)
class Case:
    """One benchmark input: ``ranks`` files of ``copies`` replicas each."""

    name: str
    copies: int
    ranks: int


# ~9.43 MB per copy of nccl_data.json.gz once scaled (235.9 bytes/event).
CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("50mb", copies=6, ranks=1),
        Case("200mb", copies=21, ranks=1),
        Case("1gb", copies=106, ranks=1),
        Case("8x200mb", copies=21, ranks=8),
        Case("8x100mb", copies=11, ranks=8),  # fallback if 8x200mb does not fit
    )
}
ALL_CASES = ("200mb", "1gb", "8x200mb")


@dataclass
class Run:
    """One measured command."""

    tool: str
    cmd: list[str]
    ok: bool
    wall_s: float | None = None
    cpu_s: float | None = None
    other_cpu_s: float | None = None
    peak_rss_bytes: int | None = None
    maxrss_bytes: int | None = None
    tree_rss_peak_bytes: int | None = None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class CaseResult:
    """Everything measured for one case."""

    case: str
    trace_dir: str
    files: int
    input_bytes: int
    runs: dict[str, Run] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------
# input generation
# --------------------------------------------------------------------------


def rank_files(trace_dir: Path) -> list[Path]:
    return sorted(trace_dir.glob("rank-*.json"))


def gen_meta_path(gen_dir: Path, case: Case) -> Path:
    # Kept outside the trace dir: HTA would try to parse any *.json inside it.
    return gen_dir / f"{case.name}.gen.json"


def inputs_ready(gen_dir: Path, case: Case) -> bool:
    meta = gen_meta_path(gen_dir, case)
    if not meta.exists() or len(rank_files(gen_dir / case.name)) != case.ranks:
        return False
    info = json.loads(meta.read_text())
    return bool(info.get("copies") == case.copies and info.get("ranks") == case.ranks)


def generate(gen_dir: Path, case: Case, scaler: Path, source: Path, python: str) -> None:
    """(Re)build ``gen_dir/case.name`` with scale_trace.py."""
    out = gen_dir / case.name
    if out.exists():
        shutil.rmtree(out)
    cmd = [
        python,
        str(scaler),
        str(source),
        str(out),
        "--copies",
        str(case.copies),
        "--ranks",
        str(case.ranks),
    ]
    print(f"[gen] {case.name}: {shlex.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    gen_meta_path(gen_dir, case).write_text(proc.stdout.strip().splitlines()[-1] + "\n")


# --------------------------------------------------------------------------
# measurement
# --------------------------------------------------------------------------


def parse_tagged(path: Path) -> dict[str, Any]:
    """The last ``BENCH_RESULT {json}`` line a command printed, or {}."""
    if not path.exists():
        return {}
    for line in reversed(path.read_text(errors="replace").splitlines()):
        if line.startswith(RESULT_TAG):
            parsed: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
            return parsed
    return {}


def tail(path: Path, n: int = 15) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def measure(tool: str, cmd: list[str], log_stem: Path, timeout: float | None) -> Run:
    """Run ``cmd`` under bench/measure.py; never raises on command failure."""
    out, err = log_stem.with_suffix(".stdout"), log_stem.with_suffix(".stderr")
    wrapper = [
        sys.executable,
        str(BENCH_DIR / "measure.py"),
        "--stdout",
        str(out),
        "--stderr",
        str(err),
    ]
    if timeout is not None:
        wrapper += ["--timeout", str(timeout)]
    proc = subprocess.run([*wrapper, "--", *cmd], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        return Run(tool, cmd, ok=False, error=f"measure.py failed: {proc.stderr.strip()}")
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    if rec.get("error"):
        return Run(tool, cmd, ok=False, error=rec["error"])
    peaks = [v for v in (rec["maxrss_bytes"], rec["tree_rss_peak_bytes"]) if v]
    run = Run(
        tool,
        cmd,
        ok=rec["returncode"] == 0 and not rec["timed_out"],
        wall_s=rec["wall_s"],
        cpu_s=rec["cpu_s"],
        other_cpu_s=rec["other_cpu_s"],
        peak_rss_bytes=max(peaks, default=None),
        maxrss_bytes=rec["maxrss_bytes"],
        tree_rss_peak_bytes=rec["tree_rss_peak_bytes"],
        detail={**parse_tagged(out), "stderr_log": str(err)},
    )
    if not run.ok:
        why = "timed out" if rec["timed_out"] else f"exit code {rec['returncode']}"
        run.error = f"{why}; stderr tail ({err}):\n{tail(err)}"
    return run


def best_of(runs: list[Run]) -> Run:
    """Fastest successful run, carrying the highest peak RSS seen."""
    ok = [r for r in runs if r.ok]
    if not ok:
        return runs[-1]
    best = min(ok, key=lambda r: r.wall_s or float("inf"))
    best.peak_rss_bytes = max(r.peak_rss_bytes or 0 for r in ok) or None
    if len(runs) > 1:
        best.detail["repeats"] = [
            {"wall_s": r.wall_s, "cpu_s": r.cpu_s, "other_cores": other_cores(r)} for r in runs
        ]
    return best


def other_cores(run: Run) -> float | None:
    """Average cores used by other work on the machine during ``run``."""
    if run.wall_s and run.other_cpu_s is not None:
        return run.other_cpu_s / run.wall_s
    return None


def wait_idle(max_wait_s: float, threshold_cores: float = 0.25) -> None:
    """Wait (up to ``max_wait_s``) until the machine is idle for 2 s."""
    deadline = time.monotonic() + max_wait_s
    while time.monotonic() < deadline:
        b0 = system_busy_s()
        time.sleep(2.0)
        busy = (system_busy_s() - b0) / 2.0
        if busy < threshold_cores:
            return
        print(f"  waiting for idle machine ({busy:.2f} cores busy)", flush=True)
        time.sleep(8.0)


HTA_SNIPPET = """\
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
rows = {int(r): int(len(df)) for r, df in a.t.traces.items()}
print(TAG + json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "rows": rows}))
""".replace("TAG", repr(RESULT_TAG))


def hta_cmd(hta_python: str, trace_dir: Path) -> list[str]:
    return [hta_python, "-c", HTA_SNIPPET, str(trace_dir)]


def traceatlas_cmd(base: list[str], trace_dir: Path, store: Path) -> list[str]:
    return [*base, "ingest", str(trace_dir), "-o", str(store)]


def raw_decode_cmd(files: list[Path]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--raw-decode-worker", *map(str, files)]


def display(cmd: list[str]) -> str:
    """Shell form of ``cmd`` for logs, with inline ``-c`` programs elided."""
    return shlex.join("<program>" if "\n" in arg else arg for arg in cmd)


def raw_decode_worker(files: list[str]) -> None:
    """Time file read + untyped msgspec decode of each file (sequentially).

    The cyclic GC is disabled during decode (as a tuned loader would do): with
    it on, untyped decode of ~1M events spends about 40% of its time in GC.
    """
    import gc

    import msgspec

    read_s = decode_s = 0.0
    events = 0
    for name in files:
        t0 = time.perf_counter()
        data = Path(name).read_bytes()
        t1 = time.perf_counter()
        gc.disable()
        obj = msgspec.json.decode(data)
        t2 = time.perf_counter()
        gc.enable()
        read_s, decode_s = read_s + (t1 - t0), decode_s + (t2 - t1)
        events += len(obj.get("traceEvents", ()))
        del obj, data
    print(
        RESULT_TAG
        + json.dumps(
            {
                "read_s": read_s,
                "decode_s": decode_s,
                "events": events,
                "msgspec": msgspec.__version__,
            }
        )
    )


def path_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def hta_fits(case: Case, per_rank_bytes: int) -> tuple[bool, str]:
    """Rough check that HTA's worker pool + gathered frames fit in RAM."""
    workers = min(case.ranks, os.cpu_count() or 1)
    # workers parse concurrently; the parent then holds every rank's frame.
    need = HTA_RSS_FACTOR * per_rank_bytes * workers + 1.5 * per_rank_bytes * case.ranks
    avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    msg = f"HTA pre-flight: ~{need / 1e9:.1f} GB estimated, {avail / 1e9:.1f} GB available"
    return need < 0.85 * avail, msg


# --------------------------------------------------------------------------
# per-case driver
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    gen_dir: Path
    hta_python: str
    traceatlas_cmd: list[str]
    skip_hta: bool
    skip_traceatlas: bool
    skip_raw: bool
    repeat: int
    timeout: float | None
    wait_idle: float


def run_case(case: Case, opt: Options) -> CaseResult:
    trace_dir = opt.gen_dir / case.name
    files = rank_files(trace_dir)
    res = CaseResult(case.name, str(trace_dir), len(files), sum(f.stat().st_size for f in files))
    logs = opt.gen_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # Raw decode first: it also warms the page cache for the tools after it.
    if not opt.skip_raw:
        res.runs["raw"] = repeat(opt, "raw", raw_decode_cmd(files), logs / f"{case.name}-raw")
    if not opt.skip_hta:
        fits, msg = hta_fits(case, res.input_bytes // max(len(files), 1))
        print(f"[{case.name}] {msg}", flush=True)
        if fits:
            res.runs["hta"] = repeat(
                opt, "hta", hta_cmd(opt.hta_python, trace_dir), logs / f"{case.name}-hta"
            )
        else:
            res.notes.append(f"HTA skipped, would not fit ({msg}); try --case 8x100mb")
    if not opt.skip_traceatlas:
        store = opt.gen_dir / "stores" / f"{case.name}.tastore"
        res.runs["traceatlas"] = repeat(
            opt,
            "traceatlas",
            traceatlas_cmd(opt.traceatlas_cmd, trace_dir, store),
            logs / f"{case.name}-traceatlas",
            cleanup=store,
        )
        if res.runs["traceatlas"].ok and store.exists():
            res.runs["traceatlas"].detail["store_bytes"] = path_bytes(store)
    return res


def repeat(
    opt: Options, tool: str, cmd: list[str], log_stem: Path, cleanup: Path | None = None
) -> Run:
    runs: list[Run] = []
    for i in range(opt.repeat):
        if cleanup is not None and cleanup.exists():
            shutil.rmtree(cleanup) if cleanup.is_dir() else cleanup.unlink()
        if opt.wait_idle:
            wait_idle(opt.wait_idle)
        print(f"[{log_stem.name}] run {i + 1}/{opt.repeat}: {display(cmd)}", flush=True)
        run = measure(tool, cmd, log_stem.with_name(f"{log_stem.name}-r{i + 1}"), opt.timeout)
        status = (
            f"{run.wall_s:.1f}s wall, {fmt(run.cpu_s)}s CPU, peak {gb(run.peak_rss_bytes)} GB, "
            f"other load {fmt(other_cores(run), '.2f')} cores"
            if run.ok
            else "FAILED"
        )
        print(f"[{log_stem.name}]   -> {status}", flush=True)
        if run.error:
            print(f"[{log_stem.name}]   {run.error}", file=sys.stderr, flush=True)
        runs.append(run)
        if not run.ok:
            break
    return best_of(runs)


# --------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------


def gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f}"


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def times(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec) + "x"


def wall(run: Run | None) -> float | None:
    return None if run is None else run.wall_s


def peak(run: Run | None) -> float | None:
    return None if run is None or run.peak_rss_bytes is None else float(run.peak_rss_bytes)


def tool_cells(run: Run | None, input_bytes: int) -> list[str]:
    if run is None:
        return ["n/a"] * 3
    if not run.ok:
        return ["FAILED", "-", "-"]
    mbps = input_bytes / 1e6 / run.wall_s if run.wall_s else None
    rss = f"{gb(run.peak_rss_bytes)} ({times(ratio(peak(run), input_bytes))})"
    return [fmt(run.wall_s, ".2f"), fmt(mbps), rss]


def ok_run(res: CaseResult, tool: str) -> Run | None:
    run = res.runs.get(tool)
    return run if run is not None and run.ok else None


def table(results: list[CaseResult]) -> str:
    head = [
        "case",
        "input MB",
        "HTA s",
        "HTA MB/s",
        "HTA peak RSS GB (x input)",
        "traceatlas s",
        "traceatlas MB/s",
        "traceatlas peak RSS GB (x input)",
        "speed ratio HTA/ta",
        "memory ratio HTA/ta",
        "raw read+decode s",
        "ta / raw decode",
        "HTA CPU s",
        "traceatlas CPU s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        hta, ta, raw = ok_run(r, "hta"), ok_run(r, "traceatlas"), ok_run(r, "raw")
        raw_s = raw.detail["read_s"] + raw.detail["decode_s"] if raw and raw.detail else None
        cells = [
            r.case,
            f"{r.input_bytes / 1e6:.0f}",
            *tool_cells(r.runs.get("hta"), r.input_bytes),
            *tool_cells(r.runs.get("traceatlas"), r.input_bytes),
            times(ratio(wall(hta), wall(ta))),
            times(ratio(peak(hta), peak(ta))),
            fmt(raw_s, ".2f"),
            times(ratio(wall(ta), raw_s), ".2f"),
            fmt(None if hta is None else hta.cpu_s),
            fmt(None if ta is None else ta.cpu_s),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def contention_notes(res: CaseResult, threshold_cores: float = 0.25) -> list[str]:
    """Flag kept runs whose wall time overlapped other CPU work."""
    notes = []
    for tool, run in res.runs.items():
        load = other_cores(run)
        if load is not None and load > threshold_cores:
            notes.append(f"{tool}: other work used {load:.2f} cores during the kept run")
    return notes


def probe(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def environment(opt: Options) -> dict[str, Any]:
    ver = "import importlib.metadata as m; print(m.version(%r))"
    return {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "mem_total_bytes": os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "hta_version": None
        if opt.skip_hta
        else probe([opt.hta_python, "-c", ver % "HolisticTraceAnalysis"]),
        "traceatlas_version": None
        if opt.skip_traceatlas
        else probe([sys.executable, "-c", ver % "traceatlas"]),
        "argv": sys.argv,
    }


def write_json(path: Path, env: dict[str, Any], results: list[CaseResult]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"environment": env, "cases": [asdict(r) for r in results]}
    path.write_text(json.dumps(payload, indent=2) + "\n")


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def default_traceatlas_cmd() -> str:
    venv_bin = REPO_ROOT / ".venv" / "bin" / "traceatlas"
    if venv_bin.exists():
        return str(venv_bin)
    return shutil.which("traceatlas") or "traceatlas"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="traceatlas vs HTA ingest benchmark")
    ap.add_argument(
        "--case", default="all", choices=[*CASES, "all"], help="'all' = " + ", ".join(ALL_CASES)
    )
    ap.add_argument(
        "--gen-dir",
        type=Path,
        default=Path("/tmp/tabench"),
        help="where inputs, logs and stores go (keep it outside the repo)",
    )
    ap.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    ap.add_argument(
        "--traceatlas-cmd",
        default=default_traceatlas_cmd(),
        help="command prefix, shell-split (e.g. 'python -m traceatlas')",
    )
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--skip-traceatlas", action="store_true")
    ap.add_argument("--skip-raw", action="store_true", help="skip the msgspec decode ceiling")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool; best wall kept")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per run, seconds")
    ap.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="S",
        help="before each run wait up to S seconds for other CPU load to drop below 0.25 cores",
    )
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--scaler", type=Path, default=DEFAULT_SCALER)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument(
        "--gen-python", default=sys.executable, help="python for scale_trace.py (needs orjson)"
    )
    ap.add_argument("--raw-decode-worker", nargs="+", metavar="FILE", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.raw_decode_worker:
        raw_decode_worker(a.raw_decode_worker)
        return 0
    opt = Options(
        a.gen_dir.resolve(),
        a.hta_python,
        shlex.split(a.traceatlas_cmd),
        a.skip_hta,
        a.skip_traceatlas,
        a.skip_raw,
        max(a.repeat, 1),
        a.timeout or None,
        a.wait_idle,
    )
    names = ALL_CASES if a.case == "all" else (a.case,)
    results: list[CaseResult] = []
    for name in names:
        case = CASES[name]
        if not inputs_ready(opt.gen_dir, case):
            generate(opt.gen_dir, case, a.scaler, a.source, a.gen_python)
        results.append(run_case(case, opt))
    env = environment(opt)
    print()
    print(table(results))
    for r in results:
        for note in [*r.notes, *contention_notes(r)]:
            print(f"note ({r.case}): {note}")
    print(
        "\nMB = 1e6 bytes, GB = 1e9 bytes; wall time is the whole process "
        "(interpreter start + imports included); peak RSS = max(kernel ru_maxrss, "
        "sampled process-tree RSS sum)."
    )
    if a.json_out:
        write_json(a.json_out, env, results)
        print(f"wrote {a.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
