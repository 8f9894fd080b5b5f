"""Exercise 17's check (absorbed MLA scores): its learners for the table (``checks_learners.py``), right ones
written differently and the usual slips, each of which the check must name."""

import math

import torch
from checks_learners import REFERENCES, add

from lessons_src import absorbed_scores, apply_rope, rope_frequencies
from lessons_src.checks import check_absorbed_scores

CHECK = "check_absorbed_scores"


def _rotate(query_rope, position):
    cos, sin = rope_frequencies(query_rope.size(-1), position + 1)
    return apply_rope(query_rope.unsqueeze(-2), cos, sin, position).squeeze(-2)  # (B, H, d_R)


def reference(query_nope, query_rope, latent, rope_key, w_uk):
    q_latent = torch.einsum("bhk,hkc->bhc", query_nope, w_uk)  # (B, H, d_c)
    q_rope = _rotate(query_rope, latent.size(1) - 1)
    scale = math.sqrt(query_nope.size(-1) + query_rope.size(-1))
    return (q_latent @ latent.transpose(1, 2) + q_rope @ rope_key.transpose(1, 2)) / scale


REFERENCES[CHECK] = (reference,)


@add(CHECK)
def projected_up(query_nope, query_rope, latent, rope_key, w_uk):
    """The plain form: build every head's keys from the latent, then score (what the absorption must equal)."""
    B, H, d_k = query_nope.shape
    keys = torch.einsum("btc,hkc->bhtk", latent, w_uk)  # (B, H, L_k, d_k)
    keys = torch.cat([keys, rope_key.unsqueeze(1).expand(B, H, -1, -1)], dim=-1)  # (B, H, L_k, d_k + d_R)
    query = torch.cat([query_nope, _rotate(query_rope, latent.size(1) - 1)], dim=-1)  # (B, H, d_k + d_R)
    return (keys @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(query.size(-1))


@add(CHECK)
def through_the_library_in_float64(query_nope, query_rope, latent, rope_key, w_uk):
    q_rope = _rotate(query_rope.double(), latent.size(1) - 1)
    scores = absorbed_scores(query_nope.double().unsqueeze(2), q_rope.unsqueeze(2), latent.double(),
                             rope_key.double(), w_uk.double())  # (B, H, 1, L_k)
    return scores.squeeze(2).float()


@add(CHECK)
def head_by_head(query_nope, query_rope, latent, rope_key, w_uk):
    q_rope = _rotate(query_rope, latent.size(1) - 1)
    scale = (query_nope.size(-1) + query_rope.size(-1)) ** -0.5
    heads = [(query_nope[:, h] @ w_uk[h]).unsqueeze(1) @ latent.transpose(1, 2) for h in range(w_uk.size(0))]
    return (torch.cat(heads, dim=1) + q_rope @ rope_key.transpose(1, 2)) * scale


@add(CHECK, mistake="divided by sqrt(d_k), the width of the content part only")
def content_scale(query_nope, query_rope, latent, rope_key, w_uk):
    return reference(query_nope, query_rope, latent, rope_key, w_uk) * math.sqrt(
        (query_nope.size(-1) + query_rope.size(-1)) / query_nope.size(-1))


@add(CHECK, mistake="the rotary part is left out")
def no_rope(query_nope, query_rope, latent, rope_key, w_uk):
    q_latent = torch.einsum("bhk,hkc->bhc", query_nope, w_uk)
    return q_latent @ latent.transpose(1, 2) / math.sqrt(query_nope.size(-1) + query_rope.size(-1))


@add(CHECK, mistake="is not rotated")
def unrotated_query(query_nope, query_rope, latent, rope_key, w_uk):
    q_latent = torch.einsum("bhk,hkc->bhc", query_nope, w_uk)
    scale = math.sqrt(query_nope.size(-1) + query_rope.size(-1))
    return (q_latent @ latent.transpose(1, 2) + query_rope @ rope_key.transpose(1, 2)) / scale


@add(CHECK, mistake="position L_k instead of L_k - 1")
def off_by_one(query_nope, query_rope, latent, rope_key, w_uk):
    q_latent = torch.einsum("bhk,hkc->bhc", query_nope, w_uk)
    scale = math.sqrt(query_nope.size(-1) + query_rope.size(-1))
    return (q_latent @ latent.transpose(1, 2) + _rotate(query_rope, latent.size(1)) @ rope_key.transpose(1, 2)) / scale


@add(CHECK, mistake="rotated a second time")
def keys_rotated_again(query_nope, query_rope, latent, rope_key, w_uk):
    cos, sin = rope_frequencies(rope_key.size(-1), rope_key.size(1))
    return reference(query_nope, query_rope, latent, apply_rope(rope_key, cos, sin), w_uk)


@add(CHECK, mistake="every head uses head 0's W_UK")
def one_head_matrix(query_nope, query_rope, latent, rope_key, w_uk):
    return reference(query_nope, query_rope, latent, rope_key, w_uk[:1].expand_as(w_uk))


@add(CHECK, mistake="a softmax was applied")
def weights_not_scores(query_nope, query_rope, latent, rope_key, w_uk):
    return reference(query_nope, query_rope, latent, rope_key, w_uk).softmax(dim=-1)


@add(CHECK, mistake="a shape mismatch")
def transposed_w_uk(query_nope, query_rope, latent, rope_key, w_uk):
    q_latent = torch.einsum("bhk,hck->bhc", query_nope, w_uk)  # w_uk read as (H, d_c, d_k)
    return q_latent @ latent.transpose(1, 2)


def test_the_reference_equals_the_projected_up_scores():
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 7, generator=g),
            torch.randn(2, 5, 6, generator=g), torch.randn(3, 4, 7, generator=g))
    torch.testing.assert_close(reference(*args), projected_up(*args))
    assert check_absorbed_scores(projected_up)


@add(CHECK, mistake="rotated at position L_k - 2 instead of L_k - 1")
def rotated_one_position_early(query_nope, query_rope, latent, rope_key, w_uk):
    """A blind learner's slip (the newest token counted out of the cache): position L_k - 2."""
    q_latent = torch.einsum("bhk,hkc->bhc", query_nope, w_uk)  # (B, H, d_c)
    q_rope = _rotate(query_rope, max(latent.size(1) - 2, 0))
    scale = math.sqrt(query_nope.size(-1) + query_rope.size(-1))
    return (q_latent @ latent.transpose(1, 2) + q_rope @ rope_key.transpose(1, 2)) / scale
