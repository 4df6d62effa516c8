"""Readable kernel names on the ROCm inference traces (issue 22): mangled ``_Z`` kernel
names are demangled and shortened in terminal tables; JSON keeps the raw names."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.names import display_name

pytestmark = pytest.mark.realtrace

SGLANG = "tracelens/traces/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"


def test_rocm_kernel_names(traces_dir: Path, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = traces_dir / SGLANG
    with gzip.open(path) as handle:
        events = json.load(handle)["traceEvents"]
    mangled = {e["name"] for e in events if e.get("cat") == "kernel"
               and str(e.get("name", "")).startswith("_Z")}
    assert any(n.startswith("_ZN7ck_tile6kentry") for n in mangled)
    for name in mangled:  # every one demangles: no '_Z' left, no mangled length
        shown = display_name(name)
        assert not shown.startswith("_Z") and len(shown) <= 120, (name, shown)
    monkeypatch.setenv("TRACEATLAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "300")
    raw = CliRunner().invoke(app, ["analyze", "kernels", str(path), "--format", "json"])
    assert raw.exit_code == 0, raw.output
    names = {row["name"] for row in json.loads(raw.stdout)}
    assert mangled <= names  # JSON: the raw names, as in the file
    table = CliRunner().invoke(app, ["analyze", "kernels", str(path)])
    assert table.exit_code == 0, table.output
    assert "ck_tile::kentry<" in table.stdout and "_ZN7ck_tile" not in table.stdout
