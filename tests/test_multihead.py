"""MultiHeadAttention against nn.MultiheadAttention, against a per-head loop, and its errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from lessons_src.masks import causal_mask, padding_mask
from lessons_src.multihead import (
    MultiHeadAttention,
    attn_mask_to_mask,
    key_padding_mask_to_mask,
    merge_heads,
    split_heads,
)

TOL = {"atol": 1e-5, "rtol": 1e-5}

# (B, Lq, Lk, D, H): square and non-square, one head, head_dim 1, batch 1.
SHAPES = [(2, 5, 5, 16, 4), (3, 4, 7, 24, 3), (1, 1, 6, 8, 1), (2, 6, 3, 32, 8), (2, 3, 3, 4, 4)]


def _randomize(module: nn.Module, seed: int) -> None:
    """Fill every parameter with noise: PyTorch initialises biases to 0, which would hide a lost bias."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)


def _pair(D: int, H: int, bias: bool = True, seed: int = 0, dropout: float = 0.0):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, H, dropout=dropout, bias=bias, batch_first=True)
    _randomize(ref, seed)
    ref.eval()
    return ref, MultiHeadAttention.from_torch(ref)


def _torch(ref: nn.MultiheadAttention, q, k, v, **kw):
    return ref(q, k, v, need_weights=True, average_attn_weights=False, **kw)


@pytest.mark.parametrize("B,L,D,H", [(2, 5, 12, 3), (1, 1, 8, 8), (3, 4, 16, 1), (2, 6, 32, 4)])
def test_split_heads_gives_head_h_its_block_of_features(B, L, D, H):
    x = torch.randn(B, L, D, generator=torch.Generator().manual_seed(D))
    heads = split_heads(x, H)
    d_k = D // H
    assert heads.shape == (B, H, L, d_k) and heads.data_ptr() == x.data_ptr()  # a view
    for h in range(H):
        assert torch.equal(heads[:, h], x[..., h * d_k : (h + 1) * d_k])
    merged = merge_heads(heads)
    assert torch.equal(merged, x)  # the inverse
    assert torch.equal(merged, torch.cat([heads[:, h] for h in range(H)], dim=-1))  # Concat(head_0, ...)


def test_split_and_merge_heads_errors():
    with pytest.raises(ValueError, match=r"split_heads: D=10 is not divisible by num_heads=3"):
        split_heads(torch.randn(2, 4, 10), 3)
    with pytest.raises(ValueError, match=r"split_heads: x must be a 3-D tensor \(B, L, D\), got torch.Size\(\[4, 10\]\)"):
        split_heads(torch.randn(4, 10), 2)
    with pytest.raises(ValueError, match=r"split_heads: num_heads must be a positive int, got 0"):
        split_heads(torch.randn(2, 4, 10), 0)
    with pytest.raises(ValueError, match=r"merge_heads: x must be a 4-D tensor \(B, H, L, d_k\)"):
        merge_heads(torch.randn(2, 4, 10))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_torch_self_and_cross(shape, bias, seed):
    B, Lq, Lk, D, H = shape
    ref, ours = _pair(D, H, bias, seed)
    g = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(B, Lq, D, generator=g)
    mem_k = torch.randn(B, Lk, D, generator=g)
    mem_v = torch.randn(B, Lk, D, generator=g)
    with torch.no_grad():
        # self-attention (PyTorch may take its fused fast path here: query is key is value)
        expected, expected_w = _torch(ref, x, x, x)
        got, got_w = ours(x, x, x)
        assert_close(got, expected, **TOL)
        assert_close(got_w, expected_w, **TOL)
        assert got_w.shape == (B, H, Lq, Lq)
        # cross-attention, distinct key and value
        expected, expected_w = _torch(ref, x, mem_k, mem_v)
        got, got_w = ours(x, mem_k, mem_v)
    assert_close(got, expected, **TOL)
    assert_close(got_w, expected_w, **TOL)
    assert got.shape == (B, Lq, D) and got_w.shape == (B, H, Lq, Lk)


