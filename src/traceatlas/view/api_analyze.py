"""``/api/analyze/NAME``: a registered analysis on a window and ranks of the trace.

The parameters go through the registry's parser (as ``--param``); the rows are the
JSON ``traceatlas analyze NAME --window @A:@B --format json`` prints (the same
``write_json`` of the same frame), as columns + rows."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from traceatlas import analysis
from traceatlas.errors import InputError
from traceatlas.view.api_common import Context, NotFound, json_response, query_of
from traceatlas.view.params import get_int, get_ranks, get_text

RESERVED = ("start_ns", "end_ns", "ranks", "token", "table")
"""Query parameters of the endpoint itself; every other one is an analysis parameter."""
REFUSED = ("path",)
"""Analysis parameters the viewer does not accept (no path-valued parameter)."""


def analyze(ctx: Context, request: Request) -> Response:
    """``{"name", "columns", "rows", "notes", "extra", "table"}`` of the analysis on the
    selected window (``start_ns``/``end_ns``, absolute ns, either side optional) and
    ``ranks``; ``table`` picks one of the result's extra tables instead of the main one."""
    name = str(request.path_params["name"])
    query = query_of(request)
    if name not in analysis.ANALYSES:
        raise NotFound(f"{name[:60]}: unknown analysis (available: "
                       f"{', '.join(sorted(analysis.ANALYSES))})")
    spec = analysis.get_analysis(name)
    params = {k: v for k, v in query.items() if k not in RESERVED}
    for key in REFUSED:
        if key in params:
            raise InputError(key, "path-valued parameters are not accepted by the viewer")
    analysis.registry.parse_params(spec, params)  # bad parameters: 400 before any work
    start = get_int(query, "start_ns") if "start_ns" in query else None
    end = get_int(query, "end_ns") if "end_ns" in query else None
    if start is not None and end is not None and end < start:
        raise InputError("end_ns", f"{end} is before start_ns {start}")
    ranks = get_ranks(query, ctx.trace.ranks)
    table = get_text(query, "table", required=False)
    trace = ctx.trace
    if start is not None or end is not None or ranks is not None:
        trace = trace.select(window=(start, end) if (start, end) != (None, None) else None,
                             ranks=ranks, clip=True)  # as `analyze --window`
    result = analysis.run(name, trace, params)
    frame = result.table
    if table is not None:
        if table not in result.extra:
            raise InputError("table", f"{name} has no such table (tables: "
                             f"{', '.join(result.extra) or 'none'})")
        frame = result.extra[table]
    records: list[dict[str, Any]] = json.loads(frame.write_json())  # as --format json
    columns = list(frame.columns)
    return json_response({
        "name": name, "table": table, "columns": columns,
        "rows": [[r.get(c) for c in columns] for r in records],
        "notes": list(result.notes), "extra": list(result.extra),
        "window": [start, end], "ranks": ranks,
    })
