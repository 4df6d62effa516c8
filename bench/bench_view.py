"""Viewer scale benchmark (issue 10): pyramid build, tile latency, first frame, memory.

For one store (already ingested; pass the ingest's ``bench/measure.py`` JSON with
``--ingest-json`` to put the build against the ingest):

1. build: ``traceatlas.view.pyramid.ensure_pyramid`` in a fresh process under
   ``bench/measure.py`` with ``TRACEATLAS_CACHE_DIR`` pointing at an empty directory
   (cold: no pyramid yet); wall, CPU, peak RSS; pyramid bytes on disk (``lod/``) vs the
   store's bytes;
2. server: ``traceatlas view STORE --no-browser --port 0`` as a subprocess with that
   same cache dir (the pyramid is reused), URL read from its output;
3. requests over HTTP (httpx, one keep-alive client, sequential as one page would
   issue them): ``--n`` random views. A view is a window drawn log-uniformly between
   ``--pixels`` x 1 us and the whole run, at a uniform random start, the level
   ``level_for(window, pixels)`` (what the front-end computes), and the tracks a screen
   of ``--lanes`` lanes shows (a random contiguous run of the track list, in its order).
   Per view: ``/api/tiles`` (JSON); when the store has more ranks than ``--lanes``, also
   ``/api/rows?kind=rank_device&groups=--groups`` over all ranks (what the page draws
   for many ranks); when a track answers ``raw``, ``/api/events`` for those tracks
   (the page's deep-zoom fall back). Every ``--arrow-every``-th view also asks
   ``format=arrow`` for the same tiles: bytes and time of both formats;
4. memory: the server's ``VmRSS`` and ``VmHWM`` (``/proc/PID/status``) after the run;
5. first frame: Playwright + Debian chromium (tests/e2e launch args) opens the page
   ``--frames`` times, each in a new context; time from ``goto`` to
   ``window.__traceatlas.frames >= 1`` and to the first ``/api/tiles`` or
   ``/api/rows`` response; when the page exposes no ``__traceatlas`` the frame time is
   reported as missing (never guessed).

Prints a table and writes one JSON file. The machine is shared (2 cores): every
timing carries the machine's other CPU use during the phase (``other_cores``).

Example::

    .venv/bin/python bench/bench_view.py /work/bench_view/s100m.tastore \\
        --ingest-json /work/bench_view/ingest100m.json --label 100m \\
        --json-out bench/results_view_100m.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BIN = Path(sys.executable).parent
MEASURE = HERE / "measure.py"
URL_RE = re.compile(r"https?://[\w.\-\[\]:]+:\d+/\S*")

sys.path.insert(0, str(HERE))
from measure import system_busy_s  # noqa: E402


def du(path: Path) -> int:
    """Bytes of the regular files under ``path``."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of ``values``."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def summary(values: list[float]) -> dict[str, float | int]:
    return {"n": len(values), "p50": round(pct(values, 50), 2), "p95": round(pct(values, 95), 2),
            "max": round(max(values), 2) if values else float("nan"),
            "mean": round(statistics.fmean(values), 2) if values else float("nan")}


# ---------------------------------------------------------------- 1. build

BUILD_CODE = """
import json, os, sys, time
t0 = time.perf_counter()
import traceatlas
from traceatlas.view.pyramid import ensure_pyramid
trace = traceatlas.open(sys.argv[1])
t1 = time.perf_counter()
p = ensure_pyramid(trace)
t2 = time.perf_counter()
m = p.meta()
print(json.dumps({"open_s": t1 - t0, "ensure_s": t2 - t1, "tracks": len(p.tracks),
                  "levels": len(m["levels"]), "meta_build_s": m.get("build_s"),
                  "meta_bytes": m.get("bytes"), "names": len(p.names)}))
"""


def build(store: Path, cache: Path, timeout: float) -> dict[str, Any]:
    """Cold pyramid build in a fresh process (measure.py); cache dir must be empty."""
    env = dict(os.environ, TRACEATLAS_CACHE_DIR=str(cache))
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        proc = subprocess.run(
            [sys.executable, str(MEASURE), "--timeout", str(timeout), "--stdout", str(out),
             "--stderr", str(err), "--", sys.executable, "-c", BUILD_CODE, str(store)],
            env=env, capture_output=True, text=True, check=False)
        m = json.loads(proc.stdout.strip().splitlines()[-1])
        if m.get("returncode") != 0:
            raise SystemExit(f"pyramid build failed: {err.read_text()[-2000:]}")
        inner = json.loads(out.read_text().strip().splitlines()[-1])
    lod = cache / "lod"
    return {"measure": m, **inner, "pyramid_bytes": du(lod) if lod.exists() else None}


