"""Blind answers for exercises 07 to 12, written from the exercise text alone."""
import math
import torch
import torch.nn.functional as F
import lessons_src

ANSWERS = []


def _add(exercise, check, name, intent, right, *fns):
    ANSWERS.append(dict(exercise=exercise, check=check, name=name, intent=intent, right=right, fns=tuple(fns)))


# ======================================================================================
# 07 warm-up schedule: check_warmup_lr(warmup_lr)
# ======================================================================================
EX07, CK07 = "07_layer_norm_placement", "check_warmup_lr"


def warmup_lr_right_branches(step, base_lr, warmup_steps):
    n = step + 1
    if n < warmup_steps:
        return base_lr * n / warmup_steps
    return base_lr * (warmup_steps / n) ** 0.5


_add(EX07, CK07, "right-if-else", "correct: if/else on the number of updates n = step + 1", True,
     warmup_lr_right_branches)


def warmup_lr_right_paper_form(step, base_lr, warmup_steps):
    # Vaswani's form d^-0.5 * min(n^-0.5, n * w^-1.5), with the peak rescaled to base_lr
    n = step + 1
    return base_lr * math.sqrt(warmup_steps) * min(n ** -0.5, n * warmup_steps ** -1.5)


_add(EX07, CK07, "right-paper-form", "correct: the paper's min(n^-0.5, n*w^-1.5) times sqrt(w)*base_lr", True,
     warmup_lr_right_paper_form)


def warmup_lr_step_not_plus_one(step, base_lr, warmup_steps):
    return base_lr * min(step / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX07, CK07, "warmup-uses-step", "warm-up term uses step/w instead of (step+1)/w: step 0 gets 0 and the "
     "warm-up lags one step behind", False, warmup_lr_step_not_plus_one)


def warmup_lr_floor_division(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) // warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX07, CK07, "integer-division", "uses // (integer division) in the warm-up term, so the rate is 0 for the "
     "whole warm-up", False, warmup_lr_floor_division)


def warmup_lr_max_not_min(step, base_lr, warmup_steps):
    return base_lr * max((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX07, CK07, "max-not-min", "takes max of the two curves instead of min: huge rate at the start and "
     "growing linearly after the peak", False, warmup_lr_max_not_min)


def warmup_lr_decay_no_sqrt(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, warmup_steps / (step + 1))


_add(EX07, CK07, "decay-no-sqrt", "forgets the square root in the decay: the rate decays like 1/step "
     "instead of 1/sqrt(step)", False, warmup_lr_decay_no_sqrt)


def warmup_lr_decay_uses_step(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / step)


_add(EX07, CK07, "decay-off-by-one", "decay branch uses sqrt(w/step) instead of sqrt(w/(step+1)): the decay is "
     "one step late, the rate after the peak is a bit too high", False, warmup_lr_decay_uses_step)


def warmup_lr_le_branch(step, base_lr, warmup_steps):
    if step <= warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / (step + 1))


_add(EX07, CK07, "branch-le", "if/else with step <= warmup_steps: the linear ramp runs one step too long, so "
     "step warmup_steps gets (w+1)/w * base_lr, above the peak", False, warmup_lr_le_branch)


def warmup_lr_missing_sqrt_w(step, base_lr, warmup_steps):
    n = step + 1
    return base_lr * min(n ** -0.5, n * warmup_steps ** -1.5)


_add(EX07, CK07, "paper-form-no-rescale", "copies the paper's min(n^-0.5, n*w^-1.5) and multiplies by base_lr "
     "without the sqrt(w) factor: the peak is base_lr/sqrt(w), not base_lr", False, warmup_lr_missing_sqrt_w)


def warmup_lr_decay_no_w(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, 1 / math.sqrt(step + 1))


_add(EX07, CK07, "decay-missing-w", "decay is 1/sqrt(step+1) without the factor sqrt(w): the decay curve sits "
     "too low and there is a drop at the peak", False, warmup_lr_decay_no_w)


def warmup_lr_factor_only(step, base_lr, warmup_steps):
    # the LambdaLR lambda returns a factor...
    return min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1)))


_add(EX07, CK07, "factor-not-rate", "returns LambdaLR's multiplier (the min of the two terms) without "
     "multiplying by base_lr", False, warmup_lr_factor_only)


def warmup_lr_decay_inverted(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, math.sqrt((step + 1) / warmup_steps))


_add(EX07, CK07, "decay-inverted", "writes the decay as sqrt((step+1)/w) (fraction upside down), so it grows "
     "instead of decaying", False, warmup_lr_decay_inverted)


