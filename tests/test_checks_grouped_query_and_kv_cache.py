"""The grouped-query attention checks (exercise 10): correct answers written differently pass;
each named mistake is named."""

import math

import torch
import torch.nn.functional as F
from checks_learners import REFERENCES, add_fns

from lessons_src import scaled_dot_product_attention
from lessons_src.checks.grouped_query_and_kv_cache import check_attend_with_cache, check_expand_kv

# -- expand_kv: correct implementations, written differently -----------------------------------------


def with_repeat_interleave(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=1)


def with_expand_and_reshape(kv, num_heads):
    B, num_kv_heads, L, head_dim = kv.shape
    group = num_heads // num_kv_heads
    return kv[:, :, None].expand(B, num_kv_heads, group, L, head_dim).reshape(B, num_heads, L, head_dim)


def with_index(kv, num_heads):
    heads = torch.arange(num_heads) // (num_heads // kv.size(1))
    return kv[:, heads]


def with_loop(kv, num_heads):
    group = num_heads // kv.size(1)
    return torch.stack([kv[:, h // group] for h in range(num_heads)], dim=1)


def in_float64(kv, num_heads):
    return with_index(kv.double(), num_heads).to(kv.dtype)


# -- expand_kv: known mistakes ------------------------------------------------------------------------


def with_repeat(kv, num_heads):
    return kv.repeat(1, num_heads // kv.size(1), 1, 1)


def with_expand_wrong_order(kv, num_heads):
    B, num_kv_heads, L, head_dim = kv.shape
    group = num_heads // num_kv_heads
    return kv[:, None].expand(B, group, num_kv_heads, L, head_dim).reshape(B, num_heads, L, head_dim)


def on_batch_dim(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=0)


def on_sequence_dim(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=2)


def on_feature_dim(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=-1)


def by_num_heads(kv, num_heads):
    return kv.repeat_interleave(num_heads, dim=1)


def reversed_heads(kv, num_heads):
    return with_repeat_interleave(kv, num_heads).flip(1)


def scaled(kv, num_heads):
    return with_repeat_interleave(kv, num_heads) / (num_heads // kv.size(1))


def with_view(kv, num_heads):
    B, num_kv_heads, L, head_dim = kv.shape
    group = num_heads // num_kv_heads
    flat = kv.view(B * num_kv_heads, L, head_dim)
    return flat[:, None].expand(-1, group, -1, -1).reshape(B, num_heads, L, head_dim)


def returns_list(kv, num_heads):
    return with_repeat_interleave(kv, num_heads).tolist()


def stub(kv, num_heads):
    raise NotImplementedError


EXPAND_MISTAKES = [
    (with_repeat, "h % H_kv"),
    (with_expand_wrong_order, "h % H_kv"),
    (on_batch_dim, "dim 0 (the batch)"),
    (on_sequence_dim, "dim 2 (the sequence)"),
    (on_feature_dim, "last dim (the features)"),
    (by_num_heads, "repeated num_heads times"),
    (reversed_heads, "not in the right order"),
    (scaled, "its result is divided by 4 (the result of 'the group size"),
    (with_view, "not contiguous"),
    (returns_list, "returned a list"),
    (stub, "not implemented yet"),
]


def test_expand_kv_shows_which_heads_were_used():
    assert "query heads got KV heads [0, 1, 0, 1, 0, 1, 0, 1], expected [0, 0, 0, 0, 1, 1, 1, 1]" in str(
        check_expand_kv(with_repeat)
    )


# -- attend_with_cache: correct implementations -------------------------------------------------------


def step_reference(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_cache, key_new], dim=2)
    value_cache = torch.cat([value_cache, value_new], dim=2)
    num_heads = query.size(1)
    k, v = with_repeat_interleave(key_cache, num_heads), with_repeat_interleave(value_cache, num_heads)
    weights = torch.softmax(query @ k.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)
    return weights @ v, key_cache, value_cache


def step_with_sdpa_gqa(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=-2)
    value_cache = torch.cat((value_cache, value_new), dim=-2)
    output = F.scaled_dot_product_attention(query, key_cache, value_cache, enable_gqa=True)
    return output, key_cache, value_cache


def step_with_library_and_einsum(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_cache, key_new], 2)
    value_cache = torch.cat([value_cache, value_new], 2)
    group = query.size(1) // key_cache.size(1)
    q = query.unflatten(1, (key_cache.size(1), group))  # (B, H_kv, g, 1, d): no expansion at all
    scores = torch.einsum("bhgqd,bhkd->bhgqk", q, key_cache) / math.sqrt(query.size(-1))
    output = torch.einsum("bhgqk,bhkd->bhgqd", scores.softmax(-1), value_cache).flatten(1, 2)
    assert torch.allclose(output, scaled_dot_product_attention(
        query, with_index(key_cache, query.size(1)), with_index(value_cache, query.size(1)))[0], atol=1e-5)
    return output, key_cache, value_cache


def step_returns_list(*args):
    return list(step_reference(*args))


# -- attend_with_cache: known mistakes ----------------------------------------------------------------


def _attend(query, key, value, scale=None):
    num_heads = query.size(1)
    k, v = with_repeat_interleave(key, num_heads), with_repeat_interleave(value, num_heads)
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    return torch.softmax(query @ k.transpose(-2, -1) * scale, dim=-1) @ v


def cat_on_heads(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_cache, key_new], dim=1)
    value_cache = torch.cat([value_cache, value_new], dim=1)
    return _attend(query, key_cache, value_cache), key_cache, value_cache


def cat_on_features(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_cache, key_new], dim=-1)
    value_cache = torch.cat([value_cache, value_new], dim=-1)
    return _attend(query, key_cache, value_cache), key_cache, value_cache


def cat_on_batch(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_cache, key_new], dim=0)
    value_cache = torch.cat([value_cache, value_new], dim=0)
    return _attend(query, key_cache, value_cache), key_cache, value_cache


