// Data for the visible rows: pyramid tiles, counter tiles, raw events and rank groups.
//
// Tiles are cached per (requested level, track, chunk of CHUNK bins); a missing chunk is
// drawn from a coarser cached level meanwhile. Tracks whose finest stored level is coarser
// than the requested one are "raw": their events come from /api/events for the window
// (padded by half a window each side, reused while the view stays inside it). Requests
// are debounced; stale ones (another level, a window left behind) are aborted.
// All times here are ns relative to the run's origin (Numbers; see api.js).

import { get, abs, rel, relColumn } from "./api.js";

export const CHUNK = 512;
const MAX_TILES = 20000;  // cached (kind, level, track, chunk) entries
const MAX_LEVEL = 30;
const DEBOUNCE_MS = 60;

/** Width in ns of one bin of `level` (1024 * 4**level), as a Number. */
export function binNs(level) {
  return 1024 * Math.pow(4, level);
}

/** The finest level whose bin is at least window/pixels ns (clamped to 0..30); the same
 * rule as view/levels.py level_for. */
export function levelFor(windowNs, pixels) {
  for (let level = 0; level <= MAX_LEVEL; level++) {
    if (binNs(level) * pixels >= windowNs) return level;
  }
  return MAX_LEVEL;
}

function toNum(v) {
  return typeof v === "bigint" ? Number(v) : v;
}

/** Columns of one track's tile reply -> typed arrays (bin starts relative to origin). */
function tileColumns(t, kind) {
  const bn = toNum(t.bin_ns);
  const n = t.bin.length;
  const start = new Float64Array(n);
  for (let i = 0; i < n; i++) start[i] = toNum(t.bin[i]) * bn;
  const out = { binNs: bn, level: t.level, raw: !!t.raw, start, n };
  if (kind === "counters") {
    out.series = t.series; out.min = t.min; out.mean = t.mean; out.max = t.max;
    out.seriesNames = t.series_names || [];
  } else {
    out.cat = t.cat; out.busy = t.busy_ns.map(toNum); out.count = t.count; out.name = t.name;
  }
  return out;
}

export class DataStore {
  /** `meta` from /api/meta (origin as BigInt), `onData` called when something arrived. */
  constructor(meta, tracksById, onData, onError) {
    this.origin = BigInt(meta.origin_ns);
    this.tracksById = tracksById;
    this.onData = onData;
    this.onError = onError;
    this.names = new Map();           // name index -> text
    this.seenCats = new Set();        // category names met in tiles or events (legend)
    this.categories = meta.categories || [];
    this.tiles = new Map();           // key -> columns | "pending"
    this.events = null;               // {s, e, tracks:Set, level, truncated, per: Map}
    this.groups = null;               // {s, e, key, level, reply}
    this.inflight = new Set();        // {ctrl, level, kind}
    this.timer = null;
  }

  key(kind, level, track, chunk) {
    return `${kind}|${level}|${track}|${chunk}`;
  }

  /** Cached tile chunks covering [s, e) at `level` for a track; falls back to coarser
   * levels for missing chunks. Returns a list of column objects. */
  chunksFor(kind, level, track, s, e) {
    const out = [];
    const span = CHUNK * binNs(level);
    const c0 = Math.floor(s / span), c1 = Math.floor(e / span);
    for (let c = c0; c <= c1; c++) {
      let got = this.tiles.get(this.key(kind, level, track, c));
      for (let up = 1; (!got || got === "pending") && up <= 4 && level + up <= MAX_LEVEL; up++) {
        got = this.tiles.get(this.key(kind, level + up, track, Math.floor(c / Math.pow(4, up))));
      }
      if (got && got !== "pending" && !out.includes(got)) out.push(got);
    }
    return out;
  }

