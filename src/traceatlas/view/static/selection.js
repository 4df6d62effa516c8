// The selection panel: a shift-drag window's breakdown, efficiency and top kernels from
// /api/analyze/NAME (the same rows as `traceatlas analyze NAME --window @A:@B`), drawn as
// tables. Each cell has data-testid="<analysis>-cell", data-row (index in the result),
// data-col (column) and data-value (the exact value) for the tests.

import { get, text } from "./api.js";
import { el } from "./details.js";
import { fmtDur } from "./render.js";

// `show`: the columns drawn when the result has them (all when absent); `indent`: a column
// whose value indents the first shown column (the efficiency tree's level).
const ANALYSES = [
  { name: "breakdown", title: "Breakdown (per rank and device)", maxRows: 64 },
  { name: "efficiency", title: "Efficiency", maxRows: 40, show: ["side", "label", "value"],
    indent: "level", fallback: { label: "metric" }, unitFrom: { value: "metric" } },
  { name: "kernels", title: "Top kernels", maxRows: 15,
    show: ["rank", "name", "count", "total_ns", "share_pct"] },
];

let ctrl = null;

function cell(result, analysis, r, i) {
  const v = result.rows[r][i];
  const col = result.columns[i];
  const num = typeof v === "number" || typeof v === "bigint";
  // a value's unit may come from another column (efficiency: the metric's name)
  const unitCol = analysis.unitFrom && analysis.unitFrom[col];
  const unitName = unitCol ? String(result.rows[r][result.columns.indexOf(unitCol)]) : col;
  let shown = num && /_ns$/.test(unitName) ? fmtDur(Number(v))
    : typeof v === "number" && !Number.isInteger(v) ? v.toPrecision(4) : text(v);
  const alt = analysis.fallback && analysis.fallback[col];
  if ((v === null || v === "") && alt) shown = text(result.rows[r][result.columns.indexOf(alt)]);
  const lv = analysis.indent ? result.columns.indexOf(analysis.indent) : -1;
  if (lv >= 0 && i === shownColumns(result, analysis)[1]) {
    shown = "\u00a0\u00a0".repeat(Number(result.rows[r][lv]) || 0) + shown;  // tree depth
  }
  return el("td", { class: num ? "num" : "txt", text: shown,
    "data-testid": `${analysis.name}-cell`, "data-row": String(r), "data-col": col,
    "data-value": v === null ? "" : String(v) });
}

/** Indexes of the columns drawn for this analysis. */
function shownColumns(result, analysis) {
  const all = result.columns.map((c, i) => i);
  if (!analysis.show) return all;
  const picked = analysis.show.map((c) => result.columns.indexOf(c)).filter((i) => i >= 0);
  return picked.length ? picked : all;
}

/** A result table; with few rows and many columns it is transposed (one column per row of
 * the result) so it stays readable in the side panel. Cells carry data-row/data-col/
 * data-value (the exact value) whichever the orientation. */
function table(result, analysis) {
  const t = el("table", { class: "grid", "data-testid": `${analysis.name}-table` });
  const n = Math.min(result.rows.length, analysis.maxRows);
  const label = (c) => c.replace(/_ns$/, "");
  const cols = shownColumns(result, analysis);
  if (n > 0 && n <= 6 && cols.length > 5) {
    for (const i of cols) {
      const tr = el("tr", {}, [el("th", { text: label(result.columns[i]) })]);
      for (let r = 0; r < n; r++) tr.appendChild(cell(result, analysis, r, i));
      t.appendChild(tr);
    }
    return t;
  }
  const head = el("tr");
  for (const i of cols) head.appendChild(el("th", { text: label(result.columns[i]) }));
  t.appendChild(head);
  for (let r = 0; r < n; r++) {
    const tr = el("tr", { "data-testid": `${analysis.name}-row` });
    for (const i of cols) tr.appendChild(cell(result, analysis, r, i));
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