def prepends(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_new, key_cache], dim=2)
    value_cache = torch.cat([value_new, value_cache], dim=2)
    return _attend(query, key_cache, value_cache), key_cache, value_cache


def forgets_to_return_update(query, key_cache, value_cache, key_new, value_new):
    output, _, _ = step_reference(query, key_cache, value_cache, key_new, value_new)
    return output, key_cache, value_cache


def swaps_caches(query, key_cache, value_cache, key_new, value_new):
    output, key_cache, value_cache = step_reference(query, key_cache, value_cache, key_new, value_new)
    return output, value_cache, key_cache


def caches_expanded(query, key_cache, value_cache, key_new, value_new):
    output, key_cache, value_cache = step_reference(query, key_cache, value_cache, key_new, value_new)
    num_heads = query.size(1)
    return output, with_repeat_interleave(key_cache, num_heads), with_repeat_interleave(value_cache, num_heads)


def uses_repeat(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_cache, key_new], dim=2)
    value_cache = torch.cat([value_cache, value_new], dim=2)
    k, v = with_repeat(key_cache, query.size(1)), with_repeat(value_cache, query.size(1))
    output = torch.softmax(query @ k.transpose(-2, -1) / math.sqrt(query.size(-1)), -1) @ v
    return output, key_cache, value_cache


def unscaled(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_cache, key_new], dim=2)
    value_cache = torch.cat([value_cache, value_new], dim=2)
    return _attend(query, key_cache, value_cache, scale=1.0), key_cache, value_cache


def attends_before_appending(query, key_cache, value_cache, key_new, value_new):
    output = _attend(query, key_cache, value_cache)
    return output, torch.cat([key_cache, key_new], dim=2), torch.cat([value_cache, value_new], dim=2)


def top_left_causal(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat([key_cache, key_new], dim=2)
    value_cache = torch.cat([value_cache, value_new], dim=2)
    output = F.scaled_dot_product_attention(query, key_cache, value_cache, is_causal=True, enable_gqa=True)
    return output, key_cache, value_cache


def output_only(query, key_cache, value_cache, key_new, value_new):
    return step_reference(query, key_cache, value_cache, key_new, value_new)[0]


def step_stub(query, key_cache, value_cache, key_new, value_new):
    raise NotImplementedError


STEP_MISTAKES = [
    (cat_on_heads, "appended along dim 1"),
    (cat_on_features, "appended along dim 3"),
    (cat_on_batch, "appended along dim 0"),
    (prepends, "put in front of the cache"),
    (forgets_to_return_update, "was not updated with the new token"),
    (swaps_caches, "wrong order"),
    (caches_expanded, "holds the expanded keys/values"),
    (uses_repeat, "h % H_kv"),
    (unscaled, "not scaled"),
    (attends_before_appending, "does not attend to its own key and value"),
    (top_left_causal, "attends only to the first key"),
    (output_only, "expected a tuple (output, key_cache, value_cache)"),
    (step_stub, "not implemented yet"),
]


def test_an_unrecognised_step_mistake_still_gets_feedback():
    def off_by_a_bit(*args):
        output, key_cache, value_cache = step_reference(*args)
        return output + 0.01, key_cache, value_cache

    result = check_attend_with_cache(off_by_a_bit)
    assert not result and "output differs" in str(result) and "largest difference" in str(result)


EXPAND, STEP = "check_expand_kv", "check_attend_with_cache"

# == the learner table (checks_learners.py) ==========================================================

REFERENCES[EXPAND] = (with_repeat_interleave,)
for _fn in (with_expand_and_reshape, with_index, with_loop, in_float64):
    add_fns(EXPAND, (_fn,))
for _fn, _named in EXPAND_MISTAKES:
    add_fns(EXPAND, (_fn,), _named)
REFERENCES[STEP] = (step_reference,)
for _fn in (step_with_sdpa_gqa, step_with_library_and_einsum, step_returns_list):
    add_fns(STEP, (_fn,))
for _fn, _named in STEP_MISTAKES:
    add_fns(STEP, (_fn,), _named)
