// The critical path overlay: the toolbar toggle asks /api/critical_path for the path of
// the selected window, else of a step pinned by the URL (`cp=step:N`, from `traceatlas
// view --critical-path --step N`), else of the step in view (`at_ns` = the view's centre;
// no step there: the visible window). The region is chosen when the toggle turns on and
// when the selection changes, never while panning (the analysis is not free).
//
// Drawing (every zoom level, each frame, after the rows): every on-path segment is mapped
// to the row showing its track (its lane; a collapsed rank's GPU or host summary row; in
// group mode, its rank group). Per row, a thin bar under the row spans the segments,
// merged per pixel and coloured by the bound holding most of the merged time; a segment
// at least OUTLINE_MIN_PX wide also gets a bright outline; consecutive segments on
// different rows are joined by a line. The breakdown by bound goes in the selection panel.
// Test hook: window.__traceatlas.critical = {on, status, region, count, total, truncated,
// bars, outlines, links, boxes (first 200 bars: x0, x1, y, h in canvas CSS px), error}.

import { get, rel, text } from "./api.js";
import { el } from "./details.js";
import { fmtDur, LABEL_W } from "./render.js";

export const BOUND_COLORS = {
  cpu: "#1f77b4", gpu_compute: "#2ca02c", gpu_comm: "#d62728", launch: "#ff7f0e",
  kernel_gap: "#8c8c8c", sync: "#e377c2", data_load: "#8c564b", wait: "#9467bd",
  comm: "#bcbd22",
};
const OUTLINE = "#ff00e6";  // magenta: no category colour is near it
const LINK = "#ff00e6";
const BAR_H = 4;
const OUTLINE_MIN_PX = 4;
const MAX_BOXES = 200;

export class CriticalOverlay {
  /** `opts` = {origin (BigInt), tracksById, byRank, redraw(), view() -> {start, end, sel}
   * (relative ns), pinned: step number from the URL or null, abs(relNs) -> BigInt}. */
  constructor(opts) {
    Object.assign(this, opts);
    this.on = false;
    this.status = "off";
    this.region = null;
    this.seg = null;  // {n, s, e, track, rank, bound (Float64Array / arrays)}
    this.reply = null;
    this.error = null;
    this.ctrl = null;
    this.stats = { bars: 0, outlines: 0, links: 0, boxes: [] };
    this.draw = this.draw.bind(this);
  }

  /** Hash value: "step:N" while a pinned step is shown, "1" when on, null when off. */
  hashValue() {
    if (!this.on) return null;
    return this.pinned !== null && this.pinned !== undefined ? `step:${this.pinned}` : "1";
  }

  /** Turn the overlay on or off (the checkbox). */
  setOn(on) {
    this.on = on;
    if (!on) {
      if (this.ctrl) this.ctrl.abort();
      this.pinned = null;
      this.seg = null; this.reply = null; this.status = "off"; this.region = null;
      removeSection(this.view().sel === null);
      this.redraw();
      return;
    }
    this.reload();
  }

  /** The selection changed: ask for the path of the new region (when on). */
  regionChanged() {
    if (this.on) { this.pinned = null; this.reload(); }
  }

  async reload() {
    if (this.ctrl) this.ctrl.abort();
    this.ctrl = new AbortController();
    const signal = this.ctrl.signal;
    const vw = this.view();
    let query;
    if (vw.sel) query = { start_ns: this.abs(vw.sel[0]), end_ns: this.abs(vw.sel[1]) };
    else if (this.pinned !== null && this.pinned !== undefined) query = { step: this.pinned };
    else query = { at_ns: this.abs((vw.start + vw.end) / 2) };
    this.status = "loading"; this.error = null;
    this.redraw();
    try {
      let r;
      try {
        r = await get("critical_path", query, signal);
      } catch (err) {
        if (!(query.at_ns !== undefined && err.status === 404)) throw err;
        r = await get("critical_path", { start_ns: this.abs(vw.start), end_ns: this.abs(vw.end) },
          signal);  // no step in view: the visible window
      }
      this.accept(r);
      this.status = "ready";
      showSection(this.reply, vw.sel === null);
    } catch (err) {
      if (err.name === "AbortError") return;
      this.status = "error"; this.error = String(err.message || err);
      this.seg = null;
    }
    this.redraw();
  }

