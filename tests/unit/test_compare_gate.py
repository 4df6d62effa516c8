"""compare/gate.py: the --fail-on parser on valid and invalid texts (random text raises
only InputError), and evaluate() on hand-made changes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.compare.gate import Rule, Violation, evaluate, parse_rule, unmatched
from traceatlas.compare.stats import Change
from traceatlas.errors import InputError


def change(rel: float | None, p: float | None, *, base_median: float = 100.0) -> Change:
    """A hand-made Change: relative shift ``rel`` of ``base_median`` with p-value ``p``."""
    shift = (rel if rel is not None else 1.0) * (base_median or 1.0)
    return Change(
        n_base=8,
        n_new=8,
        base_median_ns=base_median,
        new_median_ns=base_median + shift,
        abs_change_ns=shift,
        rel_change=rel,
        p_value=p,
        ci_low_ns=None,
        ci_high_ns=None,
        ci_level=None,
        testable=p is not None,
    )


# ---- parser -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "name", "direction", "magnitude", "relative"),
    [
        ("step:+5%", "step", None, 1, 0.05, True),
        ("kernel:+10%", "kernel", None, 1, 0.10, True),
        ("  op:+10%  ", "op", None, 1, 0.10, True),
        ("annotation:forward:+3%", "annotation", "forward", 1, 0.03, True),
        ("annotation:a:b::c:+3.5%", "annotation", "a:b::c", 1, 0.035, True),
        ("op:aten::mm:+10%", "op", "aten::mm", 1, 0.10, True),
        ("kernel:ncclKernel_AllReduce:-.5%", "kernel", "ncclKernel_AllReduce", -1, 0.005, True),
        ("step:+0%", "step", None, 1, 0.0, True),
        (
            "efficiency.device.load_balance:-0.05",
            "efficiency",
            "device.load_balance",
            -1,
            0.05,
            False,
        ),
        ("efficiency.host.parallel:+.1", "efficiency", "host.parallel", 1, 0.1, False),
    ],
)
def test_valid_rules(
    text: str, kind: str, name: str | None, direction: int, magnitude: float, relative: bool
) -> None:
    rule = parse_rule(text)
    assert (rule.kind, rule.name, rule.direction, rule.relative) == (
        kind,
        name,
        direction,
        relative,
    )
    assert rule.magnitude == pytest.approx(magnitude)
    assert rule.text == text.strip()


def test_threshold_written_back() -> None:
    assert parse_rule("kernel:+10%").threshold_text() == "+10%"
    assert parse_rule("efficiency.device.load_balance:-0.05").threshold_text() == "-0.05"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "expected KIND"),
        ("step", "expected KIND"),
        (":+5%", "expected KIND"),
        ("step:5%", "sign"),
        ("step:+5", "percentages"),
        ("step:+five%", "bad threshold"),
        ("step:+5%%", "bad threshold"),
        ("step:++5%", "bad threshold"),
        ("kernal:+10%", "unknown kind 'kernal'"),
        ("annotation::+3%", "empty NAME"),
        ("efficiency:-0.05", "metric path"),
        ("efficiency.:-0.05", "metric path"),
        ("efficiency.device..lb:-0.05", "metric path"),
        ("efficiency.device.load_balance:-5%", "absolute changes"),
        ("efficiency.device.load_balance:0.05", "sign"),
        ("efficiency.device.load_balance:-1.5", "0..1"),
        ("step:+" + "9" * 400 + "%", "too large"),
    ],
)
def test_invalid_rules(text: str, says: str) -> None:
    with pytest.raises(InputError) as err:
        parse_rule(text)
    assert err.value.path == "--fail-on"
    assert says in err.value.problem
    assert "\n" not in str(err.value)


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_random_text_raises_only_input_error(text: str) -> None:
    try:
        rule = parse_rule(text)
    except InputError as err:
        assert "\n" not in str(err)  # one line, whatever the text held
        return
    assert rule.magnitude >= 0 and math.isfinite(rule.magnitude)


kinds = st.sampled_from(["step", "annotation", "op", "kernel", "category", "rank"])
names = st.text(min_size=1).filter(lambda s: s == s.strip())


@settings(max_examples=200, deadline=None)
@given(kinds, names, st.sampled_from("+-"), st.integers(0, 10**6))
def test_generated_valid_rules_round_trip(kind: str, name: str, sign: str, hundredths: int) -> None:
    text = f"{kind}:{name}:{sign}{hundredths / 100}%"
    rule = parse_rule(text)
    assert (rule.kind, rule.name) == (kind, name)
    assert rule.direction == (1 if sign == "+" else -1)
    assert rule.magnitude == pytest.approx(hundredths / 10000)


# ---- evaluate ----------------------------------------------------------------------


def test_significant_but_under_threshold_is_quiet() -> None:
    rules = [parse_rule("kernel:+10%")]
    assert evaluate(rules, [("kernel", "gemm", change(0.08, 1e-6))]) == []


def test_over_threshold_but_not_significant_is_quiet() -> None:
    rules = [parse_rule("kernel:+10%")]
    assert evaluate(rules, [("kernel", "gemm", change(0.40, 0.2))]) == []


def test_significant_and_over_threshold_names_the_entity() -> None:
    rules = [parse_rule("kernel:+10%")]
    entries = [
        ("kernel", "gemm", change(0.02, 1e-6)),
        ("kernel", "ncclKernel_AllReduce", change(0.31, 1e-4)),
        ("op", "aten::mm", change(0.50, 1e-6)),  # other kind: not this rule's business
    ]
    (v,) = evaluate(rules, entries)
    assert (v.kind, v.name, v.observed, v.rule) == (
        "kernel",
        "ncclKernel_AllReduce",
        0.31,
        rules[0],
    )
    # Holm over the three testable p-values: 1e-4 is the largest -> times 1
    assert v.p_adjusted == pytest.approx(1e-4)
    assert "ncclKernel_AllReduce" in v.describe() and "+31.0%" in v.describe()


def test_correction_counts_every_comparison() -> None:
    """p = 0.02 alone is significant; among 5 comparisons Holm makes it 0.1 (or more)."""
    rules = [parse_rule("step:+5%")]
    alone = [("step", "step", change(0.2, 0.02))]
    assert len(evaluate(rules, alone)) == 1
    crowd = alone + [("kernel", f"k{i}", change(0.0, 0.5)) for i in range(4)]
    assert evaluate(rules, crowd) == []
    # Benjamini-Hochberg: 0.02 * 5 / 1 = 0.1, still above 0.05
    assert evaluate(rules, crowd, method="bh") == []


def test_named_rule_only_matches_that_name() -> None:
    rules = [parse_rule("annotation:forward:+3%")]
    entries = [
        ("annotation", "backward", change(0.5, 1e-9)),
        ("annotation", "forward", change(0.04, 1e-9)),
    ]
    (v,) = evaluate(rules, entries)
    assert v.name == "forward"


def test_direction() -> None:
    slower = [("op", "aten::mm", change(0.2, 1e-9))]
    faster = [("op", "aten::mm", change(-0.2, 1e-9))]
    assert len(evaluate([parse_rule("op:+10%")], slower)) == 1
    assert evaluate([parse_rule("op:+10%")], faster) == []
    assert len(evaluate([parse_rule("op:-10%")], faster)) == 1
    # strictly past: exactly at the threshold is not a violation
    assert evaluate([parse_rule("op:+20%")], slower) == []


def test_untestable_and_zero_base_changes() -> None:
    rules = [parse_rule("kernel:+10%")]
    assert evaluate(rules, [("kernel", "k", change(0.9, None))]) == []
    from_zero = [("kernel", "k", change(None, 1e-9, base_median=0.0))]
    (v,) = evaluate(rules, from_zero)
    assert v.observed == math.inf and "from 0" in v.describe()


def test_efficiency_rule_is_a_threshold_only() -> None:
    rules = [parse_rule("efficiency.device.load_balance:-0.05")]
    drop = ("efficiency", "device.load_balance", 0.93, 0.85)
    small = ("efficiency", "device.load_balance", 0.93, 0.90)
    other = ("efficiency", "device.communication", 0.93, 0.50)
    missing = ("efficiency", "device.load_balance", None, 0.5)
    (v,) = evaluate(rules, [drop, small, other, missing])
    assert isinstance(v, Violation) and v.p_adjusted is None and v.change is None
    assert v.observed == pytest.approx(-0.08) and (v.base_value, v.new_value) == (0.93, 0.85)
    assert "0.930 -> 0.850" in v.describe()
    assert evaluate([parse_rule("efficiency.device.load_balance:+0.05")], [drop]) == []


def test_efficiency_entries_do_not_enter_the_family() -> None:
    """Efficiency entries carry no p-value, so they do not dilute the time corrections."""
    rules = [parse_rule("step:+5%")]
    entries: list[tuple[str, str, Change] | tuple[str, str, float | None, float | None]] = [
        ("step", "step", change(0.2, 0.03))
    ]
    entries += [("efficiency", f"m{i}", 0.9, 0.9) for i in range(10)]
    assert len(evaluate(rules, entries)) == 1


def test_several_rules_and_unmatched() -> None:
    rules = [parse_rule("kernel:+10%"), parse_rule("step:+5%"), parse_rule("op:nope:+1%")]
    entries = [("kernel", "k", change(0.3, 1e-9)), ("step", "step", change(0.06, 1e-9))]
    got = evaluate(rules, entries)
    assert [(v.rule.kind, v.name) for v in got] == [("kernel", "k"), ("step", "step")]
    assert unmatched(rules, entries) == [rules[2]]
    assert unmatched([parse_rule("rank:+5%")], entries) == [
        Rule("rank:+5%", "rank", None, 1, 0.05, True)
    ]


def test_bad_alpha() -> None:
    with pytest.raises(ValueError):
        evaluate([], [], alpha=0.0)