  /** Ask for whatever the frame needs (debounced). `need` = {level, s, e, tracks: [{id,
   * kind}], groups: {kind, ranks:[lo,hi], groups} | null}. */
  want(need) {
    const g = need.groups;
    const key = [need.level, need.s, need.e, need.tracks.map((t) => t.id).join(","),
      g ? `${g.kind}${g.ranks}${g.groups}` : ""].join("|");
    if (key === this.needKey) return;  // same frame data as last time: nothing new to ask
    this.needKey = key;
    this.need = need;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => { this.timer = null; this.fetchNeeded(); }, DEBOUNCE_MS);
  }

  abortStale(level) {
    for (const req of [...this.inflight]) {
      if (req.level !== null && req.level !== level) { req.ctrl.abort(); this.inflight.delete(req); }
    }
  }

  /** Bound the tile cache: past MAX_TILES entries the oldest quarter goes (Map order is
   * insertion order; pending entries are kept). */
  evict() {
    if (this.tiles.size <= MAX_TILES) return;
    let drop = Math.floor(this.tiles.size / 4);
    for (const [k, v] of this.tiles) {
      if (drop-- <= 0) break;
      if (v !== "pending") this.tiles.delete(k);
    }
  }

  fetchNeeded() {
    const need = this.need;
    if (!need) return;
    this.evict();
    this.abortStale(need.level);
    const span = CHUNK * binNs(need.level);
    const c0 = Math.floor(need.s / span), c1 = Math.floor(need.e / span);
    for (const kind of ["tiles", "counters"]) {
      const ids = [];
      let lo = Infinity, hi = -Infinity;
      for (const t of need.tracks) {
        if ((t.kind === "counter") !== (kind === "counters")) continue;
        let missing = false;
        for (let c = c0; c <= c1; c++) {
          if (!this.tiles.has(this.key(kind, need.level, t.id, c))) {
            missing = true; lo = Math.min(lo, c); hi = Math.max(hi, c);
          }
        }
        if (missing) ids.push(t.id);
      }
      if (ids.length) this.fetchTiles(kind, need.level, ids, lo, hi);
    }
    const raw = need.tracks.filter((t) => t.kind !== "counter" && this.isRaw(t.id, need.level));
    if (raw.length) this.fetchEvents(need, raw.map((t) => t.id));
    if (need.groups) this.fetchGroups(need);
  }

  /** True when the level is finer than what the pyramid stores for the track. */
  isRaw(id, level) {
    const t = this.tracksById.get(id);
    return !!t && level < (t.finest_level ?? 0);
  }

  async run(level, fn) {
    const ctrl = new AbortController();
    const req = { ctrl, level };
    this.inflight.add(req);
    try {
      await fn(ctrl.signal);
      this.onData();
    } catch (err) {
      if (err.name !== "AbortError") this.onError(err);
    } finally {
      this.inflight.delete(req);
    }
  }

  fetchTiles(kind, level, ids, c0, c1) {
    const span = CHUNK * binNs(level);
    for (const id of ids) {
      for (let c = c0; c <= c1; c++) this.tiles.set(this.key(kind, level, id, c), "pending");
    }
    const s = c0 * span, e = (c1 + 1) * span;
    const query = { level, start_ns: abs(s, this.origin), end_ns: abs(e, this.origin),
      tracks: ids.join(",") };
    this.run(level, async (signal) => {
      let reply;
      try {
        reply = await get(kind, query, signal);
      } catch (err) {
        for (const id of ids) {
          for (let c = c0; c <= c1; c++) this.tiles.delete(this.key(kind, level, id, c));
        }
        throw err;
      }
      for (const [k, v] of Object.entries(reply.names || {})) this.names.set(Number(k), v);
      for (const t of reply.tracks) {
        const cols = tileColumns(t, kind);
        if (cols.cat) for (const c of new Set(cols.cat)) this.seenCats.add(this.categories[c] || "other");
        const per = new Map();
        for (let c = c0; c <= c1; c++) per.set(c, []);
        // a bin may be wider than a chunk (a raw track answered at its coarser finest
        // level): it goes into every chunk it overlaps (drawBins skips the duplicates)
        for (let i = 0; i < cols.n; i++) {
          const b0 = Math.max(cols.start[i], s), b1 = Math.min(cols.start[i] + cols.binNs, e);
          const first = Math.min(c1, Math.max(c0, Math.floor(b0 / span)));
          const last = Math.min(c1, Math.max(first, Math.ceil(b1 / span) - 1));
          for (let c = first; c <= last; c++) per.get(c).push(i);
        }
        for (const [c, idx] of per) this.tiles.set(this.key(kind, level, t.id, c), pick(cols, idx));
      }
      for (const id of ids) {  // tracks the reply left out: nothing there
        for (let c = c0; c <= c1; c++) {
          const k = this.key(kind, level, id, c);
          if (this.tiles.get(k) === "pending") this.tiles.set(k, pick({ n: 0, start: [] }, []));
        }
      }
    });
  }

  eventsCover(need, ids) {
    const ev = this.events;
    if (!ev || need.s < ev.s || need.e > ev.e) return false;
    if (!ids.every((id) => ev.tracks.has(id))) return false;
    if (ev.truncated && (need.e - need.s) < (ev.e - ev.s) / 6) return false;
    return true;
  }

  fetchEvents(need, ids) {
    if (this.eventsCover(need, ids) || (this.eventsPending && this.eventsPending.covers(need, ids))) return;
    if (this.eventsPending) this.eventsPending.ctrlAbort();
    const w = need.e - need.s;
    const s = need.s - w / 2, e = need.e + w / 2;
    const pending = { covers: (n, i) => n.s >= s && n.e <= e && i.every((x) => ids.includes(x)),
      ctrlAbort: () => {} };
    this.eventsPending = pending;
    const query = { start_ns: abs(s, this.origin), end_ns: abs(e, this.origin),
      tracks: ids.join(","), limit: 20000 };
    this.run(null, async (signal) => {
      const ctrl = new AbortController();
      signal.addEventListener("abort", () => ctrl.abort());
      pending.ctrlAbort = () => ctrl.abort();
      try {
        const r = await get("events", query, ctrl.signal);
        const per = new Map();
        const st = relColumn(r.start_ns, this.origin), en = relColumn(r.end_ns, this.origin);
        for (let i = 0; i < r.track.length; i++) {
          const id = toNum(r.track[i]);
          if (!per.has(id)) per.set(id, []);
          this.seenCats.add(r.category[i]);
          per.get(id).push({ start: st[i], end: en[i], name: r.name[i], category: r.category[i],
            depth: toNum(r.depth[i]), absStart: r.start_ns[i], absEnd: r.end_ns[i] });
        }
        this.events = { s, e, tracks: new Set(ids), truncated: !!r.truncated, per };
      } finally {
        if (this.eventsPending === pending) this.eventsPending = null;
      }
    });
  }

  fetchGroups(need) {
    const g = need.groups;
    const key = `${need.level}|${g.kind}|${g.ranks[0]}-${g.ranks[1]}|${g.groups}`;
    const cur = this.groups;
    if (cur && cur.key === key && need.s >= cur.s && need.e <= cur.e) return;
    if (this.groupsPending === key + need.s) return;
    const w = need.e - need.s;
    const s = need.s - w / 2, e = need.e + w / 2;
    this.groupsPending = key + need.s;
    const query = { level: need.level, start_ns: abs(s, this.origin), end_ns: abs(e, this.origin),
      kind: g.kind, ranks: `${g.ranks[0]}-${g.ranks[1]}`, groups: g.groups };
    this.run(need.level, async (signal) => {
      const r = await get("rows", query, signal);
      this.groups = { key, s, e, binNs: toNum(r.bin_ns), reply: r.groups };
    });
  }

  /** Events drawn for a track in the current result, or null when not fetched. */
  eventsFor(id) {
    const ev = this.events;
    if (!ev || !ev.tracks.has(id)) return null;
    return { list: ev.per.get(id) || [], truncated: ev.truncated };
  }

  /** Group rows matching the current need, or null. */
  groupRows(level, g) {
    const key = `${level}|${g.kind}|${g.ranks[0]}-${g.ranks[1]}|${g.groups}`;
    return this.groups && this.groups.key === key ? this.groups : null;
  }

  nameOf(i) {
    return this.names.get(toNum(i)) ?? `#${i}`;
  }

  relOf(absNs) {
    return rel(absNs, this.origin);
  }
}

function pick(cols, idx) {
  const out = { binNs: cols.binNs, level: cols.level, raw: cols.raw, n: idx.length,
    start: Float64Array.from(idx, (i) => cols.start[i]) };
  for (const k of ["cat", "busy", "count", "name", "series", "min", "mean", "max"]) {
    if (cols[k]) out[k] = idx.map((i) => cols[k][i]);
  }
  out.seriesNames = cols.seriesNames;
  return out;
}
