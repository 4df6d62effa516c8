"""One CUDA call recorded twice in an Nsight Systems runtime table -> one interval.

Some nsys generations write both the public entry point of a CUDA runtime call and the
versioned function it forwards to, e.g. ``cudaMemcpy`` and ``cudaMemcpy_v3020`` (same
thread, same correlation id, the versioned record inside the public one). The reader
strips the ``_v<version>`` suffix, so without this step every such call would be counted
twice. ``collapse_versioned`` drops each versioned record that lies within a public
record of the same call (same process and thread; same correlation id when both have
one; start and end within) and writes the versioned name into the public record's
``args`` as ``versioned_name``. Versioned records with no such public record (the usual
case: most exports only have the versioned one) are kept as they are.
"""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.io.nsys_adbc import text_equals

RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
ARGS_KEY = "versioned_name"

_PAIRS_SQL = f"""
WITH r AS (
    SELECT rid, proc, tid, start, "end", correlation, CAST(name AS VARCHAR) AS name,
           json_extract_string(args, '$.nameId') AS raw
    FROM ev WHERE CAST(source_category AS VARCHAR) = '{RUNTIME_TABLE}'
),
v AS (SELECT * FROM r WHERE regexp_matches(raw, '_v[0-9]+$')),
p AS (SELECT * FROM r WHERE raw = name),
m AS (
    SELECT v.rid AS vrid, p.rid AS prid, v.raw AS raw
    FROM v JOIN p ON p.proc = v.proc AND p.tid = v.tid AND p.name = v.name
        AND p.start <= v.start AND v."end" <= p."end"
        AND (p.correlation IS NULL OR v.correlation IS NULL
             OR p.correlation = v.correlation)
    QUALIFY row_number() OVER (PARTITION BY v.rid
                               ORDER BY p."end" - p.start, p.rid) = 1
)
SELECT vrid, prid, raw FROM m
QUALIFY row_number() OVER (PARTITION BY prid ORDER BY vrid) = 1
ORDER BY prid
"""
"""Pairs (versioned row, public row): each versioned row goes to the smallest public
record holding it, each public record absorbs at most one versioned row."""


def collapse_versioned(ev: pa.Table) -> pa.Table:
    """``ev`` (nsys ``EV`` rows) without the versioned runtime records nested in their
    public call; the public record's ``args`` gain ``versioned_name``. Row order kept."""
    if not _may_have_pairs(ev):
        return ev
    cols = ["proc", "tid", "start", "end", "correlation", "name", "source_category", "args"]
    view = pa.table({**{c: ev[c] for c in cols},
                     "rid": pa.array(np.arange(ev.num_rows, dtype=np.int64))})
    con = duckdb.connect(":memory:")
    try:
        con.register("ev", view)
        pairs = con.sql(_PAIRS_SQL).to_arrow_table()
    finally:
        con.close()
    if not pairs.num_rows:
        return ev
    public = pairs["prid"].to_numpy()
    args = ev["args"].combine_chunks()
    merged = [_with_key(a, raw) for a, raw in zip(
        args.take(pa.array(public)).to_pylist(), pairs["raw"].to_pylist(), strict=True)]
    mask = np.zeros(ev.num_rows, dtype=bool)
    mask[public] = True
    args = pc.replace_with_mask(args, pa.array(mask), pa.array(merged, pa.string()))
    ev = ev.set_column(ev.schema.get_field_index("args"), "args", args)
    keep = np.ones(ev.num_rows, dtype=bool)
    keep[pairs["vrid"].to_numpy()] = False
    return ev.filter(pa.array(keep))


def _may_have_pairs(ev: pa.Table) -> bool:
    """Cheap test on distinct names: a runtime name is both written as-is and (another
    record) with a version suffix. Only then is the pairing query run."""
    if not ev.num_rows or "args" not in ev.column_names:
        return False
    runtime = text_equals(ev["source_category"], RUNTIME_TABLE)
    if not pc.any(runtime).as_py():
        return False
    rows = ev.select(["args", "name"]).filter(runtime)
    # the same names from the distinct args texts (a few per API name): the regex runs
    # on those only
    raw = pc.extract_regex(pc.unique(rows["args"].combine_chunks()),
                           r'"nameId":\s*"(?P<raw>[^"]*)"')
    raw_names = pc.unique(pc.struct_field(raw, [0])).to_pylist()
    names = set(pc.unique(rows["name"].cast(pa.string()).combine_chunks()).to_pylist())
    versioned = {n for n in raw_names if n is not None and n not in names}
    public = {n for n in raw_names if n is not None and n in names}
    return any(_strip(n) in public for n in versioned)


def _strip(name: str) -> str:
    head, sep, tail = name.rpartition("_v")
    return head if sep and tail.isdigit() else name


def _with_key(args: str | None, raw: str) -> str:
    """``args`` JSON object text with ``versioned_name`` set (an object from null/empty)."""
    try:
        obj = json.loads(args) if args else {}
    except ValueError:
        obj = {"args": args}
    if not isinstance(obj, dict):
        obj = {"args": obj}
    obj[ARGS_KEY] = raw
    return json.dumps(obj, separators=(",", ":"))
