"""The report shows each finding's cause in words (``CAUSES``) and the ranks it concerns,
in the terminal and in the HTML page; names stay literal (no rich markup)."""

from __future__ import annotations

from traceatlas.report import html, terminal
from traceatlas.report.data import Finding, ReportData, RunReport

BASE = 1_700_000_000_000_000_000


def _run() -> RunReport:
    run = RunReport("run", "/tmp/store", "kineto", [0, 1, 2], BASE, 100_000_000)
    run.findings = [
        Finding(1, "host_sync", "8 syncs per step in [bold]aten::item[/bold]", 9_000_000,
                "evidence", "keep values on the GPU", "", "high", "host_sync", [1, 0]),
        Finding(2, "load_imbalance", "rank 2 computes 1.44x the mean", 5_000_000,
                "evidence", "balance", "", "info", "load_imbalance", [2]),
        Finding(3, "custom", "no cause given", 1_000_000, "evidence", "look", "", "info"),
    ]
    return run


def test_terminal_shows_cause_words_and_ranks() -> None:
    text = terminal.to_text(ReportData("0", [_run()]), width=200)
    first = next(line for line in text.splitlines() if "syncs per step" in line)
    assert "[host-device synchronisation]" in first and "ranks 0, 1" in first
    assert "[bold]aten::item[/bold]" in first  # markup in a name is printed, not applied
    second = next(line for line in text.splitlines() if "computes 1.44x" in line)
    assert "[load imbalance]" in second and "rank 2)" in second
    third = next(line for line in text.splitlines() if "no cause given" in line)
    assert "[" not in third.split("no cause given")[0]


def test_html_shows_cause_words_and_ranks() -> None:
    page = html.render(ReportData("0", [_run()]))
    assert '<span class="cause">host-device synchronisation</span>' in page
    assert '<span class="cause">load imbalance</span>' in page
    assert page.count('<span class="cause">') == 2
    assert "; ranks 0, 1</span>" in page and "; rank 2</span>" in page
