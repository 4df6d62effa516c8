// traceatlas view: the page's controller. Loads /api/meta and /api/tracks, owns the view
// state (window in ns relative to the run's origin, visible rank range, expanded ranks,
// row scroll, selection, colour mode, theme), redraws on requestAnimationFrame only when
// something changed, and exposes window.__traceatlas for the browser tests:
//   {start_ns, end_ns (absolute ns as decimal strings: exact), level, mode, drawn: [{track,
//    name, start_ns, end_ns, x, y, w, h (box in canvas CSS px)}] raw events drawn in the
//    last frame, visible_tracks, rows (labels), row_h (their heights, CSS px), sel, frames,
//    pending (requests in flight or due), lastError, ready, first_frame_ms (ms from
//    navigation start to the first frame drawn with nothing pending), critical (the
//    critical path overlay: critical.js)}.

import { get, abs, rel } from "./api.js";
import { indexTracks, layout, rowAt, HEADER_H } from "./layout.js";
import { DataStore, levelFor } from "./tiles.js";
import { drawFrame, fitCanvas, fmtDur, fmtBytes, categoryColor, LABEL_W, AXIS_H } from "./render.js";
import { attach } from "./interact.js";
import { Minimap } from "./minimap.js";
import { showEvent } from "./details.js";
import { showSelection, hideSelection } from "./selection.js";
import { attachSearch } from "./search.js";
import { readHash, writeHash } from "./url.js";
import { CriticalOverlay } from "./critical.js";

const MIN_WINDOW_NS = 200;
const state = window.__traceatlas = { start_ns: null, end_ns: null, level: null, mode: null,
  drawn: [], frames: 0, pending: 0, lastError: null, ready: false, first_frame_ms: null };

const canvas = document.getElementById("timeline");
const tooltip = document.getElementById("tooltip");
const scrollbar = document.getElementById("rank-scroll");
const status = document.getElementById("status");

const v = { start: 0, end: 1, r0: 0, r1: 1, expanded: new Set(), quietOpen: new Set(), scrollY: 0, sel: null,
  highlight: null, colorMode: "category", theme: "light" };
let meta, tracksById, byRank, ranks, data, minimap, span, origin, colors, critical;
let lastFrame = null;  // {hits, lay, width, height}
let dirty = true;

function setError(err) {
  state.lastError = String((err && err.message) || err);
  status.textContent = state.lastError;
  status.classList.add("error");
}

function readColors() {
  const cs = getComputedStyle(document.documentElement);
  const c = (n) => cs.getPropertyValue(n).trim();
  const dark = v.theme === "dark";
  colors = { bg: c("--bg"), panel: c("--panel"), laneA: c("--lane-a"), laneB: c("--lane-b"),
    grid: c("--grid"), label: c("--label"), muted: c("--muted"), rank: c("--rank"),
    sel: c("--sel"), selEdge: c("--sel-edge"), hl: c("--hl"),
    busyRGB: dark ? "110, 200, 120" : "46, 125, 50",
    band: dark ? "rgba(255,255,255,0.75)" : "rgba(0,0,0,0.55)" };
}

function markDirty() {
  if (!dirty) { dirty = true; requestAnimationFrame(frame); }
}

function changed() {
  markDirty();
  const r = ranks.length && (v.r0 > 0 || v.r1 < ranks.length) ? [ranks[v.r0], ranks[v.r1 - 1]] : null;
  writeHash({ start: abs(v.start, origin), end: abs(v.end, origin), ranks: r,
    sel: v.sel ? [abs(v.sel[0], origin), abs(v.sel[1], origin)] : null,
    theme: v.theme === "dark" ? "dark" : null, cp: critical ? critical.hashValue() : null });
}

function setWindow(s, e) {
  let w = Math.max(MIN_WINDOW_NS, e - s);
  w = Math.min(w, span * 1.2);
  const lo = -span * 0.1, hi = span * 1.1;
  s = Math.min(Math.max(s, lo), hi - w);
  v.start = Math.round(s); v.end = Math.round(s + w);  // whole ns: the window is exact
  changed();
}

function plotWidth() {
  return Math.max(50, canvas.clientWidth - LABEL_W);
}

