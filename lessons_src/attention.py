"""Scaled dot-product attention, written out.

Taught in the chapter "Attention from scratch".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _validate as check

__all__ = ["scaled_dot_product_attention"]


def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, check_inputs: bool = True
) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ / √d_k) V, returning ``(output, weights)``.

    Shapes: query ``(..., Lq, d_k)``, key ``(..., Lk, d_k)``, value ``(..., Lk, d_v)`` ->
    output ``(..., Lq, d_v)``, weights ``(..., Lq, Lk)``. ``mask`` is boolean, True = may attend,
    and broadcasts to the scores ``(..., Lq, Lk)`` as PyTorch's ``attn_mask`` does (dims line up
    from the right): ``(Lq, Lk)``, ``(B, Lq, Lk)`` for inputs ``(B, L, d)``, ``(B, 1, Lq, Lk)``
    for inputs ``(B, H, L, d)``. A query row that may attend to nothing gets all-zero weights and
    a zero output (not NaN). ``check_inputs=False`` skips the checks, for callers that have made
    them. Taught in the chapter "Attention from scratch".
    """
    if check_inputs:
        scores_shape = check.attention_inputs(query, key, value, "scaled_dot_product_attention")
        if mask is not None:
            check.mask(mask, scores_shape, query.device, "scaled_dot_product_attention")

    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., Lq, Lk)
    if mask is None:
        weights = torch.softmax(scores, dim=-1)  # (..., Lq, Lk)
    else:
        # The dtype's most negative finite value, not -inf: exp() of it is exactly 0 next to any
        # real score, and a row with nothing to attend to stays finite (no NaN in the forward or
        # backward pass); that row is then zeroed explicitly.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)  # (..., Lq, Lk)
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    output = weights @ value  # (..., Lq, d_v)
    return output, weights
