"""Selections of trace data: the text parsers behind ``traceatlas filter`` and ``Selection``.

Text syntax (all times are integer ns once parsed):

- durations: ``5ms``, ``250us``, ``1.5s``, ``100ns``; units ns, us, ms, s; a bare
  number is ns (``--min-dur``).
- ranks: ``0,3-5`` -> inclusive spans ((0, 0), (3, 5)) (``--ranks``), never enumerated:
  a selection keeps the ranks of the trace inside the spans (``0-999999999`` costs what
  ``0-1`` costs). No rank of the trace selected: InputError ("rank 99 is not in this store
  (ranks 0-1)"); some requested ranks absent: a DataQualityWarning names them and the
  present ones are kept.
- every time is an int64 ns (a duration or window side past about 292 years is refused);
  ``min_dur_ns`` is >= 0.
- windows: ``START:END``, either side may be empty (open). A side is a duration
  relative to the trace start (the earliest interval start, instant or counter sample of
  the store, over all ranks), or absolute epoch ns when prefixed with ``@``
  (``@1700000000000000000:@1700000000500000000``). Both ends are inclusive.

Semantics of ``Selection.apply`` (a row is kept when it matches every condition given):

- intervals: rank in ``ranks``; canonical category in ``categories``; ``name_regex``
  found in the name (search, Rust regex syntax, case-sensitive unless ``(?i)``);
  ``dur_ns >= min_dur_ns``; the interval OVERLAPS the window (``start_ns <= end`` and
  ``end_ns >= start``); times are kept whole, unless the selection has ``clip`` (the
  analyses' ``--window``: ``Trace.select(..., clip=True)``): then ``start_ns``/``end_ns``
  are cut to the window and ``dur_ns`` is the time inside it, so a window's analysis
  counts only what happened in the window (Paraver's profile of a selection); for
  ``step`` N: the interval overlaps its rank's step-N span, taken half-open
  ``[first start, last end)`` of that rank's ``step`` intervals with ``step == N`` (it
  starts inside, or starts before and ends after the span start), or its ``step`` column
  is N (device work launched in the step). Without any ``step`` interval, the span is
  iteration N (0-based) of the ``phases`` analysis (``[start, end)`` of that rank's
  detected loop iteration).
- instants: rank, window and step span (``span start <= ts < span end``), category and
  name as for intervals; with ``min_dur_ns`` > 0 they are dropped (zero duration).
- counters: rank, window and step span; ``name_regex`` on the series name; their category
  is ``counter`` (pseudo-category: ``--category counter`` keeps them, any other category
  list drops them); dropped with ``min_dur_ns`` > 0.
- messages: either side (``src_rank`` or ``dst_rank``) in ``ranks``, and the message's
  span (earliest to latest of its send/recv times) overlaps the window; their category is
  ``message`` (pseudo-category, as for counters); name and duration do not apply.
- flows: by rank, window and step span only: a flow is kept when its rank is kept and
  the span of its two ends overlaps the window (its ends may point at intervals another
  condition removed).
- tracks and metadata: every row of the kept ranks.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from traceatlas.errors import DataQualityWarning, InputError
from traceatlas.model.vocab import CATEGORIES

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

UNITS_NS: Mapping[str, int] = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
"""Duration unit -> ns."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s)?\s*$")
_RANK_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
_ABSOLUTE = re.compile(r"^\s*@\s*(-?\d+)\s*$")
DURATION_HELP = "units ns, us, ms, s; a bare number is ns (e.g. 5ms, 250us, 1.5s)"
INT64_MAX = 2**63 - 1
"""Largest time in ns (about 292 years): every time column is int64."""
MAX_RANKS_LISTED = 1_000_000
"""``parse_ranks`` enumerates at most this many ranks (selections use spans instead)."""


