"""lessons_src.scaled_dot_product_attention against torch.nn.functional.scaled_dot_product_attention."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES

from lessons_src import causal_mask, padding_mask, scaled_dot_product_attention

TOL = dict(atol=1e-5, rtol=1e-5)

SHAPES = [  # (batch dims, Lq, Lk, d_k, d_v)
    ((), 1, 1, 1, 1),
    ((), 4, 4, 8, 8),
    ((), 3, 7, 16, 5),
    ((2,), 5, 5, 32, 32),
    ((2, 4), 6, 9, 8, 12),
    ((3, 2, 2), 2, 3, 4, 4),
]


def _qkv(batch, lq, lk, d_k, d_v, seed, device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, lq, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, lk, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, lk, d_v, generator=g, dtype=dtype)
    return q.to(device), k.to(device), v.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_pytorch_without_mask(shape, seed, device):
    q, k, v = _qkv(*shape, seed, device)
    output, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v), **TOL)
    expected_weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    torch.testing.assert_close(weights, expected_weights, **TOL)
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)), **TOL)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_matches_pytorch_with_random_masks(shape, seed):
    q, k, v = _qkv(*shape, seed)
    g = torch.Generator().manual_seed(100 + seed)
    mask = torch.rand(*shape[0], shape[1], shape[2], generator=g) > 0.4
    mask[..., 0] = True  # every query may attend to something: PyTorch's weights are then defined
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)
    assert (weights[~mask] == 0).all()


@pytest.mark.parametrize("mask_shape", [(6, 9), (1, 6, 9), (2, 1, 6, 9), (2, 4, 1, 9), (9,)])
def test_mask_broadcasting(mask_shape):
    q, k, v = _qkv((2, 4), 6, 9, 8, 12, seed=5)
    g = torch.Generator().manual_seed(7)
    mask = torch.rand(*mask_shape, generator=g) > 0.3
    mask[..., 0] = True
    output, _ = scaled_dot_product_attention(q, k, v, mask)
    # PyTorch needs at least a 2-D mask; ours broadcasts a (Lk,) mask like any other shape.
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(6, 9) if mask.dim() == 1 else mask)
    torch.testing.assert_close(output, expected, **TOL)


@pytest.mark.parametrize("mask_shape", [(5,), (3, 5), (2, 3, 5), (2, 1, 1, 5), (2, 1, 3, 5), (1, 2, 3, 5), (2, 2, 3, 5)])
def test_per_head_mask_shapes_match_pytorch(mask_shape):
    """Inputs (B, H, L, d): masks line up with the scores (B, H, Lq, Lk) from the right, as in PyTorch.

    So (2, 3, 5) here is (H, Lq, Lk); a per-sequence mask is (B, 1, Lq, Lk). The modules read a 3-D
    mask as (B, Lq, Lk) and insert that head axis themselves (tests/test_multihead.py).
    """
    q, k, v = _qkv((2, 2), 3, 5, 8, 4, seed=12)
    g = torch.Generator().manual_seed(13)
    mask = torch.rand(*mask_shape, generator=g) > 0.4
    mask[..., 0] = True
    output, _ = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(3, 5) if mask.dim() == 1 else mask)
    torch.testing.assert_close(output, expected, **TOL)


def test_causal_mask_matches_is_causal():
    q, k, v = _qkv((2, 3), 7, 7, 16, 16, seed=3)
    output, weights = scaled_dot_product_attention(q, k, v, causal_mask(7))
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL)
    assert torch.equal(weights[0, 0] > 0, causal_mask(7))


def test_padding_mask_on_keys():
    q, k, v = _qkv((3,), 5, 6, 8, 4, seed=4)
    mask = padding_mask([6, 2, 4])[:, None, :]  # (B, 1, Lk)
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)
    assert weights[1, :, 2:].abs().max() == 0


def test_fully_masked_rows_give_zeros_not_nan():
    q, k, v = _qkv((2,), 4, 5, 8, 3, seed=6)
    mask = torch.ones(2, 4, 5, dtype=torch.bool)
    mask[0, 1] = False
    mask[1] = False
    q.requires_grad_(True)
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not output.isnan().any() and not weights.isnan().any()
    assert output[0, 1].abs().max() == 0 and weights[0, 1].abs().max() == 0
    assert output[1].abs().max() == 0
    # PyTorch 2.13's SDPA also returns zeros for such rows on CPU (CONTRIBUTING.md, "Empty query rows")
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)
    output.sum().backward()
    assert not q.grad.isnan().any()


def test_gradients_match_pytorch():
    q, k, v = _qkv((2,), 5, 6, 8, 4, seed=8, dtype=torch.float64)
    mask = torch.rand(5, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[:, 0] = True
    ours = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = [t.clone().requires_grad_(True) for t in (q, k, v)]
    scaled_dot_product_attention(*ours, mask)[0].pow(2).sum().backward()
    F.scaled_dot_product_attention(*ref, attn_mask=mask).pow(2).sum().backward()
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_dtypes(dtype):
    q, k, v = _qkv((2,), 4, 4, 8, 8, seed=9, dtype=dtype)
    mask = causal_mask(4)
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert output.dtype == dtype and weights.dtype == dtype
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    tol = 1e-10 if dtype == torch.float64 else 2e-2
    torch.testing.assert_close(output.double(), reference, atol=tol, rtol=tol)


def test_bad_inputs_name_the_values():
    q, k, v = torch.randn(3, 8), torch.randn(4, 7), torch.randn(4, 2)
    with pytest.raises(ValueError, match=r"query's last dim \(d_k\) is 8 but key's is 7"):
        scaled_dot_product_attention(q, k, v)
    with pytest.raises(ValueError, match=r"key has Lk=4 positions but value has 5"):
        scaled_dot_product_attention(torch.randn(3, 8), torch.randn(4, 8), torch.randn(5, 2))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) does not broadcast .* \(3, 4\)"):
        scaled_dot_product_attention(torch.randn(3, 8), torch.randn(4, 8), torch.randn(4, 2),
                                     torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask must be boolean .* got dtype torch.int64"):
        scaled_dot_product_attention(torch.randn(3, 8), torch.randn(4, 8), torch.randn(4, 2),
                                     torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"at least 2 dims .* shape \(8,\)"):
        scaled_dot_product_attention(torch.randn(8), torch.randn(4, 8), torch.randn(4, 2))
    with pytest.raises(ValueError, match="share a dtype"):
        scaled_dot_product_attention(torch.randn(3, 8), torch.randn(4, 8).double(), torch.randn(4, 2))
    with pytest.raises(ValueError, match="floating point"):
        scaled_dot_product_attention(torch.ones(3, 8, dtype=torch.long), torch.randn(4, 8), torch.randn(4, 2))
    with pytest.raises(ValueError, match=r"leading .* do not broadcast"):
        scaled_dot_product_attention(torch.randn(2, 3, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 2))
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        scaled_dot_product_attention([[1.0]], torch.randn(4, 8), torch.randn(4, 2))
    with pytest.raises(ValueError, match="mask is on meta but the inputs are on cpu"):
        scaled_dot_product_attention(torch.randn(3, 8), torch.randn(4, 8), torch.randn(4, 2),
                                     torch.ones(3, 4, dtype=torch.bool, device="meta"))


def test_check_inputs_false_skips_the_checks_only():
    q, k, v = _qkv((2,), 4, 5, 8, 3, seed=14)
    mask = causal_mask(5)[:4]
    checked = scaled_dot_product_attention(q, k, v, mask)
    unchecked = scaled_dot_product_attention(q, k, v, mask, check_inputs=False)
    for a, b in zip(checked, unchecked):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    with pytest.raises(RuntimeError):  # no ValueError naming the shapes: torch's own error
        scaled_dot_product_attention(q, k[..., :4], v, check_inputs=False)


@pytest.mark.cuda
def test_cuda_matches_cpu():
    q, k, v = _qkv((2, 4), 6, 9, 8, 12, seed=11)
    mask = causal_mask(9)[:6]
    out_cpu, w_cpu = scaled_dot_product_attention(q, k, v, mask)
    out_gpu, w_gpu = scaled_dot_product_attention(q.cuda(), k.cuda(), v.cuda(), mask.cuda())
    assert out_gpu.device.type == "cuda"
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, **TOL)
    torch.testing.assert_close(w_gpu.cpu(), w_cpu, **TOL)
