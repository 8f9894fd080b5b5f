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


def att_right_einsum(query, key, value, mask=None):
    d_k = query.shape[-1]
    scores = torch.einsum("...qd,...kd->...qk", query, key) / d_k ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros_like(weights))
    return torch.einsum("...qk,...kv->...qv", weights, value), weights


_add(EX1, CK1, "right-einsum-finfo-min", "correct: einsum scores, finfo.min fill, torch.where zeroes empty rows",
     True, att_right_einsum)


def att_right_nan_to_num(query, key, value, mask=None):
    scores = query.matmul(key.mT) * (1.0 / math.sqrt(key.size(-1)))
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights.matmul(value), weights


_add(EX1, CK1, "right-nan-to-num", "correct: -inf via torch.where, NaN of empty rows replaced by 0 with nan_to_num",
     True, att_right_nan_to_num)


def att_softmax_dim_left(query, key, value, mask=None):
    # fixed transpose, mask polarity and empty-row axis, but kept the softmax over dim=-2
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "softmax-over-queries-left",
     "softmax taken over dim=-2 (the queries) so columns, not query rows, sum to 1; the other three bugs are fixed",
     False, att_softmax_dim_left)


def att_transpose_left(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(0, 1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "transpose-0-1-left",
     "kept key.transpose(0, 1): right for a 2-D key but swaps the batch and length dims of batched keys "
     "(wrong pairing or a shape error); other bugs fixed",
     False, att_transpose_left)


def att_mask_polarity_left(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "mask-polarity-left",
     "masked_fill(mask, -inf) still hides the allowed positions (True = may attend read as True = hide); "
     "other bugs fixed", False, att_mask_polarity_left)


def att_empty_row_axis_left(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "empty-row-any-dim-2",
     "empty-query test uses mask.any(dim=-2) (keys no query sees) instead of dim=-1, so an all-False query row "
     "stays NaN (and a key column nobody sees is zeroed)", False, att_empty_row_axis_left)


def att_empty_row_removed(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "empty-row-line-deleted",
     "deleted the empty-row line instead of fixing it: a query that may attend to nothing gets NaN weights and output",
     False, att_empty_row_removed)


def att_empty_row_no_keepdim(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "empty-row-no-keepdim",
     "mask.any(dim=-1) without keepdim=True: the (..., Lq) flag broadcasts along the key axis, so it zeroes "
     "key columns instead of the empty query row (NaN stays, or a shape error when Lq != Lk)",
     False, att_empty_row_no_keepdim)


def att_scale_dk(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / d_k
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "divide-by-dk",
     "while fixing the transpose line also dropped math.sqrt: scores divided by d_k instead of sqrt(d_k)",
     False, att_scale_dk)


def att_dk_from_dim1(query, key, value, mask=None):
    d_k = query.shape[1]
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "dk-from-dim-1",
     "d_k read as query.shape[1]: right for an unbatched (Lq, d_k) query but the sequence length (or heads) "
     "for batched inputs, so the scale is wrong there", False, att_dk_from_dim1)


