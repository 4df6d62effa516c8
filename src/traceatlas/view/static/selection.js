// The selection panel: a shift-drag window's breakdown, efficiency and top kernels from
// /api/analyze/NAME (the same rows as `traceatlas analyze NAME --window @A:@B`), drawn as
// tables. Each cell has data-testid="<analysis>-cell", data-row (index in the result),
// data-col (column) and data-value (the exact value) for the tests.

import { get, text } from "./api.js";
import { el } from "./details.js";
import { fmtDur } from "./render.js";

const ANALYSES = [
  { name: "breakdown", title: "Breakdown (per rank and device)", maxRows: 64 },
  { name: "efficiency", title: "Efficiency", maxRows: 40 },
  { name: "kernels", title: "Top kernels", maxRows: 15 },
];

let ctrl = null;

function cell(result, analysis, r, i) {
  const v = result.rows[r][i];
  const col = result.columns[i];
  const num = typeof v === "number" || typeof v === "bigint";
  const shown = num && /_ns$/.test(col) ? fmtDur(Number(v)) : text(v);
  return el("td", { class: num ? "num" : "", text: shown, "data-testid": `${analysis.name}-cell`,
    "data-row": String(r), "data-col": col, "data-value": v === null ? "" : String(v) });
}

/** A result table; with few rows and many columns it is transposed (one column per row of
 * the result) so it stays readable in the side panel. Cells carry data-row/data-col/
 * data-value (the exact value) whichever the orientation. */
function table(result, analysis) {
  const t = el("table", { class: "grid", "data-testid": `${analysis.name}-table` });
  const n = Math.min(result.rows.length, analysis.maxRows);
  const label = (c) => c.replace(/_ns$/, "");
  if (n > 0 && n <= 6 && result.columns.length > 5) {
    for (let i = 0; i < result.columns.length; i++) {
      const tr = el("tr", {}, [el("th", { text: label(result.columns[i]) })]);
      for (let r = 0; r < n; r++) tr.appendChild(cell(result, analysis, r, i));
      t.appendChild(tr);
    }
    return t;
  }
  const head = el("tr");
  for (const c of result.columns) head.appendChild(el("th", { text: label(c) }));
  t.appendChild(head);
  for (let r = 0; r < n; r++) {
    const tr = el("tr", { "data-testid": `${analysis.name}-row` });
    result.columns.forEach((c, i) => tr.appendChild(cell(result, analysis, r, i)));
    t.appendChild(tr);
  }
  return el("div", { class: "scroll-x" }, [t]);
}

/** Fetch and show the analyses of [a, b] (absolute ns, BigInt) over ranks `ranks` ("lo-hi"). */
export async function showSelection(a, b, ranks) {
  const panel = document.getElementById("selection-panel");
  const body = document.getElementById("selection-body");
  panel.hidden = false;
  if (ctrl) ctrl.abort();
  ctrl = new AbortController();
  const signal = ctrl.signal;
  body.replaceChildren(el("div", { class: "muted", "data-testid": "selection-window",
    text: `${fmtDur(Number(b - a))} window @${a}:@${b}` }));
  const sections = ANALYSES.map((an) => {
    const sec = el("section", { "data-testid": `selection-${an.name}` },
      [el("h3", { text: an.title }), el("div", { class: "muted", text: "loading…" })]);
    body.appendChild(sec);
    return sec;
  });
  await Promise.all(ANALYSES.map(async (an, i) => {
    const sec = sections[i];
    try {
      const r = await get(`analyze/${an.name}`, { start_ns: a, end_ns: b, ranks }, signal);
      const parts = [el("h3", { text: an.title }), table(r, an)];
      for (const n of r.notes || []) parts.push(el("div", { class: "muted", text: text(n) }));
      sec.replaceChildren(...parts);
    } catch (err) {
      if (err.name === "AbortError") return;
      sec.replaceChildren(el("h3", { text: an.title }),
        el("div", { class: "muted", text: String(err.message || err) }));
    }
  }));
  if (!signal.aborted) panel.dataset.ready = "1";
}

/** Hide the panel and cancel its requests. */
export function hideSelection() {
  if (ctrl) ctrl.abort();
  const panel = document.getElementById("selection-panel");
  panel.hidden = true;
  delete panel.dataset.ready;
}
