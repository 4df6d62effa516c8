// Canvas 2D drawing of one frame: time axis, lane labels, pyramid bins, raw events,
// counters, rank groups, the selection and the search highlight.
//
// Geometry (CSS px; the context is scaled by devicePixelRatio): the label gutter is
// LABEL_W wide, the axis AXIS_H high; x(t) maps relative ns to px. Bins are stacked by
// category, their height the busy fraction (busy_ns / bin_ns); raw events are boxes at
// their depth, named when the name fits. Each frame returns `hits` (what is under each
// pixel range, for the tooltip and clicks) and `drawn` (raw events drawn, for tests).

import { HEADER_H, ROW_H } from "./layout.js";
import { binNs } from "./tiles.js";

export const LABEL_W = 190;
export const AXIS_H = 22;

const CATEGORY_COLORS = {
  cpu_op: "#4e79a7", annotation: "#9c755f", gpu_annotation: "#b07aa1", runtime: "#f28e2b",
  driver: "#e15759", kernel: "#59a14f", comm_kernel: "#d62728", memcpy: "#edc948",
  memset: "#bab0ac", sync: "#ff9da7", mpi: "#d62728", nvtx: "#76b7b2", osrt: "#8c6d31",
  openmp: "#17becf", region: "#4e79a7", state: "#7f7f7f", step: "#a0cbe8", python: "#86bcb6",
  other: "#9d9d9d",
};

/** Colour of a category name. */
export function categoryColor(cat) {
  return CATEGORY_COLORS[cat] || "#9d9d9d";
}

/** A stable colour for a name (FNV-1a hash -> hue). */
export function nameColor(name) {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) { h ^= name.charCodeAt(i); h = Math.imul(h, 16777619); }
  return `hsl(${(h >>> 0) % 360}, 55%, 52%)`;
}

/** Human-readable duration of `ns` nanoseconds. */
export function fmtDur(ns) {
  const a = Math.abs(ns);
  if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e10 ? 2 : 3) + " s";
  if (a >= 1e6) return (ns / 1e6).toFixed(a >= 1e7 ? 2 : 3) + " ms";
  if (a >= 1e3) return (ns / 1e3).toFixed(a >= 1e4 ? 2 : 3) + " us";
  return Math.round(ns) + " ns";
}

function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

const RETURN_TYPE = /^(?:(?:static|inline|__global__|void|int|unsigned|long|float|double|bool|auto)\s+)+/;
const shortCache = new Map();

/** A C++ signature's display form (lane boxes and labels; tooltips and details keep the
 * full name): no return type, template arguments or parameter list, `(anonymous
 * namespace)` dropped, the last 2 namespace components + the name. "void
 * at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float>(float*, long)" ->
 * "at::native::cunn_SoftMaxBackward". Names without "::" are returned as they are. */
export function shortName(name) {
  if (!name.includes("::")) return name;
  let got = shortCache.get(name);
  if (got !== undefined) return got;
  let top = "", angle = 0, paren = 0;
  const text = name.replace(RETURN_TYPE, "");
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === "<" && paren === 0) angle++;
    else if (ch === ">" && paren === 0 && angle > 0 && text[i - 1] !== "-") angle--;
    else if (ch === "(" && angle === 0) {
      if (paren === 0 && text.startsWith("(anonymous namespace)", i)) { i += 20; continue; }
      paren++;
    } else if (ch === ")" && angle === 0 && paren > 0) paren--;
    else if (angle === 0 && paren === 0) top += ch;
  }
  const parts = top.split("::").map((p) => p.trim()).filter((p) => p.length > 0);
  got = parts.length ? parts.slice(-3).join("::") : name;
  if (shortCache.size > 50000) shortCache.clear();
  shortCache.set(name, got);
  return got;
}

/** `text` cut in the middle to fit `w` px (lane names often differ at their end). */
function fitMiddle(ctx, text, w) {
  if (ctx.measureText(text).width <= w) return text;
  let keep = text.length;
  while (keep > 4) {
    keep -= 1;
    const head = Math.ceil(keep / 2), tail = keep - head;
    const t = text.slice(0, head) + "…" + text.slice(text.length - tail);
    if (ctx.measureText(t).width <= w) return t;
  }
  return fitText(ctx, text, w);
}

function fitText(ctx, text, w) {
  if (ctx.measureText(text).width <= w) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(text.slice(0, mid) + "…").width <= w) lo = mid; else hi = mid - 1;
  }
  return lo > 0 ? text.slice(0, lo) + "…" : "";
}

