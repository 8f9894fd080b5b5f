"""Blind answers for exercises 13 to 18, written from the exercise text alone."""
import math
import torch
import torch.nn.functional as F
import lessons_src

ANSWERS = []


def _add(exercise, check, name, intent, right, *fns):
    ANSWERS.append(dict(exercise=exercise, check=check, name=name, intent=intent, right=right, fns=tuple(fns)))


# ============================================================================================
# 13_alibi: check_alibi_bias(alibi_bias)
# ============================================================================================
EX13, CK13 = "13_alibi", "check_alibi_bias"


def _pow2_slopes(n):
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def _paper_slopes(n):
    if math.log2(n).is_integer():
        return _pow2_slopes(n)
    below = 2 ** math.floor(math.log2(n))
    return _pow2_slopes(below) + _pow2_slopes(2 * below)[0::2][: n - below]


def _distances(len_q, len_k):
    q = torch.arange(len_k - len_q, len_k)
    k = torch.arange(len_k)
    return (q[:, None] - k[None, :]).float()


def alibi_right_loops(num_heads, len_q, len_k):
    # Right: everything with Python loops, slopes by the recursive rule of the paper's code.
    def slopes(n):
        if n & (n - 1) == 0:
            start = 2 ** (-8 / n)
            return [start ** (h + 1) for h in range(n)]
        p = 1
        while p * 2 < n:
            p *= 2
        return slopes(p) + slopes(2 * p)[::2][: n - p]
    s = slopes(num_heads)
    out = torch.zeros(num_heads, len_q, len_k)
    for h in range(num_heads):
        for i in range(len_q):
            p = len_k - len_q + i
            for j in range(len_k):
                out[h, i, j] = -s[h] * (p - j)
    return out


