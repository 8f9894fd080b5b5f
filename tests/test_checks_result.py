"""The shared CheckResult and call_learner behaviour every exercise check relies on."""

import pytest
import torch

from lessons_src.checks import CheckResult
from lessons_src.checks._result import call_learner


def test_result_truthiness_and_text():
    ok = CheckResult("check_x", True, "all 3 cases match")
    bad = CheckResult("check_x", False, "case 1: wrong", "do this", ["detail"])
    assert ok and not bad
    assert str(ok) == "PASS check_x: all 3 cases match"
    assert str(bad) == "FAIL check_x: case 1: wrong\n  - detail\nHow to fix: do this"
    assert "&#10008;" in bad._repr_html_() and "do this" in bad._repr_html_()


def test_call_learner_returns_the_value_and_protects_inputs():
    x = torch.ones(3)

    def mutate(t):
        t.zero_()
        return 7

    value, failure = call_learner("check_x", "case 1", mutate, x)
    assert value == 7 and failure is None and x.sum() == 3


@pytest.mark.parametrize(
    "fn, text",
    [
        (lambda: (_ for _ in ()).throw(NotImplementedError()), "not implemented yet"),
        (lambda: 1 / 0, "ZeroDivisionError"),
        (3, "expected a function, got int"),
    ],
)
def test_call_learner_turns_errors_into_feedback(fn, text):
    value, failure = call_learner("check_x", "case 1", fn)
    assert value is None and not failure and text in str(failure)


def test_call_learner_raises_under_strict(monkeypatch):
    monkeypatch.setenv("LESSONS_SRC_STRICT", "1")
    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        call_learner("check_x", "case 1", lambda: 1 / 0)


def test_not_one_tensor():
    from lessons_src.checks._result import not_one_tensor

    assert not_one_tensor("check_x", "case 1", torch.ones(2), "fix") is None
    tuple_result = not_one_tensor("check_x", "case 1", (torch.ones(2),), "fix", "drop the weights")
    assert str(tuple_result) == "FAIL check_x: case 1: returned a tuple, expected one tensor\nHow to fix: drop the weights"
    other = not_one_tensor("check_x", "case 1", [1], "return x")
    assert str(other) == "FAIL check_x: case 1: returned list, expected a tensor\nHow to fix: return x"