def test_matches_per_head_loop():
    """Split heads by hand, one head at a time, with the softmax written out: no PyTorch MHA involved."""
    B, L, D, H = 2, 5, 12, 3
    torch.manual_seed(3)
    ours = MultiHeadAttention(D, H)
    _randomize(ours, 3)
    x = torch.randn(B, L, D)
    q, k, v = ours.w_q(x), ours.w_k(x), ours.w_v(x)  # (B, L, D) each
    d_k = D // H
    heads, all_weights = [], []
    for h in range(H):
        cols = slice(h * d_k, (h + 1) * d_k)
        scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(d_k)  # (B, L, L)
        weights = scores.exp() / scores.exp().sum(-1, keepdim=True)
        heads.append(weights @ v[..., cols])
        all_weights.append(weights)
    expected = ours.w_o(torch.cat(heads, dim=-1))
    got, got_w = ours(x, x, x)
    assert_close(got, expected, **TOL)
    assert_close(got_w, torch.stack(all_weights, dim=1), **TOL)


@pytest.mark.parametrize("shape", SHAPES[:4])
def test_key_padding_mask_translated(shape):
    B, Lq, Lk, D, H = shape
    ref, ours = _pair(D, H, seed=5)
    g = torch.Generator().manual_seed(6)
    q, kv = torch.randn(B, Lq, D, generator=g), torch.randn(B, Lk, D, generator=g)
    lengths = [max(1, Lk - b) for b in range(B)]  # at least one real key per row: no fully-masked row
    kpm = ~padding_mask(lengths, Lk)  # PyTorch: True = ignore
    expected, expected_w = _torch(ref, q, kv, kv, key_padding_mask=kpm)
    mask = key_padding_mask_to_mask(kpm)
    assert mask.shape == (B, 1, 1, Lk)
    got, got_w = ours(q, kv, kv, mask)
    assert_close(got, expected, **TOL)
    assert_close(got_w, expected_w, **TOL)
    assert (got_w.masked_select(kpm[:, None, None, :]) == 0).all()


@pytest.mark.parametrize("L,D,H", [(5, 16, 4), (8, 12, 2), (1, 4, 1)])
def test_causal_attn_mask_translated_and_combined(L, D, H):
    ref, ours = _pair(D, H, seed=7)
    B = 3
    x = torch.randn(B, L, D, generator=torch.Generator().manual_seed(8))
    attn_mask = ~causal_mask(L)  # PyTorch bool attn_mask: True = ignore (the future)
    kpm = ~padding_mask([L, max(1, L - 1), max(1, L - 3)], L)
    expected, expected_w = _torch(ref, x, x, x, attn_mask=attn_mask)
    got, got_w = ours(x, x, x, attn_mask_to_mask(attn_mask))
    assert_close(got, expected, **TOL)
    assert_close(got_w, expected_w, **TOL)
    assert (got_w.triu(1) == 0).all()
    # both masks at once: ours is their AND
    expected, expected_w = _torch(ref, x, x, x, attn_mask=attn_mask, key_padding_mask=kpm)
    got, got_w = ours(x, x, x, attn_mask_to_mask(attn_mask) & key_padding_mask_to_mask(kpm))
    assert_close(got, expected, **TOL)
    assert_close(got_w, expected_w, **TOL)


def test_per_head_3d_attn_mask_translated():
    B, Lq, Lk, D, H = 2, 4, 6, 12, 3
    ref, ours = _pair(D, H, seed=9)
    g = torch.Generator().manual_seed(10)
    q, kv = torch.randn(B, Lq, D, generator=g), torch.randn(B, Lk, D, generator=g)
    ignore = torch.rand(B * H, Lq, Lk, generator=g) < 0.5
    ignore[..., 0] = False  # every row keeps one key
    expected, expected_w = _torch(ref, q, kv, kv, attn_mask=ignore)
    got, got_w = ours(q, kv, kv, attn_mask_to_mask(ignore, num_heads=H))
    assert_close(got, expected, **TOL)
    assert_close(got_w, expected_w, **TOL)


