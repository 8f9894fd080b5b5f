"""Check for exercise 7 (chapter "Layer norm placement"): a learning-rate warm-up schedule.

The learner writes ``warmup_lr(step, base_lr, warmup_steps)``, the schedule of "Attention Is All
You Need" (section 5.3) with its peak made explicit: a linear warm-up to ``base_lr`` over the first
``warmup_steps`` optimizer steps, then an inverse-square-root decay,

    lr(step) = base_lr * min((step + 1) / warmup_steps, sqrt(warmup_steps / (step + 1))),

with ``step`` counted from 0 (the first update is step 0, as ``LambdaLR`` counts). The check runs
it over four schedules, compares with the formula, and names the usual slips: steps counted from
1, integer division, a warm-up that never ends or ends a step late, a decay that is missing, one
step late, too fast, restarted at the end of the warm-up or not joined to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._framework import Case, Session, as_number, done, judge, passed
from ._result import CheckResult

__all__ = ["check_warmup_lr", "reference_warmup_lr"]

NAME = "check_warmup_lr"


def reference_warmup_lr(step: int, base_lr: float, warmup_steps: int) -> float:
    """Linear warm-up to ``base_lr`` over ``warmup_steps`` steps, then inverse-sqrt decay (0-based ``step``)."""
    n = step + 1  # the number of updates made so far, this one included
    return base_lr * min(n / warmup_steps, math.sqrt(warmup_steps / n))


@dataclass(frozen=True)
class _Case:
    base_lr: float
    warmup_steps: int
    steps: tuple[int, ...]

    @property
    def description(self) -> str:
        what = "no warm-up" if self.warmup_steps == 1 else f"warmup_steps={self.warmup_steps}"
        return f"base_lr={self.base_lr:g}, {what}"


def _cases() -> list[_Case]:
    return [
        _Case(0.01, 10, tuple(range(60))),  # every step through warm-up, peak and decay
        _Case(1e-3, 4000, (0, 1, 1999, 3998, 3999, 4000, 4001, 15999, 16000, 99_999)),  # the paper's warm-up
        _Case(2.0, 3, tuple(range(25))),  # base_lr above 1: a multiplier and a rate differ
        _Case(0.5, 1, tuple(range(10))),  # warmup_steps=1: no warm-up, decay from the start
    ]


@dataclass(frozen=True)
class _Point:
    case: _Case
    step: int
    got: float
    expected: float

    @property
    def w(self) -> int:
        return self.case.warmup_steps

    @property
    def b(self) -> float:
        return self.case.base_lr


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def _matches(points: Sequence[_Point], formula: Callable[[int, float, int], float]) -> bool:
    return all(_same(p.got, formula(p.step, p.b, p.w)) for p in points)


def _diagnose(points: list[_Point]) -> tuple[str, str]:
    """Name the mistake behind a wrong schedule: (what is wrong, how to fix it)."""
    formula = "base_lr * min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))"
    warm = [p for p in points if p.step < p.w - 1]  # strictly inside the warm-up
    peak = [p for p in points if p.step == p.w - 1]  # the last warm-up step: lr = base_lr
    decay = [p for p in points if p.step >= p.w]
    with_warmup = [p for p in points if p.w > 1]

    if _matches(points, lambda s, b, w: reference_warmup_lr(s, 1.0, w)):
        return ("your function returns the multiplier of the learning rate, not the rate: it ignores base_lr",
                "multiply by base_lr (with base_lr=2.0 the peak must be 2.0). To use the schedule with "
                "LambdaLR, which wants a multiplier, call it with base_lr=1.0.")
    if all(_same(p.got, p.expected) for p in with_warmup):
        bad = next(p for p in points if not _same(p.got, p.expected))
        return (f"warmup_steps=1 (no warm-up) is handled differently: at step {bad.step} you give "
                f"{bad.got:.6g}, expected {bad.expected:.6g}",
                "no special case is needed: with warmup_steps=1 the formula gives base_lr at step 0 and "
                "decays from step 1, like base_lr / sqrt(step + 1).")

    if warm and all(p.got == 0.0 for p in warm) and all(_same(p.got, p.b) for p in peak):
        return ("integer division: the learning rate is 0 for the whole warm-up, then jumps to base_lr",
                "`(step + 1) // warmup_steps` rounds down to 0; divide with `/`, which gives a fraction.")
    zero_start = [p for p in points if p.step == 0 and p.got == 0.0]
    if zero_start:
        return ("step 0 gets a learning rate of 0, so the first update does nothing (and the peak comes a "
                "step late): steps are counted from 1 instead of 0",
                "the first update is step 0 (LambdaLR counts that way); use `step + 1` in the warm-up, "
                "(step + 1) / warmup_steps, and in the decay.")
    if warm and _matches(warm, lambda s, b, w: b * math.sqrt((s + 1) / w)):
        return ("the warm-up is not linear: it rises like sqrt((step + 1) / warmup_steps)",
                "during the warm-up the rate is base_lr * (step + 1) / warmup_steps, a straight line.")
    wrong_warm = [p for p in warm + peak if not _same(p.got, p.expected)]
    if wrong_warm:
        p = wrong_warm[0]
        return (f"the warm-up is wrong: at step {p.step} ({p.case.description}) you give {p.got:.6g}, "
                f"expected {p.expected:.6g}",
                "during the warm-up the rate rises linearly from base_lr / warmup_steps at step 0 to "
                f"base_lr at step warmup_steps - 1: {formula}.")

    # The warm-up and its peak are right; what follows is not.
    if _matches(decay, lambda s, b, w: b * (s + 1) / w):
        return ("the warm-up never ends: the learning rate keeps growing past base_lr",
                "take the smaller of the warm-up and the decay, min((step + 1) / warmup_steps, "
                "sqrt(warmup_steps / (step + 1))), so the rate peaks at base_lr and then falls.")
    if _matches(decay, lambda s, b, w: b):
        return ("the learning rate never decays: after the warm-up it stays at base_lr",
                "after the warm-up the rate falls like base_lr * sqrt(warmup_steps / (step + 1)).")
    if _matches(decay, lambda s, b, w: b * math.sqrt(w / s)):
        return ("the decay is one step late: it uses sqrt(warmup_steps / step), so step warmup_steps "
                "repeats the peak",
                "count from 1 in the decay too: sqrt(warmup_steps / (step + 1)).")
    if _matches(decay, lambda s, b, w: b * w / (s + 1)):
        return ("the decay is too fast: it falls like 1 / step, not 1 / sqrt(step)",
                "take the square root: base_lr * math.sqrt(warmup_steps / (step + 1)).")
    if _matches(decay, lambda s, b, w: b / math.sqrt(s + 1)) or _matches(decay, lambda s, b, w: b / math.sqrt(s)):
        first = next(p for p in decay if p.w > 1)  # the first step after a warm-up
        return (f"the decay does not continue from the peak: it forgets warmup_steps, so at the end of the "
                f"warm-up the rate drops from base_lr = {first.b:g} to {first.got:.6g} in one step "
                f"({first.case.description}, step {first.step})",
                "scale the decay so it equals base_lr at step warmup_steps - 1: "
                "base_lr * sqrt(warmup_steps / (step + 1)).")
    if _matches(decay, lambda s, b, w: b / math.sqrt(s - w + 2)) or _matches(decay, lambda s, b, w: b / math.sqrt(s - w + 1)):
        return ("the decay starts at the wrong step: it restarts from 1 at the end of the warm-up "
                "(base_lr / sqrt(step - warmup_steps + ...)) and so falls much faster than the schedule",
                "the decay is counted from the start of training, not from the end of the warm-up: "
                "base_lr * sqrt(warmup_steps / (step + 1)).")
    over = [p for p in decay if p.got > p.b * (1 + 1e-6)]
    if over:
        p = over[0]
        return (f"the warm-up ends a step late: at step {p.step} ({p.case.description}) the rate is "
                f"{p.got:.6g}, above base_lr, before it decays",
                "the warm-up's last step is warmup_steps - 1, where (step + 1) / warmup_steps = 1; switch to "
                "the decay after it (`step < warmup_steps`, not `<=`), or take the min of the two.")
    p = next(p for p in decay if not _same(p.got, p.expected))
    return (f"the decay is wrong: at step {p.step} ({p.case.description}) you give {p.got:.6g}, "
            f"expected {p.expected:.6g}",
            f"after the warm-up the rate is base_lr * sqrt(warmup_steps / (step + 1)); all together: {formula}.")


_HINTS = [(r"^ZeroDivisionError", "steps are counted from 0, so at step 0 `warmup_steps / step` divides by zero: use "
           "step + 1, the number of updates made so far, sqrt(warmup_steps / (step + 1)); elsewhere look for a "
           "division by step - something, or by warmup_steps - 1.", "your function divided by zero")]


def check_warmup_lr(fn: Callable[[int, float, int], float]) -> CheckResult:
    """Check a learner's ``warmup_lr(step, base_lr, warmup_steps) -> float`` (exercise 7).

    Runs four schedules (a short warm-up step by step, the paper's 4000-step warm-up, a
    ``base_lr`` above 1, and ``warmup_steps=1``) against :func:`reference_warmup_lr`, and names
    the mistake when a value differs. Built on ``_framework.py``: each value is called and judged
    as a number (type, finiteness) by the framework; the mistake is then read off the whole
    schedule (:func:`_diagnose`), since most slips show only across steps.
    """
    session = Session(NAME, _HINTS)
    cases = _cases()
    points: list[_Point] = []
    for number, case in enumerate(cases, start=1):
        for step in case.steps:
            where = f"case {number}/{len(cases)}: {case.description}, step {step}"
            value, failure = session.call(where, fn, {"step": step, "base_lr": case.base_lr,
                                                      "warmup_steps": case.warmup_steps})
            if failure is not None:
                return done(failure)
            expected = reference_warmup_lr(step, case.base_lr, case.warmup_steps)
            got = as_number(value)
            if got is None or not math.isfinite(got):  # the framework names a wrong type or a NaN/inf
                failure = judge(session, where, Case(where, {}), value, expected, ("the learning rate",), tol=0.0)
                if got is not None:
                    failure = session.fail(f"returned {got}, expected a finite number ({where})",
                                           "the learning rate must be a finite number; look for a division by zero "
                                           "or a square root of a negative number.")
                return done(failure)
            points.append(_Point(case, step, got, expected))

    if all(_same(p.got, p.expected) for p in points):
        return done(passed(session, f"all {len(points)} learning rates in {len(cases)} schedules match "
                                    "(short and long warm-ups, base_lr above 1, no warm-up)"))
    what, fix = _diagnose(points)
    first = next(p for p in points if not _same(p.got, p.expected))
    details = [f"first difference: {first.case.description}, step {first.step}: "
               f"you give {first.got:.6g}, expected {first.expected:.6g}"]
    return done(session.fail(what, fix, details))
