"""Sinusoidal and learned positional encodings: values from the formula, properties, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from lessons_src.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_positional_encoding,
)

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _formula(pos: int, col: int, d_model: int) -> float:
    """PE[pos, col] straight from the paper, with math on Python floats."""
    two_i = col - col % 2
    angle = pos / 10000 ** (two_i / d_model)
    return math.sin(angle) if col % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("max_len,d_model", [(50, 16), (2048, 64), (7, 5), (3, 1), (100, 33)])
def test_entries_match_the_formula(max_len, d_model):
    pe = sinusoidal_positional_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model) and pe.dtype == torch.float32
    g = torch.Generator().manual_seed(max_len + d_model)
    rows = [0, 1, max_len - 1, *torch.randint(0, max_len, (6,), generator=g).tolist()]
    cols = [0, d_model - 1, *torch.randint(0, d_model, (6,), generator=g).tolist()]
    for pos in rows:
        for col in cols:
            assert abs(pe[pos, col].item() - _formula(pos, col, d_model)) < 1e-5, (pos, col)


def test_position_zero_and_bounds():
    pe = sinusoidal_positional_encoding(64, 10)
    assert_close(pe[0], torch.tensor([0.0, 1.0] * 5), **TOL)  # sin 0 = 0, cos 0 = 1
    assert pe.abs().max() <= 1.0
    # each (sin, cos) pair lies on the unit circle
    assert_close(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, torch.ones(64, 5), **TOL)


@pytest.mark.parametrize("k", [1, 5, 17])
def test_shift_is_a_rotation_of_each_pair(k):
    # PE[pos + k] = R(k) PE[pos] pair by pair, with R(k) depending on k only: what lets
    # attention read relative positions with a linear map.
    d_model, max_len = 12, 60
    pe = sinusoidal_positional_encoding(max_len, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = 1 / 10000 ** (2 * i / d_model)
        rot = torch.tensor(
            [[math.cos(w * k), -math.sin(w * k)], [math.sin(w * k), math.cos(w * k)]], dtype=torch.float64
        )
        pair = pe[:, 2 * i : 2 * i + 2]  # (max_len, 2) rows (sin, cos)
        assert_close(pair[k:], pair[:-k] @ rot, **TOL)
    # hence the dot product of two encodings depends only on their distance
    dots = (pe[:-k] * pe[k:]).sum(-1)  # (max_len - k,)
    assert_close(dots, dots[:1].expand_as(dots), **TOL)


def test_dtype_and_device_keywords():
    pe64 = sinusoidal_positional_encoding(20, 8, dtype=torch.float64, device="cpu")
    assert pe64.dtype == torch.float64 and pe64.device.type == "cpu"
    assert_close(sinusoidal_positional_encoding(20, 8), pe64.float(), **TOL)


@pytest.mark.parametrize("max_len,d_model,match", [(0, 8, "max_len .*got 0"), (8, -2, "d_model .*got -2")])
def test_table_errors(max_len, d_model, match):
    with pytest.raises(ValueError, match=match):
        sinusoidal_positional_encoding(max_len, d_model)


def test_sinusoidal_module_adds_the_table():
    module = SinusoidalPositionalEncoding(max_len=30, d_model=8)
    x = torch.randn(3, 11, 8)
    assert_close(module(x), x + sinusoidal_positional_encoding(30, 8)[:11], **TOL)
    assert "pe" not in module.state_dict() and len(list(module.parameters())) == 0
    x64 = x.double()
    assert module(x64).dtype == torch.float64  # the table follows the input's dtype
    module.double()
    assert module.pe.dtype == torch.float64  # and the buffer follows .to()


def test_learned_module_adds_its_rows_and_learns_only_those():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(max_len=10, d_model=6)
    x = torch.randn(2, 4, 6)
    out = module(x)
    assert_close(out, x + module.embedding.weight[:4], **TOL)
    out.sum().backward()
    grad = module.embedding.weight.grad
    assert_close(grad[:4], torch.full((4, 6), 2.0), **TOL)  # each used row is added to B=2 sequences
    assert (grad[4:] == 0).all()


@pytest.mark.parametrize("cls", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_module_errors(cls):
    module = cls(8, 4)
    with pytest.raises(ValueError, match=r"L=9 is longer than max_len=8"):
        module(torch.randn(1, 9, 4))
    with pytest.raises(ValueError, match=r"last dim is 5 but d_model=4"):
        module(torch.randn(1, 3, 5))
    with pytest.raises(ValueError, match=r"3-D .*\(3, 4\)"):
        module(torch.randn(3, 4))
