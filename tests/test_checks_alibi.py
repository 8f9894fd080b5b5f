"""Exercise 13's check (ALiBi's biases): its learners for the table (``checks_learners.py``), right ones
written differently and the usual slips, each of which the check must name."""

import math

import numpy as np
import torch
from checks_learners import REFERENCES, add

from lessons_src.checks import check_alibi_bias

CHECK = "check_alibi_bias"


def paper_powers(n):
    return [2 ** (-8 * (h + 1) / n) for h in range(n)]


def slopes(num_heads, powers=paper_powers, extra=slice(0, None, 2)):
    """The paper's slopes; a learner's slip is a different rule for a power of 2 (``powers``) or a
    different pick (``extra``) of twice that power's slopes."""
    if math.log2(num_heads).is_integer():
        return powers(num_heads)
    below = 2 ** math.floor(math.log2(num_heads))
    return powers(below) + powers(2 * below)[extra][: num_heads - below]


def biases(m, len_q, len_k, shift=0):
    """-m_h * (p_i - j) for slopes ``m``, the queries at the last len_q positions (moved by ``shift``)."""
    query_pos = torch.arange(len_k - len_q, len_k) + shift
    distance = (query_pos[:, None] - torch.arange(len_k)[None, :]).float()
    return -torch.tensor(m)[:, None, None] * distance


def reference(num_heads, len_q, len_k):
    return biases(slopes(num_heads), len_q, len_k)


REFERENCES[CHECK] = (reference,)


# -- right, written differently -------------------------------------------------------------------------


@add(CHECK)
def symmetric_distance(num_heads, len_q, len_k):
    """-m |i - j|: differs only above the diagonal, which a causal mask hides: right."""
    query_pos = torch.arange(len_k - len_q, len_k)
    distance = (query_pos[:, None] - torch.arange(len_k)[None, :]).abs().float()
    return -torch.tensor(slopes(num_heads))[:, None, None] * distance


@add(CHECK)
def with_numpy_and_minus_inf_above(num_heads, len_q, len_k):
    """In NumPy, float64, with -inf for the future keys: right."""
    i = np.arange(len_k - len_q, len_k)[:, None]
    j = np.arange(len_k)[None, :]
    m = np.array(slopes(num_heads))[:, None, None]
    bias = np.where(j <= i, -m * (i - j), -np.inf)
    return torch.from_numpy(bias)


@add(CHECK)
def slopes_by_recursion_in_logs(num_heads, len_q, len_k):
    """The slopes as 2 ** exponents, the biases by broadcasting the last rows of the full matrix: right."""
    def exponents(n):
        if n & (n - 1) == 0:
            return [-8 * (h + 1) / n for h in range(n)]
        below = 1 << (n.bit_length() - 1)
        return exponents(below) + exponents(2 * below)[0::2][: n - below]

    m = 2.0 ** torch.tensor(exponents(num_heads), dtype=torch.float64)
    full = torch.arange(len_k)[:, None] - torch.arange(len_k)[None, :]  # (Lk, Lk)
    return (-m[:, None, None] * full[-len_q:]).float()


# -- the usual slips --------------------------------------------------------------------------------------


@add(CHECK, mistake="its sign is reversed")
def plus_bias(num_heads, len_q, len_k):
    return -reference(num_heads, len_q, len_k)


@add(CHECK, mistake="the queries are placed at the first positions")
def top_left(num_heads, len_q, len_k):
    distance = (torch.arange(len_q)[:, None] - torch.arange(len_k)[None, :]).float()
    return -torch.tensor(slopes(num_heads))[:, None, None] * distance


@add(CHECK, mistake="the slopes are in reverse order")
def reversed_slopes(num_heads, len_q, len_k):
    return reference(num_heads, len_q, len_k).flip(0)


@add(CHECK, mistake="whatever the number of heads")
def halves_always(num_heads, len_q, len_k):
    query_pos = torch.arange(len_k - len_q, len_k)
    distance = (query_pos[:, None] - torch.arange(len_k)[None, :]).float()
    m = torch.tensor([2.0 ** -(h + 1) for h in range(num_heads)])
    return -m[:, None, None] * distance


@add(CHECK, mistake="for H not a power of 2, the slopes are 2^(-8h/H) for every head")
def one_rule_for_all(num_heads, len_q, len_k):
    query_pos = torch.arange(len_k - len_q, len_k)
    distance = (query_pos[:, None] - torch.arange(len_k)[None, :]).float()
    m = torch.tensor([2 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)])
    return -m[:, None, None] * distance


@add(CHECK, mistake="the slope exponent is off by one")
def exponent_from_zero(num_heads, len_q, len_k):  # h from 0: head 0 gets slope 1
    return biases(slopes(num_heads, powers=lambda n: [2 ** (-8 * h / n) for h in range(n)]), len_q, len_k)


@add(CHECK, mistake="the 8 is missing from the exponent")
def no_eight(num_heads, len_q, len_k):
    return biases(slopes(num_heads, powers=lambda n: [2 ** (-(h + 1) / n) for h in range(n)]), len_q, len_k)


@add(CHECK, mistake="the 2nd, 4th, ... of twice the power")
def odd_ordinals_read_as_indices(num_heads, len_q, len_k):
    return biases(slopes(num_heads, extra=slice(1, None, 2)), len_q, len_k)


@add(CHECK, mistake="the queries are one position too late")
def queries_one_late(num_heads, len_q, len_k):
    return biases(slopes(num_heads), len_q, len_k, shift=1)


@add(CHECK, mistake="the queries are one position too early")
def queries_one_early(num_heads, len_q, len_k):
    return biases(slopes(num_heads), len_q, len_k, shift=-1)


@add(CHECK, mistake="another order (sorted)")
def sorted_slopes(num_heads, len_q, len_k):
    query_pos = torch.arange(len_k - len_q, len_k)
    distance = (query_pos[:, None] - torch.arange(len_k)[None, :]).float()
    m = torch.tensor(sorted(slopes(num_heads), reverse=True))
    return -m[:, None, None] * distance


@add(CHECK, mistake="has shape (5, 5), expected (8, 5, 5)")
def one_head_only(num_heads, len_q, len_k):
    return reference(num_heads, len_q, len_k)[0]


@add(CHECK, mistake="dtype torch.int64")
def integer_distances(num_heads, len_q, len_k):
    query_pos = torch.arange(len_k - len_q, len_k)
    return -(query_pos[:, None] - torch.arange(len_k)[None, :]).expand(num_heads, len_q, len_k)


def test_the_reference_and_the_package_pass():
    from lessons_src import alibi_bias

    for fn in (reference, alibi_bias):
        result = check_alibi_bias(fn)
        assert result, str(result)
        assert "all 7 cases" in str(result)


def test_the_decoding_step_is_named_with_its_case():
    result = check_alibi_bias(top_left)
    first = str(result).splitlines()[0]
    assert "case 4/7" in first and "decoding step" in first, first
