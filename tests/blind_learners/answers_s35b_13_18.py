"""Blind answers for exercises 13 to 18, written from the exercise text alone."""
import math
import torch
import torch.nn.functional as F
import lessons_src

ANSWERS = []

def _add(exercise, check, name, intent, right, *fns):
    ANSWERS.append(dict(exercise=exercise, check=check, name=name, intent=intent, right=right, fns=tuple(fns)))


# ============================================================================================
# 13: ALiBi's biases
# ============================================================================================
EX13, CK13 = "13_alibi", "check_alibi_bias"


def _pow2_slopes(n):
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def _slopes_ok(H):
    if math.log2(H).is_integer():
        return _pow2_slopes(H)
    below = 2 ** math.floor(math.log2(H))
    return _pow2_slopes(below) + _pow2_slopes(2 * below)[0::2][: H - below]


def _distances(len_q, len_k):
    p = torch.arange(len_k - len_q, len_k)
    j = torch.arange(len_k)
    return (p[:, None] - j[None, :]).float()


def alibi_right_loops(num_heads, len_q, len_k):
    # Plain Python loops, the slopes from a while loop that doubles the power of 2.
    if num_heads & (num_heads - 1) == 0:
        slopes = [2 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)]
    else:
        p = 1
        while p * 2 < num_heads:
            p *= 2
        base = [2 ** (-8 * (h + 1) / p) for h in range(p)]
        extra = [2 ** (-8 * (h + 1) / (2 * p)) for h in range(2 * p)]
        slopes = base + [extra[t] for t in range(0, 2 * p, 2)][: num_heads - p]
    out = torch.zeros(num_heads, len_q, len_k)
    for h in range(num_heads):
        for i in range(len_q):
            pi = len_k - len_q + i
            for j in range(len_k):
                out[h, i, j] = -slopes[h] * (pi - j)
    return out
_add(EX13, CK13, "right-loops", "correct: nested Python loops, slopes built with a doubling while loop", True,
     alibi_right_loops)


def alibi_right_abs_exp2(num_heads, len_q, len_k):
    # |p_i - j| equals p_i - j on every entry a causal mask keeps; slopes via exp2 of a tensor.
    below = 2 ** int(math.floor(math.log2(num_heads)))
    first = torch.exp2(-8.0 * torch.arange(1, below + 1, dtype=torch.float64) / below)
    if below == num_heads:
        slopes = first
    else:
        second = torch.exp2(-8.0 * torch.arange(1, 2 * below + 1, 2, dtype=torch.float64) / (2 * below))
        slopes = torch.cat([first, second[: num_heads - below]])
    q = torch.arange(len_q) + (len_k - len_q)
    k = torch.arange(len_k)
    dist = (q.view(-1, 1) - k.view(1, -1)).abs().float()
    return -(slopes.float().view(-1, 1, 1) * dist)
_add(EX13, CK13, "right-abs-exp2",
     "correct: absolute distance (same as p_i - j where j <= p_i), slopes from torch.exp2 over odd indices", True,
     alibi_right_abs_exp2)


def alibi_sign_flipped(num_heads, len_q, len_k):
    s = torch.tensor(_slopes_ok(num_heads))
    return s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "sign-flipped",
     "forgot the minus sign: returns +beta_h*(p_i - j), so farther keys get a bonus instead of a penalty", False,
     alibi_sign_flipped)


def alibi_queries_from_zero(num_heads, len_q, len_k):
    s = torch.tensor(_slopes_ok(num_heads))
    p = torch.arange(len_q)
    j = torch.arange(len_k)
    return -s[:, None, None] * (p[:, None] - j[None, :]).float()
_add(EX13, CK13, "queries-at-start",
     "placed the queries at positions 0..L_q-1 (p_i = i) instead of the last L_q positions L_k-L_q+i; wrong when L_q < L_k",
     False, alibi_queries_from_zero)


def alibi_slopes_reversed(num_heads, len_q, len_k):
    s = torch.tensor(_slopes_ok(num_heads)).flip(0)
    return -s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "slopes-reversed",
     "slopes in reverse order: head 1 gets the smallest slope (1/256 for 8 heads) and the last head 1/2", False,
     alibi_slopes_reversed)


def alibi_slopes_fixed_8(num_heads, len_q, len_k):
    s = torch.tensor([2.0 ** (-h) for h in range(1, num_heads + 1)])
    return -s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "slopes-ignore-H",
     "used the 8-head slopes 2^-h for every H (beta_h = 2^-h), so the slopes do not depend on the number of heads",
     False, alibi_slopes_fixed_8)


def alibi_exponent_from_zero(num_heads, len_q, len_k):
    def p2(n):
        return [2.0 ** (-8.0 * h / n) for h in range(n)]  # h from 0: first slope is 1
    if math.log2(num_heads).is_integer():
        sl = p2(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        sl = p2(below) + p2(2 * below)[0::2][: num_heads - below]
    s = torch.tensor(sl)
    return -s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "slope-off-by-one",
     "counted heads from 0 in the slope: beta = 2^(-8h/H) for h = 0..H-1, so the first slope is 1 and all are twice too big",
     False, alibi_exponent_from_zero)


