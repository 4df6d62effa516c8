"""``traceatlas diff BASE NEW``: what changed between two runs, and is it beyond the noise.

Both sides are baseline summaries (``traceatlas.compare.summary``; a trace or store is
summarised first, so a trace and its baseline give the same answer). Per kind (step,
annotation, op, kernel, op_device, annotation_device, category, rank), entities are
matched by their normalised key (``compare.normalize``; the step entity always matches
the step entity, whatever its key; a kind one side's summary version lacks is skipped
with a note), ranks by rank number. Each matched entity's samples are its per-iteration,
per-rank values in ns (``-1`` = that rank has no such iteration, skipped) and go through
``compare.stats.compare_samples``; p-values are corrected over every testable change
(``compare.stats.adjust``). ``rank`` entities are built here: per rank and iteration, the
sum over kernel keys of their device time (the rank's step duration when neither run has
device activity); they exist when either run has more than one rank.

Entities below ``FOLD_SHARE`` of the run time on both sides, or folded into ``other`` by
either summary, are compared together as one ``(other)`` entity per kind (summed
matrices), so a diff costs O(entities that matter). An entity present on one side only
is ``added`` / ``removed`` (with its total ns), never tested. The efficiency model is put
side by side (labelled rows only; ``delta = new - base``). Ordering: significant changes
first, then by ``|abs_change_ns| x n_new`` to 2 significant digits (the shift times NEW's
number of samples: the time the change is worth in NEW; ``worth``), then kernel,
op_device, annotation_device, op, annotation, category, rank, step. Each kernel's
launching op and annotation (the summary's ``launched_by``) are kept for the headline.
"""

from __future__ import annotations

import dataclasses
import gzip
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from traceatlas.compare.gate import (
    EfficiencyEntry,
    Rule,
    SampleEntry,
    Violation,
    evaluate,
    unmatched,
)
from traceatlas.compare.normalize import normalize
from traceatlas.compare.stats import Change, adjust, compare_samples
from traceatlas.compare.summary import FORMAT, GZIP_MAGIC, KINDS, launchers

FOLD_SHARE = 0.001
"""An entity below this share of its run's ``total_ns`` on both sides goes to ``(other)``."""
OTHER = "(other)"
KIND_ORDER: tuple[str, ...] = ("kernel", "op_device", "annotation_device", "op", "annotation",
                               "category", "rank", "step")
"""Tie order of kinds in the ranking: the most specific first."""
PEEK_BYTES = 4096

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class EntityChange:
    """One matched entity (times in ns; see ``compare.stats.Change`` for the statistics).

    ``base_count``/``new_count``: instances summed over ranks and iterations;
    ``n_base``/``n_new``: samples compared; ``p_adjusted``: the corrected p-value
    (None when not testable); ``significant``: ``p_adjusted < alpha``.
    """

    kind: str
    key: str
    base_names: list[str]
    new_names: list[str]
    base_count: int
    new_count: int
    n_base: int
    n_new: int
    base_median_ns: float
    new_median_ns: float
    abs_change_ns: float
    rel_change: float | None
    p_value: float | None
    p_adjusted: float | None
    ci_low_ns: float | None
    ci_high_ns: float | None
    ci_level: float | None
    significant: bool
    testable: bool
    change: Change = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the ``Change`` object left out)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "change"}


@dataclass(frozen=True)
class Presence:
    """An entity on one side only: its raw names and total ns over ranks and iterations."""

    kind: str
    key: str
    names: list[str]
    total_ns: int


@dataclass(frozen=True)
class EfficiencyDelta:
    """One efficiency metric side by side; ``path`` is the name ``--fail-on
    efficiency.PATH`` uses (``device.load_balance``); values 0..1, None where missing."""

    scope: str
    side: str
    metric: str
    path: str
    label: str
    level: int
    base: float | None
    new: float | None
    delta: float | None


