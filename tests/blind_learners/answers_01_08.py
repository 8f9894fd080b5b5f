"""Blind learner answers for exercises 01-08, written from the exercise text alone.

Each entry of ANSWERS: exercise, check, name, intent, right (bool), fns (the arguments the
exercise's last cell passes to the check, in order). The learner functions are plain
module-level Python with torch, as a learner would write them in the notebook.
"""

import math

import torch
import torch.nn.functional as F

from lessons_src import causal_mask, merge_heads, padding_mask, split_heads

ANSWERS = []


def _add(exercise, check, name, intent, right, *fns, borderline=False):
    ANSWERS.append(
        {"exercise": exercise, "check": check, "name": name, "intent": intent, "right": right, "fns": tuple(fns),
         "borderline": borderline}
    )


# =====================================================================================
# Exercise 1: attention from scratch, a bug hunt  ->  check_scaled_dot_product_attention
# The handed-out code has four bugs: transpose(0, 1), masked_fill(mask, ...), softmax dim=-2,
# mask.any(dim=-2). Learners "fix" them in their own ways.
# =====================================================================================
EX1, CK1 = "01_attention_from_scratch", "check_scaled_dot_product_attention"


def e1_key_T(query, key, value, mask=None):
    # transpose "fixed" with .T (fine in 2-D, reverses every dim of a batched key)
    d_k = query.size(-1)
    scores = query @ key.T / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "key.T", "replaced transpose(0, 1) by key.T, which reverses all dims of a batched key", False, e1_key_T)


def e1_transpose_1_2(query, key, value, mask=None):
    # transpose(1, 2): right for (B, L, d) only
    d_k = query.size(-1)
    scores = query @ key.transpose(1, 2) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "transpose(1,2)", "fixed the transpose as transpose(1, 2), right only for 3-D (B, L, d) keys", False, e1_transpose_1_2)


def e1_softmax_dim1(query, key, value, mask=None):
    # softmax over dim=1: the last dim for a single 2-D sequence, the query dim for a batch
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "softmax-dim1", "softmax over dim=1 (right for 2-D, the query axis once there is a batch dim)", False, e1_softmax_dim1)


def e1_fill_zero(query, key, value, mask=None):
    # masked scores set to 0 instead of -inf: masked keys still get weight
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "fill-0-not-inf", "'fixed' the mask line by filling 0.0 instead of -inf at masked scores", False, e1_fill_zero)


def e1_any_no_keepdim(query, key, value, mask=None):
    # any(dim=-1) without keepdim: (.., Lq) broadcasts against the key axis
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "any-no-keepdim", "empty-row fix with mask.any(dim=-1) but dropped keepdim=True, so it lines up with keys", False, e1_any_no_keepdim)


def e1_empty_before_softmax(query, key, value, mask=None):
    # zeroes the empty row's *scores* before the softmax -> uniform weights, not zero
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        scores = scores.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    weights = torch.softmax(scores, dim=-1)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "empty-row-before-softmax", "moved the empty-row fix before the softmax (zero scores -> uniform weights, not zero)", False, e1_empty_before_softmax)


def e1_all_instead_any(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.all(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "all-instead-of-any", "empty-row fix with mask.all(dim=-1) instead of any: zeroes every row with one masked key", False, e1_all_instead_any)


def e1_output_before_fix(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    output = weights @ value  # computed before the NaN row is cleaned
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return output, weights


_add(EX1, CK1, "output-before-nan-fix", "computes output = weights @ value before zeroing the empty row, so the output keeps the NaN", False, e1_output_before_fix)


def e1_swapped_return(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return weights, output


_add(EX1, CK1, "return-swapped", "all four bugs fixed but returns (weights, output)", False, e1_swapped_return)


def e1_bool_index(query, key, value, mask=None):
    # in-place boolean indexing instead of masked_fill: breaks as soon as the mask broadcasts
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores[~mask] = float("-inf")
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "bool-index-assign", "masks with scores[~mask] = -inf, which needs the mask to have the scores' full shape", False, e1_bool_index)


def e1_scale_dv(query, key, value, mask=None):
    # "d_k" taken from the value (learner thought the scale line was a bug too)
    d_k = value.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "scale-by-d_v", "changed d_k = query.size(-1) to value.size(-1): scales by sqrt(d_v)", False, e1_scale_dv)


def e1_inverted_empty_fix(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(mask.any(dim=-1, keepdim=True), 0.0)  # forgot the ~
    output = weights @ value
    return output, weights


_add(EX1, CK1, "empty-fix-inverted", "empty-row fix without the ~: zeroes every row that has a key and leaves NaN in the empty one", False, e1_inverted_empty_fix)


def e1_global_max(query, key, value, mask=None):
    # hand-written softmax stabilised with the max of the whole tensor
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.max())
    weights = e / e.sum(dim=-1, keepdim=True)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "global-max-softmax", "hand-written softmax stabilised with scores.max() over the whole tensor, not per row (underflows when row maxima are far apart)", False, e1_global_max)


def e1_permute(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.permute(0, 2, 1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "permute-0-2-1", "fixed the transpose with key.permute(0, 2, 1), right for 3-D only", False, e1_permute)


def e1_partial_two_fixes(query, key, value, mask=None):
    # fixed the transpose and the softmax axis, not the mask nor the empty row yet
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "partial-2-of-4", "partial fix: transpose and softmax axis fixed, mask polarity and empty-row axis not", False, e1_partial_two_fixes)


def e1_nan_to_num_but_dim(query, key, value, mask=None):
    # uses nan_to_num for the empty row (fine) but keeps the old any(dim=-2) line as well
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "right-nan_to_num-kept-dim-2", "right (by luck): cleans NaN with nan_to_num and left the any(dim=-2) line, which only zeroes weights that are already 0", True, e1_nan_to_num_but_dim)


def e1_precedence(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / d_k ** 1 / 2  # "sqrt" written as ** 1/2
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "pow-1/2-precedence", "replaced math.sqrt(d_k) by d_k ** 1 / 2, which is d_k / 2", False, e1_precedence)


def e1_right_log_mask(query, key, value, mask=None):
    # additive mask: log(1) = 0, log(0) = -inf; NaN rows cleaned with nan_to_num
    d_k = query.size(-1)
    scores = query @ key.mT / math.sqrt(d_k)
    if mask is not None:
        scores = scores + mask.float().log()
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "right-additive-log-mask", "right: key.mT, additive mask log(mask), nan_to_num for empty rows", True, e1_right_log_mask)


def e1_right_einsum64(query, key, value, mask=None):
    print("shapes", tuple(query.shape), tuple(key.shape), tuple(value.shape))
    q, k, v = query.double(), key.double(), value.double()
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -1e9)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # zeroes masked keys, hence whole empty rows
    output = torch.einsum("...qk,...kd->...qd", weights, v)
    return output.to(query.dtype), weights.to(query.dtype)


_add(EX1, CK1, "right-einsum-float64", "right: einsum in float64, -1e9 fill then zero masked weights, cast back, with prints", True, e1_right_einsum64)


# =====================================================================================
# Exercise 2: scaling and temperature  ->  check_attention_weights
# =====================================================================================
EX2, CK2 = "02_scaling", "check_attention_weights"


def e2_no_scale_default(query, key, temperature=None):
    scores = query @ key.transpose(-2, -1)
    if temperature is not None:
        scores = scores / temperature
    return torch.softmax(scores, dim=-1)


_add(EX2, CK2, "no-scale-when-None", "divides by temperature when given, but forgets sqrt(d_k) when temperature is None", False, e2_no_scale_default)


