"""The compact baseline summary of a run (``traceatlas summary PATH -o baseline.json``).

A summary keeps, per iteration and per rank, what ``diff`` compares, so CI can keep a
small JSON file instead of whole traces. Contents (all times integer ns):

- ``format`` (``traceatlas-summary``), ``version`` (``VERSION``), ``traceatlas`` (the
  version that wrote it), ``sources`` (path, archive member, format, bytes and the
  sampled BLAKE2b fingerprint of each trace file), ``source_format``, ``ranks``.
- ``rank_info``: per rank its host names, OS process ids (host threads) and device
  indices. Ranks are matched by rank number; pids and hosts are kept only so that a diff
  can say when they differ.
- ``iterations``: ``source`` is ``steps`` (``ProfilerStep#N`` markers: ``labels`` are the
  step numbers, an interval belongs to the step of its ``step`` column: host events by
  time, device events by their launch), ``phases`` (no step markers: the ``phases``
  analysis' iterations, ``labels`` 0, 1, ...; host intervals by start time, device
  intervals by the start of their launch, else their own start) or ``run`` (neither: the
  whole run is one sample, label 0).
- ``entities``: per kind a list of ``{key, names, n_names, ns, count}``: ``key`` is
  ``traceatlas.compare.normalize.normalize`` of the raw names (for ``category``: the
  canonical category), ``names`` up to ``MAX_NAMES`` raw names seen (most frequent
  first; empty when the only raw name is the key itself, and for categories) and
  ``n_names`` how many distinct raw names there were; ``ns[r][i]`` and ``count[r][i]`` for rank
  ``ranks[r]`` and iteration ``iterations.labels[i]``, ``-1`` in both where that rank has
  no such iteration. Kinds:

  - ``step``: one entity, the iteration's duration (the ``steps`` analysis' window for
    steps, the phase's duration for phases, first start to last end for a run);
  - ``annotation``: union ns of the host annotations (categories annotation, nvtx,
    region; not ``gpu_annotation`` spans, which have no iteration);
  - ``op``: INCLUSIVE time of host operators (``cpu_op``), as the union of the op's
    intervals (a call nested in a call of the same key is not counted twice);
  - ``kernel``: union ns of device activity (kernels, communication kernels, memcpy,
    memset) per key;
  - ``op_device``: union ns of the device activity (as ``kernel``) LAUNCHED from inside
    each op: a device activity belongs to the innermost ``cpu_op`` enclosing its launch
    call (``traceatlas.compare.launchers``); ``count`` = device activities;
  - ``annotation_device``: the same for every host annotation enclosing the launch call
    (an activity counts for each enclosing annotation; none when launched outside any);
  - ``category``: union ns per canonical category (``step`` markers excluded).

- ``other``: per kind, entities folded for compactness (``fold_rule``: an entity whose
  total over all ranks and iterations is below ``min_share`` of ``total_ns`` and that is
  not among the ``top`` largest of its kind): their keys, count, and the SUM of their
  ``ns`` / ``count`` matrices (a sum of unions, not a union).
- ``total_ns``: the sum of every rank's iteration durations (the folding reference).
- ``efficiency``: the ``efficiency`` analysis' rows for the whole run (scope, side,
  metric, value, parent, level, label), or null with a note when it does not apply.
- ``notes``: what was left out or inferred (and how much device time has a launch
  context).
- ``launched_by`` on each ``kernel`` entity (version 2), an array ``[op, op_share,
  annotation, annotation_share]``: the ``op_device`` key that launched the largest part
  of the kernel's summed device time and that part (0..1), likewise the innermost
  enclosing annotation's key; null where none (``launchers`` reads it as a dict).

A path ending in ``.gz`` is written gzip-compressed (about a quarter of the size);
``read_summary`` reads both, validates the file (msgspec types, matrix shapes) and
raises ``InputError`` naming it. Building: ``summary_build``.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path
from typing import Any, Literal

import msgspec

from traceatlas.errors import InputError
from traceatlas.tempfiles import replaceable_file, sibling

FORMAT = "traceatlas-summary"
VERSION = 2
READS: tuple[int, ...] = (1, 2)
"""Versions ``read_summary`` reads (version 1: no device-time kinds, no ``launched_by``)."""
KINDS: tuple[str, ...] = ("step", "annotation", "op", "kernel", "op_device",
                          "annotation_device", "category")
MAX_NAMES = 3
"""Raw names listed per key (``n_names`` says how many there were)."""
MIN_SHARE = 0.001
"""Entities below this share of ``total_ns`` may be folded into ``other``..."""
TOP = 100
"""...unless they are among the ``TOP`` largest of their kind."""
GZIP_MAGIC = b"\x1f\x8b"


class Source(msgspec.Struct, forbid_unknown_fields=True):
    """One trace file the summary was made from."""

    path: str
    member: str | None
    format: str
    bytes: int
    fingerprint: str | None


class RankInfo(msgspec.Struct, forbid_unknown_fields=True):
    """What identifies a rank besides its number."""

    rank: int
    hosts: list[str]
    pids: list[int]
    devices: list[int]


class Iterations(msgspec.Struct, forbid_unknown_fields=True):
    """Where the samples come from and their labels (step numbers or 0, 1, ...)."""

    source: Literal["steps", "phases", "run"]
    labels: list[int]


class LaunchedBy(msgspec.Struct, array_like=True):
    """Who launched most of a kernel key's device time (keys of op / annotation)."""

    op: str | None
    op_share: float
    annotation: str | None
    annotation_share: float


