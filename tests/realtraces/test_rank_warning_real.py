"""The warning for a rank the file does not state speaks of that file's format (issue 20):
an Nsight Systems export is not told about PyTorch's ``distributedInfo``."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import traceatlas
from traceatlas.errors import RankInferredWarning

pytestmark = pytest.mark.realtrace


def _rank_warnings(path: Path, out: Path) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traceatlas.ingest(path, out)
    return [str(w.message) for w in caught if issubclass(w.category, RankInferredWarning)]


def test_nsys_rank_warning_names_nsys_sources(traces_dir: Path, tmp_path: Path) -> None:
    found = _rank_warnings(traces_dir / "nsys-ai/mfu_2gpu_before.sqlite", tmp_path / "a")
    assert len(found) == 2  # two processes, no MPI rank in the export
    for n, text in enumerate(found):
        assert "distributedInfo" not in text
        assert "MPI_RANKS" in text and f"process {n + 1} of the export" in text
        assert text.endswith(f"assigned rank {n}")


def test_kineto_rank_warning_keeps_distributed_info(traces_dir: Path, tmp_path: Path) -> None:
    found = _rank_warnings(traces_dir / "hta/distributed_info_unavailable/"
                           "distributed_info_not_found.json.gz", tmp_path / "b")
    assert found and "no rank in distributedInfo or the file name" in found[0]
