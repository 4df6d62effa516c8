"""The report's "Memory" card: per device a curve of allocated and reserved bytes over the
run's time axis with the peak marked, and the holders at the peak ("who holds my memory").

Data: the ``memory`` analysis (peaks, holders; shared cache) and the memory counter tracks
the Kineto reader writes (series ``<device> memory allocated (bytes)`` / ``... reserved
(bytes)``). Curves are downsampled for the SVG (``downsample``: the min and the max of
each time bucket, so the peak is never lost). Bytes are ints, times absolute ns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np

from traceatlas.advisor.memory_common import fmt_bytes
from traceatlas.report import svg

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.report.results import Results

MAX_POINTS = 1000
"""Points per curve at most in the SVG (two per bucket: its min and its max)."""
MAX_DEVICES = 8
"""Curves shown at most per run (GPUs first, then by rank); the rest are named in a note."""
TOP_HOLDERS = 10
"""Holder rows shown per device; the rest summed in one row."""
NO_EVENTS = "no memory events (record with profile_memory=True)"
SERIES_RE = re.compile(r"^(?P<label>.+) memory (?P<kind>allocated|reserved) \(bytes\)$")
"""The Kineto reader's memory counter series (``io.kineto_memory.series_name``)."""


@dataclass
class Holder:
    """Allocations live at the peak made under one (op, annotation): bytes, share of the
    peak, count (None for what was allocated before the trace began)."""

    op: str
    annotation: str
    live_bytes: int
    share: float
    allocations: int | None


@dataclass
class DeviceMemory:
    """One device of one rank: the peak and where it happened, the curves (absolute ns,
    bytes; downsampled), the holders at the peak."""

    rank: int
    device: str
    peak_bytes: int
    peak_ns: int
    step: int | None
    op: str
    annotation: str
    reserved_at_peak_bytes: int | None
    peak_reserved_bytes: int | None
    device_total_bytes: int | None
    allocated: list[list[float]] = field(default_factory=list)
    """[[ts_ns, ...], [bytes, ...]] (empty when the trace has no counter track)."""
    reserved: list[list[float]] = field(default_factory=list)
    holders: list[Holder] = field(default_factory=list)
    note: str = ""


@dataclass
class MemorySection:
    """Every device shown, and what was left out."""

    devices: list[DeviceMemory]
    notes: list[str] = field(default_factory=list)


