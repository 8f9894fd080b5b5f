"""Grouped-query attention, the KV cache and CausalSelfAttention against PyTorch and against full passes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from lessons_src.gqa import CausalSelfAttention, GroupedQueryAttention, KVCache, kv_cache_bytes
from lessons_src.masks import causal_mask, padding_mask

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _randomize(module: nn.Module, seed: int) -> None:
    """Noise in every parameter: PyTorch's zero-initialised biases would hide a lost bias."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


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


@pytest.mark.parametrize(
    "mask_shape", [(5,), (4, 5), (2, 4, 5), (2, 1, 1, 5), (2, 1, 4, 5), (1, 4, 4, 5), (2, 4, 4, 5)]
)
def test_gqa_accepts_every_mask_shape_like_torch(mask_shape):
    """Masks broadcastable to (B, H, Lq, Lk); a 3-D one is (B, Lq, Lk), one per sequence."""
    B, Lq, Lk, D, H = 2, 4, 5, 16, 4
    torch.manual_seed(4)
    gqa = GroupedQueryAttention(D, H, 2)
    _randomize(gqa, 4)
    g = torch.Generator().manual_seed(5)
    query, kv = torch.randn(B, Lq, D, generator=g), torch.randn(B, Lk, D, generator=g)
    mask = torch.rand(mask_shape, generator=g) < 0.6
    mask[..., 0] = True
    as_4d = mask[:, None] if mask.dim() == 3 else mask  # (B, 1, Lq, Lk) for a 3-D mask
    out, weights = gqa(query, kv, kv, mask=mask)
    assert_close(out, _gqa_reference(gqa, query, kv, kv, as_4d.expand(B, H, Lq, Lk)), **TOL)
    assert torch.all(weights[~as_4d.expand(B, H, Lq, Lk)] == 0)


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
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5, 5\), read as \(B, 1, Lq, Lk\) = \(3, 1, 5, 5\)"):
        gqa(x, x, x, mask=torch.ones(3, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"query's last dim is 8 but d_model=16 \(query shape \(2, 5, 8\)\)"):
        gqa(torch.randn(2, 5, 8), x, x)
    with pytest.raises(ValueError, match=r"x's last dim is 8 but d_model=16"):
        CausalSelfAttention(16, 4, 2)(torch.randn(2, 5, 8))


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
    with pytest.raises(ValueError, match=r"new keys are torch.float64 on cpu but the cached ones torch.float32 on cpu"):
        cache.append(torch.randn(2, 4, 1, 8, dtype=torch.float64), torch.randn(2, 4, 1, 8, dtype=torch.float64))


def test_kv_cache_bytes_arithmetic():
    # A 7B-class model: 32 layers, 32 heads of 128 dims, 4096 tokens, fp16: 2 GiB per sequence.
    mha = kv_cache_bytes(batch_size=1, seq_len=4096, num_layers=32, num_kv_heads=32, head_dim=128)
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


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kv_cache_decoding_on_cuda():
    device = torch.device("cuda")
    layer = CausalSelfAttention(32, 4, 2).to(device)
    x = torch.randn(2, 6, 32, device=device)
    cache = KVCache()
    steps = torch.cat([layer(x[:, t : t + 1], cache)[0] for t in range(6)], dim=1)
    assert_close(steps, layer(x)[0], atol=1e-4, rtol=1e-4)
