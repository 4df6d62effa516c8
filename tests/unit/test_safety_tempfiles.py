"""Issue 18 section 7, unit level: owner-tagged temporary names and the sweep of a dead
process's debris; ``Interrupted`` and ``deferred``; the local engine ends its workers."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from traceatlas import signals, tempfiles
from traceatlas.engine.local import LocalEngine


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not tempfiles.pid_alive(proc.pid)
    return proc.pid


def _host() -> str:
    return tempfiles.owner_tag().split("-")[1]


def test_names_carry_the_owner(tmp_path: Path) -> None:
    tag = f"{os.getpid()}-{_host()}"
    assert tempfiles.sibling(tmp_path / "st", "tmp").name.startswith(f".st.tmp-{tag}-")
    assert tempfiles.staging_prefix("events") == f"traceatlas-events-{tag}-"
    fd, path = tempfiles.mkstemp("events", ".json")
    os.close(fd)
    try:
        assert Path(path).name.startswith(f"traceatlas-events-{tag}-")
    finally:
        os.unlink(path)


def test_sweep_siblings_removes_only_dead_owners_debris(tmp_path: Path, dead_pid: int) -> None:
    host = _host()
    other_host = "000000" if host != "000000" else "111111"
    (tmp_path / "st").mkdir()
    dead_tmp = tmp_path / f".st.tmp-{dead_pid}-{host}-0123abcd"
    dead_old = tmp_path / f".st.old-{dead_pid}-{host}-0123abcd"
    live_tmp = tmp_path / f".st.tmp-{os.getpid()}-{host}-0123abcd"
    remote = tmp_path / f".st.tmp-{dead_pid}-{other_host}-0123abcd"
    not_ours = tmp_path / ".st.tmp-notes"
    other_name = tmp_path / f".other.tmp-{dead_pid}-{host}-0123abcd"
    for d in (dead_tmp, dead_old, live_tmp, remote, not_ours, other_name):
        d.mkdir()
        (d / "f").write_text("x")
    tempfiles.sweep_siblings(tmp_path, "st")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [n.name for n in (live_tmp, remote, not_ours, other_name)] + ["st"])
    tempfiles.sweep_siblings(tmp_path)  # every name
    assert not other_name.exists() and live_tmp.exists() and remote.exists()


def test_sweep_puts_back_a_store_whose_swap_was_cut_short(tmp_path: Path,
                                                          dead_pid: int) -> None:
    """The owner died between renaming the store aside and renaming the new one in."""
    old = tmp_path / f".st.old-{dead_pid}-{_host()}-0123abcd"
    old.mkdir()
    (old / "manifest.json").write_text("{}")
    tempfiles.sweep_siblings(tmp_path, "st")
    assert (tmp_path / "st" / "manifest.json").read_text() == "{}"
    assert not old.exists()


def test_sweep_staging(tmp_path: Path, dead_pid: int) -> None:
    host = _host()
    dead_file = tmp_path / f"traceatlas-events-{dead_pid}-{host}-x1.json"
    dead_dir = tmp_path / f"traceatlas-nsys-{dead_pid}-{host}-x2"
    live = tmp_path / f"traceatlas-events-{os.getpid()}-{host}-x3.json"
    old_style = tmp_path / "traceatlas-events-abc.json"  # not ours to judge
    someone = tmp_path / f"other-events-{dead_pid}-{host}-x4.json"
    dead_file.write_text("x")
    dead_dir.mkdir()
    (dead_dir / "export.sqlite").write_text("x")
    for f in (live, old_style, someone):
        f.write_text("x")
    removed = tempfiles.sweep_staging(tmp_path)
    assert sorted(p.name for p in removed) == sorted([dead_file.name, dead_dir.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, old_style.name, someone.name])


def test_interrupted_exit_code_and_pickle() -> None:
    exc = signals.Interrupted(signal.SIGTERM)
    assert exc.exit_code == 143 and str(exc) == "SIGTERM"
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, signals.Interrupted) and back.signum == signal.SIGTERM
    assert not isinstance(exc, Exception)  # no `except Exception` swallows it


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in signals.HANDLED}
    signals.install()
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


@pytest.mark.usefixtures("handlers")
def test_a_signal_raises_interrupted() -> None:
    with pytest.raises(signals.Interrupted) as info:
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(5)  # the handler runs at once; never reached
    assert info.value.signum == signal.SIGHUP
    assert signals.received() == signal.SIGHUP


@pytest.mark.usefixtures("handlers")
def test_deferred_delivers_the_signal_after_the_block() -> None:
    steps = []
    with pytest.raises(signals.Interrupted):
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            steps.append("block finished")
        steps.append("not reached")
    assert steps == ["block finished"]


def _workers() -> list[int]:
    psutil = pytest.importorskip("psutil")
    return [c.pid for c in psutil.Process().children(recursive=True)
            if "multiprocessing-fork" in " ".join(c.cmdline())]


def test_a_failing_partition_ends_the_running_ones_at_once() -> None:
    """time.sleep(-1) fails at once; the map must not wait 60 s for the sleeping worker."""
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="non-negative"):
        LocalEngine(max_workers=2).map(time.sleep, [60, -1])
    assert time.monotonic() - t0 < 20
    assert _workers() == []


def test_an_interrupt_in_the_parent_ends_the_workers() -> None:
    def interrupt(done: int) -> None:
        raise signals.Interrupted(signal.SIGTERM)

    t0 = time.monotonic()
    with pytest.raises(signals.Interrupted):
        LocalEngine(max_workers=3).map(time.sleep, [0.01, 60, 60], interrupt)
    assert time.monotonic() - t0 < 20
    assert _workers() == []


def test_a_zombie_owner_is_dead(tmp_path: Path) -> None:
    """A worker killed with its parent is a zombie until init reaps it: its staging file
    is debris (the SIGKILL test failed in CI while init had not reaped the workers yet)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while not tempfiles._zombie(child.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert tempfiles._zombie(child.pid)  # exited, not reaped: os.kill(pid, 0) succeeds
        os.kill(child.pid, 0)
        assert not tempfiles.pid_alive(child.pid)
        owner = tempfiles.owner_tag().replace(str(os.getpid()), str(child.pid), 1)
        debris = tmp_path / f"traceatlas-events-{owner}-abc.json"
        debris.write_text("{}")
        assert tempfiles.sweep_staging(tmp_path) == [debris] and not debris.exists()
    finally:
        child.wait()
    assert tempfiles.pid_alive(os.getpid())