def e2_sqrt_dim1(query, key, temperature=None):
    tau = math.sqrt(query.shape[1]) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "sqrt-shape[1]", "d_k read as query.shape[1] (right for 2-D, Lq or H once batched)", False, e2_sqrt_dim1)


def e2_temp_times_sqrt(query, key, temperature=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if temperature is not None:
        scores = scores / temperature  # temperature on top of the standard scaling
    return torch.softmax(scores, dim=-1)


_add(EX2, CK2, "temp-on-top-of-sqrt", "always divides by sqrt(d_k) and divides again by the temperature", False, e2_temp_times_sqrt)


def e2_sqrt_of_temp(query, key, temperature=None):
    tau = query.size(-1) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(tau), dim=-1)


_add(EX2, CK2, "sqrt-of-temperature", "tau = d_k or temperature, then divides by sqrt(tau): right for None, sqrt(temperature) otherwise", False, e2_sqrt_of_temp)


def e2_mul_temp(query, key, temperature=None):
    d_k = query.size(-1)
    if temperature is None:
        scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    else:
        scores = query @ key.transpose(-2, -1) * temperature
    return torch.softmax(scores, dim=-1)


_add(EX2, CK2, "multiply-by-temperature", "multiplies the scores by the temperature instead of dividing", False, e2_mul_temp)


def e2_naive_softmax(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = query @ key.transpose(-2, -1) / tau
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)


_add(EX2, CK2, "unstable-softmax", "hand-written softmax without subtracting the row max: overflows at small temperatures", False, e2_naive_softmax)


def e2_global_max(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = query @ key.transpose(-2, -1) / tau
    e = torch.exp(scores - scores.max())
    return e / e.sum(dim=-1, keepdim=True)


_add(EX2, CK2, "global-max-softmax", "hand-written softmax stabilised with the max over the whole tensor (rows far below it underflow to 0/0)", False, e2_global_max)


def e2_clamp(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = (query @ key.transpose(-2, -1) / tau).clamp(-20.0, 20.0)  # "avoid overflow"
    return torch.softmax(scores, dim=-1)


_add(EX2, CK2, "clamp-scores", "clamps the scores to [-20, 20] to avoid overflow, which changes sharp softmaxes", False, e2_clamp)


def e2_scale_weights(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    weights = torch.softmax(query @ key.transpose(-2, -1), dim=-1)
    return weights / tau


_add(EX2, CK2, "scale-after-softmax", "divides the weights by tau after the softmax instead of the scores before", False, e2_scale_weights)


def e2_hardcoded_8(query, key, temperature=None):
    tau = 8.0 if temperature is None else temperature  # sqrt(64), as in the paper
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "hardcoded-sqrt64", "hard-codes tau = 8 = sqrt(64) from the paper's d_k", False, e2_hardcoded_8)


def e2_both_scaled(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    return torch.softmax((query / tau) @ (key / tau).transpose(-2, -1), dim=-1)


_add(EX2, CK2, "q-and-k-both-divided", "divides both query and key by tau, so the scores are divided by tau squared", False, e2_both_scaled)


def e2_softmax_dim_minus2(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-2)


_add(EX2, CK2, "softmax-over-queries", "softmax over dim=-2 (the queries)", False, e2_softmax_dim_minus2)


def e2_float64_out(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = query @ key.transpose(-2, -1) / tau
    return torch.softmax(scores, dim=-1, dtype=torch.float64)  # "more precise"


_add(EX2, CK2, "returns-float64", "softmax with dtype=torch.float64 for precision, returned without casting back", False, e2_float64_out,
     borderline=True)


def e2_precedence(query, key, temperature=None):
    tau = query.shape[-1] ** 1 / 2 if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "pow-1/2-precedence", "sqrt written as d_k ** 1 / 2, i.e. d_k / 2", False, e2_precedence)


def e2_max_no_keepdim(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = query @ key.transpose(-2, -1) / tau
    scores = scores - scores.max(dim=-1).values  # stabilise; keepdim forgotten
    e = scores.exp()
    return e / e.sum(dim=-1, keepdim=True)


_add(EX2, CK2, "row-max-no-keepdim", "subtracts scores.max(dim=-1).values without keepdim: the row maxima line up with the keys", False, e2_max_no_keepdim)


def e2_truthy_temp(query, key, temperature=None):
    d_k = query.size(-1)
    tau = math.sqrt(d_k)
    if temperature:
        tau = temperature / math.sqrt(d_k)  # "relative" temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "temperature-relative-to-sqrt", "reads temperature as relative to sqrt(d_k): divides by temperature/sqrt(d_k)", False, e2_truthy_temp)


def e2_sqrt_dk_plus1(query, key, temperature=None):
    # learner remembers "the variance of the dot product is d_k" but adds a bias term
    tau = math.sqrt(query.size(-1) + 1) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "sqrt(d_k+1)", "scale sqrt(d_k + 1) instead of sqrt(d_k)", False, e2_sqrt_dk_plus1)


def e2_right_split_scale(query, key, temperature=None):
    tau = math.sqrt(query.shape[-1]) if temperature is None else float(temperature)
    s = tau ** 0.5
    scores = (query / s) @ (key / s).mT
    return torch.log_softmax(scores, dim=-1).exp()


_add(EX2, CK2, "right-split-scale-logsoftmax", "right: divides q and k each by sqrt(tau), log_softmax().exp()", True, e2_right_split_scale)


def e2_right_einsum64(query, key, temperature=None):
    d_k = query.shape[-1]
    tau = d_k ** 0.5 if temperature is None else temperature
    scores = torch.einsum("...id,...jd->...ij", query.double(), key.double()) / tau
    scores = scores - scores.amax(dim=-1, keepdim=True)
    w = scores.exp()
    w = w / w.sum(dim=-1, keepdim=True)
    return w.to(query.dtype)


_add(EX2, CK2, "right-einsum-float64", "right: einsum in float64, per-row max, cast back", True, e2_right_einsum64)


# =====================================================================================
# Exercise 3, part 1: masks  ->  check_masks(make_causal_mask, make_padding_mask, combine_masks)
# =====================================================================================
EX3, CK3 = "03_masking", "check_masks"


def c_ok(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))


def p_ok(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


def m_ok(padding, causal):
    return padding[:, None, :] & causal[None, :, :]


def c_triu(seq_len):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool))


_add(EX3, CK3, "causal-triu", "causal mask with triu instead of tril (keys after the query)", False, c_triu, p_ok, m_ok)


def c_strict(seq_len):
    i = torch.arange(seq_len)
    return i[:, None] > i[None, :]


_add(EX3, CK3, "causal-strict-gt", "causal mask as i > j: a position cannot see itself", False, c_strict, p_ok, m_ok)


def c_float(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len))


_add(EX3, CK3, "causal-float", "torch.tril(torch.ones(L, L)) left as float", False, c_float, p_ok, m_ok)


def c_ignore_convention(seq_len):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)


_add(EX3, CK3, "causal-True-means-ignore", "causal mask in nn.MultiheadAttention's convention (True = blocked)", False, c_ignore_convention, p_ok, m_ok)


def c_hardcoded4(seq_len):
    base = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    return base[:seq_len, :seq_len]


_add(EX3, CK3, "causal-hardcoded-4x4", "copied the 4x4 example and slices it: wrong for seq_len > 4", False, c_hardcoded4, p_ok, m_ok)


def p_le(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]


_add(EX3, CK3, "padding-le", "padding mask with j <= lengths[b] (one real token too many)", False, c_ok, p_le, m_ok)


