"""Tiled attention and the online softmax against PyTorch's scaled_dot_product_attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES
from torch.testing import assert_close

from lessons_src.attention import scaled_dot_product_attention
from lessons_src.masks import causal_mask, padding_mask, sliding_window_mask
from lessons_src.tiled import online_softmax_steps, online_softmax_update, tiled_attention

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _inputs(batch, len_q, len_k, d_k=8, d_v=5, seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, len_q, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, len_k, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, len_k, d_v, generator=g, dtype=dtype)
    return q.to(device), k.to(device), v.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
@pytest.mark.parametrize("len_q, len_k", [(1, 1), (7, 13), (64, 64), (65, 129), (100, 37)])
@pytest.mark.parametrize("block_size", [1, 3, 16, 64, 200])
def test_equals_pytorch_for_any_lengths_and_block_sizes(device, batch, len_q, len_k, block_size):
    q, k, v = _inputs(batch, len_q, len_k, seed=len_q * 1000 + len_k, device=device)
    assert_close(tiled_attention(q, k, v, block_size=block_size), F.scaled_dot_product_attention(q, k, v), **TOL)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("len_q, len_k", [(9, 9), (5, 17), (70, 70), (33, 90)])
@pytest.mark.parametrize("block_size", [4, 16, 64])
def test_causal_masks_equal_pytorch(device, len_q, len_k, block_size):
    """The course's bottom-right causal mask, also for Lq < Lk (queries at the end of the keys)."""
    q, k, v = _inputs((2,), len_q, len_k, seed=3, device=device)
    mask = causal_mask(len_q, len_k, device=device)
    assert_close(tiled_attention(q, k, v, mask, block_size=block_size),
                 F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block_size", [2, 5, 32])
def test_random_boolean_masks_equal_pytorch(seed, block_size):
    q, k, v = _inputs((2, 3), 21, 34, seed=seed)
    g = torch.Generator().manual_seed(100 + seed)
    mask = torch.rand(2, 3, 21, 34, generator=g) < 0.4
    mask[..., 0] = True  # every row sees a key: PyTorch's result is defined
    assert_close(tiled_attention(q, k, v, mask, block_size=block_size),
                 F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)


@pytest.mark.parametrize("block_size", [3, 8])
def test_broadcast_masks_padding_and_sliding_window(block_size):
    q, k, v = _inputs((2, 4), 11, 11, seed=5)  # (B, H, L, d_k)
    pad = padding_mask(torch.tensor([11, 6]), max_len=11)[:, None, None, :]  # (B, 1, 1, Lk)
    assert_close(tiled_attention(q, k, v, pad, block_size=block_size),
                 F.scaled_dot_product_attention(q, k, v, attn_mask=pad), **TOL)
    window = sliding_window_mask(11, 3)  # (L, L)
    assert_close(tiled_attention(q, k, v, window, block_size=block_size),
                 F.scaled_dot_product_attention(q, k, v, attn_mask=window), **TOL)


@pytest.mark.parametrize("block_size", [1, 4, 64])
def test_fully_masked_rows_give_zeros_and_finite_gradients(block_size):
    q, k, v = _inputs((2,), 6, 9, seed=7, dtype=torch.float64)
    mask = torch.ones(2, 6, 9, dtype=torch.bool)
    mask[0, 2] = False  # query 2 of the first sequence sees nothing
    mask[1, :, 4:] = False
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = tiled_attention(q, k, v, mask, block_size=block_size)
    assert torch.equal(out[0, 2], torch.zeros(5, dtype=torch.float64))
    expected, _ = scaled_dot_product_attention(q, k, v, mask)  # the course's: zeros for empty rows
    assert_close(out, expected, atol=1e-12, rtol=1e-12)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    for grad, expected_grad in zip(grads, expected_grads):
        assert torch.isfinite(grad).all()
        assert_close(grad, expected_grad, atol=1e-10, rtol=1e-10)


def test_float64_agrees_to_rounding():
    q, k, v = _inputs((2,), 50, 77, seed=8, dtype=torch.float64)
    assert_close(tiled_attention(q, k, v, block_size=7), F.scaled_dot_product_attention(q, k, v),
                 atol=1e-12, rtol=1e-12)


def test_large_scores_do_not_overflow():
    """The running maximum keeps exp() in range where a naive exp(scores) overflows."""
    q, k, v = _inputs((), 10, 30, seed=9)
    q = q * 300.0
    out = tiled_attention(q, k, v, block_size=4)
    assert torch.isfinite(out).all()
    assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL)
    assert not torch.isfinite(torch.exp(q @ k.T / math.sqrt(8))).all()  # the naive route would fail