def _shown(text: str, limit: int = 40) -> str:
    """``repr`` of user text, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_duration(text: str, what: str = "duration") -> int:
    """``"5ms"`` -> 5_000_000 ns. Exact decimal arithmetic; the result is rounded to 1 ns
    and at most ``INT64_MAX`` ns."""
    match = _DURATION.match(text)
    if match is None:
        raise InputError(what, f"bad duration {_shown(text)} ({DURATION_HELP})")
    try:
        value = Decimal(match.group(1)) * UNITS_NS[match.group(2) or "ns"]
    except InvalidOperation as exc:  # pragma: no cover - the regex admits valid numbers only
        raise InputError(what, f"bad duration {_shown(text)} ({DURATION_HELP})") from exc
    if value > INT64_MAX:
        raise InputError(what, f"duration {_shown(text)} is too long (at most {INT64_MAX} ns, "
                         "about 292 years)")
    return int(value.to_integral_value())


RankSpans = tuple[tuple[int, int], ...]
"""Inclusive (first, last) rank spans, sorted, disjoint and not adjacent."""


def parse_rank_spans(text: str, what: str = "--ranks") -> RankSpans:
    """``"0,3-5"`` -> ((0, 0), (3, 5)); ``"5-5, 2 ,1-2"`` -> ((1, 2), (5, 5)). Comma-separated
    ranks and inclusive ranges, merged; the ranks themselves are never enumerated."""
    spans: list[tuple[int, int]] = []
    for item in text.split(","):
        match = _RANK_ITEM.match(item)
        if match is None:
            raise InputError(what, f"bad rank list {_shown(text)} (use e.g. 0,3-5)")
        lo = int(match.group(1))
        hi = int(match.group(2)) if match.group(2) is not None else lo
        if hi < lo:
            raise InputError(what, f"bad rank range {_shown(item.strip())} in {_shown(text)} "
                             "(end < start)")
        spans.append((lo, hi))
    return merge_spans(spans)


def merge_spans(spans: Iterable[tuple[int, int]]) -> RankSpans:
    """Inclusive spans sorted and merged (overlapping or adjacent spans become one)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def parse_ranks(text: str, what: str = "--ranks") -> tuple[int, ...]:
    """``"0,3-5"`` -> (0, 3, 4, 5): comma-separated ranks and inclusive ranges, sorted.
    Refuses lists of more than ``MAX_RANKS_LISTED`` ranks (a selection clips spans to the
    ranks of its trace instead, see ``resolve_ranks``)."""
    spans = parse_rank_spans(text, what)
    if sum(hi - lo + 1 for lo, hi in spans) > MAX_RANKS_LISTED:
        raise InputError(what, f"rank list {_shown(text)} names more than "
                         f"{MAX_RANKS_LISTED:,} ranks")
    return tuple(r for lo, hi in spans for r in range(lo, hi + 1))


def format_ranks(ranks: Iterable[int], limit: int = 12) -> str:
    """(0, 1, 2, 5) -> ``"0-2, 5"``; after ``limit`` items ``", ..."``."""
    return format_spans(merge_spans((r, r) for r in ranks), limit)


def format_spans(spans: RankSpans, limit: int = 12) -> str:
    """((0, 2), (5, 5)) -> ``"0-2, 5"``; after ``limit`` items ``", ..."``."""
    text = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in spans[:limit]]
    return ", ".join(text) + (", ..." if len(spans) > limit else "")


def resolve_ranks(
    request: Iterable[int] | str, present: Sequence[int], *, what: str = "--ranks",
    scope: str = "store",
) -> tuple[int, ...]:
    """The ranks of ``present`` (the trace's ranks) that ``request`` names.

    ``request``: text (``"0,3-5"``, spans, never enumerated), a ``range`` (membership
    test, never enumerated) or any iterable of ints. InputError when none is present
    ("rank 99 is not in this store (ranks 0-1)"); a DataQualityWarning names the requested
    ranks that are absent when some are present.
    """
    have = sorted(set(present))
    if isinstance(request, str):
        spans = parse_rank_spans(request, what)
        kept = tuple(r for r in have if _in_spans(r, spans))
        absent, n_absent = _absent(spans, have)
    elif isinstance(request, range):
        kept = tuple(r for r in have if r in request)
        n_absent = len(request) - len(kept)
        absent = (format_ranks(r for r in request if r not in kept) if len(request) <= 1_000
                  else f"{n_absent:,} of {request!r}")
    else:
        wanted = {_rank_int(r, what) for r in request}
        kept = tuple(r for r in have if r in wanted)
        missing = wanted.difference(kept)
        absent, n_absent = format_ranks(sorted(missing)), len(missing)
    where = f"this {scope} (ranks {format_ranks(have) or 'none'})"
    if not kept:
        if n_absent == 0:
            raise InputError(what, "no rank selected")
        verb = "rank {} is" if n_absent == 1 else "ranks {} are"
        raise InputError(what, f"{verb.format(absent)} not in {where}")
    if n_absent:
        verb = "rank {} is" if n_absent == 1 else "ranks {} are"
        warnings.warn(f"{what}: {verb.format(absent)} not in {where}; selecting "
                      f"{format_ranks(kept)}", DataQualityWarning, stacklevel=3)
    return kept


