"""``traceatlas report NEW --baseline BASE`` (``report/baseline.py``): a trace built here
and a copy with one kernel stretched by 20 % (``testing.stretch``). The section must put
that kernel first, escape its name, and carry ``diff``'s own document (compared with the
output of ``traceatlas diff`` on the same pair); a bad baseline exits 2 and writes nothing.
"""

from __future__ import annotations

import json
import random
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.testing import TraceBuilder
from traceatlas.testing.stretch import stretch_kernel

BASE = 1_700_000_000_000_000_000
STEP = 1_000_000
GEMM = "void gemm_kernel<float, 128>(float*)"
GEMM_KEY = "gemm_kernel<float, #>"
RELU = "void relu_kernel<float>(float*)"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(original trace, copy with every gemm 20 % longer). 8 steps; gemm ~100 us with a
    seeded +-2 % spread, relu 50 us, both launched by ``aten::mm``."""
    root = tmp_path_factory.mktemp("rb")
    rng = random.Random(7)
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for i in range(8):
        s = (i + 1) * STEP
        b.step(i + 1, s, s + 900_000)
        b.cpu_op("aten::mm", s + 10_000, s + 500_000)
        b.launch(GEMM, s + 20_000, 5_000, s + 100_000,
                 round(100_000 * (1 + rng.uniform(-0.02, 0.02))))
        b.launch(RELU, s + 40_000, 5_000, s + 400_000, 50_000)
    orig = b.write(root / "orig.json.gz")
    slow = root / "slow.json.gz"
    stretch_kernel(orig, slow, GEMM, 1.20)
    return orig, slow


class _Section(HTMLParser):
    """Rows of the "Compared with baseline" card: (tr class, [cell texts], name title)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # >0 inside the baseline section
        self.in_details = False
        self.rows: list[tuple[str, list[str], str]] = []
        self.moved: list[str] = []
        self._row: tuple[str, list[str], str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and (self.depth or "baseline" in (a.get("class") or "").split()):
            self.depth += 1
        if not self.depth:
            return
        if tag == "details":
            self.in_details = True
        if tag == "tr" and not self.in_details:
            self._row = (a.get("class") or "", [], "")
        if tag == "td" and self._row is not None:
            self._cell = []
            if a.get("class") == "name" and a.get("title"):
                self._row = (self._row[0], self._row[1], a["title"] or "")

    def handle_endtag(self, tag: str) -> None:
        if not self.depth:
            return
        if tag == "section":
            self.depth -= 1
        if tag == "details":
            self.in_details = False
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row[1].append("".join(self._cell).strip())
            self._cell = None
        if tag == "tr" and self._row is not None:
            if self._row[1]:
                self.rows.append(self._row)
                if self._row[0] == "moved":
                    self.moved.append(self._row[1][0])
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_html_section_stretched_kernel_first_and_escaped(pair: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(pair[1]), "--baseline", str(pair[0]),
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    parser = _Section()
    parser.feed(text)
    changes = [r for r in parser.rows if r[0] in ("slower", "faster", "added", "removed")]
    assert changes, parser.rows
    first = changes[0]
    assert first[0] == "slower" and first[1][1] == "kernel" and first[2] == GEMM_KEY
    assert first[1][5].startswith("+")  # rel change
    # step markers and the kernel category moved too, but no entity got faster
    assert not [r for r in changes if r[0] == "faster"]
    assert parser.moved, "the efficiency factor that moved most is highlighted"
    # names are data: "<float, #>" only appears escaped
    assert "gemm_kernel<float" not in text and "gemm_kernel&lt;float" in text
    # the section is near the top: before the run's own sections
    assert text.index('class="card baseline"') < text.index('class="run"')


def test_json_carries_diffs_document_and_terminal_short(pair: tuple[Path, Path]) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(pair[1]), "--baseline", str(pair[0]), "-f", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)["baseline"]
    assert doc["base"] == str(pair[0])
    res = runner.invoke(app, ["diff", str(pair[0]), str(pair[1]), "-f", "json"])
    assert res.exit_code == 0, res.output
    assert doc["diff"]["changes"] == json.loads(res.stdout)["changes"]
    res = runner.invoke(app, ["report", str(pair[1]), "--baseline", str(pair[0])])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("Compared with baseline")
    slower = [ln for ln in lines if ln.startswith("  slower ")]
    assert slower and slower[0].startswith(f"  slower kernel {GEMM_KEY}: +")
    assert len(slower) <= 5


def test_bad_baseline_exit_2_no_report(pair: tuple[Path, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "r.html"
    junk = tmp_path / "junk.json"
    junk.write_text("this is not json")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": "traceatlas-summary", "version": 99}))
    for bad in (junk, old, tmp_path / "missing.json"):
        res = runner.invoke(app, ["report", str(pair[1]), "--baseline", str(bad),
                                  "-o", str(out)])
        assert res.exit_code == 2, res.output
        assert bad.name in res.output and "Traceback" not in res.output
        assert not out.exists()
        assert not list(tmp_path.glob(".r.html*"))  # no staged sibling either
    res = runner.invoke(app, ["report", str(pair[1]), str(pair[0]), "--baseline",
                              str(pair[0]), "-o", str(out)])
    assert res.exit_code == 2 and "--baseline" in res.output
    assert not out.exists()