def alibi_precedence(num_heads, len_q, len_k):
    def p2(n):
        return [2 ** -8 * h / n for h in range(1, n + 1)]  # precedence: (2^-8) * h / n
    if math.log2(num_heads).is_integer():
        sl = p2(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        sl = p2(below) + p2(2 * below)[0::2][: num_heads - below]
    s = torch.tensor(sl)
    return -s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "operator-precedence",
     "wrote 2 ** -8 * h / n, which Python reads as (2^-8)*h/n: slopes grow linearly with h instead of 2^(-8h/H)",
     False, alibi_precedence)


def alibi_odd_slopes_wrong_half(num_heads, len_q, len_k):
    if math.log2(num_heads).is_integer():
        sl = _pow2_slopes(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        sl = _pow2_slopes(below) + _pow2_slopes(2 * below)[1::2][: num_heads - below]
    s = torch.tensor(sl)
    return -s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "non-pow2-even-slopes",
     "for H not a power of 2, appended the 2nd, 4th, ... slopes of 2H' heads ([1::2]) instead of the 1st, 3rd, ... ([0::2])",
     False, alibi_odd_slopes_wrong_half)


def alibi_next_pow2_truncate(num_heads, len_q, len_k):
    above = 2 ** math.ceil(math.log2(num_heads))
    s = torch.tensor(_pow2_slopes(above)[:num_heads])
    return -s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "non-pow2-next-power-truncated",
     "for H not a power of 2, took the first H slopes of the next power of 2 above H instead of the paper's interleaving rule",
     False, alibi_next_pow2_truncate)


def alibi_even_test(num_heads, len_q, len_k):
    if num_heads % 2 == 0:  # wrong power-of-2 test: 6 and 12 pass it
        sl = _pow2_slopes(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        sl = _pow2_slopes(below) + _pow2_slopes(2 * below)[0::2][: num_heads - below]
    s = torch.tensor(sl)
    return -s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "even-means-power-of-2",
     "tested 'power of 2' with num_heads % 2 == 0, so 6 and 12 heads get the geometric 2^(-8h/H) slopes instead of the paper's rule",
     False, alibi_even_test)


def alibi_no_truncate(num_heads, len_q, len_k):
    if math.log2(num_heads).is_integer():
        sl = _pow2_slopes(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        sl = _pow2_slopes(below) + _pow2_slopes(2 * below)[0::2]  # never stops at H
    s = torch.tensor(sl)
    return -s[:, None, None] * _distances(len_q, len_k)
_add(EX13, CK13, "non-pow2-not-truncated",
     "for H not a power of 2, appended all every-other slopes of 2H' without stopping at H: 8 slopes for 6 heads, 16 for 12 (wrong number of heads in the output)",
     False, alibi_no_truncate)


def alibi_keys_from_one(num_heads, len_q, len_k):
    s = torch.tensor(_slopes_ok(num_heads))
    p = torch.arange(len_k - len_q, len_k)
    j = torch.arange(1, len_k + 1)  # keys numbered 1..L_k
    return -s[:, None, None] * (p[:, None] - j[None, :]).float()
_add(EX13, CK13, "keys-from-one",
     "numbered the keys 1..L_k while the queries use 0-based p_i, so every distance p_i - j is one too small",
     False, alibi_keys_from_one)


# ============================================================================================
# 14: temperature and top-k
# ============================================================================================
EX14, CK14 = "14_language_model", "check_next_token_probs"


def ntp_right_sort_logsoftmax(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None and top_k < x.size(-1):
        srt = x.sort(dim=-1, descending=True).values
        thr = srt[..., top_k - 1 : top_k]
        x = torch.where(x >= thr, x, torch.full_like(x, -math.inf))
    return F.log_softmax(x, dim=-1).exp()
_add(EX14, CK14, "right-sort-logsoftmax",
     "correct: threshold from a descending sort at index k-1, torch.where with -inf, exp of log_softmax", True,
     ntp_right_sort_logsoftmax)


def ntp_right_manual_exp(logits, temperature=1.0, top_k=None):
    x = logits * (1.0 / temperature)
    keep = torch.ones_like(x, dtype=torch.bool)
    if top_k is not None:
        k = min(top_k, x.shape[-1])
        kth = x.topk(k, dim=-1).values.min(dim=-1, keepdim=True).values
        keep = x >= kth
    m = x.max(dim=-1, keepdim=True).values
    e = torch.exp(x - m) * keep
    return e / e.sum(dim=-1, keepdim=True)
_add(EX14, CK14, "right-manual-exp",
     "correct: hand-written exp after subtracting the row max, kept tokens by a boolean mask multiplied in", True,
     ntp_right_manual_exp)


def _topk_mask(x, top_k):
    if top_k is None:
        return x
    kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
    return x.masked_fill(x < kth, float("-inf"))


def ntp_temp_multiplied(logits, temperature=1.0, top_k=None):
    return torch.softmax(_topk_mask(logits * temperature, top_k), dim=-1)
_add(EX14, CK14, "temperature-multiplied",
     "multiplied the logits by the temperature instead of dividing, so a high temperature sharpens instead of flattening",
     False, ntp_temp_multiplied)


def ntp_temp_ignored(logits, temperature=1.0, top_k=None):
    return torch.softmax(_topk_mask(logits, top_k), dim=-1)
_add(EX14, CK14, "temperature-ignored",
     "never used the temperature: softmax of the raw logits (top-k correct)", False, ntp_temp_ignored)


def ntp_topk_after_softmax(logits, temperature=1.0, top_k=None):
    p = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = torch.topk(p, min(top_k, p.size(-1)), dim=-1).values[..., -1:]
        p = p.masked_fill(p < kth, 0.0)
    return p
_add(EX14, CK14, "topk-after-softmax-no-renorm",
     "applied top-k after the softmax by zeroing the dropped probabilities, and never renormalised, so rows sum to less than 1",
     False, ntp_topk_after_softmax)


def ntp_mask_zero(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, 0.0)
    return torch.softmax(x, dim=-1)
_add(EX14, CK14, "masked-with-zero",
     "set the dropped logits to 0 instead of -inf before the softmax, so the dropped tokens keep probability e^0/Z", False,
     ntp_mask_zero)


def ntp_strict_greater(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x <= kth, float("-inf"))
    return torch.softmax(x, dim=-1)
_add(EX14, CK14, "strict-greater-off-by-one",
     "kept only logits strictly greater than the k-th largest (masked x <= kth), so the k-th token and its ties are dropped: k-1 kept",
     False, ntp_strict_greater)


def ntp_scatter_exact_k(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        idx = torch.topk(x, min(top_k, x.size(-1)), dim=-1).indices
        keep = torch.zeros_like(x, dtype=torch.bool).scatter(-1, idx, True)
        x = x.masked_fill(~keep, float("-inf"))
    return torch.softmax(x, dim=-1)
_add(EX14, CK14, "exactly-k-drops-ties",
     "kept exactly the k indices torch.topk returns (scatter), so tokens tied with the k-th largest are dropped arbitrarily",
     False, ntp_scatter_exact_k)


def ntp_sort_index_k(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None and top_k < x.size(-1):
        kth = x.sort(dim=-1, descending=True).values[..., top_k : top_k + 1]  # 0-based: this is the (k+1)-th
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)
_add(EX14, CK14, "kth-index-off-by-one",
     "took the threshold at sorted index k (the (k+1)-th largest) instead of k-1, so k+1 tokens are kept", False,
     ntp_sort_index_k)


def ntp_naive_exp(logits, temperature=1.0, top_k=None):
    x = _topk_mask(logits / temperature, top_k)
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)
_add(EX14, CK14, "naive-exp-overflow",
     "hand-written exp without subtracting the row maximum: logits in the hundreds overflow to inf and give NaN", False,
     ntp_naive_exp)


def ntp_topk_no_min(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]  # no min with the vocabulary size
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)
_add(EX14, CK14, "topk-larger-than-vocab-crashes",
     "called torch.topk(x, top_k) without capping k at the vocabulary size: raises an error when top_k > |V| (should keep everything)",
     False, ntp_topk_no_min)


def ntp_global_topk(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x.flatten(), min(top_k, x.numel())).values[-1]  # one threshold for the whole batch
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)
_add(EX14, CK14, "topk-over-whole-batch",
     "took the k largest logits of the whole flattened tensor instead of per row: one threshold for every distribution in the batch",
     False, ntp_global_topk)


