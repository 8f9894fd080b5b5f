"""Blind answers for exercises 07 to 12, written from the exercise text alone."""
import math
import torch
import torch.nn.functional as F
import lessons_src

ANSWERS = []


def _add(exercise, check, name, intent, right, *fns):
    ANSWERS.append(dict(exercise=exercise, check=check, name=name, intent=intent, right=right, fns=tuple(fns)))


# ======================================================================================
# 07: warmup_lr(step, base_lr, warmup_steps)
# ======================================================================================
EX07, CK07 = "07_layer_norm_placement", "check_warmup_lr"


def warmup_right_branches(step, base_lr, warmup_steps):
    n = step + 1
    if n < warmup_steps:
        return base_lr * n / warmup_steps
    return base_lr * math.sqrt(warmup_steps / n)
_add(EX07, CK07, "right-branches", "correct: two branches on n = step + 1 instead of min()", True,
     warmup_right_branches)


def warmup_right_paper_form(step, base_lr, warmup_steps):
    n = float(step + 1)
    # the paper's d^-0.5 * min(n^-0.5, n * w^-1.5), renormalised so the peak is base_lr
    return base_lr * math.sqrt(warmup_steps) * min(n ** -0.5, n * warmup_steps ** -1.5)
_add(EX07, CK07, "right-paper-form", "correct: the paper's min(n^-0.5, n*w^-1.5) times base_lr*sqrt(w)", True,
     warmup_right_paper_form)


def warmup_step_not_plus_one(step, base_lr, warmup_steps):
    return base_lr * min(step / warmup_steps, math.sqrt(warmup_steps / max(step, 1)))
_add(EX07, CK07, "step-not-plus-one",
     "uses step instead of step + 1 in both terms (guarding the division with max(step, 1)): step 0 gets 0, "
     "the peak is one step late", False, warmup_step_not_plus_one)


def warmup_floor_division(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) // warmup_steps, math.sqrt(warmup_steps / (step + 1)))
_add(EX07, CK07, "floor-division",
     "warm-up term written with integer division //, so the rate is 0 for every warm-up step before the peak",
     False, warmup_floor_division)


def warmup_max_not_min(step, base_lr, warmup_steps):
    return base_lr * max((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))
_add(EX07, CK07, "max-not-min",
     "takes max() of the two curves instead of min(): huge rate at step 0, grows linearly after the peak",
     False, warmup_max_not_min)


def warmup_no_sqrt(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, warmup_steps / (step + 1))
_add(EX07, CK07, "decay-without-sqrt",
     "decay written as w/(step+1) without the square root: it decays as 1/step instead of 1/sqrt(step)",
     False, warmup_no_sqrt)


def warmup_decay_off_by_one(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / step)
_add(EX07, CK07, "decay-uses-step",
     "warm-up uses step + 1 but the decay branch uses sqrt(w / step): step w gets base_lr again, every decay "
     "step is one step late", False, warmup_decay_off_by_one)


def warmup_decay_forgets_base_lr(step, base_lr, warmup_steps):
    n = step + 1
    if n <= warmup_steps:
        return base_lr * n / warmup_steps
    return math.sqrt(warmup_steps / n)
_add(EX07, CK07, "decay-forgets-base-lr",
     "forgets to multiply the decay branch by base_lr: after the peak it returns sqrt(w/(step+1)) alone",
     False, warmup_decay_forgets_base_lr)


def warmup_unnormalised_decay(step, base_lr, warmup_steps):
    n = step + 1
    return base_lr * min(n / warmup_steps, 1 / math.sqrt(n))
_add(EX07, CK07, "decay-missing-w",
     "decay term is 1/sqrt(step+1) without the factor w inside the root: the peak is base_lr/sqrt(w), not base_lr",
     False, warmup_unnormalised_decay)


def warmup_overshoot_branch(step, base_lr, warmup_steps):
    if step <= warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / (step + 1))
_add(EX07, CK07, "branch-off-by-one",
     "branch condition step <= warmup_steps keeps the linear ramp one step too long: step w gets (w+1)/w * base_lr, "
     "above the peak", False, warmup_overshoot_branch)


def warmup_no_warmup_constant(step, base_lr, warmup_steps):
    if warmup_steps == 1:
        return base_lr
    return base_lr * min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))
_add(EX07, CK07, "no-warmup-constant",
     "special-cases warmup_steps == 1 as a constant base_lr, forgetting the decay after step 0", False,
     warmup_no_warmup_constant)


def warmup_precedence(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, math.sqrt(warmup_steps / step + 1))
_add(EX07, CK07, "precedence-in-sqrt",
     "operator precedence slip: sqrt(w / step + 1) instead of sqrt(w / (step + 1)); divides by zero at step 0",
     False, warmup_precedence)


def warmup_exponent_sign(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, (warmup_steps / (step + 1)) ** -0.5)
_add(EX07, CK07, "exponent-sign",
     "writes the inverse square root as (w/(step+1)) ** -0.5, i.e. sqrt((step+1)/w): the rate keeps growing after "
     "the peak", False, warmup_exponent_sign)


# ======================================================================================
# 08: decoder_attention(x, memory, source_lengths, self_attn, cross_attn)
# ======================================================================================
EX08, CK08 = "08_decoder_and_cross_attention", "check_decoder_attention"
from lessons_src import causal_mask, padding_mask  # noqa: E402


def _key_pad(memory, source_lengths):
    return padding_mask(source_lengths, memory.size(1)).to(memory.device)  # (B, Ls)