@dataclass
class DiffResult:
    """The whole comparison; ``violations``/``rules``/``unmatched`` are set by ``gate``."""

    changes: list[EntityChange]
    added: list[Presence]
    removed: list[Presence]
    efficiency: list[EfficiencyDelta]
    notes: list[str]
    alpha: float
    correction: str
    rules: list[Rule] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    unmatched: list[Rule] = field(default_factory=list)
    launched_by: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per kernel key, who launched most of its device time (NEW's summary, else BASE's):
    ``op``, ``op_share``, ``annotation``, ``annotation_share`` (``summary.LaunchedBy``)."""

    def launcher_text(self, change: EntityChange) -> str:
        """``launched by aten::addmm in annotation fwd`` for a kernel change whose
        launch context is known, else ``""``."""
        info = self.launched_by.get(change.key) if change.kind == "kernel" else None
        if not info or not (info.get("op") or info.get("annotation")):
            return ""
        parts = []
        if info.get("op"):
            parts.append(f"launched by {info['op']}")
        if info.get("annotation"):
            parts.append(("in" if parts else "launched in") + f" annotation {info['annotation']}")
        return " ".join(parts)

    @property
    def verdict(self) -> Literal["pass", "fail"]:
        """``fail`` when a rule is violated."""
        return "fail" if self.violations else "pass"

    def moved_most(self) -> EfficiencyDelta | None:
        """The efficiency factor (a child in the tree, else any labelled metric) whose
        value changed most in absolute terms; None when no metric has both values."""
        known = [e for e in self.efficiency if e.delta is not None]
        factors = [e for e in known if e.level >= 1] or known
        if not factors:
            return None
        return max(factors, key=lambda e: (abs(e.delta or 0.0), -e.level))

    def gate(self, rules: Sequence[Rule]) -> list[Violation]:
        """Evaluate ``rules`` (``compare.gate.evaluate``) on this comparison's changes and
        efficiency values; names are resolved first (a raw kernel name matches its key,
        ``efficiency.device_load_balance`` its path). Sets and returns ``violations``."""
        entries: list[SampleEntry | EfficiencyEntry] = [
            (c.kind, c.key, c.change) for c in self.changes]
        entries += [("efficiency", e.path, e.base, e.new) for e in self.efficiency]
        resolved = [self._resolve(r) for r in rules]
        self.rules = list(rules)
        missing = unmatched(resolved, entries)
        self.unmatched = [r for r, res in zip(rules, resolved, strict=True) if res in missing]
        self.violations = evaluate(resolved, entries, alpha=self.alpha,
                                   method="bh" if self.correction == "bh" else "holm")
        return self.violations

    def _resolve(self, rule: Rule) -> Rule:
        if rule.name is None:
            return rule
        if rule.kind == "efficiency":
            for e in self.efficiency:
                if rule.name in (e.path, e.metric, f"{e.side}.{e.metric}"):
                    return dataclasses.replace(rule, name=e.path)
            return rule
        keys = {c.key for c in self.changes if c.kind == rule.kind}
        if rule.name in keys:
            return rule
        for candidate in (normalize(rule.name), rule.name.removeprefix("rank ").strip()):
            if candidate in keys:
                return dataclasses.replace(rule, name=candidate)
        return rule

    def to_dict(self) -> dict[str, Any]:
        """The ``--format json`` object (see the diff contract in ``docs/definitions.md``)."""
        return {
            "verdict": self.verdict,
            "violations": [{"rule": v.rule.text, "kind": v.kind, "key": v.name,
                            "rel_change": v.observed if v.change is not None else None,
                            "delta": v.observed if v.change is None else None,
                            "p_adjusted": v.p_adjusted, "text": v.describe()}
                           for v in self.violations],
            "unmatched_rules": [r.text for r in self.unmatched],
            "changes": [c.to_dict() for c in self.changes],
            "added": [dataclasses.asdict(p) for p in self.added],
            "removed": [dataclasses.asdict(p) for p in self.removed],
            "efficiency": [dataclasses.asdict(e) for e in self.efficiency],
            "moved_most": None if (m := self.moved_most()) is None else m.metric,
            "alpha": self.alpha,
            "correction": self.correction,
            "notes": self.notes,
            "launched_by": {c.key: self.launched_by[c.key] for c in self.changes
                            if c.kind == "kernel" and c.key in self.launched_by},
        }


def is_summary_file(path: str | Path) -> bool:
    """True when ``path`` is a file whose first bytes (gunzipped if need be) name the
    summary format; ``read_summary`` then validates the whole file."""
    file = Path(path)
    if not file.is_file():
        return False
    try:
        with file.open("rb") as handle:
            head = handle.read(PEEK_BYTES)
            if head[:2] == GZIP_MAGIC:
                handle.seek(0)
                with gzip.GzipFile(fileobj=handle) as unzipped:
                    head = unzipped.read(PEEK_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    text = head.lstrip()
    return text.startswith(b"{") and f'"{FORMAT}"'.encode() in text


# --- samples -----------------------------------------------------------------------


@dataclass
class _Item:
    """One entity of one side: raw names and its ns/count matrices (-1 = absent)."""

    key: str
    names: list[str]
    ns: I64
    count: I64

    def total(self) -> int:
        return int(self.ns[self.ns > 0].sum())

    def instances(self) -> int:
        return int(self.count[self.count > 0].sum())

    def samples(self) -> I64:
        return self.ns[self.ns >= 0]


@dataclass
class _Side:
    """A summary's entities as numpy matrices, per kind; ``present`` (rank x iteration)."""

    summary: dict[str, Any]
    present: npt.NDArray[np.bool_]
    items: dict[str, dict[str, _Item]]
    other: dict[str, _Item]
    folded_keys: dict[str, set[str]]

    @classmethod
    def of(cls, summary: dict[str, Any]) -> _Side:
        shape = (len(summary["ranks"]), len(summary["iterations"]["labels"]))
        items: dict[str, dict[str, _Item]] = {}
        for kind, entities in summary["entities"].items():
            items[kind] = {e["key"]: _Item(e["key"], list(e["names"]),
                                           _matrix(e["ns"], shape), _matrix(e["count"], shape))
                           for e in entities}
        steps = list(items.get("step", {}).values())
        present = (steps[0].ns >= 0) if steps else np.ones(shape, dtype=bool)
        other = {kind: _Item(OTHER, [], _matrix(o["ns"], shape), _matrix(o["count"], shape))
                 for kind, o in summary["other"].items()}
        folded = {kind: set(o["keys"]) for kind, o in summary["other"].items()}
        return cls(summary, present, items, other, folded)

    def fold(self, kind: str, item: _Item) -> None:
        """Add ``item`` to this side's ``(other)`` of ``kind``."""
        zero = np.zeros_like(item.ns)
        mine = self.other.get(kind) or _Item(OTHER, [], np.where(self.present, zero, -1),
                                             np.where(self.present, zero, -1))
        self.other[kind] = _Item(
            OTHER, [], np.where(self.present, np.maximum(mine.ns, 0) + np.maximum(item.ns, 0), -1),
            np.where(self.present, np.maximum(mine.count, 0) + np.maximum(item.count, 0), -1))

    def share(self, item: _Item) -> float:
        total = int(self.summary["total_ns"])
        return item.total() / total if total > 0 else 1.0