def test_mask_shapes_broadcast_alike():
    B, Lq, Lk, D, H = 2, 3, 5, 8, 2
    torch.manual_seed(11)
    ours = MultiHeadAttention(D, H)
    q, kv = torch.randn(B, Lq, D), torch.randn(B, Lk, D)
    keep = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)  # (B, Lk)
    full = keep[:, None, None, :].expand(B, H, Lq, Lk)
    expected, expected_w = ours(q, kv, kv, full)
    for mask in (keep[:, None, None, :], keep[:, None, None, :].expand(B, 1, Lq, Lk)):
        got, got_w = ours(q, kv, kv, mask)
        assert_close(got, expected, **TOL)
        assert_close(got_w, expected_w, **TOL)
    # an (Lq, Lk) mask is shared by the batch
    shared = torch.rand(Lq, Lk) < 0.6
    shared[:, 0] = True
    got, _ = ours(q, kv, kv, shared)
    assert_close(got, ours(q, kv, kv, shared.expand(B, H, Lq, Lk))[0], **TOL)
    assert not torch.allclose(got, ours(q, kv, kv)[0])  # the mask did something


# Every mask shape a module accepts, for B = H = 2 (where a 3-D mask read as (H, Lq, Lk) would
# silently mask the wrong rows), Lq = 3, Lk = 5, and how PyTorch's (B * H, Lq, Lk) attn_mask spells it.
MASK_SHAPES = {
    "(Lk,)": (5,),
    "(Lq, Lk)": (3, 5),
    "(B, Lq, Lk): one per sequence": (2, 3, 5),
    "(B, 1, 1, Lk): padding": (2, 1, 1, 5),
    "(B, 1, Lq, Lk)": (2, 1, 3, 5),
    "(1, H, Lq, Lk): per head": (1, 2, 3, 5),
    "(B, H, Lq, Lk)": (2, 2, 3, 5),
}


def as_torch_attn_mask(mask: torch.Tensor, B: int, H: int, Lq: int, Lk: int) -> torch.Tensor:
    """Our mask (True = may attend) as nn.MultiheadAttention's 3-D attn_mask (B * H, Lq, Lk), True = ignore."""
    if mask.dim() == 3:
        mask = mask[:, None]  # (B, 1, Lq, Lk): the documented reading of a 3-D mask
    return ~mask.expand(B, H, Lq, Lk).reshape(B * H, Lq, Lk)


@pytest.mark.parametrize("name", MASK_SHAPES)
def test_every_mask_shape_matches_torch(name):
    B, Lq, Lk, D, H = 2, 3, 5, 8, 2
    ref, ours = _pair(D, H, seed=18)
    g = torch.Generator().manual_seed(19)
    q, kv = torch.randn(B, Lq, D, generator=g), torch.randn(B, Lk, D, generator=g)
    mask = torch.rand(MASK_SHAPES[name], generator=g) < 0.6
    mask[..., 0] = True  # every query keeps a key: PyTorch's weights are then defined
    expected, expected_w = _torch(ref, q, kv, kv, attn_mask=as_torch_attn_mask(mask, B, H, Lq, Lk))
    got, got_w = ours(q, kv, kv, mask)
    assert_close(got, expected, **TOL)
    assert_close(got_w, expected_w, **TOL)
    assert not torch.allclose(got, ours(q, kv, kv)[0])  # the mask did something


def test_a_3d_mask_is_one_per_sequence_not_one_per_head():
    """With B == H a 3-D mask could line up with the heads; it is read as (B, Lq, Lk) instead."""
    B, Lq, Lk, D, H = 2, 3, 4, 8, 2
    torch.manual_seed(20)
    ours = MultiHeadAttention(D, H)
    q, kv = torch.randn(B, Lq, D), torch.randn(B, Lk, D)
    mask = torch.ones(B, Lq, Lk, dtype=torch.bool)
    mask[1, :, 2:] = False  # sequence 1 may not see keys 2, 3
    _, weights = ours(q, kv, kv, mask)
    assert (weights[1, :, :, 2:] == 0).all()  # both heads of sequence 1
    assert (weights[0] > 0).all()  # nothing of sequence 0
    assert_close(ours(q, kv, kv, mask)[0], ours(q, kv, kv, mask[:, None])[0], atol=0, rtol=0)


