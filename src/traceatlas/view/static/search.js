// Search: /api/search?name=TEXT (case-insensitive literal substring, done by the server),
// then step through the occurrences with Enter / the next and previous buttons; each step
// moves the view onto the occurrence and highlights it.

import { get } from "./api.js";

export function attachSearch(goTo) {
  const input = document.getElementById("search-input");
  const status = document.getElementById("search-status");
  let result = null;  // {text, track:[], start_ns:[], end_ns:[], name:[], total, truncated}
  let pos = -1;
  let ctrl = null;

  const show = () => {
    if (!result) { status.textContent = ""; return; }
    const n = result.track.length;
    if (n === 0) { status.textContent = "no match"; return; }
    const more = result.truncated ? `+ (${result.total})` : "";
    status.textContent = `${pos + 1} / ${n}${more}`;
    goTo(BigInt(result.start_ns[pos]), BigInt(result.end_ns[pos]), Number(result.track[pos]));
  };

  const run = async (step) => {
    const q = input.value.trim();
    if (!q) { result = null; show(); return; }
    if (!result || result.text !== q) {
      if (ctrl) ctrl.abort();
      ctrl = new AbortController();
      status.textContent = "searching…";
      try {
        const r = await get("search", { name: q, limit: 10000 }, ctrl.signal);
        result = { ...r, text: q };
        pos = step >= 0 ? -1 : 0;
      } catch (err) {
        if (err.name !== "AbortError") status.textContent = String(err.message || err);
        return;
      }
    }
    const n = result.track.length;
    if (n) pos = (pos + step + n) % n;
    show();
  };

  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); run(e.shiftKey ? -1 : 1); }
  });
  document.getElementById("search-next").addEventListener("click", () => run(1));
  document.getElementById("search-prev").addEventListener("click", () => run(-1));
}
