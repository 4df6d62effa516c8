"""The regression gate: ``--fail-on`` rules and which changes break them.

Rule syntax (``parse_rule``):

- ``KIND[:NAME]:THRESHOLD`` with KIND one of ``SAMPLE_KINDS`` and THRESHOLD a signed
  percentage of the BASE median (``+5%``: NEW slower by more than 5 % is bad; ``-5%``:
  faster by more than 5 % is bad). Without NAME the rule applies to every entity of the
  kind; with NAME, to the entity of exactly that name. The threshold is the LAST
  ``:``-separated field, so NAME may contain ``:`` (``op:aten::mm:+10%``).
- ``efficiency.METRIC:THRESHOLD`` with METRIC a dotted path of the efficiency model
  (``device.load_balance``) and THRESHOLD a signed absolute change of that 0..1 value
  (``-0.05``: a drop of more than 0.05 is bad).

``evaluate``: a time change violates a rule when it is significant (its p-value, corrected
over every testable change given, below ``alpha``) AND its relative shift is past the
threshold in the bad direction (strictly). Efficiency values come from the model, one
value per run, so they have no p-value: only the threshold applies.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from traceatlas.compare.stats import Change, adjust
from traceatlas.errors import InputError

SAMPLE_KINDS = ("step", "annotation", "op", "kernel", "op_device", "annotation_device",
                "category", "rank")
"""Entities compared by their per-iteration times (``compare_samples``)."""

EFFICIENCY = "efficiency"

_OPTION = "--fail-on"
_SYNTAX = "expected KIND[:NAME]:+N% (e.g. kernel:+10%) or efficiency.METRIC:-X (e.g. -0.05)"
_PERCENT = re.compile(r"([+-])(\d+(?:\.\d*)?|\.\d+)%")
_ABSOLUTE = re.compile(r"([+-])(\d+(?:\.\d*)?|\.\d+)")
_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")

SampleEntry = tuple[str, str, Change]
"""(kind, entity name, its Change)."""
EfficiencyEntry = tuple[str, str, float | None, float | None]
"""("efficiency", metric path, BASE value, NEW value); a value is None when not computed."""


@dataclass(frozen=True)
class Rule:
    """One ``--fail-on`` rule: a change of ``direction`` sign beyond ``magnitude`` is bad.

    ``relative``: magnitude is a fraction of the BASE median (0.05 for 5 %); otherwise an
    absolute change of a 0..1 efficiency value. ``name`` None: every entity of ``kind``.
    """

    text: str
    kind: str
    name: str | None
    direction: Literal[1, -1]
    magnitude: float
    relative: bool

    def threshold_text(self) -> str:
        """The threshold as written back (``+5%``, ``-0.05``)."""
        sign = "+" if self.direction > 0 else "-"
        if self.relative:
            return f"{sign}{self.magnitude * 100:g}%"
        return f"{sign}{self.magnitude:g}"


@dataclass(frozen=True)
class Violation:
    """A change past a rule's threshold. ``observed``: the relative shift (a fraction;
    +-inf when the BASE median is 0) or the efficiency delta; ``p_adjusted`` None for
    efficiency rules; ``base_value``/``new_value`` the efficiency values (None for times)."""

    rule: Rule
    kind: str
    name: str
    observed: float
    p_adjusted: float | None
    change: Change | None
    base_value: float | None = None
    new_value: float | None = None

    def describe(self) -> str:
        """One line: the entity, the change, its adjusted p-value and the rule."""
        if self.change is None:
            return (
                f"efficiency {self.name}: {self.base_value:.3f} -> {self.new_value:.3f} "
                f"({self.observed:+.3f}) past {self.rule.threshold_text()} [{self.rule.text}]"
            )
        shown = f"{self.observed * 100:+.1f}%" if math.isfinite(self.observed) else "from 0"
        return (
            f"{self.kind} {self.name}: {shown} (adjusted p = {self.p_adjusted:.2g}) "
            f"past {self.rule.threshold_text()} [{self.rule.text}]"
        )


def _bad(text: str, problem: str) -> InputError:
    return InputError(_OPTION, f"{text!r}: {problem}")


def parse_rule(text: str) -> Rule:
    """Parse one ``--fail-on`` value (syntax in the module doc); InputError when bad."""
    rule = text.strip()
    head, sep, threshold = rule.rpartition(":")
    if not sep or not head:
        raise _bad(text, _SYNTAX)
    if head.startswith(EFFICIENCY + ".") or head == EFFICIENCY:
        metric = head[len(EFFICIENCY) + 1 :]
        if not _METRIC.fullmatch(metric):
            raise _bad(
                text, "efficiency rules name a metric path, e.g. efficiency.device.load_balance"
            )
        if threshold.endswith("%"):
            raise _bad(
                text, "efficiency thresholds are absolute changes of a 0..1 value, e.g. -0.05"
            )
        direction, magnitude = _threshold(text, threshold, _ABSOLUTE, "-0.05")
        if magnitude > 1.0:
            raise _bad(text, "an efficiency value lies in 0..1, so a change beyond 1 never happens")
        return Rule(rule, EFFICIENCY, metric, direction, magnitude, relative=False)
    kind, has_name, name = head.partition(":")
    if kind not in SAMPLE_KINDS:
        kinds = ", ".join(SAMPLE_KINDS)
        raise _bad(text, f"unknown kind {kind!r}: use one of {kinds} or efficiency.METRIC")
    if has_name and not name:
        raise _bad(text, "empty NAME between ':'; leave it out to match every " + kind)
    if not threshold.endswith("%"):
        raise _bad(text, "time thresholds are percentages of the BASE median, e.g. +5%")
    direction, magnitude = _threshold(text, threshold, _PERCENT, "+5%")
    return Rule(rule, kind, name or None, direction, magnitude / 100.0, relative=True)


def _threshold(
    text: str, field: str, pattern: re.Pattern[str], example: str
) -> tuple[Literal[1, -1], float]:
    match = pattern.fullmatch(field)
    if match is None:
        raise _bad(text, f"bad threshold {field!r}: a sign and a number, e.g. {example}")
    value = float(match.group(2))
    if not math.isfinite(value):
        raise _bad(text, f"threshold {field!r} is too large")
    return (1 if match.group(1) == "+" else -1), value


def _past(rule: Rule, observed: float) -> bool:
    return rule.direction * observed > rule.magnitude


def evaluate(
    rules: Sequence[Rule],
    changes: Sequence[SampleEntry | EfficiencyEntry],
    *,
    alpha: float = 0.05,
    method: Literal["holm", "bh"] = "holm",
) -> list[Violation]:
    """The violations, rule by rule in the given order, entities in the order of ``changes``.

    The p-values of every testable time change in ``changes`` form one family, corrected
    with ``method`` (Holm: family-wise error rate). A time change whose BASE median is 0
    has no relative change: a positive shift counts as past every ``+`` threshold and a
    negative one past every ``-`` threshold.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    p_raw = [e[2].p_value if len(e) == 3 else None for e in changes]
    p_adj = adjust(p_raw, method)
    found: list[Violation] = []
    for rule in rules:
        for entry, p in zip(changes, p_adj, strict=True):
            if entry[0] != rule.kind or (rule.name is not None and entry[1] != rule.name):
                continue
            if len(entry) == 3:
                change = entry[2]
                if p is None or p >= alpha:
                    continue
                observed = _relative(change)
                if observed is not None and _past(rule, observed):
                    found.append(Violation(rule, entry[0], entry[1], observed, p, change))
            else:
                base, new = entry[2], entry[3]
                if base is None or new is None:
                    continue
                if _past(rule, new - base):
                    found.append(
                        Violation(rule, entry[0], entry[1], new - base, None, None, base, new)
                    )
    return found


def _relative(change: Change) -> float | None:
    if change.rel_change is not None:
        return change.rel_change
    if change.abs_change_ns == 0.0:
        return None
    return math.copysign(math.inf, change.abs_change_ns)


def unmatched(
    rules: Sequence[Rule], changes: Sequence[SampleEntry | EfficiencyEntry]
) -> list[Rule]:
    """Rules that name an entity (or metric) absent from ``changes``: likely a typo, or a
    kernel/annotation that neither run has; the caller should say so."""
    present = {(e[0], e[1]) for e in changes}
    kinds = {e[0] for e in changes}
    return [
        r
        for r in rules
        if (r.name is not None and (r.kind, r.name) not in present)
        or (r.name is None and r.kind not in kinds)
    ]
