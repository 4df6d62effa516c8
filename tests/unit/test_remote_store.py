"""Stores on S3 (``store/remote.py``), against a moto S3 server on 127.0.0.1 (no network):
the CLI on ``s3://`` gives the local store's tables; a worker's ``RankTask`` fetches only
its ranks' parts; the Dask engine on the URL equals the local result; a missing bucket,
a missing or altered part and missing extras are one-line errors, exit 2. ``gs://`` is
tested for its URL handling and the "needs gcsfs" error only (no fake GCS server here).

Expected values: the same command or analysis on the local store the bucket was uploaded
from (a second code path: no mirror, no fetch); the fetched objects are counted by
wrapping the one download function."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.partitioned import RankTask, run_task
from traceatlas.engine import LocalEngine
from traceatlas.errors import InputError, StoreDamagedError, StoreError
from traceatlas.store import remote
from traceatlas.testing import TraceBuilder, write_multi_rank

moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")

BUCKET = "runs"
URL = f"s3://{BUCKET}/run.tastore"


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 ranks, one gemm each (1, 2, 3 us) plus a comm kernel."""
    tmp = tmp_path_factory.mktemp("remote")
    builders = [TraceBuilder(r, 3, profiler_markers=False) for r in range(3)]
    for r, b in enumerate(builders):
        b.launch("gemm", 0, 1_000, 10_000, 1_000 * (r + 1))
        b.launch("ncclKernel_AllReduce_RING_LL_Sum_float", 0, 20_000, 30_000, 500)
    paths = write_multi_rank(tmp / "in", builders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.ingest(paths, tmp / "run.tastore", engine=LocalEngine(1))


@pytest.fixture(scope="module")
def s3(local_store: Path) -> Iterator[dict[str, str]]:
    """A moto S3 server with the store uploaded as ``s3://runs/run.tastore``; yields the
    environment that points s3fs (botocore) at it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}",
           "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir(BUCKET)
        fs.put(str(local_store), f"{BUCKET}/run.tastore", recursive=True)
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache root (the mirrors' home) for each test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TRACEATLAS_CACHE_DIR", str(root))
    return root


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The relative path of every part downloaded in this process, in order."""
    seen: list[str] = []
    original = remote._download

    def counting(mirror: remote.Mirror, rel: str, tmp: Path) -> tuple[int, str]:
        seen.append(rel)
        return original(mirror, rel, tmp)

    monkeypatch.setattr(remote, "_download", counting)
    return seen


def _cli(args: list[str], env: dict[str, str], cache: Path) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env, "TRACEATLAS_CACHE_DIR": str(cache), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "traceatlas.cli.main", *args], env=full,
                          capture_output=True, text=True, timeout=300)


def _fs() -> Any:
    return s3fs.S3FileSystem(skip_instance_cache=True)


# -- URLs ------------------------------------------------------------------------------------


def test_remote_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert remote.remote_url("s3://b/run.tastore/") == "s3://b/run.tastore"
    assert remote.remote_url("S3://b/k") == "s3://b/k"
    assert remote.remote_url("gs://b/k") == "gs://b/k"
    assert remote.remote_url("memory://x") == "memory://x"
    assert remote.remote_url("file:///a/b") is None
    assert remote.remote_url("/a/b") is None
    # what pathlib makes of a URL typed as a path (a CLI argument)
    assert remote.remote_url(Path("s3://b/run.tastore")) == "s3://b/run.tastore"
    assert remote.remote_url(Path("gs://b/k")) == "gs://b/k"
    assert remote.remote_url(Path("memory://x")) == "memory://x"  # a scheme fsspec knows
    assert remote.remote_url("nosuchscheme:/x") is None  # any other: a local path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s3:" / "b").mkdir(parents=True)  # a local directory of that name wins
    assert remote.remote_url("s3:/b") is None


