"""Attention variants against PyTorch, against brute force, and against their defining properties."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from lessons_src.attention import scaled_dot_product_attention
from lessons_src.masks import causal_mask, padding_mask
from lessons_src.variants import (
    CausalSelfAttention,
    GroupedQueryAttention,
    KVCache,
    apply_rope,
    elu_feature_map,
    fused_attention,
    kv_cache_bytes,
    linear_attention,
    rope_frequencies,
    sliding_window_mask,
)

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _randomize(module: nn.Module, seed: int) -> None:
    """Noise in every parameter: PyTorch's zero-initialised biases would hide a lost bias."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


# --------------------------------------------------------------------------------------------
# sliding_window_mask
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seq_len", [1, 5, 9])
@pytest.mark.parametrize("window", [1, 2, 3, 12])
@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_mask_matches_brute_force(seq_len, window, causal):
    expected = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        for j in range(seq_len):
            expected[i, j] = (i - window < j <= i) if causal else abs(i - j) < window
    got = sliding_window_mask(seq_len, window, causal=causal)
    assert got.dtype == torch.bool and got.shape == (seq_len, seq_len)
    assert torch.equal(got, expected)


def test_sliding_window_mask_edge_cases():
    assert torch.equal(sliding_window_mask(6, 6), causal_mask(6))  # window covers the prefix
    assert torch.equal(sliding_window_mask(6, 1), torch.eye(6, dtype=torch.bool))  # only itself
    assert sliding_window_mask(6, 2).sum(dim=-1).tolist() == [1, 2, 2, 2, 2, 2]
    assert sliding_window_mask(6, 2, causal=False).sum(dim=-1).tolist() == [2, 3, 3, 3, 3, 2]


def test_sliding_window_mask_errors():
    with pytest.raises(ValueError, match=r"window must be a positive int, got 0"):
        sliding_window_mask(5, 0)
    with pytest.raises(ValueError, match=r"seq_len must be a positive int, got -1"):
        sliding_window_mask(-1, 2)


def test_sliding_window_mask_in_attention_limits_what_each_query_sees():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 7, 4) for _ in range(3))
    _, weights = scaled_dot_product_attention(q, k, v, mask=sliding_window_mask(7, 3))
    band = sliding_window_mask(7, 3)
    assert torch.all(weights[:, ~band] == 0)
    assert_close(weights.sum(-1), torch.ones(2, 7), **TOL)


# --------------------------------------------------------------------------------------------
# GroupedQueryAttention
# --------------------------------------------------------------------------------------------


def _gqa_reference(gqa: GroupedQueryAttention, query, key, value, mask=None):
    """The same projections, attended by PyTorch's SDPA with enable_gqa=True."""
    B, Lq, D = query.shape
    Lk = key.size(1)
    H, H_kv, d_k = gqa.num_heads, gqa.num_kv_heads, gqa.head_dim
    q = gqa.w_q(query).view(B, Lq, H, d_k).transpose(1, 2)  # (B, H, Lq, d_k)
    k = gqa.w_k(key).view(B, Lk, H_kv, d_k).transpose(1, 2)  # (B, H_kv, Lk, d_k)
    v = gqa.w_v(value).view(B, Lk, H_kv, d_k).transpose(1, 2)  # (B, H_kv, Lk, d_k)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (B, H, Lq, d_k)
    return gqa.w_o(out.transpose(1, 2).reshape(B, Lq, D))  # (B, Lq, D)


# (B, Lq, Lk, D, H)
GQA_SHAPES = [(2, 5, 5, 32, 4), (3, 4, 7, 24, 6), (1, 1, 6, 16, 8)]


@pytest.mark.parametrize("shape", GQA_SHAPES)
@pytest.mark.parametrize("kv", ["one", "two", "all"])
@pytest.mark.parametrize("seed", [0, 1])
def test_gqa_matches_torch_enable_gqa(shape, kv, seed):
    B, Lq, Lk, D, H = shape
    num_kv_heads = {"one": 1, "two": 2, "all": H}[kv]
    torch.manual_seed(seed)
    gqa = GroupedQueryAttention(D, H, num_kv_heads)
    _randomize(gqa, seed)
    query, key, value = torch.randn(B, Lq, D), torch.randn(B, Lk, D), torch.randn(B, Lk, D)
    out, weights = gqa(query, key, value)
    assert out.shape == (B, Lq, D) and weights.shape == (B, H, Lq, Lk)
    assert_close(out, _gqa_reference(gqa, query, key, value), **TOL)
    assert_close(weights.sum(-1), torch.ones(B, H, Lq), **TOL)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_gqa_matches_torch_with_causal_and_padding_masks(num_kv_heads):
    torch.manual_seed(3)
    B, L, D, H = 3, 6, 32, 4
    gqa = GroupedQueryAttention(D, H, num_kv_heads)
    _randomize(gqa, 3)
    x = torch.randn(B, L, D)
    mask = causal_mask(L)  # (L, L)
    out, weights = gqa(x, x, x, mask=mask)
    assert_close(out, _gqa_reference(gqa, x, x, x, mask), **TOL)
    assert torch.all(weights[..., ~mask] == 0)

    keys = padding_mask([6, 4, 2])[:, None, None, :]  # (B, 1, 1, L)
    both = keys & mask  # (B, 1, L, L)
    out, weights = gqa(x, x, x, mask=both)
    assert_close(out, _gqa_reference(gqa, x, x, x, both), **TOL)
    assert torch.all(weights[2, :, :, 2:] == 0)


