"""The checks framework (`_framework.py`) and the shared CheckResult/call_learner every check relies on."""

import pytest
import torch

from lessons_src.checks import CheckResult
from lessons_src.checks._framework import (
    CALLS,
    Case,
    Mistake,
    Session,
    call_limited,
    describe_error,
    judge,
    learner_line,
    run_check,
    time_limits,
)
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


# -- the framework ---------------------------------------------------------------------------------


def _forever(*args):
    while True:
        pass


def test_the_time_limit_stops_a_loop_in_the_main_thread():
    kind, value, seconds = call_limited(_forever, (), {}, 0.2)
    assert kind == "timeout" and value is None and seconds >= 0.2
    assert call_limited(lambda x: x + 1, (1,), {}, 0.2)[:2] == ("ok", 2)  # the alarm is off again
    kind, value, _ = call_limited(lambda: 1 / 0, (), {}, 0.2)
    assert kind == "raised" and isinstance(value, ZeroDivisionError)


def test_the_time_limit_outside_the_main_thread_stops_waiting():
    import threading

    stop = threading.Event()

    def spin(*args):
        """Loops like a learner that never returns, until the test lets it go: a thread left
        spinning would hold the GIL for the rest of the test session and slow every test after it."""
        while not stop.is_set():
            pass

    box = {}
    thread = threading.Thread(target=lambda: box.update(out=call_limited(spin, (), {}, 0.2)))
    thread.start()
    thread.join(5)
    stop.set()
    assert box["out"][0] == "timeout"
    learners = [t for t in threading.enumerate() if t.name == "learner-call"]
    for learner in learners:
        learner.join(2)
    assert not any(learner.is_alive() for learner in learners), "the learner's thread is still running"
    box.clear()
    thread = threading.Thread(target=lambda: box.update(out=call_limited(torch.ones, (2,), {}, 1.0)))
    thread.start()
    thread.join(5)
    assert box["out"][0] == "ok" and box["out"][1].sum() == 2


def test_a_session_reports_the_time_limit_and_the_check_budget():
    with time_limits(0.1, 10.0):
        value, failure = Session("check_x").call("case 2/3: big", _forever, {"x": torch.ones(1)})
    assert value is None and str(failure).splitlines()[0].startswith("FAIL check_x: your function did not return "
                                                                     "within 0.1 s, the time limit per call (case 2/3")
    assert "the limit is 0.1 s; time spent printing is not counted" in str(failure)
    with time_limits(0.1, 0.0):
        value, failure = Session("check_x").call("case 1/3", lambda x: x, {"x": torch.ones(1)})
    assert "the check's time limit ran out after 0 calls" in failure.summary and "the limit is 0 s" in failure.summary


def test_the_limits_follow_the_machine(monkeypatch):
    """On a machine three times slower than a quiet one, every limit is three times longer, and the feedback says why."""
    import lessons_src.checks._framework as framework

    monkeypatch.setattr(framework, "machine_slowness", lambda: 3.0)
    with time_limits(0.1, 10.0, follow_machine=True):
        session = Session("check_x")
        value, failure = session.call("case 1/1", _forever, {"x": torch.ones(1)})
    assert session.slowness == 3.0 and session.seconds >= 0.3
    assert "did not return within 0.3 s" in failure.summary
    assert "the limit is 0.1 s x 3.0 = 0.3 s (this machine runs 3.0 times slower" in str(failure)
    monkeypatch.undo()
    assert 1.0 <= framework.machine_slowness() <= 20.0


class _SlowStream:
    """A notebook's output on a busy machine: every line takes 20 ms."""

    def __init__(self):
        self.text = []

    def write(self, text):
        import time

        if "\n" in text:
            time.sleep(0.02)
        self.text.append(text)
        return len(text)

    def flush(self):
        pass


def _chatty(x):
    for i in range(150):
        print(f"step {i} of my function")
    return x + 1