def dec_right_by_hand(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    t = torch.arange(Lt, device=x.device)
    self_mask = t[None, :] <= t[:, None]  # (Lt, Lt)
    lengths = torch.as_tensor(source_lengths, device=x.device)
    keep = torch.arange(Ls, device=x.device)[None, :] < lengths[:, None]  # (B, Ls)
    self_out, _ = self_attn(x, x, x, self_mask)
    cross_out, _ = cross_attn(x, memory, memory, keep[:, None, None, :])
    return self_out, cross_out
_add(EX08, CK08, "right-by-hand", "correct: both masks built by hand with arange comparisons", True,
     dec_right_by_hand)


def dec_right_3d_mask(x, memory, source_lengths, self_attn, cross_attn):
    B, Lt, _ = x.shape
    pad = _key_pad(memory, source_lengths)[:, None, :].expand(B, Lt, memory.size(1))  # (B, Lt, Ls)
    cross_out = cross_attn(x, memory, memory, pad)[0]
    self_out = self_attn(x, x, x, causal_mask(Lt, device=x.device)[None, None])[0]
    return self_out, cross_out
_add(EX08, CK08, "right-3d-mask",
     "correct: cross mask expanded to a 3-D (B, Lt, Ls) mask, causal mask as (1, 1, Lt, Lt)", True,
     dec_right_3d_mask)


def dec_cross_reversed(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1), device=x.device))
    cross_out, _ = cross_attn(memory, x, x, None)
    return self_out, cross_out
_add(EX08, CK08, "cross-query-is-memory",
     "cross-attention reversed: memory is the query and x the keys/values (no mask); output has Ls rows",
     False, dec_cross_reversed)


def dec_no_padding(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1), device=x.device))
    cross_out, _ = cross_attn(x, memory, memory, None)
    return self_out, cross_out
_add(EX08, CK08, "no-padding-mask",
     "cross-attention called with mask=None: target positions attend to the source padding", False, dec_no_padding)


def dec_causal_cross(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out, _ = self_attn(x, x, x, causal_mask(Lt, device=x.device))
    mask = causal_mask(Lt, Ls, device=x.device)[None, None] & _key_pad(memory, source_lengths)[:, None, None, :]
    cross_out, _ = cross_attn(x, memory, memory, mask)
    return self_out, cross_out
_add(EX08, CK08, "causal-cross",
     "adds a causal mask (causal_mask(Lt, Ls)) to the cross-attention on top of the padding mask", False,
     dec_causal_cross)


def dec_self_not_causal(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, None)
    cross_out, _ = cross_attn(x, memory, memory, _key_pad(memory, source_lengths)[:, None, None, :])
    return self_out, cross_out
_add(EX08, CK08, "self-not-causal",
     "self-attention called with no mask: every target position sees future positions", False, dec_self_not_causal)


def dec_pad_2d(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1), device=x.device))
    cross_out, _ = cross_attn(x, memory, memory, _key_pad(memory, source_lengths))
    return self_out, cross_out
_add(EX08, CK08, "pad-mask-2d",
     "passes the (B, Ls) padding mask as it is, without the head and query axes: it is read as (Lq, Lk) "
     "(shape error unless B equals Lt)", False, dec_pad_2d)


def dec_pad_on_queries(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1), device=x.device))
    cross_out, _ = cross_attn(x, memory, memory, _key_pad(memory, source_lengths)[:, None, :, None])
    return self_out, cross_out
_add(EX08, CK08, "pad-on-query-axis",
     "padding mask placed on the query axis, (B, 1, Ls, 1), instead of the key axis (B, 1, 1, Ls): masks target "
     "rows, and fails to broadcast when Lt != Ls", False, dec_pad_on_queries)


def dec_pad_inverted(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1), device=x.device))
    cross_out, _ = cross_attn(x, memory, memory, ~_key_pad(memory, source_lengths)[:, None, None, :])
    return self_out, cross_out
_add(EX08, CK08, "pad-inverted",
     "uses PyTorch's key_padding_mask convention (True = padding): cross-attention sees only the padding", False,
     dec_pad_inverted)


def dec_causal_inverted(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    future = torch.triu(torch.ones(Lt, Lt, dtype=torch.bool, device=x.device), diagonal=1)
    self_out, _ = self_attn(x, x, x, future)
    cross_out, _ = cross_attn(x, memory, memory, _key_pad(memory, source_lengths)[:, None, None, :])
    return self_out, cross_out
_add(EX08, CK08, "causal-inverted",
     "causal mask built as triu(diagonal=1), PyTorch's True = blocked convention: each position sees only its "
     "future", False, dec_causal_inverted)


def dec_causal_no_diag(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    strict = torch.tril(torch.ones(Lt, Lt, dtype=torch.bool, device=x.device), diagonal=-1)
    self_out, _ = self_attn(x, x, x, strict)
    cross_out, _ = cross_attn(x, memory, memory, _key_pad(memory, source_lengths)[:, None, None, :])
    return self_out, cross_out
_add(EX08, CK08, "causal-without-diagonal",
     "causal mask tril(diagonal=-1) leaves out the diagonal: position t sees 0..t-1, not itself", False,
     dec_causal_no_diag)


def dec_one_module(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1), device=x.device))
    cross_out, _ = self_attn(x, memory, memory, _key_pad(memory, source_lengths)[:, None, None, :])
    return self_out, cross_out
_add(EX08, CK08, "self-module-for-cross",
     "calls self_attn for the cross-attention too (cross_attn never used): the cross output uses the wrong weights",
     False, dec_one_module)


def dec_lengths_off_by_one(x, memory, source_lengths, self_attn, cross_attn):
    Ls = memory.size(1)
    lengths = torch.as_tensor(source_lengths, device=x.device)
    keep = torch.arange(Ls, device=x.device)[None, :] <= lengths[:, None]  # (B, Ls)
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1), device=x.device))
    cross_out, _ = cross_attn(x, memory, memory, keep[:, None, None, :])
    return self_out, cross_out
_add(EX08, CK08, "padding-off-by-one",
     "hand-built padding mask uses <= lengths instead of <: the first padding token of each source is visible",
     False, dec_lengths_off_by_one)


