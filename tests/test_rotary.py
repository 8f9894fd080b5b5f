"""Rotary position embeddings against the complex-number definition and their defining properties."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from lessons_src.rotary import apply_rope, rope_frequencies

TOL = {"atol": 1e-5, "rtol": 1e-5}


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


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rope_on_cuda():
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(2, 4, 64, 32, generator=g, device=device)
    cos, sin = rope_frequencies(32, 64, device=device)
    assert_close(apply_rope(q, cos, sin).norm(dim=-1), q.norm(dim=-1), atol=1e-4, rtol=1e-4)
