"""Remote stores (``store/remote.py``) against a moto S3 server on 127.0.0.1: what a
worker's rank batch fetches, and ``analyze`` on ``s3://`` (cold mirror, warm mirror) next
to the local store.

Usage (heavy: run under the shared lock)::

    flock /tmp/heavy.lock python bench/bench_remote.py STORE [--out results.json]

``STORE``: a local store (e.g. the DLRM 8-rank set scaled with
``../shared/tools/scale_trace.py`` and ingested). The store is uploaded to the moto server
this process runs (its CPU time is this process's, reported as ``server_cpu_s``; the
measured commands run in their own process trees through ``bench/measure.py``). moto is an
in-process Python server on loopback: the cold numbers measure its throughput, not S3's;
the counts of objects and bytes fetched are what they would be on S3.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _measure(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(HERE / "measure.py"), "--",
                           str(Path(sys.executable).parent / "traceatlas"), *args],
                          env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--analysis", default="breakdown")
    parser.add_argument("--batch", type=int, default=4, help="ranks in the measured task")
    opts = parser.parse_args()

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}",
           "AWS_EC2_METADATA_DISABLED": "true"}
    os.environ.update(env)
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir("bench")
    t0 = time.perf_counter()
    fs.put(str(opts.store), "bench/run.tastore", recursive=True)
    upload_s = time.perf_counter() - t0
    url = "s3://bench/run.tastore"
    manifest = json.loads((opts.store / "manifest.json").read_text())
    store_bytes = sum(int(r["bytes"]) for r in manifest["parts"])
    ranks = sorted(int(r) for r in manifest["ranks"])
    results: dict[str, Any] = {"store": str(opts.store), "ranks": len(ranks),
                               "parts": len(manifest["parts"]), "store_bytes": store_bytes,
                               "upload_s": round(upload_s, 3), "analysis": opts.analysis}

    # one worker task: which objects does a batch of ranks fetch?
    from traceatlas.analysis import registry
    from traceatlas.analysis.partitioned import RankTask, run_task
    from traceatlas.store import remote

    fetched: list[str] = []
    original = remote._download

    def counting(mirror: remote.Mirror, rel: str, tmp: Path) -> tuple[int, str]:
        fetched.append(rel)
        return original(mirror, rel, tmp)

    remote._download = counting  # type: ignore[assignment]
    batch = tuple(ranks[:opts.batch])
    with tempfile.TemporaryDirectory(dir="/work/data") as cache:
        os.environ["TRACEATLAS_CACHE_DIR"] = cache
        analysis = registry.get_analysis(opts.analysis)
        params = tuple(sorted(registry.parse_params(analysis, {}).items()))
        t0, c0 = time.perf_counter(), _cpu()
        run_task(RankTask(url, (), batch, opts.analysis, params))
        task_s = time.perf_counter() - t0
    by_rank = {r["path"]: int(r["bytes"]) for r in manifest["parts"]}
    results["task"] = {
        "batch_ranks": list(batch), "objects_fetched": len(fetched),
        "bytes_fetched": sum(by_rank[p] for p in fetched),
        "ranks_fetched": sorted({int(p.split("/")[1].partition("=")[2]) for p in fetched}),
        "tables_fetched": sorted({p.split("/")[0] for p in fetched}),
        "wall_s": round(task_s, 3), "cpu_s_incl_server": round(_cpu() - c0, 3),
    }

    # the CLI: local store, s3 cold (empty cache), s3 warm (mirror reused)
    base = {**os.environ, **env, "COLUMNS": "200"}
    cache_dir = Path(tempfile.mkdtemp(dir="/work/data", prefix="bench-remote-cache-"))
    cmd = ["analyze", opts.analysis, "--format", "json"]
    try:
        runs: dict[str, Any] = {}
        for name, target in (("local", str(opts.store)), ("s3_cold", url), ("s3_warm", url)):
            c0 = _cpu()
            runs[name] = _measure([*cmd[:2], target, *cmd[2:]],
                                  {**base, "TRACEATLAS_CACHE_DIR": str(cache_dir)})
            runs[name]["server_cpu_s"] = round(_cpu() - c0, 3)
            runs[name]["load_avg"] = os.getloadavg()
        results["cli"] = runs
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
        server.stop()
    text = json.dumps(results, indent=2)
    print(text)
    if opts.out is not None:
        opts.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
