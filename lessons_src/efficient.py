"""Attention that costs less memory: linear attention and PyTorch's fused kernels.

Taught in the chapter "Efficient attention".

* ``linear_attention``: softmax replaced by a feature map, O(L) memory (Katharopoulos et al. 2020).
* ``fused_attention``: the same maths as ``scaled_dot_product_attention``, dispatched to
  PyTorch's fused kernels (flash / memory-efficient on GPU) and returning no weights.

The chapter's third idea, a sliding-window mask, lives with the other masks in ``masks``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _validate as check
from .masks import causal_mask

__all__ = ["elu_feature_map", "linear_attention", "fused_attention"]


def elu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1, elementwise and positive (Katharopoulos et al. 2020, eq. 7).

    Taught in the chapter "Efficient attention".
    """
    return F.elu(x) + 1.0


def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    feature_map: Callable[[Tensor], Tensor] = elu_feature_map,
    causal: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """Linear attention: ``out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + eps)``.

    Shapes: query ``(..., Lq, d_k)``, key ``(..., Lk, d_k)``, value ``(..., Lk, d_v)`` ->
    ``(..., Lq, d_v)``. Summing over keys *before* meeting the queries never builds the
    ``(Lq, Lk)`` matrix: memory grows as O(L), not O(L²). ``causal=True`` (needs Lq == Lk) sums
    j ≤ i with cumulative sums, which hold an ``(..., L, d_k, d_v)`` tensor; fused kernels
    chunk this instead. Taught in the chapter "Efficient attention".
    """
    check.attention_inputs(query, key, value, "linear_attention")
    if causal and query.size(-2) != key.size(-2):
        raise ValueError(
            f"linear_attention: causal=True needs Lq == Lk, got Lq={query.size(-2)} and Lk={key.size(-2)}"
        )
    phi_q = feature_map(query)  # (..., Lq, d_k)
    phi_k = feature_map(key)  # (..., Lk, d_k)
    if not causal:
        kv = phi_k.transpose(-2, -1) @ value  # (..., d_k, d_v): Σ_j φ(k_j) v_jᵀ
        normaliser = phi_k.sum(dim=-2, keepdim=True)  # (..., 1, d_k): Σ_j φ(k_j)
        numerator = phi_q @ kv  # (..., Lq, d_v)
        denominator = (phi_q * normaliser).sum(dim=-1, keepdim=True)  # (..., Lq, 1)
    else:
        kv = torch.cumsum(phi_k.unsqueeze(-1) * value.unsqueeze(-2), dim=-3)  # (..., L, d_k, d_v)
        normaliser = torch.cumsum(phi_k, dim=-2)  # (..., L, d_k)
        numerator = (phi_q.unsqueeze(-2) @ kv).squeeze(-2)  # (..., L, d_v)
        denominator = (phi_q * normaliser).sum(dim=-1, keepdim=True)  # (..., L, 1)
    return numerator / (denominator + eps)


def fused_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, causal: bool = False
) -> Tensor:
    """``scaled_dot_product_attention``'s output through PyTorch's fused kernels; no weights.

    Same shapes, mask convention (bool, True = may attend) and fully-masked rows (zero
    output) as ``lessons_src.scaled_dot_product_attention``. On a GPU, PyTorch picks flash or
    memory-efficient attention, which never store the ``(Lq, Lk)`` weights; flash needs
    ``mask=None``, so pass ``causal=True`` rather than a causal mask. ``causal`` is
    bottom-right aligned (the last query sees every key), unlike PyTorch's ``is_causal``
    when Lq != Lk. Taught in the chapter "Efficient attention".
    """
    scores_shape = check.attention_inputs(query, key, value, "fused_attention")
    if mask is not None:
        check.mask(mask, scores_shape, query.device, "fused_attention")
    Lq, Lk = query.size(-2), key.size(-2)
    if causal and (mask is not None or Lq != Lk):
        # PyTorch's is_causal=True is top-left aligned; ours is bottom-right.
        causal_part = causal_mask(Lq, Lk, device=query.device)  # (Lq, Lk)
        mask = causal_part if mask is None else mask & causal_part
        causal = False
    batch = scores_shape[:-2]
    # Broadcast leading dims here: the GPU kernels want q, k, v with equal batch dims.
    query = query.expand(*batch, *query.shape[-2:])  # (..., Lq, d_k)
    key = key.expand(*batch, *key.shape[-2:])  # (..., Lk, d_k)
    value = value.expand(*batch, *value.shape[-2:])  # (..., Lk, d_v)
    if mask is None:
        return F.scaled_dot_product_attention(query, key, value, is_causal=causal)
    # A query row with nothing to attend to: unmask it for the kernel (no NaN in any kernel,
    # forward or backward), then zero its output, as our explicit version does.
    has_key = mask.any(dim=-1, keepdim=True)  # (..., Lq, 1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask | ~has_key)  # (..., Lq, d_v)
    return out.masked_fill(~has_key, 0.0)

