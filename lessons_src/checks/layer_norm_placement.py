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

import torch
from torch import Tensor

from ._framework import Case, Mistake, Session, as_number, done, judge, passed
from ._result import CheckResult
from ._steps import SEARCH_SECONDS, Found, search
from ._steps import step as named_step  # `step` is the schedule's argument here

__all__ = ["check_warmup_lr", "reference_warmup_lr", "MISTAKES"]

NAME = "check_warmup_lr"


def reference_warmup_lr(step: int, base_lr: float, warmup_steps: int) -> float:
    """Linear warm-up to ``base_lr`` over ``warmup_steps`` steps, then inverse-sqrt decay (0-based ``step``)."""
    n = step + 1  # the number of updates made so far, this one included
    return base_lr * min(n / warmup_steps, math.sqrt(warmup_steps / n))


@dataclass(frozen=True)
class _Schedule:
    """One schedule the check runs: ``base_lr``, ``warmup_steps`` and the steps it asks for."""

    base_lr: float
    warmup_steps: int
    steps: tuple[int, ...]

    @property
    def description(self) -> str:
        what = "no warm-up" if self.warmup_steps == 1 else f"warmup_steps={self.warmup_steps}"
        return f"base_lr={self.base_lr:g}, {what}"

    def case(self) -> Case:
        return Case(self.description, {"base_lr": self.base_lr, "warmup_steps": self.warmup_steps},
                    info={"b": self.base_lr, "w": self.warmup_steps, "steps": self.steps})


def _schedules() -> list[_Schedule]:
    return [
        _Schedule(0.01, 10, tuple(range(60))),  # every step through warm-up, peak and decay
        _Schedule(1e-3, 4000, (0, 1, 1999, 3998, 3999, 4000, 4001, 15999, 16000, 99_999)),  # the paper's warm-up
        _Schedule(2.0, 3, tuple(range(25))),  # base_lr above 1: a multiplier and a rate differ
        _Schedule(0.5, 1, tuple(range(10))),  # warmup_steps=1: no warm-up, decay from the start
    ]


def _schedule(formula: Callable[[int, float, int], float], case: Case) -> Tensor:
    """``formula`` over the case's steps, as a float64 tensor (what the learner's values are collected into)."""
    return torch.tensor([formula(s, case.info["b"], case.info["w"]) for s in case.info["steps"]], dtype=torch.float64)


def _reference_schedule(base_lr: float, warmup_steps: int, steps: Sequence[int]) -> Tensor:
    return torch.tensor([reference_warmup_lr(s, base_lr, warmup_steps) for s in steps], dtype=torch.float64)


def _schedule_steps(base_lr: float, warmup_steps: int, steps: Sequence[int]) -> Tensor:
    """The schedule step by step, over all ``steps`` at once (``_steps.py`` searches small changes to each);
    equal to :func:`_reference_schedule`. Sizes are plain numbers, so a search may replace them."""
    at = torch.tensor(steps, dtype=torch.float64)  # (S,)
    n = named_step("the updates made so far: step + 1", torch.add, at, 1, axes=("step",))
    warm = named_step("the warm-up: (step + 1) / warmup_steps", torch.div, n, warmup_steps, axes=("step",))
    ratio = named_step("warmup_steps / (step + 1)", torch.div, torch.full_like(n, warmup_steps), n, axes=("step",))
    decay = named_step("the decay: the square root of warmup_steps / (step + 1)", torch.sqrt, ratio, axes=("step",))
    rate = named_step("the smaller of the warm-up and the decay", torch.minimum, warm, decay, axes=("step",))
    return named_step("times base_lr", torch.mul, rate, base_lr, axes=("step",))


def _stepped_cases() -> list[Case]:
    """The schedules as cases of :func:`_schedule_steps` (the steps asked for among the arguments)."""
    return [Case(s.description, {"base_lr": s.base_lr, "warmup_steps": s.warmup_steps, "steps": s.steps},
                 info={"b": s.base_lr, "w": s.warmup_steps}) for s in _schedules()]


def _searcher(session: Session, fn: Callable[..., object], number: int) -> Callable[[object, object], Found | None]:
    """The step search on schedule ``number`` (1-based): the schedules before it passed; the learner's values on
    the ones after it are computed only when a change needs comparing with them."""
    cases = _stepped_cases()

    def learner(case: Case) -> Callable[[], object]:
        def values() -> object:
            got = [as_number(session.call("the step search", fn, {"step": s, "base_lr": case.args["base_lr"],
                                                                     "warmup_steps": case.args["warmup_steps"]})[0])
                   for s in case.args["steps"]]
            return None if any(v is None for v in got) else torch.tensor(got, dtype=torch.float64)
        return values

    def searched(got: object, expected: object) -> Found | None:
        others = [(c, _reference_schedule(**c.args)) for c in cases[:number - 1]]
        others += [(c, learner(c)) for c in cases[number:]]
        return search(_schedule_steps, cases[number - 1], got, expected, 1e-7, others, SEARCH_SECONDS * session.slowness)

    return searched


