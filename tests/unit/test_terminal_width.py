"""The report in an 80-column terminal: findings whole (text wrapped, no ellipsis), every
command line whole and equal to the command of the JSON report, and a golden snapshot of
``traceatlas report examples/sample_trace`` at COLUMNS=80.

The golden file was written from the command's output and checked line by line by hand
(wrap points, indents, whole commands); regenerate it only on purpose:
``TRACEATLAS_REGEN_GOLDEN=1 pytest tests/unit/test_terminal_width.py``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from rich.text import Text

from traceatlas.report import terminal
from traceatlas.report.data import Finding, ReportData, RunReport

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "report_sample_80cols.txt"
SAMPLE = "examples/sample_trace"
PREFIXES = ("-> ", "see ")


def _cli(args: list[str], cache: Path, columns: int = 80) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "TRACEATLAS_CACHE_DIR": str(cache),
           "NO_COLOR": "1", "TERM": "dumb"}
    env.pop("LINES", None)
    done = subprocess.run([sys.executable, "-m", "traceatlas.cli.main", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    cache = tmp_path_factory.mktemp("cache")
    text = _cli(["report", SAMPLE], cache)
    doc = json.loads(_cli(["report", SAMPLE, "--format", "json"], cache))
    return text, doc


def _command_lines(text: str) -> list[str]:
    """The commands printed: after '-> ' / 'see ' on one line, or alone on the line after
    a '(one line):' label."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        body = line.strip()
        if body.endswith("(one line):"):
            out.append(lines[i + 1])
        elif body.startswith(PREFIXES) and not body.endswith(":"):
            out.append(body.split(" ", 1)[1])
    return out


def test_golden_report_at_80_columns(outputs: tuple[str, dict[str, object]]) -> None:
    text, _ = outputs
    if os.environ.get("TRACEATLAS_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_every_command_is_whole_and_equals_the_json_commands(
        outputs: tuple[str, dict[str, object]]) -> None:
    text, doc = outputs
    runs = doc["runs"]
    assert isinstance(runs, list)
    findings = runs[-1]["findings"]
    printed = _command_lines(text)
    assert printed, "no command printed"
    expected = []
    for f in findings:
        expected += [c for c in (f["command"], f.get("view")) if c]
    assert printed == expected[:len(printed)]  # the findings shown, in order
    for command in printed:
        argv = shlex.split(command)
        assert argv[0] == "traceatlas" and SAMPLE in argv
        assert "…" not in command and "\n" not in command


def test_no_finding_line_is_cut(outputs: tuple[str, dict[str, object]]) -> None:
    text, doc = outputs
    lines = text.splitlines()
    start = lines.index("Top findings")
    commands = set(_command_lines(text))
    for line in lines[start:]:
        assert "…" not in line
        if line not in commands and not line.strip().startswith(PREFIXES):
            assert Text(line).cell_len <= 80, line
    # every shown finding's statement is printed in full (words joined across wraps)
    runs = doc["runs"]
    assert isinstance(runs, list)
    flat = " ".join(" ".join(lines[start:]).split())
    shown = [f for f in runs[-1]["findings"] if f"{f['rank']:>2}. ".strip() + " " in flat]
    assert len(shown) >= terminal.MIN_FINDINGS
    for f in shown:
        assert " ".join(f["statement"].split()) in flat
        assert " ".join(f["next_step"].split()) in flat


def _run(statement: str, command: str, view: str = "", n: int = 1) -> RunReport:
    run = RunReport("r", "/tmp/s", "kineto", [0], 0, 10_000_000)
    run.findings = [Finding(i + 1, "rule", statement, 1_000_000, "ev", "next " * 30, command,
                            "high", view=view) for i in range(n)]
    return run


def test_long_command_goes_alone_on_its_line_unbroken() -> None:
    command = "traceatlas analyze kernels " + "/a/very/long/path" * 8 + " --ranks 3"
    text = terminal.to_text(ReportData("0", [_run("x " * 60, command)]), width=60)
    lines = text.splitlines()
    assert command in lines  # the whole line, nothing else on it
    assert lines[lines.index(command) - 1].strip() == "-> (one line):"
    short = "traceatlas analyze idle P"
    text = terminal.to_text(ReportData("0", [_run("x", short)]), width=60)
    assert f"     -> {short}" in text.splitlines()


def test_statement_wraps_with_hanging_indent_and_keeps_every_word() -> None:
    words = [f"word{i}" for i in range(40)]
    text = terminal.to_text(ReportData("0", [_run(" ".join(words), "traceatlas x")]),
                            width=50)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(" 1. HIGH"))
    block = []
    for line in lines[first:]:
        if line.strip().startswith("->"):
            break
        block.append(line)
    assert len(block) > 2 and all(len(line) <= 50 for line in block)
    assert all(line.startswith("    ") for line in block[1:])
    assert " ".join(" ".join(block).split()[2:]).startswith(" ".join(words))


def test_findings_past_the_budget_are_counted_not_cut() -> None:
    run = _run("statement " * 12, "traceatlas analyze idle P", n=9)
    text = terminal.to_text(ReportData("0", [run]), width=80)
    shown = sum(line.startswith((" 1.", " 2.", " 3.", " 4.", " 5.", " 6.", " 7.", " 8.",
                                 " 9.")) for line in text.splitlines())
    assert terminal.MIN_FINDINGS <= shown < 9
    assert f"{9 - shown} more finding(s)" in text