def test_gqa_shares_each_kv_head_with_consecutive_query_heads():
    """Query heads 0,1 use KV head 0 and heads 2,3 use KV head 1 (repeat_interleave, not repeat)."""
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, 2)
    _randomize(gqa, 0)
    with torch.no_grad():  # make every query head identical: then heads differ only by their KV head
        gqa.w_q.weight.copy_(gqa.w_q.weight[:4].repeat(4, 1))
        gqa.w_q.bias.copy_(gqa.w_q.bias[:4].repeat(4))
    x = torch.randn(2, 5, 16)
    _, weights = gqa(x, x, x)  # (B, 4, L, L)
    assert_close(weights[:, 0], weights[:, 1], **TOL)
    assert_close(weights[:, 2], weights[:, 3], **TOL)
    assert not torch.allclose(weights[:, 1], weights[:, 2], atol=1e-3)


def test_gqa_with_all_kv_heads_is_multi_head_attention():
    """num_kv_heads = num_heads: PyTorch's nn.MultiheadAttention with the same weights."""
    torch.manual_seed(0)
    D, H = 24, 3
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    _randomize(ref, 5)
    gqa = GroupedQueryAttention(D, H, H)
    w_q, w_k, w_v = ref.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = ref.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for lin, w, b in ((gqa.w_q, w_q, b_q), (gqa.w_k, w_k, b_k), (gqa.w_v, w_v, b_v)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        gqa.w_o.weight.copy_(ref.out_proj.weight)
        gqa.w_o.bias.copy_(ref.out_proj.bias)
    q, kv = torch.randn(2, 4, D), torch.randn(2, 6, D)
    expected, expected_weights = ref(q, kv, kv, need_weights=True, average_attn_weights=False)
    out, weights = gqa(q, kv, kv)
    assert_close(out, expected, **TOL)
    assert_close(weights, expected_weights, **TOL)


def test_gqa_parameter_count_shrinks_with_fewer_kv_heads():
    D = 64
    sizes = {kv: GroupedQueryAttention(D, 8, kv).w_k.weight.shape for kv in (1, 2, 8)}
    assert sizes == {1: (8, D), 2: (16, D), 8: (D, D)}


def test_gqa_errors():
    with pytest.raises(ValueError, match=r"num_heads=6 is not divisible by num_kv_heads=4"):
        GroupedQueryAttention(24, 6, 4)
    with pytest.raises(ValueError, match=r"d_model=30 is not divisible by num_heads=4"):
        GroupedQueryAttention(30, 4, 2)
    with pytest.raises(ValueError, match=r"num_kv_heads must be a positive int, got 0"):
        GroupedQueryAttention(32, 4, 0)
    gqa = GroupedQueryAttention(16, 4, 2)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"3-D mask of shape \(2, 5, 5\) is ambiguous"):
        gqa(x, x, x, mask=torch.ones(2, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"query must be \(B, L, d_model=16\), got \(2, 5, 8\)"):
        gqa(torch.randn(2, 5, 8), x, x)


# --------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_kv_cache_token_by_token_equals_full_causal_pass(num_kv_heads, seed):
    torch.manual_seed(seed)
    B, L, D, H = 2, 7, 32, 4
    layer = CausalSelfAttention(D, H, num_kv_heads).eval()
    _randomize(layer, seed)
    x = torch.randn(B, L, D)
    full, full_weights = layer(x)

    cache = KVCache()
    steps = [layer(x[:, t : t + 1], cache) for t in range(L)]
    assert_close(torch.cat([out for out, _ in steps], dim=1), full, **TOL)
    for t, (_, weights) in enumerate(steps):  # step t sees keys 0..t, as row t of the full pass
        assert weights.shape == (B, H, 1, t + 1)
        assert_close(weights[:, :, 0], full_weights[:, :, t, : t + 1], **TOL)
    assert cache.seq_len == L
    assert cache.key.shape == cache.value.shape == (B, num_kv_heads, L, D // H)  # the small K/V


def test_kv_cache_prefill_then_decode():
    """A prompt of 4 tokens in one call, then 3 single tokens: same as one pass of 7."""
    torch.manual_seed(2)
    layer = CausalSelfAttention(16, 4, 2)
    _randomize(layer, 2)
    x = torch.randn(3, 7, 16)
    full, _ = layer(x)
    cache = KVCache()
    outs = [layer(x[:, :4], cache)[0]] + [layer(x[:, t : t + 1], cache)[0] for t in range(4, 7)]
    assert_close(torch.cat(outs, dim=1), full, **TOL)
    cache.reset()
    assert cache.seq_len == 0 and cache.key is None


def test_a_bad_mask_leaves_the_cache_unchanged():
    layer = GroupedQueryAttention(16, 4, 2)
    cache = KVCache()
    x = torch.randn(2, 3, 16)
    layer(x, x, x, kv_cache=cache)
    with pytest.raises(ValueError, match=r"mask of shape \(1, 3\) does not broadcast to the scores' shape \(2, 4, 1, 4\)"):
        layer(x[:, :1], x[:, :1], x[:, :1], mask=torch.ones(1, 3, dtype=torch.bool), kv_cache=cache)
    assert cache.seq_len == 3


def test_kv_cache_rejects_a_mismatched_append():
    cache = KVCache()
    cache.append(torch.randn(2, 4, 3, 8), torch.randn(2, 4, 3, 8))
    with pytest.raises(ValueError, match=r"new key \(2, 2, 1, 8\) does not continue the cached key \(2, 4, 3, 8\)"):
        cache.append(torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 8))
    with pytest.raises(ValueError, match=r"got key \(2, 4, 8\)"):
        cache.append(torch.randn(2, 4, 8), torch.randn(2, 4, 8))


def test_kv_cache_bytes_arithmetic():
    # A 7B-class model: 32 layers, 32 heads of 128 dims, 4096 tokens, fp16: 2 GiB per sequence.
    mha = kv_cache_bytes(batch=1, seq_len=4096, num_layers=32, num_kv_heads=32, head_dim=128)
    assert mha == 2 * 32 * 1 * 32 * 4096 * 128 * 2 == 2**31
    gqa = kv_cache_bytes(1, 4096, 32, num_kv_heads=8, head_dim=128)
    assert mha == 4 * gqa  # 32 query heads sharing 8 KV heads: 4x smaller
    assert kv_cache_bytes(1, 4096, 32, 1, 128) * 32 == mha  # multi-query: 32x smaller
    assert kv_cache_bytes(1, 4096, 32, 8, 128, dtype=torch.float32) == 2 * gqa
    assert kv_cache_bytes(3, 100, 2, 4, 16, dtype=torch.float32) == 2 * 2 * 3 * 4 * 100 * 16 * 4


def test_kv_cache_bytes_matches_a_real_cache():
    layer = CausalSelfAttention(32, 8, 2).to(torch.float16)
    cache = KVCache()
    layer(torch.randn(3, 5, 32, dtype=torch.float16), cache)
    real = cache.key.nbytes + cache.value.nbytes
    assert real == kv_cache_bytes(3, 5, num_layers=1, num_kv_heads=2, head_dim=4)


def test_kv_cache_bytes_errors():
    with pytest.raises(ValueError, match=r"num_kv_heads must be a positive int, got 0"):
        kv_cache_bytes(1, 10, 2, 0, 64)


# --------------------------------------------------------------------------------------------
# Rotary position embedding
# --------------------------------------------------------------------------------------------


def _rope_complex(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's definition: pair (x_2i, x_2i+1) is the complex number x_2i + i·x_2i+1, times e^{i m θ_i}."""
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    rotation = torch.polar(torch.ones(()), (positions.double()[:, None] * theta).float())  # (L, d/2)
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], d // 2, 2).contiguous())  # (..., L, d/2)
    return torch.view_as_real(pairs * rotation).flatten(-2)  # (..., L, d)


@pytest.mark.parametrize("head_dim", [2, 8, 64])
@pytest.mark.parametrize("seed", [0, 1])
def test_rope_matches_the_complex_number_definition(head_dim, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 11, head_dim, generator=g)
    cos, sin = rope_frequencies(head_dim, max_len=32)
    assert cos.shape == sin.shape == (32, head_dim // 2) and cos.dtype == torch.float32
    assert_close(apply_rope(x, cos, sin), _rope_complex(x, torch.arange(11)), **TOL)
    positions = torch.tensor([5, 0, 31, 2, 2, 7, 8, 9, 10, 11, 30])
    assert_close(apply_rope(x, cos, sin, positions), _rope_complex(x, positions), **TOL)


@pytest.mark.parametrize("head_dim", [4, 16, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rope_score_depends_only_on_relative_position(head_dim, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(head_dim, generator=g), torch.randn(head_dim, generator=g)
    cos, sin = rope_frequencies(head_dim, max_len=512)

    def score(m: int, n: int) -> torch.Tensor:
        q_m = apply_rope(q[None], cos, sin, positions=torch.tensor([m]))[0]
        k_n = apply_rope(k[None], cos, sin, positions=torch.tensor([n]))[0]
        return q_m @ k_n

    for m, n in [(3, 1), (10, 10), (0, 7), (40, 2)]:
        for offset in (1, 17, 300):
            assert_close(score(m + offset, n + offset), score(m, n), atol=1e-4, rtol=1e-4)
    # ...and it does depend on m - n (else the test could not fail).
    assert not torch.allclose(score(5, 1), score(5, 2), atol=1e-3)


def test_rope_preserves_norms_and_leaves_position_zero_alone():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 20, 32, generator=g)
    cos, sin = rope_frequencies(32, 20)
    rotated = apply_rope(x, cos, sin)
    assert_close(rotated.norm(dim=-1), x.norm(dim=-1), **TOL)
    assert_close(rotated[:, 0], x[:, 0], **TOL)
    assert not torch.allclose(rotated[:, 1:], x[:, 1:], atol=1e-3)


def test_rope_int_offset_equals_explicit_positions_and_keeps_dtype():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 3, 8, generator=g, dtype=torch.float64)
    cos, sin = rope_frequencies(8, 16)
    out = apply_rope(x, cos, sin, positions=5)
    assert out.dtype == torch.float64
    assert_close(out, apply_rope(x, cos, sin, positions=torch.tensor([5, 6, 7])), **TOL)


def test_rope_errors():
    cos, sin = rope_frequencies(8, 10)
    with pytest.raises(ValueError, match=r"head_dim must be even .* got 7"):
        apply_rope(torch.randn(3, 7), cos, sin)
    with pytest.raises(ValueError, match=r"head_dim must be even .* got 5"):
        rope_frequencies(5, 10)
    with pytest.raises(ValueError, match=r"positions 8..11 are outside the table's 0..9"):
        apply_rope(torch.randn(4, 8), cos, sin, positions=8)
    with pytest.raises(ValueError, match=r"cos and sin must both be \(max_len, head_dim/2=8\)"):
        apply_rope(torch.randn(4, 16), cos, sin)


# --------------------------------------------------------------------------------------------
# Linear attention
# --------------------------------------------------------------------------------------------


def _linear_attention_quadratic(query, key, value, feature_map=elu_feature_map, causal=False, eps=1e-6):
    """The same formula with the (Lq, Lk) similarity matrix written out."""
    similarity = feature_map(query) @ feature_map(key).transpose(-2, -1)  # (..., Lq, Lk)
    if causal:
        similarity = similarity * causal_mask(query.size(-2)).to(similarity.dtype)
    weights = similarity / (similarity.sum(dim=-1, keepdim=True) + eps)
    return weights @ value


@pytest.mark.parametrize("shape", [((2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 5)), ((4, 9, 16), (4, 9, 16), (4, 9, 16))])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_linear_attention_matches_quadratic_form(shape, causal, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(s, generator=g) for s in shape)
    expected = _linear_attention_quadratic(q, k, v, causal=causal)
    assert_close(linear_attention(q, k, v, causal=causal), expected, **TOL)


def test_linear_attention_non_square_and_custom_feature_map():
    g = torch.Generator().manual_seed(4)
    q, k, v = torch.randn(2, 3, 8, generator=g), torch.randn(2, 10, 8, generator=g), torch.randn(2, 10, 4, generator=g)
    out = linear_attention(q, k, v, feature_map=F.softplus)
    assert out.shape == (2, 3, 4)
    assert_close(out, _linear_attention_quadratic(q, k, v, feature_map=F.softplus), **TOL)


def test_linear_attention_first_causal_output_is_the_first_value():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, generator=g) for _ in range(3))
    out = linear_attention(q, k, v, causal=True)
    assert_close(out[:, 0], v[:, 0], atol=1e-5, rtol=1e-5)  # position 0 sees only itself


def test_linear_attention_errors():
    q, k = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"causal=True needs Lq == Lk, got Lq=3 and Lk=5"):
        linear_attention(q, k, k, causal=True)
    with pytest.raises(ValueError, match=r"query's last dim \(d_k\) is 8 but key's is 4"):
        linear_attention(q, torch.randn(2, 5, 4), k)