# -- the known mistakes: predicates on one whole schedule ---------------------------------------------------

_FORMULA = "base_lr * min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))"


def _close(a: Tensor, b: Tensor) -> Tensor:
    return torch.isclose(a, b, rtol=1e-6, atol=1e-12)


def _parts(case: Case, got: Tensor) -> dict[str, Tensor]:
    """Boolean selections of the case's steps: inside the warm-up, its last step (the peak), the decay."""
    steps, w = torch.tensor(case.info["steps"]), case.info["w"]
    return {"warm": steps < w - 1, "peak": steps == w - 1, "decay": steps >= w, "all": torch.ones_like(steps, dtype=torch.bool)}


def _fits(formula: Callable[[int, float, int], float], part: str = "all") -> Callable[[Case, object], bool]:
    """A predicate: on the steps of ``part`` that the case has, the learner's schedule is ``formula``'s."""

    def predicate(case: Case, got: object) -> bool:
        where = _parts(case, got)[part]
        steps = [s for s, inside in zip(case.info["steps"], where.tolist(), strict=True) if inside]
        wanted = torch.tensor([formula(s, case.info["b"], case.info["w"]) for s in steps], dtype=torch.float64)
        return bool(steps) and bool(_close(got[where], wanted).all())  # only there: a decay formula fails at step 0

    return predicate


def _warmup_right(case: Case, got: Tensor) -> bool:
    """The warm-up and its peak are right (the mistake is in what follows)."""
    parts, expected = _parts(case, got), _schedule(reference_warmup_lr, case)
    upto = parts["warm"] | parts["peak"]
    return bool(_close(got[upto], expected[upto]).all())


def _first_wrong(part: str) -> Callable[[Case, object], dict[str, object] | None]:
    """A predicate for "the <part> is wrong": the first wrong step of that part, as fields for the feedback."""

    def predicate(case: Case, got: object) -> dict[str, object] | None:
        parts, expected = _parts(case, got), _schedule(reference_warmup_lr, case)
        where = parts[part] if part == "decay" else parts["warm"] | parts["peak"]
        wrong = where & ~_close(got, expected)
        if not wrong.any():
            return None
        i = int(wrong.nonzero()[0])
        return {"step": case.info["steps"][i], "got": f"{float(got[i]):.6g}", "expected": f"{float(expected[i]):.6g}"}

    return predicate


def _integer_division(case: Case, got: Tensor) -> bool:
    parts = _parts(case, got)
    return (bool(parts["warm"].any()) and bool((got[parts["warm"]] == 0).all())
            and bool(_close(got[parts["peak"]], torch.full_like(got[parts["peak"]], case.info["b"])).all()))


def _zero_at_step_0(case: Case, got: Tensor) -> bool:
    return case.info["steps"][0] == 0 and float(got[0]) == 0.0


def _rounded(case: Case, got: Tensor) -> dict[str, object] | None:
    """The right schedule rounded to a few decimals: how many."""
    expected = _schedule(reference_warmup_lr, case)
    for k in range(1, 10):
        rounded = torch.round(expected, decimals=k)
        if not torch.equal(rounded, expected) and bool((got - rounded).abs().max() <= 1e-12 * (1 + rounded.abs().max())):
            return {"k": k}
    return None


def _forgets_warmup(case: Case, got: Tensor) -> dict[str, object] | None:
    if not (_fits(lambda s, b, w: b / math.sqrt(s + 1), "decay")(case, got)
            or _fits(lambda s, b, w: b / math.sqrt(s), "decay")(case, got)):
        return None
    first = int(_parts(case, got)["decay"].nonzero()[0])
    return {"first": f"{float(got[first]):.6g}", "step": case.info["steps"][first]}


def _over_peak(case: Case, got: Tensor) -> dict[str, object] | None:
    decay = _parts(case, got)["decay"]
    over = decay & (got > case.info["b"] * (1 + 1e-6))
    if not over.any():
        return None
    i = int(over.nonzero()[0])
    return {"step": case.info["steps"][i], "got": f"{float(got[i]):.6g}"}


def _always(case: Case, got: object) -> dict[str, object] | None:
    return _first_wrong("decay")(case, got) or _first_wrong("warm")(case, got)


