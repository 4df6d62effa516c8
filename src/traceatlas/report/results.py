"""Analysis results computed once per trace and shared by every report section and by the
advisor's rules (through the advisor's ``Context`` cache)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.advisor import Context, advise
from traceatlas.errors import TraceAtlasError

if TYPE_CHECKING:
    from traceatlas.analysis.base import Result
    from traceatlas.engine.base import Engine
    from traceatlas.model.trace import Trace


class Unavailable(Exception):
    """An analysis the report wanted could not run; ``reason`` says why in plain words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Results:
    """Runs registered analyses on one trace, each (name, params) once.

    ``path`` is the user's path, written into the advisor's suggested commands. The
    advisor's ``Context`` holds the cache, so the findings reuse the analyses the report
    already ran (and the other way round). ``engine``: the analyses declared per rank
    run in rank batches on it (``analysis.partitioned``; identical results), the rest
    whole in this process.
    """

    def __init__(self, trace: Trace, path: str = "PATH", engine: Engine | None = None
                 ) -> None:
        self.trace = trace
        self.path = path
        self.context = Context(trace, path=path, engine=engine)
        self._done: dict[tuple[str, tuple[tuple[str, Any], ...]], Result | Unavailable] = {}

    def get(self, name: str, params: Mapping[str, Any] | None = None) -> Result:
        """The result of ``name`` with ``params``; raises ``Unavailable`` with the reason."""
        key = (name, tuple(sorted((params or {}).items())))
        if key not in self._done:
            self._done[key] = self._run(name, dict(params or {}))
        out = self._done[key]
        if isinstance(out, Unavailable):
            raise out
        return out

    def _run(self, name: str, params: dict[str, Any]) -> Result | Unavailable:
        from traceatlas.analysis import registry

        if name not in registry.ANALYSES:
            return Unavailable(f"the {name} analysis is not installed")
        try:
            result: Result | None = self.context.result(name, **params)
        except TraceAtlasError as exc:
            return Unavailable(_reason(exc))
        except Exception as exc:  # one broken analysis must not take the whole report down
            warnings.warn(f"report: the {name} analysis failed: {type(exc).__name__}: {exc}",
                          RuntimeWarning, stacklevel=2)
            return Unavailable(f"the {name} analysis failed ({type(exc).__name__}: {exc})")
        if result is None:
            said = [str(n).removeprefix("skipped: ") for n in self.context.notes
                    if str(n).removeprefix("skipped: ").startswith(f"{name}:")]
            return Unavailable(_reason(Exception(said[-1])) if said else
                               f"the trace lacks the data {name} needs")
        return result

    def findings(self, top: int) -> list[dict[str, Any]]:
        """The advisor's ranked findings (rows of its main table), computed on the shared
        cache; ``top`` costliest."""
        from traceatlas.analysis import registry
        from traceatlas.analysis.advisor import keep_top

        defaults = {p.name: p.default for p in registry.get_analysis("advisor").params}
        try:
            found = advise(self.trace, path=self.path, context=self.context,
                           min_cost_pct=float(defaults["min_cost_pct"]))
        except TraceAtlasError as exc:
            raise Unavailable(_reason(exc)) from None
        except Exception as exc:  # a broken rule must not take the whole report down
            warnings.warn(f"report: the advisor failed: {type(exc).__name__}: {exc}",
                          RuntimeWarning, stacklevel=2)
            raise Unavailable(f"the advisor failed ({type(exc).__name__}: {exc})") from None
        return [{"rank": i + 1, **{k: getattr(f, k) for k in FINDING_FIELDS},
                 "view": getattr(f, "view", ""),  # the viewer command, when set
                 "cost_bytes": getattr(f, "cost_bytes", None)}  # memory findings
                for i, f in enumerate(keep_top(found, top))]


FINDING_FIELDS = ("rule", "statement", "cost_ns", "evidence", "next_step", "command",
                  "severity", "cause", "ranks")
"""Fields of the advisor's findings the report shows."""


def _reason(exc: Exception) -> str:
    """The error text without the ``name:`` prefix errors carry."""
    text = str(exc)
    return text.split(": ", 1)[1] if ": " in text else text