# --------------------------------------------------------------------------------------------
# Fused attention
# --------------------------------------------------------------------------------------------

FUSED_SHAPES = [((2, 4, 6, 8), (2, 4, 6, 8), (2, 4, 6, 8)), ((3, 5, 16), (3, 9, 16), (3, 9, 7)), ((1, 2, 1, 4), (1, 2, 6, 4), (1, 2, 6, 4))]


@pytest.mark.parametrize("shapes", FUSED_SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_fused_equals_explicit(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(s, generator=g) for s in shapes)
    assert_close(fused_attention(q, k, v), scaled_dot_product_attention(q, k, v)[0], **TOL)
    random_mask = torch.rand(q.size(-2), k.size(-2), generator=g) > 0.4
    assert_close(
        fused_attention(q, k, v, mask=random_mask), scaled_dot_product_attention(q, k, v, mask=random_mask)[0], **TOL
    )


def test_fused_equals_explicit_with_causal_and_padding_masks():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(3, 2, 6, 8, generator=g) for _ in range(3))
    mask = causal_mask(6) & padding_mask([6, 3, 1])[:, None, None, :]  # (B, 1, L, L)
    assert_close(fused_attention(q, k, v, mask=mask), scaled_dot_product_attention(q, k, v, mask=mask)[0], **TOL)
    assert_close(fused_attention(q, k, v, causal=True), scaled_dot_product_attention(q, k, v, mask=causal_mask(6))[0], **TOL)