def _rank_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(what, f"ranks are integers, got {value!r}")
    return value


def _in_spans(rank: int, spans: RankSpans) -> bool:
    i = bisect.bisect_right(spans, (rank, INT64_MAX * 4)) - 1
    return i >= 0 and spans[i][0] <= rank <= spans[i][1]


def _absent(spans: RankSpans, have: Sequence[int]) -> tuple[str, int]:
    """The parts of ``spans`` holding no rank of ``have`` (sorted): text and count."""
    gaps: list[tuple[int, int]] = []
    for lo, hi in spans:
        start = lo
        for r in have[bisect.bisect_left(have, lo):bisect.bisect_right(have, hi)]:
            if r > start:
                gaps.append((start, r - 1))
            start = r + 1
        if start <= hi:
            gaps.append((start, hi))
    return format_spans(tuple(gaps)), sum(hi - lo + 1 for lo, hi in gaps)


@dataclass(frozen=True)
class WindowSpec:
    """A parsed ``START:END``: each side ns (relative or absolute) or None when open."""

    start: int | None
    end: int | None
    start_absolute: bool = False
    end_absolute: bool = False

    def resolve(self, trace_start_ns: int) -> tuple[int | None, int | None]:
        """Absolute (start_ns, end_ns); relative sides are added to ``trace_start_ns``."""
        start = self.start if self.start is None or self.start_absolute else (
            trace_start_ns + self.start)
        end = self.end if self.end is None or self.end_absolute else trace_start_ns + self.end
        return start, end

    @property
    def needs_trace_start(self) -> bool:
        """True when a side is relative to the trace start."""
        return (self.start is not None and not self.start_absolute) or (
            self.end is not None and not self.end_absolute)


def parse_window(text: str, what: str = "--window") -> WindowSpec:
    """``"1.5s:2s"``, ``":2s"``, ``"@1700000000000000000:@1700000000500000000"``."""
    if text.count(":") != 1:
        raise InputError(what, f"bad window {text!r} (use START:END, e.g. 1.5s:2s, :2s, "
                         "@<epoch ns>:@<epoch ns>)")
    left, right = text.split(":")
    start, start_abs = _window_side(left, text, what)
    end, end_abs = _window_side(right, text, what)
    if start is None and end is None:
        raise InputError(what, f"bad window {text!r}: both sides are empty")
    if start is not None and end is not None and start_abs == end_abs and end < start:
        raise InputError(what, f"bad window {text!r}: end is before start")
    return WindowSpec(start, end, start_abs, end_abs)


def _window_side(side: str, text: str, what: str) -> tuple[int | None, bool]:
    if not side.strip():
        return None, False
    match = _ABSOLUTE.match(side)
    if match is not None:
        digits = match.group(1)
        if len(digits.lstrip("-")) > 19 or not -INT64_MAX - 1 <= int(digits) <= INT64_MAX:
            raise InputError(what, f"bad window {_shown(text)}: {_shown(side.strip())} is "
                             "past the int64 ns range (about 292 years from 1970)")
        return int(digits), True
    if side.strip().startswith("@"):
        raise InputError(what, f"bad window {_shown(text)}: after '@' give integer epoch ns")
    try:
        return parse_duration(side, what), False
    except InputError as exc:
        raise InputError(what, f"bad window {_shown(text)}: {exc.problem}") from None


def check_window(window: tuple[int | None, int | None], what: str = "--window"
                 ) -> tuple[int | None, int | None]:
    """An absolute (start_ns, end_ns) window: ints in the int64 range, end >= start."""
    for side in window:
        if side is not None and (isinstance(side, bool) or not isinstance(side, int)):
            raise InputError(what, f"window times are integer ns, got {side!r}")
        if side is not None and not -INT64_MAX - 1 <= side <= INT64_MAX:
            raise InputError(what, f"window time {side} is past the int64 ns range "
                             "(about 292 years from 1970)")
    start, end = window
    if start is not None and end is not None and end < start:
        raise InputError(what, f"window end {end} is before its start {start}")
    return window