def ntp_softmax_dim0(logits, temperature=1.0, top_k=None):
    return torch.softmax(_topk_mask(logits / temperature, top_k), dim=0)
_add(EX14, CK14, "softmax-first-axis",
     "softmax over dim=0 (across the rows of a batch) instead of the last axis, the vocabulary", False,
     ntp_softmax_dim0)


def ntp_temp_on_probs(logits, temperature=1.0, top_k=None):
    return torch.softmax(_topk_mask(logits, top_k), dim=-1) / temperature
_add(EX14, CK14, "temperature-after-softmax",
     "divided the probabilities by the temperature after the softmax instead of the logits before it (rows no longer sum to 1)",
     False, ntp_temp_on_probs)


# ============================================================================================
# 15: prefix-matching score
# ============================================================================================
EX15, CK15 = "15_induction_heads", "check_prefix_matching_score"


def _pm_mask(tokens):
    B, L = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, i, j): token i == token j
    mask = torch.zeros(B, L, L, dtype=torch.bool)
    mask[:, :, 1:] = same[:, :, :-1]  # key k <- token k-1
    tril = torch.ones(L, L, dtype=torch.bool).tril()
    return mask & tril


def _pm_reduce(weights, mask, valid):
    per_q = (weights * mask[:, None].to(weights.dtype)).sum(-1)  # (B, H, L)
    return per_q.permute(1, 0, 2)[:, valid].mean(-1)  # (H,)


def pm_right_loops(weights, tokens):
    B, H, L, _ = weights.shape
    total = torch.zeros(H, dtype=weights.dtype)
    count = 0
    for b in range(B):
        for i in range(L):
            keys = [k for k in range(1, i + 1) if tokens[b, k - 1] == tokens[b, i]]
            if keys:
                total += weights[b, :, i, keys].sum(-1)
                count += 1
    return total / count
_add(EX15, CK15, "right-loops", "correct: explicit loops over batch and queries, listing the induction keys", True,
     pm_right_loops)


def pm_right_pad_einsum(weights, tokens):
    B, L = tokens.shape
    prev = torch.cat([torch.full((B, 1), -1, dtype=tokens.dtype), tokens[:, :-1]], dim=1)  # token before each key
    mask = (tokens[:, :, None] == prev[:, None, :]) & torch.tril(torch.ones(L, L, dtype=torch.bool))
    m = mask.to(weights.dtype)
    per_q = torch.einsum("bhij,bij->bhi", weights, m)
    valid = m.sum(-1) > 0  # (B, L)
    return (per_q * valid[:, None]).sum((0, 2)) / valid.sum()
