// The minimap: the whole run as rank groups (/api/rows over the full span, mean busy as
// colour intensity), the current window outlined; click or drag moves the window there.

import { get, abs } from "./api.js";
import { levelFor, binNs } from "./tiles.js";
import { fitCanvas } from "./render.js";

export class Minimap {
  /** `meta` with origin/start/end, `kind` rank_device|rank_host, `ranks` list, `v` the view. */
  constructor(canvas, meta, kind, ranks, v) {
    this.canvas = canvas;
    this.origin = BigInt(meta.origin_ns);
    this.span = Number(BigInt(meta.end_ns) - this.origin);
    this.kind = kind;
    this.ranks = ranks;
    this.v = v;
    this.reply = null;
    let down = false;
    const move = (e) => {
      const r = canvas.getBoundingClientRect();
      v.centreAt(((e.clientX - r.left) / r.width) * this.span);
    };
    canvas.addEventListener("pointerdown", (e) => { down = true; canvas.setPointerCapture(e.pointerId); move(e); });
    canvas.addEventListener("pointermove", (e) => { if (down) move(e); });
    canvas.addEventListener("pointerup", () => { down = false; });
  }

  async load() {
    if (!this.kind || this.ranks.length === 0) return;
    const width = Math.max(100, this.canvas.clientWidth);
    const level = levelFor(this.span, width);
    const groups = Math.min(this.ranks.length, 16);
    const r = await get("rows", { level, start_ns: abs(0, this.origin),
      end_ns: abs(this.span, this.origin), kind: this.kind,
      ranks: `${this.ranks[0]}-${this.ranks[this.ranks.length - 1]}`, groups });
    this.reply = r;
    this.binNs = Number(r.bin_ns ?? binNs(level));
  }

  /** Draw with the current window [s, e] (relative ns) and theme colours. */
  draw(s, e, colors) {
    const { ctx, width: w, height: h } = fitCanvas(this.canvas);
    ctx.fillStyle = colors.laneB;
    ctx.fillRect(0, 0, w, h);
    const X = (t) => (t / this.span) * w;
    if (this.reply) {
      const gs = this.reply.groups;
      const gh = h / Math.max(1, gs.length);
      gs.forEach((g, gi) => {
        const bn = Number(g.bin_ns ?? this.binNs);  // the level the server used
        for (let i = 0; i < g.bin.length; i++) {
          const t = Number(g.bin[i]) * bn;
          ctx.fillStyle = `rgba(${colors.busyRGB}, ${0.05 + 0.95 * g.mean[i]})`;
          ctx.fillRect(X(t), gi * gh, Math.max(1, X(t + bn) - X(t)), Math.max(1, gh - 0.5));
        }
      });
    }
    const a = X(s), b = X(e);
    ctx.fillStyle = colors.sel;
    ctx.fillRect(a, 0, Math.max(2, b - a), h);
    ctx.strokeStyle = colors.selEdge;
    ctx.lineWidth = 1.5;
    ctx.strokeRect(a + 0.75, 0.75, Math.max(2, b - a) - 1.5, h - 1.5);
  }
}
