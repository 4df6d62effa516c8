// The details panel: one interval's full row from /api/event (args as JSON) and its chain
// host op -> runtime launch -> device activity; a click on a chain item moves the view
// there. Every value from the trace is inserted with textContent (names are data).

import { get, text } from "./api.js";
import { fmtDur } from "./render.js";

const SKIP = new Set(["chain", "args"]);

function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.appendChild(c);
  return node;
}

export { el };

let ctrl = null;

/** Show the event `ev` of viewer track `track` (ev.absStart: absolute ns BigInt); `goTo`
 * (absStart, absEnd, track) is called when a chain item is clicked. */
export async function showEvent(track, ev, tracksById, goTo) {
  const panel = document.getElementById("details-panel");
  const body = document.getElementById("details-body");
  panel.hidden = false;
  body.replaceChildren(el("div", { class: "muted", text: "loading…" }));
  if (ctrl) ctrl.abort();
  ctrl = new AbortController();
  let row;
  try {
    // the server takes names of at most 200 characters; without one it picks the deepest
    const name = ev.name.length <= 200 ? ev.name : undefined;
    row = await get("event", { track, start_ns: ev.absStart, name }, ctrl.signal);
  } catch (err) {
    if (err.name === "AbortError") return;
    body.replaceChildren(el("div", { class: "error", text: String(err.message || err) }));
    return;
  }
  const info = tracksById.get(track);
  const table = el("table", { class: "kv", "data-testid": "details-table" });
  const add = (k, v) => table.appendChild(el("tr", {}, [el("td", { text: k }), el("td", { text: v })]));
  add("duration", fmtDur(Number(BigInt(row.end_ns) - BigInt(row.start_ns))));
  if (info) add("lane", `rank ${info.rank} · ${info.name}`);
  for (const [k, v] of Object.entries(row)) {
    if (!SKIP.has(k) && k !== "name" && v !== null && v !== undefined) add(k, text(v));
  }
  const parts = [el("div", { id: "details-name", "data-testid": "details-name", class: "title",
    text: text(row.name) }), table];
  const chain = row.chain || [];
  parts.push(el("h3", { text: `chain (${chain.length})` }));
  const list = el("ol", { class: "chain", "data-testid": "details-chain" });
  for (const c of chain) {
    const dur = fmtDur(Number(BigInt(c.end_ns) - BigInt(c.start_ns)));
    const li = el("li", { text: `${c.role ? c.role + ": " : ""}${text(c.name)} (${dur})` });
    li.addEventListener("click", () => goTo(BigInt(c.start_ns), BigInt(c.end_ns), Number(c.track)));
    list.appendChild(li);
  }
  parts.push(list);
  if (row.args !== null && row.args !== undefined) {
    parts.push(el("h3", { text: "args" }));
    parts.push(el("pre", { class: "args", text: typeof row.args === "object"
      ? JSON.stringify(row.args, (k, x) => (typeof x === "bigint" ? x.toString() : x), 1)
      : text(row.args) }));
  }
  body.replaceChildren(...parts);
}