_add(EX15, CK15, "right-pad-einsum",
     "correct: previous-token tensor padded with -1 at key 0, einsum for the sums, weighted mean via the valid count", True,
     pm_right_pad_einsum)


def pm_occurrence_itself(weights, tokens):
    B, L = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = same & torch.ones(L, L, dtype=torch.bool).tril(-1)  # earlier occurrences j < i
    return _pm_reduce(weights, mask, mask.any(-1))
_add(EX15, CK15, "occurrence-not-next-token",
     "used the earlier occurrences of the query's token (key j with tokens[j] == tokens[i], j < i) instead of the token right after them",
     False, pm_occurrence_itself)


def pm_roll_wrap(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.roll(same, shifts=1, dims=-1) & torch.ones(L, L, dtype=torch.bool).tril()
    return _pm_reduce(weights, mask, mask.any(-1))
_add(EX15, CK15, "roll-wraps-key-0",
     "shifted the key axis with torch.roll, so key 0 compares against the last token of the sequence and counts as an induction key when it matches",
     False, pm_roll_wrap)


def pm_all_queries(weights, tokens):
    mask = _pm_mask(tokens)
    per_q = (weights * mask[:, None].to(weights.dtype)).sum(-1)  # (B, H, L)
    return per_q.mean(dim=(0, 2))
_add(EX15, CK15, "average-over-all-queries",
     "averaged over every query, including those with no induction key (which contribute 0), instead of only the queries that have one",
     False, pm_all_queries)


def pm_keys_averaged(weights, tokens):
    mask = _pm_mask(tokens)
    n = mask.sum(-1).clamp(min=1)  # (B, L)
    per_q = (weights * mask[:, None].to(weights.dtype)).sum(-1) / n[:, None]
    return per_q.permute(1, 0, 2)[:, mask.any(-1)].mean(-1)
_add(EX15, CK15, "keys-averaged-not-summed",
     "divided each query's weight on its induction keys by their number (mean over keys) instead of summing them", False,
     pm_keys_averaged)


def pm_exclude_self(weights, tokens):
    mask = _pm_mask(tokens) & torch.ones(tokens.size(1), tokens.size(1), dtype=torch.bool).tril(-1)
    return _pm_reduce(weights, mask, mask.any(-1))
_add(EX15, CK15, "query-itself-excluded",
     "required k < i (strictly lower triangle), so the query's own position is never an induction key even when the token before it matches",
     False, pm_exclude_self)


def pm_mean_of_means(weights, tokens):
    mask = _pm_mask(tokens)
    valid = mask.any(-1)
    per_q = (weights * mask[:, None].to(weights.dtype)).sum(-1)
    outs = []
    for b in range(tokens.size(0)):
        if valid[b].any():
            outs.append(per_q[b][:, valid[b]].mean(-1))
    return torch.stack(outs).mean(0)
_add(EX15, CK15, "mean-of-sequence-means",
     "averaged per sequence first and then over the sequences, instead of one mean over all counted queries of the batch",
     False, pm_mean_of_means)


def pm_shift_wrong_way(weights, tokens):
    B, L = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros(B, L, L, dtype=torch.bool)
    mask[:, :, :-1] = same[:, :, 1:]  # key k <- token k+1
    mask &= torch.ones(L, L, dtype=torch.bool).tril()
    return _pm_reduce(weights, mask, mask.any(-1))
_add(EX15, CK15, "shifted-wrong-direction",
     "shifted the key axis the wrong way: key k counts when tokens[k + 1] matches the query (the token before an occurrence) instead of tokens[k - 1]",
     False, pm_shift_wrong_way)


def pm_no_causal_mask(weights, tokens):
    B, L = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros(B, L, L, dtype=torch.bool)
    mask[:, :, 1:] = same[:, :, :-1]  # no k <= i restriction
    return _pm_reduce(weights, mask, mask.any(-1))
_add(EX15, CK15, "no-k-le-i-mask",
     "forgot to keep k <= i: later occurrences count too, so queries whose token only recurs in the future are averaged in with weight 0",
     False, pm_no_causal_mask)


def pm_prev_of_query(weights, tokens):
    B, L = tokens.shape
    prev = tokens[:, :-1]
    mask = torch.zeros(B, L, L, dtype=torch.bool)
    # query i's *previous* token against key k's previous token
    mask[:, 1:, 1:] = prev[:, :, None] == prev[:, None, :]
    mask &= torch.ones(L, L, dtype=torch.bool).tril()
    return _pm_reduce(weights, mask, mask.any(-1))
_add(EX15, CK15, "matched-query-previous-token",
     "compared tokens[k-1] with the token before the query, tokens[i-1], instead of the query's own token tokens[i]", False,
     pm_prev_of_query)


def pm_valid_by_weight(weights, tokens):
    mask = _pm_mask(tokens)
    per_q = (weights * mask[:, None].to(weights.dtype)).sum(-1)  # (B, H, L)
    valid = per_q > 0  # decided per head from the weights, not from the tokens
    return (per_q * valid).sum((0, 2)) / valid.sum((0, 2)).clamp(min=1)
_add(EX15, CK15, "queries-kept-by-weight",
     "kept the queries where the head puts nonzero weight on induction keys (per head) instead of the queries that have an induction key",
     False, pm_valid_by_weight)


# ============================================================================================
# 16: RMSNorm and SwiGLU
# ============================================================================================
EX16, CK16A, CK16B = "16_modern_block", "check_rms_norm", "check_swiglu"


def rms_right_rsqrt(x, weight, eps=1e-6):
    return weight * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps))