PSEUDO_CATEGORIES: tuple[str, ...] = ("counter", "message")
"""Categories a selection gives the rows of ``counters`` and ``messages``."""


def parse_categories(values: Iterable[str], what: str = "--category") -> tuple[str, ...]:
    """Canonical (or pseudo-) category names from repeated and/or comma-separated values."""
    names = [v.strip() for value in values for v in value.split(",") if v.strip()]
    valid = (*CATEGORIES, *PSEUDO_CATEGORIES)
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise InputError(what, f"unknown categor{'y' if len(unknown) == 1 else 'ies'} "
                         f"{', '.join(map(repr, unknown))} (valid: {', '.join(valid)})")
    return tuple(dict.fromkeys(names))


def check_regex(pattern: str, what: str = "--name") -> str:
    """``pattern`` if Polars (Rust regex) compiles it; a clear InputError otherwise."""
    import polars as pl

    try:
        pl.select(pl.lit("").str.contains(pattern))
    except pl.exceptions.PolarsError as exc:
        first = " ".join(str(exc).split())[:200]
        raise InputError(what, f"bad regular expression {pattern!r} ({first})") from None
    return pattern


StepSpans = tuple[tuple[int, int, int], ...]
"""(rank, start_ns, end_ns) per rank holding the selected step."""


@dataclass(frozen=True)
class Selection:
    """Which rows of a trace to keep (see the module docstring for the exact rules).

    ``window`` is absolute ns ``(start_ns, end_ns)``, inclusive, a None side open.
    ``step`` needs ``step_spans``: call ``resolve(trace)`` before ``apply``.
    """

    ranks: tuple[int, ...] | None = None
    categories: tuple[str, ...] | None = None
    name_regex: str | None = None
    min_dur_ns: int | None = None
    window: tuple[int | None, int | None] | None = None
    step: int | None = None
    step_spans: StepSpans | None = None
    clip: bool = False

    def resolve(self, trace: Trace) -> Selection:
        """This selection with the per-rank spans of ``step`` looked up in ``trace``."""
        if self.step is None or self.step_spans is not None:
            return self
        return dataclasses.replace(self, step_spans=step_spans(trace, self.step))

    def apply(self, frame: pl.LazyFrame, table: str) -> pl.LazyFrame:
        """``frame`` (rows of canonical ``table``) filtered by this selection."""
        if self.step is not None and self.step_spans is None:
            raise ValueError("Selection.step needs step_spans: call resolve(trace) first")
        condition = _CONDITIONS[table](self)
        kept = frame if condition is None else frame.filter(condition)
        if self.clip and self.window is not None and table == "intervals":
            kept = _clipped(kept, *self.window)
        return kept

    def describe(self) -> dict[str, Any]:
        """The selection as JSON-ready values (recorded in a filtered store's manifest)."""
        out = dataclasses.asdict(self)
        out["step_spans"] = [list(s) for s in self.step_spans] if self.step_spans else None
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}


def selection_from(
    trace: Trace,
    *,
    ranks: Iterable[int] | str | None = None,
    step: int | None = None,
    window: tuple[int | None, int | None] | str | None = None,
    categories: Iterable[str] | str | None = None,
    name: str | None = None,
    min_dur_ns: int | None = None,
    clip: bool = False,
) -> Selection:
    """A resolved Selection from Python values or the CLI's text forms."""
    rank_tuple = None if ranks is None else resolve_ranks(
        ranks, trace.ranks, scope="selection" if trace.selections else "store")
    cats = None if categories is None else parse_categories(
        [categories] if isinstance(categories, str) else list(categories))
    win: tuple[int | None, int | None] | None
    if isinstance(window, str):
        spec = parse_window(window)
        start = trace_start_ns(trace) if spec.needs_trace_start else 0
        try:
            win = check_window(spec.resolve(start))
        except InputError as exc:
            raise InputError("--window", f"bad window {_shown(window)}: relative to the trace "
                             f"start ({start} ns), {exc.problem}") from None
    else:
        win = None if window is None else check_window(tuple(window))  # type: ignore[arg-type]
    if min_dur_ns is not None and (isinstance(min_dur_ns, bool) or not isinstance(
            min_dur_ns, int) or not 0 <= min_dur_ns <= INT64_MAX):
        raise InputError("min_dur_ns", f"a duration is an integer of 0 to {INT64_MAX} ns, "
                         f"got {min_dur_ns!r}")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise InputError("--step", f"a step is an integer, got {step!r}")
    selection = Selection(
        ranks=rank_tuple, categories=cats,
        name_regex=None if name is None else check_regex(name), min_dur_ns=min_dur_ns,
        window=win, step=step, clip=clip,
    )
    return selection.resolve(trace)


