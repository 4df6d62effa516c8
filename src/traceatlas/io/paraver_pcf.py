"""Paraver ``.pcf`` (labels, semantics) and ``.row`` (object names), plus the event-type
codes both the reader and the exporter use.

``.pcf`` parsing follows paraver-kernel's ``pcffileparser.cpp``: tabs become spaces,
``#`` lines are comments, an ``EVENT_TYPE`` block holds lines ``<gradient> <type>
<label>``, then optionally ``VALUES`` and lines ``<value> <label>`` that apply to every
type of the block. ``.row`` files hold ``LEVEL <name> SIZE <n>`` blocks of n names.

Event-type semantics (what becomes an interval, a counter or an instant):

- Region types (``REGION_TYPES``; value != 0 opens, value 0 closes, LIFO per thread and
  type): Extrae MPI 50000001-50000005 -> ``mpi``; Extrae OpenMP 60000001-60000099
  -> ``openmp`` except user functions 60000019 and pthread functions 60000020
  -> ``region``; CUDA 63000000 (CUDA call) -> ``runtime``, 63000001 (memory transfer)
  -> ``memcpy`` (``memset`` if the value label says so), 63000006 (kernel exec)
  -> ``kernel``, 63000007 labelled NCCL (nsys2prv) -> ``comm_kernel``; and traceatlas'
  own category types (``CATEGORY_TYPE_BASE`` + index in ``CATEGORIES``, declared with a
  label starting ``traceatlas category``).
- Counters: types 42000000-42999999 (Extrae PAPI), or types the ``.pcf`` declares with
  the hardware-counter gradient (7, Extrae's "Hardware Counters") and no ``VALUES``
  table; 41999999 ("Active hardware counter set", an id) is not a counter.
- Everything else: instants.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from traceatlas.model.schema import CATEGORIES

CATEGORY_TYPE_BASE = 91_000_000
"""traceatlas interval category ``c`` is event type ``CATEGORY_TYPE_BASE + CATEGORIES
.index(c)`` (unless ``EXTRAE_CATEGORY_TYPES`` gives an Extrae code)."""
INSTANT_TYPE_BASE = 91_000_100
"""traceatlas instants of category ``c``: type ``INSTANT_TYPE_BASE + index``."""
COUNTER_TYPE_BASE = 92_000_000
"""traceatlas counter series ``i`` (sorted names): type ``COUNTER_TYPE_BASE + i``."""
DERIVED_STATES_TYPE = 91_000_999
"""Declared (never emitted) by the exporter when its states are derived from top-level
host intervals; the reader then does not turn those states into intervals again."""
CATEGORY_LABEL = "traceatlas category "
INSTANT_LABEL = "traceatlas instant "
DERIVED_STATES_LABEL = "traceatlas derived states (Running = top-level host intervals)"
TIME_ORIGIN_RE = re.compile(r"^#\s*traceatlas time_origin_ns=(-?\d+)\s*$")
"""A ``.prv`` comment line written by the exporter: ns added to every time on reading."""

COUNTER_GRADIENT = 7
NSYS2PRV_NCCL = 63_000_007
"""nsys2prv's "NCCL kernel" type (Extrae uses the number for kernel source lines)."""
NOT_COUNTERS = frozenset({41_999_999})
MPI_TYPES = {50_000_001: "p2p", 50_000_002: "collective", 50_000_003: "other"}

EXTRAE_CATEGORY_TYPES: dict[str, int] = {"kernel": 63_000_006, "runtime": 63_000_000}
"""Categories the exporter writes with an Extrae/nsys2prv code, so Paraver
configuration files keep working. ``mpi`` uses 50000001-3 by call name (``mpi_type``)."""

_FIXED_REGIONS: dict[int, str] = {
    60_000_019: "region",  # Extrae user functions
    60_000_020: "region",  # pthread functions
    63_000_000: "runtime",  # CUDA call
    63_000_001: "memcpy",  # CUDA memory transfer
    63_000_006: "kernel",  # CUDA kernel exec
}
_REGION_RANGES: tuple[tuple[int, int, str], ...] = (
    (50_000_001, 50_000_005, "mpi"),
    (60_000_001, 60_000_099, "openmp"),
)