const controller = {
  zoomAt(x, factor) {
    const t = v.start + ((Math.max(x, LABEL_W) - LABEL_W) / plotWidth()) * (v.end - v.start);
    setWindow(t - (t - v.start) * factor, t + (v.end - t) * factor);
  },
  zoomCentre(factor) { controller.zoomAt(LABEL_W + plotWidth() / 2, factor); },
  panPx(dx) {
    const d = (dx / plotWidth()) * (v.end - v.start);
    setWindow(v.start + d, v.end + d);
  },
  panFraction(f) { controller.panPx(f * plotWidth()); },
  centreAt(t) { const w = v.end - v.start; setWindow(t - w / 2, t + w / 2); },
  scrollRows(dy) {
    if (!lastFrame) return;
    if (lastFrame.lay.mode === "groups") {
      const n = v.r1 - v.r0, step = Math.sign(dy) * Math.max(1, Math.round(n / 10));
      v.r0 = Math.min(Math.max(0, v.r0 + step), ranks.length - n); v.r1 = v.r0 + n;
    } else {
      const maxY = Math.max(0, lastFrame.lay.total - (lastFrame.height - AXIS_H));
      v.scrollY = Math.min(Math.max(0, v.scrollY + dy), maxY);
    }
    changed();
  },
  rankZoom(y, factor) {
    const n = v.r1 - v.r0;
    let m = Math.round(n * factor);
    if (m === n) m = factor < 1 ? n - 1 : n + 1;
    m = Math.min(Math.max(1, m), ranks.length);
    const frac = Math.min(1, Math.max(0, (y - AXIS_H) / Math.max(1, canvas.clientHeight - AXIS_H)));
    const anchor = v.r0 + frac * n;
    v.r0 = Math.min(Math.max(0, Math.round(anchor - frac * m)), ranks.length - m);
    v.r1 = v.r0 + m;
    v.scrollY = 0;
    changed();
  },
  hover(x, y) { hover(x, y); },
  click(x, y) { click(x, y); },
  selecting(x0, x1) { v.sel = toTimes(x0, x1); markDirty(); },
  selectDone(x0, x1) {
    v.sel = toTimes(x0, x1);
    changed();
    const sub = v.r0 > 0 || v.r1 < ranks.length ? `${ranks[v.r0]}-${ranks[v.r1 - 1]}` : undefined;
    showSelection(abs(v.sel[0], origin), abs(v.sel[1], origin), sub);
    critical.regionChanged();
  },
  clearSelection() { v.sel = null; hideSelection(); changed(); if (critical) critical.regionChanged(); },
};

function toTimes(x0, x1) {
  const T = (x) => v.start + ((Math.max(x, LABEL_W) - LABEL_W) / plotWidth()) * (v.end - v.start);
  return [Math.min(T(x0), T(x1)), Math.max(T(x0), T(x1))];
}

function hitAt(x, y) {
  if (!lastFrame) return null;
  const yy = y - AXIS_H;
  const rh = lastFrame.hits.find((h) => yy >= h.row.y && yy < h.row.y + h.row.h);
  if (!rh) return null;
  let best = null;
  for (const it of rh.items) {
    if (x < it.x0 - 1 || x > it.x1 + 1) continue;
    if (it.type === "event") {
      if (yy < it.y0 || yy >= it.y1) continue;
      if (!best || best.type !== "event" || it.x1 - it.x0 < best.x1 - best.x0) best = it;
    } else if (!best) best = it;
  }
  return { row: rh.row, item: best };
}

function tooltipLines(row, it) {
  const info = row.track !== null ? tracksById.get(row.track) : null;
  const where = info ? `rank ${info.rank} · ${info.name}` : row.label.trim();
  if (it.type === "event") {
    const e = it.ev;
    const lines = [e.name, `${e.category} · ${fmtDur(e.end - e.start)}`, where,
      `start +${fmtDur(e.start)} · depth ${e.depth}`];
    const inside = enclosing(row.track, e);
    if (inside.length) lines.push(`in: ${inside.join(" › ")}`);
    return lines;
  }
  if (it.type === "bin") {
    return [data.nameOf(it.name), `${meta.categories[it.cat] || "?"} · busy ${(100 * it.busy / it.binNs).toFixed(1)}%` +
      ` of ${fmtDur(it.binNs)} · ${it.count} started`, where, `at +${fmtDur(it.start)}`];
  }
  if (it.type === "counter") {
    const v = it.series.endsWith("(bytes)") ? fmtBytes : (x) => x.toPrecision(4);
    return [it.series, `min ${v(it.min)} · mean ${v(it.mean)} · max ${v(it.max)}`, where];
  }
  return [`ranks ${it.ranks[0]}-${it.ranks[1]}`, `busy mean ${(100 * it.mean).toFixed(1)}% ` +
    `(min ${(100 * it.min).toFixed(1)}%, max ${(100 * it.max).toFixed(1)}%)`, `at +${fmtDur(it.start)}`];
}