def _matrix(rows: list[list[int]], shape: tuple[int, int]) -> I64:
    out = np.asarray(rows, dtype=np.int64)
    return out.reshape(shape) if out.size == shape[0] * shape[1] else np.full(shape, -1)


# --- the comparison ----------------------------------------------------------------


def diff_summaries(base: dict[str, Any], new: dict[str, Any], *, alpha: float = 0.05,
                   correction: Literal["holm", "bh"] = "holm") -> DiffResult:
    """Compare two summaries (``read_summary`` / ``summarize`` output); see the module doc."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    b, n = _Side.of(base), _Side.of(new)
    notes = _notes(base, new)
    pairs: list[tuple[str, _Item, _Item]] = []
    added: list[Presence] = []
    removed: list[Presence] = []
    folded = 0
    for kind in KINDS:
        if (kind in base["entities"]) != (kind in new["entities"]):
            older = "BASE" if kind not in base["entities"] else "NEW"
            notes.append(f"{older} is a summary without {kind} (an older version): {kind} "
                         "not compared")
            continue
        b_items, n_items = b.items.get(kind, {}), n.items.get(kind, {})
        if kind == "step":
            if b_items and n_items:
                pairs.append((kind, next(iter(b_items.values())),
                              next(iter(n_items.values()))))
            continue
        for key in sorted(set(b_items) | set(n_items)):
            bi, ni = b_items.get(key), n_items.get(key)
            if bi is not None and ni is not None:
                if b.share(bi) < FOLD_SHARE and n.share(ni) < FOLD_SHARE:
                    b.fold(kind, bi)
                    n.fold(kind, ni)
                    folded += 1
                else:
                    pairs.append((kind, bi, ni))
            elif bi is not None:
                if key in n.folded_keys.get(kind, set()):
                    b.fold(kind, bi)  # NEW folded it into its (other): compared there
                else:
                    removed.append(Presence(kind, key, bi.names, bi.total()))
            elif ni is not None:
                if key in b.folded_keys.get(kind, set()):
                    n.fold(kind, ni)
                else:
                    added.append(Presence(kind, key, ni.names, ni.total()))
        if kind in b.other and kind in n.other:
            pairs.append((kind, b.other[kind], n.other[kind]))
    if folded:
        notes.append(f"{folded} entities below {FOLD_SHARE:g} of the run time on both sides "
                     f"are compared together as {OTHER} of their kind")
    rank_pairs, rank_added, rank_removed = _rank_pairs(b, n)
    pairs += rank_pairs
    added += rank_added
    removed += rank_removed
    changes = _changes(pairs, alpha, correction)
    added.sort(key=lambda p: (-p.total_ns, p.kind, p.key))
    removed.sort(key=lambda p: (-p.total_ns, p.kind, p.key))
    launched_by = {**launchers(base), **launchers(new)}
    return DiffResult(changes, added, removed, _efficiency(base, new), notes, alpha,
                      correction, launched_by=launched_by)


def _changes(pairs: list[tuple[str, _Item, _Item]], alpha: float,
             correction: Literal["holm", "bh"]) -> list[EntityChange]:
    stats: list[tuple[str, _Item, _Item, Change]] = []
    for kind, bi, ni in pairs:
        xs, ys = bi.samples(), ni.samples()
        if xs.size == 0 or ys.size == 0:
            continue  # no iteration on one side: nothing to compare
        stats.append((kind, bi, ni, compare_samples(xs, ys)))
    p_adj = adjust([s[3].p_value for s in stats], correction)
    out = []
    for (kind, bi, ni, ch), p in zip(stats, p_adj, strict=True):
        out.append(EntityChange(
            kind=kind, key=bi.key if kind != "step" else ni.key, base_names=bi.names,
            new_names=ni.names, base_count=bi.instances(), new_count=ni.instances(),
            n_base=ch.n_base, n_new=ch.n_new, base_median_ns=ch.base_median_ns,
            new_median_ns=ch.new_median_ns, abs_change_ns=ch.abs_change_ns,
            rel_change=ch.rel_change, p_value=ch.p_value, p_adjusted=p,
            ci_low_ns=ch.ci_low_ns, ci_high_ns=ch.ci_high_ns, ci_level=ch.ci_level,
            significant=p is not None and p < alpha, testable=ch.testable, change=ch))
    out.sort(key=lambda c: (not c.significant, -worth(c), KIND_ORDER.index(c.kind), c.key))
    return out


def worth(change: EntityChange) -> float:
    """``|abs_change_ns| x n_new`` to 2 significant digits: the ranking's time the change
    is worth. A stretched kernel is seen through the kernel, its launching op and its
    annotations with shifts that differ by a few ns of noise; at 2 digits they tie and the
    most specific kind (``KIND_ORDER``) comes first."""
    return float(f"{abs(change.abs_change_ns) * change.n_new:.2g}")


def _rank_series(side: _Side, use_kernels: bool) -> dict[int, _Item]:
    """Per rank: device time per iteration (sum over kernel keys and their other), or
    the rank's step durations."""
    ranks = [int(r) for r in side.summary["ranks"]]
    if use_kernels:
        parts = list(side.items.get("kernel", {}).values())
        if "kernel" in side.other:
            parts.append(side.other["kernel"])
        zero = np.zeros_like(side.present, dtype=np.int64)
        ns = sum((np.maximum(p.ns, 0) for p in parts), zero)
        count = sum((np.maximum(p.count, 0) for p in parts), zero)
    else:
        steps = list(side.items.get("step", {}).values())
        if not steps:
            return {}
        ns, count = np.maximum(steps[0].ns, 0), np.maximum(steps[0].count, 0)
    ns = np.where(side.present, ns, -1)
    count = np.where(side.present, count, -1)
    return {r: _Item(str(r), [], ns[i:i + 1], count[i:i + 1]) for i, r in enumerate(ranks)}


