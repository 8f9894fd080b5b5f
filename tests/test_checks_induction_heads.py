"""Exercise 15's check (prefix_matching_score): its learners for the table (``checks_learners.py``), right
ones written differently and the usual slips, each of which the check must name; and the cases, which
must tell every mistake in the table from the right answer."""

import torch
from checks_learners import REFERENCES, add

from lessons_src import induction_score
from lessons_src.checks import check_prefix_matching_score
from lessons_src.checks.induction_heads import MISTAKES, _cases, _reference

CHECK = "check_prefix_matching_score"


def reference(weights, tokens):
    B, L = tokens.shape
    after_earlier = torch.zeros(B, L, L, dtype=torch.bool)
    after_earlier[:, :, 1:] = tokens[:, :, None] == tokens[:, None, :-1]  # token k - 1 is the query's token
    after_earlier &= torch.ones(L, L, dtype=torch.bool).tril()  # k <= i
    counted = after_earlier.any(dim=-1)  # (B, L)
    per_query = (weights * after_earlier[:, None]).sum(dim=-1)  # (B, H, L)
    return per_query.transpose(0, 1)[:, counted].mean(dim=-1)  # (H,)


REFERENCES[CHECK] = (reference,)


@add(CHECK)
def with_loops(weights, tokens):
    B, H, L, _ = weights.shape
    total, count = torch.zeros(H, dtype=torch.float64), 0
    for b in range(B):
        seq = tokens[b].tolist()
        for i in range(L):
            keys = [k for k in range(1, i + 1) if seq[k - 1] == seq[i]]
            if keys:
                total += weights[b, :, i, keys].double().sum(dim=-1)
                count += 1
    return total / count


