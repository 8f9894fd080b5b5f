"""Feedback for the mistakes no check listed: the differential diagnosis, the error fallbacks, and
feedback that reveals the fix in steps (``lessons_src/checks/_diagnosis.py``, ``_framework.py``,
``_result.py``)."""

import math

import pytest
import torch

from lessons_src.checks._diagnosis import constants, diagnose, dim_names
from lessons_src.checks._framework import describe_error
from lessons_src.checks._result import CheckResult, elide_fix, remember

GEN = torch.Generator().manual_seed(0)
WEIGHTS = torch.softmax(torch.randn(2, 4, 5, 5, generator=GEN), dim=-1)  # (B, H, L, L)
OUTPUT = torch.randn(2, 6, 8, generator=GEN)  # (B, L, D)
CAUSAL = torch.ones(6, 6).tril().bool()


def _heads_wrong():
    w = WEIGHTS.clone()
    w[:, 2] = w[:, 2].flip(-1)
    return w


def _late_queries_wrong():
    w = WEIGHTS.clone()
    w[..., 3:, :] = 0.2
    return w


def _one_nan():
    x = OUTPUT.clone()
    x[0, 3, 2] = math.nan
    return x


@pytest.mark.parametrize("name, got, expected, info, says", [
    ("weights", WEIGHTS / math.sqrt(8), WEIGHTS, {"d_k": 8}, "times 0.3536 ≈ 1/√d_k"),
    ("weights", WEIGHTS * math.sqrt(7), WEIGHTS, {"n": 6}, "≈ √(n+1)"),
    ("output", OUTPUT * 4, OUTPUT, {"num_heads": 4}, "times 4 = num_heads"),
    ("output", -OUTPUT, OUTPUT, {}, "the opposite sign"),
    ("output", OUTPUT + 0.25, OUTPUT, {}, "plus 0.25 (a constant shift)"),
    ("weights", WEIGHTS.transpose(-2, -1), WEIGHTS, {}, "transposed (queries and keys swapped)"),
    ("weights", torch.softmax(torch.randn(2, 4, 5, 5, generator=GEN), dim=-2), WEIGHTS, {},
     "yours sum to 1 over the queries (dim -2); the reference's sum to 1 over the keys (dim -1)"),
    ("output", OUTPUT.roll(1, 1), OUTPUT, {}, "shifted by 1 along the position axis (dim -2)"),
    ("output", OUTPUT.flip(1), OUTPUT, {}, "reversed along the position axis"),
    ("output", OUTPUT[:, [1, 0, 2, 3, 4, 5]], OUTPUT, {}, "in another order along dim -2"),
    ("output", OUTPUT[:1].expand(2, 6, 8), OUTPUT, {}, "every batch item of yours equals the reference's batch item 0"),
    ("weights", _heads_wrong(), WEIGHTS, {}, "only head 2 of 4 differs"),
    ("weights", _late_queries_wrong(), WEIGHTS, {}, "queries 0..2 are right, from query 3 on they differ"),
    ("weights", WEIGHTS * torch.arange(1.0, 6.0)[:, None], WEIGHTS, {}, "a factor of its own"),
    ("output", _one_nan(), OUTPUT, {}, "NaN or inf in 1 of 96 entries where the reference is finite, first at [0, 3, 2]"),
    ("mask", CAUSAL.T, CAUSAL, {}, "transposed"),
    ("mask", ~CAUSAL, CAUSAL, {}, "inverted"),
    ("mask", torch.ones(6, 6).bool(), CAUSAL, {}, "yours allows 15 pairs (query, key) the reference forbids: later keys (j > i)"),
])
def test_a_wrong_tensor_is_described(name, got, expected, info, says):
    how, details = diagnose(name, got, expected, info)
    assert says in " ".join([how, *details]), (how, details)


def test_a_right_tensor_or_an_unrelated_one_gets_no_false_relation():
    noise = torch.randn(2, 6, 8, generator=GEN)
    how, details = diagnose("output", noise, OUTPUT, {})
    assert how.startswith("every entry differs") and "unlike the reference in direction" in how, how
    assert "shift" not in how and "reference's times" not in how


@pytest.mark.parametrize("got, says", [
    (lambda: _zero_head(), "head 0 of 4 is all zero in yours"),
    (lambda: OUTPUT + torch.linspace(0, 1, 8), "the same for every batch item and every position"),
    (lambda: _split_differently(), "summed over the heads (dim -3) yours equal the reference's"),
    (lambda: OUTPUT * 1.01 + 0.001 * torch.randn(2, 6, 8, generator=GEN), "close to the reference in direction"),
])
def test_more_relations(got, says):
    value = got()
    expected = WEIGHTS if value.dim() == 4 else OUTPUT
    how, details = diagnose("weights" if value.dim() == 4 else "output", value, expected, {})
    assert says in how, how


