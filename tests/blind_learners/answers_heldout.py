"""Held-out blind learner answers, written from the exercise text alone (the writer read no check, test or solution)."""
import math
import torch
import torch.nn.functional as F
import lessons_src

ANSWERS = []

def _add(exercise, check, name, intent, right, *fns):
    ANSWERS.append(dict(exercise=exercise, check=check, name=name, intent=intent, right=right, fns=tuple(fns)))


# =====================================================================================
# 01 attention from scratch (bug hunt): check_scaled_dot_product_attention(attention)
# =====================================================================================
_EX1, _CK1 = "01_attention_from_scratch", "check_scaled_dot_product_attention"


def sdpa_left_any_dim_minus2(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


def sdpa_fill_zero(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


def sdpa_reshape_not_transpose(query, key, value, mask=None):
    d_k = query.size(-1)
    key_t = key.reshape(*key.shape[:-2], key.size(-1), key.size(-2))
    scores = query @ key_t / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


def sdpa_naive_exp(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores)
    weights = e / e.sum(dim=-1, keepdim=True)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


def sdpa_all_instead_of_any(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.all(dim=-1, keepdim=True), 0.0)
    output = weights @ value
    return output, weights


def sdpa_right_einsum(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) * query.size(-1) ** -0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros_like(weights))
    output = torch.einsum("...qk,...kd->...qd", weights, value)
    return output, weights


_add(_EX1, _CK1, "fixed-three-kept-any-dim-2", "fixed softmax axis, transpose and mask polarity but left the empty-row test as mask.any(dim=-2)", False, sdpa_left_any_dim_minus2)
_add(_EX1, _CK1, "masked-fill-with-zero", "flipped the mask with ~mask but filled masked scores with 0.0 instead of -inf", False, sdpa_fill_zero)
_add(_EX1, _CK1, "reshape-as-transpose", "swapped the last two dims of key with reshape instead of transpose", False, sdpa_reshape_not_transpose)
_add(_EX1, _CK1, "handwritten-softmax-no-max", "replaced torch.softmax by exp/sum without subtracting the row maximum", False, sdpa_naive_exp)
_add(_EX1, _CK1, "empty-row-with-all", "zeroes rows where not all keys are allowed (mask.all) instead of rows with no allowed key", False, sdpa_all_instead_of_any)
_add(_EX1, _CK1, "einsum-where-right", "einsum scores, -inf masking, torch.where to zero rows with no allowed key", True, sdpa_right_einsum)


# =====================================================================================
# 02 scaling and temperature: check_attention_weights(attention_weights)
# =====================================================================================
_EX2, _CK2 = "02_scaling", "check_attention_weights"


def aw_sqrt_of_key_length(query, key, temperature=None):
    d_k = key.shape[-2]
    tau = math.sqrt(d_k) if temperature is None else temperature
    scores = query @ key.transpose(-2, -1) / tau
    return torch.softmax(scores, dim=-1)


def aw_temperature_multiplies(query, key, temperature=None):
    scores = query @ key.transpose(-2, -1)
    if temperature is None:
        scores = scores * (1.0 / math.sqrt(query.size(-1)))
    else:
        scores = scores * temperature
    return torch.softmax(scores, dim=-1)


def aw_column_max_stabilised(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = query @ key.transpose(-2, -1) / tau
    scores = scores - scores.amax(dim=-2, keepdim=True)
    e = scores.exp()
    return e / e.sum(dim=-1, keepdim=True)


def aw_sqrt_of_temperature(query, key, temperature=None):
    d = query.size(-1) if temperature is None else temperature
    scores = query @ key.transpose(-2, -1) / math.sqrt(d)
    return torch.softmax(scores, dim=-1)


def aw_plain_exp(query, key, temperature=None):
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    e = torch.exp(query @ key.transpose(-2, -1) / tau)
    return e / e.sum(dim=-1, keepdim=True)


def aw_right_float64_logsumexp(query, key, temperature=None):
    tau = math.sqrt(query.shape[-1]) if temperature is None else float(temperature)
    s = torch.matmul(query.double(), key.double().transpose(-1, -2)) / tau
    w = torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))
    return w.to(query.dtype)


_add(_EX2, _CK2, "sqrt-of-key-length", "took d_k from key.shape[-2] (the number of keys) instead of the feature size", False, aw_sqrt_of_key_length)
_add(_EX2, _CK2, "temperature-multiplies", "default divides by sqrt(d_k) but a given temperature multiplies the scores", False, aw_temperature_multiplies)
_add(_EX2, _CK2, "max-over-queries", "stabilised the hand-written softmax with the max over the query axis (dim=-2) instead of each row", False, aw_column_max_stabilised)
_add(_EX2, _CK2, "temperature-under-root", "treated temperature as a replacement for d_k, dividing by sqrt(temperature)", False, aw_sqrt_of_temperature)
_add(_EX2, _CK2, "exp-over-sum-no-shift", "hand-written softmax without subtracting the maximum, in float32", False, aw_plain_exp)
_add(_EX2, _CK2, "float64-logsumexp-right", "scores in float64, softmax via logsumexp, cast back to the input dtype", True, aw_right_float64_logsumexp)


# =====================================================================================
# 03 masking, part 1: check_masks(make_causal_mask, make_padding_mask, combine_masks)
# =====================================================================================
_EX3 = "03_masking"
_CK3A, _CK3B = "check_masks", "check_document_causal_mask"


def causal_right(seq_len):
    pos = torch.arange(seq_len)
    return pos[None, :] <= pos[:, None]


def padding_right(lengths, max_len):
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def combine_right(padding, causal):
    return padding[:, None, :] & causal[None, :, :]


def causal_ignore_convention(seq_len):
    pos = torch.arange(seq_len)
    return pos[:, None] < pos[None, :]


def padding_le_length(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]


def padding_longest_not_max_len(lengths, max_len):
    longest = int(lengths.max())
    return torch.arange(longest)[None, :] < lengths[:, None]


def combine_mask_queries_too(padding, causal):
    return padding[:, None, :] & padding[:, :, None] & causal


def combine_with_plus(padding, causal):
    return padding.unsqueeze(1) + causal.unsqueeze(0)


def causal_loops_right(seq_len):
    m = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        m[i, : i + 1] = True
    return m


def padding_loops_right(lengths, max_len):
    m = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        m[b, :n] = True
    return m


def combine_expand_right(padding, causal):
    B, L = padding.shape
    return torch.logical_and(padding.unsqueeze(-2).expand(B, L, L), causal.expand(B, L, L))


_add(_EX3, _CK3A, "causal-true-means-ignore", "causal mask written with i < j (True on future keys), the nn.MultiheadAttention convention", False, causal_ignore_convention, padding_right, combine_right)
_add(_EX3, _CK3A, "padding-le-length", "padding mask compares j <= lengths[b]", False, causal_right, padding_le_length, combine_right)
_add(_EX3, _CK3A, "padding-width-from-longest", "padding mask width taken from lengths.max() and max_len ignored", False, causal_right, padding_longest_not_max_len, combine_right)
_add(_EX3, _CK3A, "combine-masks-padding-queries", "combine also hides the rows of padding queries (padding on both axes)", False, causal_right, padding_right, combine_mask_queries_too)
_add(_EX3, _CK3A, "combine-with-plus", "combined the two boolean masks with + (logical or) instead of &", False, causal_right, padding_right, combine_with_plus)
_add(_EX3, _CK3A, "loops-and-expand-right", "masks filled row by row with loops, combined with expand and logical_and", True, causal_loops_right, padding_loops_right, combine_expand_right)


