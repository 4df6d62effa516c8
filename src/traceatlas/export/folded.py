"""Folded stacks (Brendan Gregg's FlameGraph / inferno input) from the calling-context tree.

One line per context with a non-zero value: the frame names from the outermost context to
the node, separated by ``;``, a space, and the value as an integer: ``a;b;c 1234``.
``value=host`` (default): the node's host exclusive time (ns, summed over threads);
``value=device``: its device exclusive time (ns; the kernel, memcpy and memset leaves under
their launch call). The tree is ``analyze tree``'s (``traceatlas.ops.cct``, backward threads
linked to their forward context); with several ranks every line starts with a ``rank N``
frame. Names are data: ``;`` in a name becomes ``:`` (it would split the frame), line
breaks and tabs become spaces, an empty name is ``[unnamed]``. Lines in depth-first order.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from traceatlas import tempfiles
from traceatlas.errors import InputError

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

VALUES = {"host": "host_exclusive_ns", "device": "device_exclusive_ns"}
UNNAMED = "[unnamed]"


def frame_name(name: pl.Expr) -> pl.Expr:
    """A frame name safe in a folded line: no ``;``, no line break or tab, never empty."""
    import polars as pl

    clean = name.str.replace_all(";", ":", literal=True).str.replace_all(r"[\r\n\t]", " ")
    return pl.when(clean == "").then(pl.lit(UNNAMED)).otherwise(clean)


def folded_lines(trace: Trace, value: str = "host") -> list[str]:
    """The folded lines of ``trace`` (see the module doc)."""
    import polars as pl

    from traceatlas.analysis.tree import top_down
    from traceatlas.ops.cct import ancestors, build_cct

    if value not in VALUES:
        raise InputError("--param value", f"{value!r} is not one of {', '.join(VALUES)}")
    cct = build_cct(trace)
    table = top_down(cct).with_row_index("_order")
    named = cct.nodes.select(pl.col("node_id").alias("ancestor_id"),
                             frame_name(pl.col("name")).alias("_f"), pl.col("depth"))
    paths = (ancestors(cct.nodes).join(named, on="ancestor_id")
             .filter(pl.col("depth") > 0).sort("depth").group_by("node_id")
             .agg(pl.col("_f").str.join(";").alias("_path")))
    several = len(trace.ranks) > 1
    prefix = (pl.lit("rank ") + pl.col("rank").cast(pl.String) + pl.lit(";")) if several \
        else pl.lit("")
    lines = (table.filter(pl.col(VALUES[value]) > 0)
             .join(paths, on="node_id", how="inner").sort("_order")
             .select(prefix + pl.col("_path") + pl.lit(" ")
                     + pl.col(VALUES[value]).cast(pl.String)))
    return lines.to_series().to_list()


class FoldedExporter:
    """Folded stacks: ``a;b;c <value>`` per line (FlameGraph, inferno, speedscope)."""

    name = "folded"
    description = "folded stacks of the calling-context tree (-p value=host|device, ns)"
    params: ClassVar[dict[str, tuple[str, ...]]] = {"value": tuple(VALUES)}

    def write(self, trace: Trace, out: Path, *, value: str = "host") -> list[Path]:
        """Write the folded stacks of ``trace`` to ``out`` atomically."""
        lines = folded_lines(trace, value)
        target = tempfiles.replaceable_file(Path(out))
        tempfiles.write_text_atomic(target, "".join(line + "\n" for line in lines))
        return [Path(out)]