/** Size `canvas`'s backing store to its CSS box times devicePixelRatio (when it changed)
 * and return its 2D context scaled to CSS px, with the CSS width and height. */
export function fitCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
    canvas.width = Math.round(width * dpr); canvas.height = Math.round(height * dpr);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { ctx, width, height };
}

/** Draw a frame. `f` = {ctx, width, height, start, end, rows, mode, data, level, colorMode,
 * colors (theme), categories, expanded, sel, highlight, overlay (optional: called as
 * overlay(ctx, f, X, plotH) after the rows, before the selection)}. Returns {hits, drawn}. */
export function drawFrame(f) {
  const { ctx, width, height, colors } = f;
  const plotW = width - LABEL_W;
  const scale = plotW / (f.end - f.start);  // px per ns
  const X = (t) => LABEL_W + (t - f.start) * scale;
  const hits = [];
  const drawn = [];
  ctx.fillStyle = colors.bg;
  ctx.fillRect(0, 0, width, height);
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, AXIS_H, width, height - AXIS_H);
  ctx.clip();
  ctx.translate(0, AXIS_H);
  const plotH = height - AXIS_H;
  let alt = false;
  for (const row of f.rows) {
    if (row.y + row.h < 0 || row.y > plotH) continue;
    alt = row.kind === "header" ? false : !alt;
    ctx.fillStyle = row.kind === "header" ? colors.laneB : (alt ? colors.laneB : colors.laneA);
    ctx.fillRect(LABEL_W, row.y, plotW, row.h);
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, row.y, plotW, row.h);
    ctx.clip();
    const rowHits = { row, items: [] };
    if (row.kind === "group") drawGroup(ctx, f, row, X, scale, rowHits);
    else if (row.kind === "counter") drawCounter(ctx, f, row, X, scale, rowHits);
    else if (row.track !== null) drawTrack(ctx, f, row, X, scale, rowHits, drawn);
    ctx.restore();
    hits.push(rowHits);
    ctx.strokeStyle = colors.grid;
    ctx.beginPath();
    ctx.moveTo(0, row.y + row.h - 0.5);
    ctx.lineTo(width, row.y + row.h - 0.5);
    ctx.stroke();
    drawLabel(ctx, f, row);
  }
  if (f.overlay) f.overlay(ctx, f, X, plotH);  // the critical path (critical.js)
  if (f.sel) {
    const a = X(f.sel[0]), b = X(f.sel[1]);
    ctx.fillStyle = colors.sel;
    ctx.fillRect(Math.max(a, LABEL_W), 0, Math.max(1, b - Math.max(a, LABEL_W)), plotH);
    ctx.strokeStyle = colors.selEdge;
    ctx.strokeRect(a + 0.5, 0.5, Math.max(1, b - a), plotH - 1);
  }
  ctx.restore();
  drawAxis(ctx, f, X, scale);
  return { hits, drawn };
}

function drawLabel(ctx, f, row) {
  const { colors } = f;
  ctx.fillStyle = colors.panel;
  ctx.fillRect(0, row.y, LABEL_W, row.h);
  const header = row.kind === "header" || row.kind === "group";
  ctx.font = header ? "600 12px system-ui, sans-serif"
    : row.kind === "idle" ? "italic 10px system-ui, sans-serif" : "11px system-ui, sans-serif";
  ctx.fillStyle = header ? colors.rank : row.kind === "idle" ? colors.muted : colors.label;
  ctx.textBaseline = "middle";
  const mark = row.kind === "header" ? (f.expanded.has(row.rank) ? "▾ " : "▸ ") : "";
  const y = row.y + Math.min(row.h, row.kind === "lane" ? ROW_H + 2 : row.h) / 2;
  const indent = /^\s*/.exec(row.label)[0];
  const label = indent + shortName(row.label.slice(indent.length));
  ctx.fillText(fitMiddle(ctx, mark + label, LABEL_W - 8), 4, y);
}

function binColor(f, cat, name, busyFrac) {
  if (f.colorMode === "name") return nameColor(f.data.nameOf(name));
  if (f.colorMode === "busy") return `rgba(${f.colors.busyRGB}, ${0.15 + 0.85 * busyFrac})`;
  return categoryColor(f.categories[cat] || "other");
}