# =====================================================================================
# 03 masking, part 2: check_document_causal_mask(document_causal_mask)
# =====================================================================================

def doc_compare_ids_not_positions(doc_ids):
    return doc_ids[:, None, :] <= doc_ids[:, :, None]


def doc_strict_past(doc_ids):
    L = doc_ids.size(-1)
    pos = torch.arange(L, device=doc_ids.device)
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    return same & (pos[None, :] < pos[:, None])


def doc_first_row_for_all(doc_ids):
    B, L = doc_ids.shape
    d = doc_ids[0]
    m = (d[:, None] == d[None, :]) & torch.ones(L, L, dtype=torch.bool).tril()
    return m.expand(B, L, L)


def doc_one_hot_int(doc_ids):
    oh = F.one_hot(doc_ids)  # (B, L, num_docs)
    same = oh @ oh.transpose(-1, -2)
    return same.tril()


def doc_same_axis_unsqueeze(doc_ids):
    L = doc_ids.size(-1)
    same = doc_ids.unsqueeze(1) == doc_ids.unsqueeze(1)
    return same & torch.ones(L, L, dtype=torch.bool, device=doc_ids.device).tril()


def doc_right_tril(doc_ids):
    same = doc_ids.unsqueeze(-1).eq(doc_ids.unsqueeze(-2))
    return torch.tril(same)


_add(_EX3, _CK3B, "doc-ids-as-positions", "compared document ids (key id <= query id) instead of same id and j <= i", False, doc_compare_ids_not_positions)
_add(_EX3, _CK3B, "strictly-earlier-keys", "same document and j < i, so a token does not see itself", False, doc_strict_past)
_add(_EX3, _CK3B, "first-row-expanded", "built the mask from doc_ids[0] and expanded it over the batch", False, doc_first_row_for_all)
_add(_EX3, _CK3B, "one-hot-product-int", "same-document matrix from one-hot products, tril applied, left as int64", False, doc_one_hot_int)
_add(_EX3, _CK3B, "unsqueeze-same-axis", "unsqueezed doc_ids on the same axis on both sides, so 'same document' is always True", False, doc_same_axis_unsqueeze)
_add(_EX3, _CK3B, "eq-then-tril-right", "eq of (B,L,1) and (B,1,L) then torch.tril on the last two dims", True, doc_right_tril)


# =====================================================================================
# 04 head contributions: check_head_contributions(head_contributions)
# =====================================================================================
_EX4, _CK4 = "04_multi_head_attention", "check_head_contributions"


def _heads_out(x, attention, mask):
    H = attention.num_heads
    q = lessons_src.split_heads(attention.w_q(x), H)
    k = lessons_src.split_heads(attention.w_k(x), H)
    v = lessons_src.split_heads(attention.w_v(x), H)
    heads, _ = lessons_src.scaled_dot_product_attention(q, k, v, mask)
    return heads  # (B, H, L, d_k)


def hc_blocks_from_rows(x, attention, mask=None):
    H = attention.num_heads
    D = x.size(-1)
    d_k = D // H
    heads = _heads_out(x, attention, mask)
    W = attention.w_o.weight.view(H, d_k, D)  # cut along the output rows
    return torch.einsum("bhld,hde->bhle", heads, W)


def hc_subtract_bias(x, attention, mask=None):
    H = attention.num_heads
    D = x.size(-1)
    d_k = D // H
    heads = _heads_out(x, attention, mask)
    out = []
    for h in range(H):
        padded = torch.zeros_like(heads)
        padded[:, h] = heads[:, h]
        out.append(attention.w_o(lessons_src.merge_heads(padded)) - attention.w_o.bias)
    return torch.stack(out, dim=1)


def hc_no_mask(x, attention, mask=None):
    H = attention.num_heads
    D = x.size(-1)
    d_k = D // H
    heads = _heads_out(x, attention, None)
    W = attention.w_o.weight.view(D, H, d_k)
    return torch.einsum("bhld,ehd->bhle", heads, W)


def hc_values_not_projected(x, attention, mask=None):
    H = attention.num_heads
    D = x.size(-1)
    d_k = D // H
    _, weights = attention(x, x, x, mask)
    heads = weights @ lessons_src.split_heads(x, H)
    W = attention.w_o.weight.view(D, H, d_k)
    return torch.einsum("bhld,ehd->bhle", heads, W)


def hc_scale_sqrt_dmodel(x, attention, mask=None):
    H = attention.num_heads
    B, L, D = x.shape
    d_k = D // H
    q = lessons_src.split_heads(attention.w_q(x), H)
    k = lessons_src.split_heads(attention.w_k(x), H)
    v = lessons_src.split_heads(attention.w_v(x), H)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    w = torch.nan_to_num(w, nan=0.0)
    heads = w @ v
    W = attention.w_o.weight.view(D, H, d_k)
    return torch.einsum("bhld,ehd->bhle", heads, W)


def hc_right_loop(x, attention, mask=None):
    H = attention.num_heads
    D = x.size(-1)
    d_k = D // H
    _, weights = attention(x, x, x, mask)  # (B, H, L, L)
    v = lessons_src.split_heads(attention.w_v(x), H)
    heads = weights @ v
    pieces = []
    for h in range(H):
        block = attention.w_o.weight[:, h * d_k:(h + 1) * d_k]  # (D, d_k)
        pieces.append(heads[:, h] @ block.T)
    return torch.stack(pieces, dim=1)


_add(_EX4, _CK4, "wo-blocks-from-rows", "cut w_o.weight into per-head blocks along its output rows (view(H, d_k, D))", False, hc_blocks_from_rows)
_add(_EX4, _CK4, "zero-pad-then-subtract-bias", "applied w_o to each head zero-padded and subtracted w_o.bias, which breaks when bias is None", False, hc_subtract_bias)
_add(_EX4, _CK4, "mask-dropped", "recomputed the heads without passing the mask to the attention", False, hc_no_mask)
_add(_EX4, _CK4, "weights-times-raw-x", "used the module's weights but multiplied them with split x instead of the projected values", False, hc_values_not_projected)
_add(_EX4, _CK4, "scores-over-sqrt-dmodel", "hand-written attention scaled by sqrt(d_model) instead of sqrt(d_k)", False, hc_scale_sqrt_dmodel)
_add(_EX4, _CK4, "per-head-column-blocks-loop-right", "module weights times projected values, then each head times its column block of w_o", True, hc_right_loop)


# =====================================================================================
# 05 shift task: check_shift_attention(shift_task, expected_pattern)
# =====================================================================================
_EX5, _CK5 = "05_training_attention", "check_shift_attention"