def test_fully_masked_row_gives_zero_weights_not_nan():
    # nn.MultiheadAttention returns NaN for a query that may attend to nothing; ours gives zero
    # weights, so that head contributes nothing and the output is w_o's bias.
    D, H = 8, 2
    torch.manual_seed(12)
    ours = MultiHeadAttention(D, H)
    _randomize(ours, 12)
    x = torch.randn(2, 3, D)
    mask = torch.ones(2, 1, 3, 3, dtype=torch.bool)
    mask[1, :, 2, :] = False  # batch 1, query 2 sees nothing
    out, weights = ours(x, x, x, mask)
    assert torch.isfinite(out).all()
    assert (weights[1, :, 2] == 0).all()
    assert_close(out[1, 2], ours.w_o.bias, **TOL)
    assert_close(weights[0].sum(-1), torch.ones(H, 3), **TOL)


def test_dropout_weights_match_torch_in_training():
    # PyTorch applies dropout to the softmax weights, multiplies the dropped weights into the
    # values and returns the dropped weights; with the same seed, so do we.
    B, Lq, Lk, D, H, p = 2, 5, 7, 16, 4, 0.3
    ref, ours = _pair(D, H, seed=13, dropout=p)
    ref.train()
    ours.train()
    g = torch.Generator().manual_seed(14)
    q, kv = torch.randn(B, Lq, D, generator=g), torch.randn(B, Lk, D, generator=g)
    torch.manual_seed(99)
    expected, expected_w = _torch(ref, q, kv, kv)
    torch.manual_seed(99)
    got, got_w = ours(q, kv, kv)
    assert_close(got, expected, **TOL)
    assert_close(got_w, expected_w, **TOL)
    assert (got_w == 0).any()
    # the kept weights are the eval weights scaled by 1 / (1 - p)
    ours.eval()
    _, clean_w = ours(q, kv, kv)
    kept = got_w != 0
    assert_close(got_w[kept], clean_w[kept] / (1 - p), **TOL)


def test_gradients_reach_every_parameter():
    torch.manual_seed(15)
    ours = MultiHeadAttention(12, 3)
    q = torch.randn(2, 4, 12, requires_grad=True)
    kv = torch.randn(2, 6, 12, requires_grad=True)
    out, _ = ours(q, kv, kv, padding_mask([6, 3])[:, None, None, :])
    (out * torch.randn_like(out)).sum().backward()
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert q.grad.abs().sum() > 0
    assert (kv.grad[1, 3:] == 0).all() and kv.grad[1, :3].abs().sum() > 0  # padded keys get no gradient


def test_from_torch_keeps_dtype_mode_and_non_batch_first_weights():
    ref = nn.MultiheadAttention(8, 2, dtype=torch.float64)  # batch_first=False: same weights, (L, B, D) layout
    _randomize(ref, 16)
    ours = MultiHeadAttention.from_torch(ref)
    assert ours.w_q.weight.dtype == torch.float64 and ours.training
    ref.eval()
    ours.eval()
    x = torch.randn(3, 5, 8, dtype=torch.float64)  # (B, L, D)
    expected, expected_w = ref(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), average_attn_weights=False)
    got, got_w = ours(x, x, x)
    assert_close(got, expected.transpose(0, 1), **TOL)
    assert_close(got_w, expected_w, **TOL)
    assert (ours.d_model, ours.num_heads, ours.head_dim) == (8, 2, 4)


# --- errors name the values at fault ---------------------------------------------------------


