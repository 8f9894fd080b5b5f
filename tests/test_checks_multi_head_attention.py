"""The exercise-4 checks: correct answers written differently pass; each known mistake is named."""

import math

import torch
from checks_learners import REFERENCES, add_fns

from lessons_src.checks.multi_head_attention import (
    check_merge_heads,
    check_multi_head_attention,
    check_multi_head_forward,
    check_split_heads,
)

# -- correct implementations, written differently --------------------------------------------------


def split_view(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)


def split_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3).contiguous()


def split_stack(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)  # (B, H, L, d_k)


def merge_reshape(x):
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)


def merge_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_contiguous_view(x):
    B, H, L, d_k = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(B, L, H * d_k)


def forward_reference(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    q = split_view(w_q(query), num_heads)
    k = split_view(w_k(key), num_heads)
    v = split_view(w_v(value), num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return w_o(merge_reshape(weights @ v)), weights


def forward_einsum(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    """Raw weights and einsum, per-head slices, float64 internally."""
    D = query.size(-1)
    d_k = D // num_heads

    def project(x, linear):
        y = x.double() @ linear.weight.double().T
        return y + linear.bias.double() if linear.bias is not None else y

    q = project(query, w_q).unflatten(-1, (num_heads, d_k))  # (B, L, H, d_k)
    k = project(key, w_k).unflatten(-1, (num_heads, d_k))
    v = project(value, w_v).unflatten(-1, (num_heads, d_k))
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * d_k**-0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    heads = torch.einsum("bhqk,bkhd->bqhd", weights, v).flatten(-2)
    return project(heads, w_o).float(), weights.float()


def forward_library_sdpa(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    from lessons_src import scaled_dot_product_attention

    q, k, v = (split_stack(w(x), num_heads) for w, x in ((w_q, query), (w_k, key), (w_v, value)))
    heads, weights = scaled_dot_product_attention(q, k, v, mask)
    return [w_o(merge_cat(heads)), weights]  # a list is fine too


def test_library_layer_passes():
    from lessons_src import MultiHeadAttention

    def via_library(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
        layer = MultiHeadAttention(query.size(-1), num_heads)
        layer.w_q, layer.w_k, layer.w_v, layer.w_o = w_q, w_k, w_v, w_o
        return layer(query, key, value, mask)

    assert check_multi_head_forward(via_library)


def test_combined_check_passes():
    result = check_multi_head_attention(split_unflatten, merge_cat, forward_reference)
    assert result and "split_heads, merge_heads and multi_head_forward" in str(result), str(result)


# -- known mistakes, each named ----------------------------------------------------------------------


def split_no_transpose(x, num_heads):
    B, L, D = x.shape
    return x.view(B, num_heads, L, D // num_heads)


def split_interleaved(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)


def split_forgets_transpose(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads)


def split_full_width(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D).transpose(1, 2)  # head_dim = d_model: the view fails


def split_copies(x, num_heads):
    return x.unsqueeze(1).expand(-1, num_heads, -1, -1)  # every head gets all of d_model


def split_float_head_dim(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D / num_heads).transpose(1, 2)


def split_stub(x, num_heads):
    raise NotImplementedError


SPLIT_MISTAKES = [
    (split_no_transpose, "reshape without transpose"),
    (split_interleaved, "interleaved"),
    (split_forgets_transpose, "head axis is not moved"),
    (split_full_width, "wrong head dimension"),
    (split_copies, "wrong head dimension"),
    (split_float_head_dim, "integer division"),
    (split_stub, "split_heads: not implemented yet"),
]


def merge_no_transpose(x):
    B, H, L, d_k = x.shape
    return x.reshape(B, L, H * d_k)


def merge_interleaved(x):
    B, H, L, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, H * d_k)


def merge_view_after_transpose(x):
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, H * d_k)


def merge_not_flattened(x):
    return x.transpose(1, 2)


def merge_stub(x):
    raise NotImplementedError


MERGE_MISTAKES = [
    (merge_no_transpose, "without the inverse transpose"),
    (merge_interleaved, "interleaved"),
    (merge_view_after_transpose, "not contiguous"),
    (merge_not_flattened, "not flattened"),
    (merge_stub, "merge_heads: not implemented yet"),
]


def _forward(split=split_view, merge=merge_reshape, scale="d_k", project_out=True, mask_mode="use",
             self_keys=False, average=False, full_width=False):
    """A forward pass with one thing changed."""

    def fn(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
        if self_keys:
            key = value = query
        H = 1 if full_width else num_heads
        q, k, v = split(w_q(query), H), split(w_k(key), H), split(w_v(value), H)
        d = {"d_k": q.size(-1), "d_model": query.size(-1), "none": 1}[scale]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None and mask_mode != "ignore":
            scores = scores.masked_fill(mask if mask_mode == "invert" else ~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = merge(weights @ v)
        out = w_o(out) if project_out else out
        if full_width:
            weights = weights.expand(-1, num_heads, -1, -1)
        return out, weights.mean(1) if average else weights

    return fn


def forward_stub(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    raise NotImplementedError


def forward_no_mask_parameter(query, key, value, w_q, w_k, w_v, w_o, num_heads):
    return forward_reference(query, key, value, w_q, w_k, w_v, w_o, num_heads)


def forward_head_dim_d_model(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    B, L, D = query.shape
    q = w_q(query).view(B, L, num_heads, D).transpose(1, 2)  # head_dim = d_model
    return q, q


def forward_output_only(*args, **kwargs):
    return forward_reference(*args, **kwargs)[0]


def forward_unmerged(*args, **kwargs):
    query, key, value, w_q, w_k, w_v, w_o, num_heads = args
    q, k, v = split_view(w_q(query), num_heads), split_view(w_k(key), num_heads), split_view(w_v(value), num_heads)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1)
    return weights @ v, weights


def forward_scores(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    q, k = split_view(w_q(query), num_heads), split_view(w_k(key), num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return forward_reference(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask)[0], scores


def forward_raises(*args, **kwargs):
    raise RuntimeError("boom")


FORWARD_MISTAKES = [
    (_forward(split=split_no_transpose), "reshape without transpose", "reshape_without_transpose"),
    (_forward(split=split_no_transpose, merge=merge_no_transpose), "reshape without transpose",
     "reshape_without_transpose_both_ways"),
    (_forward(merge=merge_no_transpose), "merged without the inverse transpose", "merge_without_transpose"),
    (_forward(split=split_interleaved, merge=merge_interleaved), "interleaved", "interleaved"),
    (_forward(project_out=False), "output projection w_o is missing", "no_output_projection"),
    (_forward(scale="d_model"), "sqrt(d_model) instead of sqrt(d_k)", "scale_by_sqrt_d_model"),
    (_forward(scale="none"), "not scaled", "not_scaled"),
    (_forward(mask_mode="invert"), "mask is inverted", "mask_inverted"),
    (_forward(mask_mode="ignore"), "mask is ignored", "mask_ignored"),
    (_forward(self_keys=True), "keys come from `query`", "keys_from_query"),
    (_forward(average=True), "one map instead of one per head", "averaged_weights"),
    (_forward(full_width=True), "full d_model width", "one_full_width_head"),
    (forward_head_dim_d_model, "wrong head dimension", "head_dim_is_d_model"),
    (forward_stub, "multi_head_forward: not implemented yet", "stub"),
    (forward_no_mask_parameter, "does not accept `mask=`", "no_mask_parameter"),
    (forward_output_only, "returned one tensor", "output_only"),
    (forward_unmerged, "heads are not merged", "unmerged"),
    (forward_scores, "scores, before the softmax", "scores_not_weights"),
    (forward_raises, "RuntimeError: boom", "raises"),
]


def test_combined_check_reports_the_first_problem():
    result = check_multi_head_attention(split_view, merge_no_transpose, forward_reference)
    assert not result and "merge_heads" in str(result) and "inverse transpose" in str(result)
    result = check_multi_head_attention(split_stub, merge_stub, forward_stub)
    assert not result and "split_heads: not implemented yet" in str(result)
    result = check_multi_head_attention(split_view, merge_reshape, _forward(project_out=False))
    assert not result and "w_o is missing" in str(result)


def test_wrong_return_types_are_feedback():
    assert "expected a tensor" in str(check_split_heads(lambda x, num_heads: "heads"))
    assert "returned None" in str(check_merge_heads(lambda x: None))
    assert "returned None" in str(check_multi_head_forward(lambda *a, **k: None))


CHECK = "check_multi_head_attention"

# == the learner table (checks_learners.py) ==========================================================

REFERENCES[CHECK] = (split_view, merge_reshape, forward_reference)
add_fns(CHECK, (split_unflatten, merge_cat, forward_einsum))
add_fns(CHECK, (split_stack, merge_contiguous_view, forward_library_sdpa))
for _fn, _named in SPLIT_MISTAKES:
    add_fns(CHECK, (_fn, merge_reshape, forward_reference), _named, f"split-{_fn.__name__}")
for _fn, _named in MERGE_MISTAKES:
    add_fns(CHECK, (split_view, _fn, forward_reference), _named, f"merge-{_fn.__name__}")
for _fn, _named, _id in FORWARD_MISTAKES:
    add_fns(CHECK, (split_view, merge_reshape, _fn), _named, f"forward-{_id}")


def _forward_scaled_by(scale):
    def fn(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
        q, k, v = (split_view(w(x), num_heads) for w, x in ((w_q, query), (w_k, key), (w_v, value)))
        scores = q @ k.transpose(-2, -1) / scale(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return w_o(merge_reshape(weights @ v)), weights

    return fn


for _scale, _named, _id in [(lambda d: d ** 1 / 2, "`d_k ** 1/2` is not sqrt(d_k)", "d_k_pow_1_over_2"),
                            (lambda d: 2.0, "divided by 2 instead of sqrt(d_k)", "hard_coded_2"),
                            (lambda d: math.sqrt(8), "divided by 2.828 instead of sqrt(d_k)", "hard_coded_sqrt_8")]:
    add_fns(CHECK, (split_view, merge_reshape, _forward_scaled_by(_scale)), _named, f"forward-{_id}")


def forward_keys_with_w_q(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    return forward_reference(query, key, value, w_q, w_q, w_v, w_o, num_heads, mask)


def forward_log_softmax(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    q, k, v = (split_view(w(x), num_heads) for w, x in ((w_q, query), (w_k, key), (w_v, value)))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.log_softmax(scores, dim=-1)
    return w_o(merge_reshape(weights @ v)), weights


add_fns(CHECK, (split_view, merge_reshape, forward_keys_with_w_q), "keys are projected with w_q")
add_fns(CHECK, (split_view, merge_reshape, forward_log_softmax), "log-softmax")


def forward_scales_w_q_in_place(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    with torch.no_grad():
        w_q.weight /= math.sqrt(query.size(-1) // num_heads)  # folds the scale into the weights, in place
    q, k, v = (split_view(w(x), num_heads) for w, x in ((w_q, query), (w_k, key), (w_v, value)))
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return w_o(merge_reshape(weights @ v)), weights


add_fns(CHECK, (split_view, merge_reshape, forward_scales_w_q_in_place), "changed the weights of `w_q` in place")
