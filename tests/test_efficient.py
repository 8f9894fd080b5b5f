"""Linear and fused attention against the explicit formulas and PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from lessons_src.attention import scaled_dot_product_attention
from lessons_src.efficient import elu_feature_map, fused_attention, linear_attention
from lessons_src.masks import causal_mask, padding_mask

TOL = {"atol": 1e-5, "rtol": 1e-5}


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
def test_fused_on_cuda():
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