function drawBins(ctx, f, row, X, scale, hitsOut, alpha) {
  const cols = f.data.chunksFor("tiles", f.level, row.track, f.start, f.end);
  const h = row.h - 2;
  ctx.globalAlpha = alpha;
  const seen = new Set();  // a bin wider than a chunk is cached in each chunk it overlaps
  for (const c of cols) {
    let stack = 0, last = NaN;
    for (let i = 0; i < c.n; i++) {
      const s = c.start[i];
      const key = `${c.binNs}|${s}|${c.cat[i]}`;
      if (seen.has(key)) continue;
      seen.add(key);
      if (s !== last) { stack = 0; last = s; }
      const x0 = X(s), x1 = X(s + c.binNs);
      if (x1 < LABEL_W || x0 > f.width) continue;
      const frac = Math.min(1, c.busy[i] / c.binNs);
      const hh = h * frac;
      ctx.fillStyle = binColor(f, c.cat[i], c.name[i], frac);
      ctx.fillRect(x0, row.y + 1 + h - stack * h - hh, Math.max(1, x1 - x0), hh);
      stack += frac;
      hitsOut.items.push({ x0, x1, type: "bin", start: s, end: s + c.binNs, cat: c.cat[i],
        name: c.name[i], busy: c.busy[i], count: c.count[i], binNs: c.binNs });
    }
  }
  ctx.globalAlpha = 1;
}

function drawTrack(ctx, f, row, X, scale, hitsOut, drawn) {
  const ev = f.data.isRaw(row.track, f.level) ? f.data.eventsFor(row.track) : null;
  if (!ev || ev.truncated) drawBins(ctx, f, row, X, scale, hitsOut, ev ? 0.35 : 1);
  if (!ev) return;
  ctx.font = "10px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  const depthRows = row.depth || 1;
  const rh = Math.max(ROW_H, (row.h - 2) / depthRows);
  for (const e of ev.list) {
    if (e.end < f.start || e.start > f.end) continue;
    const x0 = Math.max(X(e.start), LABEL_W - 1), x1 = Math.min(X(e.end), f.width + 1);
    const w = Math.max(1, x1 - x0);
    const y = row.y + 1 + Math.min(e.depth, depthRows - 1) * rh;
    ctx.fillStyle = f.colorMode === "name" ? nameColor(e.name)
      : f.colorMode === "busy" ? `rgb(${f.colors.busyRGB})` : categoryColor(e.category);
    ctx.fillRect(x0, y, w, rh - 1);
    if (w > 28) {
      ctx.fillStyle = "#ffffff";
      const t = fitText(ctx, shortName(e.name), w - 4);
      if (t) ctx.fillText(t, x0 + 2, y + rh / 2);
    }
    hitsOut.items.push({ x0, x1: x0 + w, y0: y, y1: y + rh, type: "event", ev: e });
    drawn.push({ track: row.track, name: e.name, start_ns: e.absStart.toString(),
      end_ns: e.absEnd.toString(), x: x0, y: y + AXIS_H, w, h: rh - 1 });
    if (f.highlight && f.highlight.track === row.track && f.highlight.start === e.start) {
      ctx.strokeStyle = f.colors.hl;
      ctx.lineWidth = 2;
      ctx.strokeRect(x0 - 1, y - 1, w + 2, rh + 1);
      ctx.lineWidth = 1;
    }
  }
}