def step_spans(trace: Trace, step: int) -> StepSpans:
    """Per rank, first start to last end of the ``step`` intervals whose step is ``step``.

    A trace without any ``step`` interval falls back to the ``phases`` analysis (default
    parameters): iteration ``step`` (0-based) of each rank's detected loop.
    """
    import polars as pl

    spans = (
        trace.intervals.filter((pl.col("category") == "step")
                               & (pl.col("step") == step))
        .group_by("rank").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort("rank").collect()
    )
    if spans.height == 0:
        known = (trace.intervals.filter(pl.col("category") == "step")
                 .select(pl.col("step").unique().sort()).collect()["step"].to_list())
        if not known:
            return _phase_spans(trace, step)
        listed = ", ".join(map(str, known[:20])) or "none"
        raise InputError("--step", f"no step {step} in the trace (steps: {listed})")
    return tuple((int(r), int(s), int(e)) for r, s, e in spans.iter_rows())


def _phase_spans(trace: Trace, step: int) -> StepSpans:
    """Per rank, the span of iteration ``step`` of the detected main loop
    (``traceatlas.ops.phases``, the ``phases`` analysis' default parameters)."""
    from traceatlas.ops.phases import detect_phases, no_loop_problem

    found = detect_phases(trace)
    if not found.rows:
        problem = no_loop_problem("", -1, 3, found.candidates)
        raise InputError("--step", f"the trace has no step markers and {problem}")
    rows = sorted((r, s, e) for r, phase, s, e, _ in found.rows if phase == step)
    if not rows:
        last = max(phase for _, phase, _, _, _ in found.rows)
        raise InputError("--step", f"no step {step}: the trace has no step markers and "
                         f"the phases analysis found iterations 0-{last}")
    return tuple(rows)


def trace_start_ns(trace: Trace) -> int:
    """Earliest interval start, instant or counter sample over all ranks (ns); 0 if none."""
    import polars as pl

    lows = [
        trace.intervals.select(pl.col("start_ns").min()).collect().item(),
        trace.instants.select(pl.col("ts_ns").min()).collect().item(),
        trace.counters.select(pl.col("ts_ns").min()).collect().item(),
    ]
    found = [int(v) for v in lows if v is not None]
    return min(found) if found else 0


# -- conditions per table ----------------------------------------------------------------

Expr = Any  # a polars expression (polars is imported lazily)


def _all(parts: list[Expr]) -> Expr | None:
    if not parts:
        return None
    out = parts[0]
    for part in parts[1:]:
        out = out & part
    return out


def _rank(sel: Selection, column: str = "rank") -> list[Expr]:
    import polars as pl

    return [] if sel.ranks is None else [pl.col(column).is_in(list(sel.ranks))]


def _overlap(lo: Expr, hi: Expr, start: int | None, end: int | None) -> list[Expr]:
    """[lo, hi] overlaps [start, end] (both inclusive; None = open side)."""
    out = []
    if end is not None:
        out.append(lo <= end)
    if start is not None:
        out.append(hi >= start)
    return out


def _window(sel: Selection, lo: Expr, hi: Expr) -> list[Expr]:
    return [] if sel.window is None else _overlap(lo, hi, *sel.window)


def _clipped(frame: pl.LazyFrame, start: int | None, end: int | None) -> pl.LazyFrame:
    """Intervals cut to ``[start, end]`` (ns; a None side open): ``dur_ns`` is the time
    inside the window."""
    import polars as pl

    lo, hi = pl.col("start_ns"), pl.col("end_ns")
    if start is not None:
        lo = pl.max_horizontal(lo, pl.lit(start, dtype=pl.Int64))
        hi = pl.max_horizontal(hi, pl.lit(start, dtype=pl.Int64))
    if end is not None:
        lo = pl.min_horizontal(lo, pl.lit(end, dtype=pl.Int64))
        hi = pl.min_horizontal(hi, pl.lit(end, dtype=pl.Int64))
    return frame.with_columns(lo.alias("start_ns"), hi.alias("end_ns")).with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))


