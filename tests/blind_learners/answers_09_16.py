"""Blind learner answers for exercises 09-16 (except 15), written from the exercise text alone.

Each entry of ANSWERS: exercise, check, name, intent, right, fns (passed to the check in order).
The helper who wrote these did not read lessons_src/checks/, the learner table, the check tests
or the solutions.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

import lessons_src

ANSWERS = []


def _add(exercise, check, name, intent, right, *fns):
    ANSWERS.append(dict(exercise=exercise, check=check, name=name, intent=intent, right=right, fns=tuple(fns)))


# =====================================================================================
# 09 efficient attention, Part 1: sliding_window_mask(seq_len, window)
# =====================================================================================
EX9 = "09_efficient_attention"


def _dist(L):
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    return i - j


def swm_right_broadcast(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0) & (d < window)


def swm_right_tril(seq_len, window):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return torch.tril(ones) & ~torch.tril(ones, diagonal=-window)


def swm_right_diag_loop(seq_len, window):
    m = torch.zeros(seq_len, seq_len)
    for k in range(min(window, seq_len)):
        m = m + torch.diag(torch.ones(seq_len - k), -k)
    print("mask built with", min(window, seq_len), "diagonals")
    return m.bool()


def swm_window_plus_one(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0) & (d <= window)


def swm_window_minus_one(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0) & (d < window - 1)


def swm_no_diagonal(seq_len, window):
    d = _dist(seq_len)
    return (d > 0) & (d < window)


def swm_two_sided(seq_len, window):
    d = _dist(seq_len)
    return d.abs() < window


def swm_inverted(seq_len, window):
    d = _dist(seq_len)
    return ~((d >= 0) & (d < window))


def swm_float(seq_len, window):
    d = _dist(seq_len)
    return ((d >= 0) & (d < window)).float()


def swm_long(seq_len, window):
    d = _dist(seq_len)
    return ((d >= 0) & (d < window)).long()


def swm_transposed(seq_len, window):
    # j - i instead of i - j: sees the next `window` keys
    i = torch.arange(seq_len)[:, None]
    j = torch.arange(seq_len)[None, :]
    d = j - i
    return (d >= 0) & (d < window)


def swm_tril_triu(seq_len, window):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return torch.tril(ones) & torch.triu(ones, diagonal=-window)


def swm_not_causal(seq_len, window):
    d = _dist(seq_len)
    return d < window


def swm_hardcoded_3(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0) & (d < 3)


def swm_clamp_window(seq_len, window):
    window = min(window, seq_len - 1)  # "a window can't be longer than the past"
    window = max(window, 1)
    d = _dist(seq_len)
    return (d >= 0) & (d < window)


def swm_diag_shifted(seq_len, window):
    m = torch.zeros(seq_len, seq_len)
    for k in range(1, window + 1):
        if k < seq_len:
            m = m + torch.diag(torch.ones(seq_len - k), -k)
    return m.bool()


def swm_batched_shape(seq_len, window):
    d = _dist(seq_len)
    return ((d >= 0) & (d < window))[None, None]  # (1, 1, L, L) ready for SDPA


def swm_full_when_large(seq_len, window):
    if window >= seq_len:
        return torch.ones(seq_len, seq_len, dtype=torch.bool)
    d = _dist(seq_len)
    return (d >= 0) & (d < window)


def swm_numpy(seq_len, window):
    return np.tri(seq_len, dtype=bool) & ~np.tri(seq_len, k=-window, dtype=bool)


C = "check_sliding_window_mask"
_add(EX9, C, "right-broadcast", "right: distances i - j, 0 <= d < window", True, swm_right_broadcast)
_add(EX9, C, "right-tril", "right: tril minus tril(-window)", True, swm_right_tril)
_add(EX9, C, "right-diag-loop", "right: sum of diagonals, float then bool, with a print", True, swm_right_diag_loop)
_add(EX9, C, "window+1", "uses d <= window: window + 1 keys", False, swm_window_plus_one)
_add(EX9, C, "window-1", "uses d < window - 1: window - 1 keys (empty rows for window 1)", False, swm_window_minus_one)
_add(EX9, C, "no-diagonal", "strict d > 0: the query does not see itself", False, swm_no_diagonal)
_add(EX9, C, "two-sided", "|i - j| < window: also sees window - 1 future keys", False, swm_two_sided)
_add(EX9, C, "inverted", "True where masked (the opposite convention)", False, swm_inverted)
_add(EX9, C, "float", "right pattern but float 0/1", False, swm_float)
_add(EX9, C, "long", "right pattern but int64 0/1", False, swm_long)
_add(EX9, C, "transposed", "j - i instead of i - j: sees the next window keys (transposed mask)", False, swm_transposed)
_add(EX9, C, "tril-triu", "tril & triu(diagonal=-window): window + 1 keys via triu", False, swm_tril_triu)
_add(EX9, C, "not-causal", "only 'not too far back', forgot the causal condition", False, swm_not_causal)
_add(EX9, C, "hardcoded-3", "window hard-coded to 3 from the example", False, swm_hardcoded_3)
_add(EX9, C, "clamp-window", "clamps window to seq_len - 1: last row misses key 0 when window >= seq_len", False, swm_clamp_window)
_add(EX9, C, "diag-shifted", "diagonals 1..window instead of 0..window-1: band shifted one key back", False, swm_diag_shifted)
_add(EX9, C, "batched-shape", "returns (1, 1, L, L) for SDPA", False, swm_batched_shape)
_add(EX9, C, "full-when-large", "window >= seq_len returns all True (forgot causal in that branch)", False, swm_full_when_large)
_add(EX9, C, "numpy", "right pattern but a numpy array", False, swm_numpy)


# =====================================================================================
# 09 Part 2: sink_window_mask(seq_len, window, num_sinks)
# =====================================================================================


def sink_right(seq_len, window, num_sinks):
    d = _dist(seq_len)
    j = torch.arange(seq_len)[None, :]
    return (d >= 0) & ((d < window) | (j < num_sinks))


def sink_right_loops(seq_len, window, num_sinks):
    rows = []
    for i in range(seq_len):
        rows.append([j <= i and (i - j < window or j < num_sinks) for j in range(seq_len)])
    return torch.tensor(rows, dtype=torch.bool)


def sink_right_setcols(seq_len, window, num_sinks):
    m = swm_right_broadcast(seq_len, window).clone()
    m[:, :num_sinks] = True
    return m.tril()


def sink_ignored(seq_len, window, num_sinks):
    return swm_right_broadcast(seq_len, window)


def sink_future(seq_len, window, num_sinks):
    j = torch.arange(seq_len)[None, :]
    return swm_right_broadcast(seq_len, window) | (j < num_sinks)


def sink_rows(seq_len, window, num_sinks):
    d = _dist(seq_len)
    i = torch.arange(seq_len)[:, None]
    return (d >= 0) & ((d < window) | (i < num_sinks))


def sink_le(seq_len, window, num_sinks):
    d = _dist(seq_len)
    j = torch.arange(seq_len)[None, :]
    return (d >= 0) & ((d < window) | (j <= num_sinks))


def sink_window_plus_one(seq_len, window, num_sinks):
    d = _dist(seq_len)
    j = torch.arange(seq_len)[None, :]
    return (d >= 0) & ((d <= window) | (j < num_sinks))


def sink_two_sided(seq_len, window, num_sinks):
    d = _dist(seq_len)
    j = torch.arange(seq_len)[None, :]
    return (d.abs() < window) | ((d >= 0) & (j < num_sinks))


def sink_inverted(seq_len, window, num_sinks):
    return ~sink_right(seq_len, window, num_sinks)


def sink_float(seq_len, window, num_sinks):
    return sink_right(seq_len, window, num_sinks).float()


def sink_and(seq_len, window, num_sinks):
    d = _dist(seq_len)
    j = torch.arange(seq_len)[None, :]
    return (d >= 0) & (d < window) & (j < num_sinks)


def sink_widen_window(seq_len, window, num_sinks):
    d = _dist(seq_len)
    return (d >= 0) & (d < window + num_sinks)


def sink_rows_and_cols(seq_len, window, num_sinks):
    d = _dist(seq_len)
    i = torch.arange(seq_len)[:, None]
    j = torch.arange(seq_len)[None, :]
    # sinks "attend everywhere and are attended from everywhere": the sink rows are not causal
    return ((d >= 0) & ((d < window) | (j < num_sinks))) | (i < num_sinks)


def sink_slice_minus_one(seq_len, window, num_sinks):
    m = swm_right_broadcast(seq_len, window).clone()
    m[:, : num_sinks - 1] = True  # num_sinks = 0 -> [:, :-1] wraps round
    return m.tril()


def sink_only_first(seq_len, window, num_sinks):
    m = swm_right_broadcast(seq_len, window).clone()
    m[:, 0] = True  # "the" attention sink: the first token
    return m


def sink_budget(seq_len, window, num_sinks):
    # StreamingLLM's cache holds num_sinks + recent tokens: the window shrinks to make room
    d = _dist(seq_len)
    j = torch.arange(seq_len)[None, :]
    w = max(window - num_sinks, 1)
    return (d >= 0) & ((d < w) | (j < num_sinks))


def sink_added_ints(seq_len, window, num_sinks):
    d = _dist(seq_len)
    j = torch.arange(seq_len)[None, :]
    causal = (d >= 0).int()
    return causal * ((d < window).int() + (j < num_sinks).int())


C = "check_sink_window_mask"
_add(EX9, C, "right-broadcast", "right: causal & (window | j < num_sinks)", True, sink_right)
_add(EX9, C, "right-loops", "right: python loops and torch.tensor", True, sink_right_loops)
_add(EX9, C, "right-setcols", "right: set the first columns True, then tril", True, sink_right_setcols)
_add(EX9, C, "sinks-ignored", "returns Part 1's mask, ignores num_sinks", False, sink_ignored)
_add(EX9, C, "sinks-future", "sink columns OR-ed in after the causal mask: early queries see future sinks", False, sink_future)
_add(EX9, C, "sinks-rows", "i < num_sinks instead of j < num_sinks", False, sink_rows)
_add(EX9, C, "sinks-le", "j <= num_sinks: one sink too many", False, sink_le)
_add(EX9, C, "window+1", "d <= window in the window part", False, sink_window_plus_one)
_add(EX9, C, "two-sided", "|i - j| < window, sinks causal", False, sink_two_sided)
_add(EX9, C, "inverted", "True where masked", False, sink_inverted)
_add(EX9, C, "float", "right pattern, float dtype", False, sink_float)
_add(EX9, C, "and-not-or", "window AND sinks instead of OR", False, sink_and)
_add(EX9, C, "widen-window", "treats the sinks as widening the window: d < window + num_sinks", False, sink_widen_window)
_add(EX9, C, "rows-and-cols", "sinks as both rows and columns: sink queries see every key, future ones included", False, sink_rows_and_cols)
_add(EX9, C, "slice-minus-one", "m[:, :num_sinks-1]: one sink short, and num_sinks=0 wraps round to all but the last column", False, sink_slice_minus_one)
_add(EX9, C, "only-first", "always column 0 as the sink, whatever num_sinks; no tril after", False, sink_only_first)
_add(EX9, C, "budget", "window shrunk by num_sinks (fixed cache budget)", False, sink_budget)
_add(EX9, C, "added-ints", "adds the two masks as ints: values 0/1/2, int dtype", False, sink_added_ints)


# =====================================================================================
# 10 GQA, Part 1: expand_kv(kv, num_heads)
# =====================================================================================
EX10 = "10_grouped_query_and_kv_cache"


def ekv_right(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=1)


def ekv_right_expand(kv, num_heads):
    B, Hkv, L, d = kv.shape
    g = num_heads // Hkv
    return kv[:, :, None].expand(B, Hkv, g, L, d).reshape(B, num_heads, L, d)


def ekv_right_index(kv, num_heads):
    g = num_heads // kv.shape[1]
    idx = torch.arange(num_heads, device=kv.device) // g
    return kv.index_select(1, idx)


def ekv_repeat(kv, num_heads):
    return kv.repeat(1, num_heads // kv.size(1), 1, 1)


def ekv_expand_view(kv, num_heads):
    B, Hkv, L, d = kv.shape
    g = num_heads // Hkv
    return kv[:, :, None].expand(B, Hkv, g, L, d).view(B, num_heads, L, d)


def ekv_wrong_dim(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=2)


def ekv_num_heads_times(kv, num_heads):
    return kv.repeat_interleave(num_heads, dim=1)


def ekv_ratio_upside_down(kv, num_heads):
    g = max(kv.size(1) // num_heads, 1)
    return kv.repeat_interleave(g, dim=1)


def ekv_expand_tiled(kv, num_heads):
    B, Hkv, L, d = kv.shape
    g = num_heads // Hkv
    return kv[:, None].expand(B, g, Hkv, L, d).reshape(B, num_heads, L, d)


def ekv_scaled(kv, num_heads):
    g = num_heads // kv.size(1)
    return kv.repeat_interleave(g, dim=1) / g  # "keep the total the same"


def ekv_modulo(kv, num_heads):
    idx = torch.arange(num_heads) % kv.size(1)
    return kv[:, idx]


def ekv_hardcoded_4(kv, num_heads):
    return kv.repeat_interleave(4, dim=1)


def ekv_batch_axis(kv, num_heads):
    g = num_heads // kv.size(0)
    return kv.repeat_interleave(g, dim=1)


def ekv_cat_last(kv, num_heads):
    g = num_heads // kv.size(1)
    return torch.cat([kv] * g, dim=-1)


def ekv_plain_expand(kv, num_heads):
    B, Hkv, L, d = kv.shape
    return kv.expand(B, num_heads, L, d)


def ekv_transposed(kv, num_heads):
    g = num_heads // kv.size(1)
    return kv.repeat_interleave(g, dim=1).transpose(-2, -1)  # keys ready for q @ k


def ekv_heads_from_one(kv, num_heads):
    Hkv = kv.size(1)
    g = num_heads // Hkv
    idx = (torch.arange(1, num_heads + 1) // g).clamp(max=Hkv - 1)  # heads counted from 1
    return kv[:, idx]


C = "check_expand_kv"
_add(EX10, C, "right-repeat-interleave", "right: repeat_interleave on dim 1", True, ekv_right)
_add(EX10, C, "right-expand-reshape", "right: unsqueeze, expand, reshape", True, ekv_right_expand)
_add(EX10, C, "right-index-select", "right: index_select with arange(H) // g", True, ekv_right_index)
_add(EX10, C, "repeat", "kv.repeat: tiles the heads (0,1,0,1,...)", False, ekv_repeat)
_add(EX10, C, "expand-view", "expand then .view: fails on the non-contiguous input", False, ekv_expand_view)
_add(EX10, C, "wrong-dim", "repeat_interleave along the sequence axis", False, ekv_wrong_dim)
_add(EX10, C, "times-num-heads", "repeat_interleave(num_heads) instead of the ratio", False, ekv_num_heads_times)
_add(EX10, C, "ratio-upside-down", "g = H_kv // H (clamped to 1): nothing expanded", False, ekv_ratio_upside_down)
_add(EX10, C, "expand-tiled", "new axis before the heads: tiled order", False, ekv_expand_tiled)
_add(EX10, C, "scaled", "divides the copies by g", False, ekv_scaled)
_add(EX10, C, "modulo", "index h % H_kv: tiled order via indexing", False, ekv_modulo)
_add(EX10, C, "hardcoded-4", "repeat_interleave(4) from the 8/2 example", False, ekv_hardcoded_4)
_add(EX10, C, "batch-axis", "H_kv read from kv.size(0) (the batch)", False, ekv_batch_axis)
_add(EX10, C, "cat-last", "concatenates copies along d_k", False, ekv_cat_last)
_add(EX10, C, "plain-expand", "kv.expand to num_heads: only works for one KV head", False, ekv_plain_expand)
_add(EX10, C, "transposed", "returns the keys transposed (B, H, d_k, L)", False, ekv_transposed)
_add(EX10, C, "heads-from-one", "(h+1) // g clamped: the last head of each group reads the next KV head", False, ekv_heads_from_one)


# =====================================================================================
# 10 Part 2: attend_with_cache(query, key_cache, value_cache, key_new, value_new)
# =====================================================================================


def _attend(q, k, v, scale=None, dim=-1):
    d_k = q.size(-1)
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    w = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=dim)
    return w @ v


def awc_right(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    k = ekv_right(key_cache, H)
    v = ekv_right(value_cache, H)
    return _attend(query, k, v), key_cache, value_cache


def awc_right_sdpa(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=-2)
    value_cache = torch.cat((value_cache, value_new), dim=-2)
    H = query.size(1)
    out = F.scaled_dot_product_attention(query, ekv_right_expand(key_cache, H), ekv_right_expand(value_cache, H))
    return out, key_cache, value_cache


def awc_right_einsum64(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    k = ekv_right_index(key_cache, H).double()
    v = ekv_right_index(value_cache, H).double()
    s = torch.einsum("bhqd,bhkd->bhqk", query.double(), k) / math.sqrt(query.shape[-1])
    out = torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)
    return out.to(query.dtype), key_cache, value_cache


def awc_cat_heads(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=1)
    value_cache = torch.cat((value_cache, value_new), dim=1)
    H = query.size(1)
    return _attend(query, ekv_right(key_cache, H), ekv_right(value_cache, H)), key_cache, value_cache


def awc_prepend(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_new, key_cache), dim=2)
    value_cache = torch.cat((value_new, value_cache), dim=2)
    H = query.size(1)
    return _attend(query, ekv_right(key_cache, H), ekv_right(value_cache, H)), key_cache, value_cache


def awc_attend_before_append(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    out = _attend(query, ekv_right(key_cache, H), ekv_right(value_cache, H))
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    return out, key_cache, value_cache


def awc_old_caches(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), dim=2)
    v = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    return _attend(query, ekv_right(k, H), ekv_right(v, H)), key_cache, value_cache


def awc_expanded_cache(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    if key_cache.size(1) != H:
        key_cache = ekv_right(key_cache, H)
        value_cache = ekv_right(value_cache, H)
    key_cache = torch.cat((key_cache, ekv_right(key_new, H)), dim=2)
    value_cache = torch.cat((value_cache, ekv_right(value_new, H)), dim=2)
    return _attend(query, key_cache, value_cache), key_cache, value_cache


def awc_repeat(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    return _attend(query, ekv_repeat(key_cache, H), ekv_repeat(value_cache, H)), key_cache, value_cache


def awc_scale_seq_len(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    k, v = ekv_right(key_cache, H), ekv_right(value_cache, H)
    return _attend(query, k, v, scale=1 / math.sqrt(k.size(-2))), key_cache, value_cache


def awc_no_scale(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    return _attend(query, ekv_right(key_cache, H), ekv_right(value_cache, H), scale=1.0), key_cache, value_cache


def awc_is_causal(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    out = F.scaled_dot_product_attention(query, ekv_right(key_cache, H), ekv_right(value_cache, H), is_causal=True)
    return out, key_cache, value_cache


def awc_softmax_queries(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    return _attend(query, ekv_right(key_cache, H), ekv_right(value_cache, H), dim=-2), key_cache, value_cache


def awc_value_gets_key(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, key_new), dim=2)  # copy-paste slip
    H = query.size(1)
    return _attend(query, ekv_right(key_cache, H), ekv_right(value_cache, H)), key_cache, value_cache


def awc_scale_multiplied(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    k, v = ekv_right(key_cache, H), ekv_right(value_cache, H)
    return _attend(query, k, v, scale=math.sqrt(query.size(-1))), key_cache, value_cache


def awc_softmax_heads(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=2)
    value_cache = torch.cat((value_cache, value_new), dim=2)
    H = query.size(1)
    return _attend(query, ekv_right(key_cache, H), ekv_right(value_cache, H), dim=1), key_cache, value_cache


def awc_only_new(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    out = _attend(query, ekv_right(key_new, H), ekv_right(value_new, H))
    return out, torch.cat((key_cache, key_new), dim=2), torch.cat((value_cache, value_new), dim=2)


def awc_squeezed(query, key_cache, value_cache, key_new, value_new):
    out, kc, vc = awc_right(query, key_cache, value_cache, key_new, value_new)
    return out.squeeze(2), kc, vc


def awc_one_batch(query, key_cache, value_cache, key_new, value_new):
    # written for batch 1: takes item 0 and broadcasts it back
    out, kc, vc = awc_right(query[:1], key_cache[:1], value_cache[:1], key_new[:1], value_new[:1])
    B = query.size(0)
    return out.expand(B, -1, -1, -1), torch.cat((key_cache, key_new), 2), torch.cat((value_cache, value_new), 2)


C = "check_attend_with_cache"
_add(EX10, C, "right", "right: cat on dim 2, repeat_interleave, softmax", True, awc_right)
_add(EX10, C, "right-sdpa", "right: cat on dim -2, expand/reshape, F.scaled_dot_product_attention", True, awc_right_sdpa)
_add(EX10, C, "right-einsum64", "right: einsum in float64, cast back", True, awc_right_einsum64)
_add(EX10, C, "cat-heads", "cache grown along the heads axis (dim 1)", False, awc_cat_heads)
_add(EX10, C, "prepend", "new key/value put at the front of the caches", False, awc_prepend)
_add(EX10, C, "attend-before-append", "attends to the old cache only, appends afterwards (new token does not see itself)", False, awc_attend_before_append)
_add(EX10, C, "old-caches", "output right but returns the caches it was given", False, awc_old_caches)
_add(EX10, C, "expanded-cache", "caches hold the expanded H heads", False, awc_expanded_cache)
_add(EX10, C, "repeat", "expands with repeat (tiled) instead of repeat_interleave", False, awc_repeat)
_add(EX10, C, "scale-seq-len", "scale 1/sqrt(k.size(-2)) = 1/sqrt(n+1) instead of 1/sqrt(d_k)", False, awc_scale_seq_len)
_add(EX10, C, "no-scale", "forgets the 1/sqrt(d_k)", False, awc_no_scale)
_add(EX10, C, "is-causal", "SDPA with is_causal=True on one query: sees only key 0", False, awc_is_causal)
_add(EX10, C, "softmax-queries", "softmax over dim -2 (the single query)", False, awc_softmax_queries)
_add(EX10, C, "value-gets-key", "appends key_new to the value cache (copy-paste)", False, awc_value_gets_key)
_add(EX10, C, "scale-multiplied", "multiplies the scores by sqrt(d_k)", False, awc_scale_multiplied)
_add(EX10, C, "softmax-heads", "softmax over the heads axis", False, awc_softmax_heads)
_add(EX10, C, "only-new", "attends only to the new token's key/value", False, awc_only_new)
_add(EX10, C, "squeezed", "returns output squeezed to (B, H, d_k)", False, awc_squeezed)
_add(EX10, C, "one-batch", "only batch item 0 computed, broadcast to the batch", False, awc_one_batch)


# =====================================================================================
# 11 RoPE, Part 1: apply_rope(x, positions, base=10000.0)
# =====================================================================================
EX11 = "11_rotary_embeddings"


def _angles(d, positions, base, dtype=torch.float64, two_p=None):
    if two_p is None:
        two_p = torch.arange(0, d, 2, dtype=dtype)
    theta = base ** (-two_p / d)
    return positions.to(dtype)[:, None] * theta[None, :]


def rope_right(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(d, positions.cpu(), base).to(x.device)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def rope_right_complex(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(d, positions, base)
    rot = torch.polar(torch.ones_like(ang), ang)  # complex128
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    out = torch.view_as_real(xc * rot).flatten(-2)
    return out.to(x.dtype)


def rope_right_matrix(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(d, positions, base)
    c, s = ang.cos(), ang.sin()
    R = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)  # (L, d/2, 2, 2)
    pairs = x.double().unflatten(-1, (d // 2, 2))
    out = torch.einsum("lpij,...lpj->...lpi", R, pairs)
    return out.flatten(-2).to(x.dtype)


def _rot(x, cos, sin):
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def rope_rotate_half(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(d, positions, base)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def rope_cos_sin_swapped(x, positions, base=10000.0):
    ang = _angles(x.size(-1), positions, base)
    return _rot(x, ang.sin().to(x.dtype), ang.cos().to(x.dtype))


def rope_clockwise(x, positions, base=10000.0):
    ang = _angles(x.size(-1), positions, base)
    return _rot(x, ang.cos().to(x.dtype), -ang.sin().to(x.dtype))


def rope_exponent_p(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(d, positions, base, two_p=torch.arange(d // 2, dtype=torch.float64))
    return _rot(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


def rope_positive_exponent(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.double()[:, None] * theta
    return _rot(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


def rope_positions_ignored(x, positions, base=10000.0):
    L = x.size(-2)
    ang = _angles(x.size(-1), torch.arange(L), base)
    return _rot(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


def rope_float32_out(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2) / d)
    ang = positions[:, None] * theta[None, :]
    return _rot(x.float(), ang.cos(), ang.sin())


def rope_pairs_from_one(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(d, positions, base, two_p=2 * torch.arange(1, d // 2 + 1, dtype=torch.float64))
    return _rot(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


def rope_positions_plus_one(x, positions, base=10000.0):
    ang = _angles(x.size(-1), positions + 1, base)
    return _rot(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


def rope_base_ignored(x, positions, base=10000.0):
    ang = _angles(x.size(-1), positions, 10000.0)
    return _rot(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


def rope_cat_not_interleaved(x, positions, base=10000.0):
    ang = _angles(x.size(-1), positions, base)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)


def rope_sequential_update(x, positions, base=10000.0):
    ang = _angles(x.size(-1), positions, base)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    out = x.clone()
    out[..., 0::2] = out[..., 0::2] * cos - out[..., 1::2] * sin
    out[..., 1::2] = out[..., 0::2] * sin + out[..., 1::2] * cos  # uses the new even coordinate
    return out


def rope_mixed_layout(x, positions, base=10000.0):
    # HF-style: full-width cos/sin built with cat (rotate-half frequencies) + interleaved rotation
    d = x.size(-1)
    ang = _angles(d, positions, base)
    cos = torch.cat((ang.cos(), ang.cos()), -1).to(x.dtype)
    sin = torch.cat((ang.sin(), ang.sin()), -1).to(x.dtype)
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos + rotated * sin


def rope_dk_wrong_axis(x, positions, base=10000.0):
    d = x.shape[1]  # written for (L, d_k) inputs
    theta = base ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / d)
    ang = positions.double()[:, None] * theta
    return _rot(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


def rope_half_angles_degrees(x, positions, base=10000.0):
    ang = torch.deg2rad(_angles(x.size(-1), positions, base))  # thought the angles were degrees
    return _rot(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


C = "check_apply_rope"
_add(EX11, C, "right-float64", "right: angles in float64, stack/flatten", True, rope_right)
_add(EX11, C, "right-complex", "right: complex multiplication in complex128", True, rope_right_complex)
_add(EX11, C, "right-2x2-einsum", "right: 2x2 rotation matrices and einsum in float64", True, rope_right_matrix)
_add(EX11, C, "rotate-half", "pairs (p, p + d/2) instead of interleaved", False, rope_rotate_half)
_add(EX11, C, "cos-sin-swapped", "cos and sin swapped", False, rope_cos_sin_swapped)
_add(EX11, C, "clockwise", "sign of sin flipped: rotates clockwise", False, rope_clockwise)
_add(EX11, C, "exponent-p", "theta = base^(-p/d): forgot the 2", False, rope_exponent_p)
_add(EX11, C, "positive-exponent", "theta = base^(+2p/d)", False, rope_positive_exponent)
_add(EX11, C, "positions-ignored", "uses arange(L) instead of positions", False, rope_positions_ignored)
_add(EX11, C, "float32-out", "computes in float32 and returns float32 for float64 input", False, rope_float32_out)
_add(EX11, C, "pairs-from-one", "theta uses p+1 (pairs counted from 1)", False, rope_pairs_from_one)
_add(EX11, C, "positions+1", "positions + 1", False, rope_positions_plus_one)
_add(EX11, C, "base-ignored", "base hard-coded to 10000", False, rope_base_ignored)
_add(EX11, C, "cat-not-interleaved", "rotated evens and odds concatenated instead of interleaved", False, rope_cat_not_interleaved)
_add(EX11, C, "sequential-update", "updates the odd coordinate from the already-rotated even one", False, rope_sequential_update)
_add(EX11, C, "mixed-layout", "half-layout cos/sin (cat) with an interleaved rotate: frequencies on the wrong pairs", False, rope_mixed_layout)
_add(EX11, C, "dk-wrong-axis", "d_k read from x.shape[1] (heads or L in batched input)", False, rope_dk_wrong_axis)
_add(EX11, C, "degrees", "converts the angles as if they were degrees", False, rope_half_angles_degrees)


# =====================================================================================
# 11 Part 2: rotary_decode_step(q, k, v, key_cache, value_cache, cos, sin)
# =====================================================================================
ar = lessons_src.apply_rope


def _sdpa(q, k, v, scale=None):
    d = q.size(-1)
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(d) if scale is None else scale)
    return s.softmax(-1) @ v


def rds_right(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q = ar(q, cos, sin, n)
    k = ar(k, cos, sin, n)
    key_cache = torch.cat((key_cache, k), dim=2)
    value_cache = torch.cat((value_cache, v), dim=2)
    return _sdpa(q, key_cache, value_cache), key_cache, value_cache


def rds_right_tensor_sdpa(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.shape[-2]
    pos = torch.tensor([n])
    qr, kr = ar(q, cos, sin, pos), ar(k, cos, sin, pos)
    kc = torch.cat([key_cache, kr], -2)
    vc = torch.cat([value_cache, v], -2)
    print(f"decoding position {n}")
    return F.scaled_dot_product_attention(qr, kc, vc), kc, vc


def rds_right_float64(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    qr = ar(q.double(), cos, sin, n)
    kr = ar(k, cos, sin, n)
    kc = torch.cat((key_cache, kr), 2)
    vc = torch.cat((value_cache, v), 2)
    s = torch.einsum("bhqd,bhkd->bhqk", qr, kc.double()) / math.sqrt(q.size(-1))
    out = torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), vc.double())
    return out.to(q.dtype), kc, vc


def rds_pos_zero(q, k, v, key_cache, value_cache, cos, sin):
    q, k = ar(q, cos, sin), ar(k, cos, sin)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_pos_n_plus_one(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2) + 1  # "the new token is the (n+1)-th"
    q, k = ar(q, cos, sin, n), ar(k, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_pos_n_minus_one_wrap(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    c, s = cos[[n - 1]], sin[[n - 1]]  # last cached position; n = 0 wraps to the table's end
    q, k = _rot(q, c.to(q.dtype), s.to(q.dtype)), _rot(k, c.to(k.dtype), s.to(k.dtype))
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_value_rotated(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q, k, v = ar(q, cos, sin, n), ar(k, cos, sin, n), ar(v, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_rotate_cache_again(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q = ar(q, cos, sin, n)
    kc = torch.cat((key_cache, k), 2)
    kc = ar(kc, cos, sin)  # rotate all keys 0..n
    vc = torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_query_unrotated(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    k = ar(k, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_key_unrotated(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q = ar(q, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_cache_unrotated(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    qr, kr = ar(q, cos, sin, n), ar(k, cos, sin, n)
    out = _sdpa(qr, torch.cat((key_cache, kr), 2), torch.cat((value_cache, v), 2))
    return out, torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)


def rds_half_layout(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q, k = ar(q, cos, sin, n, layout="half"), ar(k, cos, sin, n, layout="half")
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_prepend(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q, k = ar(q, cos, sin, n), ar(k, cos, sin, n)
    kc, vc = torch.cat((k, key_cache), 2), torch.cat((v, value_cache), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_not_grown(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q, k = ar(q, cos, sin, n), ar(k, cos, sin, n)
    out = _sdpa(q, torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2))
    return out, key_cache, value_cache


def rds_no_scale(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q, k = ar(q, cos, sin, n), ar(k, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc, scale=1.0), kc, vc


def rds_query_at_zero(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q = ar(q, cos, sin)  # "the query is the only query: position 0"
    k = ar(k, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_n_from_heads(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(1)  # wrong axis: heads
    q, k = ar(q, cos, sin, n), ar(k, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc), kc, vc


def rds_scale_seq(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q, k = ar(q, cos, sin, n), ar(k, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return _sdpa(q, kc, vc, scale=1 / math.sqrt(kc.size(-2))), kc, vc


def rds_is_causal(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q, k = ar(q, cos, sin, n), ar(k, cos, sin, n)
    kc, vc = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    return F.scaled_dot_product_attention(q, kc, vc, is_causal=True), kc, vc


C = "check_rotary_decode_step"
_add(EX11, C, "right", "right: rotate q and k to position n, append the rotated key", True, rds_right)
_add(EX11, C, "right-tensor-sdpa", "right: positions as a tensor [n], F.sdpa, a print", True, rds_right_tensor_sdpa)
_add(EX11, C, "right-float64", "right: query in float64, einsum, cast back", True, rds_right_float64)
_add(EX11, C, "pos-zero", "rotates the new token to position 0 every step", False, rds_pos_zero)
_add(EX11, C, "pos-n+1", "rotates to position n + 1", False, rds_pos_n_plus_one)
_add(EX11, C, "pos-n-1-wrap", "uses cos[n-1] (the last cached position); n=0 wraps to the table's last row", False, rds_pos_n_minus_one_wrap)
_add(EX11, C, "value-rotated", "rotates v too", False, rds_value_rotated)
_add(EX11, C, "rotate-cache-again", "appends the raw key then rotates the whole cache 0..n", False, rds_rotate_cache_again)
_add(EX11, C, "query-unrotated", "forgets to rotate the query", False, rds_query_unrotated)
_add(EX11, C, "key-unrotated", "forgets to rotate the key (attends and caches it raw)", False, rds_key_unrotated)
_add(EX11, C, "cache-unrotated", "attends with the rotated key but caches the raw one", False, rds_cache_unrotated)
_add(EX11, C, "half-layout", "layout='half' in apply_rope", False, rds_half_layout)
_add(EX11, C, "prepend", "new key/value put at the front of the caches", False, rds_prepend)
_add(EX11, C, "not-grown", "returns the caches it was given", False, rds_not_grown)
_add(EX11, C, "no-scale", "no 1/sqrt(d_k)", False, rds_no_scale)
_add(EX11, C, "query-at-zero", "query rotated to position 0, key to n", False, rds_query_at_zero)
_add(EX11, C, "n-from-heads", "n read from key_cache.size(1) (the heads)", False, rds_n_from_heads)
_add(EX11, C, "scale-seq", "scale 1/sqrt(n + 1) from kc.size(-2)", False, rds_scale_seq)
_add(EX11, C, "is-causal", "F.sdpa with is_causal=True on one query", False, rds_is_causal)


# =====================================================================================
# 12 tiled: online_softmax_update(running_max, running_sum, output, scores, value)
# =====================================================================================
EX12 = "12_tiled_attention"


def osu_right(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.max(dim=-1).values)
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    alpha = torch.exp(running_max - safe)
    p = torch.exp(scores - safe[..., None])
    new_sum = alpha * running_sum + p.sum(-1)
    new_out = alpha[..., None] * output + p @ value
    return new_max, new_sum, new_out


def osu_right_float64(running_max, running_sum, output, scores, value):
    dt = scores.dtype
    m, l, o, s, v = (t.double() for t in (running_max, running_sum, output, scores, value))
    new_max = torch.max(m, s.amax(-1))
    m_safe = new_max.masked_fill(new_max == float("-inf"), 0.0)
    alpha = (m - m_safe).exp()
    p = (s - m_safe.unsqueeze(-1)).exp()
    l2 = l * alpha + p.sum(-1)
    o2 = o * alpha.unsqueeze(-1) + torch.einsum("...qk,kd->...qd", p, v)
    return new_max.to(dt), l2.to(dt), o2.to(dt)


def osu_right_nan_to_num(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    alpha = torch.nan_to_num(torch.exp(running_max - new_max), nan=0.0)
    p = torch.nan_to_num(torch.exp(scores - new_max[..., None]), nan=0.0)
    return new_max, alpha * running_sum + p.sum(-1), alpha[..., None] * output + p @ value


def _osu(running_max, running_sum, output, scores, value, *, rescale_sum=True, rescale_out=True,
         inverse=False, guard_alpha=True, guard_p=True, normalise=False, max_dim=-1, block_only=False):
    blk = scores.max(dim=max_dim).values
    new_max = blk if block_only else torch.maximum(running_max, blk)
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    ma = safe if guard_alpha else new_max
    mp = safe if guard_p else new_max
    alpha = torch.exp(ma - running_max) if inverse else torch.exp(running_max - ma)
    p = torch.exp(scores - mp[..., None])
    new_sum = (alpha * running_sum if rescale_sum else running_sum) + p.sum(-1)
    new_out = (alpha[..., None] * output if rescale_out else output) + p @ value
    if normalise:
        new_out = new_out / new_sum[..., None]
    return new_max, new_sum, new_out


def osu_sum_not_rescaled(*a):
    return _osu(*a, rescale_sum=False)


def osu_out_not_rescaled(*a):
    return _osu(*a, rescale_out=False)


def osu_factor_inverted(*a):
    return _osu(*a, inverse=True)


def osu_normalised(*a):
    return _osu(*a, normalise=True)


def osu_no_guard(*a):
    return _osu(*a, guard_alpha=False, guard_p=False)


def osu_guard_p_only(*a):
    return _osu(*a, guard_alpha=False, guard_p=True)


def osu_guard_alpha_only(*a):
    return _osu(*a, guard_alpha=True, guard_p=False)


def osu_block_max_only(*a):
    return _osu(*a, block_only=True)


def osu_old_max_for_block(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.max(-1).values)
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    alpha = torch.exp(running_max - safe)
    old = torch.where(torch.isinf(running_max), torch.zeros_like(running_max), running_max)
    p = torch.exp(scores - old[..., None])  # block terms against the old maximum
    return new_max, alpha * running_sum + p.sum(-1), alpha[..., None] * output + p @ value


def osu_alpha_not_unsqueezed(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.max(-1).values)
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    alpha = torch.exp(running_max - safe)
    p = torch.exp(scores - safe[..., None])
    return new_max, alpha * running_sum + p.sum(-1), alpha * output + p @ value


def osu_in_place(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.max(-1).values)
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    alpha = torch.exp(running_max - safe)
    p = torch.exp(scores - safe[..., None])
    running_sum.mul_(alpha).add_(p.sum(-1))
    output.mul_(alpha[..., None]).add_(p @ value)
    running_max.copy_(new_max)
    return running_max, running_sum, output


def osu_plain_exp(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.max(-1).values)
    p = torch.exp(scores)  # the max is only tracked, never subtracted
    return new_max, running_sum + p.sum(-1), output + p @ value


def osu_global_stabiliser(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.max(-1).values)
    finite = new_max[torch.isfinite(new_max)]
    g = finite.max() if finite.numel() else torch.tensor(0.0)  # one stabiliser for all queries
    old = running_max[torch.isfinite(running_max)]
    g_old = old.max() if old.numel() else g
    p = torch.exp(scores - g)
    alpha = torch.exp(g_old - g)
    return new_max, alpha * running_sum + p.sum(-1), alpha * output + p @ value


def osu_sum_dim_queries(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.max(-1).values)
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    alpha = torch.exp(running_max - safe)
    p = torch.exp(scores - safe[..., None])
    return new_max, alpha * running_sum + p.sum(-1).sum(-1, keepdim=True) / p.size(-2), alpha[..., None] * output + p @ value


def osu_minus_inf_to_big(running_max, running_sum, output, scores, value):
    # replaces -inf scores with -1e9 "to avoid NaN": masked keys count as exp(0) on empty rows
    scores = scores.masked_fill(torch.isinf(scores), -1e9)
    running_max = running_max.masked_fill(torch.isinf(running_max), -1e9)
    new_max = torch.maximum(running_max, scores.max(-1).values)
    alpha = torch.exp(running_max - new_max)
    p = torch.exp(scores - new_max[..., None])
    return new_max, alpha * running_sum + p.sum(-1), alpha[..., None] * output + p @ value


def osu_max_over_queries(running_max, running_sum, output, scores, value):
    blk = scores.max(dim=-2).values  # over the queries (shape (..., Bk))
    blk = blk.max(-1, keepdim=True).values.expand_as(running_max)
    new_max = torch.maximum(running_max, blk)
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    alpha = torch.exp(running_max - safe)
    p = torch.exp(scores - safe[..., None])
    return new_max, alpha * running_sum + p.sum(-1), alpha[..., None] * output + p @ value


C = "check_online_softmax_update"
_add(EX12, C, "right", "right: torch.where(isinf) guard, rescale both", True, osu_right)
# Relabelled wrong by the lead: the exercise says value is (..., Bc, d_v) with the leading axes of scores; "kd" drops them.
_add(EX12, C, "right-float64", "right: float64 internally, masked_fill guard, einsum, cast back", False, osu_right_float64)
_add(EX12, C, "right-nan-to-num", "right: compute naively, nan_to_num the factor and the exponentials", True, osu_right_nan_to_num)
_add(EX12, C, "sum-not-rescaled", "old sum not multiplied by the factor", False, osu_sum_not_rescaled)
_add(EX12, C, "out-not-rescaled", "old output not multiplied by the factor", False, osu_out_not_rescaled)
_add(EX12, C, "factor-inverted", "factor exp(m_new - m_old)", False, osu_factor_inverted)
_add(EX12, C, "normalised", "returns output / sum", False, osu_normalised)
_add(EX12, C, "no-guard", "no -inf handling at all: NaN on the empty row", False, osu_no_guard)
_add(EX12, C, "guard-p-only", "partial fix: exponent guarded, factor exp(m_old - m_new) not (NaN in factor)", False, osu_guard_p_only)
_add(EX12, C, "guard-alpha-only", "partial fix: factor guarded, block exponentials not (NaN in p)", False, osu_guard_alpha_only)
_add(EX12, C, "block-max-only", "new max = this block's max, forgets the old max", False, osu_block_max_only)
_add(EX12, C, "old-max-for-block", "block's exponentials against the old max", False, osu_old_max_for_block)
_add(EX12, C, "alpha-not-unsqueezed", "factor (…, Lq) multiplied into output (…, Lq, d_v) without [..., None]", False, osu_alpha_not_unsqueezed)
_add(EX12, C, "in-place", "right values, but modifies the arguments in place", False, osu_in_place)
_add(EX12, C, "plain-exp", "exp(scores) without subtracting any maximum", False, osu_plain_exp)
_add(EX12, C, "global-stabiliser", "per-query max returned but exponentials against the global maximum", False, osu_global_stabiliser)
_add(EX12, C, "sum-averaged-queries", "block sum summed over the queries as well, then averaged", False, osu_sum_dim_queries)
_add(EX12, C, "minus-inf-to-big", "replaces -inf by -1e9: an all-masked row gets exp(0) = 1 per masked key", False, osu_minus_inf_to_big)
_add(EX12, C, "max-over-queries", "block max taken over the queries axis then over keys: one max for all queries", False, osu_max_over_queries)


# =====================================================================================
# 13 ALiBi: alibi_bias(num_heads, len_q, len_k)
# =====================================================================================
EX13 = "13_alibi"


def _pow2_slopes(n):
    return [2 ** (-8 * (h + 1) / n) for h in range(n)]


def _slopes(n):
    if math.log2(n).is_integer():
        return _pow2_slopes(n)
    p = 2 ** math.floor(math.log2(n))
    return _pow2_slopes(p) + _pow2_slopes(2 * p)[0::2][: n - p]


def _bias(slopes, len_q, len_k, offset=None, dtype=torch.float32):
    off = len_k - len_q if offset is None else offset
    p = torch.arange(len_q, dtype=dtype)[:, None] + off
    j = torch.arange(len_k, dtype=dtype)[None, :]
    s = torch.tensor(slopes, dtype=dtype)[:, None, None]
    return -s * (p - j)


def alibi_right(num_heads, len_q, len_k):
    return _bias(_slopes(num_heads), len_q, len_k)


def _paper_slopes(n):
    def pow2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


def alibi_right_paper_abs(num_heads, len_q, len_k):
    pos_q = torch.arange(len_k)[-len_q:]
    dist = (pos_q[:, None] - torch.arange(len_k)[None, :]).abs().double()
    print("slopes", _paper_slopes(num_heads))
    out = -torch.tensor(_paper_slopes(num_heads), dtype=torch.float64)[:, None, None] * dist
    return out.float()


def alibi_sign(num_heads, len_q, len_k):
    return -alibi_right(num_heads, len_q, len_k)


def alibi_no_offset(num_heads, len_q, len_k):
    return _bias(_slopes(num_heads), len_q, len_k, offset=0)


def alibi_reversed(num_heads, len_q, len_k):
    return _bias(_slopes(num_heads)[::-1], len_q, len_k)


def alibi_fixed_8(num_heads, len_q, len_k):
    return _bias([2 ** -(h + 1) for h in range(num_heads)], len_q, len_k)


def alibi_naive_any_h(num_heads, len_q, len_k):
    return _bias(_pow2_slopes(num_heads), len_q, len_k)


def alibi_odd_slopes(num_heads, len_q, len_k):
    n = num_heads
    if math.log2(n).is_integer():
        s = _pow2_slopes(n)
    else:
        p = 2 ** math.floor(math.log2(n))
        s = _pow2_slopes(p) + _pow2_slopes(2 * p)[1::2][: n - p]  # 2nd, 4th, ...
    return _bias(s, len_q, len_k)


def alibi_h_from_zero(num_heads, len_q, len_k):
    n = num_heads
    if math.log2(n).is_integer():
        s = [2 ** (-8 * h / n) for h in range(n)]
    else:
        p = 2 ** math.floor(math.log2(n))
        s = [2 ** (-8 * h / p) for h in range(p)] + [2 ** (-8 * h / (2 * p)) for h in range(2 * p)][0::2][: n - p]
    return _bias(s, len_q, len_k)


def alibi_offset_reversed(num_heads, len_q, len_k):
    return _bias(_slopes(num_heads), len_q, len_k, offset=len_q - len_k)


def alibi_offset_off_by_one(num_heads, len_q, len_k):
    pos_q = torch.arange(len_k)[-len_q - 1 : -1] if len_q < len_k else torch.arange(len_q)
    dist = (pos_q[:, None] - torch.arange(len_k)[None, :]).float()
    return -torch.tensor(_slopes(num_heads))[:, None, None] * dist


def alibi_transposed(num_heads, len_q, len_k):
    return alibi_right(num_heads, len_k, len_q).transpose(-2, -1)


def alibi_next_pow2(num_heads, len_q, len_k):
    n = num_heads
    p = 2 ** math.ceil(math.log2(n))
    return _bias(_pow2_slopes(p)[:n], len_q, len_k)


def alibi_int_division(num_heads, len_q, len_k):
    n = num_heads

    def pow2(n):
        return [2 ** (-(8 // n) * (h + 1)) for h in range(n)]

    if math.log2(n).is_integer():
        s = pow2(n)
    else:
        p = 2 ** math.floor(math.log2(n))
        s = pow2(p) + pow2(2 * p)[0::2][: n - p]
    return _bias(s, len_q, len_k)


def alibi_heads_last(num_heads, len_q, len_k):
    return alibi_right(num_heads, len_q, len_k).permute(1, 2, 0)


def alibi_extra_from_end(num_heads, len_q, len_k):
    n = num_heads
    if math.log2(n).is_integer():
        s = _pow2_slopes(n)
    else:
        p = 2 ** math.floor(math.log2(n))
        s = _pow2_slopes(p) + _pow2_slopes(2 * p)[0::2][-(n - p):]
    return _bias(s, len_q, len_k)


def alibi_recursive_whole(num_heads, len_q, len_k):
    # for non powers of 2: the H' slopes, then the first (H - H') slopes of 2H' (not every other)
    n = num_heads
    if math.log2(n).is_integer():
        s = _pow2_slopes(n)
    else:
        p = 2 ** math.floor(math.log2(n))
        s = _pow2_slopes(p) + _pow2_slopes(2 * p)[: n - p]
    return _bias(s, len_q, len_k)


C = "check_alibi_bias"
_add(EX13, C, "right", "right: slopes with the paper's rule, distances by broadcasting", True, alibi_right)
_add(EX13, C, "right-paper-abs", "right: the paper's get_slopes code, |p_i - j| (same on the causal part), float64, a print", True, alibi_right_paper_abs)
_add(EX13, C, "sign", "+beta (p_i - j): positive biases", False, alibi_sign)
_add(EX13, C, "no-offset", "p_i = i: queries at the start, not the end", False, alibi_no_offset)
_add(EX13, C, "reversed", "slopes in the reverse order", False, alibi_reversed)
_add(EX13, C, "fixed-8", "slopes 1/2, 1/4, ... whatever the number of heads", False, alibi_fixed_8)
_add(EX13, C, "naive-any-h", "2^(-8(h+1)/H) for every H, no rule for non powers of 2", False, alibi_naive_any_h)
_add(EX13, C, "odd-slopes", "appends the 2nd, 4th, ... slopes of 2H' instead of 1st, 3rd", False, alibi_odd_slopes)
_add(EX13, C, "h-from-zero", "2^(-8h/H): head 0 gets slope 1", False, alibi_h_from_zero)
_add(EX13, C, "offset-reversed", "p_i = L_q - L_k + i", False, alibi_offset_reversed)
_add(EX13, C, "offset-off-by-one", "query positions one too early (slice [-L_q-1:-1]) when L_q < L_k", False, alibi_offset_off_by_one)
_add(EX13, C, "transposed", "built (H, L_k, L_q) then transposed: bias[h,i,j] = -beta (p_j - i)", False, alibi_transposed)
_add(EX13, C, "next-pow2", "non powers of 2: first H slopes of the next power of 2", False, alibi_next_pow2)
_add(EX13, C, "int-division", "8 // H (integer division) in the exponent", False, alibi_int_division)
_add(EX13, C, "heads-last", "returns (L_q, L_k, H)", False, alibi_heads_last)
_add(EX13, C, "extra-from-end", "every other slope of 2H', but the last H - H' of them", False, alibi_extra_from_end)
_add(EX13, C, "first-not-every-other", "the first H - H' slopes of 2H', not every other", False, alibi_recursive_whole)


# =====================================================================================
# 14 language model: next_token_probs(logits, temperature=1.0, top_k=None)
# =====================================================================================
EX14 = "14_language_model"


def ntp_right(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.topk(x, k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def ntp_right_logsumexp64(logits, temperature=1.0, top_k=None):
    x = logits.double() / temperature
    if top_k is not None and top_k < x.shape[-1]:
        kth = x.sort(dim=-1, descending=True).values[..., top_k - 1 : top_k]
        x = torch.where(x >= kth, x, torch.full_like(x, -math.inf))
    return torch.exp(x - torch.logsumexp(x, -1, keepdim=True)).to(logits.dtype)


def ntp_right_topk_first(logits, temperature=1.0, top_k=None):
    x = logits
    if top_k:
        k = min(top_k, x.shape[-1])
        kth = x.topk(k).values[..., -1, None]
        x = torch.where(x >= kth, x, float("-inf"))
    x = x / temperature  # -inf / T stays -inf
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def ntp_temp_multiplied(logits, temperature=1.0, top_k=None):
    return ntp_right(logits * temperature, 1.0, top_k)


def ntp_temp_ignored(logits, temperature=1.0, top_k=None):
    return ntp_right(logits, 1.0, top_k)


def ntp_topk_after_no_renorm(logits, temperature=1.0, top_k=None):
    p = torch.softmax(logits / temperature, -1)
    if top_k is not None:
        k = min(top_k, p.size(-1))
        kth = p.topk(k, -1).values[..., -1:]
        p = p.masked_fill(p < kth, 0.0)
    return p


def ntp_masked_zero(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.topk(x, k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, 0.0)
    return torch.softmax(x, -1)


def ntp_kth_off_by_one(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None and top_k < x.size(-1):
        kth = x.sort(-1, descending=True).values[..., top_k : top_k + 1]  # index k = (k+1)-th largest
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, -1)


def ntp_ties_dropped(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        idx = torch.topk(x, k, dim=-1).indices
        keep = torch.zeros_like(x, dtype=torch.bool).scatter(-1, idx, True)
        x = x.masked_fill(~keep, float("-inf"))
    return torch.softmax(x, -1)


def ntp_no_clamp(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, -1)


def ntp_global_max(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.topk(x, k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    e = torch.exp(x - x.max())  # one max for the whole tensor
    return e / e.sum(-1, keepdim=True)


def ntp_no_stabiliser(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.topk(x, k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def ntp_softmax_dim0(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.topk(x, k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=0)


def ntp_strict_greater(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.topk(x, k, dim=-1).values[..., -1:]
        x = x.masked_fill(x <= kth, float("-inf"))
        # (keeps the tokens strictly above the k-th)
    return torch.softmax(x, -1)


def ntp_temp_only_with_topk(logits, temperature=1.0, top_k=None):
    if top_k is None:
        return torch.softmax(logits, -1)
    return ntp_right(logits, temperature, top_k)


def ntp_global_topk(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.numel())
        kth = torch.topk(x.flatten(), k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, -1)


def ntp_log_probs(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.topk(x, k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.log_softmax(x, -1)


def ntp_in_place(logits, temperature=1.0, top_k=None):
    logits /= temperature
    if top_k is not None:
        k = min(top_k, logits.size(-1))
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits.masked_fill_(logits < kth, float("-inf"))
    return torch.softmax(logits, -1)


def ntp_topk_one_row(logits, temperature=1.0, top_k=None):
    x = logits / temperature
    if top_k is not None:
        k = min(top_k, x.size(-1))
        kth = torch.topk(x.reshape(-1, x.size(-1))[0], k).values[-1]  # threshold of the first row for all
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, -1)


C = "check_next_token_probs"
_add(EX14, C, "right", "right: scale, topk threshold with min(k, V), masked_fill -inf, softmax", True, ntp_right)
_add(EX14, C, "right-logsumexp64", "right: float64, sort threshold, exp(x - logsumexp(x)), cast back", True, ntp_right_logsumexp64)
_add(EX14, C, "right-topk-first", "right: top-k on raw logits then temperature, hand-written stable softmax", True, ntp_right_topk_first)
_add(EX14, C, "temp-multiplied", "logits * T", False, ntp_temp_multiplied)
_add(EX14, C, "temp-ignored", "temperature ignored", False, ntp_temp_ignored)
_add(EX14, C, "topk-after-no-renorm", "top-k on the probabilities after softmax, not renormalised", False, ntp_topk_after_no_renorm)
_add(EX14, C, "masked-zero", "dropped logits set to 0 instead of -inf", False, ntp_masked_zero)
_add(EX14, C, "kth-off-by-one", "threshold is the (k+1)-th largest (sorted index k)", False, ntp_kth_off_by_one)
_add(EX14, C, "ties-dropped", "keeps exactly the k topk indices (ties dropped)", False, ntp_ties_dropped)
_add(EX14, C, "no-clamp", "torch.topk with k > V raises", False, ntp_no_clamp)
_add(EX14, C, "global-max", "hand softmax stabilised with the max of the whole tensor", False, ntp_global_max)
_add(EX14, C, "no-stabiliser", "hand softmax exp(x) / sum without subtracting the max", False, ntp_no_stabiliser)
_add(EX14, C, "softmax-dim0", "softmax over dim 0", False, ntp_softmax_dim0)
_add(EX14, C, "strict-greater", "drops logits <= k-th: the k-th and its ties dropped", False, ntp_strict_greater)
_add(EX14, C, "temp-only-with-topk", "temperature applied only in the top-k branch", False, ntp_temp_only_with_topk)
_add(EX14, C, "global-topk", "top-k over the flattened batch, not per row", False, ntp_global_topk)
_add(EX14, C, "log-probs", "returns log_softmax", False, ntp_log_probs)
_add(EX14, C, "in-place", "divides and masks the caller's logits in place", False, ntp_in_place)
_add(EX14, C, "topk-one-row", "threshold from the first row applied to every row", False, ntp_topk_one_row)


# =====================================================================================
# 16 modern block, Part 1: rms_norm(x, weight, eps=1e-6)
# =====================================================================================
EX16 = "16_modern_block"


def rms_right(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_right_float64(x, weight, eps=1e-6):
    x64 = x.double()
    out = x64 / torch.sqrt((x64 * x64).sum(-1, keepdim=True) / x.shape[-1] + eps)
    return (out * weight.double()).to(x.dtype)


def rms_right_var_mean(x, weight, eps=1e-6):
    ms = x.var(-1, unbiased=False, keepdim=True) + x.mean(-1, keepdim=True) ** 2
    return x / (ms + eps).sqrt() * weight


def rms_mean_subtracted(x, weight, eps=1e-6):
    x = x - x.mean(-1, keepdim=True)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_std(x, weight, eps=1e-6):
    return x / (x.std(-1, keepdim=True) + eps) * weight


def rms_eps_outside(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight


def rms_sum(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps) * weight


def rms_no_root(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_no_weight(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_gemma(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight)


def rms_axis0(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + eps) * weight


def rms_no_keepdim(x, weight, eps=1e-6):
    ms = x.pow(2).mean(-1)  # (...,): broadcasts against the last axis of x, not the rows
    return x * torch.rsqrt(ms + eps) * weight


def rms_eps_hardcoded(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def rms_normalize(x, weight, eps=1e-6):
    return F.normalize(x, dim=-1, eps=eps) * weight


def rms_normalize_sqrt_d(x, weight, eps=1e-6):
    return F.normalize(x, dim=-1, eps=eps) * math.sqrt(x.size(-1)) * weight


def rms_mean_abs(x, weight, eps=1e-6):
    return x / (x.abs().mean(-1, keepdim=True) + eps) * weight


def rms_weight_first(x, weight, eps=1e-6):
    xw = x * weight
    return xw * torch.rsqrt(xw.pow(2).mean(-1, keepdim=True) + eps)


def rms_global(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean() + eps) * weight


def rms_float64_out(x, weight, eps=1e-6):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def rms_eps_squared(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps**2) * weight


C = "check_rms_norm"
_add(EX16, C, "right", "right: x * rsqrt(mean(x^2) + eps) * weight", True, rms_right)
_add(EX16, C, "right-float64", "right: float64, sum / D, cast back", True, rms_right_float64)
_add(EX16, C, "right-var-plus-mean2", "right: var(unbiased=False) + mean^2 = mean of squares", True, rms_right_var_mean)
_add(EX16, C, "mean-subtracted", "subtracts the mean first (LayerNorm)", False, rms_mean_subtracted)
_add(EX16, C, "std", "divides by x.std (unbiased, mean subtracted) + eps", False, rms_std)
_add(EX16, C, "eps-outside", "eps added after the root", False, rms_eps_outside)
_add(EX16, C, "sum", "sum of squares instead of mean", False, rms_sum)
_add(EX16, C, "no-root", "divides by the mean square, no root", False, rms_no_root)
_add(EX16, C, "no-weight", "forgets the weight", False, rms_no_weight)
_add(EX16, C, "gemma", "multiplies by (1 + weight), Gemma style", False, rms_gemma)
_add(EX16, C, "axis0", "mean over dim 0", False, rms_axis0)
_add(EX16, C, "no-keepdim", "mean(-1) without keepdim: broadcasts along the wrong axis or fails", False, rms_no_keepdim)
_add(EX16, C, "eps-hardcoded", "ignores eps, uses 1e-6", False, rms_eps_hardcoded)
_add(EX16, C, "normalize", "F.normalize (L2 norm, no 1/D) times weight", False, rms_normalize)
_add(EX16, C, "normalize-sqrt-d", "F.normalize * sqrt(D): eps handled as a floor on the norm", False, rms_normalize_sqrt_d)
_add(EX16, C, "mean-abs", "mean absolute value instead of root mean square", False, rms_mean_abs)
_add(EX16, C, "weight-first", "multiplies by weight before normalising", False, rms_weight_first)
_add(EX16, C, "global", "mean of squares over the whole tensor", False, rms_global)
_add(EX16, C, "float64-out", "computes in float64 and returns float64", False, rms_float64_out)
_add(EX16, C, "eps-squared", "sqrt(ms + eps^2)", False, rms_eps_squared)


# =====================================================================================
# 16 Part 2: swiglu(x, w_gate, w_up, w_down)
# =====================================================================================


def sw_right(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def sw_right_linear(x, w_gate, w_up, w_down):
    h = F.linear(x, w_gate)
    h = h * torch.sigmoid(h) * F.linear(x, w_up)
    return F.linear(h, w_down)


def sw_right_einsum64(x, w_gate, w_up, w_down):
    xd = x.double()
    g = torch.einsum("...d,fd->...f", xd, w_gate.double())
    u = torch.einsum("...d,fd->...f", xd, w_up.double())
    h = g / (1 + torch.exp(-g)) * u
    print("hidden", tuple(h.shape))
    return torch.einsum("...f,df->...d", h, w_down.double()).to(x.dtype)


def sw_swapped(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_up.T) * (x @ w_gate.T)) @ w_down.T


def sw_silu_product(x, w_gate, w_up, w_down):
    return F.silu((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def sw_silu_both(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * F.silu(x @ w_up.T)) @ w_down.T


def sw_silu_after_down(x, w_gate, w_up, w_down):
    return F.silu(((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T)


def sw_relu(x, w_gate, w_up, w_down):
    return (F.relu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def sw_gelu(x, w_gate, w_up, w_down):
    return (F.gelu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def sw_sigmoid(x, w_gate, w_up, w_down):
    return (torch.sigmoid(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def sw_no_up(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate.T) @ w_down.T


def sw_sum(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) + (x @ w_up.T)) @ w_down.T


def sw_not_transposed(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


def sw_no_down(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate.T) * (x @ w_up.T)


def sw_silu_sign(x, w_gate, w_up, w_down):
    g = x @ w_gate.T
    return (g / (1 + torch.exp(g)) * (x @ w_up.T)) @ w_down.T  # exp(z) instead of exp(-z)


def sw_down_not_transposed(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down


def sw_glu(x, w_gate, w_up, w_down):
    return F.glu(torch.cat((x @ w_up.T, x @ w_gate.T), -1), dim=-1) @ w_down.T


def sw_product_after_down(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) @ w_down.T) * ((x @ w_up.T) @ w_down.T)


def sw_swish_beta(x, w_gate, w_up, w_down):
    g = x @ w_gate.T
    return (g * torch.sigmoid(1.702 * g) * (x @ w_up.T)) @ w_down.T


def sw_silu_on_input(x, w_gate, w_up, w_down):
    return ((F.silu(x) @ w_gate.T) * (x @ w_up.T)) @ w_down.T


C = "check_swiglu"
_add(EX16, C, "right", "right: silu(x Wg^T) * x Wu^T, then Wd^T", True, sw_right)
_add(EX16, C, "right-linear", "right: F.linear and h * sigmoid(h)", True, sw_right_linear)
_add(EX16, C, "right-einsum64", "right: einsum in float64, hand SiLU, a print, cast back", True, sw_right_einsum64)
_add(EX16, C, "swapped", "SiLU on the up branch, gate linear", False, sw_swapped)
_add(EX16, C, "silu-product", "SiLU on the product", False, sw_silu_product)
_add(EX16, C, "silu-both", "SiLU on both branches", False, sw_silu_both)
_add(EX16, C, "silu-after-down", "SiLU after the down projection", False, sw_silu_after_down)
_add(EX16, C, "relu", "ReLU instead of SiLU", False, sw_relu)
_add(EX16, C, "gelu", "GELU instead of SiLU", False, sw_gelu)
_add(EX16, C, "sigmoid", "sigmoid instead of SiLU (GLU)", False, sw_sigmoid)
_add(EX16, C, "no-up", "up branch missing", False, sw_no_up)
_add(EX16, C, "sum", "gate + up instead of product", False, sw_sum)
_add(EX16, C, "not-transposed", "x @ w without .T (shape error)", False, sw_not_transposed)
_add(EX16, C, "no-down", "down projection missing", False, sw_no_down)
_add(EX16, C, "silu-sign", "hand SiLU z / (1 + exp(z)): the sign in the exponent", False, sw_silu_sign)
_add(EX16, C, "down-not-transposed", "only w_down left untransposed (shape error)", False, sw_down_not_transposed)
_add(EX16, C, "glu", "F.glu on cat(up, gate): sigmoid gate", False, sw_glu)
_add(EX16, C, "product-after-down", "both branches projected down, then multiplied", False, sw_product_after_down)
_add(EX16, C, "swish-1.702", "z * sigmoid(1.702 z) (the GELU approximation) as SiLU", False, sw_swish_beta)
_add(EX16, C, "silu-on-input", "SiLU on x before the gate projection", False, sw_silu_on_input)


# Answers whose wrongness depends on a reading of the exercise text the text does not state outright.
_BORDERLINE = {
    ("check_rms_norm", "float64-out"): "the exercise does not say that the output keeps x's dtype",
    ("check_next_token_probs", "in-place"): "the exercise does not forbid modifying logits in place (exercise 12 does)",
}
for _a in ANSWERS:
    if (_a["check"], _a["name"]) in _BORDERLINE:
        _a["borderline"] = True
        _a["borderline_why"] = _BORDERLINE[(_a["check"], _a["name"])]