#: Tried in order on the first schedule that differs; the earlier schedules were right.
MISTAKES = [
    Mistake("the learning rates are rounded to {k} decimals: the formula is right, the rounding changes the values",
            "return the number as computed (round only when you print it: `f\"{{lr:.6f}}\"`).", looks_like=_rounded),
    Mistake("warmup_steps=1 (no warm-up) is handled differently: at step {step} you give {got}, expected {expected}",
            "no special case is needed: with warmup_steps=1 the formula gives base_lr at step 0 and decays from "
            "step 1, like base_lr / sqrt(step + 1).", looks_like=_always, when=lambda c: c.info["w"] == 1),
    Mistake("your function returns the multiplier of the learning rate, not the rate: it ignores base_lr",
            "multiply by base_lr (with base_lr=2.0 the peak must be 2.0). To use the schedule with LambdaLR, "
            "which wants a multiplier, call it with base_lr=1.0.",
            looks_like=_fits(lambda s, b, w: reference_warmup_lr(s, 1.0, w))),
    Mistake("integer division: the learning rate is 0 for the whole warm-up, then jumps to base_lr",
            "`(step + 1) // warmup_steps` rounds down to 0; divide with `/`, which gives a fraction.",
            looks_like=_integer_division),
    Mistake("the warm-up runs from 0 at step 0 to base_lr at step warmup_steps - 1 (step / (warmup_steps - 1)): "
            "step 0 gets a learning rate of 0, so the first update does nothing",
            "the first update is step 0 (LambdaLR counts that way) and should already move the weights: after step + 1 "
            "updates the warm-up gives base_lr * (step + 1) / warmup_steps, reaching base_lr at step warmup_steps - 1.",
            looks_like=_fits(lambda s, b, w: b * s / (w - 1), "warm"), when=lambda c: c.info["w"] > 1),
    Mistake("step 0 gets a learning rate of 0, so the first update does nothing (and the peak comes a step late): "
            "steps are counted from 1 instead of 0",
            "the first update is step 0 (LambdaLR counts that way): the number of updates made so far is "
            "step + 1, in the warm-up and in the decay.", looks_like=_zero_at_step_0),
    Mistake("the warm-up is not linear: it rises like sqrt((step + 1) / warmup_steps)",
            "during the warm-up the rate is base_lr * (step + 1) / warmup_steps, a straight line.",
            looks_like=_fits(lambda s, b, w: b * math.sqrt((s + 1) / w), "warm")),
    Mistake("the warm-up is wrong: at step {step} you give {got}, expected {expected}",
            "during the warm-up the rate rises linearly from base_lr / warmup_steps at step 0 to base_lr at step "
            f"warmup_steps - 1: {_FORMULA}.", looks_like=_first_wrong("warm"), fallback=True),
    # From here on the warm-up and its peak are right (the mistake above caught the rest).
    Mistake("the warm-up never ends: the learning rate keeps growing past base_lr",
            "take the smaller of the warm-up and the decay, min((step + 1) / warmup_steps, sqrt(warmup_steps / "
            "(step + 1))), so the rate peaks at base_lr and then falls.",
            looks_like=_fits(lambda s, b, w: b * (s + 1) / w, "decay"), fallback=True),
    Mistake("the learning rate never decays: after the warm-up it stays at base_lr",
            "after the warm-up the rate falls like base_lr * sqrt(warmup_steps / (step + 1)).",
            looks_like=_fits(lambda s, b, w: b, "decay")),
    Mistake("the decay is one step late: it uses sqrt(warmup_steps / step), so step warmup_steps repeats the peak",
            "count the updates in the decay too: step + 1 of them have been made at step `step`.",
            looks_like=_fits(lambda s, b, w: b * math.sqrt(w / s), "decay")),
    Mistake("the decay is too fast: it falls like 1 / step, not 1 / sqrt(step)",
            "the decay is an inverse *square root*: compare your decay at step 4 * warmup_steps - 1 with base_lr / 2.",
            looks_like=_fits(lambda s, b, w: b * w / (s + 1), "decay")),
    Mistake("the decay does not continue from the peak: it forgets warmup_steps, so at the end of the warm-up the "
            "rate drops from base_lr = {b:g} to {first} in one step (step {step})",
            "scale the decay so it equals base_lr at step warmup_steps - 1: base_lr * sqrt(warmup_steps / (step + 1)).",
            looks_like=_forgets_warmup),
    Mistake("the decay starts at the wrong step: it restarts from 1 at the end of the warm-up "
            "(base_lr / sqrt(step - warmup_steps + ...)) and so falls much faster than the schedule",
            "the decay is counted from the start of training, not from the end of the warm-up: "
            "base_lr * sqrt(warmup_steps / (step + 1)).",
            looks_like=lambda c, g: (_fits(lambda s, b, w: b / math.sqrt(s - w + 2), "decay")(c, g)
                                     or _fits(lambda s, b, w: b / math.sqrt(s - w + 1), "decay")(c, g))),
    Mistake("the warm-up ends a step late: at step {step} the rate is {got}, above base_lr, before it decays",
            "the warm-up's last step is warmup_steps - 1, where (step + 1) / warmup_steps = 1; switch to the decay "
            "after it (`step < warmup_steps`, not `<=`), or take the min of the two.", looks_like=_over_peak,
            fallback=True),
    Mistake("the decay is wrong: at step {step} you give {got}, expected {expected}",
            f"after the warm-up the rate is base_lr * sqrt(warmup_steps / (step + 1)); all together: {_FORMULA}.",
            looks_like=_first_wrong("decay"), fallback=True),
]


