// Vertical layout: which rows are drawn, in what order, at which y (CSS px).
//
// Rows are grouped rank -> device -> stream (a device's counters, e.g. "GPU 0 memory
// allocated", after its streams), then host counters, then host threads, then other tracks. Three modes, chosen from the visible rank range [r0, r1) and the canvas height:
//  - "lanes": every visible rank has a header row (its synthetic rank_device summary, or
//    rank_host when it has no device) and, when expanded, one lane per track; collapsed
//    ranks show the header plus a host summary row;
//  - "groups": more ranks than fit at one row each: a row is a group of consecutive ranks
//    drawn from /api/rows (mean busy as intensity, min..max as a band).
// Zooming the rank axis (ctrl+wheel, scrollbar) narrows [r0, r1) until ranks fit as rows.

export const HEADER_H = 18;
export const ROW_H = 13;
export const COUNTER_H = 30;
export const GROUP_MIN_H = 14;
const MAX_ROWS = { host_thread: 5, gpu_stream: 3, device: 3, other: 2 };
const SMALL_TRACK = 16;
const KIND_ORDER = { device: 0, gpu_stream: 1, counter: 2, host_thread: 3, other: 4 };
export const QUIET_EVENTS = SMALL_TRACK;  // a stream with at most this many events is "quiet"
export const IDLE_H = ROW_H;

/** Index the tracks: per rank, its summary rows, its lanes in display order (GPU streams
 * busiest first: most events) and `quiet`: its streams of at most QUIET_EVENTS events
 * (none included), shown as one collapsed line when there are 2 or more of them. */
export function indexTracks(tracks) {
  const byRank = new Map();
  for (const t of tracks) {
    if (!byRank.has(t.rank)) byRank.set(t.rank, { device: null, host: null, lanes: [], quiet: [] });
    const r = byRank.get(t.rank);
    if (t.kind === "rank_device") r.device = t;
    else if (t.kind === "rank_host") r.host = t;
    else if (t.kind === "gpu_stream" && (t.events ?? 0) <= QUIET_EVENTS) r.quiet.push(t);
    else if (t.events > 0 || (t.kind === "counter" && (t.series || []).length > 0)) r.lanes.push(t);
  }
  // a device's counters (its memory curves, metrics) sit under that device, after its streams
  const onDevice = (t) => t.kind === "counter" && t.device >= 0;
  const group = (t) => (onDevice(t) ? KIND_ORDER.gpu_stream : (KIND_ORDER[t.kind] ?? 9));
  const order = (a, b) => group(a) - group(b) || a.device - b.device
    || onDevice(a) - onDevice(b)
    || (a.kind === "gpu_stream" ? (b.events ?? 0) - (a.events ?? 0) : 0)
    || a.stream - b.stream || a.id - b.id;
  for (const r of byRank.values()) {
    if (r.quiet.length < 2) {  // one quiet stream: an ordinary lane (when it has events)
      r.lanes.push(...r.quiet.filter((t) => t.events > 0));
      r.quiet = [];
    }
    const devices = new Set([...r.lanes, ...r.quiet].filter((t) => t.device >= 0).map((t) => t.device));
    r.manyDevices = devices.size > 1;  // then lane labels name their device
    r.lanes.sort(order);
    r.quiet.sort(order);
  }
  return byRank;
}

/** Depth rows drawn for a lane (raw events deeper than that share the last row). */
export function depthRows(track) {
  if ((track.events ?? 0) <= SMALL_TRACK) return 1;  // a handful of events: one thin row
  const cap = MAX_ROWS[track.kind] ?? 2;
  return Math.max(1, Math.min(cap, (track.max_depth ?? 0) + 1));
}

function laneHeight(track) {
  if (track.kind === "counter") return COUNTER_H;
  return depthRows(track) * ROW_H + 2;
}