def test_gs_needs_gcsfs(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gcsfs is not installed here: the error names the extra (no GCS server needed)."""
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    with pytest.raises(StoreError, match=r"gs://b/run\.tastore: .*gcsfs.*traceatlas\[remote\]"):
        traceatlas.open("gs://b/run.tastore")


def test_no_extras_cli(s3: dict[str, str], cache: Path) -> None:
    """Without s3fs (or fsspec): one line naming the extra, exit 2."""
    for missing in ("s3fs", "fsspec"):
        code = (f"import sys; sys.modules[{missing!r}] = None; "
                "from traceatlas.cli.main import main; "
                f"sys.argv = ['traceatlas', 'info', {URL!r}]; main()")
        full = {**os.environ, **s3, "TRACEATLAS_CACHE_DIR": str(cache)}
        out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 2, out.stderr
        assert URL in out.stderr and "pip install 'traceatlas[remote]'" in out.stderr
        assert "Traceback" not in out.stderr


def test_writing_to_a_url_is_refused(s3: dict[str, str], local_store: Path, cache: Path,
                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sample = Path(__file__).parents[2] / "examples" / "sample_trace"
    out = _cli(["ingest", str(sample), "-o", f"s3://{BUCKET}/new.tastore"], s3, cache)
    assert out.returncode == 2
    assert "s3://runs/new.tastore: writing a store to remote storage is not supported" in (
        out.stderr)
    assert not _fs().exists(f"{BUCKET}/new.tastore")
    for target in (f"s3://{BUCKET}/api.tastore", Path(f"s3://{BUCKET}/api.tastore")):
        with pytest.raises(InputError, match="writing a store to remote storage"):
            traceatlas.ingest(sample, target)  # type: ignore[arg-type]
    monkeypatch.chdir(tmp_path)
    out = _cli(["filter", str(local_store), "--ranks", "0", "-o", f"s3://{BUCKET}/f.tastore"],
               s3, cache)
    assert out.returncode == 2 and "not supported" in out.stderr
    assert not (tmp_path / "s3:").exists()  # no local directory named after the URL


# -- reading ---------------------------------------------------------------------------------


def test_cli_on_s3_gives_the_local_tables(s3: dict[str, str], local_store: Path,
                                          cache: Path) -> None:
    for args in (["info", "--format", "json"],
                 ["analyze", "breakdown", "--format", "json"],
                 ["analyze", "kernels", "--format", "csv"]):
        local = _cli([*args[:-2], str(local_store), *args[-2:]], s3, cache)
        there = _cli([*args[:-2], URL, *args[-2:]], s3, cache)
        assert local.returncode == 0 and there.returncode == 0, there.stderr
        if args[0] == "info":
            a, b = json.loads(local.stdout), json.loads(there.stdout)
            assert a.pop("path") == str(local_store) and b.pop("path") == URL
            assert a == b and a["ranks"] == [0, 1, 2]
        else:
            assert there.stdout == local.stdout
    mirrors = list((cache / "remote").iterdir())
    assert len(mirrors) == 1  # one mirror, reused by the later commands
    assert not any(p.is_relative_to(local_store) for p in cache.rglob("*"))


def test_info_fetches_no_part(s3: dict[str, str], local_store: Path, cache: Path,
                              downloads: list[str]) -> None:
    """The summary comes from the manifest's part records (``store/part_stats.py``):
    ``info`` on a URL downloads no part, and says what it says on the local store."""
    there = traceatlas.summarize(traceatlas.open(URL))
    assert downloads == []
    here = traceatlas.summarize(traceatlas.open(local_store))
    assert there.pop("path") == URL and here.pop("path") == str(local_store)
    assert there == here
    # each of the 3 ranks launched one gemm and one NCCL kernel
    assert there["by_category"]["kernel"] == there["by_category"]["comm_kernel"] == 3


def test_rank_task_fetches_only_its_ranks(s3: dict[str, str], local_store: Path,
                                          cache: Path, downloads: list[str]) -> None:
    analysis = registry.get_analysis("breakdown")
    params = tuple(sorted(registry.parse_params(analysis, {}).items()))
    result = run_task(RankTask(URL, (), (1,), "breakdown", params))
    expected = run_task(RankTask(str(local_store), (), (1,), "breakdown", params))
    assert result is not None and expected is not None
    assert_frame_equal(result.table, expected.table)
    assert result.table["rank"].to_list() == [1]
    assert downloads, "nothing fetched"
    assert all("/rank=1/" in rel for rel in downloads), downloads
    assert len(downloads) == len(set(downloads))  # each part once
    assert "intervals/rank=1/part-0.parquet" in downloads
    (mirror,) = (cache / "remote").iterdir()
    on_disk = sorted(p.relative_to(mirror).as_posix() for p in mirror.rglob("*.parquet"))
    assert on_disk == sorted(downloads)
    # a second batch on the same worker: rank 1's parts are not fetched again
    downloads.clear()
    run_task(RankTask(URL, (), (1, 2), "breakdown", params))
    assert downloads and all("/rank=2/" in rel for rel in downloads), downloads


def test_mirror_reused_and_renewed_on_upload(s3: dict[str, str], local_store: Path,
                                             cache: Path, downloads: list[str]) -> None:
    trace = traceatlas.open(URL)
    assert trace.location == URL and trace.ranks == [0, 1, 2]
    assert trace.path.is_relative_to(cache / "remote")
    whole = trace.intervals.collect()
    assert_frame_equal(whole, traceatlas.open(local_store).intervals.collect())
    assert sorted(downloads) == [f"intervals/rank={r}/part-0.parquet" for r in range(3)]
    downloads.clear()
    again = traceatlas.open(URL)
    assert again.path == trace.path
    again.intervals.collect()
    assert downloads == []  # present with the recorded size and mtime: reused
    # the store uploaded again (another manifest): a new mirror
    fs = _fs()
    manifest = json.loads(fs.cat_file(f"{BUCKET}/run.tastore/manifest.json"))
    fs.pipe_file(f"{BUCKET}/copy.tastore/manifest.json",
                 json.dumps({**manifest, "note": "re-uploaded"}).encode())
    for rec in manifest["parts"]:
        fs.copy(f"{BUCKET}/run.tastore/{rec['path']}", f"{BUCKET}/copy.tastore/{rec['path']}")
    other = traceatlas.open(f"s3://{BUCKET}/copy.tastore")
    assert other.path != trace.path and other.location == f"s3://{BUCKET}/copy.tastore"


@pytest.mark.dask
def test_dask_engine_on_the_url_equals_local(s3: dict[str, str], local_store: Path,
                                              cache: Path) -> None:
    pytest.importorskip("distributed")
    args = ["analyze", "breakdown", "--format", "json"]
    local = _cli([*args[:2], str(local_store), *args[2:]], s3, cache)
    dask = _cli([*args[:2], URL, *args[2:], "--engine", "dask:2"], s3, cache)
    assert local.returncode == 0 and dask.returncode == 0, dask.stderr
    assert json.loads(dask.stdout) == json.loads(local.stdout)


# -- errors ----------------------------------------------------------------------------------


def test_missing_bucket_and_store(s3: dict[str, str], cache: Path) -> None:
    for url in ("s3://no-such-bucket/run.tastore", f"s3://{BUCKET}/absent.tastore"):
        out = _cli(["analyze", "breakdown", url], s3, cache)
        assert out.returncode == 2
        assert out.stderr.strip() == (f"error: {url}: not a traceatlas store, or the bucket "
                                      "is missing (no manifest.json)")


def _copy_store(name: str) -> str:
    fs = _fs()
    fs.copy(f"{BUCKET}/run.tastore", f"{BUCKET}/{name}", recursive=True)
    return f"s3://{BUCKET}/{name}"


def test_missing_part(s3: dict[str, str], cache: Path) -> None:
    url = _copy_store("missing.tastore")
    _fs().rm_file(f"{url[5:]}/intervals/rank=2/part-0.parquet")
    with pytest.raises(StoreDamagedError) as err:
        traceatlas.open(url)
    assert err.value.part == "intervals/rank=2/part-0.parquet"
    assert str(err.value).startswith(f"{url}: part intervals/rank=2/part-0.parquet is missing")
    out = _cli(["info", url], s3, cache)
    assert out.returncode == 2 and out.stderr.startswith(f"error: {url}: part intervals/")


def test_altered_part_same_size(s3: dict[str, str], local_store: Path, cache: Path) -> None:
    """Same size, other bytes: the listing passes, the fetch's hash check does not."""
    url = _copy_store("altered.tastore")
    rel = "intervals/rank=1/part-0.parquet"
    data = bytearray((local_store / rel).read_bytes())
    data[len(data) // 2] ^= 0xFF
    _fs().pipe_file(f"{url[5:]}/{rel}", bytes(data))
    trace = traceatlas.open(url)  # opening lists, it does not read parts
    trace.select(ranks=[0]).intervals.collect()  # rank 0 is fine
    with pytest.raises(StoreDamagedError, match=rf"{url}: part {rel} has other contents"):
        trace.intervals.collect()
    assert not (trace.path / rel).exists()  # never renamed into the mirror
    out = _cli(["analyze", "breakdown", url], s3, cache)
    assert out.returncode == 2 and f"{url}: part {rel} has other contents" in out.stderr


def test_added_file_and_older_store(s3: dict[str, str], cache: Path) -> None:
    url = _copy_store("added.tastore")
    fs = _fs()
    fs.pipe_file(f"{url[5:]}/intervals/rank=9/part-0.parquet", b"x")
    with pytest.raises(StoreDamagedError, match=r"rank=9/part-0\.parquet is not listed"):
        traceatlas.open(url)
    manifest = json.loads(fs.cat_file(f"{url[5:]}/manifest.json"))
    del manifest["parts"]
    fs.pipe_file(f"{BUCKET}/old.tastore/manifest.json", json.dumps(manifest).encode())
    with pytest.raises(StoreError, match="older traceatlas"):
        traceatlas.open(f"s3://{BUCKET}/old.tastore")


def test_concurrent_readers_fetch_each_part_once(s3: dict[str, str], cache: Path,
                                                 downloads: list[str]) -> None:
    """Four threads asking for the same table: each part downloaded once (flock per part),
    every reader then sees the complete table."""
    from concurrent.futures import ThreadPoolExecutor

    from traceatlas.store.layout import table_parts

    trace = traceatlas.open(URL)
    with ThreadPoolExecutor(4) as pool:
        listed = list(pool.map(lambda _: table_parts(trace.path, "intervals"), range(4)))
    expected = [f"intervals/rank={r}/part-0.parquet" for r in range(3)]
    assert sorted(downloads) == expected
    for parts in listed:
        assert [p.relative_to(trace.path).as_posix() for p in parts] == expected
    left = [p.name for p in trace.path.rglob("*") if p.is_file()
            and p.suffix != ".parquet" and p.name not in ("manifest.json", remote.MARKER)]
    assert left == []  # no temporary or lock file left


def test_damaged_mirror_part_is_fetched_again(s3: dict[str, str], local_store: Path,
                                              cache: Path, downloads: list[str]) -> None:
    trace = traceatlas.open(URL)
    trace.intervals.collect()
    rel = "intervals/rank=0/part-0.parquet"
    (trace.path / rel).write_bytes(b"truncated")  # the local copy damaged, not the store
    downloads.clear()
    again = traceatlas.open(URL)
    assert_frame_equal(again.intervals.collect(),
                       traceatlas.open(local_store).intervals.collect())
    assert downloads == [rel]


def test_worker_sees_a_store_uploaded_again(s3: dict[str, str], cache: Path) -> None:
    """A worker keeps its opened store while the remote manifest is the same object, and
    opens the new one after an upload (a new mirror, keyed by the manifest's hash)."""
    url = _copy_store("again.tastore")
    analysis = registry.get_analysis("breakdown")
    params = tuple(sorted(registry.parse_params(analysis, {}).items()))
    first = run_task(RankTask(url, (), (0,), "breakdown", params))
    run_task(RankTask(url, (), (0,), "breakdown", params))
    assert len(list((cache / "remote").iterdir())) == 1
    fs = _fs()
    manifest = json.loads(fs.cat_file(f"{url[5:]}/manifest.json"))
    fs.pipe_file(f"{url[5:]}/manifest.json",
                 json.dumps({**manifest, "note": "uploaded again"}).encode())
    second = run_task(RankTask(url, (), (0,), "breakdown", params))
    assert len(list((cache / "remote").iterdir())) == 2
    assert first is not None and second is not None
    assert_frame_equal(first.table, second.table)


def test_report_on_s3_matches_local(s3: dict[str, str], local_store: Path,
                                    cache: Path) -> None:
    """``report --format json``: the same document, the run named by its URL (the
    suggested commands too) where the local one is named by its path."""
    local = _cli(["report", str(local_store), "--format", "json"], s3, cache)
    there = _cli(["report", URL, "--format", "json"], s3, cache)
    assert local.returncode == 0 and there.returncode == 0, there.stderr
    assert URL in there.stdout and "s3:/runs" not in there.stdout.replace(URL, "")
    (mirror,) = (cache / "remote").iterdir()
    named = there.stdout.replace(str(mirror), str(local_store)).replace(URL, str(local_store))
    a, b = json.loads(local.stdout), json.loads(named)
    for doc in (a, b):
        doc.pop("build_s", None)
    assert b == a