def _rank_pairs(b: _Side, n: _Side) -> tuple[list[tuple[str, _Item, _Item]], list[Presence],
                                              list[Presence]]:
    """Rank entities matched by rank number (only when a run has several ranks)."""
    if len(b.summary["ranks"]) < 2 and len(n.summary["ranks"]) < 2:
        return [], [], []
    use_kernels = bool(b.items.get("kernel") or n.items.get("kernel"))
    bs, ns = _rank_series(b, use_kernels), _rank_series(n, use_kernels)
    pairs = [("rank", bs[r], ns[r]) for r in sorted(set(bs) & set(ns))]
    added = [Presence("rank", str(r), [], ns[r].total()) for r in sorted(set(ns) - set(bs))]
    removed = [Presence("rank", str(r), [], bs[r].total()) for r in sorted(set(bs) - set(ns))]
    return pairs, added, removed


# --- efficiency and notes --------------------------------------------------------------


def metric_path(side: str, metric: str) -> str:
    """``device_load_balance`` on side ``device`` -> ``device.load_balance``;
    ``host_parallel_efficiency`` -> ``host.parallel``."""
    short = metric.removeprefix(f"{side}_").removesuffix("_efficiency")
    return f"{side}.{short or metric}"


def _efficiency(base: dict[str, Any], new: dict[str, Any]) -> list[EfficiencyDelta]:
    """Labelled efficiency rows of both sides, BASE's order first."""
    def rows(summary: dict[str, Any]) -> dict[tuple[str, str, str], list[Any]]:
        return {(str(r[0]), str(r[1]), str(r[2])): r for r in summary.get("efficiency") or []
                if r[6] is not None}

    b_rows, n_rows = rows(base), rows(new)
    out = []
    for key in list(b_rows) + [k for k in n_rows if k not in b_rows]:
        row = b_rows.get(key) or n_rows[key]
        bv = b_rows[key][3] if key in b_rows else None
        nv = n_rows[key][3] if key in n_rows else None
        scope, side, metric = key
        path = metric_path(side, metric)
        out.append(EfficiencyDelta(
            scope, side, metric, path if scope == "run" else f"{scope}.{path}", str(row[6]),
            int(row[5]), bv, nv, None if bv is None or nv is None else nv - bv))
    return out