/** Height in px of one rank's rows (collapsed or expanded). */
function rankRows(rank, info, expanded, open) {
  const rows = [];
  const head = info.device || info.host;
  rows.push({ kind: "header", rank, track: head ? head.id : null, h: HEADER_H,
    label: `rank ${rank}`, sub: head === info.device ? "GPU busy" : "host busy", depth: 1 });
  if (!expanded) {
    if (info.device && info.host) {
      rows.push({ kind: "summary", rank, track: info.host.id, h: ROW_H + 2,
        label: "  host", sub: "host busy", depth: 1 });
    }
    return rows;
  }
  const lane = (t) => ({ kind: t.kind === "counter" ? "counter" : "lane", rank, track: t.id,
    h: laneHeight(t), label: "  " + (info.manyDevices && t.device >= 0 && t.kind !== "device"
      ? `dev ${t.device} · ${t.name}` : t.name), sub: t.kind, depth: depthRows(t), info: t });
  const quiet = info.quiet || [];
  // the quiet streams' line goes after the rank's last busy stream (before its counters)
  let at = info.lanes.findIndex((t) => (KIND_ORDER[t.kind] ?? 9) > KIND_ORDER.gpu_stream);
  if (at < 0) at = info.lanes.length;
  info.lanes.forEach((t, i) => {
    if (i === at) rows.push(...quietRows(rank, quiet, open, lane));
    rows.push(lane(t));
  });
  if (at === info.lanes.length) rows.push(...quietRows(rank, quiet, open, lane));
  return rows;
}

/** The collapsed line of a rank's quiet streams (click: open), then the streams if open. */
function quietRows(rank, quiet, open, lane) {
  if (quiet.length === 0) return [];
  const most = Math.max(...quiet.map((t) => t.events ?? 0));
  const what = most === 0 ? `${quiet.length} idle streams`
    : `${quiet.length} quiet streams (≤${most} events)`;
  const rows = [{ kind: "idle", rank, track: null, h: IDLE_H, depth: 1, sub: "quiet",
    label: `  ${open ? "▾" : "▸"} ${what}` }];
  if (open) rows.push(...quiet.map(lane));
  return rows;
}

/**
 * Lay out the rows. `view` = {r0, r1, expanded: Set, quietOpen: Set (ranks whose quiet
 * streams are shown), scrollY}; `ranks` = sorted rank list;
 * `height` = px available. Returns {mode, rows (with y), total, groups}.
 */
export function layout(byRank, ranks, view, height) {
  const visible = ranks.slice(view.r0, view.r1);
  const collapsedH = HEADER_H + ROW_H + 2;
  if (visible.length * collapsedH > height && visible.length > 1) {
    const groups = Math.max(1, Math.min(visible.length, Math.floor(height / GROUP_MIN_H)));
    const h = height / groups;
    const rows = [];
    // as numpy.array_split (the server's split): the first n % groups groups hold one more
    const base = Math.floor(visible.length / groups), extra = visible.length % groups;
    let lo = 0;
    for (let g = 0; g < groups; g++) {
      const hi = lo + base + (g < extra ? 1 : 0) - 1;
      const a = visible[lo], b = visible[hi];
      rows.push({ kind: "group", index: g, group: [a, b], rank: a, track: null, y: g * h, h,
        depth: 1, label: a === b ? `rank ${a}` : `ranks ${a}-${b}`, sub: "mean busy" });
      lo = hi + 1;
    }
    return { mode: "groups", rows, total: height, groups };
  }
  const rows = [];
  let y = 0;
  // Few collapsed ranks: stretch their summary rows (up to 3x) to use the height.
  const anyExpanded = visible.some((r) => view.expanded.has(r));
  const stretch = anyExpanded ? 1
    : Math.max(1, Math.min(3, height / Math.max(1, visible.length * collapsedH)));
  for (const rank of visible) {
    const info = byRank.get(rank) || { device: null, host: null, lanes: [], quiet: [] };
    const open = !!view.quietOpen && view.quietOpen.has(rank);
    for (const row of rankRows(rank, info, view.expanded.has(rank), open)) {
      row.h = Math.floor(row.h * stretch);
      row.y = y - view.scrollY;
      y += row.h;
      rows.push(row);
    }
  }
  return { mode: "lanes", rows, total: y, groups: 0 };
}

/** The row under y (CSS px), or null. */
export function rowAt(rows, y) {
  for (const row of rows) {
    if (y >= row.y && y < row.y + row.h) return row;
  }
  return null;
}