def _zero_head():
    w = WEIGHTS.clone()
    w[:, 0] = 0
    return w


def _split_differently():
    return WEIGHTS.mean(1, keepdim=True).expand_as(WEIGHTS).clone()


def test_axes_are_named_by_the_course_or_by_the_check():
    assert dim_names("weights", 4) == ["batch item", "head", "query", "key"]
    assert dim_names("output", 3) == ["batch item", "position", "feature"]
    assert dim_names("output", 3, {"dims": {"output": ("layer", "token", "unit")}}) == ["layer", "token", "unit"]
    assert (2.0, "2") in constants({}) and any(label == "1/√d_k" for _, label in constants({"d_k": 16}))


@pytest.mark.parametrize("raise_it, says", [
    (lambda: torch.ones(3, 4) @ torch.ones(3, 4), "a matrix product of incompatible shapes (3x4) @ (3x4)"),
    (lambda: torch.ones(2, 3, 4) * torch.ones(2, 4, 3), "shapes that do not broadcast (sizes 4 and 3 in dim 2)"),
    (lambda: torch.ones(2, 3).view(4, 2), "a reshape to [4, 2] that does not keep the 6 entries"),
    (lambda: torch.ones(2, 3).sum(dim=2), "a dim that does not exist"),
    (lambda: torch.ones(2, 3)[5], "an index out of range (5 in dim 0 of size 2)"),
    (lambda: torch.ones(2, 3).expand(4, 3), "`expand` of a dim whose size is not 1"),
    (lambda: torch.ones(2, 3, dtype=torch.float64) @ torch.ones(3, 2), "tensors of two different dtypes"),
])
def test_errors_are_told_apart_and_quote_the_sizes(raise_it, says):
    with pytest.raises(Exception) as info:
        raise_it()
    what, hint = describe_error(info.value)
    assert says in what.split(": your function raised")[0], what
    assert "transpose only the last two dims" not in hint or "@" in says  # a broadcast is no transpose


def test_the_first_failure_elides_the_code_and_a_repeat_reveals_it():
    hint = "zero the rows with no key: `weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)`, after the softmax."
    short, elided = elide_fix(hint)
    assert elided and "masked_fill" not in short and "`…`" in short
    assert elide_fix("use `dim=-1`")[0] == "use `dim=-1`"  # short code is a word of the hint, not the answer
    two = "`torch.softmax` is safe, or a max of each row (`keepdim=True`)"  # not the text between two spans
    assert elide_fix(two) == (two, False)
    first = remember(CheckResult("check_demo", False, "empty rows give NaN (case 3/4)", hint))
    assert "masked_fill" not in str(first) and "check_demo(...).fix" in str(first)
    assert "masked_fill" in first.fix and "Show the exact code" in first._repr_html_()
    second = remember(CheckResult("check_demo", False, "empty rows give NaN (case 3/4)", hint))
    assert "masked_fill" in str(second) and "the same failure as your last try" in str(second)
    third = remember(CheckResult("check_demo", False, "the weights are not scaled (case 1/4)", "divide."))
    assert "your last try failed differently: empty rows give NaN (case 3/4)" in str(third)
    remember(CheckResult("check_demo", True, "all cases match"))
    fourth = remember(CheckResult("check_demo", False, "empty rows give NaN (case 3/4)", hint))
    assert "masked_fill" not in str(fourth)  # a pass in between: a new start


def test_a_changed_function_is_told_what_moved():
    from lessons_src.checks._framework import fingerprint

    def one(x):
        return x + 1

    def two(x):
        return x + 2

    assert fingerprint(one) != fingerprint(two) and fingerprint(one) == fingerprint(one)
    hint = "guard the factor too: `torch.where(torch.isinf(new_max), 0.0, new_max)`."
    first = remember(CheckResult("check_moved", False, "NaN for a row that has seen only masked keys (case 4/5)",
                                 hint, ["first difference at output[1, 0]: expected 0, got nan"], learner="a"))
    assert "it moved" not in str(first)
    second = remember(CheckResult("check_moved", False, "NaN for a row that has seen only masked keys (case 4/5)",
                                  hint, ["first difference at running_sum[1]: expected 0, got nan"], learner="b"))
    assert ("it moved: last try 'first difference at output[1, 0]: expected 0, got nan', now 'first difference at "
            "running_sum[1]: expected 0, got nan'") in str(second)
    assert "isinf" not in str(second)  # progress: the code is still the learner's to find
    third = remember(CheckResult("check_moved", False, "NaN for a row that has seen only masked keys (case 4/5)",
                                 hint, ["first difference at running_sum[1]: expected 0, got nan"], learner="c"))
    assert "did not touch this mistake" in str(third) and "isinf" in str(third)
