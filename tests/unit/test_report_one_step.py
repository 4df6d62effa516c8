"""The HTML report's step-duration plot with one step (issue 16): a bar per rank with the
step named, never an empty axis; with several steps the line per rank as before.

The page is read back with ``html.parser``; expected bar heights come from the durations
given to ``TraceBuilder`` (ratios computed by hand), not from the renderer."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.report import data, html, svg
from traceatlas.testing.builder import TraceBuilder

Tag = tuple[str, dict[str, str], str]
"""(tag, attributes, text of its <title> child, or '')."""


class _Card(HTMLParser):
    """The elements inside ``<section class="card steps">`` (every card's plot when
    ``cls`` is None), each with the text of its ``<title>`` child."""

    def __init__(self, cls: str | None = "steps") -> None:
        super().__init__()
        self.cls, self.depth, self.tags, self.texts = cls, 0, [], []
        self._title: list[str] | None = None
        self._text: list[str] | None = None
        self.tags: list[Tag]
        self.texts: list[str]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section" and (self.depth or self.cls is None
                                 or self.cls in a.get("class", "").split()):
            self.depth += 1
            return
        if not self.depth:
            return
        if tag == "title":
            self._title = []
        elif tag == "text":
            self._text = []
        else:
            self.tags.append((tag, a, ""))

    def handle_endtag(self, tag: str) -> None:
        if not self.depth:
            return
        if tag == "section":
            self.depth -= 1
        elif tag == "title" and self._title is not None:
            if self.tags:
                t, a, _ = self.tags[-1]
                self.tags[-1] = (t, a, "".join(self._title))
            self._title = None
        elif tag == "text" and self._text is not None:
            self.texts.append("".join(self._text))
            self._text = None

    def handle_data(self, text: str) -> None:
        for buf in (self._title, self._text):
            if buf is not None:
                buf.append(text)


def _parse(page: str, cls: str | None = "steps") -> _Card:
    card = _Card(cls)
    card.feed(page)
    return card


def _bars(card: _Card) -> list[Tag]:
    """Data bars: rects with a title (legend swatches have none)."""
    return [t for t in card.tags if t[0] == "rect" and t[2]]


def _trace(tmp_path: Path, rank: int, steps: list[tuple[int, int, int]]) -> Path:
    b = TraceBuilder(rank=rank, world_size=2)
    for n, start, end in steps:
        b.step(n, start, end)
        b.launch("gemm", start + 1_000, 500, start + 2_000, (end - start) // 2)
    return b.write(tmp_path / f"rank-{rank}.json")


def _page(tmp_path: Path, ranks: dict[int, list[tuple[int, int, int]]]) -> str:
    for rank, steps in ranks.items():
        _trace(tmp_path, rank, steps)
    return html.render(data.build([("run", traceatlas.open(tmp_path))]))


def test_one_step_two_ranks_draws_a_bar_each(tmp_path: Path) -> None:
    # rank 0: ProfilerStep#4 lasts 2 ms; rank 1: 1 ms. By hand: bar heights 2:1.
    page = _page(tmp_path, {0: [(4, 0, 2_000_000)], 1: [(4, 0, 1_000_000)]})
    card = _parse(page)
    assert card.tags, "no steps card"
    assert not [t for t in card.tags if t[0] in ("polyline", "circle")]
    bars = _bars(card)
    assert [b[2] for b in bars] == ["rank 0 step 4: 2 ms", "rank 1 step 4: 1 ms"]
    h0, h1 = (float(b[1]["height"]) for b in bars)
    assert h0 > 0 and h0 == pytest.approx(2 * h1, rel=1e-2)
    bottoms = {round(float(b[1]["y"]) + float(b[1]["height"]), 1) for b in bars}
    zero_line = [t for t in card.tags if t[0] == "line" and t[1].get("class") == "axis"]
    assert bottoms == {float(zero_line[0][1]["y1"])}  # both bars stand on the x axis
    assert any("step 4" in text and "only one" in text for text in card.texts)


def test_several_steps_keep_the_line(tmp_path: Path) -> None:
    steps = [(1, 0, 1_000_000), (2, 1_000_000, 3_000_000), (3, 3_000_000, 3_500_000)]
    card = _parse(_page(tmp_path, {0: steps}))
    lines = [t for t in card.tags if t[0] == "polyline"]
    assert len(lines) == 1 and not _bars(card)
    pts = [tuple(map(float, p.split(","))) for p in lines[0][1]["points"].split()]
    assert len(pts) == 3
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    assert xs == sorted(xs) and xs[0] < xs[1] < xs[2]
    # durations 1, 2, 0.5 ms: SVG y grows downward, so step 2 is highest, step 3 lowest
    assert ys[1] < ys[0] < ys[2]
    assert (ys[2] - ys[0]) == pytest.approx((ys[0] - ys[1]) / 2, rel=1e-2)
    assert not any("only one" in text for text in card.texts)


def test_mean_bar_with_whisker_for_many_ranks() -> None:
    # the >8-rank layout: mean over ranks with the fastest-slowest band; 1, 2, 3 ms -> 2 ms
    chart = svg.line_chart([("mean over ranks", [7.0], [2e6])], "step duration", "step",
                           band=([7.0], [1e6], [3e6]))
    card = _parse(f"<section>{chart}</section>", None)
    (bar,) = _bars(card)
    assert bar[2] == "mean over ranks step 7: 2 ms"
    (whisker,) = [t for t in card.tags if t[1].get("class") == "whisker"]
    assert whisker[2] == "1 ms - 3 ms"
    bottom = float(bar[1]["y"]) + float(bar[1]["height"])
    lo, hi = float(whisker[1]["y1"]), float(whisker[1]["y2"])
    # heights above the axis: 1 ms, 2 ms, 3 ms are in ratio 1:2:3
    assert (bottom - lo) * 2 == pytest.approx(float(bar[1]["height"]), rel=1e-2)
    assert (bottom - hi) == pytest.approx(3 * (bottom - lo), rel=1e-2)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.lists(st.integers(1, 10**12), min_size=1, max_size=8))
def test_bar_heights_proportional_to_durations(step: int, durs: list[int]) -> None:
    series = [(f"rank {i}", [float(step)], [float(d)]) for i, d in enumerate(durs)]
    card = _parse(f"<section>{svg.line_chart(series, 't', 'step')}</section>", None)
    bars = _bars(card)
    assert len(bars) == len(durs)
    heights = [float(b[1]["height"]) for b in bars]
    tallest = max(durs)
    for h, d in zip(heights, durs, strict=True):
        # within the 0.1 px the SVG is written to
        assert h == pytest.approx(heights[durs.index(tallest)] * d / tallest, abs=0.15)
        assert h >= 0
    assert all(f"step {step}:" in b[2] for b in bars)