_HINTS = [(r"^ZeroDivisionError", "steps are counted from 0, so at step 0 `warmup_steps / step` divides by zero: use "
           "step + 1, the number of updates made so far, sqrt(warmup_steps / (step + 1)); elsewhere look for a "
           "division by step - something, or by warmup_steps - 1.", "your function divided by zero")]


def check_warmup_lr(fn: Callable[[int, float, int], float]) -> CheckResult:
    """Check a learner's ``warmup_lr(step, base_lr, warmup_steps) -> float`` (exercise 7).

    Runs four schedules (a short warm-up step by step, the paper's 4000-step warm-up, a
    ``base_lr`` above 1, and ``warmup_steps=1``) against :func:`reference_warmup_lr`. Each step is
    one call, judged as a number by the framework (type, finiteness); the values of one schedule
    are then judged together against :data:`MISTAKES`, since most slips show only across steps.
    """
    session = Session(NAME, _HINTS)
    schedules = _schedules()
    for number, schedule in enumerate(schedules, start=1):
        case = schedule.case()
        values = []
        for step in schedule.steps:
            where = f"case {number}/{len(schedules)}: {schedule.description}, step {step}"
            value, failure = session.call(where, fn, {"step": step, **case.args})
            if failure is not None:
                return done(failure)
            got = as_number(value)
            if isinstance(value, Tensor) and value.numel() == 1 and value.dtype in (torch.float32, torch.float16,
                                                                                      torch.bfloat16):
                return done(session.fail(f"returned a {str(value.dtype).removeprefix('torch.')} tensor, expected a "
                                         f"Python float: the rate is rounded to the tensor's precision ({where})",
                                         "return a plain number: `float(...)` (or `math.sqrt` and `min` on floats). "
                                         "The optimizer's param_groups and LambdaLR expect numbers, and a float32 "
                                         "tensor keeps only about 7 digits of the rate."))
            if got is None or not math.isfinite(got):  # the framework names a wrong type; NaN and inf here
                failure = judge(session, where, Case(where, {}), value, reference_warmup_lr(step, **case.args),
                                ("the learning rate",), tol=0.0)
                if got is not None:
                    failure = session.fail(f"returned {got}, expected a finite number ({where})",
                                           "the learning rate must be a finite number; look for a division by zero "
                                           "or a square root of a negative number.")
                return done(failure)
            values.append(got)
        where = f"case {number}/{len(schedules)}: {schedule.description}"
        got_schedule = torch.tensor(values, dtype=torch.float64)
        expected = _reference_schedule(schedule.base_lr, schedule.warmup_steps, schedule.steps)
        failure = judge(session, where, case, got_schedule, expected, ("the learning rates",), MISTAKES, tol=1e-7,
                        steps=_searcher(session, fn, number))
        if failure is not None:
            wrong = ~_close(got_schedule, expected)
            i = int(wrong.nonzero()[0])
            failure.details = [f"first difference: step {schedule.steps[i]}: you give {values[i]:.6g}, "
                               f"expected {float(expected[i]):.6g}",
                               *(d for d in failure.details[1:] if not d.startswith("expected the learning rates"))]
            if number > 1:
                failure.details.append("case 1 passed" if number == 2 else f"cases 1-{number - 1} passed")
            return done(failure)
    total = sum(len(s.steps) for s in schedules)
    return done(passed(session, f"all {total} learning rates in {len(schedules)} schedules match "
                                "(short and long warm-ups, base_lr above 1, no warm-up)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_stepped_cases, _reference_schedule, _schedule_steps)]
