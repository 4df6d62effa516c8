"""Allocator settings of the analysis commands (``traceatlas.batch_memory``): set in the
command's process and inherited by its workers; a variable the user set is kept; the
commands that do not analyse (``ingest``, ``info``) leave the environment alone; results
are the same bytes with the settings and with the system's defaults. Each command runs
in a fresh process: the settings are process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import traceatlas
from traceatlas import batch_memory
from traceatlas.engine.local import LocalEngine
from traceatlas.io import allocator
from traceatlas.testing import TraceBuilder, write_multi_rank

pytestmark = pytest.mark.filterwarnings("ignore::traceatlas.DataQualityWarning")

NAMES = tuple(batch_memory.SETTINGS)

PROBE = """
import json, os, sys
from typer.testing import CliRunner
from traceatlas.cli.main import app
r = CliRunner().invoke(app, sys.argv[1:])
assert r.exit_code == 0, r.output
names = {names!r}
print(json.dumps({{"output": r.output, "env": {{n: os.environ.get(n) for n in names}}}}))
"""


def _env_of_worker(_: int) -> dict[str, str | None]:
    return {n: os.environ.get(n) for n in NAMES}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("batch")
    builders = []
    for rank in range(2):
        b = TraceBuilder(rank, 2, profiler_markers=False)
        b.step(0, 1_000, 900_000)
        b.cpu_op("aten::mm", 10_000, 50_000)
        b.launch("gemm", 12_000, 3_000, 100_000, 20_000 * (rank + 1))
        builders.append(b)
    return traceatlas.ingest(write_multi_rank(tmp / "run", builders), tmp / "s.tastore")


def _run(args: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    base = {k: v for k, v in os.environ.items() if k not in NAMES}
    done = subprocess.run([sys.executable, "-c", PROBE.format(names=NAMES), *args],
                          env={**base, **(env or {})}, capture_output=True, text=True,
                          check=True, timeout=300)
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _effective(env: object) -> dict[str, str | None]:
    """The variables as glibc and jemalloc read them. Polars' ``__init__`` puts its own
    defaults in front of ``_RJEM_MALLOC_CONF`` (``dirty_decay_ms:500,...,<ours>``);
    jemalloc applies the options in order, so the last value of each option wins."""
    assert isinstance(env, dict)
    out = dict(env)
    conf = out.get("_RJEM_MALLOC_CONF")
    if conf is not None:
        options = dict(o.split(":", 1) for o in conf.split(","))
        out["_RJEM_MALLOC_CONF"] = ",".join(f"{k}:{v}" for k, v in options.items()
                                             if k in ("dirty_decay_ms", "muzzy_decay_ms"))
    return out


def test_analysis_commands_set_them_other_commands_do_not(store: Path) -> None:
    expected = {n: v for n, (v, _p, _n) in batch_memory.SETTINGS.items()}
    for args in (["analyze", "breakdown", str(store)], ["report", str(store)],
                 ["summary", str(store), "-o", str(store.parent / "b.json")]):
        assert _effective(_run(args)["env"]) == expected, args
    for args in (["info", str(store)], ["analyses"]):
        env = _effective(_run(args)["env"])
        assert env["MALLOC_MMAP_THRESHOLD_"] is env["MALLOC_TRIM_THRESHOLD_"] is None, args
        assert env["_RJEM_MALLOC_CONF"] != batch_memory.JEMALLOC_CONF, args


def test_a_users_variable_is_kept(store: Path) -> None:
    mine = {"MALLOC_TRIM_THRESHOLD_": "131072",
            "_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}
    env = _effective(_run(["analyze", "breakdown", str(store)], mine)["env"])
    assert env == {**mine, "MALLOC_MMAP_THRESHOLD_": str(batch_memory.MMAP_THRESHOLD_B)}


def test_same_output_with_the_systems_defaults(store: Path) -> None:
    """The user's values here are glibc's and jemalloc's hand-back-at-once settings."""
    defaults = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072",
                "_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}
    for args in (["analyze", "kernels", str(store), "--format", "csv"],
                 ["report", str(store), "--format", "json"]):
        assert _run(args)["output"] == _run(args, defaults)["output"], args


def test_workers_inherit_them(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    applied = batch_memory.keep_freed_memory()
    if allocator.glibc() is None:
        pytest.skip("not glibc: only the jemalloc variable applies")
    assert set(applied) == set(NAMES)
    seen = LocalEngine(2).map(_env_of_worker, [0, 1])
    assert seen == [applied, applied]


def test_reading_under_reusing_memory_keeps_the_process_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(allocator, "malloc_retain", lambda on: calls.append(on) or True)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", str(batch_memory.TRIM_THRESHOLD_B))
    with allocator.reusing_memory():
        pass
    assert calls == []
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    with allocator.reusing_memory():
        pass
    assert calls == [True, False]