def test_the_learners_printing_is_shown_and_not_counted(monkeypatch):
    """150 printed lines at 20 ms each take 2 s (the 100 shown): over a 1.5 s limit, yet
    the function computes for microseconds, so it passes; the first 100 lines are shown, then a note."""
    import sys

    slow = _SlowStream()
    monkeypatch.setattr(sys, "stdout", slow)
    with time_limits(1.5, 1.9):  # each call prints for 2 s: over both limits unless printing is left out
        session = Session("check_x")
        value, failure = session.call("case 1/1", _chatty, {"x": torch.ones(1)})
        again, failure_again = session.call("case 1/1", _chatty, {"x": torch.ones(1)})
    monkeypatch.undo()
    assert failure is None and failure_again is None and value.item() == 2.0 and again.item() == 2.0
    assert session.printing.seconds >= 2.0 and session.seconds < session.printing.seconds  # printing left out
    shown = "".join(slow.text)
    assert shown.count("of my function") == 100 and "step 99 of my function" in shown
    assert "the check hides the rest of what your function prints" in shown


def test_a_session_names_the_argument_changed_in_place():
    x, y = torch.ones(3), torch.ones(3)

    def divides_key(query, key):
        key /= 2
        return query

    calls = CALLS.calls
    value, failure = Session("check_x").call("case 1/1", divides_key, [x, y])
    assert "changed its argument `key` in place" in failure.summary and "key.clone()" in failure.hint
    assert x.sum() == 3 and y.sum() == 3 and CALLS.calls == calls + 1  # the learner got copies


def test_the_quoted_line_is_the_learners_not_the_librarys():
    def target(x):  # a learner's function may have any name
        return torch.nn.functional.linear(x, torch.ones(3, 5))

    kind, exc, _ = call_limited(target, (torch.ones(2, 4),), {}, 1.0)
    assert kind == "raised" and "torch.nn.functional.linear(x, torch.ones(3, 5))" in learner_line(exc)
    what, hint = describe_error(ValueError("x"))
    assert "ValueError: x" in what and hint


def test_error_table_hints():
    assert "`mask=` parameter" in describe_error(TypeError("f() got an unexpected keyword argument 'mask'"))[1]
    assert describe_error(NotImplementedError())[0] == "not implemented yet"
    assert describe_error(RuntimeError("x"), [(r"^RuntimeError: x$", "own hint")])[1] == "own hint"


def _double(x):
    return x * 2


def test_judge_goes_type_dtype_shape_values_mistakes():
    session = Session("check_x")
    case = Case("x of 3", {"x": torch.arange(3.0)})
    expected = _double(torch.arange(3.0))
    plus_one = Mistake("added 1 instead of doubling", "multiply by 2", lambda x: x + 1)
    verdicts = {
        "not a tensor": judge(session, "c", case, [1.0], expected, ("y",)),
        "complex": judge(session, "c", case, expected.to(torch.complex64), expected, ("y",)),
        "integer": judge(session, "c", case, expected.long(), expected, ("y",)),
        "shape": judge(session, "c", case, expected[:2], expected, ("y",)),
        "mistake": judge(session, "c", case, torch.arange(3.0) + 1, expected, ("y",), [plus_one]),
        "difference": judge(session, "c", case, expected + torch.tensor([0.0, 0.5, 0.0]), expected, ("y",)),
    }
    # float32 inputs want float32 back (a float64 activation breaks the next product); a statistic may opt out.
    assert "y has dtype torch.float64, expected torch.float32" in judge(session, "c", case, expected.double(), expected,
                                                                       ("y",)).summary
    assert judge(session, "c", case, expected.double(), expected, ("y",), same_dtype=False) is None
    assert judge(session, "c", Case("x of 3", {"x": torch.arange(3.0).double()}), expected.double(), expected,
                 ("y",)) is None
    assert "returned a list of 1 items" in verdicts["not a tensor"].summary
    assert "complex64" in verdicts["complex"].summary and "complex" in verdicts["complex"].hint
    assert "y has dtype torch.int64, expected a float tensor" in verdicts["integer"].summary
    assert "y has shape (2,), expected (3,)" in verdicts["shape"].summary
    assert verdicts["mistake"].summary.startswith("added 1 instead of doubling (c)")
    assert "first difference at y[1]: expected 2, got 2.5" in verdicts["difference"].details[0]


def test_run_check_reports_the_first_failing_case():
    session = Session("check_x")
    cases = [Case(f"n={n}", {"x": torch.ones(n)}) for n in (1, 2, 3)]
    assert run_check(session, _double, cases, _double, ("y",)) is None
    failure = run_check(session, lambda x: x * 2 if len(x) < 3 else x, cases, _double, ("y",))
    assert "case 3/3: n=3" in failure.summary and "cases 1-2 passed" in failure.details
