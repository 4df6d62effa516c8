// The view state in the URL hash, so a link can be shared:
//   #start=<abs ns>&end=<abs ns>&ranks=<lo>-<hi>&sel=<abs ns>:<abs ns>&theme=light|dark
//   &cp=1|step:<N> (the critical path overlay on; of step N)
// Times are absolute epoch ns (integers as text, exact); `ranks` is the visible rank range
// (inclusive). The query string (?token=...) is left alone.

/** Parse the hash into {start, end, ranks: [lo, hi], sel: [a, b], theme, cp: {step}};
 * missing = null. */
export function readHash() {
  const h = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  const big = (s) => (s !== null && /^-?\d+$/.test(s) ? BigInt(s) : null);
  const out = { start: big(h.get("start")), end: big(h.get("end")), ranks: null, sel: null,
    theme: null, cp: null };
  const r = h.get("ranks");
  const m = r && /^(\d+)(?:-(\d+))?$/.exec(r);
  if (m) out.ranks = [Number(m[1]), Number(m[2] ?? m[1])];
  const s = h.get("sel");
  const ms = s && /^(-?\d+):(-?\d+)$/.exec(s);
  if (ms) out.sel = [BigInt(ms[1]), BigInt(ms[2])];
  const t = h.get("theme");
  if (t === "light" || t === "dark") out.theme = t;
  const cp = h.get("cp");
  const mc = cp && /^(?:1|step:(\d+))$/.exec(cp);
  if (mc) out.cp = { step: mc[1] !== undefined ? Number(mc[1]) : null };
  return out;
}

let pending = null;

/** Write the state to the hash (replaceState, debounced so panning does not flood history). */
export function writeHash(state) {
  if (pending) clearTimeout(pending);
  pending = setTimeout(() => {
    pending = null;
    const h = new URLSearchParams();
    h.set("start", state.start.toString());
    h.set("end", state.end.toString());
    if (state.ranks) h.set("ranks", `${state.ranks[0]}-${state.ranks[1]}`);
    if (state.sel) h.set("sel", `${state.sel[0]}:${state.sel[1]}`);
    if (state.theme) h.set("theme", state.theme);
    if (state.cp) h.set("cp", state.cp);
    const url = window.location.pathname + window.location.search + "#" + h.toString();
    window.history.replaceState(null, "", url);
  }, 150);
}