def test_d_model_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"d_model=10 .*num_heads=3"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize(
    "q_shape,k_shape,v_shape,match",
    [
        ((4, 8), (2, 4, 8), (2, 4, 8), r"query must be a 3-D tensor \(B, L, d_model\), got shape \(4, 8\)"),
        ((2, 4, 12), (2, 4, 8), (2, 4, 8), r"query's last dim is 12 but d_model=8"),
        ((2, 4, 8), (2, 4, 8), (2, 4, 6), r"value's last dim is 6 but d_model=8"),
        ((2, 4, 8), (3, 4, 8), (3, 4, 8), r"query B=2, key B=3, value B=3"),
        ((2, 4, 8), (2, 5, 8), (2, 4, 8), r"key has Lk=5 positions but value has 4"),
    ],
)
def test_input_errors(q_shape, k_shape, v_shape, match):
    ours = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=match):
        ours(torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape))


def test_dtype_mismatch_with_weights():
    with pytest.raises(ValueError, match=r"torch.float64 .*weights are torch.float32"):
        x = torch.randn(1, 2, 8, dtype=torch.float64)
        MultiHeadAttention(8, 2)(x, x, x)


@pytest.mark.parametrize(
    "mask,match",
    [
        (torch.ones(2, 1, 1, 5, dtype=torch.long), r"boolean .*torch.int64"),
        (torch.ones(3, 5, dtype=torch.bool), r"\(3, 5\) does not broadcast .*\(2, 2, 4, 5\)"),
        (
            torch.ones(3, 4, 5, dtype=torch.bool),
            r"mask of shape \(3, 4, 5\), read as \(B, 1, Lq, Lk\) = \(3, 1, 4, 5\), does not broadcast to the "
            r"scores' shape \(2, 2, 4, 5\) = \(B, H, Lq, Lk\)",
        ),
        (torch.ones(4, 5, dtype=torch.bool, device="meta"), r"mask is on meta but the inputs are on cpu"),
        (torch.ones(2, 3, 4, 5, dtype=torch.bool), r"\(2, 3, 4, 5\) does not broadcast"),
    ],
)
def test_mask_errors(mask, match):
    ours = MultiHeadAttention(8, 2)
    q, kv = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=match):
        ours(q, kv, kv, mask)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"kdim": 6}, r"kdim=6 .*embed_dim=8"),
        ({"add_bias_kv": True}, "add_bias_kv"),
        ({"add_zero_attn": True}, "add_zero_attn"),
    ],
)
def test_from_torch_refuses_what_it_cannot_represent(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, **kwargs))


def test_converter_errors():
    with pytest.raises(ValueError, match="bool"):
        key_padding_mask_to_mask(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        key_padding_mask_to_mask(torch.zeros(2, 3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"num_heads dividing 6, got num_heads=4"):
        attn_mask_to_mask(torch.zeros(6, 3, 3, dtype=torch.bool), num_heads=4)
    with pytest.raises(ValueError, match="attn_mask == 0"):
        attn_mask_to_mask(torch.zeros(3, 3))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu():
    torch.manual_seed(17)
    cpu = MultiHeadAttention(32, 4).eval()
    _randomize(cpu, 17)
    gpu = MultiHeadAttention(32, 4).eval()
    gpu.load_state_dict(cpu.state_dict())
    gpu = gpu.cuda()
    q, kv = torch.randn(2, 6, 32), torch.randn(2, 9, 32)
    mask = padding_mask([9, 4])[:, None, None, :]
    expected, expected_w = cpu(q, kv, kv, mask)
    # TF32 matmuls on the GPU would need a looser tolerance; turn them off for this comparison.
    with torch.no_grad():
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            got, got_w = gpu(q.cuda(), kv.cuda(), kv.cuda(), mask.cuda())
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    assert got.device.type == "cuda" and got_w.device.type == "cuda"
    assert_close(got.cpu(), expected.detach(), **TOL)
    assert_close(got_w.cpu(), expected_w.detach(), **TOL)