_add(EX16, CK16A, "right-rsqrt", "correct: x * rsqrt(mean(x^2) + eps), weight multiplied first in the expression", True,
     rms_right_rsqrt)


def rms_right_norm(x, weight, eps=1e-6):
    D = x.shape[-1]
    ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2 / D
    return x / (ms + eps).sqrt() * weight
_add(EX16, CK16A, "right-vector-norm", "correct: mean of squares as ||x||^2 / D from torch.linalg.vector_norm", True,
     rms_right_norm)


def rms_mean_subtracted(x, weight, eps=1e-6):
    xc = x - x.mean(-1, keepdim=True)
    return xc / torch.sqrt(xc.pow(2).mean(-1, keepdim=True) + eps) * weight
_add(EX16, CK16A, "mean-subtracted",
     "subtracted the mean of each vector first, as LayerNorm does (no bias), instead of dividing x itself by its RMS", False,
     rms_mean_subtracted)


def rms_std(x, weight, eps=1e-6):
    return x / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight
_add(EX16, CK16A, "divided-by-std",
     "divided by the standard deviation (torch.var, unbiased, mean removed) instead of the root mean square", False,
     rms_std)


def rms_eps_outside(x, weight, eps=1e-6):
    return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + eps) * weight
_add(EX16, CK16A, "eps-outside-root",
     "added eps after the square root, sqrt(mean(x^2)) + eps, instead of under it", False, rms_eps_outside)


