"""``traceatlas record`` end to end with the PyTorch CPU build: tiny programs run through
the command, their traces read back with the standard library (gzip + json).

Skipped when torch is missing locally; FAIL in CI (``CI=true``), where ``.ci/run``
installs the ``record-test`` extra (``torch==2.13.0``).

Expected step numbers follow from ``torch.profiler.schedule(wait, warmup, active)``: the
schedule's step 0 runs from the start to the first optimizer step, so the recorded steps
are ``ProfilerStep#(wait+warmup)`` .. ``#(wait+warmup+active-1)``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "traceatlas")
PY = sys.executable

if importlib.util.find_spec("torch") is None:
    if os.environ.get("CI") == "true":
        pytest.fail("torch is not installed (CI=true: .ci/run installs .[record-test])",
                    pytrace=False)
    pytest.skip("torch is not installed (pip install -e '.[record-test]')",
                allow_module_level=True)

TRAIN = """\
import sys, time
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps, fail_after = int(sys.argv[1]), int(sys.argv[2])
for i in range(steps):
    opt.zero_grad()
    model(torch.randn(16, 8)).sum().backward()
    opt.step()
    if i + 1 == fail_after:
        raise RuntimeError("planted failure")
"""

DDP = """\
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(6):
    opt.zero_grad()
    model(torch.randn(16, 8)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
dist.destroy_process_group()
"""

NO_OPTIMIZER = """\
import time
import torch
model = torch.nn.Linear(8, 4)
t0 = time.monotonic()
with torch.no_grad():
    while time.monotonic() - t0 < 4.0:
        model(torch.randn(16, 8))
        time.sleep(0.01)
"""

FOREVER = """\
import sys, time
import torch
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
i = 0
while True:
    opt.zero_grad()
    model(torch.randn(16, 8)).sum().backward()
    opt.step()
    i += 1
    if i == 4:
        open(sys.argv[1], "w").close()
    time.sleep(0.02)
"""


def _events(path: Path) -> list[dict[str, object]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    assert isinstance(events, list)
    return events


def _steps(path: Path) -> list[str]:
    """Names of the ProfilerStep#N spans of a Kineto trace, sorted by N."""
    names = [str(e["name"]) for e in _events(path)
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    return sorted(names, key=lambda n: int(n.split("#")[1]))


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _record(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "250"}  # report lines whole
    return subprocess.run([CLI, "record", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=240)


def test_one_process_gives_one_trace_with_the_requested_steps_and_a_report(
        tmp_path: Path) -> None:
    train = _script(tmp_path, "train.py", TRAIN)
    out = tmp_path / "out"
    done = _record("--steps", "3", "-o", str(out), "--", PY, str(train), "6", "0",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.glob("*.json.gz")) == ["rank-0.json.gz"]
    # wait 1 + warmup 1 (defaults), then 3 recorded steps
    assert _steps(out / "rank-0.json.gz") == ["ProfilerStep#2", "ProfilerStep#3",
                                              "ProfilerStep#4"]
    assert "1 rank(s)" in done.stdout  # the report's heading
    assert (out / "report.html").stat().st_size > 0
    assert "recorded 1 trace(s)" in done.stderr


def test_torchrun_two_processes_give_one_trace_per_rank(tmp_path: Path) -> None:
    ddp = _script(tmp_path, "ddp.py", DDP)
    out = tmp_path / "out"
    torchrun = str(Path(PY).parent / "torchrun")
    done = _record("--steps", "3", "-o", str(out), "--", torchrun, "--nproc-per-node", "2",
                   "--master-port", str(_free_port()), str(ddp), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.glob("*.json.gz")) == ["rank-0.json.gz",
                                                             "rank-1.json.gz"]
    for rank in (0, 1):
        trace = out / f"rank-{rank}.json.gz"
        assert _steps(trace) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
        with gzip.open(trace, "rt", encoding="utf-8") as f:
            assert json.load(f)["distributedInfo"]["rank"] == rank
        names = {str(e.get("name")) for e in _events(trace)}
        assert any("all_reduce" in n for n in names)  # the gloo collective was recorded
    assert "2 rank(s)" in done.stdout  # the report read both ranks


def test_only_the_requested_ranks_are_recorded(tmp_path: Path) -> None:
    ddp = _script(tmp_path, "ddp.py", DDP)
    out = tmp_path / "out"
    done = _record("--ranks", "1", "--no-report", "-o", str(out), "--", PY, "-m",
                   "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                   str(_free_port()), str(ddp), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.glob("*.json.gz")) == ["rank-1.json.gz"]


def test_a_program_without_an_optimizer_gets_wall_clock_steps(tmp_path: Path) -> None:
    script = _script(tmp_path, "infer.py", NO_OPTIMIZER)
    out = tmp_path / "out"
    done = _record("--wait", "0", "--warmup", "1", "--steps", "2", "--fallback-s", "0.5",
                   "--no-report", "-o", str(out), "--", PY, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no optimizer step in 0.5 s" in done.stderr
    assert _steps(out / "rank-0.json.gz") == ["ProfilerStep#1", "ProfilerStep#2"]
    names = {str(e.get("name")) for e in _events(out / "rank-0.json.gz")}
    assert "aten::linear" in names  # the main thread's ops, recorded from the timer's steps


def test_a_failing_program_keeps_what_was_captured_and_its_exit_code(tmp_path: Path) -> None:
    train = _script(tmp_path, "train.py", TRAIN)
    out = tmp_path / "out"
    done = _record("--steps", "3", "-o", str(out), "--", PY, str(train), "6", "2",
                   cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # Python's code for an uncaught exception
    assert "RuntimeError: planted failure" in done.stderr
    assert "the program exited with code 1" in done.stderr
    # two optimizer steps: schedule steps 0 (wait) and 1 (warmup) ended, step 2 running
    assert _steps(out / "rank-0.json.gz") == ["ProfilerStep#2"]
    assert "kept what was captured" in done.stderr


def test_sigterm_is_forwarded_and_the_trace_written(tmp_path: Path) -> None:
    script = _script(tmp_path, "forever.py", FOREVER)
    out, ready = tmp_path / "out", tmp_path / "ready"
    proc = subprocess.Popen([CLI, "record", "--steps", "50", "-o", str(out), "--", PY,
                             str(script), str(ready)], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ready.exists(), proc.communicate()[1]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "was killed by SIGTERM" in err
    steps = _steps(out / "rank-0.json.gz")
    assert steps[0] == "ProfilerStep#2" and len(steps) >= 2  # 4 optimizer steps ran
    assert not (out / "report.html").exists()  # stopped: no report, the command is printed
    assert "traceatlas report" in err