function drawCounter(ctx, f, row, X, scale, hitsOut) {
  const cols = f.data.chunksFor("counters", f.level, row.track, f.start, f.end);
  let lo = Infinity, hi = -Infinity;  // value range in the window: the lane's scale
  for (const c of cols) {
    for (let i = 0; i < c.n; i++) {
      if (c.start[i] + c.binNs < f.start || c.start[i] > f.end) continue;
      lo = Math.min(lo, c.min[i]); hi = Math.max(hi, c.max[i]);
    }
  }
  if (!(hi >= lo)) return;
  const h = row.h - 6;
  const Y = hi > lo ? (v) => row.y + 3 + h - ((v - lo) / (hi - lo)) * h : () => row.y + row.h / 2;
  const seen = new Set();  // bins wider than a chunk are cached in each chunk they overlap
  for (const c of cols) {
    for (let i = 0; i < c.n; i++) {
      const x0 = X(c.start[i]), x1 = X(c.start[i] + c.binNs);
      if (x1 < LABEL_W || x0 > f.width) continue;
      const key = `${c.binNs}|${c.start[i]}|${c.series[i]}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const color = nameColor(c.seriesNames[c.series[i]] ?? String(c.series[i]));
      ctx.globalAlpha = 0.3;
      ctx.fillStyle = color;
      ctx.fillRect(x0, Y(c.max[i]), Math.max(1, x1 - x0), Math.max(1, Y(c.min[i]) - Y(c.max[i])));
      ctx.globalAlpha = 1;
      ctx.fillRect(x0, Y(c.mean[i]) - 1, Math.max(1, x1 - x0), 2);
      hitsOut.items.push({ x0, x1, type: "counter", start: c.start[i], end: c.start[i] + c.binNs,
        series: c.seriesNames[c.series[i]] ?? String(c.series[i]), min: c.min[i],
        mean: c.mean[i], max: c.max[i] });
    }
  }
  ctx.font = "10px system-ui, sans-serif";
  ctx.fillStyle = f.colors.muted;
  ctx.textBaseline = "top";
  const fmt = bytesTrack(row.info) ? fmtBytes : fmtNum;
  ctx.fillText(`${fmt(lo)} … ${fmt(hi)}`, LABEL_W + 3, row.y + 1);
}

/** A counter track whose every series is in bytes (named "... (bytes)"). */
function bytesTrack(track) {
  const series = (track && track.series) || [];
  return series.length > 0 && series.every((s) => s.endsWith("(bytes)"));
}

/** Bytes in binary units: 512 B, 1.50 KiB, 2.00 GiB. */
export function fmtBytes(v) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let a = Math.abs(v), i = 0;
  while (a >= 1024 && i < units.length - 1) { a /= 1024; i++; }
  return `${v < 0 ? "-" : ""}${i ? a.toFixed(2) : String(a)} ${units[i]}`;
}

function fmtNum(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
  return Number.isInteger(v) ? String(v) : v.toPrecision(4);
}

function drawGroup(ctx, f, row, X, scale, hitsOut) {
  const g = f.groupData;
  if (!g) return;
  const grp = g.reply[row.index];
  if (!grp || grp.ranks[0] !== row.group[0] || grp.ranks[1] !== row.group[1]) return;
  const bn = Number(grp.bin_ns ?? g.binNs);  // the level the server used (may be coarser)
  const h = row.h - 2;
  for (let i = 0; i < grp.bin.length; i++) {
    const s = Number(grp.bin[i]) * bn;
    const x0 = X(s), x1 = X(s + bn);
    if (x1 < LABEL_W || x0 > f.width) continue;
    ctx.fillStyle = `rgba(${f.colors.busyRGB}, ${0.08 + 0.92 * grp.mean[i]})`;
    ctx.fillRect(x0, row.y + 1, Math.max(1, x1 - x0), h);
    ctx.fillStyle = f.colors.band;
    const yMax = row.y + 1 + h * (1 - grp.max[i]), yMin = row.y + 1 + h * (1 - grp.min[i]);
    ctx.fillRect(x0 + (x1 - x0) / 2 - 0.5, yMax, 1, Math.max(1, yMin - yMax));
    hitsOut.items.push({ x0, x1, type: "group", start: s, end: s + bn, ranks: grp.ranks,
      mean: grp.mean[i], min: grp.min[i], max: grp.max[i] });
  }
}

function drawAxis(ctx, f, X, scale) {
  const { colors, width } = f;
  ctx.fillStyle = colors.panel;
  ctx.fillRect(0, 0, width, AXIS_H);
  ctx.strokeStyle = colors.grid;
  ctx.beginPath();
  ctx.moveTo(0, AXIS_H - 0.5);
  ctx.lineTo(width, AXIS_H - 0.5);
  ctx.stroke();
  const step = niceStep(110 / scale);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = colors.muted;
  ctx.textBaseline = "middle";
  for (let t = Math.ceil(f.start / step) * step; t <= f.end; t += step) {
    const x = X(t);
    if (x < LABEL_W) continue;
    ctx.fillRect(x, AXIS_H - 6, 1, 6);
    ctx.fillText(fmtDur(t), x + 3, AXIS_H / 2 - 2);
  }
  ctx.fillStyle = colors.label;
  ctx.font = "600 11px system-ui, sans-serif";
  ctx.fillText(`level ${f.level} · ${fmtDur(binNs(f.level))} bins`, 4, AXIS_H / 2);
}

export { HEADER_H };