def rms_sum(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * weight
_add(EX16, CK16A, "sum-not-mean",
     "summed the squares instead of averaging them (forgot the 1/D), so the output is sqrt(D) times too small", False,
     rms_sum)


def rms_no_root(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps) * weight
_add(EX16, CK16A, "root-missing", "divided by mean(x^2) + eps without the square root", False, rms_no_root)


def rms_no_weight(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
_add(EX16, CK16A, "weight-missing", "never multiplied by weight", False, rms_no_weight)


def rms_axis0(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * weight
_add(EX16, CK16A, "wrong-axis",
     "took the mean of the squares over dim=0 (the first axis) instead of the last axis", False, rms_axis0)


def rms_global_mean(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean() + eps) * weight
_add(EX16, CK16A, "mean-over-whole-tensor",
     "called .mean() with no dim: one RMS for the whole tensor instead of one per vector", False, rms_global_mean)


def rms_no_eps(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * weight
_add(EX16, CK16A, "eps-ignored",
     "left eps out entirely (x * rsqrt(mean(x^2))), which only shows with a large eps", False, rms_no_eps)


def rms_weight_first(x, weight, eps=1e-6):
    y = x * weight
    return y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + eps)
_add(EX16, CK16A, "weight-before-normalising",
     "multiplied x by weight before computing the RMS, so the weight is normalised away instead of scaling the result", False,
     rms_weight_first)


# ---- SwiGLU ----

def swiglu_right_linear(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)
_add(EX16, CK16B, "right-F-linear", "correct: F.linear uses the (out, in) weights as stored", True, swiglu_right_linear)


def swiglu_right_einsum(x, w_gate, w_up, w_down):
    g = torch.einsum("...d,fd->...f", x, w_gate)
    u = torch.einsum("...d,fd->...f", x, w_up)
    h = g * torch.sigmoid(g) * u
    return torch.einsum("...f,df->...d", h, w_down)
_add(EX16, CK16B, "right-einsum-manual-silu", "correct: einsum projections and SiLU written as z * sigmoid(z)", True,
     swiglu_right_einsum)


def swiglu_swapped(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_up.T) * (x @ w_gate.T)) @ w_down.T
_add(EX16, CK16B, "gate-up-swapped",
     "put SiLU on the up branch and left the gate branch linear (gate and up swapped)", False, swiglu_swapped)


def swiglu_silu_product(x, w_gate, w_up, w_down):
    return F.silu((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
_add(EX16, CK16B, "silu-on-product", "applied SiLU to the product of the two branches instead of to the gate branch only",
     False, swiglu_silu_product)


def swiglu_silu_both(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * F.silu(x @ w_up.T)) @ w_down.T
_add(EX16, CK16B, "silu-on-both", "applied SiLU to both the gate and the up branch", False, swiglu_silu_both)


def swiglu_silu_after_down(x, w_gate, w_up, w_down):
    return F.silu(((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T)
_add(EX16, CK16B, "silu-after-down", "applied SiLU at the very end, after the down projection, instead of on the gate",
     False, swiglu_silu_after_down)


def swiglu_relu(x, w_gate, w_up, w_down):
    return (F.relu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
_add(EX16, CK16B, "relu-not-silu", "used ReLU on the gate instead of SiLU", False, swiglu_relu)


def swiglu_gelu(x, w_gate, w_up, w_down):
    return (F.gelu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
_add(EX16, CK16B, "gelu-not-silu", "used GELU on the gate instead of SiLU (that is GeGLU)", False, swiglu_gelu)


def swiglu_sigmoid(x, w_gate, w_up, w_down):
    return (torch.sigmoid(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
_add(EX16, CK16B, "sigmoid-not-silu", "used sigma(z) on the gate instead of z * sigma(z)", False, swiglu_sigmoid)


def swiglu_no_up(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate.T) @ w_down.T
_add(EX16, CK16B, "up-branch-missing", "dropped the up branch: SiLU(x W_gate) W_down, an ordinary SiLU MLP", False,
     swiglu_no_up)


def swiglu_sum(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) + (x @ w_up.T)) @ w_down.T
_add(EX16, CK16B, "sum-not-product", "added the two branches instead of multiplying them elementwise", False, swiglu_sum)


def swiglu_not_transposed(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
_add(EX16, CK16B, "weights-not-transposed",
     "multiplied by the stored (out, in) weights directly, x @ w_gate, without transposing (shape error unless d_ff == D)",
     False, swiglu_not_transposed)


def swiglu_no_down(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate.T) * (x @ w_up.T)
_add(EX16, CK16B, "down-missing",
     "forgot the down projection: returns the hidden (..., d_ff) vector instead of mapping back to D", False, swiglu_no_down)


# ============================================================================================
# 17: the absorbed MLA score
# ============================================================================================
EX17, CK17 = "17_latent_attention", "check_absorbed_scores"
from lessons_src import apply_rope, rope_frequencies  # noqa: E402


def _rot_q(query_rope, L_k, pos=None, layout="interleaved", max_len=None):
    d_R = query_rope.size(-1)
    cos, sin = rope_frequencies(d_R, max_len or L_k)
    return apply_rope(query_rope.unsqueeze(-2), cos, sin, positions=(L_k - 1 if pos is None else pos),
                      layout=layout).squeeze(-2)


def mla_right_loop_manual_rope(query_nope, query_rope, latent, rope_key, w_uk):
    B, H, d_k = query_nope.shape
    L_k, d_R = latent.size(1), query_rope.size(-1)
    pos = L_k - 1
    theta = 10000.0 ** (-torch.arange(0, d_R, 2, dtype=torch.float64) / d_R)
    ang = pos * theta
    c, s = ang.cos().float(), ang.sin().float()
    x0, x1 = query_rope[..., 0::2], query_rope[..., 1::2]
    q_rot = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)
    out = torch.empty(B, H, L_k)
    for h in range(H):
        q_lat = query_nope[:, h] @ w_uk[h]  # (B, d_c)
        out[:, h] = (latent @ q_lat[:, :, None]).squeeze(-1) + (rope_key @ q_rot[:, h, :, None]).squeeze(-1)
    return out / math.sqrt(d_k + d_R)
_add(EX17, CK17, "right-loop-manual-rope",
     "correct: loop over heads, interleaved rotation written by hand at position L_k - 1", True,
     mla_right_loop_manual_rope)


def mla_right_concat(query_nope, query_rope, latent, rope_key, w_uk):
    L_k = latent.size(1)
    d_k, d_R = query_nope.size(-1), query_rope.size(-1)
    cos, sin = rope_frequencies(d_R, L_k + 5)
    q_r = apply_rope(query_rope[:, :, None, :], cos, sin, positions=torch.tensor([L_k - 1]))[:, :, 0]
    q_lat = torch.einsum("bhk,hkc->bhc", query_nope, w_uk)
    q_full = torch.cat([q_lat, q_r], dim=-1)  # (B, H, d_c + d_R)
    k_full = torch.cat([latent, rope_key], dim=-1)  # (B, L_k, d_c + d_R)
    return q_full @ k_full.transpose(1, 2) / (d_k + d_R) ** 0.5
_add(EX17, CK17, "right-concatenated",
     "correct: absorbed query and rotated query concatenated against [latent, rope_key], positions as a tensor", True,
     mla_right_concat)


def _content(query_nope, latent, w_uk):
    q_lat = torch.einsum("bhk,hkc->bhc", query_nope, w_uk)
    return torch.einsum("bhc,btc->bht", q_lat, latent)


def _rope_part(q_r, rope_key):
    return torch.einsum("bhr,btr->bht", q_r, rope_key)


def mla_scale_dk(query_nope, query_rope, latent, rope_key, w_uk):
    q_r = _rot_q(query_rope, latent.size(1))
    return (_content(query_nope, latent, w_uk) + _rope_part(q_r, rope_key)) / math.sqrt(query_nope.size(-1))
_add(EX17, CK17, "scale-dk-only", "divided by sqrt(d_k) (the content part's width) instead of sqrt(d_k + d_R)", False,
     mla_scale_dk)


def mla_scale_dc(query_nope, query_rope, latent, rope_key, w_uk):
    q_r = _rot_q(query_rope, latent.size(1))
    return (_content(query_nope, latent, w_uk) + _rope_part(q_r, rope_key)) / math.sqrt(latent.size(-1) + query_rope.size(-1))
_add(EX17, CK17, "scale-cache-width",
     "scaled by sqrt(d_c + d_R), the width the absorbed query has, instead of sqrt(d_k + d_R)", False, mla_scale_dc)


def mla_no_scale(query_nope, query_rope, latent, rope_key, w_uk):
    q_r = _rot_q(query_rope, latent.size(1))
    return _content(query_nope, latent, w_uk) + _rope_part(q_r, rope_key)
_add(EX17, CK17, "no-scale", "forgot the division by sqrt(d_k + d_R)", False, mla_no_scale)


def mla_no_rope(query_nope, query_rope, latent, rope_key, w_uk):
    return _content(query_nope, latent, w_uk) / math.sqrt(query_nope.size(-1) + query_rope.size(-1))
_add(EX17, CK17, "rotary-part-left-out", "left out the rotary term q^R k^R entirely (content part only, scale right)",
     False, mla_no_rope)


def mla_rope_unscaled(query_nope, query_rope, latent, rope_key, w_uk):
    q_r = _rot_q(query_rope, latent.size(1))
    d = query_nope.size(-1) + query_rope.size(-1)
    return _content(query_nope, latent, w_uk) / math.sqrt(d) + _rope_part(q_r, rope_key)
_add(EX17, CK17, "rotary-part-unscaled",
     "scaled only the content part and added the rotary part after the division", False, mla_rope_unscaled)


def mla_q_not_rotated(query_nope, query_rope, latent, rope_key, w_uk):
    d = query_nope.size(-1) + query_rope.size(-1)
    return (_content(query_nope, latent, w_uk) + _rope_part(query_rope, rope_key)) / math.sqrt(d)
_add(EX17, CK17, "query-not-rotated",
     "used query_rope as given, without rotating it to position L_k - 1", False, mla_q_not_rotated)


def mla_rotated_at_Lk(query_nope, query_rope, latent, rope_key, w_uk):
    L_k = latent.size(1)
    q_r = _rot_q(query_rope, L_k, pos=L_k, max_len=L_k + 1)
    d = query_nope.size(-1) + query_rope.size(-1)
    return (_content(query_nope, latent, w_uk) + _rope_part(q_r, rope_key)) / math.sqrt(d)
_add(EX17, CK17, "rotated-at-Lk",
     "rotated the query at position L_k (the cache length, table built one longer) instead of L_k - 1, where the new token already sits",
     False, mla_rotated_at_Lk)


def mla_keys_rotated_again(query_nope, query_rope, latent, rope_key, w_uk):
    L_k, d_R = latent.size(1), query_rope.size(-1)
    cos, sin = rope_frequencies(d_R, L_k)
    k_r = apply_rope(rope_key, cos, sin)  # already rotated when cached
    q_r = _rot_q(query_rope, L_k)
    d = query_nope.size(-1) + d_R
    return (_content(query_nope, latent, w_uk) + _rope_part(q_r, k_r)) / math.sqrt(d)
_add(EX17, CK17, "cached-keys-rotated-again",
     "rotated the cached rope_key again at positions 0..L_k-1 although the cache holds them already rotated", False,
     mla_keys_rotated_again)


def mla_one_head_wuk(query_nope, query_rope, latent, rope_key, w_uk):
    q_lat = query_nope @ w_uk[0]  # (B, H, d_c): head 0's matrix for every head
    q_r = _rot_q(query_rope, latent.size(1))
    d = query_nope.size(-1) + query_rope.size(-1)
    return (torch.einsum("bhc,btc->bht", q_lat, latent) + _rope_part(q_r, rope_key)) / math.sqrt(d)
_add(EX17, CK17, "one-head-wuk-for-all", "multiplied every head's query by w_uk[0], head 0's up-projection, instead of its own w_uk[h]",
     False, mla_one_head_wuk)


def mla_wuk_transposed(query_nope, query_rope, latent, rope_key, w_uk):
    q_lat = torch.einsum("bhk,hck->bhc", query_nope, w_uk)  # reads w_uk as (H, d_c, d_k)
    q_r = _rot_q(query_rope, latent.size(1))
    d = query_nope.size(-1) + query_rope.size(-1)
    return (torch.einsum("bhc,btc->bht", q_lat, latent) + _rope_part(q_r, rope_key)) / math.sqrt(d)
_add(EX17, CK17, "wuk-transposed",
     "read w_uk as (H, d_c, d_k) in the einsum ('hck'), i.e. used each W_UK transposed: shape error unless d_k == d_c, wrong numbers when equal",
     False, mla_wuk_transposed)


def mla_softmax(query_nope, query_rope, latent, rope_key, w_uk):
    q_r = _rot_q(query_rope, latent.size(1))
    d = query_nope.size(-1) + query_rope.size(-1)
    return torch.softmax((_content(query_nope, latent, w_uk) + _rope_part(q_r, rope_key)) / math.sqrt(d), dim=-1)
_add(EX17, CK17, "softmax-applied", "applied a softmax over the cached tokens; the task asks for the scores before it",
     False, mla_softmax)


def mla_half_layout(query_nope, query_rope, latent, rope_key, w_uk):
    q_r = _rot_q(query_rope, latent.size(1), layout="half")
    d = query_nope.size(-1) + query_rope.size(-1)
    return (_content(query_nope, latent, w_uk) + _rope_part(q_r, rope_key)) / math.sqrt(d)
_add(EX17, CK17, "rotate-half-layout",
     "rotated the query with layout='half' (GPT-NeoX pairs) while the cached keys use interleaved pairs", False,
     mla_half_layout)


# ============================================================================================
# 18: softmax with a learned sink
# ============================================================================================
EX18, CK18 = "18_todays_attention", "check_softmax_with_sink"


def sink_right_logaddexp(scores, sinks):
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # -inf for a fully masked row
    denom = torch.logaddexp(lse, sinks.view(1, -1, 1, 1).to(scores.dtype))
    return torch.exp(scores - denom)
_add(EX18, CK18, "right-logaddexp", "correct: log of the denominator as logaddexp(logsumexp(scores), sink)", True,
     sink_right_logaddexp)


def sink_right_front_column(scores, sinks):
    B, H, Lq, Lk = scores.shape
    col = sinks[None, :, None, None].expand(B, H, Lq, 1).to(scores.dtype)
    return torch.softmax(torch.cat([col, scores], dim=-1), dim=-1)[..., 1:]
_add(EX18, CK18, "right-sink-first-column", "correct: sink prepended as column 0, softmax, column 0 dropped", True,
     sink_right_front_column)


def _cat_sink(scores, sinks):
    col = sinks.view(1, -1, 1, 1).expand(*scores.shape[:3], 1).to(scores.dtype)
    return torch.cat([scores, col], dim=-1)


def sink_ignored(scores, sinks):
    return torch.softmax(scores, dim=-1)
_add(EX18, CK18, "sink-ignored", "plain softmax of the scores: never used the sinks (rows sum to 1, masked rows NaN)",
     False, sink_ignored)


def sink_column_returned(scores, sinks):
    return torch.softmax(_cat_sink(scores, sinks), dim=-1)
_add(EX18, CK18, "sink-column-kept",
     "appended the sink column and took the softmax but forgot to drop the column: returns (B, H, L_q, L_k + 1)", False,
     sink_column_returned)


def sink_drop_first(scores, sinks):
    return torch.softmax(_cat_sink(scores, sinks), dim=-1)[..., 1:]
_add(EX18, CK18, "wrong-column-dropped",
     "appended the sink as the last column but dropped the first column ([..., 1:]), removing key 0 and keeping the sink", False,
     sink_drop_first)


def sink_not_shifted(scores, sinks):
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - m)
    z = torch.exp(sinks.view(1, -1, 1, 1))  # not shifted by m
    return e / (z + e.sum(-1, keepdim=True))
_add(EX18, CK18, "sink-not-shifted",
     "subtracted the row max from the scores but added exp(z_h) unshifted to the denominator, so the sink's weight is wrong",
     False, sink_not_shifted)


def sink_raw_logit(scores, sinks):
    e = torch.exp(scores - scores.amax(-1, keepdim=True).clamp(min=-1e30))
    lse_scale = torch.exp(scores.amax(-1, keepdim=True).clamp(min=-1e30))
    # e^s / (z + sum e^s), written stably by dividing through
    return e / (sinks.view(1, -1, 1, 1) / lse_scale + e.sum(-1, keepdim=True))
_add(EX18, CK18, "raw-logit-in-denominator",
     "added the sink logit z_h itself to the denominator instead of its exponential e^{z_h}", False, sink_raw_logit)


def sink_overflow(scores, sinks):
    e = torch.exp(scores)
    return e / (torch.exp(sinks).view(1, -1, 1, 1) + e.sum(-1, keepdim=True))
_add(EX18, CK18, "no-stabilisation-overflow",
     "computed exp of the raw scores without subtracting a maximum: scores in the hundreds overflow to inf and give NaN", False,
     sink_overflow)


def sink_over_queries(scores, sinks):
    row = sinks.view(1, -1, 1, 1).expand(scores.size(0), scores.size(1), 1, scores.size(3)).to(scores.dtype)
    return torch.softmax(torch.cat([scores, row], dim=-2), dim=-2)[..., :-1, :]
_add(EX18, CK18, "softmax-over-queries",
     "appended the sink as an extra row and normalised over the queries (dim=-2) instead of over the keys", False,
     sink_over_queries)


def sink_max_scores_only(scores, sinks):
    m = scores.amax(dim=-1, keepdim=True)  # -inf for a fully masked row
    e = torch.exp(scores - m)
    return e / (torch.exp(sinks.view(1, -1, 1, 1) - m) + e.sum(-1, keepdim=True))
_add(EX18, CK18, "max-without-sink-nan",
     "stabilised with the max of the scores only (not including the sink): right on normal rows, NaN on a fully masked row", False,
     sink_max_scores_only)


def sink_renormalised(scores, sinks):
    w = torch.softmax(_cat_sink(scores, sinks), dim=-1)[..., :-1]
    return w / w.sum(-1, keepdim=True)
_add(EX18, CK18, "renormalised-after-drop",
     "dropped the sink column and then renormalised the rows to sum to 1, which cancels the sink (and gives NaN on masked rows)", False,
     sink_renormalised)


def sink_batch_axis(scores, sinks):
    col = sinks.view(-1, 1, 1, 1).expand(scores.size(0), 1, scores.size(2), 1)  # lined up with the batch axis
    col = col.expand(scores.size(0), scores.size(1), scores.size(2), 1)
    w = torch.cat([scores, col.to(scores.dtype)], dim=-1)
    return torch.softmax(w, dim=-1)[..., :-1]
_add(EX18, CK18, "sinks-on-batch-axis",
     "reshaped the sinks with view(-1, 1, 1, 1), lining them up with the batch axis instead of the heads (shape error unless B == H)",
     False, sink_batch_axis)
