"""Stores named by ``file://`` URLs (fsspec's local form) open like their path through the
Python API and travel to the workers as that path; other URL schemes are remote stores
(tests/unit/test_remote_store.py), an unreadable one a clear error."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.errors import StoreError
from traceatlas.store.layout import store_location
from traceatlas.testing import TraceBuilder, write_multi_rank


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("url store")  # a space: percent-encoded in the URL
    builders = [TraceBuilder(r, 3, profiler_markers=False) for r in range(3)]
    for r, b in enumerate(builders):
        b.launch("gemm", 0, 1_000, 10_000, 1_000 * (r + 1))
    paths = write_multi_rank(tmp / "in", builders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.ingest(paths, tmp / "run.tastore", engine=LocalEngine(1))


def test_store_location() -> None:
    assert store_location("/a/b.tastore") == Path("/a/b.tastore")
    assert store_location("file:///a/my%20run.tastore") == Path("/a/my run.tastore")
    assert store_location(Path("file:///a/b.tastore")) == Path("/a/b.tastore")  # file:/a/b
    assert store_location("relative/dir") == Path("relative/dir")
    # other schemes are remote stores (store/remote.py, tests/unit/test_remote_store.py)
    with pytest.raises(StoreError, match=r"nosuchscheme://b/r: .*nosuchscheme"):
        store_location("nosuchscheme://b/r")
    with pytest.raises(StoreError, match=r"memory://run\.tastore: not a traceatlas store"):
        store_location("memory://run.tastore")


def test_file_url_opens_and_partitions(store: Path) -> None:
    url = store.resolve().as_uri()  # file:///.../url%20store.../run.tastore
    assert url.startswith("file://") and "%20" in url
    trace = traceatlas.open(url)
    assert trace.path == store.resolve() and trace.ranks == [0, 1, 2]
    analysis = registry.get_analysis("breakdown")
    typed = registry.parse_params(analysis, {})
    whole = analysis.run(traceatlas.open(store), typed)
    parts = run_partitioned(analysis, trace, typed, LocalEngine(2), ranks_per_task=1)
    assert_frame_equal(parts.table, whole.table)
    # compute per rank: 1, 2, 3 us
    assert parts.table.select("rank", "compute_ns").rows() == [(0, 1_000), (1, 2_000),
                                                                (2, 3_000)]


def test_cli_unreadable_url_is_a_clear_error() -> None:
    """A URL the store layer cannot read (no network needed): one line, exit 2."""
    from traceatlas.cli.main import app

    out = CliRunner().invoke(app, ["analyze", "breakdown", "memory://bucket/run.tastore"])
    assert out.exit_code == 2
    assert out.output.startswith("error: memory://bucket/run.tastore: not a traceatlas "
                                 "store") and "Traceback" not in out.output