  accept(r) {
    const n = r.bound.length;
    const s = new Float64Array(n), e = new Float64Array(n);
    for (let i = 0; i < n; i++) { s[i] = rel(r.start_ns[i], this.origin); e[i] = rel(r.end_ns[i], this.origin); }
    this.seg = { n, s, e, track: r.track, rank: r.rank, bound: r.bound };
    this.reply = r;
    this.region = r.region;
  }

  /** The row of `f.rows` showing segment i's track, or null. `index` caches lookups. */
  rowOf(i, index) {
    const t = this.seg.track[i];
    const key = t === null ? `r${this.seg.rank[i]}` : t;
    if (index.memo.has(key)) return index.memo.get(key);
    let row = t !== null ? index.byTrack.get(t) : undefined;
    if (!row) {
      const info = t !== null ? this.tracksById.get(t) : null;
      const rank = info ? info.rank : this.seg.rank[i];
      const r = this.byRank.get(rank);
      const device = info && (info.kind === "gpu_stream" || info.kind === "device");
      if (r) {
        const want = device ? (r.device || r.host) : (r.host || r.device);
        row = want ? index.byTrack.get(want.id) : undefined;
        if (!row && r.device) row = index.byTrack.get(r.device.id);  // the rank's header
      }
      if (!row) row = index.groups.find((g) => g.group[0] <= rank && rank <= g.group[1]);
    }
    index.memo.set(key, row || null);
    return row || null;
  }

  /** Draw the overlay on the frame `f` (render.js calls it with the rows' context: y=0 at
   * the top of the plot, clipped to it). */
  draw(ctx, f, X, plotH) {
    const st = { bars: 0, outlines: 0, links: 0, boxes: [] };
    this.stats = st;
    if (!this.on || !this.seg) return;
    const index = { byTrack: new Map(), groups: [], memo: new Map() };
    for (const row of f.rows) {
      if (row.kind === "group") index.groups.push(row);
      else if (row.track !== null && !index.byTrack.has(row.track)) index.byTrack.set(row.track, row);
    }
    const { n, s, e, bound } = this.seg;
    const visible = (row) => row && row.y + row.h >= 0 && row.y <= plotH;
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, 0, f.width - LABEL_W, plotH);
    ctx.clip();
    const open = new Map();  // row -> {x0, x1, ns: {bound: ns}}
    const flush = (row, run) => {
      let best = null;
      for (const [b, ns] of Object.entries(run.ns)) if (!best || ns > run.ns[best]) best = b;
      const y = row.y + row.h - BAR_H - 1;
      ctx.fillStyle = f.colors.bg;  // a rim in the page colour: the bar stands off the bins
      ctx.fillRect(run.x0 - 1, y - 1, run.x1 - run.x0 + 2, BAR_H + 2);
      ctx.fillStyle = BOUND_COLORS[best] || OUTLINE;
      ctx.fillRect(run.x0, y, run.x1 - run.x0, BAR_H);
      st.bars++;
      if (st.boxes.length < MAX_BOXES) st.boxes.push({ x0: run.x0, x1: run.x1, y, h: BAR_H, bound: best });
    };
    ctx.lineWidth = 2;
    ctx.strokeStyle = OUTLINE;
    let prev = null, prevX = 0;
    const linked = new Set();
    const links = [];
    for (let i = 0; i < n; i++) {
      if (e[i] < f.start || s[i] > f.end) { prev = null; continue; }
      const row = this.rowOf(i, index);
      if (!visible(row)) { prev = null; continue; }
      const a = X(s[i]), b = X(e[i]);
      const x0 = Math.floor(Math.max(a, LABEL_W - 1)), x1 = Math.max(x0 + 1, Math.ceil(Math.min(b, f.width + 1)));
      let run = open.get(row);
      if (run && x0 <= run.x1) {
        run.x1 = Math.max(run.x1, x1);
      } else {
        if (run) flush(row, run);
        run = { x0, x1, ns: {} };
        open.set(row, run);
      }
      run.ns[bound[i]] = (run.ns[bound[i]] || 0) + (e[i] - s[i]);
      if (b - a >= OUTLINE_MIN_PX) {
        ctx.strokeRect(Math.max(a, LABEL_W) + 1, row.y + 1, Math.max(1, Math.min(b, f.width) - Math.max(a, LABEL_W) - 2), row.h - 3);
        st.outlines++;
      }
      if (prev && prev !== row) {
        const key = `${Math.round(a)}|${prev.y}|${row.y}`;
        if (!linked.has(key)) { linked.add(key); links.push([prevX, prev.y + prev.h / 2, a, row.y + row.h / 2]); }
      }
      prev = row; prevX = b;
    }
    for (const [row, run] of open) flush(row, run);
    ctx.strokeStyle = LINK;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (const [xa, ya, xb, yb] of links) { ctx.moveTo(xa, ya); ctx.lineTo(xb, yb); }
    ctx.stroke();
    for (const [xa, ya, xb, yb] of links) {  // small dots at the ends: direction of time
      ctx.fillStyle = LINK;
      ctx.fillRect(xa - 1.5, ya - 1.5, 3, 3);
      ctx.fillRect(xb - 1.5, yb - 1.5, 3, 3);
    }
    st.links = links.length;
    ctx.restore();
  }

  /** What the tests read. Box y is in canvas CSS px (the axis included by the caller). */
  testState(axisH) {
    return { on: this.on, status: this.status, region: this.region, error: this.error,
      count: this.reply ? this.reply.count : 0, total: this.reply ? this.reply.total : 0,
      truncated: this.reply ? this.reply.truncated : false, bars: this.stats.bars,
      outlines: this.stats.outlines, links: this.stats.links,
      boxes: this.stats.boxes.map((b) => ({ ...b, y: b.y + axisH })) };
  }
}