def shift_task_right(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, x, target


def pattern_right(seq_len, shift):
    p = torch.zeros(seq_len, seq_len)
    for i in range(seq_len):
        p[i, (i - shift) % seq_len] = 1.0
    return p


def shift_task_roll_batch(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = x.roll(shift, 0)
    return target, x, x, target


def shift_task_no_generator(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, device=device)
    target = torch.roll(x, shifts=shift, dims=1)
    return target, x, x, target


def shift_task_slice_cat(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    target = torch.cat([x[:, seq_len - shift:], x[:, :seq_len - shift]], dim=1)
    return target, x, x, target


def pattern_plus_shift(seq_len, shift):
    rows = torch.arange(seq_len)
    p = torch.zeros(seq_len, seq_len)
    p[rows, (rows + shift) % seq_len] = 1
    return p


def pattern_diag_no_wrap(seq_len, shift):
    return torch.diag(torch.ones(seq_len - abs(shift)), -shift)


def shift_task_right_index(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    idx = (torch.arange(seq_len, device=x.device) - shift) % seq_len
    target = x[:, idx]
    return target.clone(), x, x.clone(), target


def pattern_right_eye_roll(seq_len, shift):
    return torch.eye(seq_len).roll(shift, dims=0)


_add(_EX5, _CK5, "roll-over-batch", "rolled x along dim 0 (the batch) instead of the sequence", False, shift_task_roll_batch, pattern_right)
_add(_EX5, _CK5, "randn-without-generator", "drew x without passing the generator", False, shift_task_no_generator, pattern_right)
_add(_EX5, _CK5, "slice-and-cat-shift", "shifted with cat(x[:, L - shift:], x[:, :L - shift]), no modulo for negative or large shifts", False, shift_task_slice_cat, pattern_right)
_add(_EX5, _CK5, "pattern-at-i-plus-shift", "predicted query i attends to key (i + shift) % L", False, shift_task_right, pattern_plus_shift)
_add(_EX5, _CK5, "pattern-diag-no-wrap", "pattern as an off-diagonal of ones with no wrap-around", False, shift_task_right, pattern_diag_no_wrap)
_add(_EX5, _CK5, "index-gather-and-eye-roll-right", "target gathered with (arange - shift) % L, pattern as eye rolled along rows", True, shift_task_right_index, pattern_right_eye_roll)


# =====================================================================================
# 06 pre-LN encoder: check_pre_ln_encoder(pre_ln_block, pre_ln_encoder)
# =====================================================================================
_EX6, _CK6 = "06_encoder_block", "check_pre_ln_encoder"


def block_right(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def _make_encoder(block):
    def pre_ln_encoder(x, layers, norm, mask=None):
        for layer in layers:
            x = block(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
        return norm(x)
    return pre_ln_encoder


encoder_right = _make_encoder(block_right)


def block_parallel_ffn(x, attention, ff, norm1, norm2, mask=None):
    a, _ = attention(norm1(x), norm1(x), norm1(x), mask)
    f = ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x + a + f


def block_residual_from_normed(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = h + attention(h, h, h, mask)[0]
    h = norm2(x)
    x = h + ff.linear2(torch.relu(ff.linear1(h)))
    return x


def block_kv_unnormed(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, x, x, mask)[0]
    x = x + ff.linear2(torch.relu(ff.linear1(norm2(x))))
    return x


def encoder_norm_every_layer(x, layers, norm, mask=None):
    for layer in layers:
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
        x = norm(x)
    return x


def encoder_norm_at_start(x, layers, norm, mask=None):
    x = norm(x)
    for layer in layers:
        x = block_right(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return x


def block_functional_right(x, attention, ff, norm1, norm2, mask=None):
    h = F.layer_norm(x, norm1.normalized_shape, norm1.weight, norm1.bias, norm1.eps)
    attn_out, _ = attention(h, h, h, mask)
    y = x + attn_out
    h2 = F.layer_norm(y, norm2.normalized_shape, norm2.weight, norm2.bias, norm2.eps)
    hidden = F.relu(F.linear(h2, ff.linear1.weight, ff.linear1.bias))
    return y + F.linear(hidden, ff.linear2.weight, ff.linear2.bias)


def encoder_functional_right(x, layers, norm, mask=None):
    out = x
    for i in range(len(layers)):
        L_ = layers[i]
        out = block_functional_right(out, L_.self_attn, L_.ff, L_.norm1, L_.norm2, mask=mask)
    return F.layer_norm(out, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


_add(_EX6, _CK6, "parallel-attn-and-ffn", "feed-forward reads norm2 of the block's input, not of x after the attention residual", False, block_parallel_ffn, _make_encoder(block_parallel_ffn))
_add(_EX6, _CK6, "residual-adds-normed", "residual sums start from the normalised h instead of x", False, block_residual_from_normed, _make_encoder(block_residual_from_normed))
_add(_EX6, _CK6, "keys-values-unnormalised", "queries from norm1(x) but keys and values from the raw x", False, block_kv_unnormed, _make_encoder(block_kv_unnormed))
_add(_EX6, _CK6, "final-norm-in-loop", "applies the stack's norm after every block", False, block_right, encoder_norm_every_layer)
_add(_EX6, _CK6, "final-norm-before-stack", "applies the stack's norm once, but before the blocks", False, block_right, encoder_norm_at_start)
_add(_EX6, _CK6, "functional-layer-norm-right", "F.layer_norm and F.linear with the modules' parameters, final norm after the stack", True, block_functional_right, encoder_functional_right)


# =====================================================================================
# 07 warm-up schedule: check_warmup_lr(warmup_lr)
# =====================================================================================
_EX7, _CK7 = "07_layer_norm_placement", "check_warmup_lr"


def lr_decay_uses_step(step, base_lr, warmup_steps):
    warm = (step + 1) / warmup_steps
    decay = math.sqrt(warmup_steps / max(step, 1))
    return base_lr * min(warm, decay)


def lr_clamped_step(step, base_lr, warmup_steps):
    s = max(step, 1)
    return base_lr * min(s / warmup_steps, math.sqrt(warmup_steps / s))


def lr_boundary_le(step, base_lr, warmup_steps):
    if step <= warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr * math.sqrt(warmup_steps / (step + 1))


def lr_inverse_linear_decay(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, warmup_steps / (step + 1))


def lr_decay_forgets_w(step, base_lr, warmup_steps):
    return base_lr * min((step + 1) / warmup_steps, 1 / math.sqrt(step + 1))


def lr_noam_form_right(step, base_lr, warmup_steps):
    n = step + 1
    return float(base_lr * warmup_steps ** 0.5 * min(n ** -0.5, n * warmup_steps ** -1.5))


_add(_EX7, _CK7, "decay-with-step-not-step-plus-1", "warm-up uses step + 1 but the decay term uses step (guarded with max(step, 1))", False, lr_decay_uses_step)
_add(_EX7, _CK7, "step-clamped-to-1", "avoided a zero at step 0 by clamping step to 1 instead of counting step + 1", False, lr_clamped_step)
_add(_EX7, _CK7, "branch-at-step-le-w", "if/else with the warm-up branch for step <= warmup_steps", False, lr_boundary_le)
_add(_EX7, _CK7, "decay-without-sqrt", "decay written as w / (s + 1), no square root", False, lr_inverse_linear_decay)
_add(_EX7, _CK7, "decay-one-over-sqrt-n", "decay 1/sqrt(s + 1) without the warmup_steps factor", False, lr_decay_forgets_w)
_add(_EX7, _CK7, "noam-form-right", "Noam's d_model-free form: w^0.5 * min(n^-0.5, n * w^-1.5), n = step + 1", True, lr_noam_form_right)


# =====================================================================================
# 08 decoder attention: check_decoder_attention(decoder_attention)
# =====================================================================================
_EX8, _CK8 = "08_decoder_and_cross_attention", "check_decoder_attention"


def _src_pad(memory, source_lengths):
    lengths = torch.as_tensor(source_lengths, device=memory.device)
    return torch.arange(memory.size(1), device=memory.device)[None, :] < lengths[:, None]  # (B, Ls)


def dec_pad_on_query_axis(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    self_out, _ = self_attn(x, x, x, lessons_src.causal_mask(Lt, device=x.device))
    pad = _src_pad(memory, source_lengths)[:, None, :, None]
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


def dec_cross_also_causal(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out, _ = self_attn(x, x, x, lessons_src.causal_mask(Lt, device=x.device))
    pad = _src_pad(memory, source_lengths)[:, None, None, :]
    cm = lessons_src.causal_mask(Lt, Ls, device=x.device)
    cross_out, _ = cross_attn(x, memory, memory, pad & cm)
    return self_out, cross_out


def dec_causal_inverted(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    future = torch.triu(torch.ones(Lt, Lt, dtype=torch.bool, device=x.device), diagonal=1)
    self_out, _ = self_attn(x, x, x, future)
    pad = _src_pad(memory, source_lengths)[:, None, None, :]
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


def dec_self_module_twice(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    self_out, _ = self_attn(x, x, x, lessons_src.causal_mask(Lt, device=x.device))
    pad = lessons_src.padding_mask(source_lengths, memory.size(1)).to(x.device)[:, None, None, :]
    cross_out, _ = self_attn(x, memory, memory, pad)
    return self_out, cross_out


def dec_pad_width_from_target(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    self_out, _ = self_attn(x, x, x, lessons_src.causal_mask(Lt, device=x.device))
    pad = lessons_src.padding_mask(source_lengths, x.size(1)).to(x.device)[:, None, None, :]
    cross_out, _ = cross_attn(x, memory, memory, pad)
    return self_out, cross_out


def dec_right(x, memory, source_lengths, self_attn, cross_attn):
    B, Lt, _ = x.shape
    t = torch.arange(Lt, device=x.device)
    causal = (t[:, None] >= t[None, :])[None, None]  # (1, 1, Lt, Lt)
    pad = _src_pad(memory, source_lengths).view(B, 1, 1, -1)  # (B, 1, 1, Ls)
    self_out = self_attn(x, x, x, causal)[0]
    cross_out = cross_attn(x, memory, memory, pad)[0]
    return self_out, cross_out


_add(_EX8, _CK8, "source-padding-on-query-axis", "cross-attention padding mask shaped (B, 1, Ls, 1)", False, dec_pad_on_query_axis)
_add(_EX8, _CK8, "cross-attention-causal-too", "cross-attention mask is the padding mask AND a (Lt, Ls) causal mask", False, dec_cross_also_causal)
_add(_EX8, _CK8, "self-mask-marks-future", "self-attention mask is True on future positions (triu, diagonal=1)", False, dec_causal_inverted)
_add(_EX8, _CK8, "cross-through-self-module", "right masks and inputs, but the cross-attention call goes through self_attn", False, dec_self_module_twice)
_add(_EX8, _CK8, "padding-mask-target-width", "built the source padding mask with max_len = x.size(1), the target length", False, dec_pad_width_from_target)
_add(_EX8, _CK8, "handmade-masks-right", "causal mask from aranges, padding mask (B, 1, 1, Ls) from aranges", True, dec_right)


# =====================================================================================
# 09 sliding window: check_sliding_window_mask / check_sink_window_mask
# =====================================================================================
_EX9 = "09_efficient_attention"
_CK9A, _CK9B = "check_sliding_window_mask", "check_sink_window_mask"


def sw_tril_triu_minus_window(seq_len, window):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return torch.tril(ones) & torch.triu(ones, diagonal=-window)


def sw_abs_distance(seq_len, window):
    pos = torch.arange(seq_len)
    return (pos[:, None] - pos[None, :]).abs() < window


def sw_float_band(seq_len, window):
    return torch.ones(seq_len, seq_len).tril().triu(-(window - 1))


def sw_negative_slice_loop(seq_len, window):
    m = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        m[i, i - window + 1:i + 1] = True
    return m


def sw_clamped_window(seq_len, window):
    window = min(window, seq_len - 1) if seq_len > 1 else 1
    pos = torch.arange(seq_len)
    d = pos[:, None] - pos[None, :]
    return (d >= 0) & (d < window)


def sw_right_not_tril(seq_len, window):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril() & ~ones.tril(diagonal=-window)


_add(_EX9, _CK9A, "triu-diagonal-minus-window", "tril & triu(diagonal=-window), a band of window + 1 keys", False, sw_tril_triu_minus_window)
_add(_EX9, _CK9A, "abs-distance-band", "|i - j| < window, a band on both sides", False, sw_abs_distance)
_add(_EX9, _CK9A, "float-ones-band", "right band built from torch.ones (float) with tril/triu, never cast to bool", False, sw_float_band)
_add(_EX9, _CK9A, "loop-negative-slice-start", "loop filling m[i, i - window + 1 : i + 1] without clamping the start at 0", False, sw_negative_slice_loop)
_add(_EX9, _CK9A, "window-clamped-to-len-minus-1", "clamped window to seq_len - 1 as an edge-case guard", False, sw_clamped_window)
_add(_EX9, _CK9A, "tril-minus-shifted-tril-right", "lower triangle minus the triangle below diagonal -window", True, sw_right_not_tril)


def _sw_right(seq_len, window):
    pos = torch.arange(seq_len)
    d = pos[:, None] - pos[None, :]
    return (d >= 0) & (d < window)


def sink_as_rows(seq_len, window, num_sinks):
    is_sink = torch.arange(seq_len) < num_sinks
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    return causal & (_sw_right(seq_len, window) | is_sink[:, None])


def sink_not_causal(seq_len, window, num_sinks):
    m = _sw_right(seq_len, window)
    m[:, :num_sinks] = True
    return m


def sink_le_num_sinks(seq_len, window, num_sinks):
    pos = torch.arange(seq_len)
    d = pos[:, None] - pos[None, :]
    return (d >= 0) & ((d < window) | (pos[None, :] <= num_sinks))


def sink_window_shrunk(seq_len, window, num_sinks):
    pos = torch.arange(seq_len)
    d = pos[:, None] - pos[None, :]
    return (d >= 0) & ((d < max(window - num_sinks, 1)) | (pos[None, :] < num_sinks))


def sink_where_int(seq_len, window, num_sinks):
    i = torch.arange(seq_len)[:, None]
    j = torch.arange(seq_len)[None, :]
    return torch.where((j <= i) & ((i - j < window) | (j < num_sinks)), 1, 0)


def sink_right_logical(seq_len, window, num_sinks):
    i = torch.arange(seq_len).unsqueeze(1)
    j = torch.arange(seq_len).unsqueeze(0)
    causal = j.le(i)
    keep = torch.logical_or(i.sub(j).lt(window), j.lt(num_sinks))
    return torch.logical_and(causal, keep)


_add(_EX9, _CK9B, "sink-rows", "made the first num_sinks queries (rows) see their whole past instead of sink columns", False, sink_as_rows)
_add(_EX9, _CK9B, "sink-columns-set-after-causal", "set mask[:, :num_sinks] = True on the window mask, without re-applying causality", False, sink_not_causal)
_add(_EX9, _CK9B, "sink-j-le-num-sinks", "sink condition j <= num_sinks", False, sink_le_num_sinks)
_add(_EX9, _CK9B, "window-minus-sinks", "shrank the window by num_sinks to keep a fixed budget of keys", False, sink_window_shrunk)
_add(_EX9, _CK9B, "torch-where-one-zero", "right condition, returned as torch.where(cond, 1, 0) (int64)", False, sink_where_int)
_add(_EX9, _CK9B, "logical-ops-right", "j <= i and (i - j < window or j < num_sinks) with logical_and/or", True, sink_right_logical)


# =====================================================================================
# 10 GQA + KV cache: check_expand_kv / check_attend_with_cache
# =====================================================================================
_EX10 = "10_grouped_query_and_kv_cache"
_CK10A, _CK10B = "check_expand_kv", "check_attend_with_cache"


def ekv_interleave_batch_dim(kv, num_heads):
    g = num_heads // kv.size(1)
    return kv.repeat_interleave(g, dim=0)


def ekv_view_expand(kv, num_heads):
    B, Hkv, L, d = kv.shape
    g = num_heads // Hkv
    return kv.view(B, Hkv, 1, L, d).expand(B, Hkv, g, L, d).view(B, num_heads, L, d)


def ekv_group_from_batch(kv, num_heads):
    g = num_heads // kv.size(0)
    return kv.repeat_interleave(g, dim=1)


def ekv_plain_expand(kv, num_heads):
    B, _, L, d = kv.shape
    return kv.expand(B, num_heads, L, d)


def ekv_modulo_index(kv, num_heads):
    idx = torch.arange(num_heads, device=kv.device) % kv.size(1)
    return kv[:, idx]


def ekv_right_index_select(kv, num_heads):
    g = num_heads // kv.shape[1]
    idx = torch.div(torch.arange(num_heads, device=kv.device), g, rounding_mode="floor")
    return kv.index_select(1, idx)


_add(_EX10, _CK10A, "interleave-over-batch", "repeat_interleave along dim 0 instead of the head dim", False, ekv_interleave_batch_dim)
_add(_EX10, _CK10A, "view-expand-view", "view/expand/view, which fails on a non-contiguous kv", False, ekv_view_expand)
_add(_EX10, _CK10A, "group-size-from-batch", "group size computed as num_heads // kv.size(0)", False, ekv_group_from_batch)
_add(_EX10, _CK10A, "expand-to-heads", "kv.expand(B, num_heads, L, d), which only works for one KV head", False, ekv_plain_expand)
_add(_EX10, _CK10A, "index-modulo", "indexed the KV heads with arange(num_heads) % H_kv", False, ekv_modulo_index)
_add(_EX10, _CK10A, "index-select-floor-div-right", "index_select with arange(num_heads) // group", True, ekv_right_index_select)


def _expand_kv(kv, num_heads):
    return kv.repeat_interleave(num_heads // kv.size(1), dim=1)


def _softmax_attend(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return torch.softmax(s, dim=-1) @ v


def awc_attend_before_append(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    out = _softmax_attend(query, _expand_kv(key_cache, H), _expand_kv(value_cache, H))
    key_cache = torch.cat([key_cache, key_new], dim=2)
    value_cache = torch.cat([value_cache, value_new], dim=2)
    return out, key_cache, value_cache


def awc_is_causal(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    key_cache = torch.cat([key_cache, key_new], dim=2)
    value_cache = torch.cat([value_cache, value_new], dim=2)
    out = F.scaled_dot_product_attention(query, _expand_kv(key_cache, H), _expand_kv(value_cache, H), is_causal=True)
    return out, key_cache, value_cache


def awc_returns_expanded(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    k = _expand_kv(torch.cat([key_cache, key_new], dim=2), H)
    v = _expand_kv(torch.cat([value_cache, value_new], dim=2), H)
    return _softmax_attend(query, k, v), k, v


def awc_repeat_heads(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    key_cache = torch.cat([key_cache, key_new], dim=2)
    value_cache = torch.cat([value_cache, value_new], dim=2)
    g = H // key_cache.size(1)
    out = _softmax_attend(query, key_cache.repeat(1, g, 1, 1), value_cache.repeat(1, g, 1, 1))
    return out, key_cache, value_cache


def awc_prepend(query, key_cache, value_cache, key_new, value_new):
    H = query.size(1)
    key_cache = torch.cat([key_new, key_cache], dim=2)
    value_cache = torch.cat([value_new, value_cache], dim=2)
    out = _softmax_attend(query, _expand_kv(key_cache, H), _expand_kv(value_cache, H))
    return out, key_cache, value_cache


def awc_right_einsum(query, key_cache, value_cache, key_new, value_new):
    key_cache = torch.cat((key_cache, key_new), dim=-2)
    value_cache = torch.cat((value_cache, value_new), dim=-2)
    H = query.shape[1]
    k = ekv_right_index_select(key_cache, H).double()
    v = ekv_right_index_select(value_cache, H).double()
    s = torch.einsum("bhqd,bhkd->bhqk", query.double(), k) / math.sqrt(query.shape[-1])
    out = torch.einsum("bhqk,bhkd->bhqd", s.softmax(dim=-1), v).to(query.dtype)
    return out, key_cache, value_cache


_add(_EX10, _CK10B, "attend-then-append", "attended over the old cache only, then appended the new key and value", False, awc_attend_before_append)
_add(_EX10, _CK10B, "sdpa-is-causal", "used F.scaled_dot_product_attention with is_causal=True for the single query", False, awc_is_causal)
_add(_EX10, _CK10B, "return-expanded-caches", "returned the caches after expanding them to H heads", False, awc_returns_expanded)
_add(_EX10, _CK10B, "repeat-for-heads", "expanded the caches with .repeat(1, g, 1, 1)", False, awc_repeat_heads)
_add(_EX10, _CK10B, "new-token-first", "concatenated the new key and value in front of the caches", False, awc_prepend)
_add(_EX10, _CK10B, "einsum-float64-right", "append on dim -2, expand with index_select, einsum attention in float64", True, awc_right_einsum)


# =====================================================================================
# 11 rotary: check_apply_rope(apply_rope) / check_rotary_decode_step(...)
# =====================================================================================
_EX11 = "11_rotary_embeddings"
_CK11A, _CK11B = "check_apply_rope", "check_rotary_decode_step"


def _rope_parts(x, positions, base, exponent_scale=2.0):
    d = x.size(-1)
    p = torch.arange(d // 2, dtype=torch.float64, device=x.device)
    theta = base ** (-exponent_scale * p / d)
    ang = positions.to(torch.float64)[:, None] * theta[None, :]
    return ang.cos().to(x.dtype), ang.sin().to(x.dtype)


def rope_p_over_d(x, positions, base=10000.0):
    cos, sin = _rope_parts(x, positions, base, exponent_scale=1.0)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def rope_clockwise(x, positions, base=10000.0):
    cos, sin = _rope_parts(x, positions, base)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos + b * sin, -a * sin + b * cos), dim=-1).flatten(-2)


def rope_arange_positions(x, positions, base=10000.0):
    pos = torch.arange(x.size(-2), device=x.device)
    cos, sin = _rope_parts(x, pos, base)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def rope_cat_halves_out(x, positions, base=10000.0):
    cos, sin = _rope_parts(x, positions, base)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


def rope_float32_everywhere(x, positions, base=10000.0):
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2).float() / d)
    ang = positions.float()[:, None] * theta[None, :]
    x = x.float()
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * ang.cos() - b * ang.sin()
    out[..., 1::2] = a * ang.sin() + b * ang.cos()
    return out


def rope_complex_right(x, positions, base=10000.0):
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ang = positions.to(device=x.device, dtype=torch.float64).unsqueeze(-1) * theta
    rot = torch.polar(torch.ones_like(ang), ang)
    xc = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).reshape(x.shape).to(x.dtype)


_add(_EX11, _CK11A, "theta-exponent-p-over-d", "frequencies base ** (-p / d) from arange(d // 2) / d", False, rope_p_over_d)
_add(_EX11, _CK11A, "rotate-clockwise", "rotation with the sin signs swapped (clockwise)", False, rope_clockwise)
_add(_EX11, _CK11A, "positions-from-arange", "angles from arange(L) instead of the positions argument", False, rope_arange_positions)
_add(_EX11, _CK11A, "cat-instead-of-interleave", "put the rotated evens and odds back with cat (halves) instead of interleaving", False, rope_cat_halves_out)
_add(_EX11, _CK11A, "float32-throughout", "computed angles and result in float32 and returned float32 whatever x's dtype", False, rope_float32_everywhere)
_add(_EX11, _CK11A, "complex-multiply-right", "pairs as complex numbers in float64, multiplied by polar(1, angle), cast back", True, rope_complex_right)


def _attn(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return torch.softmax(s, dim=-1) @ v


def rds_one_based(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    q = lessons_src.apply_rope(q, cos, sin, n + 1)
    k = lessons_src.apply_rope(k, cos, sin, n + 1)
    key_cache = torch.cat([key_cache, k], dim=-2)
    value_cache = torch.cat([value_cache, v], dim=-2)
    return _attn(q, key_cache, value_cache), key_cache, value_cache


def rds_pos_from_query_len(q, k, v, key_cache, value_cache, cos, sin):
    pos = q.size(-2)
    q = lessons_src.apply_rope(q, cos, sin, pos)
    k = lessons_src.apply_rope(k, cos, sin, pos)
    key_cache = torch.cat([key_cache, k], dim=-2)
    value_cache = torch.cat([value_cache, v], dim=-2)
    return _attn(q, key_cache, value_cache), key_cache, value_cache


def rds_rerotate_cache(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    q = lessons_src.apply_rope(q, cos, sin, n)
    key_cache = lessons_src.apply_rope(torch.cat([key_cache, k], dim=-2), cos, sin)
    value_cache = torch.cat([value_cache, v], dim=-2)
    return _attn(q, key_cache, value_cache), key_cache, value_cache


def rds_cache_raw_key(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    q_r = lessons_src.apply_rope(q, cos, sin, n)
    k_r = lessons_src.apply_rope(k, cos, sin, n)
    keys = torch.cat([key_cache, k_r], dim=-2)
    value_cache = torch.cat([value_cache, v], dim=-2)
    out = _attn(q_r, keys, value_cache)
    return out, torch.cat([key_cache, k], dim=-2), value_cache


def rds_rotate_value(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.size(-2)
    q, k, v = (lessons_src.apply_rope(t, cos, sin, n) for t in (q, k, v))
    key_cache = torch.cat([key_cache, k], dim=-2)
    value_cache = torch.cat([value_cache, v], dim=-2)
    return _attn(q, key_cache, value_cache), key_cache, value_cache


def rds_right(q, k, v, key_cache, value_cache, cos, sin):
    n = key_cache.shape[2]
    pos = torch.full((1,), n, dtype=torch.long, device=q.device)
    q_rot = lessons_src.apply_rope(q, cos, sin, pos)
    k_rot = lessons_src.apply_rope(k, cos, sin, pos)
    new_k = torch.cat((key_cache, k_rot), dim=2)
    new_v = torch.cat((value_cache, v), dim=2)
    s = torch.einsum("bhqd,bhkd->bhqk", q_rot.double(), new_k.double()) / math.sqrt(q.shape[-1])
    out = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, -1), new_v.double()).to(q.dtype)
    return out, new_k, new_v


_add(_EX11, _CK11B, "position-n-plus-1", "rotated the new query and key to position n + 1 (counting tokens from 1)", False, rds_one_based)
_add(_EX11, _CK11B, "position-from-query-length", "took the new position from q.size(-2) instead of the cache length", False, rds_pos_from_query_len)
_add(_EX11, _CK11B, "rotate-whole-cache", "appended the raw key, then rotated the whole key cache to 0..n", False, rds_rerotate_cache)
_add(_EX11, _CK11B, "cache-keeps-raw-key", "attended with the rotated key but stored the unrotated key in the cache", False, rds_cache_raw_key)
_add(_EX11, _CK11B, "value-rotated-too", "rotated q, k and v to position n", False, rds_rotate_value)
_add(_EX11, _CK11B, "tensor-position-einsum-right", "position n as a tensor, rotate q and k, append, einsum attention in float64", True, rds_right)


# =====================================================================================
# 12 online softmax: check_online_softmax_update(...)
# =====================================================================================
_EX12, _CK12 = "12_tiled_attention", "check_online_softmax_update"


def osu_half_guard(running_max, running_sum, output, scores, value):
    m_new = torch.maximum(running_max, scores.amax(dim=-1))
    m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    alpha = torch.exp(running_max - m_new)
    p = torch.exp(scores - m_safe[..., None])
    l = alpha * running_sum + p.sum(dim=-1)
    o = alpha[..., None] * output + p @ value
    return m_new, l, o


def osu_old_max_exponent(running_max, running_sum, output, scores, value):
    m_new = torch.maximum(running_max, scores.amax(dim=-1))
    m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
    m_old_safe = torch.where(running_max == float("-inf"), m_safe, running_max)
    alpha = torch.exp(running_max - m_safe)
    p = torch.exp(scores - m_old_safe[..., None])
    l = alpha * running_sum + p.sum(dim=-1)
    o = alpha[..., None] * output + p @ value
    return m_new, l, o


def osu_max_wrong_dim(running_max, running_sum, output, scores, value):
    m_new = torch.maximum(running_max, scores.amax(dim=-2))
    m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
    alpha = torch.exp(running_max - m_safe)
    p = torch.exp(scores - m_safe[..., None])
    l = alpha * running_sum + p.sum(dim=-1)
    o = alpha[..., None] * output + p @ value
    return m_new, l, o


def osu_factor_exp_out(running_max, running_sum, output, scores, value):
    m_new = torch.maximum(running_max, scores.amax(dim=-1))
    m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
    alpha = torch.exp(running_max - m_safe)
    e = torch.exp(scores)  # e^{s} first, then divide by e^{m}
    scale = torch.exp(-m_safe)
    l = alpha * running_sum + e.sum(dim=-1) * scale
    o = alpha[..., None] * output + (e @ value) * scale[..., None]
    return m_new, l, o


def osu_output_not_rescaled(running_max, running_sum, output, scores, value):
    m_new = torch.maximum(running_max, scores.amax(dim=-1))
    m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
    alpha = torch.exp(running_max - m_safe)
    p = torch.exp(scores - m_safe[..., None])
    l = alpha * running_sum + p.sum(dim=-1)
    o = output + p @ value
    return m_new, l, o


def osu_nan_to_num_right(running_max, running_sum, output, scores, value):
    block_max = scores.max(dim=-1).values
    m_new = torch.max(running_max, block_max)
    alpha = torch.nan_to_num(torch.exp(running_max - m_new), nan=0.0)
    p = torch.nan_to_num(torch.exp(scores - m_new.unsqueeze(-1)), nan=0.0)
    new_sum = running_sum * alpha + p.sum(-1)
    new_out = output * alpha.unsqueeze(-1) + torch.matmul(p, value)
    return m_new, new_sum, new_out


_add(_EX12, _CK12, "guarded-block-not-factor", "guarded the block's exponentials for -inf rows but computed the rescale factor from the unguarded maximum", False, osu_half_guard)
_add(_EX12, _CK12, "block-against-old-max", "exponentiated the block's scores against the old maximum", False, osu_old_max_exponent)
_add(_EX12, _CK12, "block-max-over-queries", "took the block maximum with amax(dim=-2)", False, osu_max_wrong_dim)
_add(_EX12, _CK12, "exp-then-divide-by-exp-max", "computed exp(scores) first and multiplied by exp(-m) afterwards", False, osu_factor_exp_out)
_add(_EX12, _CK12, "output-not-rescaled", "rescaled the running sum by the factor but added to the old output as is", False, osu_output_not_rescaled)
_add(_EX12, _CK12, "nan-to-num-right", "standard update with NaN from -inf minus -inf replaced by 0 with nan_to_num", True, osu_nan_to_num_right)


# =====================================================================================
# 13 ALiBi: check_alibi_bias(alibi_bias)
# =====================================================================================
_EX13, _CK13 = "13_alibi", "check_alibi_bias"


def _pow2_slopes(n, start_h=1):
    return [2.0 ** (-8.0 * h / n) for h in range(start_h, n + start_h)]


def _paper_slopes(H):
    if math.log2(H).is_integer():
        return _pow2_slopes(H)
    hp = 2 ** math.floor(math.log2(H))
    return _pow2_slopes(hp) + _pow2_slopes(2 * hp)[0::2][: H - hp]


def _bias_from(slopes, len_q, len_k, offset=True):
    start = len_k - len_q if offset else 0
    p = torch.arange(len_q, dtype=torch.float32) + start
    j = torch.arange(len_k, dtype=torch.float32)
    dist = p[:, None] - j[None, :]
    return -torch.tensor(slopes, dtype=torch.float32)[:, None, None] * dist


def alibi_query_from_zero(num_heads, len_q, len_k):
    return _bias_from(_paper_slopes(num_heads), len_q, len_k, offset=False)


def alibi_even_extra_slopes(num_heads, len_q, len_k):
    if math.log2(num_heads).is_integer():
        slopes = _pow2_slopes(num_heads)
    else:
        hp = 2 ** math.floor(math.log2(num_heads))
        slopes = _pow2_slopes(hp) + _pow2_slopes(2 * hp)[1::2][: num_heads - hp]
    return _bias_from(slopes, len_q, len_k)


def alibi_h_from_zero(num_heads, len_q, len_k):
    if math.log2(num_heads).is_integer():
        slopes = _pow2_slopes(num_heads, start_h=0)
    else:
        hp = 2 ** math.floor(math.log2(num_heads))
        slopes = _pow2_slopes(hp, 0) + _pow2_slopes(2 * hp, 0)[0::2][: num_heads - hp]
    return _bias_from(slopes, len_q, len_k)


def alibi_next_power_truncated(num_heads, len_q, len_k):
    n = 2 ** math.ceil(math.log2(num_heads))
    return _bias_from(_pow2_slopes(n)[:num_heads], len_q, len_k)


def alibi_key_minus_query(num_heads, len_q, len_k):
    slopes = torch.tensor(_paper_slopes(num_heads))
    p = torch.arange(len_k - len_q, len_k)
    j = torch.arange(len_k)
    return -slopes.view(-1, 1, 1) * (j[None, :] - p[:, None]).float()


def alibi_loops_right(num_heads, len_q, len_k):
    def geo(n):
        r = 2.0 ** (-8.0 / n)
        return [r ** k for k in range(1, n + 1)]
    if num_heads & (num_heads - 1) == 0:
        slopes = geo(num_heads)
    else:
        below = 1
        while below * 2 < num_heads:
            below *= 2
        extra = geo(2 * below)
        slopes = geo(below) + [extra[k] for k in range(0, 2 * below, 2)][: num_heads - below]
    out = torch.zeros(num_heads, len_q, len_k)
    for h in range(num_heads):
        for i in range(len_q):
            p = len_k - len_q + i
            for j in range(len_k):
                out[h, i, j] = -slopes[h] * (p - j)
    return out


_add(_EX13, _CK13, "queries-at-0", "query positions p_i = i, ignoring len_k - len_q", False, alibi_query_from_zero)
_add(_EX13, _CK13, "extra-slopes-odd-indices", "took the extra slopes with [1::2] (2nd, 4th, ...)", False, alibi_even_extra_slopes)
_add(_EX13, _CK13, "head-index-from-0", "slopes 2^(-8h/H) with h = 0 .. H-1", False, alibi_h_from_zero)
_add(_EX13, _CK13, "next-power-first-H", "used the slopes of the next power of 2 and kept the first H", False, alibi_next_power_truncated)
_add(_EX13, _CK13, "distance-key-minus-query", "distance written as j - p_i with the minus sign kept", False, alibi_key_minus_query)
_add(_EX13, _CK13, "triple-loop-right", "slopes as a geometric list with a while loop for the power below, bias filled by loops", True, alibi_loops_right)


# =====================================================================================
# 14 next-token probabilities: check_next_token_probs(next_token_probs)
# =====================================================================================
_EX14, _CK14 = "14_language_model", "check_next_token_probs"


def ntp_drop_kth(logits, temperature=1.0, top_k=None):
    z = logits / temperature
    if top_k is not None:
        k = min(top_k, z.size(-1))
        kth = torch.topk(z, k, dim=-1).values[..., -1:]
        z = z.masked_fill(z <= kth, float("-inf")) if k < z.size(-1) else z
    return torch.softmax(z, dim=-1)


def ntp_scatter_indices(logits, temperature=1.0, top_k=None):
    z = logits / temperature
    if top_k is not None and top_k < z.size(-1):
        idx = torch.topk(z, top_k, dim=-1).indices
        keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, idx, True)
        z = z.masked_fill(~keep, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_topk_unclamped(logits, temperature=1.0, top_k=None):
    z = logits / temperature
    if top_k is not None:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_kth_over_all_rows(logits, temperature=1.0, top_k=None):
    z = logits / temperature
    if top_k is not None and top_k < z.size(-1):
        kth = torch.topk(z.flatten(), top_k).values[-1]
        z = z.masked_fill(z < kth, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_manual_exp(logits, temperature=1.0, top_k=None):
    z = logits / temperature
    if top_k is not None and top_k < z.size(-1):
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    e = z.exp()
    return e / e.sum(dim=-1, keepdim=True)


def ntp_sort_right(logits, temperature=1.0, top_k=None):
    z = logits.double() / temperature
    if top_k is not None:
        V = z.shape[-1]
        k = min(int(top_k), V)
        srt, _ = torch.sort(z, dim=-1, descending=True)
        threshold = srt[..., k - 1:k]
        z = torch.where(z >= threshold, z, torch.full_like(z, float("-inf")))
    p = torch.exp(z - z.amax(dim=-1, keepdim=True))
    return (p / p.sum(dim=-1, keepdim=True)).to(logits.dtype)


_add(_EX14, _CK14, "mask-le-kth", "masked logits <= the k-th largest, which also removes the k-th", False, ntp_drop_kth)
_add(_EX14, _CK14, "keep-topk-indices", "kept exactly the indices topk returns (scatter), so ties at the k-th are dropped", False, ntp_scatter_indices)
_add(_EX14, _CK14, "topk-with-raw-k", "called torch.topk with top_k even when it exceeds the vocabulary", False, ntp_topk_unclamped)
_add(_EX14, _CK14, "kth-of-flattened", "took the k-th largest logit of the whole flattened tensor, not of each row", False, ntp_kth_over_all_rows)
_add(_EX14, _CK14, "exp-normalise-by-hand", "top-k then exp / sum without subtracting the row maximum", False, ntp_manual_exp)
_add(_EX14, _CK14, "sorted-threshold-float64-right", "descending sort, threshold at index min(k, V) - 1, stable softmax in float64, cast back", True, ntp_sort_right)


# =====================================================================================
# 15 prefix matching: check_prefix_matching_score(prefix_matching_score)
# =====================================================================================
_EX15, _CK15 = "15_induction_heads", "check_prefix_matching_score"


def _pm_finish(weights, mask):
    per_q = (weights * mask[:, None].to(weights.dtype)).sum(-1)  # (B, H, L)
    valid = mask.any(-1)  # (B, L)
    return per_q.transpose(0, 1)[:, valid].mean(-1)


def pm_roll_wraps(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.roll(same, shifts=1, dims=-1)
    mask = mask & torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
    return _pm_finish(weights, mask)


def pm_mean_per_sequence(weights, tokens):
    B, L = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
    per_q = (weights * mask[:, None]).sum(-1)  # (B, H, L)
    valid = mask.any(-1)
    per_seq = []
    for b in range(B):
        per_seq.append(per_q[b][:, valid[b]].mean(-1))
    return torch.stack(per_seq).mean(0)


def pm_strict_before_query(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril(diagonal=-1)
    return _pm_finish(weights, mask)


def pm_shift_other_way(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, :-1] = same[:, :, 1:]
    mask = mask & torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
    return _pm_finish(weights, mask)


def pm_mean_over_keys(weights, tokens):
    L = tokens.size(1)
    same = tokens[:, :, None] == tokens[:, None, :]
    mask = torch.zeros_like(same)
    mask[:, :, 1:] = same[:, :, :-1]
    mask = mask & torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
    m = mask[:, None].to(weights.dtype)
    per_q = (weights * m).sum(-1) / m.sum(-1).clamp(min=1)
    valid = mask.any(-1)
    return per_q.transpose(0, 1)[:, valid].mean(-1)


def pm_loops_right(weights, tokens):
    B, H, L, _ = weights.shape
    total = torch.zeros(H, dtype=torch.float64, device=weights.device)
    count = 0
    for b in range(B):
        toks = tokens[b].tolist()
        for i in range(L):
            keys = [k for k in range(1, i + 1) if toks[k - 1] == toks[i]]
            if not keys:
                continue
            total += weights[b, :, i, keys].double().sum(-1)
            count += 1
    return (total / count).to(weights.dtype)


_add(_EX15, _CK15, "roll-previous-token", "shifted the same-token matrix with torch.roll along the key axis", False, pm_roll_wraps)
_add(_EX15, _CK15, "mean-of-sequence-means", "averaged the queries of each sequence, then averaged the sequences", False, pm_mean_per_sequence)
_add(_EX15, _CK15, "keys-strictly-before-query", "kept induction keys with k < i, so the query itself never counts", False, pm_strict_before_query)
_add(_EX15, _CK15, "token-before-next-occurrence", "shifted the comparison the other way: key k when tokens[k + 1] == tokens[i]", False, pm_shift_other_way)
_add(_EX15, _CK15, "mean-weight-per-key", "per query, averaged the weight over its induction keys instead of summing", False, pm_mean_over_keys)
_add(_EX15, _CK15, "python-loops-right", "loops over sequences and queries, induction keys listed explicitly, sums in float64", True, pm_loops_right)


# =====================================================================================
# 16 RMSNorm and SwiGLU: check_rms_norm / check_swiglu
# =====================================================================================
_EX16 = "16_modern_block"
_CK16A, _CK16B = "check_rms_norm", "check_swiglu"


def rms_l2_norm(x, weight, eps=1e-6):
    return x / (x.norm(dim=-1, keepdim=True) + eps) * weight


def rms_uses_variance(x, weight, eps=1e-6):
    return x / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * weight


def rms_dim1(x, weight, eps=1e-6):
    ms = x.pow(2).mean(dim=1, keepdim=True)
    return x / torch.sqrt(ms + eps) * weight


def rms_weight_first(x, weight, eps=1e-6):
    y = x * weight
    return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)


def rms_fixed_eps(x, weight, eps=1e-6):
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def rms_float64_right(x, weight, eps=1e-6):
    xd = x.double()
    inv = torch.rsqrt(torch.einsum("...d,...d->...", xd, xd).unsqueeze(-1) / x.shape[-1] + eps)
    return (xd * inv * weight.double()).to(x.dtype)


_add(_EX16, _CK16A, "divide-by-l2-norm", "divided by the L2 norm of the vector (no 1/D inside), eps added to it", False, rms_l2_norm)
_add(_EX16, _CK16A, "sqrt-of-variance", "divided by sqrt(var + eps), the standard deviation", False, rms_uses_variance)
_add(_EX16, _CK16A, "mean-over-dim-1", "mean of squares over dim=1", False, rms_dim1)
_add(_EX16, _CK16A, "weight-before-normalising", "multiplied by weight first, then normalised the product", False, rms_weight_first)
_add(_EX16, _CK16A, "eps-hardcoded", "used the literal 1e-6 under the root instead of the eps argument", False, rms_fixed_eps)
_add(_EX16, _CK16A, "einsum-rsqrt-float64-right", "mean of squares via einsum in float64, rsqrt, times weight, cast back", True, rms_float64_right)


def swiglu_silu_sign_typo(x, w_gate, w_up, w_down):
    g = x @ w_gate.T
    silu = g / (1 + torch.exp(g))
    return (silu * (x @ w_up.T)) @ w_down.T


def swiglu_f_glu(x, w_gate, w_up, w_down):
    h = F.glu(torch.cat([x @ w_up.T, x @ w_gate.T], dim=-1), dim=-1)
    return h @ w_down.T


def swiglu_gate_up_swapped(x, w_gate, w_up, w_down):
    gate = F.linear(x, w_up)
    up = F.linear(x, w_gate)
    return F.linear(F.silu(gate) * up, w_down)


def swiglu_silu_both(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * F.silu(x @ w_up.T)) @ w_down.T


def swiglu_silu_after_down(x, w_gate, w_up, w_down):
    return F.silu(((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T)


def swiglu_einsum_right(x, w_gate, w_up, w_down):
    g = torch.einsum("...d,fd->...f", x, w_gate)
    u = torch.einsum("...d,fd->...f", x, w_up)
    h = g * torch.sigmoid(g) * u
    return torch.einsum("...f,df->...d", h, w_down)


_add(_EX16, _CK16B, "silu-missing-minus", "hand-written SiLU as g / (1 + exp(g)), the minus sign lost", False, swiglu_silu_sign_typo)
_add(_EX16, _CK16B, "f-glu-on-cat", "used F.glu on cat(up, gate), which gates with a sigmoid", False, swiglu_f_glu)
_add(_EX16, _CK16B, "gate-from-up-weights", "the SiLU branch projects with w_up and the linear branch with w_gate", False, swiglu_gate_up_swapped)
_add(_EX16, _CK16B, "silu-on-both-branches", "SiLU applied to the gate and to the up projection", False, swiglu_silu_both)
_add(_EX16, _CK16B, "silu-after-down", "multiplied the two projections, projected down, then applied SiLU", False, swiglu_silu_after_down)
_add(_EX16, _CK16B, "einsum-sigmoid-right", "einsum projections, g * sigmoid(g) * u, einsum down projection", True, swiglu_einsum_right)
