"""Positional information: fixed sinusoids ("Attention Is All You Need") or a learned table.

Attention by itself is permutation-equivariant; adding a position-dependent vector to each
token's embedding is what lets it tell "dog bites man" from "man bites dog".
Taught in the chapter "The transformer encoder block".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from . import _validate as check

__all__ = [
    "sinusoidal_positional_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
]


def _check_input(x: Tensor, max_len: int, d_model: int, where: str) -> None:
    """``x`` is ``(B, L, d_model)`` with ``L <= max_len``."""
    check.sequence(x, "x", d_model, where)
    if x.size(1) > max_len:
        raise ValueError(
            f"{where}: sequence length L={x.size(1)} is longer than max_len={max_len}; "
            "build the module with a larger max_len"
        )


def sinusoidal_positional_encoding(
    max_len: int,
    d_model: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """The sinusoidal position table ``(max_len, d_model)`` of "Attention Is All You Need".

    PE[pos, 2i] = sin(pos / 10000^(2i/d_model)) and PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)).
    Pair i (columns 2i, 2i+1) is a rotation at frequency 1 / 10000^(2i/d_model), so
    PE[pos + k] is a fixed linear function of PE[pos]. An odd ``d_model`` is accepted: the
    last column is the sine of one more frequency, whose cosine partner is dropped.
    ``dtype`` defaults to ``torch.get_default_dtype()``. Taught in the chapter "The transformer encoder block".
    """
    check.positive_int(max_len, "max_len", "sinusoidal_positional_encoding")
    check.positive_int(d_model, "d_model", "sinusoidal_positional_encoding")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    # Built in float64 on the CPU, then cast: sin(pos * freq) for pos in the thousands loses
    # ~1e-4 in float32, and not every device has float64.
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),)
    inv_freq = torch.exp(-math.log(10000.0) * two_i / d_model)  # (ceil(D/2),) = 1 / 10000^(2i/D)
    angle = position * inv_freq  # (max_len, ceil(D/2))
    pe = torch.empty(max_len, d_model, dtype=torch.float64)  # (max_len, D)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(device=device, dtype=dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table: ``x (B, L, D) -> x + PE[:L]``, ``L <= max_len``.

    The table is a non-persistent buffer: it follows ``.to(device)`` but is not saved in
    the state dict (it is recomputed from ``max_len, d_model``). Taught in the chapter "The transformer encoder block".
    """

    pe: Tensor

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.d_model = d_model
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, L, D) -> (B, L, D)``: add the encodings of positions ``0..L-1``."""
        _check_input(x, self.max_len, self.d_model, "SinusoidalPositionalEncoding")
        pe = self.pe[: x.size(1)].to(dtype=x.dtype)  # (L, D), cast so x keeps its dtype
        return x + pe  # (B, L, D)


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned vector per position (as in BERT and GPT-2): ``x (B, L, D) -> x + E[:L]``.

    ``embedding`` is an ``nn.Embedding(max_len, d_model)``; positions past ``max_len`` have no
    vector, so a longer input raises ValueError. Taught in the chapter "The transformer encoder block".
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        check.positive_int(max_len, "max_len", "LearnedPositionalEmbedding")
        check.positive_int(d_model, "d_model", "LearnedPositionalEmbedding")
        self.max_len = max_len
        self.d_model = d_model
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, L, D) -> (B, L, D)``: add the learned vectors of positions ``0..L-1``."""
        _check_input(x, self.max_len, self.d_model, "LearnedPositionalEmbedding")
        return x + self.embedding.weight[: x.size(1)]  # (B, L, D) + (L, D)
