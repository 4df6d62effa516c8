"""``export --to speedscope`` validated with ``jsonschema`` against speedscope's own
file-format schema (vendored: tests/data/speedscope/, source and MIT licence in its
README.txt), and ``export --to folded`` read back by an independent parser of the folded
format inferno and FlameGraph read (inferno is not installable here: crates.io is not
reachable).

Folded rules (inferno ``flamegraph::merge``, Brendan Gregg's ``flamegraph.pl``): one
sample per line, ``frames count``; the count is the text after the LAST space and is a
non-negative integer; the frames are ``;``-separated and none is empty; no other line
(blank lines are skipped by both tools; we write none).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator
from test_tree import golden
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.testing.builder import TraceBuilder

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "speedscope"
                     / "file-format-schema.json").read_text())
COUNT = re.compile(r"[0-9]+")


def parse_folded(text: str) -> dict[tuple[str, ...], int]:
    """Stacks -> summed count; raises ValueError naming the first bad line."""
    out: dict[tuple[str, ...], int] = {}
    if text and not text.endswith("\n"):
        raise ValueError("no newline at the end")
    for number, line in enumerate(text.split("\n")[:-1], 1):
        stack, space, count = line.rpartition(" ")
        if not space or not COUNT.fullmatch(count):
            raise ValueError(f"line {number}: no integer count after the last space")
        frames = tuple(stack.split(";"))
        if any(f == "" for f in frames) or any(c in line for c in "\r\t"):
            raise ValueError(f"line {number}: empty frame or control character")
        out[frames] = out.get(frames, 0) + int(count)
    return out


def _export(trace_path: Path, fmt: str, out: Path, *extra: str) -> Path:
    result = CliRunner().invoke(app, ["export", str(trace_path), "--to", fmt, "-o", str(out),
                                      *extra])
    assert result.exit_code == 0, result.output
    return out


def _validate(doc: dict[str, Any]) -> None:
    Draft7Validator.check_schema(SCHEMA)
    errors = sorted(Draft7Validator(SCHEMA).iter_errors(doc), key=str)
    assert not errors, errors[0].message
    # What speedscope's importer assumes beyond the schema: frame indices in range, one
    # weight per sample, endValue - startValue = the summed weights.
    frames = len(doc["shared"]["frames"])
    for p in doc["profiles"]:
        assert len(p["samples"]) == len(p["weights"])
        assert all(0 <= i < frames for s in p["samples"] for i in s)
        assert p["endValue"] - p["startValue"] == sum(p["weights"])


def test_schema_rejects_broken_documents() -> None:
    # The vendored schema does bite: the test below could fail.
    good = {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": [{"name": "a"}]},
            "profiles": [{"type": "sampled", "name": "p", "unit": "nanoseconds",
                          "startValue": 0, "endValue": 1, "samples": [[0]], "weights": [1]}]}
    validator = Draft7Validator(SCHEMA)
    assert validator.is_valid(good)
    bad_unit = json.loads(json.dumps(good))
    bad_unit["profiles"][0]["unit"] = "ns"
    no_weights = json.loads(json.dumps(good))
    del no_weights["profiles"][0]["weights"]
    bad_frame = json.loads(json.dumps(good))
    bad_frame["shared"]["frames"][0] = {"file": "x.py"}
    for doc in (bad_unit, no_weights, bad_frame):
        assert not validator.is_valid(doc)


def test_speedscope_golden_validates(tmp_path: Path) -> None:
    trace = golden(tmp_path)
    out = _export(trace.path, "speedscope", tmp_path / "g.speedscope.json")
    _validate(json.loads(out.read_text()))


def test_speedscope_odd_names_validate(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0)
    b.cpu_op('a;"b"\n\\c', 0, 1_000)
    b.cpu_op("", 100, 200)
    b.cpu_op("é ✓ \u0000", 300, 400)
    path = b.write(tmp_path / "names.json")
    doc = json.loads(_export(path, "speedscope", tmp_path / "n.json").read_text())
    _validate(doc)
    assert 'a;"b"\n\\c' in {f["name"] for f in doc["shared"]["frames"]}


def test_folded_golden_parses(tmp_path: Path) -> None:
    trace = golden(tmp_path)
    for value in ("host", "device"):
        out = _export(trace.path, "folded", tmp_path / f"{value}.folded", "-p",
                      f"value={value}")
        stacks = parse_folded(out.read_text())
        assert stacks and all(v > 0 for v in stacks.values())
        # one line per context: no stack repeated
        assert len(stacks) == len(out.read_text().splitlines())


def test_folded_odd_names_parse(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0)
    b.cpu_op("x;y\tz\r\nw", 0, 1_000)
    b.cpu_op("", 100, 200)
    b.cpu_op("ends with space ", 300, 400)
    path = b.write(tmp_path / "names.json")
    stacks = parse_folded(_export(path, "folded", tmp_path / "o.folded").read_text())
    # 1000 ns under the outer op: two 100 ns children, 800 ns its own
    assert sum(stacks.values()) == 1_000
    assert stacks[("x:y z  w",)] == 1_000 - 100 - 100
    assert stacks[("x:y z  w", "[unnamed]")] == 100
    assert stacks[("x:y z  w", "ends with space ")] == 100  # count = after the LAST space


@pytest.mark.parametrize("line", ["a;b", "a;b 1.5", "a;;b 3", ";a 2", "a;b -1"])
def test_parser_rejects_bad_lines(line: str) -> None:
    with pytest.raises(ValueError):
        parse_folded(line + "\n")