def alibi_right_abs(num_heads, len_q, len_k):
    # Right on the kept entries: symmetric |p_i - j| (flash-attn's form), slopes via torch.exp2.
    H = num_heads
    if math.log2(H).is_integer():
        slopes = torch.exp2(-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    else:
        below = 2 ** math.floor(math.log2(H))
        a = torch.exp2(-8.0 * torch.arange(1, below + 1, dtype=torch.float64) / below)
        b = torch.exp2(-8.0 * torch.arange(1, 2 * below + 1, dtype=torch.float64) / (2 * below))[0::2]
        slopes = torch.cat([a, b[: H - below]])
    pos_q = torch.arange(len_q)[:, None] + (len_k - len_q)
    dist = (pos_q - torch.arange(len_k)[None, :]).abs().float()
    return -(slopes.float().view(H, 1, 1) * dist)


def alibi_sign_flipped(num_heads, len_q, len_k):
    slopes = torch.tensor(_paper_slopes(num_heads))
    return slopes[:, None, None] * _distances(len_q, len_k)


def alibi_queries_at_start(num_heads, len_q, len_k):
    slopes = torch.tensor(_paper_slopes(num_heads))
    dist = (torch.arange(len_q)[:, None] - torch.arange(len_k)[None, :]).float()
    return -slopes[:, None, None] * dist


def alibi_positions_off_by_one(num_heads, len_q, len_k):
    slopes = torch.tensor(_paper_slopes(num_heads))
    q = torch.arange(len_k - len_q + 1, len_k + 1)
    dist = (q[:, None] - torch.arange(len_k)[None, :]).float()
    return -slopes[:, None, None] * dist


def alibi_slopes_reversed(num_heads, len_q, len_k):
    slopes = torch.tensor(_paper_slopes(num_heads)[::-1])
    return -slopes[:, None, None] * _distances(len_q, len_k)


def alibi_slopes_fixed_halving(num_heads, len_q, len_k):
    slopes = torch.tensor([2.0 ** -h for h in range(1, num_heads + 1)])
    return -slopes[:, None, None] * _distances(len_q, len_k)


def alibi_heads_from_zero(num_heads, len_q, len_k):
    def pow2(n):
        return [2.0 ** (-8.0 * h / n) for h in range(n)]  # h = 0 .. n-1
    if math.log2(num_heads).is_integer():
        s = pow2(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        s = pow2(below) + pow2(2 * below)[0::2][: num_heads - below]
    return -torch.tensor(s)[:, None, None] * _distances(len_q, len_k)


def alibi_first_not_every_other(num_heads, len_q, len_k):
    if math.log2(num_heads).is_integer():
        s = _pow2_slopes(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        s = _pow2_slopes(below) + _pow2_slopes(2 * below)[: num_heads - below]
    return -torch.tensor(s)[:, None, None] * _distances(len_q, len_k)


def alibi_odd_indices(num_heads, len_q, len_k):
    if math.log2(num_heads).is_integer():
        s = _pow2_slopes(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        s = _pow2_slopes(below) + _pow2_slopes(2 * below)[1::2][: num_heads - below]
    return -torch.tensor(s)[:, None, None] * _distances(len_q, len_k)


def alibi_power_above(num_heads, len_q, len_k):
    if math.log2(num_heads).is_integer():
        s = _pow2_slopes(num_heads)
    else:
        above = 2 ** math.ceil(math.log2(num_heads))
        s = _pow2_slopes(above)[:num_heads]
    return -torch.tensor(s)[:, None, None] * _distances(len_q, len_k)


def alibi_even_test(num_heads, len_q, len_k):
    if num_heads % 2 == 0:  # "power of 2" tested as "even"
        s = _pow2_slopes(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        s = _pow2_slopes(below) + _pow2_slopes(2 * below)[0::2][: num_heads - below]
    return -torch.tensor(s)[:, None, None] * _distances(len_q, len_k)


def alibi_no_truncation(num_heads, len_q, len_k):
    if math.log2(num_heads).is_integer():
        s = _pow2_slopes(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        s = _pow2_slopes(below) + _pow2_slopes(2 * below)[0::2]
    return -torch.tensor(s)[:, None, None] * _distances(len_q, len_k)


def alibi_floor_division(num_heads, len_q, len_k):
    def pow2(n):
        return [2.0 ** (-8 * h // n) for h in range(1, n + 1)]
    if math.log2(num_heads).is_integer():
        s = pow2(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        s = pow2(below) + pow2(2 * below)[0::2][: num_heads - below]
    return -torch.tensor(s, dtype=torch.float32)[:, None, None] * _distances(len_q, len_k)


def alibi_natural_exp(num_heads, len_q, len_k):
    def pow2(n):
        return [math.exp(-8.0 * h / n) for h in range(1, n + 1)]
    if math.log2(num_heads).is_integer():
        s = pow2(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        s = pow2(below) + pow2(2 * below)[0::2][: num_heads - below]
    return -torch.tensor(s)[:, None, None] * _distances(len_q, len_k)


_add(EX13, CK13, "right-loops", "correct: triple Python loop, slopes by the paper's recursive rule", True,
     alibi_right_loops)
_add(EX13, CK13, "right-abs-distance", "correct: -slope*|p_i - j| (equal on the kept entries j <= p_i), slopes via exp2",
     True, alibi_right_abs)
_add(EX13, CK13, "sign-flipped", "bias is +beta_h*(p_i - j): the minus sign dropped, so farther keys get a bonus",
     False, alibi_sign_flipped)
_add(EX13, CK13, "queries-at-start", "query positions taken as p_i = i (first len_q positions) instead of "
     "len_k - len_q + i, wrong whenever len_q < len_k (decoding step)", False, alibi_queries_at_start)
_add(EX13, CK13, "positions-off-by-one", "query positions arange(len_k - len_q + 1, len_k + 1): every p_i one too "
     "large, so every bias is too negative by one slope", False, alibi_positions_off_by_one)
_add(EX13, CK13, "slopes-reversed", "slopes in reverse order: head 1 gets the smallest slope 2^-8 and the last head 1/2",
     False, alibi_slopes_reversed)
_add(EX13, CK13, "slopes-ignore-H", "slopes always 1/2, 1/4, 1/8, ... (2^-h) whatever the number of heads, not 2^(-8h/H)",
     False, alibi_slopes_fixed_halving)
_add(EX13, CK13, "heads-from-zero", "slopes 2^(-8h/H) with h = 0..H-1 (heads counted from 0): first slope is 1, "
     "each slope one step too large", False, alibi_heads_from_zero)
_add(EX13, CK13, "first-not-every-other", "non-power-of-2 H: appended the first H - H' slopes of 2H' heads "
     "instead of every other one (1st, 3rd, ...)", False, alibi_first_not_every_other)
_add(EX13, CK13, "odd-indices", "non-power-of-2 H: appended slopes [1::2] of 2H' heads (the 2nd, 4th, ...) instead "
     "of [0::2] (the 1st, 3rd, ...)", False, alibi_odd_indices)
_add(EX13, CK13, "power-above", "non-power-of-2 H: took the first H slopes of the power of 2 above H (8 heads for 6) "
     "instead of the paper's rule", False, alibi_power_above)
_add(EX13, CK13, "even-as-power-of-2", "tested 'power of 2' with num_heads % 2 == 0, so 6 and 12 heads use "
     "2^(-8h/H) directly instead of the paper's rule", False, alibi_even_test)
_add(EX13, CK13, "no-truncation", "non-power-of-2 H: appended all every-other slopes of 2H' without cutting to H - H', "
     "so the result has 2H' heads (wrong shape)", False, alibi_no_truncation)
_add(EX13, CK13, "floor-division-exponent", "exponent written -8 * h // H (integer floor division): slopes wrong "
     "whenever 8h/H is not an integer (16 heads, 12 heads, ...)", False, alibi_floor_division)
_add(EX13, CK13, "natural-exp", "slopes e^(-8h/H) (math.exp) instead of 2^(-8h/H)", False, alibi_natural_exp)


# ============================================================================================
# 14_language_model: check_next_token_probs(next_token_probs)
# ============================================================================================
EX14, CK14 = "14_language_model", "check_next_token_probs"


def ntp_right_manual(logits, temperature=1.0, top_k=None):
    # Right: sort for the k-th largest, hand-written stable softmax.
    x = logits / temperature
    if top_k is not None and top_k < x.size(-1):
        kth = x.sort(dim=-1, descending=True).values[..., top_k - 1:top_k]
        x = torch.where(x >= kth, x, torch.full_like(x, float("-inf")))
    x = x - x.max(dim=-1, keepdim=True).values
    e = x.exp()
    return e / e.sum(dim=-1, keepdim=True)


def ntp_right_select_then_scale(logits, temperature=1.0, top_k=None):
    # Right: select on the raw logits with kthvalue (k-th largest = (V-k+1)-th smallest), then scale,
    # log_softmax().exp().
    V = logits.size(-1)
    x = logits
    if top_k is not None:
        k = min(top_k, V)
        kth = torch.kthvalue(x, V - k + 1, dim=-1, keepdim=True).values
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.log_softmax(x / temperature, dim=-1).exp()


def ntp_temperature_multiplied(logits, temperature=1.0, top_k=None):
    x = logits * temperature
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def ntp_temperature_ignored(logits, temperature=1.0, top_k=None):
    x = logits
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def ntp_topk_after_softmax(logits, temperature=1.0, top_k=None):
    p = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = torch.topk(p, min(top_k, p.size(-1)), dim=-1).values[..., -1:]
        p = p.masked_fill(p < kth, 0.0)
    return p


def ntp_masked_with_zero(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, 0.0)
    return torch.softmax(x, dim=-1)


def ntp_off_by_one(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None and top_k < x.size(-1):
        kth = x.sort(dim=-1, descending=True).values[..., top_k:top_k + 1]  # the (k+1)-th largest
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def ntp_drops_ties(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        idx = torch.topk(x, min(top_k, x.size(-1)), dim=-1).indices
        keep = torch.zeros_like(x, dtype=torch.bool).scatter(-1, idx, True)
        x = x.masked_fill(~keep, float("-inf"))
    return torch.softmax(x, dim=-1)


def ntp_strict_greater(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(~(x > kth), float("-inf"))
    return torch.softmax(x, dim=-1)


def ntp_exp_overflow(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


def ntp_topk_larger_than_vocab(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def ntp_softmax_dim0(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=0)


def ntp_log_probs(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.log_softmax(x, dim=-1)


def ntp_kthvalue_smallest(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.kthvalue(x, k, dim=-1, keepdim=True).values  # k-th SMALLEST
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def ntp_temperature_on_probs(logits, temperature=1.0, top_k=None):
    x = logits
    if top_k is not None:
        kth = torch.topk(x, min(top_k, x.size(-1)), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1) ** (1.0 / temperature)


_add(EX14, CK14, "right-manual", "correct: sort for the k-th largest, hand-written max-shifted softmax", True,
     ntp_right_manual)
_add(EX14, CK14, "right-kthvalue-select-first", "correct: select on raw logits with kthvalue(V-k+1), then scale, "
     "log_softmax().exp()", True, ntp_right_select_then_scale)
_add(EX14, CK14, "temperature-multiplied", "logits multiplied by the temperature instead of divided", False,
     ntp_temperature_multiplied)
_add(EX14, CK14, "temperature-ignored", "temperature never used: softmax of the raw logits", False,
     ntp_temperature_ignored)
_add(EX14, CK14, "topk-after-softmax", "top-k applied to the probabilities after the softmax (set to 0) without "
     "renormalising: kept ones sum to less than 1", False, ntp_topk_after_softmax)
_add(EX14, CK14, "masked-with-zero", "dropped logits set to 0 instead of -inf before the softmax: they keep a "
     "nonzero probability", False, ntp_masked_with_zero)
_add(EX14, CK14, "off-by-one-kth", "threshold is sorted[..., k] (the (k+1)-th largest, 0-based index confusion): "
     "keeps one token too many", False, ntp_off_by_one)
_add(EX14, CK14, "drops-ties", "keeps exactly the k indices returned by topk (scatter), so logits tied with the "
     "k-th largest are dropped arbitrarily", False, ntp_drops_ties)
_add(EX14, CK14, "strict-greater", "keeps only logits strictly greater than the k-th largest: the k-th itself (and "
     "its ties) dropped, k-1 tokens kept", False, ntp_strict_greater)
_add(EX14, CK14, "exp-overflow", "hand-written exp(x)/sum(exp(x)) without subtracting the row max: overflows to "
     "inf/NaN for logits in the hundreds", False, ntp_exp_overflow)
_add(EX14, CK14, "topk-larger-than-vocab", "torch.topk(x, top_k) without min(top_k, V): raises an error when top_k "
     "exceeds the vocabulary", False, ntp_topk_larger_than_vocab)
_add(EX14, CK14, "softmax-dim0", "softmax over dim=0 (the first axis) instead of the last (vocabulary) axis", False,
     ntp_softmax_dim0)
_add(EX14, CK14, "log-probs", "returns log_softmax (log-probabilities) instead of probabilities", False, ntp_log_probs)
_add(EX14, CK14, "kthvalue-smallest", "threshold from torch.kthvalue(x, k), which is the k-th SMALLEST logit: keeps "
     "V-k+1 tokens instead of the top k", False, ntp_kthvalue_smallest)
_add(EX14, CK14, "temperature-on-probs-unnormalised", "temperature applied as softmax(logits) ** (1/T) after the "
     "softmax, never renormalised: rows do not sum to 1 when T != 1", False, ntp_temperature_on_probs)


# ============================================================================================
# 15_induction_heads: check_prefix_matching_score(prefix_matching_score)
# ============================================================================================
EX15, CK15 = "15_induction_heads", "check_prefix_matching_score"


def _pm_reduce(weights, mask):
    per = (weights * mask[:, None].to(weights.dtype)).sum(dim=-1)  # (B, H, L)
    has = mask.any(dim=-1)  # (B, L)
    return per.permute(1, 0, 2)[:, has].mean(dim=-1)  # (H,)


def pm_right_vectorised(weights, tokens):
    # Right: slicing shift, lower-triangular mask, one mean per head over all queries that count.
    B, L = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, L, L): tokens[i] == tokens[m]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]  # key k: tokens[k-1] == tokens[i]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    return _pm_reduce(weights, mask)


def pm_right_loops(weights, tokens):
    # Right: plain loops over queries and keys, accumulate the sum and the count.
    B, H, L, _ = weights.shape
    total = torch.zeros(H, dtype=weights.dtype)
    count = 0
    for b in range(B):
        for i in range(L):
            keys = [k for k in range(1, i + 1) if tokens[b, k - 1] == tokens[b, i]]
            if not keys:
                continue
            total = total + weights[b, :, i, keys].sum(dim=-1)
            count += 1
    return total / count


def pm_occurrence_itself(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = same & torch.ones(L, L, dtype=torch.bool).tril(-1)  # earlier occurrences k < i
    return _pm_reduce(weights, mask)


def pm_roll_wraps(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.roll(same, shifts=1, dims=-1)  # key 0 gets tokens[L-1]'s comparison
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    return _pm_reduce(weights, mask)


def pm_average_all_queries(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    per = (weights * mask[:, None]).sum(dim=-1)  # (B, H, L)
    return per.mean(dim=(0, 2))


def pm_keys_averaged(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    m = mask[:, None].to(weights.dtype)
    per = (weights * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1)  # mean over the induction keys
    has = mask.any(dim=-1)
    return per.permute(1, 0, 2)[:, has].mean(dim=-1)


def pm_query_excluded(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril(-1)  # k < i: the query itself never a key
    return _pm_reduce(weights, mask)


def pm_no_causal_limit(weights, tokens):
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]  # no k <= i limit: later occurrences count too
    return _pm_reduce(weights, mask)


def pm_mean_of_sequence_means(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    per = (weights * mask[:, None]).sum(dim=-1)  # (B, H, L)
    has = mask.any(dim=-1)  # (B, L)
    means = [per[b][:, has[b]].mean(dim=-1) for b in range(tokens.size(0))]  # one mean per sequence
    return torch.stack(means).mean(dim=0)


def pm_shift_wrong_direction(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, :-1] = same[:, :, 1:]  # key k where tokens[k+1] == tokens[i]: the token BEFORE the occurrence
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    return _pm_reduce(weights, mask)


def pm_shift_query_axis(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, 1:, :] = same[:, :-1, :]  # shifted the query axis: tokens[i-1] == tokens[k]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    return _pm_reduce(weights, mask)


def pm_tril_plus_one(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril(1)  # k <= i + 1: the query's own occurrence counts
    return _pm_reduce(weights, mask)


def pm_max_not_sum(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    per = (weights * mask[:, None]).amax(dim=-1)  # largest weight on one induction key
    has = mask.any(dim=-1)
    return per.permute(1, 0, 2)[:, has].mean(dim=-1)


def pm_mask_wrong_axis(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    per = (weights * mask[:, :, None]).sum(dim=-1)  # mask unsqueezed at axis 2, not 1
    has = mask.any(dim=-1)
    return per.permute(1, 0, 2)[:, has].mean(dim=-1)


_add(EX15, CK15, "right-vectorised", "correct: shifted comparison by slicing, tril mask, mean over all queries of "
     "the batch that have an induction key", True, pm_right_vectorised)
_add(EX15, CK15, "right-loops", "correct: explicit loops over batch, queries and keys", True, pm_right_loops)
_add(EX15, CK15, "occurrence-itself", "uses the earlier occurrences themselves (tokens[k] == tokens[i], k < i) "
     "instead of the tokens right after them", False, pm_occurrence_itself)
_add(EX15, CK15, "roll-wraps", "shifted the key axis with torch.roll: key 0 wraps around and counts when the last "
     "token equals the query's token", False, pm_roll_wraps)
_add(EX15, CK15, "all-queries-averaged", "averaged over every query, including those with no induction key (their 0 "
     "pulls the score down)", False, pm_average_all_queries)
_add(EX15, CK15, "keys-averaged", "a query's weights on its induction keys averaged (divided by their number) "
     "instead of summed", False, pm_keys_averaged)
_add(EX15, CK15, "query-itself-excluded", "mask limited to k < i (tril(-1)): the query's own position never counts "
     "as an induction key, though it does when the previous token matches", False, pm_query_excluded)
_add(EX15, CK15, "no-causal-limit", "no k <= i limit: keys after the query whose previous token matches make a "
     "query count (with weight 0) even when it has no earlier occurrence", False, pm_no_causal_limit)
_add(EX15, CK15, "mean-of-sequence-means", "one mean per sequence then the mean of those means, instead of one mean "
     "over all the batch's queries (NaN when a sequence has no repeat)", False, pm_mean_of_sequence_means)
_add(EX15, CK15, "shift-wrong-direction", "shifted the key axis the wrong way: key k with tokens[k+1] == tokens[i], "
     "the token before the occurrence instead of after", False, pm_shift_wrong_direction)
_add(EX15, CK15, "shift-query-axis", "shifted the query axis instead of the key axis: compares tokens[i-1] with "
     "tokens[k]", False, pm_shift_query_axis)
_add(EX15, CK15, "tril-plus-one", "mask tril(1), k <= i + 1: the query's own token counts as an earlier occurrence, "
     "so almost every query has an 'induction key' (i + 1)", False, pm_tril_plus_one)
_add(EX15, CK15, "max-not-sum", "takes the largest weight on one induction key (amax) instead of the sum over "
     "all of them", False, pm_max_not_sum)
_add(EX15, CK15, "mask-wrong-axis", "mask[:, :, None] instead of mask[:, None]: broadcast against the wrong axis "
     "(shape error unless H equals L)", False, pm_mask_wrong_axis)


# ============================================================================================
# 16_modern_block part 1: check_rms_norm(rms_norm)
# ============================================================================================
EX16, CK16A, CK16B = "16_modern_block", "check_rms_norm", "check_swiglu"


def rms_right_rsqrt(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps) * weight


def rms_right_eps_inside_mean(x, weight, eps=1e-6):
    # Right: mean(x^2 + eps) = mean(x^2) + eps; sum / D by hand.
    D = x.shape[-1]
    ms = (x * x + eps).sum(dim=-1, keepdim=True) / D
    return weight * (x / ms.sqrt())


def rms_mean_subtracted(x, weight, eps=1e-6):
    xc = x - x.mean(dim=-1, keepdim=True)
    return xc / torch.sqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rms_std(x, weight, eps=1e-6):
    return x / torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + eps) * weight


def rms_eps_outside(x, weight, eps=1e-6):
    return x / (torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) + eps) * weight


def rms_sum_not_mean(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) * weight


def rms_no_root(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rms_no_weight(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def rms_wrong_axis(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(dim=0, keepdim=True) + eps) * weight


def rms_mean_over_everything(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean() + eps) * weight


def rms_square_of_mean(x, weight, eps=1e-6):
    return x / torch.sqrt(x.mean(dim=-1, keepdim=True).pow(2) + eps) * weight


def rms_one_plus_weight(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * (1 + weight)


def rms_no_keepdim(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(dim=-1) + eps) * weight


def rms_weight_added(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) + weight


_add(EX16, CK16A, "right-rsqrt", "correct: x * rsqrt(mean(x^2) + eps) * weight", True, rms_right_rsqrt)
_add(EX16, CK16A, "right-eps-inside-mean", "correct: eps added to each square before averaging (same value), sum/D",
     True, rms_right_eps_inside_mean)
_add(EX16, CK16A, "mean-subtracted", "subtracts the mean first (LayerNorm without bias) instead of plain RMS", False,
     rms_mean_subtracted)
_add(EX16, CK16A, "std-not-rms", "divides by the standard deviation sqrt(var + eps) (variance around the mean) "
     "instead of the root mean square", False, rms_std)
_add(EX16, CK16A, "eps-outside-root", "eps added after the square root: sqrt(mean(x^2)) + eps", False, rms_eps_outside)
_add(EX16, CK16A, "sum-not-mean", "sum of squares instead of their mean (missing the 1/D)", False, rms_sum_not_mean)
_add(EX16, CK16A, "root-missing", "divides by mean(x^2) + eps without the square root", False, rms_no_root)
_add(EX16, CK16A, "weight-missing", "forgot to multiply by weight", False, rms_no_weight)
_add(EX16, CK16A, "wrong-axis-dim0", "mean of squares over dim=0 (the first axis) instead of the last", False,
     rms_wrong_axis)
_add(EX16, CK16A, "mean-over-everything", "x.pow(2).mean() with no dim: one RMS for the whole tensor instead of one "
     "per vector", False, rms_mean_over_everything)
_add(EX16, CK16A, "square-of-mean", "squares the mean (mean(x)^2) instead of taking the mean of the squares", False,
     rms_square_of_mean)
_add(EX16, CK16A, "one-plus-weight", "multiplies by (1 + weight), Gemma's parametrisation, instead of weight", False,
     rms_one_plus_weight)
_add(EX16, CK16A, "no-keepdim", "mean(dim=-1) without keepdim: the (...,) RMS broadcasts against the wrong axis "
     "(shape error for batched x; right only for a single 1-D vector)", False, rms_no_keepdim)
_add(EX16, CK16A, "weight-added", "adds weight (like a bias) instead of multiplying by it", False, rms_weight_added)


# ============================================================================================
# 16_modern_block part 2: check_swiglu(swiglu)
# ============================================================================================


def swiglu_right_matmul(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def swiglu_right_linear_handsilu(x, w_gate, w_up, w_down):
    # Right: F.linear (which transposes itself) and SiLU written by hand.
    g = F.linear(x, w_gate)
    u = torch.einsum("...d,fd->...f", x, w_up)
    return F.linear(g * torch.sigmoid(g) * u, w_down)


def swiglu_gate_up_swapped(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_up.T) * (x @ w_gate.T)) @ w_down.T


def swiglu_silu_on_product(x, w_gate, w_up, w_down):
    return F.silu((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def swiglu_silu_both(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * F.silu(x @ w_up.T)) @ w_down.T


def swiglu_silu_after_down(x, w_gate, w_up, w_down):
    return F.silu(((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T)


def swiglu_relu(x, w_gate, w_up, w_down):
    return (F.relu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def swiglu_gelu(x, w_gate, w_up, w_down):
    return (F.gelu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def swiglu_sigmoid(x, w_gate, w_up, w_down):
    return (torch.sigmoid(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def swiglu_no_up(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate.T) @ w_down.T


def swiglu_sum_not_product(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) + (x @ w_up.T)) @ w_down.T


def swiglu_not_transposed(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


def swiglu_reshaped_not_transposed(x, w_gate, w_up, w_down):
    d_ff, D = w_gate.shape
    return (F.silu(x @ w_gate.reshape(D, d_ff)) * (x @ w_up.reshape(D, d_ff))) @ w_down.reshape(d_ff, D)


def swiglu_no_down(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate.T) * (x @ w_up.T)


def swiglu_silu_sign_error(x, w_gate, w_up, w_down):
    g = x @ w_gate.T
    silu = g / (1 + torch.exp(g))  # meant z * sigmoid(z): this is z * sigmoid(-z)
    return (silu * (x @ w_up.T)) @ w_down.T


_add(EX16, CK16B, "right-matmul", "correct: (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T", True, swiglu_right_matmul)
_add(EX16, CK16B, "right-linear-handsilu", "correct: F.linear / einsum with SiLU written as g * sigmoid(g)", True,
     swiglu_right_linear_handsilu)
_add(EX16, CK16B, "gate-up-swapped", "SiLU applied to the up branch and the gate branch left linear (w_gate and "
     "w_up swapped)", False, swiglu_gate_up_swapped)
_add(EX16, CK16B, "silu-on-product", "SiLU applied to the product of both branches instead of the gate branch only",
     False, swiglu_silu_on_product)
_add(EX16, CK16B, "silu-both", "SiLU applied to both the gate and the up branch", False, swiglu_silu_both)
_add(EX16, CK16B, "silu-after-down", "no activation on the gate; SiLU applied after the down projection", False,
     swiglu_silu_after_down)
_add(EX16, CK16B, "relu", "ReLU instead of SiLU on the gate branch", False, swiglu_relu)
_add(EX16, CK16B, "gelu", "GELU instead of SiLU on the gate branch", False, swiglu_gelu)
_add(EX16, CK16B, "sigmoid", "sigmoid sigma(z) instead of SiLU z*sigma(z) on the gate branch (GLU, not SwiGLU)", False,
     swiglu_sigmoid)
_add(EX16, CK16B, "up-missing", "up branch dropped: silu(x W_gate) W_down with no elementwise product", False,
     swiglu_no_up)
_add(EX16, CK16B, "sum-not-product", "adds the two branches instead of multiplying them elementwise", False,
     swiglu_sum_not_product)
_add(EX16, CK16B, "not-transposed", "uses the (out, in) weights as stored, x @ w_gate without .T: shape error "
     "(unless d_ff == D, then wrong values)", False, swiglu_not_transposed)
_add(EX16, CK16B, "reshaped-not-transposed", "'transposed' the weights with reshape(D, d_ff) instead of .T: runs "
     "but scrambles the matrices", False, swiglu_reshaped_not_transposed)
_add(EX16, CK16B, "down-missing", "down projection missing: returns the (..., d_ff) hidden vector", False,
     swiglu_no_down)
_add(EX16, CK16B, "silu-sign-error", "hand-written SiLU as z / (1 + exp(z)) = z*sigmoid(-z) (sign error in the "
     "exponent)", False, swiglu_silu_sign_error)


# ============================================================================================
# 17_latent_attention: check_absorbed_scores(absorbed_scores)
# ============================================================================================
EX17, CK17 = "17_latent_attention", "check_absorbed_scores"


def _rot_query(query_rope, L_k, position=None, table=None):
    d_R = query_rope.size(-1)
    cos, sin = lessons_src.rope_frequencies(d_R, table or L_k)
    pos = L_k - 1 if position is None else position
    return lessons_src.apply_rope(query_rope.unsqueeze(-2), cos, sin, positions=pos).squeeze(-2)


def mla_right_einsum(query_nope, query_rope, latent, rope_key, w_uk):
    d_k, d_R, L_k = query_nope.size(-1), query_rope.size(-1), latent.size(1)
    q_lat = torch.einsum("bhk,hkc->bhc", query_nope, w_uk)
    s = torch.einsum("bhc,btc->bht", q_lat, latent)
    s = s + torch.einsum("bhr,btr->bht", _rot_query(query_rope, L_k), rope_key)
    return s / math.sqrt(d_k + d_R)


def mla_right_manual_rotation(query_nope, query_rope, latent, rope_key, w_uk):
    # Right: matmul per head by broadcasting, interleaved rotation written by hand, one scaled matmul.
    d_k, d_R, L_k = query_nope.size(-1), query_rope.size(-1), latent.size(1)
    q_lat = (query_nope.unsqueeze(-2) @ w_uk).squeeze(-2)  # (B, H, 1, d_k) @ (H, d_k, d_c)
    theta = 10000.0 ** (-torch.arange(0, d_R, 2, dtype=torch.float64) / d_R)
    ang = (L_k - 1) * theta
    cos, sin = ang.cos().float(), ang.sin().float()
    x0, x1 = query_rope[..., 0::2], query_rope[..., 1::2]
    q_rot = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
    q_full = torch.cat([q_lat, q_rot], dim=-1) / math.sqrt(d_k + d_R)  # (B, H, d_c + d_R)
    cache = torch.cat([latent, rope_key], dim=-1)  # (B, L_k, d_c + d_R)
    return q_full @ cache.transpose(1, 2)  # (B, H, d) @ (B, d, L_k)


def _mla_parts(query_nope, query_rope, latent, rope_key, w_uk):
    content = torch.einsum("bhc,btc->bht", torch.einsum("bhk,hkc->bhc", query_nope, w_uk), latent)
    rot = torch.einsum("bhr,btr->bht", _rot_query(query_rope, latent.size(1)), rope_key)
    return content, rot


def mla_scale_content_only(query_nope, query_rope, latent, rope_key, w_uk):
    content, rot = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    return content / math.sqrt(query_nope.size(-1)) + rot / math.sqrt(query_rope.size(-1))


def mla_scale_sqrt_dk(query_nope, query_rope, latent, rope_key, w_uk):
    content, rot = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    return (content + rot) / math.sqrt(query_nope.size(-1))


def mla_scale_cache_width(query_nope, query_rope, latent, rope_key, w_uk):
    content, rot = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    return (content + rot) / math.sqrt(latent.size(-1) + query_rope.size(-1))


def mla_no_scale(query_nope, query_rope, latent, rope_key, w_uk):
    content, rot = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    return content + rot


def mla_rope_left_out(query_nope, query_rope, latent, rope_key, w_uk):
    content, _ = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    return content / math.sqrt(query_nope.size(-1) + query_rope.size(-1))


def mla_rope_unscaled(query_nope, query_rope, latent, rope_key, w_uk):
    content, rot = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    return content / math.sqrt(query_nope.size(-1) + query_rope.size(-1)) + rot


def mla_query_not_rotated(query_nope, query_rope, latent, rope_key, w_uk):
    content, _ = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    rot = torch.einsum("bhr,btr->bht", query_rope, rope_key)
    return (content + rot) / math.sqrt(query_nope.size(-1) + query_rope.size(-1))


def mla_rotated_at_Lk(query_nope, query_rope, latent, rope_key, w_uk):
    L_k = latent.size(1)
    content, _ = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    q = _rot_query(query_rope, L_k, position=L_k, table=L_k + 1)
    rot = torch.einsum("bhr,btr->bht", q, rope_key)
    return (content + rot) / math.sqrt(query_nope.size(-1) + query_rope.size(-1))


def mla_keys_rotated_again(query_nope, query_rope, latent, rope_key, w_uk):
    L_k, d_R = latent.size(1), query_rope.size(-1)
    content, _ = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    cos, sin = lessons_src.rope_frequencies(d_R, L_k)
    k = lessons_src.apply_rope(rope_key, cos, sin)  # already rotated: rotated a second time
    rot = torch.einsum("bhr,btr->bht", _rot_query(query_rope, L_k), k)
    return (content + rot) / math.sqrt(query_nope.size(-1) + d_R)


def mla_one_head_wuk(query_nope, query_rope, latent, rope_key, w_uk):
    q_lat = query_nope @ w_uk[0]  # (B, H, d_k) @ (d_k, d_c): head 0's W_UK for every head
    content = torch.einsum("bhc,btc->bht", q_lat, latent)
    rot = torch.einsum("bhr,btr->bht", _rot_query(query_rope, latent.size(1)), rope_key)
    return (content + rot) / math.sqrt(query_nope.size(-1) + query_rope.size(-1))


def mla_wuk_transposed(query_nope, query_rope, latent, rope_key, w_uk):
    q_lat = torch.einsum("bhk,hck->bhc", query_nope, w_uk)  # w_uk read as (H, d_c, d_k)
    content = torch.einsum("bhc,btc->bht", q_lat, latent)
    rot = torch.einsum("bhr,btr->bht", _rot_query(query_rope, latent.size(1)), rope_key)
    return (content + rot) / math.sqrt(query_nope.size(-1) + query_rope.size(-1))


def mla_softmax_applied(query_nope, query_rope, latent, rope_key, w_uk):
    return torch.softmax(mla_right_einsum(query_nope, query_rope, latent, rope_key, w_uk), dim=-1)


def mla_half_layout(query_nope, query_rope, latent, rope_key, w_uk):
    L_k, d_R = latent.size(1), query_rope.size(-1)
    content, _ = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    cos, sin = lessons_src.rope_frequencies(d_R, L_k)
    q = lessons_src.apply_rope(query_rope.unsqueeze(-2), cos, sin, positions=L_k - 1, layout="half").squeeze(-2)
    rot = torch.einsum("bhr,btr->bht", q, rope_key)
    return (content + rot) / math.sqrt(query_nope.size(-1) + d_R)


def mla_heads_as_positions(query_nope, query_rope, latent, rope_key, w_uk):
    L_k, d_R = latent.size(1), query_rope.size(-1)
    content, _ = _mla_parts(query_nope, query_rope, latent, rope_key, w_uk)
    cos, sin = lessons_src.rope_frequencies(d_R, L_k)
    q = lessons_src.apply_rope(query_rope, cos, sin)  # (B, H, d_R): heads read as positions 0..H-1
    rot = torch.einsum("bhr,btr->bht", q, rope_key)
    return (content + rot) / math.sqrt(query_nope.size(-1) + d_R)


_add(EX17, CK17, "right-einsum", "correct: absorbed query by einsum, rotated query at L_k-1, sum scaled by "
     "sqrt(d_k + d_R)", True, mla_right_einsum)
_add(EX17, CK17, "right-manual-rotation", "correct: per-head matmul by broadcasting, interleaved rotation by hand, "
     "[absorbed | rotated] query against [latent | rope_key]", True, mla_right_manual_rotation)
_add(EX17, CK17, "scale-each-part-own-width", "content part divided by sqrt(d_k) and rotary part by sqrt(d_R) "
     "separately, instead of both by sqrt(d_k + d_R)", False, mla_scale_content_only)
_add(EX17, CK17, "scale-sqrt-dk", "whole score divided by sqrt(d_k) only (the content width), d_R left out of the "
     "scale", False, mla_scale_sqrt_dk)
_add(EX17, CK17, "scale-cache-width", "divided by sqrt(d_c + d_R), the cache's latent width, instead of "
     "sqrt(d_k + d_R)", False, mla_scale_cache_width)
_add(EX17, CK17, "no-scale", "no 1/sqrt(d_k + d_R) scale at all", False, mla_no_scale)
_add(EX17, CK17, "rope-left-out", "rotary part q^R k^R omitted: only the content scores, scaled", False,
     mla_rope_left_out)
_add(EX17, CK17, "rope-unscaled", "rotary part added after the scaling, so it is not divided by sqrt(d_k + d_R)",
     False, mla_rope_unscaled)
_add(EX17, CK17, "query-not-rotated", "query_rope used as given, never rotated to position L_k - 1", False,
     mla_query_not_rotated)
_add(EX17, CK17, "rotated-at-Lk", "query rotated at position L_k (the cache length) instead of L_k - 1", False,
     mla_rotated_at_Lk)
_add(EX17, CK17, "keys-rotated-again", "the cached rotary keys (already rotated) rotated again at positions "
     "0..L_k-1", False, mla_keys_rotated_again)
_add(EX17, CK17, "one-head-wuk", "w_uk[0] (head 0's up-projection) used for every head", False, mla_one_head_wuk)
_add(EX17, CK17, "wuk-transposed", "w_uk read as (H, d_c, d_k), i.e. transposed (einsum 'hck'): error unless "
     "d_k == d_c, then wrong values", False, mla_wuk_transposed)
_add(EX17, CK17, "softmax-applied", "softmax over the keys applied to the scores, which should be returned raw", False,
     mla_softmax_applied)
_add(EX17, CK17, "half-layout", "query rotated with layout='half' (rotate-half pairs) instead of the interleaved "
     "pairs of the cached keys", False, mla_half_layout)
_add(EX17, CK17, "heads-as-positions", "apply_rope on query_rope (B, H, d_R) without unsqueeze or positions: heads "
     "read as positions, head h rotated at position h (error when H > L_k)", False, mla_heads_as_positions)


# ============================================================================================
# 18_todays_attention: check_softmax_with_sink(softmax_with_sink)
# ============================================================================================
EX18, CK18 = "18_todays_attention", "check_softmax_with_sink"


def sink_right_manual(scores, sinks):
    z = sinks.view(1, -1, 1, 1).to(scores.dtype)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), z)  # finite: the sink is finite
    e = torch.exp(scores - m)
    return e / (torch.exp(z - m) + e.sum(dim=-1, keepdim=True))


def sink_right_logsumexp(scores, sinks):
    # Right: prepend the sink column, logsumexp of the row, exp(s - lse).
    z = sinks.view(1, -1, 1, 1).expand(*scores.shape[:3], 1).to(scores.dtype)
    lse = torch.logsumexp(torch.cat([z, scores], dim=-1), dim=-1, keepdim=True)
    return torch.exp(scores - lse)


def _sink_cat(scores, sinks):
    z = sinks.view(1, -1, 1, 1).expand(*scores.shape[:3], 1).to(scores.dtype)
    return torch.cat([scores, z], dim=-1)


def sink_ignored(scores, sinks):
    return torch.softmax(scores, dim=-1)


def sink_column_returned(scores, sinks):
    return torch.softmax(_sink_cat(scores, sinks), dim=-1)


def sink_wrong_column_dropped(scores, sinks):
    return torch.softmax(_sink_cat(scores, sinks), dim=-1)[..., 1:]


def sink_prepended_last_dropped(scores, sinks):
    z = sinks.view(1, -1, 1, 1).expand(*scores.shape[:3], 1).to(scores.dtype)
    return torch.softmax(torch.cat([z, scores], dim=-1), dim=-1)[..., :-1]


def sink_not_shifted(scores, sinks):
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - m)
    return e / (torch.exp(sinks.view(1, -1, 1, 1)) + e.sum(dim=-1, keepdim=True))


def sink_raw_logit(scores, sinks):
    m = scores.amax(dim=-1, keepdim=True).clamp(min=-1e30)
    e = torch.exp(scores - m)
    return e / (sinks.view(1, -1, 1, 1) + e.sum(dim=-1, keepdim=True))


def sink_overflow(scores, sinks):
    e = torch.exp(scores)
    return e / (torch.exp(sinks).view(1, -1, 1, 1) + e.sum(dim=-1, keepdim=True))


def sink_softmax_over_queries(scores, sinks):
    return torch.softmax(_sink_cat(scores, sinks), dim=-2)[..., :-1]


def sink_nan_masked_row(scores, sinks):
    p = torch.softmax(scores, dim=-1)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return p * torch.sigmoid(lse - sinks.view(1, -1, 1, 1))  # sum e^s / (e^z + sum e^s); softmax NaN when all masked


def sink_divides_after_softmax(scores, sinks):
    z = sinks.view(1, -1, 1, 1)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), z)
    e = torch.exp(scores - m)
    p = e / e.sum(dim=-1, keepdim=True).clamp(min=1e-30)
    return p / (1 + torch.exp(z))


def sink_query_axis(scores, sinks):
    m = scores.amax(dim=-1, keepdim=True)
    z = sinks[:, None]  # (H, 1): lines up with (L_q, 1), not with the heads
    m = torch.maximum(m, z)
    e = torch.exp(scores - m)
    return e / (torch.exp(z - m) + e.sum(dim=-1, keepdim=True))


_add(EX18, CK18, "right-manual", "correct: shift by max(row max, sink), exp, divide by e^(z-m) + sum", True,
     sink_right_manual)
_add(EX18, CK18, "right-logsumexp", "correct: sink column prepended, logsumexp over the row, exp(s - lse)", True,
     sink_right_logsumexp)
_add(EX18, CK18, "sink-ignored", "plain softmax over the keys: the sink never used (rows sum to 1, NaN on a fully "
     "masked row)", False, sink_ignored)
_add(EX18, CK18, "sink-column-returned", "appended the sink column and took the softmax but forgot to drop it: "
     "returns (B, H, L_q, L_k + 1)", False, sink_column_returned)
_add(EX18, CK18, "wrong-column-dropped", "appended the sink as the last column but dropped the first column "
     "([..., 1:]) instead of the sink's", False, sink_wrong_column_dropped)
_add(EX18, CK18, "prepended-last-dropped", "prepended the sink as column 0 but dropped the last column "
     "([..., :-1]), keeping the sink and losing the last key", False, sink_prepended_last_dropped)
_add(EX18, CK18, "sink-not-shifted", "scores shifted by their row max but e^z_h left unshifted in the denominator "
     "(and NaN on a fully masked row)", False, sink_not_shifted)
_add(EX18, CK18, "raw-logit", "adds the raw sink logit z_h to the (max-shifted) denominator instead of its "
     "exponential e^(z_h - max)", False, sink_raw_logit)
_add(EX18, CK18, "overflow", "no stabilisation: exp(scores) overflows to inf for scores in the hundreds, NaN "
     "weights", False, sink_overflow)
_add(EX18, CK18, "softmax-over-queries", "sink appended as a column but the softmax taken over the queries axis "
     "(dim=-2) instead of the keys", False, sink_softmax_over_queries)
_add(EX18, CK18, "nan-masked-row", "softmax(scores) times sum/(e^z + sum): right on normal rows but NaN, not zeros, "
     "on a fully masked row", False, sink_nan_masked_row)
_add(EX18, CK18, "divides-after-softmax", "normal softmax divided by (1 + e^z_h): sink weighed against a total of 1 "
     "instead of against sum_j e^s_ij", False, sink_divides_after_softmax)
_add(EX18, CK18, "sinks-on-query-axis", "sinks[:, None] (H, 1) lines up with the query axis instead of the heads: "
     "wrong sink per row, or a shape error/wrong shape", False, sink_query_axis)