let mouse = null;  // last hover position, re-hit after each frame (the data under it moves)

/** Names of the events enclosing `e` on its track (shallower depth, covering its start):
 * the annotation / op it runs under, outermost first. */
function enclosing(track, e) {
  const ev = data.eventsFor(track);
  if (!ev || e.depth <= 0) return [];
  const byDepth = new Map();
  for (const o of ev.list) {
    if (o.depth < e.depth && o.start <= e.start && o.end >= e.end && !byDepth.has(o.depth)) {
      byDepth.set(o.depth, o.name);
    }
  }
  return [...byDepth.keys()].sort((a, b) => a - b).map((d) => byDepth.get(d));
}

function hover(x, y) {
  mouse = x >= 0 ? { x, y } : null;
  const h = x >= LABEL_W ? hitAt(x, y) : null;
  if (!h || !h.item) { tooltip.hidden = true; return; }
  tooltip.textContent = tooltipLines(h.row, h.item).join("\n");
  tooltip.hidden = false;
  const wrap = canvas.parentElement.getBoundingClientRect();
  const left = Math.min(x + 14, wrap.width - tooltip.offsetWidth - 4);
  const top = y + 16 + tooltip.offsetHeight > wrap.height ? y - tooltip.offsetHeight - 8 : y + 16;
  tooltip.style.left = `${Math.max(0, left)}px`;
  tooltip.style.top = `${Math.max(0, top)}px`;
}

function click(x, y) {
  if (!lastFrame) return;
  const line = rowAt(lastFrame.lay.rows, y - AXIS_H);
  if (line && line.kind === "idle") {  // a rank's quiet streams: open / close them
    if (v.quietOpen.has(line.rank)) v.quietOpen.delete(line.rank); else v.quietOpen.add(line.rank);
    changed();
    return;
  }
  if (x < LABEL_W) {
    const row = rowAt(lastFrame.lay.rows, y - AXIS_H);
    if (row && row.kind === "header") {
      if (v.expanded.has(row.rank)) v.expanded.delete(row.rank); else v.expanded.add(row.rank);
      changed();
    } else if (row && row.kind === "group") {
      v.r0 = ranks.indexOf(row.group[0]); v.r1 = ranks.indexOf(row.group[1]) + 1; v.scrollY = 0;
      changed();
    }
    return;
  }
  const h = hitAt(x, y);
  if (h && h.item && h.item.type === "event") {
    v.highlight = { track: h.row.track, start: h.item.ev.start };
    markDirty();
    showEvent(h.row.track, h.item.ev, tracksById, goTo);
  }
}

/** Move the view onto [a, b] (absolute ns) on viewer track `track`, expanding its rank. */
function goTo(a, b, track) {
  const s = rel(a, origin), e = rel(b, origin);
  const w = Math.max((e - s) * 8, 20000);
  const info = tracksById.get(track);
  if (info) {
    const i = ranks.indexOf(info.rank);
    if (i >= 0 && (i < v.r0 || i >= v.r1)) {
      const n = Math.min(v.r1 - v.r0, 8);
      v.r0 = Math.max(0, Math.min(i, ranks.length - n)); v.r1 = v.r0 + n;
    }
    if (!["rank_device", "rank_host"].includes(info.kind)) v.expanded.add(info.rank);
    const r = byRank.get(info.rank);
    if (r && r.quiet.some((t) => t.id === track)) v.quietOpen.add(info.rank);
    v.pendingScrollTo = track;
  }
  v.highlight = { track, start: s };
  setWindow((s + e) / 2 - w / 2, (s + e) / 2 + w / 2);
}