@pytest.mark.parametrize("cuts", [[30], [1, 29], [7, 7, 7, 9], [13, 1, 16]])
def test_online_softmax_over_any_split_equals_the_softmax(cuts):
    g = torch.Generator().manual_seed(len(cuts))
    scores, value = torch.randn(4, sum(cuts), generator=g) * 5, torch.randn(sum(cuts), 3, generator=g)
    m, s, o = torch.full((4,), -math.inf), torch.zeros(4), torch.zeros(4, 3)
    start = 0
    for size in cuts:
        m, s, o = online_softmax_update(m, s, o, scores[:, start:start + size], value[start:start + size])
        start += size
    assert_close(m, scores.amax(dim=-1))
    assert_close(s, torch.exp(scores - m[:, None]).sum(dim=-1), **TOL)
    assert_close(o / s[:, None], torch.softmax(scores, dim=-1) @ value, **TOL)


def test_forgetting_to_rescale_is_wrong():
    """The test above can fail: without rescaling the old sum and output, the result differs."""
    g = torch.Generator().manual_seed(0)
    scores, value = torch.arange(8.0).repeat(2, 1), torch.randn(8, 3, generator=g)  # rising: the max moves
    m, s, o = torch.full((2,), -math.inf), torch.zeros(2), torch.zeros(2, 3)
    for start in range(0, 8, 2):
        tile = scores[:, start:start + 2]
        new_m = torch.maximum(m, tile.amax(dim=-1))
        p = torch.exp(tile - new_m[:, None])
        s, o, m = s + p.sum(dim=-1), o + p @ value[start:start + 2], new_m  # no exp(m_old - m_new)
    assert not torch.allclose(o / s[:, None], torch.softmax(scores, dim=-1) @ value, atol=1e-3)


@pytest.mark.parametrize("block_size, message", [(0, "block_size must be a positive int, got 0"),
                                                 (-2, "got -2"), (2.5, "got 2.5"), (True, "got True")])
def test_bad_block_size(block_size, message):
    q, k, v = _inputs((), 4, 4)
    with pytest.raises(ValueError, match=message):
        tiled_attention(q, k, v, block_size=block_size)


def test_bad_shapes_and_masks_name_what_is_wrong():
    q, k, v = _inputs((2,), 4, 6)
    with pytest.raises(ValueError, match="tiled_attention"):
        tiled_attention(q, k[..., :5], v)  # d_k differs
    with pytest.raises(ValueError, match=r"does not broadcast"):
        tiled_attention(q, k, v, torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="must be boolean"):
        tiled_attention(q, k, v, torch.ones(4, 6))


def test_online_softmax_steps_end_at_the_softmax_and_see_only_their_keys():
    g = torch.Generator().manual_seed(11)
    scores, value = torch.randn(3, 10, generator=g) * 3, torch.randn(10, 4, generator=g)
    steps = online_softmax_steps(scores, value, block_size=4)
    assert len(steps) == 3  # keys 0-3, 4-7, 8-9
    for count, (m, s, out) in zip((4, 8, 10), steps):
        seen = scores[:, :count]
        assert_close(m, seen.amax(dim=-1))
        assert_close(s, torch.exp(seen - m[:, None]).sum(dim=-1), **TOL)
        assert_close(out, torch.softmax(seen, dim=-1) @ value[:count], **TOL)
    with pytest.raises(ValueError, match="scores have 10 keys"):
        online_softmax_steps(scores, value[:9], block_size=4)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        online_softmax_steps(scores, value, block_size=0)