def dec_returns_weights(x, memory, source_lengths, self_attn, cross_attn):
    _, self_w = self_attn(x, x, x, causal_mask(x.size(1), device=x.device))
    _, cross_w = cross_attn(x, memory, memory, _key_pad(memory, source_lengths)[:, None, None, :])
    return self_w, cross_w
_add(EX08, CK08, "returns-weights",
     "returns the attention weights (B, H, Lq, Lk) of each call instead of the outputs (B, Lt, D)", False,
     dec_returns_weights)


# ======================================================================================
# 09 part 1: sliding_window_mask(seq_len, window)
# ======================================================================================
EX09 = "09_efficient_attention"
CK09A = "check_sliding_window_mask"


def swm_right_tril(seq_len, window):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril() & ~ones.tril(-window)
_add(EX09, CK09A, "right-tril-difference", "correct: lower triangle minus the triangle below diagonal -window", True,
     swm_right_tril)


def swm_right_loop(seq_len, window):
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        mask[i, max(0, i - window + 1): i + 1] = True
    return mask
_add(EX09, CK09A, "right-loop", "correct: a Python loop filling each row's slice", True, swm_right_loop)


def _dist(seq_len):
    pos = torch.arange(seq_len)
    return pos[:, None] - pos[None, :]  # i - j


def swm_window_plus_one(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0) & (d <= window)
_add(EX09, CK09A, "window-plus-one", "uses i - j <= window (non-strict): each query sees window + 1 keys", False,
     swm_window_plus_one)


def swm_window_minus_one(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0) & (d < window - 1)
_add(EX09, CK09A, "window-minus-one",
     "uses i - j < window - 1: each query sees only window - 1 keys (window = 1 gives an all-False mask)", False,
     swm_window_minus_one)


def swm_two_sided(seq_len, window):
    d = _dist(seq_len)
    return d.abs() < window
_add(EX09, CK09A, "two-sided", "|i - j| < window: not causal, the band also covers window - 1 future keys", False,
     swm_two_sided)


def swm_inverted(seq_len, window):
    d = _dist(seq_len)
    return (d < 0) | (d >= window)
_add(EX09, CK09A, "inverted", "returns True where attention is blocked (the complement of the right mask)", False,
     swm_inverted)


def swm_no_diagonal(seq_len, window):
    d = _dist(seq_len)
    return (d > 0) & (d <= window)
_add(EX09, CK09A, "no-diagonal",
     "reads 'window keys' as the window keys before i: 0 < i - j <= window, the query never sees itself", False,
     swm_no_diagonal)


def swm_float(seq_len, window):
    return torch.ones(seq_len, seq_len).tril() - torch.ones(seq_len, seq_len).tril(-window)
_add(EX09, CK09A, "float-dtype", "right pattern, but returns a float 0/1 tensor instead of torch.bool", False,
     swm_float)


def swm_int(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0).int() * (d < window).int()
_add(EX09, CK09A, "int-dtype", "right pattern, but multiplies two .int() tensors and returns int32, not bool",
     False, swm_int)


def swm_transposed(seq_len, window):
    d = _dist(seq_len)
    return (d <= 0) & (-d < window)
_add(EX09, CK09A, "transposed",
     "swaps the roles of i and j: the band is above the diagonal, so each query sees itself and the next window-1 "
     "(future) keys", False, swm_transposed)


def swm_roll_wraps(seq_len, window):
    eye = torch.eye(seq_len, dtype=torch.bool)
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for k in range(min(window, seq_len)):
        mask |= eye.roll(k, dims=0)
    return mask
_add(EX09, CK09A, "roll-wraps-around",
     "builds the band by OR-ing torch.roll-ed identity matrices: roll wraps around, so the first queries also see "
     "keys in the top-right corner (the future)", False, swm_roll_wraps)


# ======================================================================================
# 09 part 2: sink_window_mask(seq_len, window, num_sinks)
# ======================================================================================
CK09B = "check_sink_window_mask"


def sink_right_assign(seq_len, window, num_sinks):
    mask = swm_right_loop(seq_len, window)
    mask[:, :num_sinks] = True
    return mask & torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
_add(EX09, CK09B, "right-assign-columns",
     "correct: window mask, first num_sinks columns set True, then AND-ed with the causal triangle", True,
     sink_right_assign)


def sink_right_loop(seq_len, window, num_sinks):
    rows = []
    for i in range(seq_len):
        rows.append([j <= i and (i - j < window or j < num_sinks) for j in range(seq_len)])
    return torch.tensor(rows, dtype=torch.bool)
_add(EX09, CK09B, "right-loop", "correct: nested Python loops over the two conditions", True, sink_right_loop)


def _sink_parts(seq_len):
    pos = torch.arange(seq_len)
    return pos[:, None], pos[None, :]  # i (L, 1), j (1, L)


