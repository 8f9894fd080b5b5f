"""Scaled dot-product attention, written out.

Taught in the chapter "Attention from scratch".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .masks import broadcast_shape, check_mask

__all__ = ["scaled_dot_product_attention"]


def _check_inputs(query: Tensor, key: Tensor, value: Tensor, where: str) -> torch.Size:
    """Validate q, k, v at the public boundary; return the scores' shape ``(..., Lq, Lk)``."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise ValueError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(
                f"{where}: {name} must have at least 2 dims (..., L, d), got shape {tuple(t.shape)}"
            )
        if not t.dtype.is_floating_point:
            raise ValueError(f"{where}: {name} must be floating point, got dtype {t.dtype}")
    if not (query.dtype == key.dtype == value.dtype):
        raise ValueError(
            f"{where}: query, key and value must share a dtype, got "
            f"{query.dtype}, {key.dtype} and {value.dtype}"
        )
    if not (query.device == key.device == value.device):
        raise ValueError(
            f"{where}: query, key and value must be on one device, got "
            f"{query.device}, {key.device} and {value.device}"
        )
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"{where}: query's last dim (d_k) is {query.size(-1)} but key's is {key.size(-1)}; "
            f"they must match (query {tuple(query.shape)}, key {tuple(key.shape)})"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            f"{where}: key has Lk={key.size(-2)} positions but value has {value.size(-2)} "
            f"(key {tuple(key.shape)}, value {tuple(value.shape)})"
        )
    batch = broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if batch is None:
        raise ValueError(
            f"{where}: the leading (batch/head) dims of query {tuple(query.shape)}, "
            f"key {tuple(key.shape)} and value {tuple(value.shape)} do not broadcast"
        )
    return torch.Size((*batch, query.size(-2), key.size(-2)))


def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ / √d_k) V, returning ``(output, weights)``.

    Shapes: query ``(..., Lq, d_k)``, key ``(..., Lk, d_k)``, value ``(..., Lk, d_v)`` ->
    output ``(..., Lq, d_v)``, weights ``(..., Lq, Lk)``. ``mask`` is boolean, broadcastable
    to ``(..., Lq, Lk)``, True = may attend. A query row that may attend to nothing gets
    all-zero weights and a zero output (not NaN). Taught in the chapter "Attention from scratch".
    """
    scores_shape = _check_inputs(query, key, value, "scaled_dot_product_attention")
    if mask is not None:
        check_mask(mask, scores_shape, "scaled_dot_product_attention")
        if mask.device != query.device:
            raise ValueError(
                f"scaled_dot_product_attention: mask is on {mask.device} but query is on {query.device}"
            )

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
