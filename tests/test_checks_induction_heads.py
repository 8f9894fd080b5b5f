"""Exercise 15's check (induction_score): its learners for the table (``checks_learners.py``), right
ones written differently and the usual slips, each of which the check must name."""

import torch
from checks_learners import REFERENCES, add

from lessons_src.checks import check_induction_score

CHECK = "check_induction_score"


def reference(weights, half_len):
    stripe = weights.diagonal(offset=-(half_len - 1), dim1=-2, dim2=-1)  # w[b, h, i, i - T + 1]
    return stripe[..., 1:].mean(dim=(0, -1))


REFERENCES[CHECK] = (reference,)


@add(CHECK)
def with_a_loop(weights, half_len):
    B, H, L, _ = weights.shape
    total = torch.zeros(H, dtype=weights.dtype)
    for i in range(half_len, L):
        total += weights[:, :, i, i - half_len + 1].sum(dim=0)
    return total / (B * half_len)


@add(CHECK)
def with_index_tensors(weights, half_len):
    queries = torch.arange(half_len, 2 * half_len)
    return weights[:, :, queries, queries - half_len + 1].mean(dim=(0, 2))


@add(CHECK, mistake="the previous occurrence itself")
def previous_occurrence(weights, half_len):
    queries = torch.arange(half_len, 2 * half_len)
    return weights[:, :, queries, queries - half_len].mean(dim=(0, 2))


@add(CHECK, mistake="one token too far")
def two_after(weights, half_len):
    queries = torch.arange(half_len, 2 * half_len)
    return weights[:, :, queries, queries - half_len + 2].mean(dim=(0, 2))


@add(CHECK, mistake="queries from the first half are counted")
def from_t_minus_one(weights, half_len):
    return weights.diagonal(offset=-(half_len - 1), dim1=-2, dim2=-1).mean(dim=(0, -1))


@add(CHECK, mistake="summed, not averaged")
def summed(weights, half_len):
    return reference(weights, half_len) * half_len * weights.size(0)


@add(CHECK, mistake="has shape ()")
def averaged_over_heads(weights, half_len):
    return reference(weights, half_len).mean()


@add(CHECK, mistake="has shape (2, 4), expected (4,)")
def not_averaged_over_the_batch(weights, half_len):
    return weights.diagonal(offset=-(half_len - 1), dim1=-2, dim2=-1)[..., 1:].mean(dim=-1)


@add(CHECK, mistake="scores differs from the reference")
def previous_token_score_instead(weights, half_len):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))


def test_the_reference_and_the_package_pass():
    from lessons_src import induction_score

    for fn in (reference, induction_score):
        result = check_induction_score(fn)
        assert result, str(result)