function frame() {
  dirty = false;
  const { ctx, width, height } = fitCanvas(canvas);
  const level = levelFor(v.end - v.start, plotWidth());
  const plotH = height - AXIS_H;
  let lay = layout(byRank, ranks, v, plotH);
  if (v.pendingScrollTo !== undefined) {
    const row = lay.rows.find((r) => r.track === v.pendingScrollTo);
    if (row && (row.y < 0 || row.y + row.h > plotH)) {
      v.scrollY = Math.max(0, v.scrollY + row.y - plotH / 3);
      lay = layout(byRank, ranks, v, plotH);
    }
    v.pendingScrollTo = undefined;
  }
  const maxY = Math.max(0, lay.total - plotH);
  if (lay.mode === "lanes" && v.scrollY > maxY) { v.scrollY = maxY; lay = layout(byRank, ranks, v, plotH); }
  const visible = lay.rows.filter((r) => r.track !== null && r.y + r.h >= 0 && r.y <= plotH);
  const groupKind = ranksHaveDevice ? "rank_device" : "rank_host";
  const groupNeed = lay.mode === "groups"
    ? { kind: groupKind, ranks: [ranks[v.r0], ranks[v.r1 - 1]], groups: lay.groups } : null;
  data.want({ level, s: v.start, e: v.end, groups: groupNeed,
    tracks: visible.map((r) => ({ id: r.track, kind: tracksById.get(r.track).kind })) });
  const out = drawFrame({ ctx, width, height, start: v.start, end: v.end, rows: lay.rows,
    mode: lay.mode, data, level, colorMode: v.colorMode, colors, categories: meta.categories,
    expanded: v.expanded, sel: v.sel, highlight: v.highlight, overlay: critical ? critical.draw : null,
    groupData: groupNeed ? data.groupRows(level, groupNeed) : null });
  lastFrame = { hits: out.hits, lay, width, height };
  if (lay.mode === "groups") {
    scrollbar.max = String(Math.max(0, ranks.length - (v.r1 - v.r0))); scrollbar.value = String(v.r0);
  } else {
    scrollbar.max = String(Math.round(maxY)); scrollbar.value = String(Math.round(v.scrollY));
  }
  scrollbar.disabled = scrollbar.max === "0";
  minimap.draw(v.start, v.end, colors);
  document.getElementById("window-label").textContent =
    `+${fmtDur(v.start)} … +${fmtDur(v.end)} (${fmtDur(v.end - v.start)}) · ranks ` +
    `${ranks[v.r0]}-${ranks[v.r1 - 1]} of ${ranks.length}`;
  Object.assign(state, { start_ns: abs(v.start, origin).toString(), end_ns: abs(v.end, origin).toString(),
    level, mode: lay.mode, drawn: out.drawn, frames: state.frames + 1,
    pending: data.inflight.size + (data.timer ? 1 : 0) + (data.eventsPending ? 1 : 0),
    rows: lay.rows.filter((r) => r.y + r.h >= 0 && r.y <= plotH).map((r) => r.label.trim()),
    row_h: lay.rows.filter((r) => r.y + r.h >= 0 && r.y <= plotH).map((r) => r.h),
    visible_tracks: visible.map((r) => r.track), critical: critical ? critical.testState(AXIS_H) : null,
    sel: v.sel ? [abs(v.sel[0], origin).toString(), abs(v.sel[1], origin).toString()] : null,
    ready: true });
  if (state.first_frame_ms === null && state.pending === 0) {
    state.first_frame_ms = Math.round(performance.now());  // since navigation start
  }
  if (mouse) hover(mouse.x, mouse.y);
  drawLegend();
  if (state.pending > 0) setTimeout(() => { markDirty(); }, 120);  // refresh `pending`
}

let ranksHaveDevice = false;
let legendKey = "";

/** The colour legend: the categories seen in the data so far. */
function drawLegend() {
  const cats = [...data.seenCats].sort();
  const key = cats.join(",") + v.colorMode;
  if (key === legendKey) return;
  legendKey = key;
  const box = document.getElementById("legend");
  box.replaceChildren();
  if (v.colorMode !== "category") return;
  for (const c of cats) {
    const item = document.createElement("span");
    item.className = "legend-item";
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = categoryColor(c);
    item.append(sw, document.createTextNode(c));
    box.appendChild(item);
  }
}