def att_fill_zero(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


_add(EX1, CK1, "mask-fill-zero",
     "masked scores set to 0 instead of -inf, so masked keys still get a positive weight exp(0)/sum",
     False, att_fill_zero)


def att_mask_after_softmax(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    output = weights @ value
    return output, weights


_add(EX1, CK1, "mask-weights-after-softmax",
     "mask applied by multiplying the weights after the softmax, without renormalising: masked weights are 0 but "
     "rows no longer sum to 1", False, att_mask_after_softmax)


def att_manual_softmax_overflow(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    denom = e.sum(dim=-1, keepdim=True)
    weights = torch.where(denom > 0, e / denom, torch.zeros_like(e))
    output = weights @ value
    return output, weights


_add(EX1, CK1, "manual-softmax-no-max-shift",
     "softmax rewritten by hand as exp(s)/sum(exp(s)) without subtracting the row max: overflows to inf/inf = NaN "
     "when scores are in the hundreds", False, att_manual_softmax_overflow)


def att_swapped_return(query, key, value, mask=None):
    out, w = att_right_einsum(query, key, value, mask)
    return w, out


_add(EX1, CK1, "returns-weights-output",
     "returns (weights, output) instead of (output, weights)", False, att_swapped_return)


# =====================================================================================
# 02 scaling: check_attention_weights(attention_weights)
# =====================================================================================
EX2, CK2 = "02_scaling", "check_attention_weights"


def aw_right_logsoftmax(query, key, temperature=None):
    tau = math.sqrt(query.shape[-1]) if temperature is None else float(temperature)
    scores = torch.einsum("...id,...jd->...ij", query, key)
    return torch.log_softmax(scores / tau, dim=-1).exp()


_add(EX2, CK2, "right-log-softmax-exp", "correct: einsum scores / tau, exp(log_softmax) over keys", True,
     aw_right_logsoftmax)


def aw_right_manual_stable(query, key, temperature=None):
    if temperature is None:
        temperature = key.size(-1) ** 0.5
    s = (query @ key.transpose(-1, -2)) / temperature
    s = s - s.amax(dim=-1, keepdim=True)
    e = s.exp()
    return e / e.sum(dim=-1, keepdim=True)


_add(EX2, CK2, "right-manual-stable", "correct: hand-written softmax with the row max subtracted", True,
     aw_right_manual_stable)


def aw_no_scale(query, key, temperature=None):
    scores = query @ key.transpose(-2, -1)
    if temperature is not None:
        scores = scores / temperature
    return torch.softmax(scores, dim=-1)


_add(EX2, CK2, "no-default-scaling",
     "when temperature is None the scores are not divided at all (no sqrt(d_k) default)", False, aw_no_scale)


def aw_divide_dk(query, key, temperature=None):
    tau = query.size(-1) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "default-dk-not-sqrt",
     "default temperature is d_k instead of sqrt(d_k)", False, aw_divide_dk)


def aw_precedence(query, key, temperature=None):
    d_k = query.size(-1)
    tau = d_k ** 1 / 2 if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "power-precedence-dk-over-2",
     "wrote d_k ** 1 / 2, which Python reads as d_k / 2, so the default divides by d_k/2 instead of sqrt(d_k)",
     False, aw_precedence)


def aw_wrong_dim_size(query, key, temperature=None):
    tau = math.sqrt(query.size(1)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "sqrt-of-size-1",
     "d_k taken as query.size(1): fine for (Lq, d_k) but the length/heads dimension for batched inputs",
     False, aw_wrong_dim_size)


def aw_softmax_queries(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-2)


_add(EX2, CK2, "softmax-over-queries",
     "softmax over dim=-2 (queries) instead of dim=-1 (keys): columns sum to 1, rows do not", False,
     aw_softmax_queries)


def aw_temperature_ignored(query, key, temperature=None):
    d_k = query.size(-1)
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k), dim=-1)


_add(EX2, CK2, "temperature-ignored",
     "always divides by sqrt(d_k); the temperature argument is never used", False, aw_temperature_ignored)


def aw_temperature_times_sqrt(query, key, temperature=None):
    d_k = query.size(-1)
    tau = math.sqrt(d_k) * (1.0 if temperature is None else temperature)
    return torch.softmax(query @ key.transpose(-2, -1) / tau, dim=-1)


_add(EX2, CK2, "temperature-multiplies-sqrt-dk",
     "treats temperature as a factor on the standard scaling: divides by temperature*sqrt(d_k) instead of by "
     "temperature alone", False, aw_temperature_times_sqrt)


def aw_temperature_multiplied(query, key, temperature=None):
    scores = query @ key.transpose(-2, -1)
    if temperature is None:
        return torch.softmax(scores / math.sqrt(query.size(-1)), dim=-1)
    return torch.softmax(scores * temperature, dim=-1)


_add(EX2, CK2, "temperature-multiplies",
     "scores multiplied by the given temperature instead of divided by it", False, aw_temperature_multiplied)


def aw_unstable(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    e = torch.exp(query @ key.transpose(-2, -1) / tau)
    return e / e.sum(dim=-1, keepdim=True)


_add(EX2, CK2, "manual-softmax-overflow",
     "hand-written softmax exp(s)/sum without subtracting the row max: inf/inf = NaN for temperature=0.05 or "
     "scores hundreds apart", False, aw_unstable)


def aw_scale_after_softmax(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1), dim=-1) / tau


_add(EX2, CK2, "divide-weights-not-scores",
     "divides the weights after the softmax by tau instead of the scores before it; rows no longer sum to 1",
     False, aw_scale_after_softmax)