def test_fused_fully_masked_row_gives_zeros_without_nan_gradients():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    out = fused_attention(q, k, v, mask=mask)
    assert torch.all(out[:, 1] == 0)
    expected, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.all(weights[:, 1] == 0)
    assert_close(out, expected, **TOL)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_fused_causal_is_bottom_right_aligned_when_lq_differs_from_lk():
    """One decoding step (Lq=1) must see every key; PyTorch's is_causal would show it only key 0."""
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(2, 2, 8, generator=g), torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 8, generator=g)
    bottom_right = torch.ones(2, 5, dtype=torch.bool).tril(diagonal=3)  # query i sees keys 0..3+i
    expected = scaled_dot_product_attention(q, k, v, mask=bottom_right)[0]
    assert_close(fused_attention(q, k, v, causal=True), expected, **TOL)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.allclose(top_left, expected, atol=1e-3)  # the PyTorch behaviour we avoid


def test_fused_broadcasts_leading_dims_like_explicit():
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 3, 5, 8, generator=g), torch.randn(1, 3, 6, 8, generator=g), torch.randn(3, 6, 8, generator=g)
    assert_close(fused_attention(q, k, v), scaled_dot_product_attention(q, k, v)[0], **TOL)


def test_fused_errors():
    q = torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"mask must be boolean"):
        fused_attention(q, q, q, mask=torch.ones(5, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) does not broadcast"):
        fused_attention(q, q, q, mask=torch.ones(4, 5, dtype=torch.bool))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_variants_on_cuda():
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32, generator=g, device=device) for _ in range(3))
    mask = causal_mask(64, device=device)
    mask[3] = False
    assert_close(
        fused_attention(q, k, v, mask=mask), scaled_dot_product_attention(q, k, v, mask=mask)[0], atol=1e-4, rtol=1e-4
    )
    assert_close(
        fused_attention(q, k, v, causal=True), scaled_dot_product_attention(q, k, v, mask=causal_mask(64, device=device))[0],
        atol=1e-4, rtol=1e-4,
    )
    layer = CausalSelfAttention(32, 4, 2).to(device)
    x = torch.randn(2, 6, 32, device=device)
    cache = KVCache()
    steps = torch.cat([layer(x[:, t : t + 1], cache)[0] for t in range(6)], dim=1)
    assert_close(steps, layer(x)[0], atol=1e-4, rtol=1e-4)
    cos, sin = rope_frequencies(32, 64, device=device)
    assert_close(apply_rope(q, cos, sin).norm(dim=-1), q.norm(dim=-1), atol=1e-4, rtol=1e-4)
    assert math.isclose(float(sliding_window_mask(8, 3, device=device).sum()), 3 * 8 - 3)
