"""Blind answers for exercises 01 to 06, written from the exercise text alone."""
import math
import torch
import torch.nn.functional as F
import lessons_src

ANSWERS = []

def _add(exercise, check, name, intent, right, *fns):
    ANSWERS.append(dict(exercise=exercise, check=check, name=name, intent=intent, right=right, fns=tuple(fns)))


# =====================================================================================
# 01 attention from scratch: check_scaled_dot_product_attention(attention)
# =====================================================================================
EX1, CK1 = "01_attention_from_scratch", "check_scaled_dot_product_attention"


def att01_right_fixed(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def att01_right_einsum_nan_to_num(query, key, value, mask=None):
    # einsum over the shared leading dims, then nan_to_num cleans the rows that were all -inf
    scores = torch.einsum("...qd,...kd->...qk", query / query.shape[-1] ** 0.5, key)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)
    output = torch.einsum("...qk,...kd->...qd", weights, value)
    return output, weights


def att01_right_logsumexp(query, key, value, mask=None):
    scores = (query @ key.mT) * (1.0 / math.sqrt(key.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
    weights = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
    if mask is not None:
        weights = weights * mask.any(-1, keepdim=True)
    return torch.matmul(weights, value), weights


def att01_transpose_0_1(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(0, 1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def att01_softmax_dim_minus2(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def att01_mask_not_inverted(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def att01_empty_row_any_dim_minus2(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    return weights @ value, weights


def att01_empty_row_removed(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def att01_empty_row_no_keepdim(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1), 0.0)
    return weights @ value, weights


def att01_mask_multiply_scores(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores * mask  # masked scores become 0, not -inf
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def att01_mask_after_softmax_no_renorm(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask  # zeroes masked weights but rows no longer sum to 1
    return weights @ value, weights


def att01_global_max_softmax(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.max())  # one max for the whole tensor, not per row
    weights = e / e.sum(dim=-1, keepdim=True)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def att01_naive_exp_softmax(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    return weights @ value, weights


def att01_scale_by_dk(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / d_k
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def att01_scale_by_lk(query, key, value, mask=None):
    d_k = key.size(-2)  # number of keys, not the feature size
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def att01_returns_scores(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, scores


def att01_swapped_return(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights, weights @ value


def att01_transpose_1_2(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(1, 2) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


_add(EX1, CK1, "right-minimal-fix", "the four one-line fixes: transpose(-2,-1), ~mask, softmax dim=-1, any(dim=-1)", True,
     att01_right_fixed)
_add(EX1, CK1, "right-einsum-nan-to-num", "einsum with the scale folded into the query, -inf via torch.where, NaN rows cleaned by nan_to_num", True,
     att01_right_einsum_nan_to_num)
_add(EX1, CK1, "right-logsumexp", "exp(scores - logsumexp) with finfo.min fill, empty rows zeroed by multiplying with mask.any", True,
     att01_right_logsumexp)
_add(EX1, CK1, "transpose-0-1-left", "left key.transpose(0, 1): right for a 2-D key but swaps the batch/head dims instead of (Lk, d_k) for batched inputs", False,
     att01_transpose_0_1)
_add(EX1, CK1, "softmax-dim-minus2-left", "left softmax over dim=-2 (the queries), so the columns sum to 1 instead of each query's row", False,
     att01_softmax_dim_minus2)
_add(EX1, CK1, "mask-not-inverted", "left masked_fill(mask, -inf): fills -inf where the mask is True (may attend), i.e. hides the allowed keys", False,
     att01_mask_not_inverted)
_add(EX1, CK1, "empty-row-any-dim-minus2", "left mask.any(dim=-2) in the empty-row fix: tests whether a key is seen by any query, not whether a query sees any key, so an all-False row stays NaN", False,
     att01_empty_row_any_dim_minus2)
_add(EX1, CK1, "empty-row-line-deleted", "deleted the empty-row line instead of fixing it: a query whose mask row is all False gets softmax of all -inf = NaN weights and output", False,
     att01_empty_row_removed)
_add(EX1, CK1, "empty-row-no-keepdim", "mask.any(dim=-1) without keepdim=True: the (..., Lq) result lines up with the key axis, so it raises a broadcast error (or zeroes columns instead of the empty row when shapes happen to match)", False,
     att01_empty_row_no_keepdim)
_add(EX1, CK1, "mask-multiplies-scores", "masks by multiplying the scores by the mask: masked scores become 0 instead of -inf, so masked keys still get positive weight", False,
     att01_mask_multiply_scores)
_add(EX1, CK1, "mask-after-softmax-no-renorm", "applies the mask by multiplying the weights after the softmax without renormalising: masked weights are 0 but the rows no longer sum to 1", False,
     att01_mask_after_softmax_no_renorm)
_add(EX1, CK1, "global-max-softmax", "hand-written softmax subtracting the max of the whole tensor instead of each row's max: a row whose scores are hundreds below the global max underflows to 0/0 = NaN", False,
     att01_global_max_softmax)
_add(EX1, CK1, "naive-exp-softmax", "hand-written softmax exp(s)/sum without subtracting the row max: overflows to inf/inf = NaN when scores are in the hundreds", False,
     att01_naive_exp_softmax)
_add(EX1, CK1, "scale-by-dk", "divides the scores by d_k instead of sqrt(d_k)", False,
     att01_scale_by_dk)
_add(EX1, CK1, "scale-by-num-keys", "takes d_k from key.size(-2), the number of keys Lk, instead of the feature size key.size(-1)", False,
     att01_scale_by_lk)
_add(EX1, CK1, "returns-scores", "returns the scores (before the softmax, with -inf) as the weights instead of the softmax weights", False,
     att01_returns_scores)
_add(EX1, CK1, "swapped-return", "returns (weights, output) instead of (output, weights)", False,
     att01_swapped_return)
_add(EX1, CK1, "transpose-1-2", "replaced transpose(0, 1) with transpose(1, 2): right only for 3-D (B, L, d); IndexError on a 2-D key, and on (B, H, Lk, d) it swaps the head and key axes (shape error)", False,
     att01_transpose_1_2)


# =====================================================================================
# 02 scaling: check_attention_weights(attention_weights)
# =====================================================================================
EX2, CK2 = "02_scaling", "check_attention_weights"


def aw_right_scale_query(query, key, temperature=None):
    tau = math.sqrt(query.shape[-1]) if temperature is None else temperature
    return torch.softmax((query / tau) @ key.mT, dim=-1)


def aw_right_logsumexp_einsum(query, key, temperature=None):
    if temperature is None:
        temperature = key.size(-1) ** 0.5
    scores = torch.einsum("...id,...jd->...ij", query, key) / temperature
    return (scores - scores.logsumexp(dim=-1, keepdim=True)).exp()


def aw_no_scaling(query, key, temperature=None):
    scores = query @ key.transpose(-2, -1)
    if temperature is not None:
        scores = scores / temperature
    return torch.softmax(scores, dim=-1)


def aw_divide_by_dk(query, key, temperature=None):
    tau = query.size(-1) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


def aw_precedence_half_power(query, key, temperature=None):
    d_k = query.size(-1)
    tau = d_k ** 1 / 2 if temperature is None else temperature  # (d_k ** 1) / 2, not a square root
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


def aw_dk_from_dim1(query, key, temperature=None):
    d_k = query.size(1)
    tau = math.sqrt(d_k) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


def aw_sqrt_num_keys(query, key, temperature=None):
    tau = math.sqrt(key.size(-2)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


def aw_softmax_dim_minus2(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-2)


def aw_temperature_ignored(query, key, temperature=None):
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)


def aw_temperature_multiplies(query, key, temperature=None):
    scores = query @ key.transpose(-2, -1)
    if temperature is None:
        scores = scores / math.sqrt(query.size(-1))
    else:
        scores = scores * temperature
    return torch.softmax(scores, dim=-1)


def aw_sqrt_of_temperature(query, key, temperature=None):
    tau = query.size(-1) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(tau), dim=-1)


def aw_double_scaling(query, key, temperature=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if temperature is not None:
        scores = scores / temperature
    return torch.softmax(scores, dim=-1)


def aw_scale_weights_not_scores(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1), dim=-1) / tau


def aw_naive_softmax(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    e = torch.exp(query @ key.transpose(-2, -1) / tau)
    return e / e.sum(dim=-1, keepdim=True)


def aw_global_max(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = query @ key.transpose(-2, -1) / tau
    e = torch.exp(scores - scores.max())
    return e / e.sum(dim=-1, keepdim=True)


def aw_clamp_scores(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = (query @ key.transpose(-2, -1) / tau).clamp(-30.0, 30.0)  # "to avoid overflow"
    return torch.softmax(scores, dim=-1)


def aw_transpose_0_1(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(0, 1) / tau, dim=-1)


_add(EX2, CK2, "right-scale-query-first", "divides the query by tau before the product (same thing), key.mT, softmax dim=-1", True,
     aw_right_scale_query)
_add(EX2, CK2, "right-einsum-logsumexp", "einsum scores, exp(scores - logsumexp) as a stable softmax", True,
     aw_right_logsumexp_einsum)
_add(EX2, CK2, "no-scaling", "forgets the default scaling: with temperature=None the scores are not divided by sqrt(d_k)", False,
     aw_no_scaling)
_add(EX2, CK2, "divide-by-dk", "default temperature is d_k instead of sqrt(d_k)", False,
     aw_divide_by_dk)
_add(EX2, CK2, "precedence-dk-half", "writes sqrt(d_k) as d_k ** 1 / 2, which is d_k / 2 by operator precedence", False,
     aw_precedence_half_power)
_add(EX2, CK2, "dk-from-dim-1", "takes d_k = query.size(1): right for a 2-D query, but with leading batch/head dims it is Lq or H, not the last dim", False,
     aw_dk_from_dim1)
_add(EX2, CK2, "sqrt-of-num-keys", "scales by sqrt(Lk) = sqrt(key.size(-2)), the number of keys, instead of sqrt(d_k)", False,
     aw_sqrt_num_keys)
_add(EX2, CK2, "softmax-over-queries", "softmax over dim=-2 (the queries) instead of the keys, so columns sum to 1", False,
     aw_softmax_dim_minus2)
_add(EX2, CK2, "temperature-ignored", "always divides by sqrt(d_k); the temperature argument is never used", False,
     aw_temperature_ignored)
_add(EX2, CK2, "temperature-multiplies", "multiplies the scores by the temperature instead of dividing by it", False,
     aw_temperature_multiplies)
_add(EX2, CK2, "sqrt-of-temperature", "treats temperature like d_k and divides by sqrt(temperature) instead of temperature", False,
     aw_sqrt_of_temperature)
_add(EX2, CK2, "double-scaling", "always divides by sqrt(d_k) and then also by the temperature when one is given", False,
     aw_double_scaling)
_add(EX2, CK2, "scales-weights-not-scores", "applies softmax to the unscaled scores and divides the weights by tau afterwards, so rows sum to 1/tau", False,
     aw_scale_weights_not_scores)
_add(EX2, CK2, "naive-softmax-overflow", "hand-written softmax exp(s)/sum without subtracting the row max: overflows to NaN at temperature=0.05", False,
     aw_naive_softmax)
_add(EX2, CK2, "global-max-softmax", "stabilises the softmax with the max of the whole tensor instead of each row's max: rows far below the global max underflow to 0/0 = NaN", False,
     aw_global_max)
_add(EX2, CK2, "clamp-scores", "clamps the scaled scores to [-30, 30] to avoid overflow, which changes the weights when scores are large (small temperature, scores hundreds apart)", False,
     aw_clamp_scores)
_add(EX2, CK2, "transpose-0-1", "transposes key with transpose(0, 1): right for 2-D, wrong (swaps batch/head dims) with leading dims", False,
     aw_transpose_0_1)


# =====================================================================================
# 03 masking part 1: check_masks(make_causal_mask, make_padding_mask, combine_masks)
# =====================================================================================
EX3, CK3A, CK3B = "03_masking", "check_masks", "check_document_causal_mask"


def causal_right(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))


def causal_right_arange(seq_len):
    pos = torch.arange(seq_len)
    return pos.unsqueeze(1) >= pos  # (L, 1) >= (L,): key j <= query i


def causal_right_loop(seq_len):
    m = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        m[i, : i + 1] = True
    return m


def padding_right(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


def padding_right_loop(lengths, max_len):
    m = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        m[b, :n] = True
    return m


def combine_right(padding, causal):
    return padding[:, None, :] & causal


def combine_right_logical_and(padding, causal):
    B, L = padding.shape
    return torch.logical_and(causal.unsqueeze(0).expand(B, L, L), padding.unsqueeze(1).expand(B, L, L))


def causal_triu(seq_len):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool))


def causal_triu_diag1_pytorch_convention(seq_len):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)


def causal_float(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len))


def causal_strict(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=-1)


def causal_tril_diag1(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)


def causal_eq_zero(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len)) == 0


def padding_le(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]


def padding_longest(lengths, max_len):
    return torch.arange(int(lengths.max()))[None, :] < lengths[:, None]


def padding_inverted(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]


def padding_transposed(lengths, max_len):
    return torch.arange(max_len)[:, None] < lengths[None, :]  # (max_len, B)


def padding_long_dtype(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None]).long()




def combine_query_axis(padding, causal):
    return padding[:, :, None] & causal


def combine_both_axes(padding, causal):
    return padding[:, :, None] & padding[:, None, :] & causal


def combine_or(padding, causal):
    return padding[:, None, :] | causal


def combine_4d(padding, causal):
    return padding[:, None, None, :] & causal  # (B, 1, L, L), as for MultiHeadAttention


def combine_float_product(padding, causal):
    return padding[:, None, :].float() * causal.float()


def combine_transposed(padding, causal):
    return (padding[:, None, :] & causal).transpose(1, 2)


_add(EX3, CK3A, "right-tril-compare-loop", "right: arange comparison for causal, reference padding and combine", True,
     causal_right_arange, padding_right, combine_right)
_add(EX3, CK3A, "right-loops", "right: causal and padding built with Python loops over rows, combine_masks with logical_and of expanded masks", True,
     causal_right_loop, padding_right_loop, combine_right_logical_and)
_add(EX3, CK3A, "causal-triu", "causal mask is torch.triu (True where j >= i): the upper triangle, keys after the query instead of before", False,
     causal_triu, padding_right, combine_right)
_add(EX3, CK3A, "causal-pytorch-convention", "causal mask in nn.MultiheadAttention's convention, triu(diagonal=1) = True for future keys (True means ignore): inverted polarity", False,
     causal_triu_diag1_pytorch_convention, padding_right, combine_right)
_add(EX3, CK3A, "causal-float", "causal mask is torch.tril(torch.ones(L, L)), a float 0/1 tensor, not dtype=torch.bool", False,
     causal_float, padding_right, combine_right)
_add(EX3, CK3A, "causal-strict-lower", "causal mask uses tril(diagonal=-1): j < i, so a position does not see itself (diagonal missing; first row all False)", False,
     causal_strict, padding_right, combine_right)
_add(EX3, CK3A, "causal-tril-diag1", "causal mask uses tril(diagonal=1): off by one, each query also sees the next key", False,
     causal_tril_diag1, padding_right, combine_right)
_add(EX3, CK3A, "causal-eq-zero-inverted", "causal mask built as tril(ones) == 0: bool but True on the future keys, inverted polarity", False,
     causal_eq_zero, padding_right, combine_right)
_add(EX3, CK3A, "padding-le", "padding mask uses j <= lengths[b]: one padding position too many marked real (off by one)", False,
     causal_right, padding_le, combine_right)
_add(EX3, CK3A, "padding-longest-not-max-len", "padding mask is only as wide as the longest length, ignoring max_len (wrong shape when max_len is larger)", False,
     causal_right, padding_longest, combine_right)
_add(EX3, CK3A, "padding-inverted", "padding mask True on the padding (j >= lengths[b]) instead of on the real tokens", False,
     causal_right, padding_inverted, combine_right)
_add(EX3, CK3A, "padding-transposed", "padding comparison broadcast the other way round: shape (max_len, B) instead of (B, max_len)", False,
     causal_right, padding_transposed, combine_right)
_add(EX3, CK3A, "padding-long-dtype", "padding mask converted to .long() 0/1 integers instead of staying bool", False,
     causal_right, padding_long_dtype, combine_right)
_add(EX3, CK3A, "combine-query-axis", "combine_masks puts the padding on the query axis, padding[:, :, None]: hides padding queries' rows instead of padding keys", False,
     causal_right, padding_right, combine_query_axis)
_add(EX3, CK3A, "combine-both-axes", "combine_masks masks padding on both queries and keys, so a padding query loses its whole row (should keep seeing the real tokens)", False,
     causal_right, padding_right, combine_both_axes)
_add(EX3, CK3A, "combine-or", "combine_masks joins the two masks with | (or) instead of & (and)", False,
     causal_right, padding_right, combine_or)
_add(EX3, CK3A, "combine-4d", "combine_masks returns (B, 1, L, L) with padding[:, None, None, :], the MultiHeadAttention shape, instead of (B, L, L)", False,
     causal_right, padding_right, combine_4d)
_add(EX3, CK3A, "combine-float-product", "combine_masks multiplies .float() masks: values right but dtype float, not bool", False,
     causal_right, padding_right, combine_float_product)
_add(EX3, CK3A, "combine-transposed", "combine_masks result transposed (B, keys, queries): padding lands on the query axis and the triangle is upper", False,
     causal_right, padding_right, combine_transposed)


# =====================================================================================
# 03 masking part 2: check_document_causal_mask(document_causal_mask)
# =====================================================================================

def doc_right_sub(doc_ids):
    L = doc_ids.size(-1)
    same = (doc_ids.unsqueeze(2) - doc_ids.unsqueeze(1)) == 0
    return same & torch.ones(L, L, dtype=torch.bool, device=doc_ids.device).tril()


def doc_right_block_diag(doc_ids):
    out = []
    for row in doc_ids:
        _, counts = torch.unique_consecutive(row, return_counts=True)
        blocks = [torch.ones(n, n, dtype=torch.bool).tril() for n in counts.tolist()]
        out.append(torch.block_diag(*blocks))
    return torch.stack(out)


def doc_same_only(doc_ids):
    return doc_ids[:, :, None] == doc_ids[:, None, :]


def doc_causal_only(doc_ids):
    B, L = doc_ids.shape
    return torch.ones(L, L, dtype=torch.bool).tril().expand(B, L, L)


def doc_strict_causal(doc_ids):
    L = doc_ids.size(1)
    pos = torch.arange(L)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & (pos[None, :] < pos[:, None])


def doc_upper_triangle(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).triu()


def doc_first_row_only(doc_ids):
    B, L = doc_ids.shape
    ids = doc_ids[0]
    m = (ids[:, None] == ids[None, :]) & torch.ones(L, L, dtype=torch.bool).tril()
    return m.expand(B, L, L)


def doc_float(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]).float() * torch.ones(L, L).tril()


def doc_inverted(doc_ids):
    L = doc_ids.size(1)
    allowed = (doc_ids[:, :, None] == doc_ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril()
    return ~allowed  # "True = masked out", as in nn.MultiheadAttention


def doc_key_doc_le_query_doc(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, None, :] <= doc_ids[:, :, None]) & torch.ones(L, L, dtype=torch.bool).tril()


def doc_shape_bl(doc_ids):
    # "same document as the previous token", per position: (B, L) instead of (B, L, L)
    prev = torch.cat([doc_ids[:, :1], doc_ids[:, :-1]], dim=1)
    return doc_ids == prev


def doc_or(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) | torch.ones(L, L, dtype=torch.bool).tril()


def doc_tril_diag1(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril(1)




_add(EX3, CK3B, "right-difference-zero", "right: ids equal tested as a zero difference, & a tril of ones", True,
     doc_right_sub)
_add(EX3, CK3B, "right-block-diag", "right: per row, unique_consecutive counts -> block_diag of causal triangles, stacked", True,
     doc_right_block_diag)
_add(EX3, CK3B, "same-doc-only", "only the same-document condition: forgets the causal condition j <= i, so tokens see later tokens of their document", False,
     doc_same_only)
_add(EX3, CK3B, "causal-only", "only the causal condition: ignores doc_ids, so documents see the documents packed before them", False,
     doc_causal_only)
_add(EX3, CK3B, "strict-causal", "causal condition j < i instead of j <= i: the diagonal is missing and each document's first token sees nothing", False,
     doc_strict_causal)
_add(EX3, CK3B, "upper-triangle", "uses triu instead of tril for the causal part: each query sees the later keys of its document (the transposed mask)", False,
     doc_upper_triangle)
_add(EX3, CK3B, "first-row-for-all", "builds the mask from doc_ids[0] only and expands it to the whole batch: every row gets the first row's documents", False,
     doc_first_row_only)
_add(EX3, CK3B, "float-mask", "returns a float 0/1 mask (product of .float() masks) instead of bool", False,
     doc_float)
_add(EX3, CK3B, "inverted", "returns ~mask: True = masked, the nn.MultiheadAttention convention, inverted polarity", False,
     doc_inverted)
_add(EX3, CK3B, "doc-le-instead-of-eq", "same-document test written as key doc <= query doc: since ids grow, that is always true for j <= i, so documents leak into later ones (just a causal mask)", False,
     doc_key_doc_le_query_doc)
_add(EX3, CK3B, "shape-b-l", "returns a (B, L) 'same document as the previous token' tensor instead of a (B, L, L) mask", False,
     doc_shape_bl)
_add(EX3, CK3B, "or-instead-of-and", "combines the two conditions with | instead of &", False,
     doc_or)
_add(EX3, CK3B, "tril-diag1", "causal part tril(diagonal=1): off by one, each query also sees the next key of its document", False,
     doc_tril_diag1)


# =====================================================================================
# 04 multi-head attention: check_head_contributions(head_contributions)
# =====================================================================================
EX4, CK4 = "04_multi_head_attention", "check_head_contributions"
from lessons_src import merge_heads, scaled_dot_product_attention, split_heads  # noqa: E402


def _heads(x, attention, mask):
    H = attention.num_heads
    q = split_heads(attention.w_q(x), H)
    k = split_heads(attention.w_k(x), H)
    v = split_heads(attention.w_v(x), H)
    heads, _ = scaled_dot_product_attention(q, k, v, mask)
    return heads  # (B, H, L, d_k)


def hc_right_einsum(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    B, H, L, d_k = heads.shape
    W = attention.w_o.weight.view(-1, H, d_k)  # (D_out, H, d_k): column block h is head h
    return torch.einsum("bhld,ohd->bhlo", heads, W)


def hc_right_zero_pad(x, attention, mask=None):
    H = attention.num_heads
    _, weights = attention(x, x, x, mask)  # (B, H, L, L)
    v = split_heads(attention.w_v(x), H)
    heads = weights @ v  # (B, H, L, d_k)
    out = []
    for h in range(H):
        only_h = torch.zeros_like(heads)
        only_h[:, h] = heads[:, h]
        out.append(F.linear(merge_heads(only_h), attention.w_o.weight))  # no bias
    return torch.stack(out, dim=1)


def hc_right_loop_blocks(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    d_k = heads.size(-1)
    blocks = attention.w_o.weight.split(d_k, dim=1)  # H blocks of (D, d_k)
    return torch.stack([heads[:, h] @ blocks[h].T for h in range(len(blocks))], dim=1)


def hc_bias_in_every_head(x, attention, mask=None):
    H = attention.num_heads
    heads = _heads(x, attention, mask)
    out = []
    for h in range(H):
        only_h = torch.zeros_like(heads)
        only_h[:, h] = heads[:, h]
        out.append(attention.w_o(merge_heads(only_h)))  # adds b_O for every head
    return torch.stack(out, dim=1)


def hc_bias_split_over_heads(x, attention, mask=None):
    c = hc_right_einsum(x, attention, mask)
    if attention.w_o.bias is not None:
        c = c + attention.w_o.bias / attention.num_heads
    return c


def hc_rows_not_columns(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    d_k = heads.size(-1)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[h * d_k:(h + 1) * d_k, :] for h in range(attention.num_heads)], dim=1)


def hc_interleaved_blocks(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    B, H, L, d_k = heads.shape
    W = attention.w_o.weight.view(-1, d_k, H)  # feature h, h+H, h+2H, ... taken as head h
    return torch.einsum("bhld,odh->bhlo", heads, W)


def hc_mask_ignored(x, attention, mask=None):
    return hc_right_einsum(x, attention, None)


def hc_mask_inverted(x, attention, mask=None):
    return hc_right_einsum(x, attention, None if mask is None else ~mask)


def hc_scale_by_d_model(x, attention, mask=None):
    H = attention.num_heads
    q = split_heads(attention.w_q(x), H)
    k = split_heads(attention.w_k(x), H)
    v = split_heads(attention.w_v(x), H)
    scores = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))  # sqrt(D), not sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    d_k = heads.size(-1)
    W = attention.w_o.weight.view(-1, H, d_k)
    return torch.einsum("bhld,ohd->bhlo", heads, W)


def hc_view_without_transpose(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    q = attention.w_q(x).view(B, H, L, D // H)
    k = attention.w_k(x).view(B, H, L, D // H)
    v = attention.w_v(x).view(B, H, L, D // H)
    heads, _ = scaled_dot_product_attention(q, k, v, mask)
    W = attention.w_o.weight.view(D, H, D // H)
    return torch.einsum("bhld,ohd->bhlo", heads, W)


def hc_equal_share(x, attention, mask=None):
    out, _ = attention(x, x, x, mask)
    if attention.w_o.bias is not None:
        out = out - attention.w_o.bias
    H = attention.num_heads
    return (out / H).unsqueeze(1).expand(-1, H, -1, -1)


def hc_bhld_order(x, attention, mask=None):
    return hc_right_einsum(x, attention, mask).transpose(1, 2)  # (B, L, H, D)


def hc_skip_value_proj(x, attention, mask=None):
    H = attention.num_heads
    _, weights = attention(x, x, x, mask)
    heads = weights @ split_heads(x, H)  # forgets w_v: mixes the raw inputs
    d_k = heads.size(-1)
    W = attention.w_o.weight.view(-1, H, d_k)
    return torch.einsum("bhld,ohd->bhlo", heads, W)


def hc_subtract_bias_no_none_check(x, attention, mask=None):
    H = attention.num_heads
    heads = _heads(x, attention, mask)
    out = []
    for h in range(H):
        only_h = torch.zeros_like(heads)
        only_h[:, h] = heads[:, h]
        out.append(attention.w_o(merge_heads(only_h)) - attention.w_o.bias)  # TypeError when bias is None
    return torch.stack(out, dim=1)


_add(EX4, CK4, "right-einsum-blocks", "right: heads from split_heads/sdpa, w_o.weight viewed as (D, H, d_k), einsum per head", True,
     hc_right_einsum)
_add(EX4, CK4, "right-zero-pad-linear", "right: module's own weights @ v, each head alone in a zero-padded concat through F.linear without the bias", True,
     hc_right_zero_pad)
_add(EX4, CK4, "right-split-blocks", "right: w_o.weight.split(d_k, dim=1) column blocks, heads[:, h] @ block.T, stacked", True,
     hc_right_loop_blocks)
_add(EX4, CK4, "bias-in-every-head", "runs each zero-padded head through attention.w_o, so b_O is added once per head (H times in the sum)", False,
     hc_bias_in_every_head)
_add(EX4, CK4, "bias-split-over-heads", "adds b_O / H to every contribution, so the sum over heads already contains b_O (bias counted twice with the given formula)", False,
     hc_bias_split_over_heads)
_add(EX4, CK4, "rows-not-columns", "cuts w_o.weight into row blocks W[h*d_k:(h+1)*d_k, :] (forgets nn.Linear's transpose) instead of column blocks W[:, h*d_k:(h+1)*d_k].T", False,
     hc_rows_not_columns)
_add(EX4, CK4, "interleaved-blocks", "views w_o.weight as (D, d_k, H), giving head h the strided columns h, h+H, ... instead of the contiguous block", False,
     hc_interleaved_blocks)
_add(EX4, CK4, "mask-ignored", "never passes the mask to the attention, so padding/causal keys are attended", False,
     hc_mask_ignored)
_add(EX4, CK4, "mask-inverted", "passes ~mask (PyTorch's True = ignore convention) to the attention", False,
     hc_mask_inverted)
_add(EX4, CK4, "scale-by-sqrt-d-model", "writes its own attention and scales the scores by sqrt(D) = sqrt(d_model) instead of sqrt(d_k) = sqrt(D / H)", False,
     hc_scale_by_d_model)
_add(EX4, CK4, "view-without-transpose", "splits heads with .view(B, H, L, d_k) directly instead of view(B, L, H, d_k).transpose(1, 2), mixing positions and features", False,
     hc_view_without_transpose)
_add(EX4, CK4, "equal-share", "gives every head the same share (output - b_O) / H instead of its own block's contribution", False,
     hc_equal_share)
_add(EX4, CK4, "bhld-order", "returns shape (B, L, H, D) instead of (B, H, L, D)", False,
     hc_bhld_order)
_add(EX4, CK4, "skips-value-projection", "multiplies the module's weights with split_heads(x) instead of the projected values w_v(x)", False,
     hc_skip_value_proj)
_add(EX4, CK4, "bias-none-unhandled", "subtracts attention.w_o.bias after w_o without handling bias=None: right with biases, TypeError on a module built with bias=False", False,
     hc_subtract_bias_no_none_check)


# =====================================================================================
# 05 training attention: check_shift_attention(shift_task, expected_pattern)
# =====================================================================================
EX5, CK5 = "05_training_attention", "check_shift_attention"


def shift_task_right(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, x, target


def shift_task_right_gather(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    idx = (torch.arange(seq_len, device=x.device) - shift) % seq_len  # target[:, i] = x[:, (i - shift) % L]
    target = x.index_select(1, idx)
    return target.clone(), x, x.clone(), target


def pattern_right(seq_len, shift):
    return torch.eye(seq_len).roll(shift, dims=0)


def pattern_right_one_hot(seq_len, shift):
    cols = (torch.arange(seq_len) - shift) % seq_len
    return F.one_hot(cols, num_classes=seq_len).float()


def st_roll_negative(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=-shift, dims=1)
    return target, x, x, target


def st_roll_batch_dim(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=0)
    return target, x, x, target


def st_roll_feature_dim(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=-1)
    return target, x, x, target


def st_query_unshifted(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return x, target, target, target  # query = x, key = value = target: roles swapped


def st_no_generator(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, device=device)  # ignores the generator
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, x, target


def st_not_cyclic(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.cat([torch.zeros_like(x[:, :shift]), x[:, :-shift]], dim=1)  # zero-fill, no wrap
    return target, x, x, target


def st_value_redrawn(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    value = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, value, target


def st_value_shifted(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, target, target  # value = target instead of x


def st_seq_first(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(seq_len, batch_size, d_model, generator=generator, device=device)  # (L, B, D)
    target = torch.roll(x, shifts=shift, dims=0)
    return target, x, x, target


def st_query_is_key(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return x, x, x, target  # query = x: the query no longer carries what to look up


def ep_identity(seq_len, shift):
    return torch.eye(seq_len)


def ep_roll_columns(seq_len, shift):
    return torch.eye(seq_len).roll(shift, dims=1)  # 1 at column (i + shift) % L


def ep_plus_shift(seq_len, shift):
    p = torch.zeros(seq_len, seq_len)
    for i in range(seq_len):
        p[i, (i + shift) % seq_len] = 1.0
    return p


def ep_no_wrap(seq_len, shift):
    return torch.diag(torch.ones(seq_len - abs(shift)), -shift) if abs(shift) < seq_len else torch.zeros(seq_len, seq_len)


def ep_antidiagonal(seq_len, shift):
    return torch.eye(seq_len).flip(1)


def ep_bool(seq_len, shift):
    pos = torch.arange(seq_len)
    return pos[None, :] == (pos[:, None] - shift) % seq_len


def ep_no_modulo(seq_len, shift):
    p = torch.zeros(seq_len, seq_len)
    for i in range(seq_len):
        p[i, i - shift] = 1.0  # Python's negative index wraps once, but i - shift can leave [-L, L)
    return p


def ep_index_vector(seq_len, shift):
    return (torch.arange(seq_len) - shift) % seq_len  # (L,) column indices, not an (L, L) matrix


def ep_shift_not_reduced(seq_len, shift):
    # builds the wrap as two diagonals; right for 0 <= shift < L only
    return torch.diag(torch.ones(seq_len - shift), -shift) + torch.diag(torch.ones(shift), seq_len - shift)


_add(EX5, CK5, "right-roll-eye-roll", "right: torch.roll(x, shift, dims=1), pattern eye(L).roll(shift, dims=0)", True,
     shift_task_right, pattern_right)
_add(EX5, CK5, "right-gather-one-hot", "right: index_select with (i - shift) % L, pattern one_hot((i - shift) % L).float()", True,
     shift_task_right_gather, pattern_right_one_hot)
_add(EX5, CK5, "task-roll-negative", "shift_task rolls by -shift: target[:, i] = x[:, (i + shift) % L], the wrong direction", False,
     st_roll_negative, pattern_right)
_add(EX5, CK5, "task-roll-batch-dim", "shift_task rolls along dim 0 (the batch) instead of dim 1 (the sequence)", False,
     st_roll_batch_dim, pattern_right)
_add(EX5, CK5, "task-roll-feature-dim", "shift_task rolls along dim -1 (the features) instead of the sequence", False,
     st_roll_feature_dim, pattern_right)
_add(EX5, CK5, "task-query-key-swapped", "shift_task returns query = x and key = value = target: the shifted and unshifted roles swapped", False,
     st_query_unshifted, pattern_right)
_add(EX5, CK5, "task-query-is-x", "shift_task returns query = x (unshifted) instead of query = target", False,
     st_query_is_key, pattern_right)
_add(EX5, CK5, "task-ignores-generator", "shift_task draws x with torch.randn without generator=, so one seed does not give one batch", False,
     st_no_generator, pattern_right)
_add(EX5, CK5, "task-not-cyclic", "shift_task shifts with zero fill (cat of zeros and x[:, :-shift]) instead of wrapping around; breaks for shift 0 and negative", False,
     st_not_cyclic, pattern_right)
_add(EX5, CK5, "task-value-redrawn", "shift_task draws value with a second randn instead of value = x", False,
     st_value_redrawn, pattern_right)
_add(EX5, CK5, "task-value-shifted", "shift_task sets value = target (shifted) instead of the unshifted x", False,
     st_value_shifted, pattern_right)
_add(EX5, CK5, "task-seq-first", "shift_task draws x as (L, B, D), sequence first, and rolls dim 0", False,
     st_seq_first, pattern_right)
_add(EX5, CK5, "pattern-identity", "expected_pattern predicts the identity (query i attends key i) whatever the shift", False,
     shift_task_right, ep_identity)
_add(EX5, CK5, "pattern-roll-columns", "expected_pattern rolls the identity along the columns, putting the 1 at (i + shift) % L: the transposed pattern", False,
     shift_task_right, ep_roll_columns)
_add(EX5, CK5, "pattern-plus-shift", "expected_pattern puts row i's 1 at key (i + shift) % L instead of (i - shift) % L", False,
     shift_task_right, ep_plus_shift)
_add(EX5, CK5, "pattern-no-wrap", "expected_pattern is torch.diag(ones(L - |shift|), -shift): forgets the wrap-around, so the first rows have no 1", False,
     shift_task_right, ep_no_wrap)
_add(EX5, CK5, "pattern-antidiagonal", "expected_pattern reuses the chapter's reversal pattern, the anti-diagonal", False,
     shift_task_right, ep_antidiagonal)
# Counted as right after it was measured: the exercise asks for "a tensor of 0s and 1s", which a bool tensor is.
_add(EX5, CK5, "pattern-bool", "expected_pattern returns a bool tensor instead of 0s and 1s as numbers", True,
     shift_task_right, ep_bool)
_add(EX5, CK5, "pattern-no-modulo", "expected_pattern indexes column i - shift without % L: IndexError for a negative shift or a shift >= L", False,
     shift_task_right, ep_no_modulo)
_add(EX5, CK5, "pattern-index-vector", "expected_pattern returns the (L,) vector of column indices instead of the (L, L) one-hot matrix", False,
     shift_task_right, ep_index_vector)
_add(EX5, CK5, "pattern-shift-not-reduced", "expected_pattern built from two diagonals without reducing shift mod L: right for 0 <= shift < L, error for negative or >= L", False,
     shift_task_right, ep_shift_not_reduced)


# =====================================================================================
# 06 encoder block: check_pre_ln_encoder(pre_ln_block, pre_ln_encoder)
# =====================================================================================
EX6, CK6 = "06_encoder_block", "check_pre_ln_encoder"


def block_right(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def block_right_functional(x, attention, ff, norm1, norm2, mask=None):
    h = F.layer_norm(x, norm1.normalized_shape, norm1.weight, norm1.bias, norm1.eps)
    attn_out, _weights = attention(query=h, key=h, value=h, mask=mask)
    y = attn_out.add(x)
    g = F.layer_norm(y, norm2.normalized_shape, norm2.weight, norm2.bias, norm2.eps)
    hidden = F.linear(g, ff.linear1.weight, ff.linear1.bias).clamp_min(0)
    return y + F.linear(hidden, ff.linear2.weight, ff.linear2.bias)


def encoder_right(x, layers, norm, mask=None):
    for layer in layers:
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


def encoder_right_reduce(x, layers, norm, mask=None):
    import functools
    out = functools.reduce(
        lambda h, layer: block_right_functional(h, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask=mask),
        list(layers), x)
    return norm(out)


def block_post_ln(x, attention, ff, norm1, norm2, mask=None):
    x = norm1(x + attention(x, x, x, mask)[0])
    x = norm2(x + ff.linear2(torch.relu(ff.linear1(x))))
    return x


def block_residual_from_normed(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = h + attention(h, h, h, mask)[0]  # adds back the normalised input
    h = norm2(x)
    x = h + ff.linear2(torch.relu(ff.linear1(h)))
    return x


def block_tuple_not_unpacked(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)  # forgets [0]: the attention returns (output, weights)
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def block_no_relu(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + ff.linear2(ff.linear1(norm2(x)))
    return x


def block_gelu(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + ff.linear2(F.gelu(ff.linear1(norm2(x))))
    return x


def block_ff_reads_input(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    a = x + attention(h, h, h, mask)[0]
    return a + ff.linear2(torch.relu(ff.linear1(norm2(x))))  # FFN reads the block input, not a


def block_relu_after_linear2(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + torch.relu(ff.linear2(torch.relu(ff.linear1(norm2(x)))))  # ReLU also on the FFN's output
    return x


def block_ff_no_residual(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    return ff.linear2(torch.relu(ff.linear1(norm2(x))))


def block_attn_no_residual(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = attention(h, h, h, mask)[0]
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def block_mask_dropped(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h)[0]
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def block_mask_inverted(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, None if mask is None else ~mask)[0]
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def block_kv_unnormed(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, x, x, mask)[0]  # only the query normalised
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def block_norm_after_ff_output(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + norm2(ff.linear2(torch.relu(ff.linear1(x))))  # norm on the sublayer output
    return x


def enc_no_final_norm(x, layers, norm, mask=None):
    for layer in layers:
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return x


def enc_norm_every_block(x, layers, norm, mask=None):
    for layer in layers:
        x = norm(block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask))
    return x


def enc_norm_first(x, layers, norm, mask=None):
    x = norm(x)
    for layer in layers:
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return x


def enc_mask_not_passed(x, layers, norm, mask=None):
    for layer in layers:
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2)
    return norm(x)


def enc_not_reassigned(x, layers, norm, mask=None):
    for layer in layers:
        out = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(out)


def enc_reversed(x, layers, norm, mask=None):
    for layer in reversed(list(layers)):
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


def enc_norm_before_each_block(x, layers, norm, mask=None):
    for layer in layers:
        x = block_right(norm(x), layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return x


def enc_stack_residual(x, layers, norm, mask=None):
    h = x
    for layer in layers:
        h = block_right(h, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x + h)  # an extra residual around the whole stack


def enc_return_in_loop(x, layers, norm, mask=None):
    for layer in layers:
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
        return norm(x)  # indented into the loop: returns after the first block


def enc_skip_first_layer(x, layers, norm, mask=None):
    for layer in list(layers)[1:]:
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "right-plain", "right: h = norm1(x); x + attn(h,h,h,mask)[0]; x + linear2(relu(linear1(norm2(x)))); stack then norm", True,
     block_right, encoder_right)
_add(EX6, CK6, "right-functional-reduce", "right: F.layer_norm / F.linear / clamp_min(0) written out, stack with functools.reduce", True,
     block_right_functional, encoder_right_reduce)
_add(EX6, CK6, "block-post-ln", "block is post-LN: norm(x + sublayer(x)) for both sublayers, as in the chapter, not pre-LN", False,
     block_post_ln, encoder_right)
_add(EX6, CK6, "block-residual-from-normed", "residual adds the normalised input h = LN(x) instead of the raw x: h + sublayer(h)", False,
     block_residual_from_normed, encoder_right)
_add(EX6, CK6, "block-tuple-not-unpacked", "adds the attention's (output, weights) tuple to x without [0]: TypeError", False,
     block_tuple_not_unpacked, encoder_right)
_add(EX6, CK6, "block-no-relu", "feed-forward without the ReLU: linear2(linear1(.)), a single linear map", False,
     block_no_relu, encoder_right)
_add(EX6, CK6, "block-gelu", "feed-forward uses GELU instead of ReLU", False,
     block_gelu, encoder_right)
_add(EX6, CK6, "block-ff-reads-input", "feed-forward sublayer reads norm2 of the block's input x instead of the x after the attention residual (parallel branches)", False,
     block_ff_reads_input, encoder_right)
_add(EX6, CK6, "block-relu-after-linear2", "applies ReLU after linear2 as well (max(0, .) around the whole FFN), so the FFN output is never negative", False,
     block_relu_after_linear2, encoder_right)
_add(EX6, CK6, "block-ff-no-residual", "feed-forward sublayer has no residual: returns FFN(LN2(x)) instead of x + FFN(LN2(x))", False,
     block_ff_no_residual, encoder_right)
_add(EX6, CK6, "block-attn-no-residual", "attention sublayer has no residual: x = MultiHead(h, h, h) instead of x + MultiHead(h, h, h)", False,
     block_attn_no_residual, encoder_right)
_add(EX6, CK6, "block-mask-dropped", "does not pass the mask to the attention", False,
     block_mask_dropped, encoder_right)
_add(EX6, CK6, "block-mask-inverted", "passes ~mask to the attention (True = ignore convention)", False,
     block_mask_inverted, encoder_right)
_add(EX6, CK6, "block-kv-unnormalised", "normalises only the query: attention(LN1(x), x, x) instead of attention(h, h, h)", False,
     block_kv_unnormed, encoder_right)
_add(EX6, CK6, "block-norm-on-ff-output", "feed-forward reads the un-normalised x and norm2 is applied to the FFN's output instead of its input", False,
     block_norm_after_ff_output, encoder_right)
_add(EX6, CK6, "enc-no-final-norm", "stack forgets the final norm: returns the last block's un-normalised output", False,
     block_right, enc_no_final_norm)
_add(EX6, CK6, "enc-norm-every-block", "stack applies the final norm after every block instead of once at the end", False,
     block_right, enc_norm_every_block)
_add(EX6, CK6, "enc-norm-at-start", "stack applies norm to the input before the blocks instead of after them", False,
     block_right, enc_norm_first)
_add(EX6, CK6, "enc-mask-not-passed", "stack does not pass mask on to the blocks", False,
     block_right, enc_mask_not_passed)
_add(EX6, CK6, "enc-not-reassigned", "loop writes out = block(x, ...) without updating x, so only the last block runs on the original input", False,
     block_right, enc_not_reassigned)
_add(EX6, CK6, "enc-reversed-order", "runs the layers in reverse order", False,
     block_right, enc_reversed)
_add(EX6, CK6, "enc-norm-before-each-block", "applies the stack's norm to the input of every block and not after the last one, so the output is un-normalised", False,
     block_right, enc_norm_before_each_block)
_add(EX6, CK6, "enc-stack-residual", "adds an extra residual around the whole stack: norm(x + blocks(x))", False,
     block_right, enc_stack_residual)
_add(EX6, CK6, "enc-return-in-loop", "return norm(x) indented inside the for loop: only the first block runs (right for a one-block stack)", False,
     block_right, enc_return_in_loop)
_add(EX6, CK6, "enc-skip-first-layer", "off by one in the loop: iterates over layers[1:], skipping the first block", False,
     block_right, enc_skip_first_layer)