def aw_key_T(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    kt = key.transpose(0, 1) if key.dim() > 2 else key.t()
    return torch.softmax(query @ kt / tau, dim=-1)


_add(EX2, CK2, "transpose-first-two-dims",
     "transposes key's first two dims (key.transpose(0, 1)) instead of the last two: right only without batch "
     "dims, wrong pairing or a shape error with (B,) or (B, H)", False, aw_key_T)


# =====================================================================================
# 03 masking part 1: check_masks(make_causal_mask, make_padding_mask, combine_masks)
# =====================================================================================
EX3, CK3 = "03_masking", "check_masks"


def causal_ok(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))


def padding_ok(lengths, max_len):
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def combine_ok(padding, causal):
    return padding[:, None, :] & causal[None, :, :]


_add(EX3, CK3, "right-tril-arange", "correct: bool tril, arange < lengths, padding on the key axis", True,
     causal_ok, padding_ok, combine_ok)


def causal_ok2(seq_len):
    i = torch.arange(seq_len)
    return i.unsqueeze(1) >= i.unsqueeze(0)


def padding_ok2(lengths, max_len):
    pos = torch.arange(max_len).expand(lengths.numel(), max_len)
    return pos.lt(lengths.unsqueeze(-1))


def combine_ok2(padding, causal):
    B, L = padding.shape
    return torch.logical_and(causal.expand(B, L, L), padding.unsqueeze(-2).expand(B, L, L))


_add(EX3, CK3, "right-comparisons-expand",
     "correct: causal by index comparison, padding by expand+lt, logical_and of expanded masks", True,
     causal_ok2, padding_ok2, combine_ok2)


def causal_triu(seq_len):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool))


_add(EX3, CK3, "causal-triu",
     "causal mask built with triu: True where j >= i, so each query sees the future instead of the past (transposed)",
     False, causal_triu, padding_ok, combine_ok)


def causal_strict(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(diagonal=-1)


_add(EX3, CK3, "causal-strict-diagonal",
     "tril(diagonal=-1): j < i, a position may not see itself (diagonal missing, row 0 empty)", False,
     causal_strict, padding_ok, combine_ok)


def causal_float(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len))


_add(EX3, CK3, "causal-float",
     "causal mask is a float 0/1 tensor (torch.ones without dtype=torch.bool); values right but dtype wrong",
     False, causal_float, padding_ok, combine_ok)


def causal_blocked(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal=1)


_add(EX3, CK3, "causal-true-means-blocked",
     "causal mask in the nn.MultiheadAttention convention: True marks the future keys to hide (inverted polarity)",
     False, causal_blocked, padding_ok, combine_ok)


def padding_le(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]


_add(EX3, CK3, "padding-off-by-one",
     "padding mask uses j <= lengths[b]: one padding token too many marked real, and a length-0 row gets one True",
     False, causal_ok, padding_le, combine_ok)


def padding_ignores_max_len(lengths, max_len):
    return torch.arange(int(lengths.max()))[None, :] < lengths[:, None]


_add(EX3, CK3, "padding-ignores-max-len",
     "padding mask width is lengths.max() instead of max_len: wrong shape when max_len exceeds the longest length",
     False, causal_ok, padding_ignores_max_len, combine_ok)


def padding_inverted(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]


_add(EX3, CK3, "padding-true-on-pads",
     "padding mask True on the padding positions (j >= lengths[b]) instead of the real tokens", False,
     causal_ok, padding_inverted, combine_ok)


def padding_no_unsqueeze(lengths, max_len):
    return torch.arange(max_len) < lengths


_add(EX3, CK3, "padding-no-broadcast-axis",
     "compares arange(max_len) with lengths without adding axes: a shape error (or an elementwise (B,) result "
     "when B == max_len) instead of (B, max_len)", False, causal_ok, padding_no_unsqueeze, combine_ok)


def combine_query_axis(padding, causal):
    return padding[:, :, None] & causal[None]


_add(EX3, CK3, "combine-padding-on-query-axis",
     "padding broadcast along the query axis (padding[:, :, None]): hides padding query rows instead of padding "
     "key columns", False, causal_ok, padding_ok, combine_query_axis)


def combine_both_axes(padding, causal):
    return padding[:, :, None] & padding[:, None, :] & causal