def sink_ignored(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & (i - j < window)
_add(EX09, CK09B, "sinks-ignored", "returns Part 1's sliding window and never uses num_sinks", False, sink_ignored)


def sink_future(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ((j <= i) & (i - j < window)) | (j < num_sinks)
_add(EX09, CK09B, "sinks-not-causal",
     "ORs the sink columns after the causal condition: the first queries see sink keys in their future", False,
     sink_future)


def sink_rows(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ((j <= i) & (i - j < window)) | (i < num_sinks)
_add(EX09, CK09B, "sinks-as-rows",
     "marks the first num_sinks queries (rows) instead of keys (columns): those rows see every key, future included, "
     "and later queries see no sinks", False, sink_rows)


def sink_count_plus_one(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & ((i - j < window) | (j <= num_sinks))
_add(EX09, CK09B, "sink-count-plus-one", "j <= num_sinks: one sink too many (num_sinks = 0 still keeps token 0)",
     False, sink_count_plus_one)


def sink_window_plus_one(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & ((i - j <= window) | (j < num_sinks))
_add(EX09, CK09B, "window-plus-one", "window condition i - j <= window: window + 1 keys besides the sinks", False,
     sink_window_plus_one)


def sink_two_sided(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ((i - j).abs() < window) | ((j < num_sinks) & (j <= i))
_add(EX09, CK09B, "two-sided-window",
     "window written as |i - j| < window with causality applied only to the sinks: the window reaches into the "
     "future", False, sink_two_sided)


def sink_inverted(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ~((j <= i) & ((i - j < window) | (j < num_sinks)))
_add(EX09, CK09B, "inverted", "returns the blocked positions (True = masked), the complement of the right mask",
     False, sink_inverted)


def sink_int(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ((j <= i) & ((i - j < window) | (j < num_sinks))).long()
_add(EX09, CK09B, "int-dtype", "right pattern, returned as int64 (.long()) instead of bool", False, sink_int)


def sink_and_not_or(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & (i - j < window) & (j < num_sinks)
_add(EX09, CK09B, "and-instead-of-or",
     "combines window and sinks with & instead of |: only sink keys that are also in the window stay visible",
     False, sink_and_not_or)


def sink_extended_window(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & (i - j < window + num_sinks)
_add(EX09, CK09B, "window-extended-by-sinks",
     "reads the sinks as extra keys at the back of the window: i - j < window + num_sinks, instead of the first "
     "num_sinks tokens of the sequence", False, sink_extended_window)


# ======================================================================================
# 10 part 1: expand_kv(kv, num_heads)
# ======================================================================================
EX10 = "10_grouped_query_and_kv_cache"
CK10A = "check_expand_kv"


def expand_kv_right_expand(kv, num_heads):
    B, H_kv, L, d = kv.shape
    g = num_heads // H_kv
    return kv[:, :, None].expand(B, H_kv, g, L, d).reshape(B, num_heads, L, d)
_add(EX10, CK10A, "right-expand-reshape", "correct: new group axis after the KV-head axis, expand, reshape", True,
     expand_kv_right_expand)


def expand_kv_right_index(kv, num_heads):
    g = num_heads // kv.size(1)
    index = torch.arange(num_heads, device=kv.device) // g
    return kv.index_select(1, index)
_add(EX10, CK10A, "right-index-select", "correct: index_select with the head map h // group", True,
     expand_kv_right_index)


def expand_kv_repeat(kv, num_heads):
    return kv.repeat(1, num_heads // kv.size(1), 1, 1)
_add(EX10, CK10A, "repeat-tiles",
     "uses repeat instead of repeat_interleave: heads are tiled (0,1,0,1,...) instead of grouped (0,0,...,1,1,...)",
     False, expand_kv_repeat)


def expand_kv_wrong_dim(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=2)
_add(EX10, CK10A, "repeat-on-sequence-axis",
     "repeat_interleave along dim 2 (the sequence) instead of dim 1 (the heads): shape (B, H_kv, g*L, d_k)", False,
     expand_kv_wrong_dim)


def expand_kv_repeat_num_heads(kv, num_heads):
    return kv.repeat_interleave(num_heads, dim=1)
_add(EX10, CK10A, "repeat-num-heads-times",
     "repeats each KV head num_heads times instead of num_heads // H_kv times: H_kv * num_heads heads", False,
     expand_kv_repeat_num_heads)


def expand_kv_view(kv, num_heads):
    B, H_kv, L, d = kv.shape
    g = num_heads // H_kv
    return kv[:, :, None].expand(B, H_kv, g, L, d).view(B, num_heads, L, d)
_add(EX10, CK10A, "view-after-expand",
     "uses .view instead of .reshape after expand: raises a RuntimeError because the expanded tensor is not "
     "contiguous", False, expand_kv_view)


def expand_kv_group_outer(kv, num_heads):
    B, H_kv, L, d = kv.shape
    g = num_heads // H_kv
    return kv[:, None].expand(B, g, H_kv, L, d).reshape(B, num_heads, L, d)
_add(EX10, CK10A, "group-axis-outside",
     "puts the new group axis before the KV-head axis when expanding: reshaping gives the tiled order 0,1,0,1,...",
     False, expand_kv_group_outer)


def expand_kv_batch_dim(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(0), dim=1)
_add(EX10, CK10A, "group-from-batch-dim",
     "computes the group size from kv.size(0) (the batch) instead of kv.size(1) (the KV heads)", False,
     expand_kv_batch_dim)


def expand_kv_scaled(kv, num_heads):
    g = num_heads // kv.size(1)
    return kv.repeat_interleave(g, dim=1) / g
_add(EX10, CK10A, "divided-by-group",
     "divides the copies by the group size (to 'share' the head): the values are scaled, not just copied", False,
     expand_kv_scaled)


def expand_kv_index_by_hkv(kv, num_heads):
    index = torch.arange(num_heads, device=kv.device) // kv.size(1)
    return kv[:, index]
_add(EX10, CK10A, "index-divides-by-hkv",
     "head map h // H_kv instead of h // (H / H_kv): wrong heads (index out of range when H_kv < group size, all "
     "head 0 when H == H_kv)", False, expand_kv_index_by_hkv)


def expand_kv_plain_expand(kv, num_heads):
    B, _, L, d = kv.shape
    return kv.expand(B, num_heads, L, d)
_add(EX10, CK10A, "plain-expand",
     "kv.expand(B, num_heads, L, d_k) directly: only works for H_kv = 1 (multi-query), raises otherwise", False,
     expand_kv_plain_expand)


# ======================================================================================
# 10 part 2: attend_with_cache(query, key_cache, value_cache, key_new, value_new)
# ======================================================================================
CK10B = "check_attend_with_cache"


def _expand(kv, num_heads):  # the learner's (right) expand_kv from Part 1
    return kv.repeat_interleave(num_heads // kv.size(1), dim=1)


def _attend(query, K, V):
    scores = query @ K.transpose(-2, -1) / math.sqrt(query.size(-1))
    return torch.softmax(scores, dim=-1) @ V


def cache_right_sdpa(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=-2)
    value_cache = torch.cat((value_cache, value_new), dim=-2)
    H = query.size(1)
    out = F.scaled_dot_product_attention(query, _expand(key_cache, H), _expand(value_cache, H))
    return out, key_cache, value_cache
_add(EX10, CK10B, "right-sdpa", "correct: cat on dim -2, expand, F.scaled_dot_product_attention with no mask", True,
     cache_right_sdpa)


def cache_right_einsum(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat([key_cache, key_new], 2)
    v = torch.cat([value_cache, value_new], 2)
    H = query.size(1)
    K = expand_kv_right_expand(k, H)
    V = expand_kv_right_expand(v, H)
    w = torch.einsum("bhqd,bhkd->bhqk", query, K).div(query.size(-1) ** 0.5).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", w, V), k, v
_add(EX10, CK10B, "right-einsum", "correct: einsum for the scores and the weighted sum", True, cache_right_einsum)


def cache_cat_heads_axis(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), dim=1)
    v = torch.cat((value_cache, value_new), dim=1)
    H = query.size(1)
    return _attend(query, _expand(k, H), _expand(v, H)), k, v
_add(EX10, CK10B, "cat-on-heads-axis",
     "appends the new key/value along dim 1 (the heads) instead of dim 2 (positions): error unless n = 1", False,
     cache_cat_heads_axis)


def cache_prepended(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_new, key_cache), dim=2)
    v = torch.cat((value_new, value_cache), dim=2)
    H = query.size(1)
    return _attend(query, _expand(k, H), _expand(v, H)), k, v
_add(EX10, CK10B, "prepended",
     "puts the new key/value at the start of the caches instead of the end (the output is the same, the caches' "
     "order is not)", False, cache_prepended)


def cache_attend_before_append(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    out = _attend(query, _expand(key_cache, H), _expand(value_cache, H))
    return out, torch.cat((key_cache, key_new), 2), torch.cat((value_cache, value_new), 2)
_add(EX10, CK10B, "attend-before-append",
     "attends over the old cache before appending: the new token does not see itself (NaN with an empty cache)",
     False, cache_attend_before_append)


def cache_stores_expanded(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    K = _expand(torch.cat((key_cache, key_new), 2), H)
    V = _expand(torch.cat((value_cache, value_new), 2), H)
    return _attend(query, K, V), K, V
_add(EX10, CK10B, "cache-holds-expanded",
     "returns the expanded (B, H, n+1, d_k) tensors as the caches instead of the H_kv shared heads", False,
     cache_stores_expanded)


def cache_repeat_expand(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), 2)
    v = torch.cat((value_cache, value_new), 2)
    g = query.size(1) // k.size(1)
    return _attend(query, k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)), k, v
_add(EX10, CK10B, "repeat-not-interleave",
     "expands the caches with .repeat instead of repeat_interleave: query heads read the wrong KV heads", False,
     cache_repeat_expand)


def cache_is_causal(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), 2)
    v = torch.cat((value_cache, value_new), 2)
    H = query.size(1)
    out = F.scaled_dot_product_attention(query, _expand(k, H), _expand(v, H), is_causal=True)
    return out, k, v
_add(EX10, CK10B, "is-causal",
     "passes is_causal=True: with one query PyTorch aligns the mask top-left, so the new token sees only key 0",
     False, cache_is_causal)


def cache_no_scale(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), 2)
    v = torch.cat((value_cache, value_new), 2)
    H = query.size(1)
    w = torch.softmax(query @ _expand(k, H).transpose(-2, -1), dim=-1)
    return w @ _expand(v, H), k, v
_add(EX10, CK10B, "no-scale", "forgets to divide the scores by sqrt(d_k)", False, cache_no_scale)


def cache_scale_by_length(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), 2)
    v = torch.cat((value_cache, value_new), 2)
    H = query.size(1)
    K, V = _expand(k, H), _expand(v, H)
    w = torch.softmax(query @ K.transpose(-2, -1) / math.sqrt(K.size(-2)), dim=-1)
    return w @ V, k, v
_add(EX10, CK10B, "scale-by-length",
     "reads d_k from the wrong axis (K.size(-2), the n+1 positions): scores divided by sqrt(n+1)", False,
     cache_scale_by_length)


def cache_old_returned(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), 2)
    v = torch.cat((value_cache, value_new), 2)
    H = query.size(1)
    return _attend(query, _expand(k, H), _expand(v, H)), key_cache, value_cache
_add(EX10, CK10B, "caches-not-returned",
     "attends over the grown caches but returns the old (B, H_kv, n, d_k) caches, so the next step loses the token",
     False, cache_old_returned)


def cache_softmax_dim(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), 2)
    v = torch.cat((value_cache, value_new), 2)
    H = query.size(1)
    K, V = _expand(k, H), _expand(v, H)
    w = torch.softmax(query @ K.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-2)
    return w @ V, k, v
_add(EX10, CK10B, "softmax-over-queries",
     "softmax over dim -2 (the single query) instead of -1 (keys): every weight is 1, the output is the sum of the "
     "values", False, cache_softmax_dim)


def cache_value_gets_key(query, key_cache, value_cache, key_new, value_new):
    k = torch.cat((key_cache, key_new), 2)
    v = torch.cat((value_cache, key_new), 2)
    H = query.size(1)
    return _attend(query, _expand(k, H), _expand(v, H)), k, v
_add(EX10, CK10B, "value-cache-gets-key",
     "copy-paste slip: appends key_new (not value_new) to the value cache", False, cache_value_gets_key)


# ======================================================================================
# 11 part 1: apply_rope(x, positions, base=10000.0)
# ======================================================================================
EX11 = "11_rotary_embeddings"
CK11A = "check_apply_rope"


def _angles(positions, d, base, dtype=torch.float64, device=None):
    theta = base ** (-torch.arange(0, d, 2, dtype=dtype, device=device) / d)
    return positions.to(device=device, dtype=dtype)[:, None] * theta[None, :]  # (L, d/2)


def rope_right_complex(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(positions, d, base, device=x.device)
    z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    rotated = torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang))
    return rotated.flatten(-2).to(x.dtype)
_add(EX11, CK11A, "right-complex", "correct: pairs as complex numbers multiplied by e^{i angle}, in float64", True,
     rope_right_complex)


def rope_right_rotate_every_two(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(positions, d, base, device=x.device)
    cos = ang.cos().repeat_interleave(2, dim=-1).to(x.dtype)  # (L, d)
    sin = ang.sin().repeat_interleave(2, dim=-1).to(x.dtype)
    partner = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)  # (-x_odd, x_even) interleaved
    return x * cos + partner * sin
_add(EX11, CK11A, "right-rotate-every-two", "correct: x*cos + rotate_every_two(x)*sin with repeated cos/sin", True,
     rope_right_rotate_every_two)


def _rope_generic(x, ang, sign=1.0):
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.stack((xe * cos - sign * xo * sin, sign * xe * sin + xo * cos), dim=-1).flatten(-2)


def rope_rotate_half(x, positions, base=10000.0):
    d = x.size(-1)
    ang = _angles(positions, d, base, device=x.device)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
_add(EX11, CK11A, "rotate-half", "uses GPT-NeoX's rotate-half pairing (x_p, x_{p+d/2}) instead of interleaved pairs",
     False, rope_rotate_half)


def rope_exponent_p_over_d(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (-torch.arange(d // 2, dtype=torch.float64, device=x.device) / d)
    ang = positions.to(x.device, torch.float64)[:, None] * theta[None, :]
    return _rope_generic(x, ang)
_add(EX11, CK11A, "exponent-p-over-d", "frequency exponent -p/d_k instead of -2p/d_k (arange(d/2) without the 2)",
     False, rope_exponent_p_over_d)


def rope_exponent_positive(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ang = positions.to(x.device, torch.float64)[:, None] * theta[None, :]
    return _rope_generic(x, ang)
_add(EX11, CK11A, "exponent-sign", "drops the minus sign: theta_p = base^(+2p/d_k), frequencies grow with p", False,
     rope_exponent_positive)


def rope_double_two(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (-2 * torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ang = positions.to(x.device, torch.float64)[:, None] * theta[None, :]
    return _rope_generic(x, ang)
_add(EX11, CK11A, "exponent-4p-over-d",
     "multiplies arange(0, d, 2) by 2 again: exponent -4p/d_k, the factor 2 counted twice", False, rope_double_two)


def rope_clockwise(x, positions, base=10000.0):
    return _rope_generic(x, _angles(positions, x.size(-1), base, device=x.device), sign=-1.0)
_add(EX11, CK11A, "clockwise-sign",
     "sign error on the sin terms: rotates clockwise (x_2p cos + x_2p+1 sin, -x_2p sin + x_2p+1 cos)", False,
     rope_clockwise)


def rope_ignores_positions(x, positions, base=10000.0):
    L = x.size(-2)
    return _rope_generic(x, _angles(torch.arange(L), x.size(-1), base, device=x.device))
_add(EX11, CK11A, "positions-ignored", "uses torch.arange(L) as the positions and ignores the `positions` argument",
     False, rope_ignores_positions)


def rope_float32(x, positions, base=10000.0):
    xf = x.float()
    ang = _angles(positions, x.size(-1), base, dtype=torch.float32, device=x.device)
    return _rope_generic(xf, ang)
_add(EX11, CK11A, "always-float32",
     "casts x to float32 and returns that: a float64 input comes back float32 (dtype not kept, precision lost)",
     False, rope_float32)


def rope_cat_not_interleave(x, positions, base=10000.0):
    ang = _angles(positions, x.size(-1), base, device=x.device)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.cat((xe * cos - xo * sin, xe * sin + xo * cos), dim=-1)
_add(EX11, CK11A, "cat-not-interleaved",
     "right rotation of the interleaved pairs, but puts them back with torch.cat: all first coordinates, then all "
     "second ones", False, rope_cat_not_interleave)


def rope_sin_typo(x, positions, base=10000.0):
    ang = _angles(positions, x.size(-1), base, device=x.device)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.stack((xe * cos - xo * sin, xe * sin + xo * sin), dim=-1).flatten(-2)
_add(EX11, CK11A, "sin-for-cos-typo",
     "typo in the second coordinate: x_2p sin + x_2p+1 sin instead of ... + x_2p+1 cos (norms not preserved)",
     False, rope_sin_typo)


def rope_angles_transposed(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ang = positions.to(x.device, torch.float64)[None, :] * theta[:, None]  # (d/2, L)
    return _rope_generic(x, ang)
_add(EX11, CK11A, "angles-transposed",
     "builds the angles as (d_k/2, L) (positions[None, :] * theta[:, None]): broadcasting error unless L = d_k/2, "
     "then silently transposed", False, rope_angles_transposed)


# ======================================================================================
# 11 part 2: rotary_decode_step(q, k, v, key_cache, value_cache, cos, sin)
# ======================================================================================
CK11B = "check_rotary_decode_step"
_rope = lessons_src.apply_rope


def rds_right_sdpa(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.shape[-2]
    pos = torch.tensor([n])
    q_r = _rope(q, cos, sin, pos)
    key_cache = torch.cat([key_cache, _rope(k, cos, sin, pos)], dim=-2)
    value_cache = torch.cat([value_cache, v], dim=-2)
    return F.scaled_dot_product_attention(q_r, key_cache, value_cache), key_cache, value_cache
_add(EX11, CK11B, "right-sdpa", "correct: position tensor [n], rotate q and k, grow caches, SDPA without mask", True,
     rds_right_sdpa)


def rds_right_manual(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    c = cos[n].repeat_interleave(2).to(q.dtype)  # (d,)
    s = sin[n].repeat_interleave(2).to(q.dtype)

    def rot(t):
        partner = torch.stack((-t[..., 1::2], t[..., 0::2]), -1).flatten(-2)
        return t * c + partner * s

    K = torch.cat((key_cache, rot(k)), 2)
    V = torch.cat((value_cache, v), 2)
    out = _attend(rot(q), K, V)
    return out, K, V
_add(EX11, CK11B, "right-manual-rotation", "correct: rotation written by hand with cos[n], sin[n]", True,
     rds_right_manual)


def _rds(q, k, v, key_cache, value_cache, cos, sin, pos_q, pos_k, rotate_v=False, layout="interleaved",
         scale=True, prepend=False, cache_raw=False):
    qr = q if pos_q is None else _rope(q, cos, sin, pos_q, layout=layout)
    kr = k if pos_k is None else _rope(k, cos, sin, pos_k, layout=layout)
    vr = _rope(v, cos, sin, pos_k) if rotate_v else v
    if prepend:
        K, V = torch.cat((kr, key_cache), 2), torch.cat((vr, value_cache), 2)
    else:
        K, V = torch.cat((key_cache, kr), 2), torch.cat((value_cache, vr), 2)
    scores = qr @ K.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.size(-1))
    out = torch.softmax(scores, -1) @ V
    if cache_raw:
        K = torch.cat((key_cache, k), 2)
    return out, K, V


def rds_restart_zero(q, k, v, key_cache, value_cache, cos, sin):
    return _rds(q, k, v, key_cache, value_cache, cos, sin, 0, 0)
_add(EX11, CK11B, "position-zero",
     "rotates the new query and key to position 0 (apply_rope without positions) instead of n", False,
     rds_restart_zero)


def rds_off_by_one(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, n + 1, n + 1)
_add(EX11, CK11B, "position-n-plus-one",
     "rotates the new token to position n + 1 (counting it as the (n+1)-th token) instead of n", False,
     rds_off_by_one)


def rds_rotate_value(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, n, n, rotate_v=True)
_add(EX11, CK11B, "value-rotated", "also rotates the new value v to position n before caching it", False,
     rds_rotate_value)


def rds_rerotate_cache(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    K = _rope(torch.cat((key_cache, k), 2), cos, sin)  # rotates 0..n, cache included
    V = torch.cat((value_cache, v), 2)
    out = _attend(_rope(q, cos, sin, n), K, V)
    return out, K, V
_add(EX11, CK11B, "cache-rotated-again",
     "appends the raw key, then rotates the whole cache to 0..n: the cached keys get rotated a second time", False,
     rds_rerotate_cache)


def rds_query_unrotated(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, None, n)
_add(EX11, CK11B, "query-unrotated", "rotates only the new key; the query enters the scores unrotated", False,
     rds_query_unrotated)


def rds_key_unrotated(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, n, None)
_add(EX11, CK11B, "key-unrotated", "rotates the query but appends the new key unrotated (cache and scores)", False,
     rds_key_unrotated)


def rds_half_layout(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, n, n, layout="half")
_add(EX11, CK11B, "rotate-half-layout",
     "calls apply_rope with layout='half' (Hugging Face's convention) while the cache holds interleaved rotations",
     False, rds_half_layout)


def rds_prepend(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, n, n, prepend=True)
_add(EX11, CK11B, "cache-prepended", "grows the caches at the front (new key/value first) instead of the end", False,
     rds_prepend)


def rds_cache_raw_key(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, n, n, cache_raw=True)
_add(EX11, CK11B, "cache-holds-unrotated-key",
     "attends with the rotated key but stores the unrotated k in the returned key cache", False, rds_cache_raw_key)


def rds_not_grown(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    out, _, _ = _rds(q, k, v, key_cache, value_cache, cos, sin, n, n)
    return out, key_cache, value_cache
_add(EX11, CK11B, "cache-not-grown", "attends correctly but returns the caches it was given, not the grown ones",
     False, rds_not_grown)


def rds_no_scale(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, n, n, scale=False)
_add(EX11, CK11B, "scale-missing", "forgets the 1/sqrt(d_k) scale on the scores", False, rds_no_scale)


def rds_n_from_heads(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(1)
    return _rds(q, k, v, key_cache, value_cache, cos, sin, n, n)
_add(EX11, CK11B, "n-from-heads-axis",
     "reads n as key_cache.size(1), the number of heads, instead of size(2): rotates to position H", False,
     rds_n_from_heads)


# ======================================================================================
# 12: online_softmax_update(running_max, running_sum, output, scores, value)
# ======================================================================================
EX12, CK12 = "12_tiled_attention", "check_online_softmax_update"


def osu_right_nan_to_num(running_max, running_sum, output, scores, value):
    new_max = torch.max(running_max, scores.max(dim=-1).values)
    alpha = torch.nan_to_num(torch.exp(running_max - new_max), nan=0.0)  # -inf - -inf = nan -> 0
    p = torch.nan_to_num(torch.exp(scores - new_max[..., None]), nan=0.0)
    return new_max, alpha * running_sum + p.sum(-1), alpha[..., None] * output + p @ value
_add(EX12, CK12, "right-nan-to-num", "correct: computes the exponentials, then turns the NaN of empty rows into 0",
     True, osu_right_nan_to_num)


def osu_right_masked_fill(running_max, running_sum, output, scores, value):
    new_max = torch.cat((running_max[..., None], scores), dim=-1).amax(dim=-1)
    safe = new_max.masked_fill(new_max == -math.inf, 0.0)
    alpha = (running_max - safe).exp()
    p = (scores - safe.unsqueeze(-1)).exp()
    out = output * alpha.unsqueeze(-1) + torch.einsum("...qk,...kd->...qd", p, value)
    return new_max, running_sum * alpha + p.sum(dim=-1), out
_add(EX12, CK12, "right-masked-fill",
     "correct: max over the old max and the block together, masked_fill for empty rows, einsum for p @ V", True,
     osu_right_masked_fill)


def _osu(running_max, running_sum, output, scores, value, mode=""):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - shift.unsqueeze(-1))
    if mode == "upside_down":
        rescale = torch.exp(shift - running_max)
    new_sum = running_sum * rescale + p.sum(-1)
    new_out = output * rescale.unsqueeze(-1) + p @ value
    if mode == "sum_not_rescaled":
        new_sum = running_sum + p.sum(-1)
    if mode == "out_not_rescaled":
        new_out = output + p @ value
    if mode == "normalised":
        new_out = new_out / new_sum.unsqueeze(-1)
    return new_max, new_sum, new_out


def osu_sum_not_rescaled(running_max, running_sum, output, scores, value):
    return _osu(running_max, running_sum, output, scores, value, "sum_not_rescaled")
_add(EX12, CK12, "sum-not-rescaled", "old running_sum added as it is, not multiplied by exp(m_old - m_new)", False,
     osu_sum_not_rescaled)


def osu_output_not_rescaled(running_max, running_sum, output, scores, value):
    return _osu(running_max, running_sum, output, scores, value, "out_not_rescaled")
_add(EX12, CK12, "output-not-rescaled", "old output added as it is, not multiplied by exp(m_old - m_new)", False,
     osu_output_not_rescaled)


def osu_upside_down(running_max, running_sum, output, scores, value):
    return _osu(running_max, running_sum, output, scores, value, "upside_down")
_add(EX12, CK12, "factor-upside-down", "rescale factor exp(m_new - m_old) instead of exp(m_old - m_new)", False,
     osu_upside_down)


def osu_normalised(running_max, running_sum, output, scores, value):
    return _osu(running_max, running_sum, output, scores, value, "normalised")
_add(EX12, CK12, "normalised-output", "returns the output divided by the new running sum (normalised)", False,
     osu_normalised)


def osu_old_max(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    p = torch.exp(scores - running_max.unsqueeze(-1))
    rescale = torch.exp(running_max - new_max)
    return new_max, running_sum * rescale + p.sum(-1), output * rescale.unsqueeze(-1) + p @ value
_add(EX12, CK12, "block-against-old-max",
     "the block's exponentials use the old maximum instead of the new one (inf on the first block, where it is "
     "-inf)", False, osu_old_max)


def osu_no_guard(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    rescale = torch.exp(running_max - new_max)
    p = torch.exp(scores - new_max.unsqueeze(-1))
    return new_max, running_sum * rescale + p.sum(-1), output * rescale.unsqueeze(-1) + p @ value
_add(EX12, CK12, "no-inf-guard",
     "no guard for a row whose maximum is still -inf: exp(-inf - -inf) gives NaN in its sum and output", False,
     osu_no_guard)


def osu_half_guard(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - new_max.unsqueeze(-1))
    return new_max, running_sum * rescale + p.sum(-1), output * rescale.unsqueeze(-1) + p @ value
_add(EX12, CK12, "guard-only-on-rescale",
     "guards the -inf maximum for the rescale factor but not for the block's exponentials: NaN on an empty row",
     False, osu_half_guard)


def osu_max_wrong_dim(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-2))
    shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - shift.unsqueeze(-1))
    return new_max, running_sum * rescale + p.sum(-1), output * rescale.unsqueeze(-1) + p @ value
_add(EX12, CK12, "max-over-queries",
     "takes the block maximum over dim -2 (queries) instead of -1 (keys): shape error unless Lq = Bc, else wrong max",
     False, osu_max_wrong_dim)


def osu_rescale_not_unsqueezed(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - shift.unsqueeze(-1))
    return new_max, running_sum * rescale + p.sum(-1), output * rescale + p @ value
_add(EX12, CK12, "rescale-not-unsqueezed",
     "multiplies output (..., Lq, d_v) by the (..., Lq) factor without unsqueeze(-1): broadcast error, or the "
     "factor applied along d_v when d_v = Lq", False, osu_rescale_not_unsqueezed)


def osu_plain_exp(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    p = torch.exp(scores)
    return new_max, running_sum + p.sum(-1), output + p @ value
_add(EX12, CK12, "plain-exp-no-max",
     "tracks the max but never subtracts it: sums plain exp(s) (overflows to inf for scores near 90 in float32)",
     False, osu_plain_exp)


def osu_block_max_only(running_max, running_sum, output, scores, value):
    new_max = scores.amax(dim=-1)
    shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    old_shift = torch.where(torch.isinf(running_max), torch.zeros_like(running_max), running_max)
    rescale = torch.exp(old_shift - shift) * (~torch.isinf(running_max))
    p = torch.exp(scores - shift.unsqueeze(-1))
    return new_max, running_sum * rescale + p.sum(-1), output * rescale.unsqueeze(-1) + p @ value
_add(EX12, CK12, "new-max-from-block-only",
     "new maximum taken from the block's scores alone, forgetting the old maximum: drops when a block is lower",
     False, osu_block_max_only)


def osu_in_place(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    rescale = torch.exp(running_max - shift)
    p = torch.exp(scores - shift.unsqueeze(-1))
    running_sum.mul_(rescale).add_(p.sum(-1))
    output.mul_(rescale.unsqueeze(-1)).add_(p @ value)
    return new_max, running_sum, output
_add(EX12, CK12, "in-place",
     "right values, but updates running_sum and output in place with mul_/add_ and returns the mutated arguments",
     False, osu_in_place)
