"""Suggested commands that run: a finding's ``traceatlas analyze ...`` command is checked
against the trace it was made from before it is shown.

A command passes when its analysis is registered, its parameters parse, the analysis'
declared requirements hold on the ranks it selects (``--ranks``), the analysis runs on
the trace (run-time requirements included; the result is the advisor's cached one, else
the run on the command's own ``--ranks``/``--step`` view, ``Context.on_view``) and
the ``--table`` it names is one of the result's extra tables. The advisor drops a
command that fails (and says why in its notes) rather than print one that exits 2.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from traceatlas.errors import TraceAtlasError

if TYPE_CHECKING:
    from traceatlas.advisor.base import Context

PARAM_FLAGS = ("-p", "--param")
VALUE_FLAGS = ("--ranks", "--table", "--format", "-f", "--step", *PARAM_FLAGS)


def why_not(ctx: Context, command: str) -> str | None:
    """None when ``command`` runs on ``ctx.trace``; else the reason it would fail."""
    from traceatlas.analysis import registry
    from traceatlas.analysis.requirements import REQUIREMENTS

    try:
        args = shlex.split(command)
    except ValueError as exc:
        return f"unparsable command ({exc})"
    if args[:2] != ["traceatlas", "analyze"] or len(args) < 4:
        return "not a traceatlas analyze command"
    name, options = args[2], args[4:]
    if name not in registry.ANALYSES:
        return f"no analysis named {name}"
    values: dict[str, str] = {}
    params: dict[str, str] = {}
    i = 0
    while i < len(options):
        flag = options[i]
        if flag not in VALUE_FLAGS or i + 1 >= len(options):
            return f"unknown option {flag}"
        if flag in PARAM_FLAGS:
            key, sep, value = options[i + 1].partition("=")
            if not sep:
                return f"parameter {options[i + 1]!r} is not key=value"
            params[key] = value
        else:
            values[flag] = options[i + 1]
        i += 2
    spec = registry.get_analysis(name)
    try:
        registry.parse_params(spec, params)
        view = ctx.trace.select(ranks=values["--ranks"]) if "--ranks" in values else ctx.trace
        if "--step" in values:  # the step must exist; the analysis then runs on it
            view = view.select(step=int(values["--step"]))
    except (TraceAtlasError, ValueError) as exc:
        return str(exc)
    missing = [r for r in spec.requires if not REQUIREMENTS[r].check(view)]
    if missing:
        return f"{name} needs {', '.join(REQUIREMENTS[r].description for r in missing)}"
    try:  # the cached whole-trace result when there is one, else the command's own view
        result = (ctx.result(name, **params) if "--step" not in values and (
            "--ranks" not in values or ctx.cached(name, **params))
            else ctx.on_view(view, name, **params))
    except TraceAtlasError as exc:
        return str(exc)
    if result is None:
        return f"{name} cannot run on this trace"
    table = values.get("--table")
    if table is not None and table not in result.extra:
        return f"{name} has no table {table}"
    return None


def first_runnable(ctx: Context, analyses: tuple[str, ...]) -> str:
    """``ctx.command(a)`` for the first analysis ``a`` whose plain command runs, else ""."""
    for analysis in analyses:
        command = ctx.command(analysis)
        if why_not(ctx, command) is None:
            return command
    return ""


def view_why_not(ctx: Context, command: str) -> str | None:
    """None when the ``traceatlas view PATH --window @A:@B [--ranks R]`` command parses
    with the view CLI's parsers (``parse_window``, ``parse_rank_spans``), its window lies
    within the trace's span and its ranks are the trace's; else the reason. Starts no
    server."""
    from traceatlas.ops.select import parse_rank_spans, parse_window

    try:
        args = shlex.split(command)
    except ValueError as exc:
        return f"unparsable command ({exc})"
    if args[:2] != ["traceatlas", "view"] or len(args) < 3 or len(args) % 2 == 0:
        return "not a traceatlas view PATH [--window W] [--ranks R] command"
    options = dict(zip(args[3::2], args[4::2], strict=True))
    if set(options) - {"--window", "--ranks"} or len(options) != len(args[3:]) // 2:
        return f"unexpected options {' '.join(args[3:])}"
    try:
        window = parse_window(options["--window"]) if "--window" in options else None
        spans = parse_rank_spans(options["--ranks"]) if "--ranks" in options else ()
    except TraceAtlasError as exc:
        return str(exc)
    lo, hi = ctx.window
    if window is not None and not (window.start_absolute and window.end_absolute
                                   and window.start is not None and window.end is not None
                                   and lo <= window.start < window.end <= hi):
        return f"window {options['--window']} is not absolute and inside the trace {lo}:{hi}"
    ranks = ctx.trace.ranks
    missing = [f"{a}-{b}" for a, b in spans
               if sum(a <= r <= b for r in ranks) != b - a + 1]
    if missing:
        return f"no rank(s) {', '.join(missing)} in the trace"
    return None