_MPI_P2P = re.compile(r"^MPI_(I?[bsr]?send|I?recv|Sendrecv\w*|Wait\w*|Test\w*|I?probe|"
                      r"Start\w*|Request\w*|Cancel)$", re.IGNORECASE)
_MPI_COLL = re.compile(r"^MPI_I?(Allreduce|Barrier|Bcast|Reduce\w*|Allgather\w*|"
                       r"Alltoall\w*|Gather\w*|Scatter\w*|Scan|Exscan|Neighbor\w*)$",
                       re.IGNORECASE)


def mpi_type(name: str) -> int:
    """Extrae MPI event type for an MPI call name: p2p, collective or other."""
    if _MPI_P2P.match(name):
        return 50_000_001
    if _MPI_COLL.match(name):
        return 50_000_002
    return 50_000_003


@dataclass
class EventType:
    """One ``.pcf`` event type: gradient, label, value labels."""

    gradient: int
    label: str
    values: dict[int, str] = field(default_factory=dict)
    has_values: bool = False


@dataclass
class Pcf:
    """What a ``.pcf`` declares; empty when there is none. ``sections``: section
    keywords seen; ``skipped``: numbers (1-based) of the STATES/EVENT_TYPE lines that
    could not be parsed (and lines before the first section)."""

    states: dict[int, str] = field(default_factory=dict)
    types: dict[int, EventType] = field(default_factory=dict)
    sections: int = 0
    skipped: list[int] = field(default_factory=list)

    def type_label(self, etype: int) -> str:
        """The type's label, or the number as text when undeclared."""
        info = self.types.get(etype)
        return info.label if info is not None and info.label else str(etype)

    def region_category(self, etype: int) -> str | None:
        """Canonical category when ``etype`` opens/closes regions, else None."""
        info = self.types.get(etype)
        if (info is not None and CATEGORY_TYPE_BASE <= etype < CATEGORY_TYPE_BASE + 100
                and info.label.startswith(CATEGORY_LABEL)):
            cat = info.label[len(CATEGORY_LABEL):].strip()
            return cat if cat in CATEGORIES else "other"
        if etype == NSYS2PRV_NCCL and info is not None and "nccl" in info.label.lower():
            return "comm_kernel"
        if etype in _FIXED_REGIONS:
            return _FIXED_REGIONS[etype]
        for lo, hi, cat in _REGION_RANGES:
            if lo <= etype <= hi:
                return cat
        return None

    def instant_category(self, etype: int) -> str | None:
        """Category of a traceatlas instant type (name = value label), else None."""
        info = self.types.get(etype)
        if info is None or not INSTANT_TYPE_BASE <= etype < INSTANT_TYPE_BASE + 100:
            return None
        if not info.label.startswith(INSTANT_LABEL):
            return None
        cat = info.label[len(INSTANT_LABEL):].strip()
        return cat if cat in CATEGORIES else "other"

    def is_counter(self, etype: int) -> bool:
        """Counter rule: 42000000-42999999, or gradient 7 without VALUES (see module doc)."""
        if etype in NOT_COUNTERS:
            return False
        if 42_000_000 <= etype <= 42_999_999:
            return True
        info = self.types.get(etype)
        return info is not None and info.gradient == COUNTER_GRADIENT and not info.has_values

    @property
    def derived_states(self) -> bool:
        """True for a traceatlas export whose states repeat top-level host intervals."""
        info = self.types.get(DERIVED_STATES_TYPE)
        return info is not None and info.label.startswith("traceatlas derived states")


_SECTIONS = frozenset({"DEFAULT_OPTIONS", "DEFAULT_SEMANTIC", "STATES", "STATES_COLOR",
                       "EVENT_TYPE", "GRADIENT_COLOR", "GRADIENT_NAMES"})


