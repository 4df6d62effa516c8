"""Requirement checks that still scan rows (``requirements.scan_any`` calls) for every
requirement on each STORE, its rank 0 and its kernel-category view.

    python bench/requirement_scans.py STORE [STORE ...]
"""

from __future__ import annotations

import sys
from typing import Any

import traceatlas
from traceatlas.analysis import requirements
from traceatlas.analysis.requirements import REQUIREMENTS


def main() -> None:
    seen: list[str] = []
    original = requirements.scan_any

    def counting(trace: Any, clause: Any) -> bool:
        seen.append(repr(clause))
        return original(trace, clause)

    requirements.scan_any = counting  # type: ignore[assignment]
    for store in sys.argv[1:]:
        t = traceatlas.open(store)
        for view in (t, t.select(ranks=[0]), t.select(categories="kernel")):
            for req in REQUIREMENTS.values():
                req.check(view)
        print(store, "scans:", len(seen))
        for clause in seen:
            print("  ", clause)
        seen.clear()


if __name__ == "__main__":
    main()