def downsample(ts: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS
               ) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` samples of a time series: ``max_points // 2`` equal time
    buckets, from each the sample with the smallest and the one with the largest value
    (first ones on ties), in time order. The global min and max always survive."""
    n = ts.size
    if n <= max_points:
        return ts, values
    buckets = max(1, max_points // 2)
    lo, hi = int(ts.min()), int(ts.max())
    span = max(1, hi - lo)
    b = np.minimum((ts - lo).astype(np.float64) * buckets / span, buckets - 1).astype(np.int64)
    idx = np.arange(n)
    by_value = np.lexsort((idx, values, b))  # per bucket: ascending value, then index
    sorted_b = b[by_value]
    starts = np.flatnonzero(np.r_[True, sorted_b[1:] != sorted_b[:-1]])
    # the same buckets in the same order, by descending value: the first is the max
    by_value_desc = np.lexsort((idx, -values, b))
    keep = np.unique(np.r_[by_value[starts], by_value_desc[starts]])
    return ts[keep], values[keep]


def build(results: Results) -> MemorySection:
    """The memory section of one run; ``Unavailable`` when the trace has no memory events
    (``NO_EVENTS``) or the analysis failed."""
    import polars as pl

    from traceatlas.analysis.memory_events import MEMORY_EVENT
    from traceatlas.report.results import Unavailable

    trace = results.trace
    has = (trace.instants.filter(pl.col("name").cast(pl.String) == MEMORY_EVENT)
           .select("rank").head(1).collect().height)
    if not has:
        raise Unavailable(NO_EVENTS)
    result = results.get("memory")
    peaks = result.table.sort(pl.col("device_type") != 1, "rank", "device_type", "device_id")
    notes = []
    if peaks.height > MAX_DEVICES:
        rest = peaks[MAX_DEVICES:]
        notes.append(f"{rest.height} more device(s) not drawn: "
                     + ", ".join(f"rank {r} {d}" for r, d in rest.select("rank", "device")
                                 .head(12).iter_rows())
                     + (" ..." if rest.height > 12 else "")
                     + " (traceatlas analyze memory lists them all)")
        peaks = peaks.head(MAX_DEVICES)
    curves = _curves(trace, peaks)
    holders = result.extra["holders"]
    devices = []
    for row in peaks.iter_rows(named=True):
        dev = DeviceMemory(
            int(row["rank"]), str(row["device"]), int(row["peak_allocated_bytes"]),
            int(row["peak_ns"]), _int(row["step"]), str(row["op"] or ""),
            str(row["annotation"] or ""), _int(row["reserved_at_peak_bytes"]),
            _int(row["peak_reserved_bytes"]), _int(row["device_total_bytes"]),
            note=str(row["note"] or ""))
        key = (dev.rank, _key(dev.device))
        dev.allocated = curves.get((*key, "allocated"), [])
        dev.reserved = curves.get((*key, "reserved"), [])
        mine = holders.filter((pl.col("rank") == dev.rank) & (pl.col("device") == dev.device))
        dev.holders = _holders(mine)
        devices.append(dev)
    return MemorySection(devices, notes)


def _key(device: str) -> str:
    """A device label without spaces: the analysis' ``GPU0``/``GPU 0`` and the counter
    tracks' ``GPU 0`` meet."""
    return device.replace(" ", "")


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _holders(rows: pl.DataFrame) -> list[Holder]:
    out = [Holder(str(r["op"] or ""), str(r["annotation"] or ""), int(r["live_bytes"]),
                  float(r["share"] or 0.0), _int(r["allocations"]))
           for r in rows.head(TOP_HOLDERS).iter_rows(named=True)]
    if rows.height > TOP_HOLDERS:
        rest = rows[TOP_HOLDERS:]
        count = rest["allocations"].drop_nulls().sum()
        out.append(Holder(f"{rest.height} more (op, annotation) pairs", "",
                          int(rest["live_bytes"].sum()), float(rest["share"].sum()),
                          int(count) if count is not None else None))
    return out


def _curves(trace: Any, peaks: pl.DataFrame) -> dict[tuple[int, str, str], list[list[float]]]:
    """(rank, analysis device label, allocated|reserved) -> downsampled [ts, bytes]."""
    import polars as pl

    wanted = {(int(r), _key(str(d))) for r, d in peaks.select("rank", "device").iter_rows()}
    names = (trace.counters.select(pl.col("name").cast(pl.String)).unique().collect()
             ["name"].to_list())
    series = {}
    for name in names:
        m = SERIES_RE.match(name or "")
        if m:
            series[name] = (_key(m["label"]), m["kind"])
    if not series:
        return {}
    frame = (trace.counters.filter(pl.col("name").cast(pl.String).is_in(list(series)))
             .select("rank", pl.col("name").cast(pl.String), "ts_ns", "value")
             .collect())
    out: dict[tuple[int, str, str], list[list[float]]] = {}
    for (rank, name), part in frame.group_by("rank", "name"):
        label, kind = series[str(name)]
        if (int(str(rank)), label) not in wanted:
            continue
        part = part.sort("ts_ns", maintain_order=True)
        ts, values = downsample(part["ts_ns"].to_numpy(), part["value"].to_numpy())
        out[(int(str(rank)), label, kind)] = [ts.tolist(), values.tolist()]
    return out


# -- rendering -----------------------------------------------------------------------------

ALLOC_COLOUR, RESERVED_COLOUR, PEAK_COLOUR = "#4c78a8", "#f58518", "#d64545"


def byte_unit(max_bytes: float) -> tuple[str, float]:
    """(unit, bytes per unit) in binary units that keep ``max_bytes`` readable."""
    for unit, scale in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if max_bytes >= scale:
            return unit, scale
    return "B", 1.0


def curve_svg(dev: DeviceMemory, start_ns: int, span_ns: int, width: int = 760,
              height: int = 230) -> str:
    """Allocated and reserved bytes over [start_ns, start_ns + span_ns] (the run's time
    axis, the timeline overview's margins) as step lines, the peak as a red dot with its
    value, time, op and annotation."""
    left, right, top, bottom = 110, 20, 26, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    title = f"rank {dev.rank} {dev.device} memory over time"
    series = [(n, c, s) for n, c, s in (("allocated", ALLOC_COLOUR, dev.allocated),
                                        ("reserved", RESERVED_COLOUR, dev.reserved)) if s]
    top_bytes = max([dev.peak_bytes, *(max(s[1]) for _, _, s in series if s[1])])
    unit, scale = byte_unit(top_bytes)
    yticks = svg.nice_ticks(top_bytes / scale, 4)
    ymax = (yticks[-1] * scale) or 1.0
    span = max(1, span_ns)

    def px(t: float) -> float:
        return left + plot_w * min(1.0, max(0.0, (t - start_ns) / span))

    def py(v: float) -> float:
        return top + plot_h * (1 - v / ymax)

    body = svg._legend(left, 14, [("allocated", ALLOC_COLOUR), ("reserved", RESERVED_COLOUR),
                                  ("peak allocated", PEAK_COLOUR)])
    for t in yticks:
        body.append(f'<line x1="{left}" y1="{py(t * scale):.1f}" x2="{left + plot_w}" '
                    f'y2="{py(t * scale):.1f}" class="gridline"/>')
        body.append(svg._text(left - 4, py(t * scale) + 4, f"{t:g} {unit}", "end"))
    for name, colour, (ts, vs) in series:
        body.append(f'<path d="{_step_path(ts, vs, px, py, left + plot_w)}" fill="none" '
                    f'stroke="{colour}" stroke-width="1.5" class="mem-{name}">'
                    f"<title>{escape(name)}</title></path>")
    x, y = px(dev.peak_ns), py(dev.peak_bytes)
    where = peak_where(dev)
    tip = f"peak {fmt_bytes(dev.peak_bytes)} at {svg.fmt_ns(dev.peak_ns - start_ns)}{where}"
    body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{PEAK_COLOUR}" class="peak">'
                f"<title>{escape(tip)}</title></circle>")
    label = f"peak {fmt_bytes(dev.peak_bytes)} at {svg.fmt_ns(dev.peak_ns - start_ns)}"
    anchor = "end" if x > left + plot_w * 0.6 else "start"
    body.append(svg._text(x + (-7 if anchor == "end" else 7), max(top + 10, y - 6), label,
                          anchor))
    ticks = [t for t in svg.nice_ticks(span / svg.time_unit(span)[1]) if
             t * svg.time_unit(span)[1] <= span]
    tunit, tscale = svg.time_unit(span)
    body += svg._x_axis(left, plot_w, top + plot_h, [(t * tscale / span, f"{t:g}")
                                                     for t in ticks],
                        f"time since start ({tunit})")
    return svg._svg(width, height, body, title)


def _step_path(ts: list[float], vs: list[float], px: Any, py: Any, x_end: float) -> str:
    """SVG path of a counter: each value holds until the next sample (to ``x_end`` for the
    last)."""
    if not ts:
        return ""
    parts = [f"M{px(ts[0]):.1f},{py(vs[0]):.1f}"]
    for t, v in zip(ts[1:], vs[1:], strict=True):
        parts.append(f"H{px(t):.1f}V{py(v):.1f}")
    parts.append(f"H{x_end:.1f}")
    return "".join(parts)


def peak_where(dev: DeviceMemory) -> str:
    """``, step 3, in aten::mm (annotation forward)`` (only the parts known)."""
    text = f", step {dev.step}" if dev.step is not None else ""
    if dev.op:
        text += f", in {dev.op}"
    if dev.annotation:
        text += f" (annotation {dev.annotation})"
    return text


def html(section: MemorySection | None, reason: str, start_ns: int, span_ns: int,
         short: Any) -> str:
    """The inner HTML of the Memory card (``short``: the report's name shortener)."""
    if section is None:
        return f'<p class="na">not available: {escape(reason)}</p>'
    parts = []
    for dev in section.devices:
        total = (f" of {fmt_bytes(dev.device_total_bytes)} "
                 f"({dev.peak_bytes / dev.device_total_bytes:.0%})"
                 if dev.device_total_bytes else "")
        reserved = (f"; reserved then {fmt_bytes(dev.reserved_at_peak_bytes)}"
                    if dev.reserved_at_peak_bytes is not None else "")
        head = (f"rank {dev.rank} {dev.device}: peak allocated {fmt_bytes(dev.peak_bytes)}"
                f"{total} at {svg.fmt_ns(dev.peak_ns - start_ns)}{peak_where(dev)}{reserved}")
        note = f'<p class="hint">{escape(dev.note)}</p>' if dev.note else ""
        plot = (curve_svg(dev, start_ns, span_ns) if dev.allocated else
                '<p class="na">no memory counter track for this device</p>')
        parts.append(f'<div class="memdev"><h4>{escape(head)}</h4>{note}{plot}'
                     f"{_holders_table(dev, short)}</div>")
    notes = "".join(f'<p class="hint">{escape(n)}</p>' for n in section.notes)
    return "".join(parts) + notes


def _holders_table(dev: DeviceMemory, short: Any) -> str:
    if not dev.holders:
        return '<p class="na">no allocation live at the peak</p>'
    head = ('<tr><th class="name">op</th><th class="name">annotation</th><th>bytes</th>'
            "<th>share of peak</th><th>allocations</th></tr>")
    rows = "".join(
        f'<tr><td class="name" title="{escape(h.op)}">{escape(short(h.op))}</td>'
        f'<td class="name" title="{escape(h.annotation)}">{escape(short(h.annotation))}</td>'
        f"<td>{fmt_bytes(h.live_bytes)}</td><td>{h.share:.1%}</td>"
        f"<td>{'' if h.allocations is None else f'{h.allocations:,}'}</td></tr>"
        for h in dev.holders)
    return (f'<h4 class="sub">Who holds the memory at the peak</h4>'
            f'<table class="data holders">{head}{rows}</table>')


# -- memory findings -----------------------------------------------------------------------

COST_WORDS = {"memory_leak": "grows {}", "memory_storm": "allocates {} per step",
              "memory_fragmentation": "{} reserved but not allocated"}
"""How a memory finding's ``cost_bytes`` reads, per rule (default: ``holds {}``)."""


def cost_text(f: Any) -> str:
    """``costs 1.2 ms`` for a time finding; for a memory finding its bytes, e.g.
    ``holds 320 MiB, 4% of GPU memory`` (the share when the device's memory is known)."""
    if f.cost_bytes is None:
        return f"costs {svg.fmt_ns(f.cost_ns)}"
    text = COST_WORDS.get(f.rule, "holds {}").format(fmt_bytes(f.cost_bytes))
    if f.device_bytes:
        share = f.cost_bytes / f.device_bytes
        text += f", {share:.1%}" if share < 0.01 else f", {share:.0%}"
        text += " of GPU memory"
    return text


def device_bytes(findings: list[Any], results: Results) -> None:
    """Set ``device_bytes`` of the memory findings: the largest GPU memory
    (``deviceProperties`` totalGlobalMem, from the ``memory`` analysis) on their ranks."""
    import polars as pl

    from traceatlas.report.results import Unavailable

    try:
        peaks = results.get("memory").table
    except Unavailable:
        return
    gpus = peaks.filter(pl.col("device_total_bytes").is_not_null())
    for f in findings:
        if f.cost_bytes is None:
            continue
        mine = gpus.filter(pl.col("rank").is_in(f.ranks)) if f.ranks else gpus
        top = mine["device_total_bytes"].max()
        f.device_bytes = int(str(top)) if top is not None else None
