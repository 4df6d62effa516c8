"""``traceatlas record``: run a program under the PyTorch profiler (or ``nsys``) with no
change to its code, one trace per rank into a directory, then ``report`` on it.

Registered on the ``app`` of ``traceatlas.cli.main`` when that module is imported.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from traceatlas.cli import output
from traceatlas.cli.options import _guard, app
from traceatlas.errors import InputError

if TYPE_CHECKING:
    from traceatlas.record.launch import Outcome


@app.command("record", context_settings={"allow_interspersed_args": False})
@_guard
def record_command(
    command: Annotated[list[str], typer.Argument(
        help="The program and its arguments, after --: python train.py ARGS, torchrun ...",
        show_default=False)],
    steps: Annotated[int, typer.Option("--steps", min=1, max=10_000,
                                       help="Steps recorded (active).")] = 3,
    wait: Annotated[int, typer.Option("--wait", min=0, max=1_000_000,
                                      help="Steps skipped first (step 0 ends at the first "
                                      "optimizer step).")] = 1,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=10_000,
                                        help="Steps profiled, not kept, before.")] = 1,
    ranks: Annotated[str, typer.Option("--ranks", help="Ranks to record: all, or e.g. "
                                       "0,3 or 0-7.")] = "all",
    with_stack: Annotated[bool, typer.Option("--with-stack",
                                             help="Record Python call stacks.")] = False,
    shapes: Annotated[bool, typer.Option("--shapes", help="Record input shapes.")] = False,
    memory: Annotated[bool, typer.Option("--memory", help="Record tensor memory "
                                         "allocations.")] = False,
    fallback_s: Annotated[float, typer.Option(
        "--fallback-s", min=0.01, max=86_400.0,
        help="With no optimizer step this many seconds after torch is imported, each step "
        "is this many seconds of wall-clock time.")] = 10.0,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Directory for the traces (default: record-<date>-<time>); a "
        "previous record output is replaced, any other non-empty directory refused.",
        show_default=False)] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not run report "
                                            "on the traces.")] = False,
    nsys: Annotated[bool, typer.Option("--nsys", help="Run nsys profile (Nsight Systems) "
                                       "with a SQLite export instead of torch.profiler.")] = False,
) -> None:
    """Record a program's run with no code change: torch.profiler in every rank, or nsys."""
    from traceatlas.record import launch, options, outdir
    from traceatlas.tempfiles import temporary_directory

    try:
        wanted = options.parse_ranks(ranks)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--ranks") from None
    if not command:
        raise typer.BadParameter("give the program to run after --, e.g. "
                                 "traceatlas record -- python train.py", param_hint="COMMAND")
    nsys_path = shutil.which("nsys") if nsys else None
    if nsys and nsys_path is None:
        raise InputError("nsys", "Nsight Systems' nsys is not on PATH; install it or add its "
                         "directory to PATH, or record with torch.profiler (without --nsys)")
    if shutil.which(command[0]) is None:
        raise InputError(command[0], "no such program (not found on PATH)")
    target = out if out is not None else Path(time.strftime("record-%Y%m%d-%H%M%S"))
    outdir.prepare(target)
    opts = options.RecordOptions(steps=steps, wait=wait, warmup=warmup, ranks=wanted,
                                 with_stack=with_stack, shapes=shapes, memory=memory,
                                 fallback_s=fallback_s)
    info: dict[str, object] = {"command": command, "nsys": nsys, "status": "running",
                               "options": vars(opts) | {"ranks": wanted}}
    outdir.write_marker(target, info)
    if nsys_path is not None:
        child = launch.nsys_command(nsys_path, target, command)
        output.note(f"running {shlex.join(child)}")
        outcome = launch.run(child, dict(os.environ))
    else:
        with temporary_directory("record") as hook_dir:
            options.write_hook(Path(hook_dir))
            env = options.hook_environment(dict(os.environ), Path(hook_dir), target, opts)
            outcome = launch.run(command, env)
    outdir.tidy(target)
    found = _captured(target, nsys)
    outdir.write_marker(target, {**info, "status": "done", "exit_code": outcome.exit_code,
                                 "files": [p.name for p in found]})
    _summarise(target, found, outcome, command)
    if found and not no_report and outcome.received is None:
        from traceatlas.cli.report import _report

        _report([target], target / "report.html", "table", "local")
    if outcome.exit_code != 0:
        raise typer.Exit(outcome.exit_code)
    if not found:
        raise typer.Exit(1)


def _captured(target: Path, nsys: bool) -> list[Path]:
    from traceatlas.record import outdir

    if nsys:
        return [p for p in (target / "report.sqlite",) if p.is_file()]
    return outdir.traces(target)


def _summarise(target: Path, found: list[Path], outcome: Outcome, command: list[str]) -> None:
    """What was captured, and how the program ended when it did not succeed."""
    names = ", ".join(p.name for p in found)
    if found:
        output.say(f"recorded {len(found)} trace(s) in {target}: {names}")
    else:
        output.error(f"{target}: nothing recorded (see the lines above: the program ended "
                     "before the recorded steps, never imported torch, or skipped "
                     "sitecustomize: python -S/-I/-E)")
    if outcome.exit_code != 0:
        output.error(f"the program {outcome.describe()}: {shlex.join(command)}"
                     + (f"; kept what was captured in {target}" if found else ""))
    if found and outcome.received is not None:
        output.note(f"stopped by a signal; report later with: "
                    f"{shlex.join(['traceatlas', 'report', str(target)])}")