def p_max_length(lengths, max_len):
    L = int(lengths.max())
    return torch.arange(L)[None, :] < lengths[:, None]


_add(EX3, CK3, "padding-ignores-max_len", "padding mask as wide as the longest length, ignoring max_len", False, c_ok, p_max_length, m_ok)


def p_transposed(lengths, max_len):
    return torch.arange(max_len)[:, None] < lengths[None, :]


_add(EX3, CK3, "padding-transposed", "padding mask of shape (max_len, B): the unsqueezes swapped", False, c_ok, p_transposed, m_ok)


def p_loop_float(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return mask


_add(EX3, CK3, "padding-loop-float", "python loop filling a torch.zeros float tensor with 1s", False, c_ok, p_loop_float, m_ok)


def p_loop_last(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        mask[b, : lengths[b] - 1] = True  # "index of the last real token"
        mask[b, lengths[b] - 1] = True
    return mask


_add(EX3, CK3, "padding-loop-last-index", "marks up to index lengths[b]-1, which wraps round for a length 0 (whole row True)", False, c_ok, p_loop_last, m_ok)


def m_query_axis(padding, causal):
    return padding[:, :, None] & causal


_add(EX3, CK3, "combine-query-axis", "padding on the query axis (B, L, 1) instead of the keys", False, c_ok, p_ok, m_query_axis)


def m_or(padding, causal):
    return padding.unsqueeze(1) | causal.unsqueeze(0)


_add(EX3, CK3, "combine-or", "combines the masks with | instead of &", False, c_ok, p_ok, m_or)


def m_both_axes(padding, causal):
    return padding[:, None, :] & padding[:, :, None] & causal


_add(EX3, CK3, "combine-pad-queries-too", "also hides the padding queries' rows (padding on both axes)", False, c_ok, p_ok, m_both_axes)


def m_no_unsqueeze(padding, causal):
    return padding & causal


_add(EX3, CK3, "combine-no-unsqueeze", "padding & causal without a new axis: (B, L) broadcast against (L, L)", False, c_ok, p_ok, m_no_unsqueeze)


def m_float_product(padding, causal):
    return padding.float().unsqueeze(1) * causal.float()


_add(EX3, CK3, "combine-float-product", "multiplies the masks as floats, returns a float mask", False, c_ok, p_ok, m_float_product)


def m_causal_T(padding, causal):
    return padding.unsqueeze(1) & causal.T


_add(EX3, CK3, "combine-causal-T", "transposes the causal mask when combining ('keys on rows')", False, c_ok, p_ok, m_causal_T)


def c_right_cmp(seq_len):
    j = torch.arange(seq_len)
    return j.unsqueeze(0) <= j.unsqueeze(1)


def p_right_loop(lengths, max_len):
    mask = torch.ones(lengths.shape[0], max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        mask[b, n:] = False
    return mask


def m_right_einsum(padding, causal):
    return torch.einsum("bj,ij->bij", padding.int(), causal.int()).bool()


_add(EX3, CK3, "right-cmp-loop-einsum", "right: comparison causal, python-loop padding, einsum combine", True, c_right_cmp, p_right_loop, m_right_einsum)


def c_right_ones(seq_len):
    return torch.ones(seq_len, seq_len).tril().bool()


def p_right_expand(lengths, max_len):
    pos = torch.arange(max_len).expand(len(lengths), max_len)
    return pos < lengths.view(-1, 1)


def m_right_expand(padding, causal):
    B, L = padding.shape
    return torch.logical_and(padding.view(B, 1, L).expand(B, L, L), causal.expand(B, L, L))


_add(EX3, CK3, "right-expand", "right: float tril then .bool(), expand-based padding and combine", True, c_right_ones, p_right_expand, m_right_expand)


# =====================================================================================
# Exercise 3, part 2: packed documents  ->  check_document_causal_mask
# =====================================================================================
CK3B = "check_document_causal_mask"


def d_same_only(doc_ids):
    return doc_ids[:, :, None] == doc_ids[:, None, :]


_add(EX3, CK3B, "same-doc-only", "only the same-document condition, no causal condition", False, d_same_only)


def d_causal_only(doc_ids):
    B, L = doc_ids.shape
    return torch.tril(torch.ones(L, L, dtype=torch.bool)).expand(B, L, L)


_add(EX3, CK3B, "causal-only", "only the causal triangle, documents ignored", False, d_causal_only)


def d_strict(doc_ids):
    L = doc_ids.shape[1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool), diagonal=-1)
    return same & causal


_add(EX3, CK3B, "strict-causal", "causal condition j < i (tril diagonal=-1): no position sees itself", False, d_strict)


def d_le_ids(doc_ids):
    L = doc_ids.shape[1]
    earlier_or_same = doc_ids[:, None, :] <= doc_ids[:, :, None]  # key's doc not after the query's
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    return earlier_or_same & causal


_add(EX3, CK3B, "doc-le-instead-of-eq", "compares ids with <= (key's document not after the query's) instead of ==", False, d_le_ids)


def d_first_row(doc_ids):
    B, L = doc_ids.shape
    ids = doc_ids[0]
    same = ids[:, None] == ids[None, :]
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    return (same & causal).unsqueeze(0).repeat(B, 1, 1)


_add(EX3, CK3B, "first-row-for-all", "builds the mask from doc_ids[0] and repeats it for every row", False, d_first_row)


def d_bad_broadcast(doc_ids):
    L = doc_ids.shape[1]
    same = doc_ids.unsqueeze(-1) == doc_ids  # (B, L, 1) vs (B, L)
    return same & torch.tril(torch.ones(L, L, dtype=torch.bool))


_add(EX3, CK3B, "broadcast-missing-axis", "compares doc_ids.unsqueeze(-1) with doc_ids (B, L): the batch lines up with the queries", False, d_bad_broadcast)


def d_triu(doc_ids):
    L = doc_ids.shape[1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    return same & torch.triu(torch.ones(L, L, dtype=torch.bool))


_add(EX3, CK3B, "triu", "triu instead of tril: each token sees the later tokens of its document", False, d_triu)


def d_or(doc_ids):
    L = doc_ids.shape[1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    return same | torch.tril(torch.ones(L, L, dtype=torch.bool))


_add(EX3, CK3B, "or-instead-of-and", "combines the two conditions with | instead of &", False, d_or)


def d_L_from_B(doc_ids):
    n = doc_ids.size(0)  # thought size(0) was the length
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    return same & torch.tril(torch.ones(n, n, dtype=torch.bool))


_add(EX3, CK3B, "L-from-size0", "causal triangle sized by doc_ids.size(0) (the batch) instead of size(1)", False, d_L_from_B)


def d_float(doc_ids):
    L = doc_ids.shape[1]
    same = (doc_ids[:, :, None] == doc_ids[:, None, :]).float()
    return same * torch.tril(torch.ones(L, L))


_add(EX3, CK3B, "float-product", "multiplies float masks: right pattern, float dtype", False, d_float)


def d_inverted(doc_ids):
    L = doc_ids.shape[1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    return ~(same & torch.tril(torch.ones(L, L, dtype=torch.bool)))


_add(EX3, CK3B, "inverted", "returns the blocked positions (True = ignore)", False, d_inverted)


def d_tril_plus1(doc_ids):
    L = doc_ids.shape[1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    return same & torch.tril(torch.ones(L, L, dtype=torch.bool), diagonal=1)


_add(EX3, CK3B, "tril-diag+1", "tril(diagonal=1): each token also sees the next one", False, d_tril_plus1)


def d_ids_from_zero(doc_ids):
    # builds block lengths with bincount, assuming ids are 0..n-1 and using the *total* count
    B, L = doc_ids.shape
    out = torch.zeros(B, L, L, dtype=torch.bool)
    for b in range(B):
        counts = torch.bincount(doc_ids[b] - doc_ids[b, 0])
        start = 0
        for n in counts.tolist():
            out[b, start : start + n, start : start + n] = True  # forgot the triangle inside the block
            start += n
    return out


_add(EX3, CK3B, "blocks-without-triangle", "block-diagonal via bincount per document, but full blocks (no causal triangle)", False, d_ids_from_zero)


def d_last_row_missing(doc_ids):
    B, L = doc_ids.shape
    out = torch.zeros(B, L, L, dtype=torch.bool)
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    for b in range(B - 1):  # off by one
        out[b] = (doc_ids[b][:, None] == doc_ids[b][None, :]) & causal
    return out


_add(EX3, CK3B, "loop-skips-last-row", "per-row loop over range(B - 1): the last row of the batch stays all False", False, d_last_row_missing)


def d_right_blockdiag(doc_ids):
    masks = []
    for row in doc_ids:
        _, counts = torch.unique_consecutive(row, return_counts=True)
        blocks = [torch.tril(torch.ones(n, n, dtype=torch.bool)) for n in counts.tolist()]
        masks.append(torch.block_diag(*blocks))
    return torch.stack(masks)


_add(EX3, CK3B, "right-block-diag", "right: unique_consecutive + block_diag of per-document triangles", True, d_right_blockdiag)


def d_right_diff(doc_ids):
    L = doc_ids.size(-1)
    pos = torch.arange(L, device=doc_ids.device)
    same = (doc_ids.unsqueeze(2) - doc_ids.unsqueeze(1)) == 0
    causal = pos.view(1, L, 1) >= pos.view(1, 1, L)
    print("mask shape", tuple((same & causal).shape))
    return torch.logical_and(same, causal)


_add(EX3, CK3B, "right-difference", "right: id difference == 0 and position comparison, with a print", True, d_right_diff)


# =====================================================================================
# Exercise 4: per-head contributions  ->  check_head_contributions
# =====================================================================================
EX4, CK4 = "04_multi_head_attention", "check_head_contributions"


def _heads(x, attention, mask):
    """the heads' outputs (B, H, L, d_k), from the module's own weights"""
    H = attention.num_heads
    _, w = attention(x, x, x, mask)
    v = split_heads(attention.w_v(x), H)
    return w @ v


def h_bias_each(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    heads = _heads(x, attention, mask)
    out = []
    for h in range(H):
        padded = torch.zeros(B, L, D)
        padded[..., h * d_k : (h + 1) * d_k] = heads[:, h]
        out.append(attention.w_o(padded))  # bias comes with every head
    return torch.stack(out, dim=1)


_add(EX4, CK4, "bias-in-every-head", "zero-pads each head and calls w_o, so b_O is in every contribution", False, h_bias_each)


def h_bias_over_H(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    heads = _heads(x, attention, mask)
    W = attention.w_o.weight
    contrib = torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=1)
    if attention.w_o.bias is not None:
        contrib = contrib + attention.w_o.bias / H  # share the bias fairly
    return contrib


_add(EX4, CK4, "bias-split-over-H", "adds b_O / H to each head's contribution", False, h_bias_over_H)


def h_row_blocks(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    heads = _heads(x, attention, mask)
    W = attention.w_o.weight  # (out, in)
    contrib = [heads[:, h] @ W[h * d_k : (h + 1) * d_k, :] for h in range(H)]  # rows, not columns
    return torch.stack(contrib, dim=1)


_add(EX4, CK4, "W_O-row-blocks", "cuts w_o.weight into row blocks (output dim) instead of column blocks", False, h_row_blocks)


def h_no_mask(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    heads = _heads(x, attention, None)  # forgot to pass the mask on
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=1)


_add(EX4, CK4, "mask-not-passed", "calls attention(x, x, x) without the mask", False, h_no_mask)


def h_manual_scale_D(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    q = split_heads(attention.w_q(x), H)
    k = split_heads(attention.w_k(x), H)
    v = split_heads(attention.w_v(x), H)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # scale of the model width
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    heads = w @ v
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=1)


_add(EX4, CK4, "manual-scale-sqrt-D", "recomputes the attention by hand, scaling by sqrt(D) instead of sqrt(d_k)", False, h_manual_scale_D)


def h_no_wv(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    _, w = attention(x, x, x, mask)
    heads = w @ split_heads(x, H)  # forgot the value projection
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=1)


_add(EX4, CK4, "no-value-projection", "multiplies the weights by split_heads(x) instead of the projected values", False, h_no_wv)


def h_interleaved(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    _, w = attention(x, x, x, mask)
    v = attention.w_v(x).view(B, L, d_k, H).permute(0, 3, 1, 2)  # heads interleaved
    heads = w @ v
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h::H].T for h in range(H)], dim=1)


_add(EX4, CK4, "interleaved-heads", "splits the value features and W_O columns interleaved (h::H) instead of contiguous blocks", False, h_interleaved)


def h_weights_T(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    _, w = attention(x, x, x, mask)
    heads = w.transpose(-2, -1) @ split_heads(attention.w_v(x), H)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=1)


_add(EX4, CK4, "weights-transposed", "multiplies the transposed weights into the values", False, h_weights_T)


def h_BLHD(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    heads = _heads(x, attention, mask)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=2)  # (B, L, H, D)


_add(EX4, CK4, "layout-BLHD", "stacks the contributions on dim=2: (B, L, H, D) instead of (B, H, L, D)", False, h_BLHD)


def h_subtract_bias(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    heads = _heads(x, attention, mask)
    out = []
    for h in range(H):
        only_h = torch.zeros_like(heads)
        only_h[:, h] = heads[:, h]
        out.append(attention.w_o(merge_heads(only_h)) - attention.w_o.bias)  # bias may be None
    return torch.stack(out, dim=1)


_add(EX4, CK4, "subtract-bias-None", "zero-pads, runs w_o, subtracts w_o.bias: crashes on the module built without biases", False, h_subtract_bias)


def h_equal_share(x, attention, mask=None):
    out, _ = attention(x, x, x, mask)
    H = attention.num_heads
    if attention.w_o.bias is not None:
        out = out - attention.w_o.bias
    return (out / H).unsqueeze(1).repeat(1, H, 1, 1)


_add(EX4, CK4, "equal-share", "gives every head (output - b_O) / H: the right sum, not the per-head split", False, h_equal_share)


def h_mask_unsqueeze(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    if mask is not None:
        mask = mask.unsqueeze(1)  # "add the head dim"
    heads = _heads(x, attention, mask)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=1)


_add(EX4, CK4, "mask-unsqueeze-head", "unsqueezes the mask at dim 1 'for the heads', though it already broadcasts", False, h_mask_unsqueeze)


def h_no_bias_q(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    q = split_heads(x @ attention.w_q.weight.T, H)  # bias forgotten
    k = split_heads(x @ attention.w_k.weight.T, H)
    v = split_heads(x @ attention.w_v.weight.T, H)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=1)


_add(EX4, CK4, "projections-without-bias", "projects with x @ weight.T by hand and forgets the biases of w_q, w_k, w_v", False, h_no_bias_q)


def h_skip_head0(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    heads = _heads(x, attention, mask)
    W = attention.w_o.weight
    contrib = torch.zeros(B, H, L, D)
    for h in range(1, H):  # heads counted from 1, as in Concat(head_1, ..., head_H)
        contrib[:, h] = heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T
    return contrib


_add(EX4, CK4, "head-0-skipped", "loops over range(1, H) (heads numbered from 1 as in the formula): head 0 stays zero", False, h_skip_head0)


def h_hardcoded_dk(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = 4  # from the hint's MultiHeadAttention(12, 3)
    heads = _heads(x, attention, mask)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k : (h + 1) * d_k].T for h in range(H)], dim=1)


_add(EX4, CK4, "hardcoded-d_k-4", "hard-codes d_k = 4 from the hint's (12, 3) example", False, h_hardcoded_dk)


def h_right_WoT(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    _, w = attention(x, x, x, mask)
    v = split_heads(attention.w_v(x), H)
    heads = w @ v  # (B, H, L, d_k)
    WoT = attention.w_o.weight.T  # (in, out): rows meet the concatenated heads
    parts = [heads[:, h] @ WoT[h * d_k : (h + 1) * d_k] for h in range(H)]
    return torch.stack(parts, dim=1)


_add(EX4, CK4, "right-WoT-row-blocks", "right: row blocks of w_o.weight.T", True, h_right_WoT)


def h_right_einsum(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    _, w = attention(x, x, x, mask)
    v = split_heads(attention.w_v(x), H).double()
    heads = w.double() @ v
    Wo = attention.w_o.weight.double().view(D, H, D // H)  # (out, H, d_k)
    contrib = torch.einsum("bhld,ohd->bhlo", heads, Wo)
    return contrib.float()


_add(EX4, CK4, "right-einsum-float64", "right: einsum with W_O viewed as (out, H, d_k), float64 then cast back", True, h_right_einsum)


# =====================================================================================
# Exercise 5: shift task and expected pattern  ->  check_shift_attention(shift_task, expected_pattern)
# =====================================================================================
EX5, CK5 = "05_training_attention", "check_shift_attention"


def s_ok(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, x, target


def p_ok5(seq_len, shift):
    P = torch.zeros(seq_len, seq_len)
    for i in range(seq_len):
        P[i, (i - shift) % seq_len] = 1.0
    return P


def s_roll_neg(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=-shift, dims=1)
    return target, x, x, target


def p_plus(seq_len, shift):
    P = torch.zeros(seq_len, seq_len)
    for i in range(seq_len):
        P[i, (i + shift) % seq_len] = 1.0
    return P


_add(EX5, CK5, "both-wrong-direction", "rolls by -shift in the task and predicts (i + shift) % L: consistent, but the wrong direction", False, s_roll_neg, p_plus)
_add(EX5, CK5, "task-roll-minus-shift", "task rolled by -shift; pattern right", False, s_roll_neg, p_ok5)
_add(EX5, CK5, "pattern-i-plus-shift", "task right; pattern at (i + shift) % L", False, s_ok, p_plus)


def s_roll_features(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=-1)  # "the last dim"
    return target, x, x, target


_add(EX5, CK5, "roll-feature-dim", "rolls along dims=-1 (the features) instead of the sequence", False, s_roll_features, p_ok5)


def s_roll_batch(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=0)
    return target, x, x, target


_add(EX5, CK5, "roll-batch-dim", "rolls along dims=0 (the batch)", False, s_roll_batch, p_ok5)


def s_no_generator(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, device=device)  # generator forgotten
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, x, target


_add(EX5, CK5, "generator-ignored", "draws x with the global RNG, ignoring the generator", False, s_no_generator, p_ok5)


def s_query_x(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return x, target, target, target  # keys/values shifted, query unshifted


_add(EX5, CK5, "roles-swapped", "query = x and key = value = target (shifted keys instead of shifted queries)", False, s_query_x, p_ok5)


def s_two_draws(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    y = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(y, shifts=shift, dims=1)  # drew a second tensor for the target by mistake
    return target, x, x, target


_add(EX5, CK5, "target-from-second-draw", "target rolled from a second random draw, not from x", False, s_two_draws, p_ok5)


def s_cat_slices(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.cat([x[:, -shift:], x[:, :-shift]], dim=1)  # manual roll, no modulo
    return target, x, x, target


_add(EX5, CK5, "manual-roll-no-modulo", "manual roll with slices x[:, -shift:] and x[:, :-shift]: wrong for shift >= L", False, s_cat_slices, p_ok5)


def s_index_no_mod(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    idx = torch.arange(seq_len) - shift  # negative indices wrap, larger ones do not
    target = x[:, idx]
    return target, x, x, target


_add(EX5, CK5, "gather-no-modulo", "target = x[:, arange(L) - shift] without % L: IndexError for a negative shift", False, s_index_no_mod, p_ok5)


def s_float64(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device, dtype=torch.float64)
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, x, target


_add(EX5, CK5, "task-float64", "draws x in float64 'for precision'", False, s_float64, p_ok5)


def p_diag_no_wrap(seq_len, shift):
    return torch.diag(torch.ones(seq_len - abs(shift)), -shift)


_add(EX5, CK5, "pattern-diag-no-wrap", "pattern torch.diag(ones(L - |shift|), -shift): no wrap-around", False, s_ok, p_diag_no_wrap)


def p_transposed(seq_len, shift):
    P = torch.zeros(seq_len, seq_len)
    for i in range(seq_len):
        P[(i - shift) % seq_len, i] = 1.0
    return P


_add(EX5, CK5, "pattern-transposed", "pattern with rows and columns swapped (1 at [(i - shift) % L, i])", False, s_ok, p_transposed)


def p_negative_index(seq_len, shift):
    P = torch.zeros(seq_len, seq_len)
    for i in range(seq_len):
        P[i, i - shift] = 1.0  # negative index wraps round "for free"
    return P


_add(EX5, CK5, "pattern-negative-index", "relies on negative indexing instead of % L: fails for negative shifts and shift >= L", False, s_ok, p_negative_index)


def p_roll_cols(seq_len, shift):
    return torch.roll(torch.eye(seq_len), shifts=shift, dims=1)


_add(EX5, CK5, "pattern-roll-eye-dim1", "rolls the identity along dims=1 (columns): 1 at (i + shift) % L", False, s_ok, p_roll_cols)


def p_identity(seq_len, shift):
    return torch.eye(seq_len)  # "each query finds its own vector"


_add(EX5, CK5, "pattern-identity", "predicts the diagonal (ignores the shift)", False, s_ok, p_identity)


def p_hardcoded_shift2(seq_len, shift):
    P = torch.zeros(seq_len, seq_len)
    for i in range(seq_len):
        P[i, (i - 2) % seq_len] = 1.0  # the check trains shift 2
    return P


_add(EX5, CK5, "pattern-hardcoded-shift-2", "pattern written for shift 2 (the trained case) and ignores the argument", False, s_ok, p_hardcoded_shift2)


def s_right_index(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    idx = (torch.arange(seq_len, device=x.device) - shift) % seq_len
    target = x[:, idx].clone()
    print("shift", shift, "target[0, :, 0]", target[0, :, 0].tolist()[:3])
    return target, x, x.clone(), target.clone()


def p_right_roll_eye(seq_len, shift):
    return torch.roll(torch.eye(seq_len), shifts=shift, dims=0)


_add(EX5, CK5, "right-index-and-roll-eye", "right: modular index gather, pattern = eye rolled along rows", True, s_right_index, p_right_roll_eye)


def p_right_int(seq_len, shift):
    cols = (torch.arange(seq_len) - shift) % seq_len
    return F.one_hot(cols, seq_len)  # int64 0/1


_add(EX5, CK5, "right-one-hot-int", "right: one_hot of (i - shift) % L, an int64 0/1 tensor", True, s_ok, p_right_int)


# =====================================================================================
# Exercise 6: pre-LN encoder  ->  check_pre_ln_encoder(pre_ln_block, pre_ln_encoder)
# =====================================================================================
EX6, CK6 = "06_encoder_block", "check_pre_ln_encoder"


def _ffn(ff, h):
    return ff.linear2(torch.relu(ff.linear1(h)))


def b_ok(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + _ffn(ff, norm2(x))
    return x


def enc_ok(x, layers, norm, mask=None):
    for layer in layers:
        x = b_ok(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


def _make_encoder(block, final=True, reverse=False, pass_mask=True, first_only=False, skip_first=False, norm_each=False, norm_start=False):
    def enc(x, layers, norm, mask=None):
        seq = list(layers)
        if reverse:
            seq = seq[::-1]
        if skip_first:
            seq = seq[1:]
        if norm_start:
            x = norm(x)
        for layer in seq:
            lay = layers[0] if first_only else layer
            x = block(x, lay.self_attn, lay.ff, lay.norm1, lay.norm2, mask if pass_mask else None)
            if norm_each:
                x = norm(x)
        if final and not norm_each and not norm_start:
            x = norm(x)
        return x

    return enc


def b_post_ln(x, attention, ff, norm1, norm2, mask=None):
    x = norm1(x + attention(x, x, x, mask)[0])
    x = norm2(x + _ffn(ff, x))
    return x


def enc_post_ln(x, layers, norm, mask=None):
    for layer in layers:
        x = b_post_ln(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "post-ln-block", "writes the chapter's post-LN block (norm after the residual sum)", False, b_post_ln, enc_post_ln)


def b_residual_from_h(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = h + attention(h, h, h, mask)[0]  # residual taken from the normalised input
    h2 = norm2(x)
    x = h2 + _ffn(ff, h2)
    return x


def enc_residual_from_h(x, layers, norm, mask=None):
    for layer in layers:
        x = b_residual_from_h(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "residual-adds-normed", "the residual adds the normalised h instead of the raw x", False, b_residual_from_h, enc_residual_from_h)


def b_no_relu(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + ff.linear2(ff.linear1(norm2(x)))
    return x


def enc_no_relu(x, layers, norm, mask=None):
    for layer in layers:
        x = b_no_relu(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "ffn-no-relu", "feed-forward without the ReLU", False, b_no_relu, enc_no_relu)


def b_gelu(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + ff.linear2(F.gelu(ff.linear1(norm2(x))))
    return x


def enc_gelu(x, layers, norm, mask=None):
    for layer in layers:
        x = b_gelu(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "ffn-gelu", "GELU instead of ReLU in the feed-forward (as in 'modern' models)", False, b_gelu, enc_gelu)


def b_parallel(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    return x + attention(h, h, h, mask)[0] + _ffn(ff, norm2(x))  # both sublayers read the input x


def enc_parallel(x, layers, norm, mask=None):
    for layer in layers:
        x = b_parallel(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "parallel-sublayers", "the feed-forward reads the block's input x, not x after the attention (parallel block)", False, b_parallel, enc_parallel)


def b_norm1_twice(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + _ffn(ff, norm1(x))  # norm1 reused
    return x


def enc_norm1_twice(x, layers, norm, mask=None):
    for layer in layers:
        x = b_norm1_twice(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "norm1-for-both", "uses norm1 before the feed-forward too (norm2 unused)", False, b_norm1_twice, enc_norm1_twice)


def b_kv_raw(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, x, x, mask)[0]  # only the query normalised
    x = x + _ffn(ff, norm2(x))
    return x


def enc_kv_raw(x, layers, norm, mask=None):
    for layer in layers:
        x = b_kv_raw(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "kv-unnormalised", "attention(h, x, x): keys and values not normalised", False, b_kv_raw, enc_kv_raw)


def b_tuple(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    out = attention(h, h, h, mask)
    x = x + out  # forgot [0]
    x = x + _ffn(ff, norm2(x))
    return x


def enc_tuple(x, layers, norm, mask=None):
    for layer in layers:
        x = b_tuple(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "adds-the-tuple", "adds attention's (output, weights) tuple to x (forgot [0])", False, b_tuple, enc_tuple)


def b_no_mask(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h)[0]
    x = x + _ffn(ff, norm2(x))
    return x


def enc_no_mask_block(x, layers, norm, mask=None):
    for layer in layers:
        x = b_no_mask(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "block-drops-mask", "the block never passes mask to the attention", False, b_no_mask, enc_no_mask_block)


def b_inv_mask(x, attention, ff, norm1, norm2, mask=None):
    if mask is not None:
        mask = ~mask  # "PyTorch masks are True = ignore"
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + _ffn(ff, norm2(x))
    return x


def enc_inv_mask(x, layers, norm, mask=None):
    for layer in layers:
        x = b_inv_mask(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "mask-inverted", "inverts the mask before the attention (PyTorch's True = ignore habit)", False, b_inv_mask, enc_inv_mask)


_add(EX6, CK6, "enc-norm-every-layer", "applies the final norm after every block, inside the loop", False, b_ok, _make_encoder(b_ok, norm_each=True))
_add(EX6, CK6, "enc-no-final-norm", "stack without the final norm", False, b_ok, _make_encoder(b_ok, final=False))
_add(EX6, CK6, "enc-norm-at-start", "applies norm once, before the first block instead of after the last", False, b_ok, _make_encoder(b_ok, norm_start=True))
_add(EX6, CK6, "enc-reversed", "runs the layers in reverse order", False, b_ok, _make_encoder(b_ok, reverse=True))
_add(EX6, CK6, "enc-drops-mask", "the stack does not pass the mask on to the blocks", False, b_ok, _make_encoder(b_ok, pass_mask=False))
_add(EX6, CK6, "enc-layer0-repeated", "uses layers[0]'s parts for every block", False, b_ok, _make_encoder(b_ok, first_only=True))
_add(EX6, CK6, "enc-skips-first", "loops over layers[1:] (off by one)", False, b_ok, _make_encoder(b_ok, skip_first=True))


def b_relu_out(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + torch.relu(ff.linear2(torch.relu(ff.linear1(norm2(x)))))  # ReLU after linear2 too
    return x


def enc_relu_out(x, layers, norm, mask=None):
    for layer in layers:
        x = b_relu_out(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "relu-after-linear2", "ReLU after linear2 as well", False, b_relu_out, enc_relu_out)


def b_inplace(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x += attention(h, h, h, mask)[0]  # in place: modifies the caller's tensor
    x += _ffn(ff, norm2(x))
    return x


def enc_inplace(x, layers, norm, mask=None):
    for layer in layers:
        x = b_inplace(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "inplace-residual", "residual sums written x += ..., modifying the caller's input in place (right numbers)", False, b_inplace, enc_inplace,
     borderline=True)


def b_squeeze_mask(x, attention, ff, norm1, norm2, mask=None):
    if mask is not None:
        mask = mask.squeeze()  # (B, 1, 1, L) -> (B, L): "drop the useless dims"
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + _ffn(ff, norm2(x))
    return x


def enc_squeeze_mask(x, layers, norm, mask=None):
    for layer in layers:
        x = b_squeeze_mask(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "mask-squeezed", "squeezes the (B, 1, 1, L) mask to (B, L), which the attention reads as (Lq, Lk)", False, b_squeeze_mask, enc_squeeze_mask)


def b_right_functional(x, attention, ff, norm1, norm2, mask=None):
    h = F.layer_norm(x, norm1.normalized_shape, norm1.weight, norm1.bias, norm1.eps)
    a, _ = attention(h, h, h, mask)
    y = x + a
    h2 = F.layer_norm(y, norm2.normalized_shape, norm2.weight, norm2.bias, norm2.eps)
    return y + F.linear(F.relu(F.linear(h2, ff.linear1.weight, ff.linear1.bias)), ff.linear2.weight, ff.linear2.bias)


def enc_right_functional(x, layers, norm, mask=None):
    out = x
    for i in range(len(layers)):
        out = b_right_functional(out, layers[i].self_attn, layers[i].ff, layers[i].norm1, layers[i].norm2, mask=mask)
    return norm(out)


_add(EX6, CK6, "right-functional", "right: F.layer_norm and F.linear by hand, index loop", True, b_right_functional, enc_right_functional)


def b_right_clamp(x, attention, ff, norm1, norm2, mask=None):
    residual = x
    x = norm1(x)
    x, weights = attention(x, x, x, mask=mask)
    x = residual + x
    residual = x
    x = ff.linear1(norm2(x)).clamp(min=0)
    x = residual + ff.linear2(x)
    return x


def enc_right_clamp(x, layers, norm, mask=None):
    import functools

    return norm(functools.reduce(lambda acc, l: b_right_clamp(acc, l.self_attn, l.ff, l.norm1, l.norm2, mask), layers, x))


_add(EX6, CK6, "right-clamp-reduce", "right: ReLU as clamp(min=0), variables reused, functools.reduce over layers", True, b_right_clamp, enc_right_clamp)


# =====================================================================================
# Exercise 7: warm-up schedule  ->  check_warmup_lr
# =====================================================================================
EX7, CK7 = "07_layer_norm_placement", "check_warmup_lr"


def w_step_not_plus1(step, base_lr, warmup_steps):
    return base_lr * min(step / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX7, CK7, "warmup-uses-step", "warm-up term step / w instead of (step + 1) / w (0 at step 0)", False, w_step_not_plus1)


def w_int_div(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) // warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX7, CK7, "integer-division", "(step + 1) // warmup_steps: integer division in the warm-up", False, w_int_div)


def w_max(step, base_lr, warmup_steps):
    return base_lr * max((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX7, CK7, "max-instead-of-min", "max of the two curves instead of min", False, w_max)


def w_no_sqrt(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, warmup_steps / (step + 1))


_add(EX7, CK7, "decay-without-sqrt", "decay w / (s + 1) without the square root", False, w_no_sqrt)


def w_noam(step, base_lr, warmup_steps):
    s = step + 1
    return base_lr * min(s ** -0.5, s * warmup_steps ** -1.5)  # the paper's formula, no d_model


_add(EX7, CK7, "paper-formula-unnormalised", "the paper's min(s^-0.5, s w^-1.5) without normalising the peak to 1 (peak base_lr/sqrt(w))", False, w_noam)


def w_decay_step(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / step)  # step, not step + 1, in the decay


_add(EX7, CK7, "decay-uses-step", "if/else with the decay on step instead of step + 1", False, w_decay_step)


def w_le_boundary(step, base_lr, warmup_steps):
    if step <= warmup_steps:  # one step too many in the warm-up
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / (step + 1))


_add(EX7, CK7, "warmup-one-step-too-long", "if step <= warmup_steps: the warm-up overshoots to (w + 1)/w at step w", False, w_le_boundary)


def w_round(step, base_lr, warmup_steps):
    lr = base_lr * min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))
    return round(lr, 6)


_add(EX7, CK7, "rounded-6", "rounds the rate to 6 decimals for a clean printout", False, w_round)


def w_no_warmup_constant(step, base_lr, warmup_steps):
    if warmup_steps == 1:
        return base_lr  # "no warm-up" read as a constant rate
    return base_lr * min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX7, CK7, "w1-constant", "treats warmup_steps = 1 as a constant base_lr (forgets the decay)", False, w_no_warmup_constant)


def w_base_one_branch(step, base_lr, warmup_steps):
    return min(base_lr * (step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX7, CK7, "base_lr-on-warmup-only", "multiplies only the warm-up term by base_lr", False, w_base_one_branch)


def w_peak_at_w(step, base_lr, warmup_steps):
    return base_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step)) if step > 0 else base_lr / warmup_steps


_add(EX7, CK7, "1-based-with-special-step0", "formula on step (1-based), step 0 patched to base_lr / w: peak one step late", False, w_peak_at_w)


def w_w_minus_1(step, base_lr, warmup_steps):
    if step < warmup_steps - 1:
        return base_lr * step / (warmup_steps - 1)  # reaches 1 at step w-1 exactly
    return base_lr * math.sqrt(warmup_steps / (step + 1))


_add(EX7, CK7, "warmup-over-w-minus-1", "warm-up step / (w - 1): linear from 0 at step 0 to the peak at w - 1", False, w_w_minus_1)


def w_tensor(step, base_lr, warmup_steps):
    s = torch.tensor(step + 1.0)
    return base_lr * torch.minimum(s / warmup_steps, torch.sqrt(warmup_steps / s))


_add(EX7, CK7, "returns-float32-tensor", "computes with torch float32 tensors and returns a 0-d tensor, not a number", False, w_tensor,
     borderline=True)


def w_exp_swapped(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, ((step + 1) / warmup_steps) ** -2)


_add(EX7, CK7, "decay-power-2", "decay ((s + 1)/w)^-2 instead of ^-0.5", False, w_exp_swapped)


def w_hardcoded_4000(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, math.sqrt(4000 / (step + 1)))  # the paper's warm-up


_add(EX7, CK7, "decay-hardcoded-4000", "decay term sqrt(4000 / (s + 1)) with the paper's warm-up hard-coded", False, w_hardcoded_4000)


def w_right_piecewise(step, base_lr, warmup_steps):
    n = step + 1
    factor = n / warmup_steps if n <= warmup_steps else (warmup_steps / n) ** 0.5
    print(f"step {step}: factor {factor:.4f}")
    return float(base_lr * factor)


_add(EX7, CK7, "right-piecewise-print", "right: if/else on n = step + 1 <= w, ** 0.5, with a print", True, w_right_piecewise)


def w_right_lambdalr(step, base_lr, warmup_steps):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup_steps, (warmup_steps / (s + 1)) ** 0.5)
    )
    for _ in range(step):
        opt.step()
        sched.step()
    return sched.get_last_lr()[0]


_add(EX7, CK7, "right-lambdalr", "right: a dummy optimiser stepped through PyTorch's LambdaLR", True, w_right_lambdalr)


def w_right_min_form(step, base_lr, warmup_steps):
    return base_lr * min(step + 1, warmup_steps) / warmup_steps * min(1.0, math.sqrt(warmup_steps / (step + 1)))


_add(EX7, CK7, "right-product-of-clips", "right: product of the clipped warm-up and the clipped decay", True, w_right_min_form)


# =====================================================================================
# Exercise 8: decoder attention  ->  check_decoder_attention
# =====================================================================================
EX8, CK8 = "08_decoder_and_cross_attention", "check_decoder_attention"


def _pad(source_lengths, Ls, device):
    return padding_mask(torch.as_tensor(source_lengths), Ls).to(device)


def da_no_maxlen(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    pad = padding_mask(source_lengths)[:, None, None, :]  # width = longest length, not Ls
    cross_out = cross_attn(x, memory, memory, pad)[0]
    return self_out, cross_out


_add(EX8, CK8, "padding-without-max_len", "padding_mask(source_lengths) without max_len=Ls: as wide as the longest source", False, da_no_maxlen)


def da_pad_query_axis(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    pad = _pad(source_lengths, Ls, x.device)[:, None, :, None]  # (B, 1, Ls, 1)
    cross_out = cross_attn(x, memory, memory, pad)[0]
    return self_out, cross_out


_add(EX8, CK8, "cross-mask-query-axis", "cross padding mask shaped (B, 1, Ls, 1): on the query axis", False, da_pad_query_axis)


def da_pad_inverted(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    pad = ~_pad(source_lengths, Ls, x.device)[:, None, None, :]
    cross_out = cross_attn(x, memory, memory, pad)[0]
    return self_out, cross_out


_add(EX8, CK8, "cross-mask-inverted", "inverts the padding mask (True = padding)", False, da_pad_inverted)


def da_causal_cross(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    m = causal_mask(Lt, Ls, device=x.device) & _pad(source_lengths, Ls, x.device)[:, None, None, :]
    cross_out = cross_attn(x, memory, memory, m)[0]
    return self_out, cross_out


_add(EX8, CK8, "causal-on-cross", "adds a (bottom-right) causal mask to the cross-attention too", False, da_causal_cross)


def da_no_self_mask(x, memory, source_lengths, self_attn, cross_attn):
    Ls = memory.size(1)
    self_out = self_attn(x, x, x, None)[0]
    cross_out = cross_attn(x, memory, memory, _pad(source_lengths, Ls, x.device)[:, None, None, :])[0]
    return self_out, cross_out


_add(EX8, CK8, "self-no-causal", "self-attention without the causal mask", False, da_no_self_mask)


def da_self_triu(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    m = torch.triu(torch.ones(Lt, Lt, dtype=torch.bool, device=x.device), diagonal=1)  # "mask the future"
    self_out = self_attn(x, x, x, m)[0]
    cross_out = cross_attn(x, memory, memory, _pad(source_lengths, Ls, x.device)[:, None, None, :])[0]
    return self_out, cross_out


_add(EX8, CK8, "self-mask-future-True", "causal mask as triu(diagonal=1), True on the future (ignore convention): the first query sees nothing", False, da_self_triu)


def da_memory_query(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    pad = _pad(source_lengths, Ls, x.device)
    cross_out = cross_attn(memory, x, x, pad[:, None, :, None])[0]  # encoder asks, decoder answers
    return self_out, cross_out


_add(EX8, CK8, "cross-query-is-memory", "cross_attn(memory, x, x): the encoder's output as queries, the mask moved to match", False, da_memory_query)


def da_value_x(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    cross_out = cross_attn(x, memory, x, _pad(source_lengths, Ls, x.device)[:, None, None, :])[0]
    return self_out, cross_out


_add(EX8, CK8, "cross-value-is-x", "cross_attn(x, memory, x): values from the decoder", False, da_value_x)


def da_swap_modules(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = cross_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    cross_out = self_attn(x, memory, memory, _pad(source_lengths, Ls, x.device)[:, None, None, :])[0]
    return self_out, cross_out


_add(EX8, CK8, "modules-swapped", "uses cross_attn for the self-attention and self_attn for the cross-attention", False, da_swap_modules)


def da_same_module(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    cross_out = self_attn(x, memory, memory, _pad(source_lengths, Ls, x.device)[:, None, None, :])[0]
    return self_out, cross_out


_add(EX8, CK8, "self_attn-twice", "uses self_attn for both attentions", False, da_same_module)


def da_weights(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    _, self_w = self_attn(x, x, x, causal_mask(Lt, device=x.device))
    _, cross_w = cross_attn(x, memory, memory, _pad(source_lengths, Ls, x.device)[:, None, None, :])
    return self_w, cross_w


_add(EX8, CK8, "returns-weights", "unpacks (weights, output) the wrong way round and returns the weights", False, da_weights)


def da_swapped_return(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    cross_out = cross_attn(x, memory, memory, _pad(source_lengths, Ls, x.device)[:, None, None, :])[0]
    return cross_out, self_out


_add(EX8, CK8, "return-swapped", "returns (cross_out, self_out)", False, da_swapped_return)


def da_pad_on_self(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = _pad(source_lengths, Ls, x.device)[:, None, None, :]
    self_mask = causal_mask(Lt, device=x.device) & pad[..., :Lt] if Ls >= Lt else causal_mask(Lt, device=x.device)
    self_out = self_attn(x, x, x, self_mask)[0]  # "padding everywhere", trimmed to fit
    cross_out = cross_attn(x, memory, memory, pad)[0]
    return self_out, cross_out


_add(EX8, CK8, "source-padding-on-self", "also applies the source padding mask (trimmed to Lt) to the decoder self-attention", False, da_pad_on_self)


def da_pad_le(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    lengths = torch.as_tensor(source_lengths, device=x.device)
    pad = torch.arange(Ls, device=x.device)[None, :] <= lengths[:, None]  # one too many
    cross_out = cross_attn(x, memory, memory, pad[:, None, None, :])[0]
    return self_out, cross_out


_add(EX8, CK8, "cross-pad-off-by-one", "hand-made padding mask arange(Ls) <= length: the first padding token is visible", False, da_pad_le)


def da_pad_Lt(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device))[0]
    lengths = [min(int(n), Lt) for n in source_lengths]
    pad = padding_mask(lengths, Lt)[:, None, None, :]  # sized by the target length
    if Lt < Ls:
        pad = torch.cat([pad, torch.zeros(pad.shape[0], 1, 1, Ls - Lt, dtype=torch.bool)], dim=-1)
    else:
        pad = pad[..., :Ls]
    cross_out = cross_attn(x, memory, memory, pad)[0]
    return self_out, cross_out


_add(EX8, CK8, "cross-pad-sized-by-Lt", "builds the padding mask with the target length Lt and pads/trims it to Ls", False, da_pad_Lt)


def da_self_causal_Ls(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out = self_attn(x, x, x, causal_mask(Lt, Ls, device=x.device))[0]  # keys sized by the source
    cross_out = cross_attn(x, memory, memory, _pad(source_lengths, Ls, x.device)[:, None, None, :])[0]
    return self_out, cross_out


_add(EX8, CK8, "self-causal-sized-Lt-Ls", "self-attention mask causal_mask(Lt, Ls): the key length taken from the source", False, da_self_causal_Ls)


def da_right_3d(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.shape[1], memory.shape[1]
    self_out, _ = self_attn(x, x, x, causal_mask(Lt, device=x.device))
    keys_ok = padding_mask(list(map(int, source_lengths)), max_len=Ls).to(x.device)  # (B, Ls)
    cross_out, _ = cross_attn(x, memory, memory, keys_ok.unsqueeze(1))  # (B, 1, Ls): 3-D, per sequence
    return self_out, cross_out


_add(EX8, CK8, "right-3d-mask", "right: 3-D (B, 1, Ls) cross mask, list of ints to padding_mask", True, da_right_3d)


def da_right_manual(x, memory, source_lengths, self_attn, cross_attn):
    B, Lt, _ = x.shape
    Ls = memory.shape[1]
    t = torch.arange(Lt, device=x.device)
    causal = t[None, :] <= t[:, None]  # (Lt, Lt)
    lens = torch.as_tensor(source_lengths, device=x.device).view(B, 1, 1, 1)
    pad = torch.arange(Ls, device=x.device).view(1, 1, 1, Ls) < lens  # (B, 1, 1, Ls)
    pad = pad.expand(B, 1, Lt, Ls)
    print("masks", tuple(causal.shape), tuple(pad.shape))
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, memory, pad)[0]


_add(EX8, CK8, "right-manual-expanded", "right: hand-made masks, padding expanded to (B, 1, Lt, Ls), with a print", True, da_right_manual)