def warmup_lr_ramp_to_w_minus_one(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * step / (warmup_steps - 1)
    return base_lr * math.sqrt(warmup_steps / (step + 1))


_add(EX07, CK07, "ramp-from-zero", "linear ramp step/(w-1) from 0 at step 0 to base_lr at step w-1: step 0 "
     "gets 0 and warmup_steps=1 divides by zero (ZeroDivisionError)", False, warmup_lr_ramp_to_w_minus_one)


def warmup_lr_returns_tensor(step, base_lr, warmup_steps):
    s = torch.tensor(float(step + 1))
    return base_lr * torch.minimum(s / warmup_steps, torch.sqrt(warmup_steps / s))


_add(EX07, CK07, "returns-tensor", "right formula but computed with torch and returns a 0-d float32 tensor, "
     "not a Python number", False, warmup_lr_returns_tensor)


def warmup_lr_decay_base_missing(step, base_lr, warmup_steps):
    if step + 1 < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return math.sqrt(warmup_steps / (step + 1))


_add(EX07, CK07, "decay-without-base-lr", "if/else where the decay branch forgets to multiply by base_lr "
     "(only the warm-up is scaled)", False, warmup_lr_decay_base_missing)


# ======================================================================================
# 08 decoder: check_decoder_attention(decoder_attention)
# ======================================================================================
EX08, CK08 = "08_decoder_and_cross_attention", "check_decoder_attention"
from lessons_src import causal_mask, padding_mask  # noqa: E402


def decoder_attention_right_by_hand(x, memory, source_lengths, self_attn, cross_attn):
    B, Lt, _ = x.shape
    Ls = memory.size(1)
    t = torch.arange(Lt, device=x.device)
    self_mask = t[None, :] <= t[:, None]  # (Lt, Lt)
    lengths = torch.as_tensor(source_lengths, device=x.device)
    real = torch.arange(Ls, device=x.device)[None, :] < lengths[:, None]  # (B, Ls)
    self_out, _ = self_attn(x, x, x, self_mask)
    cross_out, _ = cross_attn(x, memory, memory, real.view(B, 1, 1, Ls))
    return self_out, cross_out


_add(EX08, CK08, "right-by-hand", "correct: masks built by hand with arange comparisons, padding mask (B,1,1,Ls)",
     True, decoder_attention_right_by_hand)


def decoder_attention_right_full_3d(x, memory, source_lengths, self_attn, cross_attn):
    B, Lt, _ = x.shape
    Ls = memory.size(1)
    self_mask = torch.ones(Lt, Lt, dtype=torch.bool, device=x.device).tril()
    pad = padding_mask(source_lengths, Ls).to(x.device)  # (B, Ls)
    cross_mask = pad[:, None, :].expand(B, Lt, Ls)  # (B, Lt, Ls): one per sequence
    return self_attn(x, x, x, self_mask)[0], cross_attn(x, memory, memory, cross_mask)[0]


_add(EX08, CK08, "right-3d-mask", "correct: tril causal mask and a per-sequence 3-D (B, Lt, Ls) padding mask",
     True, decoder_attention_right_full_3d)


def decoder_attention_swapped_modules(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    self_out, _ = cross_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = self_attn(x, memory, memory, pad)
    return self_out, cross_out


_add(EX08, CK08, "modules-swapped", "uses cross_attn for the causal self-attention and self_attn for the "
     "cross-attention (the two modules swapped)", False, decoder_attention_swapped_modules)


def decoder_attention_memory_queries(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    self_out, _ = self_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = cross_attn(memory, x, x, pad)
    return self_out, cross_out


_add(EX08, CK08, "cross-query-is-memory", "cross-attention with memory as the query and x as key/value "
     "(roles reversed); the padding mask no longer fits the keys (error or wrong shape)", False,
     decoder_attention_memory_queries)


def decoder_attention_pad_on_queries(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = padding_mask(source_lengths, Ls)[:, None, :, None]  # (B, 1, Ls, 1)
    self_out, _ = self_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


_add(EX08, CK08, "pad-mask-on-query-axis", "padding mask put on the query axis, (B,1,Ls,1) instead of "
     "(B,1,1,Ls): fails to broadcast when Lt != Ls and masks queries instead of keys when equal", False,
     decoder_attention_pad_on_queries)


def decoder_attention_no_causal(x, memory, source_lengths, self_attn, cross_attn):
    Ls = memory.size(1)
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    self_out, _ = self_attn(x, x, x, None)
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


_add(EX08, CK08, "self-no-causal", "self-attention called without a mask: target positions see the future",
     False, decoder_attention_no_causal)


def decoder_attention_causal_cross(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    cross_mask = pad & causal_mask(Lt, Ls)
    self_out, _ = self_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = cross_attn(x, memory, memory, cross_mask)
    return self_out, cross_out


_add(EX08, CK08, "cross-also-causal", "adds a causal mask (causal_mask(Lt, Ls)) to the cross-attention on top "
     "of the padding mask: target positions cannot see the whole source", False, decoder_attention_causal_cross)


def decoder_attention_no_padding(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    self_out, _ = self_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = cross_attn(x, memory, memory, None)
    return self_out, cross_out


_add(EX08, CK08, "cross-no-padding", "cross-attention without the padding mask: queries attend to source padding",
     False, decoder_attention_no_padding)


def decoder_attention_inverted_causal(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    blocked = torch.triu(torch.ones(Lt, Lt, dtype=torch.bool), diagonal=1)  # True = future
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    self_out, _ = self_attn(x, x, x, blocked)
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


_add(EX08, CK08, "causal-inverted", "causal mask built with True = blocked (triu(diagonal=1)): positions see only "
     "the future, the last one nothing", False, decoder_attention_inverted_causal)


def decoder_attention_inverted_padding(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = ~padding_mask(source_lengths, Ls)[:, None, None, :]  # True where padded
    self_out, _ = self_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


_add(EX08, CK08, "padding-inverted", "negates the padding mask (PyTorch key_padding_mask convention, True = pad), "
     "so cross-attention sees only the padding", False, decoder_attention_inverted_padding)


def decoder_attention_strict_past(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    strict = torch.ones(Lt, Lt, dtype=torch.bool).tril(diagonal=-1)
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    self_out, _ = self_attn(x, x, x, strict)
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


_add(EX08, CK08, "causal-without-diagonal", "causal mask tril(diagonal=-1): a position cannot attend to itself, "
     "position 0 sees nothing", False, decoder_attention_strict_past)


def decoder_attention_value_is_x(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    self_out, _ = self_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = cross_attn(x, memory, x, pad)
    return self_out, cross_out


_add(EX08, CK08, "cross-value-is-x", "cross-attention passes x as the value instead of memory (keys from memory, "
     "values from the decoder); shape error when Lt != Ls", False, decoder_attention_value_is_x)


def decoder_attention_no_max_len(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    pad = padding_mask(source_lengths)[:, None, None, :]  # length = longest source, not Ls
    self_out, _ = self_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


_add(EX08, CK08, "padding-mask-no-max-len", "padding_mask(source_lengths) without max_len=Ls: the mask is as long "
     "as the longest source, so it does not fit memory's Ls when every source is padded (shape error)", False,
     decoder_attention_no_max_len)


def decoder_attention_self_over_memory(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    self_out, _ = self_attn(x, memory, memory, causal_mask(Lt, Ls) & pad)
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


_add(EX08, CK08, "self-reads-memory", "the 'self'-attention reads memory as key and value (with a causal "
     "mask over the source) instead of attending to x itself", False, decoder_attention_self_over_memory)


def decoder_attention_returns_tuples(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    pad = padding_mask(source_lengths, Ls)[:, None, None, :]
    return self_attn(x, x, x, causal_mask(Lt)), cross_attn(x, memory, memory, pad)


_add(EX08, CK08, "returns-output-and-weights", "returns the (output, weights) tuples of the two calls without "
     "unpacking the outputs", False, decoder_attention_returns_tuples)


def decoder_attention_pad_off_by_one(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    lengths = torch.as_tensor(source_lengths)
    real = torch.arange(Ls)[None, :] <= lengths[:, None]  # one padding token too many
    self_out, _ = self_attn(x, x, x, causal_mask(Lt))
    cross_out, _ = cross_attn(x, memory, memory, real[:, None, None, :])
    return self_out, cross_out


_add(EX08, CK08, "padding-off-by-one", "hand-built padding mask with <= lengths instead of <: every sequence "
     "also attends to its first padding token", False, decoder_attention_pad_off_by_one)


# ======================================================================================
# 09 part 1: check_sliding_window_mask(sliding_window_mask)
# ======================================================================================
EX09 = "09_efficient_attention"
CK09A = "check_sliding_window_mask"


def sliding_window_mask_right_triu_tril(seq_len, window):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril() & ones.triu(-(window - 1))


_add(EX09, CK09A, "right-triu-tril", "correct: tril() & triu(-(window-1))", True,
     sliding_window_mask_right_triu_tril)


def sliding_window_mask_right_loop(seq_len, window):
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        mask[i, max(0, i - window + 1): i + 1] = True
    return mask


_add(EX09, CK09A, "right-loop", "correct: Python loop filling each row's slice", True, sliding_window_mask_right_loop)


def _dist(seq_len):
    pos = torch.arange(seq_len)
    return pos[:, None] - pos[None, :]  # i - j


def sliding_window_mask_le_window(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0) & (d <= window)


_add(EX09, CK09A, "window-plus-one", "uses i - j <= window instead of < window: window + 1 keys per query", False,
     sliding_window_mask_le_window)


def sliding_window_mask_window_minus_one(seq_len, window):
    d = _dist(seq_len)
    return (d >= 0) & (d < window - 1)


_add(EX09, CK09A, "window-minus-one", "uses i - j < window - 1: window - 1 keys, and window = 1 gives an empty mask",
     False, sliding_window_mask_window_minus_one)


def sliding_window_mask_two_sided(seq_len, window):
    d = _dist(seq_len)
    return d.abs() < window


_add(EX09, CK09A, "two-sided", "|i - j| < window: a symmetric band, queries see window - 1 future keys", False,
     sliding_window_mask_two_sided)


def sliding_window_mask_inverted(seq_len, window):
    d = _dist(seq_len)
    return (d < 0) | (d >= window)


_add(EX09, CK09A, "inverted", "returns True where the query may NOT attend (blocked positions)", False,
     sliding_window_mask_inverted)


def sliding_window_mask_float(seq_len, window):
    ones = torch.ones(seq_len, seq_len)
    return torch.tril(ones) - torch.tril(ones, diagonal=-window)


_add(EX09, CK09A, "float-dtype", "right band but built as tril(ones) - tril(ones, -window) in float: returns "
     "float 0./1., not bool", False, sliding_window_mask_float)


def sliding_window_mask_no_diagonal(seq_len, window):
    d = _dist(seq_len)
    return (d > 0) & (d <= window)


_add(EX09, CK09A, "no-diagonal", "0 < i - j <= window: the previous window keys without the query itself", False,
     sliding_window_mask_no_diagonal)


def sliding_window_mask_transposed(seq_len, window):
    pos = torch.arange(seq_len)
    d = pos[None, :] - pos[:, None]  # j - i by mistake
    return (d >= 0) & (d < window)


_add(EX09, CK09A, "transposed", "computes j - i instead of i - j: the band lies above the diagonal, each query sees "
     "itself and future keys", False, sliding_window_mask_transposed)


def sliding_window_mask_not_causal(seq_len, window):
    d = _dist(seq_len)
    return d < window


_add(EX09, CK09A, "no-causal-bound", "only the 'not too far back' condition i - j < window, forgets j <= i: all "
     "future keys visible", False, sliding_window_mask_not_causal)


def sliding_window_mask_triu_sign(seq_len, window):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril() & ones.triu(window - 1)


_add(EX09, CK09A, "triu-sign", "triu(window - 1) instead of triu(-(window - 1)): right only for window = 1, "
     "empty for any larger window", False, sliding_window_mask_triu_sign)


def sliding_window_mask_uint8(seq_len, window):
    d = _dist(seq_len)
    return ((d >= 0) & (d < window)).to(torch.uint8)


_add(EX09, CK09A, "uint8-dtype", "right band converted to uint8 (old-style byte mask) instead of torch.bool",
     False, sliding_window_mask_uint8)


def sliding_window_mask_clamped_window(seq_len, window):
    window = min(window, seq_len - 1)
    d = _dist(seq_len)
    return (d >= 0) & (d < window)


_add(EX09, CK09A, "clamp-window", "clamps window to seq_len - 1 'to stay in range': window >= seq_len loses the "
     "oldest key, and seq_len = 1 gives [[False]]", False, sliding_window_mask_clamped_window)


# ======================================================================================
# 09 part 2: check_sink_window_mask(sink_window_mask)
# ======================================================================================
CK09B = "check_sink_window_mask"


def sink_window_mask_right_slice_then_tril(seq_len, window, num_sinks):
    d = _dist(seq_len)
    mask = d.abs() < window  # band, made causal below
    mask[:, :num_sinks] = True
    return mask.tril()


_add(EX09, CK09B, "right-slice-then-tril", "correct: band, sink columns set with slicing, then tril() makes it "
     "causal", True, sink_window_mask_right_slice_then_tril)


def sink_window_mask_right_where(seq_len, window, num_sinks):
    i = torch.arange(seq_len).view(-1, 1)
    j = torch.arange(seq_len).view(1, -1)
    return torch.where(j <= i, (i - j < window) | (j < num_sinks), torch.zeros((), dtype=torch.bool))


_add(EX09, CK09B, "right-where", "correct: torch.where on j <= i with the (window or sink) condition", True,
     sink_window_mask_right_where)


def _sink_parts(seq_len):
    pos = torch.arange(seq_len)
    return pos[:, None], pos[None, :]


def sink_window_mask_no_sinks(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & (i - j < window)


_add(EX09, CK09B, "sinks-ignored", "returns Part 1's mask: num_sinks is ignored", False, sink_window_mask_no_sinks)


def sink_window_mask_sinks_future(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ((j <= i) & (i - j < window)) | (j < num_sinks)


_add(EX09, CK09B, "sinks-not-causal", "ORs the sink columns after the causal part: early queries see sinks that "
     "lie in their future (query 0 sees key 1 when num_sinks = 2)", False, sink_window_mask_sinks_future)


def sink_window_mask_sink_rows(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & ((i - j < window) | (i < num_sinks))


_add(EX09, CK09B, "sinks-as-rows", "tests the query index (i < num_sinks) instead of the key index: sink rows "
     "instead of sink columns", False, sink_window_mask_sink_rows)


def sink_window_mask_sinks_plus_one(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & ((i - j < window) | (j <= num_sinks))


_add(EX09, CK09B, "sink-count-plus-one", "j <= num_sinks instead of j < num_sinks: one sink too many (and one sink "
     "even with num_sinks = 0)", False, sink_window_mask_sinks_plus_one)


def sink_window_mask_window_plus_one(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & ((i - j <= window) | (j < num_sinks))


_add(EX09, CK09B, "window-plus-one", "i - j <= window: the window holds window + 1 keys", False,
     sink_window_mask_window_plus_one)


def sink_window_mask_two_sided(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ((i - j).abs() < window) | ((j < num_sinks) & (j <= i))


_add(EX09, CK09B, "two-sided-window", "keeps causality only for the sinks; the window is |i - j| < window, so "
     "queries see future keys inside the window", False, sink_window_mask_two_sided)


def sink_window_mask_inverted(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ~((j <= i) & ((i - j < window) | (j < num_sinks)))


_add(EX09, CK09B, "inverted", "returns the negation: True where attention is blocked", False,
     sink_window_mask_inverted)


def sink_window_mask_float(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return ((j <= i) & ((i - j < window) | (j < num_sinks))).float()


_add(EX09, CK09B, "float-dtype", "right pattern but returns a float tensor (.float()) instead of bool", False,
     sink_window_mask_float)


def sink_window_mask_and_not_or(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & (i - j < window) & (j < num_sinks)


_add(EX09, CK09B, "and-instead-of-or", "combines window and sinks with & instead of |: only sinks inside the "
     "window are visible", False, sink_window_mask_and_not_or)


def sink_window_mask_sink_rows_and_cols(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    is_sink = (i < num_sinks) | (j < num_sinks)
    return (j <= i) & ((i - j < window) | is_sink) | (i < num_sinks)


_add(EX09, CK09B, "sinks-rows-and-cols", "also makes the sink queries global: rows i < num_sinks see every key, "
     "future included", False, sink_window_mask_sink_rows_and_cols)


def sink_window_mask_last_tokens(seq_len, window, num_sinks):
    i, j = _sink_parts(seq_len)
    return (j <= i) & ((i - j < window) | (j >= seq_len - num_sinks))


_add(EX09, CK09B, "sinks-at-end", "takes the sinks as the last num_sinks positions (j >= seq_len - num_sinks) "
     "instead of the first", False, sink_window_mask_last_tokens)


# ======================================================================================
# 10 part 1: check_expand_kv(expand_kv)
# ======================================================================================
EX10 = "10_grouped_query_and_kv_cache"
CK10A = "check_expand_kv"


def expand_kv_right_expand(kv, num_heads):
    B, H_kv, L, d = kv.shape
    rep = num_heads // H_kv
    return kv[:, :, None, :, :].expand(B, H_kv, rep, L, d).reshape(B, num_heads, L, d)


_add(EX10, CK10A, "right-expand-reshape", "correct: new axis after the KV-head axis, expand, reshape", True,
     expand_kv_right_expand)


def expand_kv_right_index(kv, num_heads):
    rep = num_heads // kv.size(1)
    idx = torch.arange(num_heads, device=kv.device) // rep
    return kv.index_select(1, idx)


_add(EX10, CK10A, "right-index-select", "correct: index_select with head index h // rep", True, expand_kv_right_index)


def expand_kv_right_stack(kv, num_heads):
    rep = num_heads // kv.size(1)
    B, H_kv, L, d = kv.shape
    return torch.stack([kv] * rep, dim=2).reshape(B, num_heads, L, d)


_add(EX10, CK10A, "right-stack", "correct: stack rep copies on a new axis 2, then merge with the head axis", True,
     expand_kv_right_stack)


def expand_kv_repeat(kv, num_heads):
    return kv.repeat(1, num_heads // kv.size(1), 1, 1)


_add(EX10, CK10A, "repeat-tiles", "uses repeat instead of repeat_interleave: heads tiled 0,1,0,1,... instead of "
     "0,0,0,0,1,1,1,1", False, expand_kv_repeat)


def expand_kv_wrong_dim(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=2)


_add(EX10, CK10A, "interleave-sequence-axis", "repeat_interleave along dim=2 (the sequence axis) instead of dim=1: "
     "positions duplicated, shape (B, H_kv, L*rep, d_k)", False, expand_kv_wrong_dim)


def expand_kv_no_dim(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1))


_add(EX10, CK10A, "interleave-no-dim", "repeat_interleave without dim=: returns a flattened 1-D tensor", False,
     expand_kv_no_dim)


def expand_kv_rep_is_num_heads(kv, num_heads):
    return kv.repeat_interleave(num_heads, dim=1)


_add(EX10, CK10A, "repeat-num-heads-times", "repeats each KV head num_heads times instead of num_heads // H_kv: "
     "H_kv * num_heads heads", False, expand_kv_rep_is_num_heads)


def expand_kv_view_noncontig(kv, num_heads):
    B, H_kv, L, d = kv.shape
    rep = num_heads // H_kv
    flat = kv.view(B, H_kv, L * d)  # flatten each head to use repeat_interleave on 3 dims
    return flat.repeat_interleave(rep, dim=1).view(B, num_heads, L, d)


_add(EX10, CK10A, "view-on-noncontiguous", "flattens each head with kv.view(B, H_kv, L*d): right on contiguous input "
     "but raises a RuntimeError on the non-contiguous view from transpose(1, 2)", False, expand_kv_view_noncontig)


def expand_kv_new_axis_first(kv, num_heads):
    B, H_kv, L, d = kv.shape
    rep = num_heads // H_kv
    return kv[:, None].expand(B, rep, H_kv, L, d).reshape(B, num_heads, L, d)


_add(EX10, CK10A, "new-axis-before-heads", "inserts the copy axis before the KV-head axis (kv[:, None]) so the "
     "reshape tiles the heads like repeat", False, expand_kv_new_axis_first)


def expand_kv_mean_heads(kv, num_heads):
    B, H_kv, L, d = kv.shape
    return kv.mean(dim=1, keepdim=True).expand(B, num_heads, L, d)


_add(EX10, CK10A, "average-heads", "reads 'share' as averaging: mixes all KV heads into their mean and gives it to "
     "every query head", False, expand_kv_mean_heads)


def expand_kv_blhd_layout(kv, num_heads):
    rep = num_heads // kv.size(2)
    return kv.repeat_interleave(rep, dim=2)


_add(EX10, CK10A, "assumes-B-L-H-layout", "assumes (B, L, H_kv, d_k): reads H_kv from dim 2 and repeats along "
     "dim 2 (sequence axis)", False, expand_kv_blhd_layout)


def expand_kv_ratio_flipped(kv, num_heads):
    rep = max(kv.size(1) // num_heads, 1)
    return kv.repeat_interleave(rep, dim=1)


_add(EX10, CK10A, "ratio-flipped", "computes the group size as H_kv // num_heads (flipped, clamped to 1): the heads "
     "are never expanded", False, expand_kv_ratio_flipped)


def expand_kv_scaled(kv, num_heads):
    rep = num_heads // kv.size(1)
    return kv.repeat_interleave(rep, dim=1) / rep


_add(EX10, CK10A, "divided-by-group", "divides the copies by the group size 'so the total stays the same'", False,
     expand_kv_scaled)


# ======================================================================================
# 10 part 2: check_attend_with_cache(attend_with_cache)
# ======================================================================================
CK10B = "check_attend_with_cache"


def _expand_kv_good(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=1)


def _attend(query, key, value):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    return torch.softmax(scores, dim=-1) @ value


def attend_with_cache_right_einsum(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=-2)
    value_cache = torch.cat((value_cache, value_new), dim=-2)
    H = query.size(1)
    K, V = _expand_kv_good(key_cache, H), _expand_kv_good(value_cache, H)
    w = torch.einsum("bhqd,bhkd->bhqk", query, K).div(query.size(-1) ** 0.5).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", w, V), key_cache, value_cache


_add(EX10, CK10B, "right-einsum", "correct: cat on dim -2, expand, einsum attention", True,
     attend_with_cache_right_einsum)


def attend_with_cache_right_sdpa(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    H = query.size(1)
    out = F.scaled_dot_product_attention(query, expand_kv_right_index(kc, H), expand_kv_right_index(vc, H))
    return out, kc, vc


_add(EX10, CK10B, "right-sdpa", "correct: PyTorch's scaled_dot_product_attention with no mask on the expanded caches",
     True, attend_with_cache_right_sdpa)


def attend_with_cache_prepend(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_new, key_cache], dim=2)
    vc = torch.cat([value_new, value_cache], dim=2)
    H = query.size(1)
    return _attend(query, _expand_kv_good(kc, H), _expand_kv_good(vc, H)), kc, vc


_add(EX10, CK10B, "prepend", "puts the new key/value at the front of the caches instead of the end (the output "
     "is the same this step, the cache order is wrong)", False, attend_with_cache_prepend)


def attend_with_cache_head_axis(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=1)
    vc = torch.cat([value_cache, value_new], dim=1)
    H = query.size(1)
    return _attend(query, _expand_kv_good(kc, H), _expand_kv_good(vc, H)), kc, vc


_add(EX10, CK10B, "cat-head-axis", "concatenates along dim=1 (the head axis) instead of the sequence axis: error "
     "unless n = 1, then the cache grows in heads", False, attend_with_cache_head_axis)


def attend_with_cache_attend_first(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    out = _attend(query, _expand_kv_good(key_cache, H), _expand_kv_good(value_cache, H))
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    return out, kc, vc


_add(EX10, CK10B, "attend-before-append", "attends before appending: the new token does not see its own key "
     "(empty cache gives NaN / no keys)", False, attend_with_cache_attend_first)


def attend_with_cache_expanded_cache(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    K = _expand_kv_good(torch.cat([key_cache, key_new], dim=2), H)
    V = _expand_kv_good(torch.cat([value_cache, value_new], dim=2), H)
    return _attend(query, K, V), K, V


_add(EX10, CK10B, "caches-expanded", "returns the expanded (B, H, n+1, d_k) tensors as the caches instead of the "
     "H_kv-head ones", False, attend_with_cache_expanded_cache)


def attend_with_cache_repeat(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    H = query.size(1)
    return _attend(query, expand_kv_repeat(kc, H), expand_kv_repeat(vc, H)), kc, vc


_add(EX10, CK10B, "expand-with-repeat", "its expand_kv uses repeat instead of repeat_interleave, so query heads get "
     "the wrong KV heads", False, attend_with_cache_repeat)


def attend_with_cache_is_causal(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    H = query.size(1)
    out = F.scaled_dot_product_attention(query, _expand_kv_good(kc, H), _expand_kv_good(vc, H), is_causal=True)
    return out, kc, vc


_add(EX10, CK10B, "is-causal", "calls F.scaled_dot_product_attention with is_causal=True: aligned top-left, the "
     "single query sees only the first cached key", False, attend_with_cache_is_causal)


def attend_with_cache_no_scale(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    H = query.size(1)
    K, V = _expand_kv_good(kc, H), _expand_kv_good(vc, H)
    return torch.softmax(query @ K.transpose(-2, -1), dim=-1) @ V, kc, vc


_add(EX10, CK10B, "no-scale", "forgets to divide the scores by sqrt(d_k)", False, attend_with_cache_no_scale)


def attend_with_cache_scale_dk(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    H = query.size(1)
    K, V = _expand_kv_good(kc, H), _expand_kv_good(vc, H)
    return torch.softmax(query @ K.transpose(-2, -1) / query.size(-1), dim=-1) @ V, kc, vc


_add(EX10, CK10B, "scale-by-dk", "divides the scores by d_k instead of sqrt(d_k)", False, attend_with_cache_scale_dk)


def attend_with_cache_not_returned(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    H = query.size(1)
    return _attend(query, _expand_kv_good(kc, H), _expand_kv_good(vc, H)), key_cache, value_cache


_add(EX10, CK10B, "old-caches-returned", "attends over the grown caches but returns the old, unchanged key_cache "
     "and value_cache", False, attend_with_cache_not_returned)


def attend_with_cache_softmax_dim(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    H = query.size(1)
    K, V = _expand_kv_good(kc, H), _expand_kv_good(vc, H)
    scores = query @ K.transpose(-2, -1) / math.sqrt(query.size(-1))
    return torch.softmax(scores, dim=-2) @ V, kc, vc


_add(EX10, CK10B, "softmax-query-axis", "softmax over dim=-2 (the single query) instead of the keys: every weight "
     "is 1, the output is the sum of the values", False, attend_with_cache_softmax_dim)


def attend_with_cache_value_gets_key(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, key_new], dim=2)  # copy-paste slip
    H = query.size(1)
    return _attend(query, _expand_kv_good(kc, H), _expand_kv_good(vc, H)), kc, vc


_add(EX10, CK10B, "value-cache-gets-key", "copy-paste slip: appends key_new (not value_new) to the value cache",
     False, attend_with_cache_value_gets_key)


def attend_with_cache_values_not_expanded(query, key_cache, value_cache, key_new, value_new):
    kc = torch.cat([key_cache, key_new], dim=2)
    vc = torch.cat([value_cache, value_new], dim=2)
    H = query.size(1)
    K = _expand_kv_good(kc, H)
    weights = torch.softmax(query @ K.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)
    return weights @ vc, kc, vc


_add(EX10, CK10B, "values-not-expanded", "expands only the keys; multiplies the weights by the unexpanded value "
     "cache (shape error when 1 < H_kv < H)", False, attend_with_cache_values_not_expanded)


# ======================================================================================
# 11 part 1: check_apply_rope(apply_rope)
# ======================================================================================
EX11 = "11_rotary_embeddings"
CK11A = "check_apply_rope"


def _angles(x, positions, base, dtype=torch.float64):
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=dtype) / d)
    return positions.to(dtype)[:, None] * theta[None, :]


def apply_rope_right_complex(x, positions, base=10000.0):
    ang = _angles(x, positions, base).to(x.device)
    rot = torch.polar(torch.ones_like(ang), ang)  # complex128 (L, d/2)
    xc = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)


_add(EX11, CK11A, "right-complex", "correct: pairs read as complex numbers, multiplied by e^{i angle}", True,
     apply_rope_right_complex)


def apply_rope_right_neighbour(x, positions, base=10000.0):
    d = x.size(-1)
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(positions.double(), inv).repeat_interleave(2, dim=-1)  # (L, d)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    partner = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos + partner * sin


_add(EX11, CK11A, "right-neighbour-trick", "correct: x*cos + (-x_odd, x_even)*sin with each angle repeated twice",
     True, apply_rope_right_neighbour)


def _rotate_pairs(x, cos, sin):
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def apply_rope_rotate_half(x, positions, base=10000.0):
    ang = _angles(x, positions, base)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    h = x.size(-1) // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


_add(EX11, CK11A, "rotate-half", "GPT-NeoX rotate-half pairing (x_p with x_{p+d/2}) instead of interleaved pairs",
     False, apply_rope_rotate_half)


def apply_rope_exponent_p_over_d(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (-torch.arange(d // 2, dtype=torch.float64) / d)
    ang = positions.double()[:, None] * theta
    return _rotate_pairs(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


_add(EX11, CK11A, "exponent-p-over-d", "frequency exponent -p/d_k (arange(d/2)/d) instead of -2p/d_k: frequencies "
     "decay half as fast", False, apply_rope_exponent_p_over_d)


def apply_rope_positive_exponent(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.double()[:, None] * theta
    return _rotate_pairs(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


_add(EX11, CK11A, "positive-exponent", "drops the minus sign: theta_p = base^(+2p/d_k), frequencies grow with p",
     False, apply_rope_positive_exponent)


def apply_rope_clockwise(x, positions, base=10000.0):
    ang = _angles(x, positions, base)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos + odd * sin, -even * sin + odd * cos), dim=-1).flatten(-2)


_add(EX11, CK11A, "clockwise", "sign error: both sin terms have the opposite sign, so pairs turn clockwise (by "
     "minus the angle)", False, apply_rope_clockwise)


def apply_rope_ignores_positions(x, positions, base=10000.0):
    L = x.size(-2)
    ang = _angles(x, torch.arange(L), base)
    return _rotate_pairs(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


_add(EX11, CK11A, "arange-positions", "uses torch.arange(L) for the positions and ignores the positions argument",
     False, apply_rope_ignores_positions)


def apply_rope_contiguous_positions(x, positions, base=10000.0):
    L = x.size(-2)
    start = int(positions[0])
    ang = _angles(x, torch.arange(start, start + L), base)
    return _rotate_pairs(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


_add(EX11, CK11A, "assumes-consecutive", "takes only positions[0] as an offset and assumes positions "
     "start, start+1, ...: wrong for unordered positions", False, apply_rope_contiguous_positions)


def apply_rope_float32_result(x, positions, base=10000.0):
    x = x.float()
    ang = _angles(x, positions, base, dtype=torch.float32)
    return _rotate_pairs(x, ang.cos(), ang.sin())


_add(EX11, CK11A, "casts-to-float32", "converts x to float32 and computes in float32: float64 input comes back "
     "as float32 (dtype not kept)", False, apply_rope_float32_result)


def apply_rope_missing_term(x, positions, base=10000.0):
    ang = _angles(x, positions, base)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, odd * cos), dim=-1).flatten(-2)


_add(EX11, CK11A, "missing-sin-term", "second coordinate forgets the x_2p * sin term (x'_2p+1 = x_2p+1 cos only): "
     "norms not preserved", False, apply_rope_missing_term)


def apply_rope_cat_not_interleave(x, positions, base=10000.0):
    ang = _angles(x, positions, base)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat((even * cos - odd * sin, even * sin + odd * cos), dim=-1)


_add(EX11, CK11A, "cat-not-interleaved", "right rotation of interleaved pairs but reassembled with torch.cat: all "
     "first coordinates then all second ones, not side by side", False, apply_rope_cat_not_interleave)


def apply_rope_transposed_angles(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = theta[:, None] * positions.double()[None, :]  # (d/2, L) by mistake
    return _rotate_pairs(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


_add(EX11, CK11A, "angles-transposed", "builds the angles as (d/2, L) (theta[:, None] * positions[None, :]): shape "
     "error unless L = d/2, then positions and pairs swapped", False, apply_rope_transposed_angles)


def apply_rope_int_exponent(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2) // d)  # integer floor division
    ang = positions[:, None] * theta[None, :]
    return _rotate_pairs(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


_add(EX11, CK11A, "integer-exponent", "computes the exponent with integer floor division (-arange(0,d,2) // d): "
     "theta is 1 for pair 0 and 1/base for every other pair", False, apply_rope_int_exponent)


def apply_rope_hardcoded_base(x, positions, base=10000.0):
    ang = _angles(x, positions, 10000.0)
    return _rotate_pairs(x, ang.cos().to(x.dtype), ang.sin().to(x.dtype))


_add(EX11, CK11A, "base-ignored", "hard-codes 10000 in the frequencies and ignores the base argument", False,
     apply_rope_hardcoded_base)


# ======================================================================================
# 11 part 2: check_rotary_decode_step(rotary_decode_step)
# ======================================================================================
CK11B = "check_rotary_decode_step"
_rope = lessons_src.apply_rope


def _attn_full(q, K, V, scale=True):
    s = q @ K.transpose(-2, -1)
    if scale:
        s = s / math.sqrt(q.size(-1))
    return torch.softmax(s, dim=-1) @ V


def rotary_decode_step_right_tensor_pos(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.shape[-2]
    pos = torch.tensor([n])
    q_r, k_r = _rope(q, cos, sin, pos), _rope(k, cos, sin, pos)
    key_cache = torch.cat((key_cache, k_r), dim=-2)
    value_cache = torch.cat((value_cache, v), dim=-2)
    return F.scaled_dot_product_attention(q_r, key_cache, value_cache), key_cache, value_cache


_add(EX11, CK11B, "right-tensor-position", "correct: position tensor [n], sdpa without mask", True,
     rotary_decode_step_right_tensor_pos)


def rotary_decode_step_right_joint(q, k, v, key_cache, value_cache, cos, sin):
    n = value_cache.size(2)
    q_r, k_r = _rope(torch.cat([q, k], dim=2), cos, sin, torch.tensor([n, n])).split(1, dim=2)
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    w = torch.softmax(torch.einsum("bhqd,bhkd->bhqk", q_r, kc) * q.size(-1) ** -0.5, dim=-1)
    return w @ vc, kc, vc


_add(EX11, CK11B, "right-joint-rotation", "correct: rotates q and k together as two rows at position n, einsum "
     "attention", True, rotary_decode_step_right_joint)


def rotary_decode_step_pos_zero(q, k, v, key_cache, value_cache, cos, sin):
    q_r, k_r = _rope(q, cos, sin), _rope(k, cos, sin)
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "position-zero", "apply_rope without positions: the new query and key are rotated to position 0 "
     "at every step instead of n", False, rotary_decode_step_pos_zero)


def rotary_decode_step_pos_plus_one(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r, k_r = _rope(q, cos, sin, n + 1), _rope(k, cos, sin, n + 1)
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "position-n-plus-one", "rotates the new token to position n + 1 (counting from 1) instead of n",
     False, rotary_decode_step_pos_plus_one)


def rotary_decode_step_rotate_value(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r, k_r, v_r = (_rope(t, cos, sin, n) for t in (q, k, v))
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v_r], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "value-rotated", "also rotates the value v before caching it", False, rotary_decode_step_rotate_value)


def rotary_decode_step_rerotate_cache(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r = _rope(q, cos, sin, n)
    kc = torch.cat([key_cache, k], dim=2)
    kc = _rope(kc, cos, sin)  # rotate all keys to 0..n
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "cache-rotated-again", "appends the raw key then rotates the whole key cache to 0..n: the cached "
     "keys get rotated a second time each step", False, rotary_decode_step_rerotate_cache)


def rotary_decode_step_query_unrotated(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    k_r = _rope(k, cos, sin, n)
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q, kc, vc), kc, vc


_add(EX11, CK11B, "query-unrotated", "rotates only the new key; the query is used unrotated", False,
     rotary_decode_step_query_unrotated)


def rotary_decode_step_key_unrotated(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r = _rope(q, cos, sin, n)
    kc = torch.cat([key_cache, k], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "key-unrotated", "rotates only the query; the new key goes unrotated into the attention and the "
     "cache", False, rotary_decode_step_key_unrotated)


def rotary_decode_step_half_layout(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r = _rope(q, cos, sin, n, layout="half")
    k_r = _rope(k, cos, sin, n, layout="half")
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "half-layout", "passes layout='half' (rotate-half) while the cached keys use interleaved pairs",
     False, rotary_decode_step_half_layout)


def rotary_decode_step_prepend(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r, k_r = _rope(q, cos, sin, n), _rope(k, cos, sin, n)
    kc = torch.cat([k_r, key_cache], dim=2)
    vc = torch.cat([v, value_cache], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "cache-prepended", "puts the new key and value at the front of the caches instead of the end",
     False, rotary_decode_step_prepend)


def rotary_decode_step_cache_raw_key(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r, k_r = _rope(q, cos, sin, n), _rope(k, cos, sin, n)
    vc = torch.cat([value_cache, v], dim=2)
    out = _attn_full(q_r, torch.cat([key_cache, k_r], dim=2), vc)
    return out, torch.cat([key_cache, k], dim=2), vc


_add(EX11, CK11B, "cache-holds-raw-key", "attends with the rotated key but stores the unrotated key k in the "
     "returned cache", False, rotary_decode_step_cache_raw_key)


def rotary_decode_step_not_grown(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r, k_r = _rope(q, cos, sin, n), _rope(k, cos, sin, n)
    out = _attn_full(q_r, torch.cat([key_cache, k_r], dim=2), torch.cat([value_cache, v], dim=2))
    return out, key_cache, value_cache


_add(EX11, CK11B, "cache-not-grown", "attends over n + 1 keys but returns the input caches unchanged", False,
     rotary_decode_step_not_grown)


def rotary_decode_step_no_scale(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    q_r, k_r = _rope(q, cos, sin, n), _rope(k, cos, sin, n)
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q_r, kc, vc, scale=False), kc, vc


_add(EX11, CK11B, "no-scale", "forgets the 1/sqrt(d_k) scale on the scores", False, rotary_decode_step_no_scale)


def rotary_decode_step_n_from_heads(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(1)  # reads n from the wrong axis (heads)
    q_r, k_r = _rope(q, cos, sin, n), _rope(k, cos, sin, n)
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "n-from-head-axis", "reads n as key_cache.size(1) (the head count H) instead of size(2): the new "
     "token is rotated to position H at every step", False, rotary_decode_step_n_from_heads)


def rotary_decode_step_pos_minus_one(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(2)
    pos = max(n - 1, 0)
    q_r, k_r = _rope(q, cos, sin, pos), _rope(k, cos, sin, pos)
    kc = torch.cat([key_cache, k_r], dim=2)
    vc = torch.cat([value_cache, v], dim=2)
    return _attn_full(q_r, kc, vc), kc, vc


_add(EX11, CK11B, "position-n-minus-one", "rotates the new token to position n - 1 (the last cached position, "
     "clamped at 0) instead of n", False, rotary_decode_step_pos_minus_one)


# ======================================================================================
# 12 online softmax: check_online_softmax_update(online_softmax_update)
# ======================================================================================
EX12, CK12 = "12_tiled_attention", "check_online_softmax_update"


def online_softmax_update_right_nan_to_num(running_max, running_sum, output, scores, value):
    new_max = torch.max(running_max, scores.max(dim=-1).values)
    alpha = torch.exp(running_max - new_max).nan_to_num(nan=0.0)  # NaN only when both are -inf
    p = torch.exp(scores - new_max[..., None]).nan_to_num(nan=0.0)
    new_sum = alpha * running_sum + p.sum(-1)
    new_out = alpha[..., None] * output + torch.matmul(p, value)
    return new_max, new_sum, new_out


_add(EX12, CK12, "right-nan-to-num", "correct: plain update, the -inf - -inf NaNs replaced by 0 with nan_to_num",
     True, online_softmax_update_right_nan_to_num)


def online_softmax_update_right_masked_fill(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    empty = new_max == -math.inf
    ref = new_max.masked_fill(empty, 0.0)
    alpha = (running_max - ref).exp()
    p = (scores - ref.unsqueeze(-1)).exp()
    new_out = output * alpha.unsqueeze(-1) + torch.einsum("...qk,...kd->...qd", p, value)
    return new_max, running_sum * alpha + p.sum(-1), new_out


_add(EX12, CK12, "right-masked-fill", "correct: reference max set to 0 on empty rows with masked_fill, einsum for "
     "the block's output", True, online_softmax_update_right_masked_fill)


def _safe(new_max):
    return torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)


def online_softmax_update_sum_not_rescaled(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    p = torch.exp(scores - ref[..., None])
    return new_max, running_sum + p.sum(-1), output * alpha[..., None] + p @ value


_add(EX12, CK12, "sum-not-rescaled", "adds the block's sum to the old running_sum without multiplying it by "
     "exp(m_old - m_new)", False, online_softmax_update_sum_not_rescaled)


def online_softmax_update_output_not_rescaled(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    p = torch.exp(scores - ref[..., None])
    return new_max, running_sum * alpha + p.sum(-1), output + p @ value


_add(EX12, CK12, "output-not-rescaled", "rescales the sum but adds the block to the old output without rescaling it",
     False, online_softmax_update_output_not_rescaled)


def online_softmax_update_factor_inverted(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(ref - running_max)  # upside down
    p = torch.exp(scores - ref[..., None])
    return new_max, running_sum * alpha + p.sum(-1), output * alpha[..., None] + p @ value


_add(EX12, CK12, "factor-upside-down", "rescale factor exp(m_new - m_old) instead of exp(m_old - m_new) (inf * 0 = "
     "NaN on the first block)", False, online_softmax_update_factor_inverted)


def online_softmax_update_block_max(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    block_max = scores.amax(-1, keepdim=True)
    block_max = torch.where(torch.isinf(block_max), torch.zeros_like(block_max), block_max)
    p = torch.exp(scores - block_max)  # against the block's own max
    return new_max, running_sum * alpha + p.sum(-1), output * alpha[..., None] + p @ value


_add(EX12, CK12, "exp-against-block-max", "the block's exponentials are taken against the block's own maximum, not "
     "the new running maximum (old terms rescaled correctly)", False, online_softmax_update_block_max)


def online_softmax_update_normalised(running_max, running_sum, output, scores, value):
    # keeps output as a normalised average
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    p = torch.exp(scores - ref[..., None])
    new_sum = running_sum * alpha + p.sum(-1)
    new_out = output * alpha[..., None] + p @ value
    return new_max, new_sum, new_out / new_sum.clamp_min(1e-30)[..., None]


_add(EX12, CK12, "output-normalised", "returns output divided by the running sum (normalised) instead of the "
     "unnormalised sum", False, online_softmax_update_normalised)


def online_softmax_update_nan_empty(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    alpha = torch.exp(running_max - new_max)
    p = torch.exp(scores - new_max[..., None])
    return new_max, running_sum * alpha + p.sum(-1), output * alpha[..., None] + p @ value


_add(EX12, CK12, "nan-on-empty-row", "no guard for rows whose maximum is still -inf: exp(-inf - -inf) gives NaN "
     "in the sum and output of a fully-masked query", False, online_softmax_update_nan_empty)


def online_softmax_update_plain_exp(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(running_max) / torch.exp(ref)
    p = torch.exp(scores) / torch.exp(ref)[..., None]
    alpha = torch.where(torch.isinf(running_max), torch.zeros_like(alpha), alpha)
    return new_max, running_sum * alpha + p.sum(-1), output * alpha[..., None] + p @ value


_add(EX12, CK12, "exp-then-divide", "computes exp(s) / exp(m) instead of exp(s - m): overflows to inf / inf = NaN "
     "for scores near 90 in float32", False, online_softmax_update_plain_exp)


def online_softmax_update_max_wrong_dim(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-2))  # over queries
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    p = torch.exp(scores - ref[..., None])
    return new_max, running_sum * alpha + p.sum(-1), output * alpha[..., None] + p @ value


_add(EX12, CK12, "max-over-queries", "takes the block maximum over dim=-2 (queries) instead of dim=-1 (keys): "
     "shape error unless Lq = Bc, wrong max otherwise", False, online_softmax_update_max_wrong_dim)


def online_softmax_update_no_unsqueeze(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    p = torch.exp(scores - ref[..., None])
    return new_max, running_sum * alpha + p.sum(-1), output * alpha + p @ value


_add(EX12, CK12, "rescale-not-unsqueezed", "multiplies output (..., Lq, d_v) by the factor (..., Lq) without "
     "unsqueeze(-1): broadcast error, or scales along d_v when d_v = Lq", False, online_softmax_update_no_unsqueeze)


def online_softmax_update_block_max_only(running_max, running_sum, output, scores, value):
    new_max = scores.amax(-1)  # forgets the old maximum
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    p = torch.exp(scores - ref[..., None])
    return new_max, running_sum * alpha + p.sum(-1), output * alpha[..., None] + p @ value


_add(EX12, CK12, "new-max-is-block-max", "new running_max is the block's max alone, not max(old, block): the "
     "returned max (and the reference of sum and output) is wrong when the old max was larger", False,
     online_softmax_update_block_max_only)


def online_softmax_update_in_place(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    p = torch.exp(scores - ref[..., None])
    running_sum.mul_(alpha).add_(p.sum(-1))
    output.mul_(alpha[..., None]).add_(p @ value)
    running_max.copy_(new_max)
    return running_max, running_sum, output


_add(EX12, CK12, "in-place", "right values but updates running_max, running_sum and output in place (mul_/add_/"
     "copy_) and returns the modified arguments", False, online_softmax_update_in_place)


def online_softmax_update_partial_guard(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    alpha = torch.exp(running_max - new_max)  # NaN on empty rows, not guarded
    p = torch.exp(scores - new_max[..., None]).nan_to_num(0.0)  # guarded
    return new_max, running_sum * alpha + p.sum(-1), output * alpha[..., None] + p @ value


_add(EX12, CK12, "guard-only-block-terms", "replaces NaN by 0 in the block's exponentials but not in the rescale "
     "factor: an empty row still gets NaN from exp(-inf - -inf) * 0", False, online_softmax_update_partial_guard)


def online_softmax_update_sum_wrong_axis(running_max, running_sum, output, scores, value):
    new_max = torch.maximum(running_max, scores.amax(-1))
    ref = _safe(new_max)
    alpha = torch.exp(running_max - ref)
    p = torch.exp(scores - ref[..., None])
    return new_max, running_sum * alpha + p.sum(-2), output * alpha[..., None] + p @ value


_add(EX12, CK12, "sum-over-queries", "sums the block's exponentials over dim=-2 (queries) instead of dim=-1 (keys) "
     "(wrong, or a shape error when Lq != Bc)", False, online_softmax_update_sum_wrong_axis)