def _span(labels: list[int]) -> str:
    if not labels:
        return "none"
    return f"{labels[0]}-{labels[-1]}" if len(labels) > 1 else str(labels[0])


def _notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What a reader should know: ranks, pids, iterations that differ; each side's notes."""
    notes: list[str] = []
    b_ranks, n_ranks = list(base["ranks"]), list(new["ranks"])
    if b_ranks != n_ranks:
        notes.append(f"BASE has {len(b_ranks)} rank(s) ({_span(sorted(b_ranks))}), NEW has "
                     f"{len(n_ranks)} ({_span(sorted(n_ranks))}): ranks are matched by "
                     "number, steps and entities pool every rank's samples")
    b_pids = {i["rank"]: i["pids"] for i in base["rank_info"]}
    moved = [f"rank {r}: {b_pids[r]} -> {i['pids']}" for i in new["rank_info"]
             if (r := i["rank"]) in b_pids and b_pids[r] and i["pids"] and b_pids[r] != i["pids"]]
    if moved:
        notes.append("process ids differ (" + "; ".join(moved[:4])
                     + (" ..." if len(moved) > 4 else "") + "): ranks matched by rank number")
    b_it, n_it = base["iterations"], new["iterations"]
    if b_it["source"] != n_it["source"]:
        notes.append(f"iterations come from {b_it['source']} in BASE and {n_it['source']} in "
                     "NEW: compare with care")
    elif b_it["labels"] != n_it["labels"]:
        notes.append(f"iterations differ (BASE {_span(b_it['labels'])}, NEW "
                     f"{_span(n_it['labels'])}): values are compared as samples, not "
                     "iteration by iteration")
    for name, summary in (("BASE", base), ("NEW", new)):
        n_samples = len(summary["iterations"]["labels"])
        if n_samples * len(summary["ranks"]) < 3:
            notes.append(f"{name} has fewer than 3 samples per entity: changes are reported, "
                         "not tested")
        notes.extend(f"{name}: {note}" for note in summary.get("notes", []))
    return notes