# ---------------------------------------------------------------- 2. server

class Server:
    """``traceatlas view STORE --no-browser --port 0``; URL parsed from its output."""

    def __init__(self, store: Path, cache: Path, timeout: float) -> None:
        env = dict(os.environ, TRACEATLAS_CACHE_DIR=str(cache), COLUMNS="200")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [str(BIN / "traceatlas"), "view", str(store), "--no-browser", "--port", "0"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.url: str | None = None
        found = threading.Event()

        def reader() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                hit = URL_RE.search(line)
                if hit and self.url is None:
                    self.url = hit.group(0)
                    found.set()

        threading.Thread(target=reader, daemon=True).start()
        while not found.wait(0.2):
            if self.proc.poll() is not None or time.perf_counter() - t0 > timeout:
                self.stop()
                raise SystemExit("view server did not print a URL:\n" + "".join(self.lines))
        assert self.url is not None
        base = re.match(r"(https?://[^/]+)", self.url)
        assert base is not None
        self.base = base.group(1)
        token = re.search(r"[?&#]token=([^&#\s]+)", self.url)
        self.headers = {"Authorization": f"Bearer {token.group(1)}"} if token else {}
        with httpx.Client(base_url=self.base, headers=self.headers) as c:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if c.get("/api/meta").status_code == 200:
                        break
                if time.perf_counter() - t0 > timeout:
                    raise SystemExit("view server never answered /api/meta")
                time.sleep(0.1)
        self.startup_s = time.perf_counter() - t0

    def memory(self) -> dict[str, int]:
        """VmRSS / VmHWM and the RSS split (RssAnon: heap; RssFile: file pages, mostly the
        memory-mapped pyramid, shared with the page cache and reclaimable), in bytes, of
        the server process and its children."""
        out: dict[str, int] = {}
        pids = [self.proc.pid]
        with contextlib.suppress(Exception):
            import psutil
            pids += [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        for pid in pids:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    key, _, val = line.partition(":")
                    if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                        out[key] = out.get(key, 0) + int(val.split()[0]) * 1024
        out["processes"] = len(pids)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- 3. requests

def level_for(window_ns: int, pixels: int) -> int:
    from traceatlas.view.levels import level_for as lf
    return lf(window_ns, pixels)


CHUNK = 512
"""Bins per tile chunk the front-end caches and asks for (view/static/tiles.js)."""


def random_views(meta: dict[str, Any], tracks: list[dict[str, Any]], n: int, pixels: int,
                 lanes: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    """Random views as the page asks for them: tiles over whole CHUNK-bin chunks, raw
    events and rank groups over the window padded by half a window each side."""
    start, end = int(meta["start_ns"]), int(meta["end_ns"])
    origin = int(meta.get("origin_ns", start))
    span = max(end - start, 1)
    lo = min(pixels * 1024, span)
    order = sorted(tracks, key=lambda t: int(t["id"]))
    for _ in range(n):
        window = int(math.exp(rng.uniform(math.log(lo), math.log(span))))
        a = start + rng.randrange(0, max(span - window, 0) + 1)
        first = rng.randrange(0, max(len(order) - lanes, 0) + 1)
        shown = order[first:first + lanes]
        level = level_for(window, pixels)
        chunk_ns = CHUNK * 1024 * 4 ** level
        c0, c1 = (a - origin) // chunk_ns, (a + window - origin) // chunk_ns
        yield {"level": level, "start_ns": a, "end_ns": a + window, "window_ns": window,
               "tile_start_ns": origin + c0 * chunk_ns, "tile_end_ns": origin + (c1 + 1) * chunk_ns,
               "pad_start_ns": a - window // 2, "pad_end_ns": a + window + window // 2,
               "tracks": [int(t["id"]) for t in shown if t.get("kind") != "counter"],
               "counters": [int(t["id"]) for t in shown if t.get("kind") == "counter"],
               "raw": [int(t["id"]) for t in shown if t.get("kind") != "counter"
                       and level < int(t.get("finest_level") or 0)]}


def timed_get(c: httpx.Client, path: str, params: dict[str, Any]) -> tuple[float, httpx.Response]:
    t0 = time.perf_counter()
    r = c.get(path, params=params)
    body = r.content  # read fully
    ms = (time.perf_counter() - t0) * 1e3
    del body
    return ms, r


def requests(srv: Server, n: int, pixels: int, lanes: int, groups: int, arrow_every: int,
             seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    res: dict[str, list[float]] = {"tiles": [], "rows": [], "events": [], "tiles_arrow": [],
                                   "tiles_json_paired": []}
    size: dict[str, list[int]] = {"tiles": [], "rows": [], "events": [], "tiles_arrow": [],
                                  "tiles_json_paired": []}
    errors: list[str] = []
    raw_tracks = bins = 0
    truncated = 0
    by_level: dict[int, list[float]] = {}
    with httpx.Client(base_url=srv.base, headers=srv.headers, timeout=120) as c:
        meta = c.get("/api/meta").json()
        tracks = c.get("/api/tracks").json()
        ranks = meta.get("ranks", [])
        many = len(ranks) > lanes
        busy0 = system_busy_s()
        t_all = time.perf_counter()
        for i, v in enumerate(random_views(meta, tracks, n, pixels, lanes, rng)):
            q = {"level": v["level"], "start_ns": v["tile_start_ns"],
                 "end_ns": v["tile_end_ns"], "tracks": ",".join(map(str, v["tracks"]))}
            ms, r = timed_get(c, "/api/tiles", q)
            if r.status_code != 200:
                errors.append(f"tiles {q['level']} {r.status_code} {r.text[:200]}")
                continue
            res["tiles"].append(ms)
            size["tiles"].append(len(r.content))
            by_level.setdefault(v["level"], []).append(ms)
            body = r.json()
            raw = [t["id"] for t in body["tracks"] if t.get("raw")]
            if sorted(raw) != sorted(v["raw"]):
                errors.append(f"raw flags differ from finest_level: {raw} vs {v['raw']}")
            bins += sum(len(t.get("bin", [])) for t in body["tracks"])
            if arrow_every and i % arrow_every == 0:
                ms_a, ra = timed_get(c, "/api/tiles", {**q, "format": "arrow"})
                if ra.status_code == 200:
                    res["tiles_arrow"].append(ms_a)
                    size["tiles_arrow"].append(len(ra.content))
                    res["tiles_json_paired"].append(ms)
                    size["tiles_json_paired"].append(len(r.content))
                else:
                    errors.append(f"arrow {ra.status_code} {ra.text[:200]}")
            if v["counters"]:
                cq = {**q, "tracks": ",".join(map(str, v["counters"]))}
                ms_c, rc = timed_get(c, "/api/counters", cq)
                if rc.status_code == 200:
                    res.setdefault("counters", []).append(ms_c)
                    size.setdefault("counters", []).append(len(rc.content))
                else:
                    errors.append(f"counters {rc.status_code} {rc.text[:200]}")
            if many:
                rq = {"level": v["level"], "start_ns": v["pad_start_ns"],
                      "end_ns": v["pad_end_ns"], "kind": "rank_device",
                      "ranks": f"{min(ranks)}-{max(ranks)}", "groups": groups}
                ms_r, rr = timed_get(c, "/api/rows", rq)
                if rr.status_code == 200:
                    res["rows"].append(ms_r)
                    size["rows"].append(len(rr.content))
                else:
                    errors.append(f"rows {rr.status_code} {rr.text[:200]}")
            if raw:
                raw_tracks += len(raw)
                eq = {"start_ns": v["pad_start_ns"], "end_ns": v["pad_end_ns"],
                      "tracks": ",".join(map(str, raw)), "limit": 20000}
                ms_e, re_ = timed_get(c, "/api/events", eq)
                if re_.status_code == 200:
                    res["events"].append(ms_e)
                    size["events"].append(len(re_.content))
                    truncated += bool(re_.json().get("truncated"))
                else:
                    errors.append(f"events {re_.status_code} {re_.text[:200]}")
        wall = time.perf_counter() - t_all
        other = system_busy_s() - busy0
    # other_cores: machine busy CPU (both processes included) minus... we report the
    # machine's busy cores during the phase; the server itself uses at most ~1 core.
    return {
        "views": n, "pixels": pixels, "lanes": lanes, "groups": groups if many else None,
        "tracks_total": len(tracks), "ranks": len(ranks), "levels": len(meta["levels"]),
        "latency_ms": {k: summary(v) for k, v in res.items() if v},
        "bytes": {k: summary([float(x) for x in v]) for k, v in size.items() if v},
        "tiles_p95_by_level": {str(k): round(pct(v, 95), 2) for k, v in sorted(by_level.items())},
        "raw_track_answers": raw_tracks, "bins_returned": bins,
        "events_truncated": truncated, "errors": errors[:20], "n_errors": len(errors),
        "wall_s": round(wall, 2), "machine_busy_cores": round(other / wall, 2),
    }


# ---------------------------------------------------------------- 5. first frame

STATE_JS = ("() => { const s = window.__traceatlas; if (!s) return null; "
            "return {frames: s.frames, ready: s.ready, pending: s.pending, "
            "lastError: s.lastError, mode: s.mode, level: s.level}; }")
"""first frame: ``ready`` (the page drew once); complete: a tiles or rows answer arrived
and a frame was drawn with no request pending or due (``pending == 0``)."""


def first_frame(srv: Server, repeats: int, timeout_s: float) -> dict[str, Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"error": "playwright not installed"}
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return {"error": "chromium not found"}
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    assert srv.url is not None
    runs: list[dict[str, Any]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=args)
        try:
            for _ in range(repeats):
                ctx = browser.new_context(viewport={"width": 1600, "height": 900})
                page = ctx.new_page()
                seen: dict[str, float] = {}
                console: list[str] = []
                foreign: list[str] = []
                t0 = time.perf_counter()

                def on_resp(resp: Any, seen: dict[str, float] = seen, t0: float = t0) -> None:
                    for key in ("/api/tiles", "/api/rows", "/api/meta", "/api/tracks"):
                        if key in resp.url and key not in seen:
                            seen[key] = (time.perf_counter() - t0) * 1e3

                def on_req(req: Any, foreign: list[str] = foreign) -> None:
                    if not req.url.startswith(srv.base) and not req.url.startswith("data:"):
                        foreign.append(req.url)

                page.on("response", on_resp)
                page.on("request", on_req)
                page.on("console", lambda m, console=console: console.append(
                    f"{m.type}: {m.text}") if m.type == "error" else None)
                t0 = time.perf_counter()
                page.goto(srv.url)
                loaded = (time.perf_counter() - t0) * 1e3
                frame_ms: float | None = None
                done_ms: float | None = None
                has_state = False
                deadline = t0 + timeout_s
                while time.perf_counter() < deadline:
                    st = page.evaluate(STATE_JS)
                    now = (time.perf_counter() - t0) * 1e3
                    if st is not None:
                        has_state = True
                        if frame_ms is None and (st["ready"] or (st["frames"] or 0) >= 1):
                            frame_ms = now
                        data_in = "/api/tiles" in seen or "/api/rows" in seen
                        if frame_ms is not None and data_in and st["pending"] == 0:
                            done_ms = now
                            break
                    page.wait_for_timeout(10)
                state = page.evaluate(STATE_JS)
                runs.append({"goto_ms": round(loaded, 1),
                             "first_frame_ms": round(frame_ms, 1) if frame_ms else None,
                             "complete_frame_ms": round(done_ms, 1) if done_ms else None,
                             "first_response_ms": {k: round(v, 1) for k, v in seen.items()},
                             "has_state": has_state, "state": state,
                             "console_errors": console[:5], "foreign_requests": foreign[:5]})
                ctx.close()
        finally:
            browser.close()
    ff = [r["first_frame_ms"] for r in runs if r["first_frame_ms"] is not None]
    fc = [r["complete_frame_ms"] for r in runs if r["complete_frame_ms"] is not None]
    ft = [r["first_response_ms"].get("/api/tiles") or r["first_response_ms"].get("/api/rows")
          for r in runs]
    ft_ok = [x for x in ft if x is not None]
    return {"runs": runs, "first_frame_ms_median": round(statistics.median(ff), 1) if ff
            else None, "first_frame_ms_max": round(max(ff), 1) if ff else None,
            "complete_frame_ms_median": round(statistics.median(fc), 1) if fc else None,
            "complete_frame_ms_max": round(max(fc), 1) if fc else None,
            "first_tiles_response_ms_median": round(statistics.median(ft_ok), 1) if ft_ok
            else None}



# ---------------------------------------------------------------- TensorBoard (comparison)

def tensorboard(venv: Path, trace: Path, timeout: float) -> dict[str, Any]:
    """TensorBoard + torch-tb-profiler (installed in ``venv``) on one Kineto file: time and
    peak tree RSS until the plugin lists the run, then its ``/trace`` reply (what the
    trace view downloads: the whole file, gzip). The trace view page itself needs
    webcomponents from cdnjs (HTML imports), so it cannot render offline."""
    import psutil

    logdir = Path(tempfile.mkdtemp(prefix="bench_view_tb_"))
    (logdir / "run").mkdir()
    (logdir / "run" / "worker0.pt.trace.json").symlink_to(trace.resolve())
    port = 6100 + os.getpid() % 800
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(venv / "bin" / "tensorboard"), "--logdir", str(logdir),
                             "--port", str(port), "--host", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out: dict[str, Any] = {"trace": str(trace), "trace_bytes": trace.stat().st_size}
    peak = 0
    base = f"http://127.0.0.1:{port}/data/plugin/pytorch_profiler"
    try:
        with httpx.Client(timeout=600) as c:
            runs: Any = None
            while time.perf_counter() - t0 < timeout:
                with contextlib.suppress(psutil.Error):
                    root = psutil.Process(proc.pid)
                    tree = [root, *root.children(recursive=True)]
                    peak = max(peak, sum(p.memory_info().rss for p in tree
                                         if p.is_running()))
                with contextlib.suppress(httpx.TransportError, ValueError):
                    runs = c.get(f"{base}/runs").json()
                    if runs.get("runs") and not runs.get("loading"):
                        break
                if proc.poll() is not None:
                    out["error"] = f"tensorboard exited {proc.returncode}"
                    break
                time.sleep(0.5)
            out["loaded_s"] = round(time.perf_counter() - t0, 1)
            out["runs"] = runs
            out["tree_rss_peak_bytes"] = peak
            if runs and runs.get("runs"):
                run = runs["runs"][0]
                views = c.get(f"{base}/views", params={"run": run}).json()
                workers = c.get(f"{base}/workers", params={"run": run, "view": views[0]}).json()
                spans = c.get(f"{base}/spans", params={"run": run, "worker": workers[0]}).json()
                q = {"run": run, "worker": workers[0]}
                if spans:
                    q["span"] = spans[0]
                t1 = time.perf_counter()
                r = c.get(f"{base}/trace", params=q)
                out["trace_reply"] = {"status": r.status_code, "s": round(
                    time.perf_counter() - t1, 1), "bytes_decoded": len(r.content),
                    "bytes_on_wire": r.num_bytes_downloaded,
                    "content_encoding": r.headers.get("content-encoding")}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(logdir, ignore_errors=True)
    return out


# ---------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, nargs="?")
    ap.add_argument("--tb-venv", type=Path, default=None,
                    help="only run TensorBoard (+ torch-tb-profiler) from this venv on --tb-trace")
    ap.add_argument("--tb-trace", type=Path, default=None)
    ap.add_argument("--label", default=None)
    ap.add_argument("--ingest-json", type=Path, default=None,
                    help="bench/measure.py JSON of the store's ingest")
    ap.add_argument("--cache", type=Path, default=None,
                    help="cache dir (default: a fresh temporary one, removed at the end)")
    ap.add_argument("--skip-build", action="store_true",
                    help="reuse the pyramid already in --cache (no cold build)")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--pixels", type=int, default=1600)
    ap.add_argument("--lanes", type=int, default=64, help="lanes one screen shows")
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--arrow-every", type=int, default=5)
    ap.add_argument("--frames", type=int, default=3, help="first-frame page loads")
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json-out", type=Path, default=None)
    a = ap.parse_args()
    if a.tb_venv is not None:
        res = tensorboard(a.tb_venv, a.tb_trace, a.timeout)
        print(json.dumps(res, indent=1))
        if a.json_out:
            a.json_out.write_text(json.dumps(res, indent=1) + "\n")
        return
    if a.store is None:
        ap.error("give a store")
    store = a.store.resolve()
    own_cache = a.cache is None
    cache = Path(tempfile.mkdtemp(prefix="bench_view_cache_")) if own_cache else a.cache
    result: dict[str, Any] = {
        "label": a.label or store.name, "store": str(store),
        "machine": {"nproc": os.cpu_count(), "platform": platform.platform(),
                    "mem_total_gb": round(os.sysconf("SC_PAGE_SIZE")
                                          * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)},
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    manifest = json.loads((store / "manifest.json").read_text())
    result["store_bytes"] = du(store)
    result["ranks"] = len(manifest.get("ranks", []))
    result["intervals"] = sum(int(s["rows"]["intervals"]) for s in manifest["sources"])
    if a.ingest_json:
        result["ingest"] = json.loads(a.ingest_json.read_text().strip().splitlines()[-1])
    try:
        if not a.skip_build:
            print(f"building pyramid (cold, cache {cache}) ...", flush=True)
            result["build"] = build(store, cache, a.timeout)
            print(json.dumps(result["build"]), flush=True)
        srv = Server(store, cache, a.timeout)
        try:
            result["server_startup_s"] = round(srv.startup_s, 2)
            result["memory_after_start"] = srv.memory()
            print(f"server at {srv.base}; {a.n} views ...", flush=True)
            result["requests"] = requests(srv, a.n, a.pixels, a.lanes, a.groups,
                                          a.arrow_every, a.seed)
            result["memory_after_requests"] = srv.memory()
            if a.frames:
                result["first_frame"] = first_frame(srv, a.frames, 30)
            result["memory_after_frames"] = srv.memory()
        finally:
            srv.stop()
    finally:
        if own_cache:
            shutil.rmtree(cache, ignore_errors=True)
    print_table(result)
    if a.json_out:
        a.json_out.write_text(json.dumps(result, indent=1) + "\n")


def print_table(r: dict[str, Any]) -> None:
    gb = 1e9
    print(f"\n== {r['label']}: {r['intervals']:,} intervals, {r['ranks']} ranks, "
          f"store {r['store_bytes'] / gb:.2f} GB")
    if "ingest" in r:
        m = r["ingest"]
        print(f"ingest: {m['wall_s']:.1f} s, peak RSS {m['maxrss_bytes'] / gb:.2f} GB")
    if "build" in r:
        b = r["build"]
        m = b["measure"]
        pb = b["pyramid_bytes"] or 0
        print(f"pyramid build (cold, fresh process): {m['wall_s']:.1f} s wall "
              f"(ensure {b['ensure_s']:.1f} s), peak RSS {m['maxrss_bytes'] / gb:.2f} GB, "
              f"{pb / 1e6:.1f} MB = {pb / max(r['store_bytes'], 1):.2f} x store"
              + (f", {b['ensure_s'] / r['ingest']['wall_s']:.2f} x ingest time"
                 if "ingest" in r else ""))
    q = r.get("requests", {})
    print(f"{'request':<18}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}{'p50 bytes':>12}")
    for k, v in q.get("latency_ms", {}).items():
        b = q["bytes"].get(k, {})
        print(f"{k:<18}{v['n']:>6}{v['p50']:>10.1f}{v['p95']:>10.1f}{v['max']:>10.1f}"
              f"{b.get('p50', float('nan')):>12.0f}")
    for key in ("memory_after_requests", "memory_after_frames"):
        mem = r.get(key)
        if mem:
            print(f"server {key}: RSS {mem.get('VmRSS', 0) / 1e6:.0f} MB (anon "
                  f"{mem.get('RssAnon', 0) / 1e6:.0f} MB, file {mem.get('RssFile', 0) / 1e6:.0f}"
                  f" MB), HWM {mem.get('VmHWM', 0) / 1e6:.0f} MB")
    ff = r.get("first_frame")
    if ff:
        print(f"first frame: median {ff.get('first_frame_ms_median')} ms; complete frame "
              f"(data drawn, nothing pending) median {ff.get('complete_frame_ms_median')} ms, "
              f"max {ff.get('complete_frame_ms_max')} ms; first tiles/rows response median "
              f"{ff.get('first_tiles_response_ms_median')} ms")
    if q.get("n_errors"):
        print(f"ERRORS: {q['n_errors']}: {q['errors'][:3]}")


if __name__ == "__main__":
    main()
