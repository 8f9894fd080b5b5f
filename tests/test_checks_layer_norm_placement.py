"""The warm-up schedule check (exercise 7): correct schedules written differently pass; each slip is named."""

import math

import numpy as np
import pytest
import torch
from checks_learners import REFERENCES, add

from lessons_src.checks.layer_norm_placement import check_warmup_lr, reference_warmup_lr

CHECK = "check_warmup_lr"

# -- correct implementations, written differently ---------------------------------------------------


def with_min(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


def with_branches(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * (warmup_steps / (step + 1)) ** 0.5


def noam_form(step, base_lr, warmup_steps):
    # "Attention Is All You Need": d_model^-0.5 * min(n^-0.5, n * warmup^-1.5), peak rescaled to base_lr.
    n = step + 1
    return base_lr * math.sqrt(warmup_steps) * min(n**-0.5, n * warmup_steps**-1.5)


def as_tensor(step, base_lr, warmup_steps):
    n = torch.tensor(step + 1, dtype=torch.float64)
    return base_lr * torch.minimum(n / warmup_steps, torch.sqrt(warmup_steps / n))


def as_numpy(step, base_lr, warmup_steps):
    n = np.float64(step + 1)
    return base_lr * np.minimum(n / warmup_steps, np.sqrt(warmup_steps / n))


REFERENCES[CHECK] = (as_tensor,)
add(CHECK)(with_min)
add(CHECK)(with_branches)
add(CHECK)(noam_form)
add(CHECK)(as_numpy)
add(CHECK)(reference_warmup_lr)


def test_reference_values():
    assert reference_warmup_lr(0, 0.01, 10) == pytest.approx(0.001)
    assert reference_warmup_lr(9, 0.01, 10) == pytest.approx(0.01)  # the peak, at step warmup_steps - 1
    assert reference_warmup_lr(39, 0.01, 10) == pytest.approx(0.005)  # sqrt(10 / 40) = 1/2
    assert reference_warmup_lr(0, 0.5, 1) == pytest.approx(0.5)


# -- known mistakes, each named ----------------------------------------------------------------------


def multiplier_only(step, base_lr, warmup_steps):
    return min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


def integer_division(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) // warmup_steps, math.sqrt(warmup_steps / (step + 1)))


def counts_from_one(step, base_lr, warmup_steps):
    return base_lr * min(step / warmup_steps, math.sqrt(warmup_steps / max(step, 1)))


def divides_by_zero(step, base_lr, warmup_steps):
    return base_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))


def sqrt_warmup(step, base_lr, warmup_steps):
    return base_lr * min(math.sqrt((step + 1) / warmup_steps), math.sqrt(warmup_steps / (step + 1)))


def never_ends(step, base_lr, warmup_steps):
    return base_lr * (step + 1) / warmup_steps


def no_decay(step, base_lr, warmup_steps):
    return base_lr * min(1.0, (step + 1) / warmup_steps)


def decay_one_step_late(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / step)


def decay_too_fast(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, warmup_steps / (step + 1))


def decay_forgets_warmup(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr / math.sqrt(step + 1)


def decay_restarts(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr / math.sqrt(step - warmup_steps + 2)


def warmup_one_step_too_long(step, base_lr, warmup_steps):
    if step <= warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / (step + 1))


def special_cases_no_warmup(step, base_lr, warmup_steps):
    if warmup_steps <= 1:
        return base_lr
    return with_min(step, base_lr, warmup_steps)


def warmup_off_target(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / (warmup_steps + 1), math.sqrt(warmup_steps / (step + 1)))


def decay_wrong_power(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, (warmup_steps / (step + 1)) ** 0.75)


def returns_none(step, base_lr, warmup_steps):
    base_lr * min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


def returns_string(step, base_lr, warmup_steps):
    return "0.001"


def returns_vector(step, base_lr, warmup_steps):
    return torch.full((3,), with_min(step, base_lr, warmup_steps))


def returns_nan(step, base_lr, warmup_steps):
    return float("nan")


def stub(step, base_lr, warmup_steps):
    raise NotImplementedError


def raises_runtime_error(step, base_lr, warmup_steps):
    raise RuntimeError("boom")


def wrong_signature(step, warmup_steps):
    return with_min(step, 1.0, warmup_steps)


add(CHECK, "multiplier of the learning rate, not the rate")(multiplier_only)
add(CHECK, "integer division")(integer_division)
add(CHECK, "step 0 gets a learning rate of 0")(counts_from_one)
add(CHECK, "divided by zero")(divides_by_zero)
add(CHECK, "warm-up is not linear")(sqrt_warmup)
add(CHECK, "at step 'the smaller of the warm-up and the decay': it is left out")(never_ends)
add(CHECK, "never decays")(no_decay)
add(CHECK, "decay is one step late")(decay_one_step_late)
add(CHECK, "decay is too fast")(decay_too_fast)
add(CHECK, "does not continue from the peak")(decay_forgets_warmup)
add(CHECK, "decay starts at the wrong step")(decay_restarts)
add(CHECK, "warm-up ends a step late")(warmup_one_step_too_long)
add(CHECK, "warmup_steps=1 (no warm-up) is handled differently")(special_cases_no_warmup)
add(CHECK, "the warm-up is wrong")(warmup_off_target)
add(CHECK, "the decay is wrong")(decay_wrong_power)
add(CHECK, "returned None")(returns_none)
add(CHECK, "expected a number")(returns_string)
add(CHECK, "expected a number")(returns_vector)
add(CHECK, "finite")(returns_nan)
add(CHECK, "not implemented yet")(stub)
add(CHECK, "RuntimeError: boom")(raises_runtime_error)
add(CHECK, "TypeError")(wrong_signature)


@add(CHECK, "returned inf")
def huge_int(step, base_lr, warmup_steps):
    return 10 ** 400  # too large for a float: no OverflowError, a wrong answer


@add(CHECK, "complex")
def complex_tensor(step, base_lr, warmup_steps):
    return torch.tensor(with_min(step, base_lr, warmup_steps) + 0j)  # 0-d complex


@add(CHECK, "expected a number")
def python_complex(step, base_lr, warmup_steps):
    return (base_lr * min((step + 1) / warmup_steps, (warmup_steps / (step + 1)))) ** 0.5 * (-1) ** 0.5


def test_divide_by_zero_hint_says_step_plus_one():
    assert "step + 1" in check_warmup_lr(divides_by_zero).hint


def test_failure_shows_the_first_difference():
    result = check_warmup_lr(no_decay)
    assert any("first difference" in d and "step 10" in d for d in result.details), result.details


@add(CHECK)
def as_numpy_float32(step, base_lr, warmup_steps):
    return np.float32(with_min(step, base_lr, warmup_steps)) if base_lr < 1 else with_min(step, base_lr, warmup_steps)
