"""Exercise 12's check (the online-softmax update): its learners for the table (``checks_learners.py``),
right ones written differently and the usual slips, each of which the check must name."""

import math

import torch
from checks_learners import REFERENCES, add

from lessons_src.checks import check_online_softmax_update

CHECK = "check_online_softmax_update"


def reference(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - shift.unsqueeze(-1))
    return new_max, running_sum * rescale + p.sum(dim=-1), output * rescale.unsqueeze(-1) + p @ value


REFERENCES[CHECK] = (reference,)


# -- right, written differently -------------------------------------------------------------------------


@add(CHECK)
def with_nan_to_num(running_max, running_sum, output, scores, value):
    """Computes exp(-inf - (-inf)) = NaN on empty rows, then zeroes it: right."""
    new_max = torch.max(running_max, scores.max(dim=-1).values)
    rescale = torch.exp(running_max - new_max).nan_to_num(0.0)
    p = torch.exp(scores - new_max[..., None]).nan_to_num(0.0)
    return new_max, running_sum * rescale + p.sum(-1), output * rescale[..., None] + torch.einsum("...qk,...kd->...qd", p, value)


@add(CHECK)
def in_float64_with_logsumexp(running_max, running_sum, output, scores, value):
    """The sum through logsumexp, in float64, returned as float32: right."""
    m_old, s = running_max.double(), scores.double()
    new_max = torch.maximum(m_old, s.amax(-1))
    safe = torch.where(new_max == -math.inf, 0.0, new_max)
    rescale = torch.exp(m_old - safe)
    block_sum = torch.exp(torch.logsumexp(s - safe[..., None], dim=-1))
    p = torch.exp(s - safe[..., None])
    out = output.double() * rescale[..., None] + p @ value.double()
    return new_max.float(), (running_sum.double() * rescale + block_sum).float(), out.float()


@add(CHECK)
def returning_a_list(running_max, running_sum, output, scores, value):
    return list(reference(running_max, running_sum, output, scores, value))


# -- the usual slips --------------------------------------------------------------------------------------


@add(CHECK, mistake="the old sum is not rescaled")
def old_sum_kept(running_max, running_sum, output, scores, value):
    m, _, o = reference(running_max, running_sum, output, scores, value)
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return m, running_sum + torch.exp(scores - shift[..., None]).sum(-1), o


@add(CHECK, mistake="the old output is not rescaled")
def old_output_kept(running_max, running_sum, output, scores, value):
    m, s, _ = reference(running_max, running_sum, output, scores, value)
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return m, s, output + torch.exp(scores - shift[..., None]) @ value


@add(CHECK, mistake="neither the old sum nor the old output is rescaled")
def nothing_rescaled(running_max, running_sum, output, scores, value):
    m = torch.maximum(running_max, scores.amax(-1))
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(scores - shift[..., None])
    return m, running_sum + p.sum(-1), output + p @ value


@add(CHECK, mistake="the sign is reversed")
def factor_upside_down(running_max, running_sum, output, scores, value):
    m = torch.maximum(running_max, scores.amax(-1))
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    rescale = torch.exp(shift - running_max).nan_to_num(0.0, posinf=0.0)
    p = torch.exp(scores - shift[..., None])
    return m, running_sum * rescale + p.sum(-1), output * rescale[..., None] + p @ value


@add(CHECK, mistake="against the old maximum")
def block_against_old_max(running_max, running_sum, output, scores, value):
    m = torch.maximum(running_max, scores.amax(-1))
    old = torch.where(torch.isinf(running_max), torch.zeros_like(running_max), running_max)
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - old[..., None])
    return m, running_sum * rescale + p.sum(-1), output * rescale[..., None] + p @ value


@add(CHECK, mistake="the running maximum is the block's maximum only")
def forgets_the_old_max(running_max, running_sum, output, scores, value):
    m = scores.amax(-1)
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - shift[..., None])
    return m, running_sum * rescale + p.sum(-1), output * rescale[..., None] + p @ value


@add(CHECK, mistake="not taken relative to the running maximum")
def plain_exponentials(running_max, running_sum, output, scores, value):
    p = torch.exp(scores)
    return torch.maximum(running_max, scores.amax(-1)), running_sum + p.sum(-1), output + p @ value


@add(CHECK, mistake="the output is divided by the sum")
def normalised_output(running_max, running_sum, output, scores, value):
    m, s, o = reference(running_max, running_sum, output, scores, value)
    return m, s, o / torch.where(s > 0, s, 1.0)[..., None]


@add(CHECK, mistake="at step 'subtract 0 instead of -inf on those rows': it is left out")
def no_guard_for_empty_rows(running_max, running_sum, output, scores, value):
    m = torch.maximum(running_max, scores.amax(-1))
    rescale = torch.exp(running_max - m)
    p = torch.exp(scores - m[..., None])
    return m, running_sum * rescale + p.sum(-1), output * rescale[..., None] + p @ value


@add(CHECK, mistake="not over the keys of each query")
def one_max_for_the_block(running_max, running_sum, output, scores, value):
    """`scores.max()` without a dim: one maximum for the whole block."""
    m = torch.maximum(running_max, scores.max())
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - shift[..., None])
    return m, running_sum * rescale + p.sum(-1), output * rescale[..., None] + p @ value


@add(CHECK, mistake="returned a tuple of 2 items")
def forgets_the_max(running_max, running_sum, output, scores, value):
    return reference(running_max, running_sum, output, scores, value)[1:]


@add(CHECK, mistake="your function raised RuntimeError")
def einsum_for_unbatched_values(running_max, running_sum, output, scores, value):
    """Reads `value` as (Bc, d_v) in einsum, which the chapter's batched values are not."""
    m = torch.maximum(running_max, scores.amax(-1))
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - shift[..., None])
    return m, running_sum * rescale + p.sum(-1), output * rescale[..., None] + torch.einsum("...qk,kd->...qd", p, value)


def test_values_with_batch_axes_are_checked_and_the_hint_says_how():
    result = check_online_softmax_update(einsum_for_unbatched_values)
    assert not result and "case 3/5" in str(result).splitlines()[0], str(result)
    assert "...qk,...kd->...qd" in str(result), str(result)


def test_the_reference_and_the_package_pass():
    from lessons_src import online_softmax_update

    for fn in (reference, online_softmax_update):
        result = check_online_softmax_update(fn)
        assert result, str(result)
        assert "all 5 cases" in str(result)


def test_the_first_line_names_the_case_and_the_fix_is_concrete():
    result = check_online_softmax_update(old_sum_kept)
    first = str(result).splitlines()[0]
    assert first.startswith("FAIL") and "case 1/5" in first, first
    assert "exp(old max - new max)" in result.hint
