"""The report's Critical path card (HTML) and terminal line, on a CPU-bound launch loop
whose path is known by construction (see test_critical_outputs_advisor.py)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from pytest import MonkeyPatch

import traceatlas
from traceatlas.report import data as report_data
from traceatlas.report import html, terminal
from traceatlas.testing.builder import TraceBuilder

KERNEL = "k<script>alert(1)</script>"


def _trace(tmp_path: Path) -> traceatlas.Trace:
    """Five steps of 28 us (ProfilerStep [0, 28k]); launch calls [1k,6k], [11k,16k],
    [21k,26k]; 1 us kernels at 7k, 17k, 27k (the last one named with markup). Median
    step: 2. Path: cpu 21k (75%), launch 6k (21.4%), gpu_compute 1k (3.6%). On-path
    events: the step annotation 11k cpu, each of two calls 5k cpu, the last kernel 7k
    (launch 6k + gpu 1k)."""
    b = TraceBuilder(rank=0)
    for n in range(5):
        t = n * 30_000
        b.step(n, t, t + 28_000)
        for i in range(3):
            b.launch(KERNEL if i == 2 else f"k{i}", t + 1_000 + 10_000 * i, 5_000,
                     t + 7_000 + 10_000 * i, 1_000)
    return traceatlas.open(b.write(tmp_path / "cpu.json"))


class _Card(HTMLParser):
    """Text and rect titles of the critical-path card; tags seen inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth:
            self.depth += 1
            self.tags.append(tag)
        elif ("class", "card critical") in attrs or any(
                k == "class" and v and "critical" in v.split() for k, v in attrs):
            self.depth = 1

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.text.append(data)


def test_card_and_terminal_line(tmp_path: Path) -> None:
    data = report_data.build([("run", _trace(tmp_path))])
    run = data.runs[0]
    assert "critical" not in run.missing, run.missing
    section = run.critical
    assert section is not None and section.step == 2 and section.length_ns == 28_000
    assert [(b, n, round(s, 9)) for b, n, s in section.bounds] == [
        ("cpu", 21_000, 0.75), ("launch", 6_000, round(6 / 28, 9)),
        ("gpu_compute", 1_000, round(1 / 28, 9))]
    top = [(e.name, e.bound, e.on_path_ns, round(e.share, 3)) for e in section.events]
    # step 2 cpu: [0,1k] + [6k,11k] + [16k,21k]; two calls of 5k; the kernel: 6k + 1k
    assert top == [("ProfilerStep#2", "cpu", 11_000, round(11 / 28, 3)),
                   ("cudaLaunchKernel", "cpu", 10_000, round(10 / 28, 3)),
                   (KERNEL, "launch", 6_000, round(6 / 28, 3)),
                   (KERNEL, "gpu_compute", 1_000, round(1 / 28, 3))]

    page = html.render(data)
    card = _Card()
    card.feed(page)
    text = " ".join(card.text)
    assert "critical path of step 2 (28 us): 75% cpu, 21% launch, 4% gpu_compute" in text
    assert "script" not in card.tags  # the kernel name is text, never markup
    assert KERNEL in text
    assert "39.3%" in text and "21.4%" in text  # 11k/28k and 6k/28k
    line = terminal.to_text(data, width=200)
    assert "critical path of step 2 (28 us): 75% cpu, 21% launch, 4% gpu_compute" in line


def test_card_says_why_when_not_available(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    """No steps and more intervals than the whole-trace bound: no path, the reason shown."""
    from traceatlas.advisor import critical_path

    monkeypatch.setattr(critical_path, "MAX_WHOLE_ROWS", 2)
    b = TraceBuilder(rank=0, profiler_markers=False)
    for i in range(3):
        b.launch(f"k{i}", 1_000 + 10_000 * i, 5_000, 7_000 + 10_000 * i, 1_000)
    data = report_data.build([("run", traceatlas.open(b.write(tmp_path / "t.json")))])
    run = data.runs[0]
    assert run.critical is None
    assert "no steps and 6 intervals" in run.missing["critical"]
    assert "not available: no steps and 6 intervals" in html.render(data)
    assert "critical path of" not in terminal.to_text(data, width=200)
