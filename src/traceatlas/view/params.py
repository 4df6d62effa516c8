"""Strict parsing of the viewer's query parameters. Every problem is an ``InputError``
naming the parameter (the server answers 400 with its message); nothing is coerced."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from traceatlas.errors import InputError
from traceatlas.ops.select import INT64_MAX, RankSpans, parse_rank_spans

MAX_TRACKS = 4096
"""Track ids one request may name."""
MAX_BINS = 100_000
"""Bins of the requested level one tile or rows request may span (per track)."""
MAX_GROUPS = 4096
"""Rank groups one ``/api/rows`` request may ask for."""
MAX_ROW_CELLS = 4_000_000
"""Cells (rank groups, or tracks, x bins of the requested level) of one ``/api/rows``,
``/api/tiles`` or ``/api/counters`` request: its arrays and their JSON stay within about
200 MB (the front-end asks for well under 1 M)."""
DEFAULT_LIMIT = 20_000
MAX_LIMIT = 200_000
MAX_TEXT = 200
"""Characters of a search text."""
MAX_NAME = 8192
"""Characters of an event name (kernel signatures run to thousands)."""

_INT = re.compile(r"^-?[0-9]{1,19}$")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def get_int(query: Mapping[str, str], name: str, *, default: int | None = None,
            lo: int = -INT64_MAX - 1, hi: int = INT64_MAX) -> int:
    """The integer parameter ``name`` (decimal digits, optional '-'), in ``lo..hi``;
    ``default`` when absent (an error when absent without a default)."""
    text = query.get(name)
    if text is None:
        if default is None:
            raise InputError(name, "missing parameter")
        return default
    if not _INT.match(text):
        raise InputError(name, f"expected an integer, got {_shown(text)}")
    value = int(text)
    if not lo <= value <= hi:
        raise InputError(name, f"{value} is out of range ({lo}..{hi})")
    return value


def get_window(query: Mapping[str, str]) -> tuple[int, int]:
    """``start_ns`` and ``end_ns`` (absolute epoch ns, both required, end >= start)."""
    start = get_int(query, "start_ns")
    end = get_int(query, "end_ns")
    if end < start:
        raise InputError("end_ns", f"{end} is before start_ns {start}")
    return start, end


def get_text(query: Mapping[str, str], name: str, *, required: bool = True,
             limit: int = MAX_TEXT) -> str | None:
    """A text parameter of at most ``limit`` characters, taken literally."""
    text = query.get(name)
    if text is None:
        if required:
            raise InputError(name, "missing parameter")
        return None
    if len(text) > limit:
        raise InputError(name, f"longer than {limit} characters")
    return text


def get_ids(query: Mapping[str, str], known: int, name: str = "tracks") -> list[int]:
    """Comma-separated viewer track ids, each in ``0..known-1``, at most ``MAX_TRACKS``;
    duplicates removed, order kept."""
    text = query.get(name)
    if text is None or not text.strip():
        raise InputError(name, "missing parameter (comma-separated track ids)")
    items = text.split(",")
    if len(items) > MAX_TRACKS:
        raise InputError(name, f"{len(items)} track ids (at most {MAX_TRACKS} per request)")
    ids: dict[int, None] = {}
    for item in items:
        item = item.strip()
        if not item.isascii() or not item.isdigit() or len(item) > 9:
            raise InputError(name, f"bad track id {_shown(item)} (expected integers)")
        value = int(item)
        if value >= known:
            raise InputError(name, f"unknown track id {value} (ids are 0..{known - 1})")
        ids[value] = None
    return list(ids)


def get_ranks(query: Mapping[str, str], present: Sequence[int], name: str = "ranks",
              ) -> list[int] | None:
    """The store's ranks named by ``ranks`` (``0,3-5``; spans, never enumerated beyond
    the store's ranks); None when absent. An error when it names none of them."""
    text = query.get(name)
    if text is None:
        return None
    if len(text) > 10 * MAX_TEXT:
        raise InputError(name, "rank list too long")
    spans = parse_rank_spans(text, name)
    kept = [r for r in present if in_spans(r, spans)]
    if not kept:
        raise InputError(name, f"no rank of this store in {_shown(text)}")
    return kept


def in_spans(rank: int, spans: RankSpans) -> bool:
    """``rank`` is inside one of the inclusive ``spans``."""
    return any(lo <= rank <= hi for lo, hi in spans)


def check_bins(start_ns: int, end_ns: int, bin_ns: int) -> None:
    """An error when ``[start_ns, end_ns]`` spans more than ``MAX_BINS`` bins."""
    bins = (end_ns - start_ns) // bin_ns + 1
    if bins > MAX_BINS:
        raise InputError("level", f"the window spans {bins:,} bins of {bin_ns:,} ns "
                         f"(at most {MAX_BINS:,}; ask for a coarser level)")


def check_cells(rows: int, start_ns: int, end_ns: int, bin_ns: int,
                name: str = "groups") -> None:
    """An error naming parameter ``name`` when ``rows`` (rank groups of ``/api/rows``,
    tracks of ``/api/tiles`` and ``/api/counters``) x the bins of ``[start_ns, end_ns]``
    exceed ``MAX_ROW_CELLS``."""
    cells = rows * ((end_ns - start_ns) // bin_ns + 1)
    if cells > MAX_ROW_CELLS:
        raise InputError(name, f"{rows:,} {name} x the window's bins = {cells:,} cells "
                         f"(at most {MAX_ROW_CELLS:,}; ask fewer {name} or a coarser level)")


def get_choice(query: Mapping[str, str], name: str, choices: Sequence[str],
               default: str | None = None) -> str:
    """One of ``choices``."""
    text = query.get(name, default)
    if text is None:
        raise InputError(name, f"missing parameter (one of {', '.join(choices)})")
    if text not in choices:
        raise InputError(name, f"{_shown(text)} is not one of {', '.join(choices)}")
    return text
