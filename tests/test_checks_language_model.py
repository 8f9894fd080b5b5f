"""Exercise 14's check (next_token_probs): its learners for the table (``checks_learners.py``), right
ones written differently and the usual slips, each of which the check must name."""

import torch
from checks_learners import REFERENCES, add

from lessons_src.checks import check_next_token_probs

CHECK = "check_next_token_probs"


def reference(logits, temperature=1.0, top_k=None):
    scaled = logits / temperature
    if top_k is not None:
        kth = torch.topk(scaled, min(top_k, scaled.size(-1)), dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.softmax(scaled, dim=-1)


REFERENCES[CHECK] = (reference,)


@add(CHECK)
def sorted_threshold_and_logsumexp(logits, temperature=1.0, top_k=None):
    """A threshold from sorting, the softmax through logsumexp, in float64: right."""
    z = logits.double() / temperature
    if top_k is not None and top_k < z.size(-1):
        threshold = z.sort(dim=-1, descending=True).values[..., top_k - 1:top_k]
        z = torch.where(z >= threshold, z, torch.tensor(float("-inf"), dtype=z.dtype))
    return torch.exp(z - torch.logsumexp(z, dim=-1, keepdim=True)).to(logits.dtype)


@add(CHECK)
def renormalised_after_the_softmax(logits, temperature=1.0, top_k=None):
    """Top-k applied to the probabilities, then renormalised: right (the same distribution)."""
    p = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = p.topk(min(top_k, p.size(-1)), dim=-1).values[..., -1:]
        p = torch.where(p >= kth, p, torch.zeros_like(p))
        p = p / p.sum(dim=-1, keepdim=True)
    return p


@add(CHECK, mistake="multiplied by the temperature")
def times_temperature(logits, temperature=1.0, top_k=None):
    return reference(logits * temperature * temperature, temperature, top_k)


@add(CHECK, mistake="the temperature is ignored")
def no_temperature(logits, temperature=1.0, top_k=None):
    return reference(logits, 1.0, top_k)


@add(CHECK, mistake="top_k is ignored")
def no_top_k(logits, temperature=1.0, top_k=None):
    return reference(logits, temperature, None)


@add(CHECK, mistake="does not renormalise")
def zeroed_not_renormalised(logits, temperature=1.0, top_k=None):
    p = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = torch.topk(logits / temperature, min(top_k, p.size(-1)), dim=-1).values[..., -1:]
        p = p.masked_fill(logits / temperature < kth, 0.0)
    return p


@add(CHECK, mistake="sets the other logits to 0, not -inf")
def masked_with_zero(logits, temperature=1.0, top_k=None):
    scaled = logits / temperature
    if top_k is not None:
        kth = torch.topk(scaled, min(top_k, scaled.size(-1)), dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, 0.0)
    return torch.softmax(scaled, dim=-1)


@add(CHECK, mistake="keeps one token too many")
def k_plus_one(logits, temperature=1.0, top_k=None):
    return reference(logits, temperature, None if top_k is None else top_k + 1)


@add(CHECK, mistake="keeps one token too few")
def strictly_greater(logits, temperature=1.0, top_k=None):
    scaled = logits / temperature
    if top_k is not None and top_k < scaled.size(-1):
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled <= kth, float("-inf"))
    return torch.softmax(scaled, dim=-1)


@add(CHECK, mistake="the softmax runs over the wrong dim")
def softmax_dim_zero(logits, temperature=1.0, top_k=None):
    scaled = logits / temperature
    if top_k is not None:
        kth = torch.topk(scaled, min(top_k, scaled.size(-1)), dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.softmax(scaled, dim=0)


@add(CHECK, mistake="NaN or inf")
def plain_exp(logits, temperature=1.0, top_k=None):
    e = torch.exp(logits / temperature)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[..., -1:]
        e = e.masked_fill(logits < kth, 0.0)
    return e / e.sum(dim=-1, keepdim=True)


@add(CHECK, mistake="exactly k")
def topk_indices_drop_ties(logits, temperature=1.0, top_k=None):
    """torch.topk's indices keep exactly k, dropping a tie at the k-th logit."""
    scaled = logits / temperature
    if top_k is not None and top_k < scaled.size(-1):
        keep = torch.zeros_like(scaled, dtype=torch.bool).scatter(-1, scaled.topk(top_k, dim=-1).indices, True)
        scaled = scaled.masked_fill(~keep, float("-inf"))
    return torch.softmax(scaled, dim=-1)


def test_the_reference_and_the_package_pass():
    from lessons_src import next_token_probs

    for fn in (reference, next_token_probs):
        result = check_next_token_probs(fn)
        assert result, str(result)