def _step_span(sel: Selection, lo: Expr, hi: Expr) -> Expr | None:
    """[lo, hi] overlaps the row's rank's step span (False for ranks without the step)."""
    import polars as pl

    if sel.step is None or sel.step_spans is None:
        return None
    starts = {r: s for r, s, _ in sel.step_spans}
    ends = {r: e for r, _, e in sel.step_spans}
    span_lo = pl.col("rank").replace_strict(starts, default=None, return_dtype=pl.Int64)
    span_hi = pl.col("rank").replace_strict(ends, default=None, return_dtype=pl.Int64)
    return ((lo < span_hi) & ((hi > span_lo) | (lo >= span_lo))).fill_null(False)


def _intervals(sel: Selection) -> Expr | None:
    import polars as pl

    parts = _rank(sel)
    if sel.categories is not None:
        parts.append(pl.col("category").is_in(list(sel.categories)))
    if sel.name_regex is not None:
        parts.append(pl.col("name").cast(pl.String).str.contains(sel.name_regex))
    if sel.min_dur_ns is not None:
        parts.append(pl.col("dur_ns") >= sel.min_dur_ns)
    lo, hi = pl.col("start_ns"), pl.col("end_ns")
    parts += _window(sel, lo, hi)
    span = _step_span(sel, lo, hi)
    if span is not None:
        parts.append(_step_bounds(sel, lo, hi))
        parts.append(span | (pl.col("step") == sel.step))
    return _all(parts)


def _step_bounds(sel: Selection, lo: Expr, hi: Expr) -> Expr:
    """A superset of the step condition that Parquet statistics can prune row groups
    with (the per-rank spans cannot be pushed into the reader): the row overlaps the
    union of the ranks' spans, or its ``step`` column is the step. Without it, a step
    view decodes every selected rank's columns whole before filtering."""
    import polars as pl

    if not sel.step_spans:  # no rank has the step's span: only its ``step`` rows
        return pl.col("step") == sel.step
    first = min(s for _, s, _ in sel.step_spans)
    last = max(e for _, _, e in sel.step_spans)
    return ((lo < last) & (hi >= first)) | (pl.col("step") == sel.step)


def _timed(pseudo: str | None) -> Callable[[Selection], Expr | None]:
    """Instants (``pseudo`` None: their own category column) or counters (``counter``)."""

    def condition(sel: Selection) -> Expr | None:
        import polars as pl

        ts = pl.col("ts_ns")
        parts = _rank(sel) + _window(sel, ts, ts)
        span = _step_span(sel, ts, ts)
        if span is not None:
            parts.append(span)
        if sel.categories is not None:
            parts.append(pl.lit(pseudo in sel.categories) if pseudo is not None else
                         pl.col("category").is_in(list(sel.categories)))
        if sel.name_regex is not None:
            parts.append(pl.col("name").cast(pl.String).str.contains(sel.name_regex)
                         .fill_null(False))
        if sel.min_dur_ns is not None and sel.min_dur_ns > 0:
            parts.append(pl.lit(False))
        return _all(parts)

    return condition


def _flows(sel: Selection) -> Expr | None:
    import polars as pl

    lo = pl.min_horizontal("src_ts_ns", "dst_ts_ns")
    hi = pl.max_horizontal("src_ts_ns", "dst_ts_ns")
    parts = _rank(sel) + _window(sel, lo, hi)
    span = _step_span(sel, lo, hi)
    return _all([*parts, span] if span is not None else parts)


def _messages(sel: Selection) -> Expr | None:
    import polars as pl

    times = ("send_start_ns", "send_end_ns", "recv_start_ns", "recv_end_ns")
    parts = []
    if sel.ranks is not None:
        parts.append(_rank(sel, "src_rank")[0] | _rank(sel, "dst_rank")[0])
    parts += _window(sel, pl.min_horizontal(*times), pl.max_horizontal(*times))
    if sel.categories is not None:
        parts.append(pl.lit("message" in sel.categories))
    return _all(parts)


def _by_rank(sel: Selection) -> Expr | None:
    return _all(_rank(sel))


_CONDITIONS: Mapping[str, Callable[[Selection], Expr | None]] = {
    "intervals": _intervals,
    "instants": _timed(None),
    "counters": _timed("counter"),
    "flows": _flows,
    "messages": _messages,
    "tracks": _by_rank,
    "metadata": _by_rank,
}
"""Canonical table -> the condition a Selection puts on its rows."""
