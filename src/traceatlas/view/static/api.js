// HTTP client of the viewer's API (/api/...).
//
// Times: the server sends absolute epoch ns as JSON integers (about 1.8e18), beyond the
// 2^53 that a JS Number holds exactly. parseJSON keeps every integer that is not a safe
// Number as a BigInt, from the number's own source text (JSON.parse source text access,
// Chromium >= 114) or, in browsers without it, from a rewrite that quotes integer literals
// of 16+ digits first; `rel()` turns an absolute BigInt into ns relative to the run's
// origin, a Number that is exact for runs under ~104 days.
// The token from the page's own URL (?token=...) is sent as `Authorization: Bearer` on
// every request. Requests take an AbortSignal so a moved view cancels stale ones.

const params = new URLSearchParams(window.location.search);
const TOKEN = params.get("token");

/** True when JSON.parse hands the reviver the number's source text (Chromium >= 114). */
const HAS_SOURCE = (() => {
  let ok = false;
  try {
    JSON.parse("1", (k, v, context) => { ok = !!context && typeof context.source === "string"; return v; });
  } catch (e) { /* no reviver context */ }
  return ok;
})();

// A JSON string literal (with an optional ":" after it: then it is a key) or a number.
// Outside strings only numbers hold digits (true/false/null do not).
const TOKENS = /"(?:[^"\\]|\\.)*"(\s*:)?|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
const NUL = "\\u0000";  // as written in JSON text

/** The fallback's rewrite: every integer literal of 16+ digits becomes the string
 * NUL + digits; a string VALUE that already starts with NUL gets one more NUL in front
 * (the reviver strips it), so no data can pass for a rewritten number. */
export function quoteBigInts(text) {
  return text.replace(TOKENS, (tok, colon) => {
    if (tok[0] === '"') return !colon && tok.startsWith('"' + NUL) ? '"' + NUL + tok.slice(1) : tok;
    const digits = tok[0] === "-" ? tok.length - 1 : tok.length;
    return digits >= 16 && /^-?\d+$/.test(tok) ? `"${NUL}${tok}"` : tok;
  });
}

function bigReviver(key, value) {
  if (typeof value !== "string" || value.charCodeAt(0) !== 0) return value;
  const rest = value.slice(1);
  if (rest.charCodeAt(0) === 0) return rest;  // a string that started with NUL
  const n = Number(rest);
  return Number.isSafeInteger(n) ? n : BigInt(rest);
}

/** Parse JSON keeping big integers exact: an integer that is not a safe Number becomes a
 * BigInt (from the number's own source text; browsers without JSON.parse source text
 * access, or `forceFallback`, go through quoteBigInts first). */
export function parseJSON(text, forceFallback = false) {
  if (!HAS_SOURCE || forceFallback) return JSON.parse(quoteBigInts(text), bigReviver);
  return JSON.parse(text, (key, value, context) => {
    if (typeof value === "number" && !Number.isSafeInteger(value) && Number.isInteger(value)
        && context && typeof context.source === "string" && /^-?\d+$/.test(context.source)) {
      return BigInt(context.source);
    }
    return value;
  });
}

/** An API error carrying the server's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** GET /api/<path>?<query> and parse its JSON; `query` values are strings, numbers or
 * BigInts (absolute ns). Rejects with ApiError on a non-2xx reply, AbortError on abort. */
export async function get(path, query = {}, signal = undefined) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null) q.set(k, String(v));
  }
  const url = "api/" + path + (q.toString() ? "?" + q.toString() : "");
  const headers = {};
  if (TOKEN) headers["Authorization"] = "Bearer " + TOKEN;
  const resp = await fetch(url, { headers, signal });
  const text = await resp.text();
  if (!resp.ok) {
    let message = text;
    try { message = parseJSON(text).error || text; } catch (e) { /* keep the text */ }
    throw new ApiError(resp.status, `${resp.status}: ${message}`);
  }
  return parseJSON(text);
}

/** The token the page was opened with (kept in links we build), or null. */
export function token() {
  return TOKEN;
}

/** Absolute ns (BigInt or Number) -> ns relative to `origin` (BigInt), as a Number. */
export function rel(abs, origin) {
  if (typeof abs === "bigint") return Number(abs - origin);
  return Number(BigInt(Math.round(abs)) - origin);
}

/** Relative ns (Number) -> absolute ns (BigInt), rounded to the ns. */
export function abs(relNs, origin) {
  return origin + BigInt(Math.round(relNs));
}

/** A column of absolute times -> Float64Array of relative ns. */
export function relColumn(col, origin) {
  const out = new Float64Array(col.length);
  for (let i = 0; i < col.length; i++) out[i] = rel(col[i], origin);
  return out;
}

/** A BigInt/number as plain text (analysis values, ids). */
export function text(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toPrecision(6);
  if (typeof v === "object") return JSON.stringify(v, (k, x) => (typeof x === "bigint" ? x.toString() : x));
  return String(v);
}
