"""The shared CheckResult and call_learner behaviour every exercise check relies on."""

import pytest
import torch

from lessons_src.checks import CheckResult
from lessons_src.checks._result import DEVICE_HINT, call_learner, is_device_error, receive


def test_result_truthiness_and_text():
    ok = CheckResult("check_x", True, "all 3 cases match")
    bad = CheckResult("check_x", False, "case 1: wrong", "do this", ["detail"])
    assert ok and not bad
    assert str(ok) == "PASS check_x: all 3 cases match"
    assert str(bad) == "FAIL check_x: case 1: wrong\n  - detail\nHow to fix: do this"
    assert "&#10008;" in bad._repr_html_() and "do this" in bad._repr_html_()




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


def test_receive_passes_cpu_values_through_unchanged():
    pair = (torch.ones(2), [torch.zeros(1), "text"])
    value, failure = receive("check_x", "case 1", pair)
    assert value is pair and failure is None
    assert receive("check_x", "case 1", 0.5) == (0.5, None)


@pytest.mark.parametrize(
    "value, text",
    [
        (torch.ones(2, device="meta"), "case 1: returned a tensor on the `meta` device, which has a shape but no values"),
        ([torch.ones(2), (torch.ones(2, device="meta"),)], "`meta` device"),  # found inside a list of tuples
        (torch.ones(2, dtype=torch.complex64), "case 1: returned a complex tensor (dtype torch.complex64)"),
    ],
)
def test_receive_refuses_what_cannot_be_judged(value, text):
    value, failure = receive("check_x", "case 1", value)
    assert value is None and not failure and text in failure.summary
    assert failure.hint == DEVICE_HINT or "view_as_real" in failure.hint


def test_call_learner_gives_the_device_hint():
    def mixes_devices():
        raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")

    value, failure = call_learner("check_x", "case 1", mixes_devices)
    assert value is None and failure.hint == DEVICE_HINT and "device=query.device" in DEVICE_HINT
    value, failure = call_learner("check_x", "case 1", lambda: torch.ones(2, device="meta"))
    assert value is None and "`meta` device" in failure.summary


@pytest.mark.parametrize(
    "message, about_devices",
    [
        ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!", True),
        ("expected self and mask to be on the same device, but got mask on cuda:0 and self on cpu", True),
        ("Tensor on device cpu is not on the expected device meta!", True),
        ("Expected a 'cuda' device type for generator but found 'cpu'", True),
        ("scaled_dot_product_attention: mask is on cuda:0 but query is on cpu", True),  # lessons_src's own
        ("MultiHeadAttention: query is torch.float32 on meta but the weights are torch.float32 on cpu", True),
        ("MultiHeadAttention: query is torch.float64 on cpu but the weights are torch.float32 on cpu", False),
        ("mat1 and mat2 shapes cannot be multiplied (3x16 and 5x16)", False),
        ("The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 1", False),
    ],
)
def test_is_device_error(message, about_devices):
    assert is_device_error(message) is about_devices
