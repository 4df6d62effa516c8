"""A script calling ``traceatlas.open`` without a ``__main__`` guard fails with the reason
instead of hanging: the spawned ingest workers re-import it and would wait forever on the
cache lock their parent holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from traceatlas.testing import TraceBuilder


def _rank_files(tmp: Path) -> Path:
    folder = tmp / "run"
    folder.mkdir()
    for rank in (0, 1):
        b = TraceBuilder(rank=rank)
        b.launch("k", 10_000, 5_000, 20_000, 40_000)
        b.write(folder / f"rank-{rank}.json")
    return folder


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TRACEATLAS_CACHE_DIR": str(tmp / "cache")}


def test_unguarded_script_fails_with_the_guard_reason(tmp_path: Path) -> None:
    folder = _rank_files(tmp_path)
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import traceatlas\n"
        "from traceatlas.engine import LocalEngine\n"
        f"traceatlas.open({str(folder)!r}, engine=LocalEngine(2))\n"
        "print('opened')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=_env(tmp_path), check=False)
    assert done.returncode != 0
    assert "__main__" in done.stderr and "guard" in done.stderr
    assert "opened" not in done.stdout


def test_guarded_script_opens(tmp_path: Path) -> None:
    folder = _rank_files(tmp_path)
    script = tmp_path / "guarded.py"
    script.write_text(
        "import traceatlas\n"
        "from traceatlas.engine import LocalEngine\n"
        "if __name__ == '__main__':\n"
        f"    t = traceatlas.open({str(folder)!r}, engine=LocalEngine(2))\n"
        "    print('ranks', list(t.ranks))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=_env(tmp_path), check=False)
    assert done.returncode == 0, done.stderr
    assert "ranks [0, 1]" in done.stdout