@add(CHECK)
def with_einsum_and_a_roll(weights, tokens):
    L = tokens.size(1)
    before = torch.roll(tokens, 1, dims=1)  # before[b, k] = tokens[b, k - 1], wrapped at k = 0
    keys = (tokens[:, :, None] == before[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril()
    keys[:, :, 0] = False  # key 0 has no token before it
    counted = keys.any(dim=-1)
    per_query = torch.einsum("bhik,bik->hbi", weights.double(), keys.double())
    return per_query[:, counted].sum(dim=-1) / counted.sum()


@add(CHECK)
def with_a_masked_mean(weights, tokens):
    shifted = torch.nn.functional.pad(tokens[:, :-1], (1, 0), value=-1)  # -1 before the first token: no match
    keys = (tokens[:, :, None] == shifted[:, None, :]).tril()
    per_query = weights.mul(keys.unsqueeze(1)).sum(-1)
    counted = keys.any(-1).unsqueeze(1).expand_as(per_query)
    return per_query.masked_fill(~counted, 0).sum(dim=(0, 2)) / counted[:, 0].sum()


def _keys(tokens, offset=1, strict=False, wrap=False, causal=True):
    L = tokens.size(1)
    shifted = torch.roll(tokens, offset, dims=1)
    keys = tokens[:, :, None] == shifted[:, None, :]
    if not wrap:
        k = torch.arange(L)
        keys &= ((k - offset >= 0) & (k - offset < L))[None, None]
    if causal:
        keys &= torch.ones(L, L, dtype=torch.bool).tril(-1 if strict else 0)
    return keys


def _mean_over(weights, keys, counted):
    per_query = (weights * keys[:, None]).sum(-1)
    return per_query.transpose(0, 1)[:, counted].mean(-1)


@add(CHECK, mistake="the earlier occurrences themselves")
def the_occurrence_itself(weights, tokens):
    keys = _keys(tokens, 0, strict=True)
    return _mean_over(weights, keys, keys.any(-1))


@add(CHECK, mistake="token two after each earlier occurrence")
def two_after(weights, tokens):
    keys = _keys(tokens, 2)
    return _mean_over(weights, keys, keys.any(-1))


@add(CHECK, mistake="the query's own position is left out")
def strictly_before_the_query(weights, tokens):
    keys = _keys(tokens, 1, strict=True)
    return _mean_over(weights, keys, keys.any(-1))


@add(CHECK, mistake="torch.roll wrapped the sequence around")
def rolled_without_care(weights, tokens):
    keys = _keys(tokens, 1, wrap=True)
    return _mean_over(weights, keys, keys.any(-1))


@add(CHECK, mistake="queries whose token never occurred before are averaged in")
def every_query(weights, tokens):
    return (weights * _keys(tokens)[:, None]).sum(-1).mean(dim=(0, 2))


@add(CHECK, mistake="keys after the query are in the mask")
def no_causal_bound(weights, tokens):
    keys = _keys(tokens, causal=False)
    return _mean_over(weights, keys, keys.any(-1))


@add(CHECK, mistake="averaged, not summed")
def mean_over_the_keys(weights, tokens):
    keys = _keys(tokens)
    per_query = (weights * keys[:, None]).sum(-1) / keys.sum(-1).clamp(min=1)[:, None]
    return per_query.transpose(0, 1)[:, keys.any(-1)].mean(-1)


@add(CHECK, mistake="each sequence is averaged first")
def mean_of_sequence_means(weights, tokens):
    keys = _keys(tokens)
    counted = keys.any(-1)
    per_query = (weights * keys[:, None]).sum(-1)
    per_sequence = (per_query * counted[:, None]).sum(-1) / counted.sum(-1, keepdim=True)
    return per_sequence.nanmean(dim=0)


@add(CHECK, mistake="gives 0 / 0 = NaN")
def mean_of_sequence_means_with_nan(weights, tokens):
    keys = _keys(tokens)
    counted = keys.any(-1)
    per_query = (weights * keys[:, None]).sum(-1)
    return ((per_query * counted[:, None]).sum(-1) / counted.sum(-1, keepdim=True)).mean(dim=0)


@add(CHECK, mistake="the chapter's induction_score")
def the_chapter_formula(weights, tokens):
    return induction_score(weights, tokens.size(1) // 2)


@add(CHECK, mistake="has shape ()")
def averaged_over_heads(weights, tokens):
    return reference(weights, tokens).mean()


@add(CHECK, mistake="has shape (2, 4), expected (4,)")
def one_score_per_sequence(weights, tokens):
    keys = _keys(tokens)
    per_query = (weights * keys[:, None]).sum(-1)
    return per_query.mean(-1)


def test_the_reference_passes():
    result = check_prefix_matching_score(reference)
    assert result, str(result)


def test_the_cases_tell_every_mistake_from_the_right_answer():
    """Each mistake of the table differs from the reference on at least one case (else it could never be named)."""
    cases = _cases()
    for mistake in MISTAKES:
        if mistake.mistaken is None:
            continue
        differs = []
        for case in cases:
            if mistake.when is not None and not mistake.when(case):
                continue
            try:
                wrong = mistake.mistaken(**case.args)
            except Exception:  # does not apply to this case
                continue
            right = _reference(**case.args)
            differs.append(not torch.allclose(wrong, right, atol=1e-4, equal_nan=False))
        assert any(differs), f"no case tells this mistake from the right answer: {mistake.name}"


def test_on_a_repeated_sequence_of_distinct_tokens_it_is_the_chapter_score():
    """The case the exercise names: repeats after T of T distinct tokens give lessons_src.induction_score."""
    T = 6
    first = torch.randperm(10, generator=torch.Generator().manual_seed(0))[:T]
    tokens = torch.cat([first, first])[None].repeat(3, 1)  # (3, 2T)
    scores = torch.randn(3, 2, 2 * T, 2 * T).masked_fill(~torch.ones(2 * T, 2 * T, dtype=torch.bool).tril(), -torch.inf)
    weights = scores.softmax(dim=-1)
    torch.testing.assert_close(_reference(weights, tokens), induction_score(weights, T))


def test_planted_heads_score_as_their_kind():
    """The first case's planted heads: 1 for the prefix-matching head, low for the others."""
    scores = _reference(**_cases()[0].args)
    assert abs(scores[0].item() - 1.0) < 1e-6, scores
    assert scores[1] < 0.6 and scores[2] < 0.6, scores