function regionText(r) {
  if (r.region.kind === "step") return `step ${r.region.step}`;
  if (r.region.kind === "window") return "the selected window";
  return "the whole trace";
}

/** The breakdown in the selection panel (shown alone when there is no selection). */
function showSection(r, alone) {
  const panel = document.getElementById("selection-panel");
  const body = document.getElementById("selection-body");
  if (alone) body.replaceChildren();
  panel.hidden = false;
  const rows = [el("tr", {}, [el("th", { text: "bound" }), el("th", { text: "on path" }),
    el("th", { text: "share" })])];
  const b = r.by_bound;
  for (let i = 0; i < b.bound.length; i++) {
    if (!Number(b.ns[i])) continue;
    const sw = el("span", { class: "swatch" });
    sw.style.background = BOUND_COLORS[b.bound[i]] || OUTLINE;
    const name = el("td", { class: "txt" }, [sw]);
    name.appendChild(document.createTextNode(" " + text(b.bound[i])));
    rows.push(el("tr", { "data-testid": "critical-bound-row", "data-bound": text(b.bound[i]),
      "data-ns": text(b.ns[i]) }, [name, el("td", { class: "num", text: fmtDur(Number(b.ns[i])) }),
      el("td", { class: "num", text: `${(100 * b.share[i]).toFixed(1)}%` })]));
  }
  const parts = [el("h3", { text: `Critical path of ${regionText(r)}` }),
    el("div", { class: "muted", text: `${fmtDur(Number(r.length_ns))} over ${r.total} segments` }),
    el("table", { class: "grid", "data-testid": "critical-by-bound" }, rows)];
  for (const note of r.notes || []) parts.push(el("div", { class: "muted", text: text(note) }));
  let sec = body.querySelector('[data-testid="selection-critical_path"]');
  if (!sec) {
    sec = el("section", { "data-testid": "selection-critical_path" });
    body.insertBefore(sec, body.children[1] || null);
  }
  sec.replaceChildren(...parts);
}

function removeSection(hidePanel) {
  const sec = document.querySelector('[data-testid="selection-critical_path"]');
  if (sec) sec.remove();
  if (hidePanel) document.getElementById("selection-panel").hidden = true;
}