_add(EX3, CK3, "combine-padding-both-axes",
     "padding applied to both queries and keys: padding query rows become all False though the text says they "
     "keep their row", False, causal_ok, padding_ok, combine_both_axes)


def combine_or(padding, causal):
    return padding[:, None, :] | causal[None]


_add(EX3, CK3, "combine-with-or",
     "combines the masks with | (either) instead of & (both): padding keys visible to later queries, future real "
     "keys visible", False, causal_ok, padding_ok, combine_or)


def combine_float(padding, causal):
    return padding[:, None, :].float() * causal.float()


_add(EX3, CK3, "combine-float-product",
     "combines by multiplying float copies: right values but a float mask, not bool", False,
     causal_ok, padding_ok, combine_float)


# =====================================================================================
# 03 masking part 2: check_document_causal_mask(document_causal_mask)
# =====================================================================================
CK3b = "check_document_causal_mask"


def doc_right(doc_ids):
    L = doc_ids.size(-1)
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.ones(L, L, dtype=torch.bool, device=doc_ids.device).tril()
    return same & causal


_add(EX3, CK3b, "right-eq-and-tril", "correct: (B,L,1)==(B,1,L) and a bool tril", True, doc_right)


def doc_right_diff(doc_ids):
    pos = torch.arange(doc_ids.shape[1])
    same = (doc_ids.unsqueeze(2) - doc_ids.unsqueeze(1)) == 0
    past = (pos.view(-1, 1) - pos.view(1, -1)) >= 0
    return same.logical_and(past.unsqueeze(0))


_add(EX3, CK3b, "right-differences", "correct: same id via zero difference, causal via i - j >= 0", True,
     doc_right_diff)


def doc_no_causal(doc_ids):
    return doc_ids[:, :, None] == doc_ids[:, None, :]


_add(EX3, CK3b, "same-doc-only-not-causal",
     "only the same-document condition: tokens see later tokens of their own document (bidirectional blocks)",
     False, doc_no_causal)


def doc_causal_only(doc_ids):
    B, L = doc_ids.shape
    return torch.ones(L, L, dtype=torch.bool).tril().expand(B, L, L)


_add(EX3, CK3b, "causal-only-docs-leak",
     "plain causal mask, doc_ids ignored: each document sees the documents packed before it", False,
     doc_causal_only)


def doc_strict(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril(-1)


_add(EX3, CK3b, "strict-causal-no-diagonal",
     "causal condition j < i instead of j <= i: no token sees itself and each document's first token sees nothing",
     False, doc_strict)


def doc_transposed(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).triu()


_add(EX3, CK3b, "triu-transposed",
     "causal part written with triu (j >= i): an upper triangle per document, the transpose of the right mask",
     False, doc_transposed)


def doc_first_row(doc_ids):
    B, L = doc_ids.shape
    d = doc_ids[0]
    m = (d[:, None] == d[None, :]) & torch.ones(L, L, dtype=torch.bool).tril()
    return m.unsqueeze(0).expand(B, L, L)


_add(EX3, CK3b, "first-row-for-all",
     "builds the mask from doc_ids[0] only and expands it to every row of the batch", False, doc_first_row)


def doc_float(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]).float() * torch.tril(torch.ones(L, L))


_add(EX3, CK3b, "float-mask",
     "multiplies a float same-doc matrix by torch.tril(torch.ones(L, L)): right 0/1 values but float, not bool",
     False, doc_float)