def parse_pcf(text: str) -> Pcf:
    """Parse ``.pcf`` text (unparseable lines are skipped, as Paraver does, and their
    numbers kept in ``Pcf.skipped``). Lines end at ``\n`` only and labels lose only
    ASCII blanks at their ends, so any other character is part of a label."""
    pcf = Pcf()
    section = ""
    block: list[int] = []
    in_values = False
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.replace("\t", " ").strip(_BLANKS)
        if not line or line.startswith("#"):
            continue
        if line in _SECTIONS:
            section, block, in_values = line, [], False
            pcf.sections += 1
            continue
        ok = section not in ("", "STATES", "EVENT_TYPE")  # other sections: free text
        if section == "STATES":
            value, _, label = line.partition(" ")
            if ok := _is_int(value):
                pcf.states[int(value)] = label.strip(_BLANKS)
        elif section == "EVENT_TYPE":
            if line == "VALUES":
                ok = in_values = True
                for t in block:
                    pcf.types[t].has_values = True
            elif line.startswith("PRECISION"):
                ok = True
            elif in_values:
                value, _, label = line.partition(" ")
                if ok := _is_int(value):
                    for t in block:
                        pcf.types[t].values[int(value)] = label.strip(_BLANKS)
            else:
                match = _TYPE_LINE.fullmatch(line)
                if ok := match is not None:
                    etype = int(match[2])
                    pcf.types[etype] = EventType(int(match[1]),
                                                 (match[3] or "").strip(_BLANKS))
                    block.append(etype)
        if not ok:
            pcf.skipped.append(number)
    return pcf


def parse_row(text: str, problems: list[str] | None = None) -> dict[str, list[str]]:
    """``.row`` text -> level name (``THREAD``, ``CPU``, ``NODE``...) -> names in order.

    A ``LEVEL <name> SIZE <n>`` line opens a level of the next n non-blank lines (names
    first: a name may itself read ``LEVEL ...``). What does not fit (a level cut short,
    lines outside any level) is described in ``problems`` when given.
    """
    levels: dict[str, list[str]] = {}
    current: list[str] | None = None
    remaining, name, stray = 0, "", 0
    for raw in text.split("\n"):
        line = raw.strip(_BLANKS)
        if current is not None and remaining > 0 and line:
            current.append(line)
            remaining -= 1
            continue
        match = _ROW_LEVEL.match(line)
        if match:
            name = match.group(1).upper()
            current = levels.setdefault(name, [])
            remaining = int(match.group(2))
        elif line:
            stray += 1
    if problems is not None:
        if remaining:
            problems.append(f"level {name} lists {len(levels[name])} name(s) of the "
                            f"{len(levels[name]) + remaining} it declares")
        if stray:
            problems.append(f"{stray} line(s) outside any LEVEL block")
    return levels


def companion_path(prv: Path, suffix: str) -> Path:
    """The ``.pcf``/``.row`` beside ``prv`` (same stem)."""
    name = prv.name
    stem = name[: -len(".prv.gz")] if name.endswith(".prv.gz") else name.removesuffix(".prv")
    return prv.with_name(stem + suffix)


def read_companion(prv: Path, suffix: str) -> str | None:
    """Text of the ``.pcf``/``.row`` beside ``prv`` (same stem), or None when missing."""
    path = companion_path(prv, suffix)
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8", errors="replace")


def binary_problem(data: bytes) -> str | None:
    """Why ``data`` cannot be a text companion file (NUL bytes, or more than 1% of it
    not UTF-8), else None."""
    if b"\x00" in data:
        return "it holds binary data (NUL bytes)"
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")
    if bad > max(1, len(data) // 100):
        return f"it is not text ({bad} byte sequences are not UTF-8)"
    return None


_BLANKS = " \t\r"
"""What a line or label loses at its ends (ASCII only: other spaces are name data)."""
_ROW_LEVEL = re.compile(r"^LEVEL\s+(\w+)\s+SIZE\s+([0-9]{1,9})$", re.ASCII)
_INT = re.compile(r"-?[0-9]{1,18}", re.ASCII)
_TYPE_LINE = re.compile(r"(-?[0-9]{1,18}) +(-?[0-9]{1,18})(?: +(.*))?", re.ASCII | re.DOTALL)
"""``<gradient> <type> [<label>]`` of an EVENT_TYPE block (tabs already spaces)."""


def _is_int(text: str) -> bool:
    """ASCII digits only (``'²'.isdigit()`` is true, ``int('²')`` fails)."""
    return _INT.fullmatch(text) is not None