class Entity(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One matched thing: ``ns``/``count`` per rank, per iteration."""

    key: str
    names: list[str]
    n_names: int
    ns: list[list[int]]
    count: list[list[int]]
    launched_by: LaunchedBy | None = None


class Other(msgspec.Struct, forbid_unknown_fields=True):
    """The folded entities of one kind: their keys and summed matrices."""

    keys: list[str]
    ns: list[list[int]]
    count: list[list[int]]


class EfficiencyRow(msgspec.Struct, array_like=True):
    """One row of the ``efficiency`` analysis' main table."""

    scope: str
    side: str
    metric: str
    value: float | None
    parent: str | None
    level: int
    label: str | None


class Summary(msgspec.Struct, forbid_unknown_fields=True):
    """The whole file (see the module docstring)."""

    format: str
    version: int
    traceatlas: str
    sources: list[Source]
    source_format: str
    ranks: list[int]
    rank_info: list[RankInfo]
    iterations: Iterations
    total_ns: int
    entities: dict[str, list[Entity]]
    other: dict[str, Other]
    fold_rule: str
    efficiency: list[EfficiencyRow] | None
    notes: list[str]


def summarize(trace: Any, *, min_share: float = MIN_SHARE, top: int = TOP,
              engine: Any = None) -> dict[str, Any]:
    """The summary of ``trace`` (a ``traceatlas.Trace``) as plain JSON-ready data, built
    in rank batches on ``engine`` (None: one after the other in this process)."""
    from traceatlas.compare.summary_build import build

    return build(trace, min_share=min_share, top=top, engine=engine)


def write_summary(summary: dict[str, Any], path: str | Path) -> Path:
    """Write ``summary`` to ``path`` atomically (a temporary sibling renamed into place);
    a directory, device or FIFO is refused. Returns the path written."""
    out = Path(path)
    target = replaceable_file(out, hint="-o names the summary file to write")
    data = msgspec.json.encode(summary) + b"\n"
    if out.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    tmp = sibling(target, "tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def read_summary(path: str | Path) -> dict[str, Any]:
    """The summary in ``path``; ``InputError`` naming the file when it is not one
    (truncated, damaged, another JSON document, a newer version, inconsistent shapes)."""
    file = Path(path)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise InputError(file, "no such file") from None
    except IsADirectoryError:
        raise InputError(file, "is a directory, not a summary file") from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(file, f"damaged gzip summary: {exc}") from None
    try:
        head = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise InputError(file, f"not a traceatlas summary (not valid JSON: {exc})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise InputError(file, f"not a traceatlas summary (no \"format\": \"{FORMAT}\")")
    version = head.get("version")
    if version not in READS:
        raise InputError(file, f"summary version {version!r}; this traceatlas reads "
                         f"versions {', '.join(map(str, READS))} (write it again with "
                         "`traceatlas summary`)")
    try:
        parsed = msgspec.convert(head, Summary)
    except msgspec.ValidationError as exc:
        raise InputError(file, f"damaged summary: {exc}") from None
    _check_shapes(file, parsed)
    result: dict[str, Any] = msgspec.to_builtins(parsed)
    return result


def _check_shapes(file: Path, summary: Summary) -> None:
    """Every matrix has one row per rank and one column per iteration."""
    n_ranks, n_its = len(summary.ranks), len(summary.iterations.labels)
    for kind, items in summary.entities.items():
        if kind not in KINDS:
            raise InputError(file, f"damaged summary: unknown kind {kind!r}")
        for index, item in enumerate(items):
            _shape(file, f"entities.{kind}[{index}]", (item.ns, item.count), n_ranks, n_its)
    for kind, other in summary.other.items():
        _shape(file, f"other.{kind}", (other.ns, other.count), n_ranks, n_its)


def _shape(file: Path, where: str, matrices: tuple[list[list[int]], ...], n_ranks: int,
           n_its: int) -> None:
    for matrix in matrices:
        if len(matrix) != n_ranks or any(len(row) != n_its for row in matrix):
            raise InputError(file, f"damaged summary: {where} is not {n_ranks} rank(s) x "
                             f"{n_its} iteration(s)")


def launchers(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per kernel key of ``summary``: ``{op, op_share, annotation, annotation_share}``
    (empty for a version-1 summary)."""
    out = {}
    for entity in summary["entities"].get("kernel", []):
        row = entity.get("launched_by")
        if row:
            out[entity["key"]] = dict(zip(("op", "op_share", "annotation",
                                           "annotation_share"), row, strict=True))
    return out


def finite_or_none(value: object) -> float | None:
    """A float value, None for null or NaN (JSON has no NaN)."""
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) or math.isinf(number) else number
