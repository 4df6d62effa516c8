"""A signal landing while DuckDB's extension initialises neither aborts nor half-imports.

nanobind (DuckDB's binding library) calls ``abort()`` when a Python exception is raised
inside its enum set-up, which calls into Python's ``enum`` module. The child processes
below send themselves SIGTERM from a profile hook at exactly such a call (an ``enum``
function called straight from the import machinery, i.e. from C), so the test does not
depend on timing. Without the shield the child dies by SIGABRT (exit 134) with
"Critical nanobind error" on stderr.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_KILL_INSIDE_THE_EXTENSION = textwrap.dedent("""
    import os, signal, sys
    from traceatlas import signals
    SETUP
    import polars, pyarrow  # noqa: F401  (already imported by the CLI before any reader)
    assert "duckdb" not in sys.modules and "_duckdb" not in sys.modules
    calls = 0
    def hook(frame, event, arg):
        global calls
        caller = frame.f_back
        if (event == "call" and frame.f_code.co_filename.endswith("enum.py")
                and caller is not None and caller.f_code.co_filename.startswith("<frozen")):
            calls += 1
            if calls == NTH:
                sys.setprofile(None)
                os.kill(os.getpid(), signal.SIGTERM)
    def load(_):
        sys.setprofile(hook)
        try:
            import duckdb  # noqa: F401
        finally:
            sys.setprofile(None)
    RUN
""")

_MAIN = ("signals.install()", textwrap.dedent("""
    try:
        load(None)
        print("not interrupted")
    except signals.Interrupted as exc:
        assert calls == NTH, calls  # the signal was sent inside the extension's set-up
        import duckdb
        print("interrupted", exc.signum, duckdb.sql("select 6 * 7").fetchall()[0][0])
"""))
_WORKER = ("signals.init_worker(os.getppid())", "signals.run_job(load, None)")


def _run(setup: str, run: str, nth: int) -> subprocess.CompletedProcess[str]:
    code = (_KILL_INSIDE_THE_EXTENSION.replace("SETUP", setup).replace("RUN", run)
            .replace("NTH", str(nth)))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("nth", [1, 20])
def test_a_signal_inside_duckdbs_import_is_delivered_after_it(nth: int) -> None:
    done = _run(*_MAIN, nth)
    assert done.returncode == 0, done.stderr
    assert "nanobind" not in done.stderr
    # Interrupted reached the caller once the import was done, and DuckDB works.
    assert done.stdout.split() == ["interrupted", "15", "42"], done.stdout


def test_a_worker_stopped_inside_duckdbs_import_exits_143_silently() -> None:
    done = _run(*_WORKER, 1)
    assert (done.returncode, done.stderr) == (143, "")


def test_without_the_shield_the_same_signal_aborts() -> None:
    """The hook really lands inside nanobind's set-up: the unshielded handler aborts."""
    done = _run("signal.signal(signal.SIGTERM, signals._raise)", _MAIN[1], 1)
    assert done.returncode == -6 or done.returncode == 134, (done.returncode, done.stderr)
    assert "Critical nanobind error" in done.stderr