async function start() {
  try {
    [meta, tracksById] = await Promise.all([get("meta"), get("tracks").then((ts) => {
      const m = new Map();
      for (const t of ts) m.set(Number(t.id), t);
      return m;
    })]);
  } catch (err) {
    setError(err);
    return;
  }
  origin = BigInt(meta.origin_ns);
  span = Math.max(1, rel(meta.end_ns, origin));
  byRank = indexTracks([...tracksById.values()]);
  ranks = [...new Set([...(meta.ranks || []), ...byRank.keys()])].map(Number).sort((a, b) => a - b);
  ranksHaveDevice = [...tracksById.values()].some((t) => t.kind === "rank_device");
  document.getElementById("title").textContent = meta.title || meta.store || "traceatlas";
  document.title = `${meta.title || "trace"} · traceatlas view`;
  const h = readHash();
  v.theme = h.theme || (window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
  document.documentElement.dataset.theme = v.theme;
  readColors();
  v.start = h.start !== null ? rel(h.start, origin) : rel(meta.start_ns, origin);
  v.end = h.end !== null ? rel(h.end, origin) : span;
  v.r0 = 0; v.r1 = ranks.length;
  if (h.ranks) {
    const i0 = ranks.findIndex((r) => r >= h.ranks[0]);
    let i1 = ranks.length;
    while (i1 > 0 && ranks[i1 - 1] > h.ranks[1]) i1--;
    if (i0 >= 0 && i1 > i0) { v.r0 = i0; v.r1 = i1; }
    if (v.r1 - v.r0 <= 2) for (let i = v.r0; i < v.r1; i++) v.expanded.add(ranks[i]);
  }
  if (h.sel) v.sel = [rel(h.sel[0], origin), rel(h.sel[1], origin)];
  data = new DataStore(meta, tracksById, markDirty, setError);
  minimap = new Minimap(document.getElementById("minimap"), meta, ranksHaveDevice ? "rank_device"
    : ([...tracksById.values()].some((t) => t.kind === "rank_host") ? "rank_host" : null), ranks, controller);
  minimap.load().then(markDirty, setError);
  attach(canvas, controller);
  attachSearch(goTo);
  critical = new CriticalOverlay({ origin, tracksById, byRank, redraw: () => { changed(); },
    view: () => ({ start: v.start, end: v.end, sel: v.sel }), abs: (t) => abs(t, origin),
    pinned: h.cp ? h.cp.step : null });
  const cpBox = document.getElementById("critical-toggle");
  cpBox.addEventListener("change", () => critical.setOn(cpBox.checked));
  document.getElementById("color-mode").addEventListener("change", (e) => { v.colorMode = e.target.value; markDirty(); });
  document.getElementById("theme-toggle").addEventListener("click", () => {
    v.theme = v.theme === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = v.theme;
    readColors();
    changed();
  });
  document.getElementById("reset-view").addEventListener("click", () => {
    v.r0 = 0; v.r1 = ranks.length; v.scrollY = 0;
    setWindow(0, span);
  });
  scrollbar.addEventListener("input", () => {
    const val = Number(scrollbar.value);
    if (lastFrame && lastFrame.lay.mode === "groups") { const n = v.r1 - v.r0; v.r0 = val; v.r1 = val + n; }
    else v.scrollY = val;
    changed();
  });
  for (const b of document.querySelectorAll("button.close")) {
    b.addEventListener("click", () => {
      const id = b.dataset.close;
      if (id === "selection-panel") controller.clearSelection();
      else document.getElementById(id).hidden = true;
    });
  }
  new ResizeObserver(() => markDirty()).observe(canvas);
  if (v.sel) showSelection(abs(v.sel[0], origin), abs(v.sel[1], origin),
    v.r0 > 0 || v.r1 < ranks.length ? `${ranks[v.r0]}-${ranks[v.r1 - 1]}` : undefined);
  dirty = false;
  markDirty();
  if (h.cp) { cpBox.checked = true; critical.setOn(true); }
}

window.addEventListener("error", (e) => setError(e.message));
window.addEventListener("unhandledrejection", (e) => setError(e.reason));
start();

export { categoryColor, HEADER_H };
