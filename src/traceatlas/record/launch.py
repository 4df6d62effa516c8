"""Start the recorded program, forward signals to it, wait for its end.

The program is started from an argument list (never a shell), in ``record``'s process
group, so a Ctrl-C typed in the terminal reaches it directly: a SIGINT or SIGHUP sent by
the terminal (``si_code`` SI_KERNEL) is not sent again; one sent with ``kill`` to record
alone, and every SIGTERM (``timeout``, Slurm, Kubernetes), is forwarded. Record keeps
waiting until the program has ended (it writes what it captured first).
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from traceatlas import signals
from traceatlas.errors import InputError

SI_KERNEL = 0x80
"""``si_code`` of a signal the kernel sent (e.g. the terminal's Ctrl-C or hangup)."""
POLL_S = 0.2


@dataclass(frozen=True)
class Outcome:
    """How the program ended: ``returncode`` as ``subprocess`` gives it (negative: killed
    by that signal) and the first signal record received while it ran."""

    returncode: int
    received: int | None = None

    @property
    def exit_code(self) -> int:
        """The program's exit status, ``128 + signal`` when a signal killed it."""
        return self.returncode if self.returncode >= 0 else 128 - self.returncode

    def describe(self) -> str:
        """``exited with code 3`` / ``was killed by SIGTERM``."""
        if self.returncode >= 0:
            return f"exited with code {self.returncode}"
        try:
            name = signal.Signals(-self.returncode).name
        except ValueError:
            name = f"signal {-self.returncode}"
        return f"was killed by {name}"


def run(command: list[str], env: dict[str, str]) -> Outcome:
    """Run ``command`` with ``env`` until it ends, forwarding signals (module text)."""
    received: int | None = None
    with signals.deferred():  # a signal during the start is handled by the loop below
        try:
            proc = subprocess.Popen(command, env=env)
        except FileNotFoundError as exc:
            raise InputError(command[0], "no such program (not found on PATH)") from exc
        except PermissionError as exc:
            raise InputError(command[0], "is not executable") from exc
        old = signal.pthread_sigmask(signal.SIG_BLOCK, signals.HANDLED)
    try:
        while proc.poll() is None:
            info = signal.sigtimedwait(signals.HANDLED, POLL_S)
            if info is None:
                continue
            received = received or info.si_signo
            if info.si_code != SI_KERNEL:
                proc.send_signal(info.si_signo)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return Outcome(proc.returncode, received)


def nsys_command(nsys: str, out: Path, command: list[str]) -> list[str]:
    """``nsys profile`` writing ``out/report.nsys-rep`` and its SQLite export
    ``out/report.sqlite`` (what traceatlas reads)."""
    return [nsys, "profile", f"--output={out / 'report'}", "--export=sqlite",
            "--force-overwrite=true", *command]