def doc_inverted(doc_ids):
    L = doc_ids.size(1)
    allowed = (doc_ids[:, :, None] == doc_ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril()
    return ~allowed


_add(EX3, CK3b, "inverted-true-blocks",
     "returns the positions to hide (True = blocked), the inverse of the may-attend mask", False, doc_inverted)


def doc_or(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) | torch.ones(L, L, dtype=torch.bool).tril()


_add(EX3, CK3b, "or-instead-of-and",
     "combines the two conditions with | instead of &: earlier documents leak in and later tokens of the same "
     "document are visible", False, doc_or)


def doc_flat_BL(doc_ids):
    # compares each position's id with the previous one: "same document as the token before" -> (B, L)
    prev = torch.cat([doc_ids[:, :1], doc_ids[:, :-1]], dim=1)
    return doc_ids == prev


_add(EX3, CK3b, "returns-B-L",
     "returns a (B, L) 'same document as the previous token' flag instead of a (B, L, L) query-by-key mask",
     False, doc_flat_BL)


def doc_ge_ids(doc_ids):
    L = doc_ids.size(1)
    return (doc_ids[:, :, None] >= doc_ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril()


_add(EX3, CK3b, "id-ge-instead-of-eq",
     "document condition written as doc_i >= doc_j (key in same or earlier document): with growing ids it lets "
     "every document see the earlier ones", False, doc_ge_ids)


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
    return scaled_dot_product_attention(q, k, v, mask)[0]  # (B, H, L, d_k)


def hc_right_einsum(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    B, H, L, dk = heads.shape
    W = attention.w_o.weight.view(-1, H, dk)  # (D_out, H, d_k)
    return torch.einsum("bhld,ehd->bhle", heads, W)


_add(EX4, CK4, "right-einsum-blocks", "correct: W_O viewed (D, H, d_k), einsum per head, no bias", True,
     hc_right_einsum)


def hc_right_zero_others(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    H = heads.size(1)
    out = []
    for h in range(H):
        only = torch.zeros_like(heads)
        only[:, h] = heads[:, h]
        out.append(F.linear(merge_heads(only), attention.w_o.weight))
    return torch.stack(out, dim=1)


_add(EX4, CK4, "right-zero-other-heads",
     "correct: for each head zero the others in the concat and apply W_O without bias (F.linear)", True,
     hc_right_zero_others)


def hc_bias_each(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    H = heads.size(1)
    out = []
    for h in range(H):
        only = torch.zeros_like(heads)
        only[:, h] = heads[:, h]
        out.append(attention.w_o(merge_heads(only)))
    return torch.stack(out, dim=1)


_add(EX4, CK4, "bias-in-every-head",
     "applies attention.w_o to each zero-padded head, so b_O is added to every contribution (H times in the sum)",
     False, hc_bias_each)


def hc_bias_split(x, attention, mask=None):
    c = hc_right_einsum(x, attention, mask)
    if attention.w_o.bias is not None:
        c = c + attention.w_o.bias / attention.num_heads
    return c


_add(EX4, CK4, "bias-shared-over-heads",
     "spreads b_O evenly over the heads (bias / H added to each contribution) although the bias belongs to no head",
     False, hc_bias_split)


def hc_row_blocks(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    H, dk = heads.size(1), heads.size(-1)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[h * dk:(h + 1) * dk, :] for h in range(H)], dim=1)


_add(EX4, CK4, "blocks-from-rows",
     "cuts W_O's blocks from the rows (output dim) of w_o.weight, weight[h*dk:(h+1)*dk, :], instead of its "
     "columns (input dim) transposed", False, hc_row_blocks)


def hc_interleaved(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    H, dk = heads.size(1), heads.size(-1)
    W = attention.w_o.weight.view(-1, dk, H)  # wrong: head h taken as columns h, h+H, ...
    return torch.einsum("bhld,edh->bhle", heads, W)


_add(EX4, CK4, "interleaved-columns",
     "views w_o.weight as (D, d_k, H), giving head h the strided columns h, h+H, ... instead of a contiguous "
     "block of d_k columns", False, hc_interleaved)


def hc_no_mask(x, attention, mask=None):
    return hc_right_einsum(x, attention, None)


_add(EX4, CK4, "mask-not-used",
     "never passes mask to the attention: padding and causal cases attend everywhere", False, hc_no_mask)


def hc_no_scale(x, attention, mask=None):
    H = attention.num_heads
    q = split_heads(attention.w_q(x), H)
    k = split_heads(attention.w_k(x), H)
    v = split_heads(attention.w_v(x), H)
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    heads = torch.softmax(s, dim=-1) @ v
    dk = heads.size(-1)
    W = attention.w_o.weight.view(-1, H, dk)
    return torch.einsum("bhld,ehd->bhle", heads, W)


_add(EX4, CK4, "manual-attention-no-scale",
     "recomputes the heads by hand and forgets to divide the scores by sqrt(d_k)", False, hc_no_scale)


def hc_weights_times_x(x, attention, mask=None):
    _, weights = attention(x, x, x, mask)
    H = attention.num_heads
    heads = weights @ split_heads(x, H)  # forgot w_v
    dk = heads.size(-1)
    W = attention.w_o.weight.view(-1, H, dk)
    return torch.einsum("bhld,ehd->bhle", heads, W)


_add(EX4, CK4, "values-not-projected",
     "uses the module's weights but multiplies them with split_heads(x) instead of the projected values w_v(x)",
     False, hc_weights_times_x)


def hc_bad_split(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    dk = D // H
    q = attention.w_q(x).reshape(B, H, L, dk)
    k = attention.w_k(x).reshape(B, H, L, dk)
    v = attention.w_v(x).reshape(B, H, L, dk)
    heads = scaled_dot_product_attention(q, k, v, mask)[0]
    W = attention.w_o.weight.view(-1, H, dk)
    return torch.einsum("bhld,ehd->bhle", heads, W)


_add(EX4, CK4, "reshape-without-transpose",
     "splits heads with reshape(B, H, L, d_k) straight from (B, L, D), without the (B, L, H, d_k) view and "
     "transpose, so positions and features get mixed", False, hc_bad_split)


def hc_BLHD(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    H, dk = heads.size(1), heads.size(-1)
    W = attention.w_o.weight.view(-1, H, dk)
    return torch.einsum("bhld,ehd->blhe", heads, W)


_add(EX4, CK4, "layout-B-L-H-D",
     "returns contributions as (B, L, H, D) instead of (B, H, L, D)", False, hc_BLHD)


def hc_split_output(x, attention, mask=None):
    out = attention(x, x, x, mask)[0]
    if attention.w_o.bias is not None:
        out = out - attention.w_o.bias
    H = attention.num_heads
    B, L, D = out.shape
    dk = D // H
    c = out.new_zeros(B, H, L, D)
    for h in range(H):
        c[:, h, :, h * dk:(h + 1) * dk] = out[..., h * dk:(h + 1) * dk]
    return c


_add(EX4, CK4, "split-final-output",
     "cuts the layer's final output (minus bias) into H feature blocks and calls block h head h's contribution: "
     "the sum is right but W_O mixes all heads into every feature", False, hc_split_output)


def hc_scale_D(x, attention, mask=None):
    H = attention.num_heads
    q = split_heads(attention.w_q(x), H)
    k = split_heads(attention.w_k(x), H)
    v = split_heads(attention.w_v(x), H)
    s = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    heads = torch.softmax(s, dim=-1) @ v
    dk = heads.size(-1)
    return torch.einsum("bhld,ehd->bhle", heads, attention.w_o.weight.view(-1, H, dk))


_add(EX4, CK4, "scale-sqrt-d-model",
     "manual heads scaled by sqrt(D) (d_model) instead of sqrt(d_k) (head size)", False, hc_scale_D)


# =====================================================================================
# 05 training attention: check_shift_attention(shift_task, expected_pattern)
# =====================================================================================
EX5, CK5 = "05_training_attention", "check_shift_attention"


def st_ok(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, x, target


def ep_ok(seq_len, shift):
    return torch.eye(seq_len).roll(-shift, dims=1)


_add(EX5, CK5, "right-roll", "correct: torch.roll(x, shift, dims=1); eye rolled by -shift along columns", True,
     st_ok, ep_ok)


def st_ok2(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    src = (torch.arange(seq_len, device=x.device) - shift) % seq_len
    target = x.index_select(1, src)
    return target, x, x, target


def ep_ok2(seq_len, shift):
    i = torch.arange(seq_len)
    return (i[None, :] == ((i - shift) % seq_len)[:, None]).float()


_add(EX5, CK5, "right-index-select",
     "correct: index_select with (i - shift) % L; pattern by comparing column index with (i - shift) % L", True,
     st_ok2, ep_ok2)


def st_roll_neg(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=-shift, dims=1)
    return target, x, x, target


_add(EX5, CK5, "roll-wrong-direction",
     "torch.roll(x, -shift): target[:, i] = x[:, (i + shift) % L], the shift goes the other way", False,
     st_roll_neg, ep_ok)


def st_swapped(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shift, 1)
    return x, target, target, target


_add(EX5, CK5, "query-key-roles-swapped",
     "query = x and key = value = target: the shifted vectors are looked up instead of the unshifted ones",
     False, st_swapped, ep_ok)


def st_no_generator(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, device=device)
    target = torch.roll(x, shift, 1)
    return target, x, x, target


_add(EX5, CK5, "generator-not-used",
     "draws x without generator=generator, so one seed does not give one batch (not reproducible)", False,
     st_no_generator, ep_ok)


def st_wrong_dim(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shift, dims=0)
    return target, x, x, target


_add(EX5, CK5, "roll-batch-dim",
     "rolls along dims=0 (the batch) instead of dims=1 (the sequence)", False, st_wrong_dim, ep_ok)


def st_value_shifted(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shift, 1)
    return target, x, target, target


_add(EX5, CK5, "value-is-target",
     "value set to the shifted target instead of x (key = x but value = target)", False, st_value_shifted, ep_ok)


def st_slice_no_mod(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.cat([x[:, -shift:], x[:, :-shift]], dim=1) if shift != 0 else x.clone()
    return target, x, x, target


_add(EX5, CK5, "slicing-without-modulo",
     "shift by slicing cat(x[:, -shift:], x[:, :-shift]) with no % L: wrong (or wrong length) for shift >= L",
     False, st_slice_no_mod, ep_ok)


def st_self(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shift, 1)
    return x, x, x, target


_add(EX5, CK5, "query-is-x",
     "query = x (plain self-attention) instead of query = target", False, st_self, ep_ok)


def ep_plus(seq_len, shift):
    i = torch.arange(seq_len)
    P = torch.zeros(seq_len, seq_len)
    P[i, (i + shift) % seq_len] = 1.0
    return P


_add(EX5, CK5, "pattern-i-plus-shift",
     "pattern puts row i's 1 at key (i + shift) % L instead of (i - shift) % L (direction of the shift confused)",
     False, st_ok, ep_plus)


def ep_identity(seq_len, shift):
    return torch.eye(seq_len)


_add(EX5, CK5, "pattern-identity",
     "predicts the diagonal (each query attends to its own position), ignoring the shift", False, st_ok,
     ep_identity)


def ep_no_wrap(seq_len, shift):
    return torch.diag(torch.ones(seq_len - shift), -shift)


_add(EX5, CK5, "pattern-no-wraparound",
     "torch.diag(ones(L - shift), -shift): a sub-diagonal without wrap-around, so the first `shift` rows are "
     "empty (and wrong size for negative shift or shift >= L)", False, st_ok, ep_no_wrap)


def ep_index_vector(seq_len, shift):
    return (torch.arange(seq_len) - shift) % seq_len


_add(EX5, CK5, "pattern-as-index-vector",
     "returns the (L,) vector of attended key indices instead of the (L, L) 0/1 matrix", False, st_ok,
     ep_index_vector)


# =====================================================================================
# 06 encoder block: check_pre_ln_encoder(pre_ln_block, pre_ln_encoder)
# =====================================================================================
EX6, CK6 = "06_encoder_block", "check_pre_ln_encoder"


def blk_ok(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def enc_ok(x, layers, norm, mask=None):
    for layer in layers:
        x = blk_ok(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "right-plain", "correct: x + attn(LN1 x), x + FFN(LN2 x); loop then final norm", True,
     blk_ok, enc_ok)


def blk_ok2(x, attention, ff, norm1, norm2, mask=None):
    attn_out, _ = attention(*(norm1(x),) * 3, mask=mask)
    y = torch.add(x, attn_out)
    return y + F.linear(F.linear(norm2(y), ff.linear1.weight, ff.linear1.bias).clamp_min(0.0),
                        ff.linear2.weight, ff.linear2.bias)


def enc_ok2(x, layers, norm, mask=None):
    import functools
    out = functools.reduce(lambda h, l: blk_ok2(h, l.self_attn, l.ff, l.norm1, l.norm2, mask), list(layers), x)
    return norm(out)


_add(EX6, CK6, "right-functional-reduce",
     "correct: F.linear + clamp_min(0) for the FFN, functools.reduce over the layers, final norm", True,
     blk_ok2, enc_ok2)


def blk_post_ln(x, attention, ff, norm1, norm2, mask=None):
    x = norm1(x + attention(x, x, x, mask)[0])
    x = norm2(x + ff.linear2(torch.relu(ff.linear1(x))))
    return x


_add(EX6, CK6, "post-ln-block",
     "wrote the chapter's post-LN block (LN after each residual sum) instead of pre-LN", False, blk_post_ln, enc_ok)


def blk_residual_from_h(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = h + attention(h, h, h, mask)[0]
    h2 = norm2(x)
    return h2 + ff.linear2(torch.relu(ff.linear1(h2)))


_add(EX6, CK6, "residual-adds-normalised",
     "residual adds the normalised input h = LN(x) instead of the raw x in both sublayers", False,
     blk_residual_from_h, enc_ok)


def blk_no_ffn_residual(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    return ff.linear2(torch.relu(ff.linear1(norm2(x))))


_add(EX6, CK6, "ffn-residual-missing",
     "feed-forward sublayer has no residual: returns FFN(LN2(x)) without adding x", False, blk_no_ffn_residual,
     enc_ok)


def blk_no_relu(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    return x + ff.linear2(ff.linear1(norm2(x)))


_add(EX6, CK6, "ffn-no-activation",
     "feed-forward written as linear2(linear1(.)) with no ReLU between", False, blk_no_relu, enc_ok)


def blk_gelu(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    return x + ff.linear2(F.gelu(ff.linear1(norm2(x))))


_add(EX6, CK6, "ffn-gelu",
     "uses GELU instead of the ReLU (max(0, .)) the formula asks for", False, blk_gelu, enc_ok)


def blk_ffn_reads_input(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    y = x + attention(h, h, h, mask)[0]
    return y + ff.linear2(torch.relu(ff.linear1(norm2(x))))


_add(EX6, CK6, "ffn-reads-block-input",
     "feed-forward reads LN2 of the block's input x instead of the output of the attention sublayer", False,
     blk_ffn_reads_input, enc_ok)


def blk_norm_on_ffn_output(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    return x + norm2(ff.linear2(torch.relu(ff.linear1(x))))


_add(EX6, CK6, "norm2-on-ffn-output",
     "second LayerNorm applied to the feed-forward's output, x + LN2(FFN(x)), instead of to its input", False,
     blk_norm_on_ffn_output, enc_ok)


def blk_kv_unnormed(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, x, x, mask)[0]
    return x + ff.linear2(torch.relu(ff.linear1(norm2(x))))


_add(EX6, CK6, "only-query-normalised",
     "attention(h, x, x): only the query is normalised, keys and values read the raw x", False, blk_kv_unnormed,
     enc_ok)


def blk_no_mask(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h)[0]
    return x + ff.linear2(torch.relu(ff.linear1(norm2(x))))


_add(EX6, CK6, "block-drops-mask",
     "the block never passes mask to the attention, so padding keys are attended", False, blk_no_mask, enc_ok)


def blk_tuple(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)
    return x + ff.linear2(torch.relu(ff.linear1(norm2(x))))


_add(EX6, CK6, "attention-tuple-not-unpacked",
     "adds the (output, weights) tuple returned by attention to x without taking [0] (raises a TypeError)",
     False, blk_tuple, enc_ok)


def enc_no_final_norm(x, layers, norm, mask=None):
    for layer in layers:
        x = blk_ok(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return x


_add(EX6, CK6, "encoder-no-final-norm",
     "stack returns the last residual stream without applying the final norm", False, blk_ok, enc_no_final_norm)


def enc_norm_each(x, layers, norm, mask=None):
    for layer in layers:
        x = norm(blk_ok(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask))
    return x


_add(EX6, CK6, "encoder-norm-every-block",
     "applies the final norm after every block inside the loop instead of once at the end", False, blk_ok,
     enc_norm_each)


def enc_not_chained(x, layers, norm, mask=None):
    out = x
    for layer in layers:
        out = blk_ok(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(out)


_add(EX6, CK6, "encoder-not-chained",
     "every block reads the original input x instead of the previous block's output, so only the last block counts",
     False, blk_ok, enc_not_chained)


def enc_no_mask(x, layers, norm, mask=None):
    for layer in layers:
        x = blk_ok(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2)
    return norm(x)


_add(EX6, CK6, "encoder-drops-mask",
     "stack does not pass mask on to its blocks", False, blk_ok, enc_no_mask)


def enc_reversed(x, layers, norm, mask=None):
    for layer in reversed(list(layers)):
        x = blk_ok(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


_add(EX6, CK6, "encoder-reversed-order",
     "runs the blocks in reverse order", False, blk_ok, enc_reversed)
