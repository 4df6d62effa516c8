"""Start-up stays light: the CLI and ``import traceatlas`` load no data library.

``traceatlas --help`` and ``traceatlas info STORE`` are meant to answer in well under a
second (issue 14: < 0.5 s); the import of Polars, Arrow, NumPy, DuckDB, SciPy, the web
server or Dask alone costs 0.1-0.4 s each. These tests run the imports and commands in a
fresh interpreter and check which modules it loaded (``sys.modules``): no timing.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import traceatlas

HEAVY = ("polars", "duckdb", "pyarrow", "numpy", "scipy", "pandas", "starlette", "uvicorn",
         "dask", "distributed", "pycxxfilt")
"""Top-level packages the start-up must not import (rich stays: typer prints help with it)."""

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_trace"

# Runs the CLI in-process (argv from the command line) and prints the loaded top-level
# module names as JSON on stderr's last line, whatever the command's exit.
_RUN_CLI = """
import json, sys
sys.argv = ["traceatlas", *sys.argv[1:]]
import traceatlas.cli.main as m
try:
    m.main()
except SystemExit:
    pass
sys.stderr.write("\\n" + json.dumps(sorted({n.split(".")[0] for n in sys.modules})) + "\\n")
"""


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    return {**env, "TRACEATLAS_CACHE_DIR": str(tmp / "cache"), "COLUMNS": "100"}


def _loaded(code: str, tmp: Path, *args: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, env=_env(tmp), timeout=120, check=False)
    assert proc.stderr.strip(), proc
    return set(json.loads(proc.stderr.strip().splitlines()[-1])), proc


def _heavy(mods: set[str]) -> list[str]:
    return sorted(m for m in HEAVY if m in mods)


def test_import_cli_main_loads_no_heavy_module(tmp_path: Path) -> None:
    code = ("import json, sys, traceatlas.cli.main\n"
            "sys.stderr.write(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))")
    mods, _ = _loaded(code, tmp_path)
    assert "traceatlas" in mods and "typer" in mods  # the probe sees real imports
    assert _heavy(mods) == []


def test_import_traceatlas_loads_no_heavy_module_and_no_cli(tmp_path: Path) -> None:
    code = ("import json, sys, traceatlas\n"
            "sys.stderr.write(json.dumps(sorted(sys.modules)))")
    mods, _ = _loaded(code, tmp_path)
    tops = {m.split(".")[0] for m in mods}
    assert _heavy(tops) == []
    assert not {"typer", "rich"} & tops
    assert "traceatlas.api" not in mods and "traceatlas.model.trace" not in mods


@pytest.mark.parametrize("args", [["--help"], ["analyze", "--help"], ["view", "--help"],
                                  ["info", "--help"], ["filter", "--help"],
                                  ["export", "--help"], ["report", "--help"]])
def test_help_loads_no_heavy_module(tmp_path: Path, args: list[str]) -> None:
    mods, proc = _loaded(_RUN_CLI, tmp_path, *args)
    assert "Usage" in proc.stdout, proc  # the help was printed
    assert _heavy(mods) == []


def test_filter_help_lists_every_category(tmp_path: Path) -> None:
    """The categories in ``filter --help`` come from ``model.vocab`` (no Arrow): the same
    list the schema declares."""
    from traceatlas.model.schema import CATEGORIES

    _, proc = _loaded(_RUN_CLI, tmp_path, "filter", "--help")
    text = "".join(proc.stdout.split())  # help text wraps anywhere
    for category in CATEGORIES:
        assert category in text


def test_info_on_a_store_loads_no_heavy_module(tmp_path: Path) -> None:
    """``info STORE``: the counts come from the manifest's part stats
    (``store/part_stats.py``); Polars, Arrow, NumPy and DuckDB stay unloaded."""
    store = traceatlas.ingest(SAMPLE, tmp_path / "s.tastore")
    mods, proc = _loaded(_RUN_CLI, tmp_path, "info", str(store), "--format", "json")
    assert proc.stdout.strip(), proc
    summary = json.loads(proc.stdout)
    assert summary["ranks"] == [0, 1]
    assert summary["intervals"] == traceatlas.Trace(store).intervals.collect().height
    assert "traceatlas" in mods and "typer" in mods  # the probe sees real imports
    assert _heavy(mods) == []


def test_info_on_a_store_without_part_stats_loads_polars_only(tmp_path: Path) -> None:
    """A store written before part records had stats: ``info`` counts with Polars;
    Arrow, NumPy and DuckDB stay unloaded."""
    store = traceatlas.ingest(SAMPLE, tmp_path / "s.tastore")
    manifest_path = store / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for rec in manifest["parts"]:
        rec.pop("stats", None)
    manifest_path.write_text(json.dumps(manifest))
    mods, proc = _loaded(_RUN_CLI, tmp_path, "info", str(store), "--format", "json")
    assert proc.stdout.strip(), proc
    summary = json.loads(proc.stdout)
    assert summary["intervals"] == traceatlas.Trace(store).intervals.collect().height
    assert "polars" in mods
    assert _heavy(mods - {"polars"}) == []


def test_cli_still_selects_the_system_arrow_pool(tmp_path: Path) -> None:
    """main() no longer imports Arrow but still makes the system allocator Arrow's
    default (via ARROW_DEFAULT_MEMORY_POOL, read when Arrow makes its pool)."""
    code = _RUN_CLI + ("import pyarrow as pa\n"
                       "print(pa.default_memory_pool().backend_name)\n")
    _, proc = _loaded(code, tmp_path, "--help")
    assert proc.stdout.strip().splitlines()[-1] == "system"


def test_lazy_public_names_are_the_real_objects() -> None:
    from traceatlas.api import open as api_open
    from traceatlas.ingest import ingest
    from traceatlas.model.trace import Trace
    from traceatlas.summary import summarize

    assert traceatlas.open is api_open
    assert traceatlas.Trace is Trace
    assert traceatlas.summarize is summarize
    importlib.import_module("traceatlas.ingest.align")  # must not rebind the function

    assert traceatlas.ingest is ingest
    assert {"open", "Trace", "summarize", "ingest"} <= set(dir(traceatlas))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = traceatlas.no_such_name


def test_star_import_gives_every_public_name(tmp_path: Path) -> None:
    code = ("import json, sys\nfrom traceatlas import *\n"
            "sys.stderr.write(json.dumps([n for n in __import__('traceatlas').__all__ "
            "if n not in globals()]))")
    missing, _ = _loaded(code, tmp_path)
    assert missing == set()


def test_vocab_table_names_match_the_schema() -> None:
    from traceatlas.model import schema, vocab

    assert tuple(schema.TABLES) == vocab.TABLE_NAMES
    assert schema.CATEGORIES is vocab.CATEGORIES
    assert schema.DEVICE_CATEGORIES is vocab.DEVICE_CATEGORIES
