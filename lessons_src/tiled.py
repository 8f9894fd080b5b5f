"""Attention computed tile by tile with the online softmax: the algorithm inside FlashAttention,
written out in PyTorch (no fused kernel, no speed-up: the point is the arithmetic).

The explicit formula builds the whole ``(Lq, Lk)`` matrix of scores. Tiled attention never does:
it takes a block of queries and walks over the keys one block at a time, keeping for each query
only three running quantities, the largest score seen so far ``m``, the sum of exponentials
``l = Σ exp(s - m)`` and the unnormalised output ``o = Σ exp(s - m) v``. When a new block raises
the maximum, the old sum and output are rescaled by ``exp(m_old - m_new)``; at the end ``o / l``
is exactly softmax(scores) @ V. Memory for the scores grows like ``block_size²`` per step instead
of ``Lq · Lk``.

Taught in the chapter "Tiled attention and the online softmax".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _validate as check

__all__ = ["online_softmax_update", "online_softmax_steps", "tiled_attention"]


def online_softmax_update(
    running_max: Tensor, running_sum: Tensor, output: Tensor, scores: Tensor, value: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Fold one block of keys into the running softmax of a block of queries.

    Shapes: ``running_max`` and ``running_sum`` ``(..., Lq)``, ``output`` ``(..., Lq, d_v)`` (the
    unnormalised ``Σ exp(s - m) v``), ``scores`` ``(..., Lq, Bc)`` for the block's ``Bc`` keys,
    already scaled, with ``-inf`` where a query may not attend, ``value`` ``(..., Bc, d_v)`` (the
    same leading axes as ``scores``, or none).
    Returns the new ``(running_max, running_sum, output)``. Start from ``-inf``, ``0`` and ``0``;
    after the last block, ``output / running_sum`` is softmax(all scores) @ V. A query that has
    seen only ``-inf`` keeps a zero sum and a zero output. Taught in the chapter "Tiled attention
    and the online softmax".
    """
    new_max = torch.maximum(running_max, scores.amax(dim=-1))  # (..., Lq)
    # Subtract 0 instead of -inf where nothing is visible yet: exp(-inf - 0) = 0, no NaN.
    shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    rescale = torch.exp(running_max - shift)  # (..., Lq): the old terms, re-based on the new max
    p = torch.exp(scores - shift.unsqueeze(-1))  # (..., Lq, Bc)
    new_sum = running_sum * rescale + p.sum(dim=-1)
    new_output = output * rescale.unsqueeze(-1) + p @ value  # (..., Lq, d_v)
    return new_max, new_sum, new_output


def online_softmax_steps(scores: Tensor, value: Tensor, block_size: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The running state after each block of keys, for watching the online softmax converge.

    ``scores`` ``(..., Lq, Lk)`` (scaled, ``-inf`` where masked), ``value`` ``(..., Lk, d_v)``.
    Returns one ``(running_max, running_sum, output_so_far)`` per block of ``block_size`` keys,
    where ``output_so_far = output / running_sum`` is the attention output over the keys seen so
    far (zero for a row that has seen none); the last one is softmax(scores) @ V. Taught in the
    chapter "Tiled attention and the online softmax".
    """
    where = "online_softmax_steps"
    check.positive_int(block_size, "block_size", where)
    if not isinstance(scores, Tensor) or not isinstance(value, Tensor) or scores.dim() < 2 or value.dim() < 2:
        raise ValueError(f"{where}: scores (..., Lq, Lk) and value (..., Lk, d_v) must be tensors of at least 2 dims")
    if scores.size(-1) != value.size(-2):
        raise ValueError(f"{where}: scores have {scores.size(-1)} keys (last dim of {tuple(scores.shape)}) but value "
                         f"has {value.size(-2)} rows ({tuple(value.shape)})")
    running_max = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype, device=scores.device)
    running_sum = torch.zeros_like(running_max)
    output = torch.zeros(*scores.shape[:-1], value.size(-1), dtype=value.dtype, device=value.device)
    steps = []
    for k0 in range(0, scores.size(-1), block_size):
        running_max, running_sum, output = online_softmax_update(
            running_max, running_sum, output, scores[..., k0:k0 + block_size], value[..., k0:k0 + block_size, :])
        normalised = output / torch.where(running_sum > 0, running_sum, 1.0).unsqueeze(-1)
        steps.append((running_max, running_sum, normalised))
    return steps


def tiled_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *, block_size: int = 64
) -> Tensor:
    """softmax(Q Kᵀ / √d_k) V computed block by block with the online softmax; returns the output.

    Shapes as :func:`lessons_src.scaled_dot_product_attention`: query ``(..., Lq, d_k)``, key
    ``(..., Lk, d_k)``, value ``(..., Lk, d_v)`` -> ``(..., Lq, d_v)``; ``mask`` is boolean, True =
    may attend, and broadcasts to ``(..., Lq, Lk)``. Queries and keys are taken ``block_size`` at a
    time (the lengths need not be multiples of it); a block of keys that the mask hides entirely
    from a block of queries is skipped, as FlashAttention skips the tiles above a causal diagonal.
    A query that may attend to nothing gets a zero output (not NaN). Taught in the chapter
    "Tiled attention and the online softmax".
    """
    where = "tiled_attention"
    scores_shape = check.attention_inputs(query, key, value, where)
    check.positive_int(block_size, "block_size", where)
    if mask is not None:
        check.mask(mask, scores_shape, query.device, where)
        mask = mask.expand(scores_shape)  # a view: size-1 dims become slicable like the scores

    len_q, len_k = query.size(-2), key.size(-2)
    scale = 1.0 / math.sqrt(query.size(-1))
    blocks = []
    for q0 in range(0, len_q, block_size):
        q = query[..., q0:q0 + block_size, :] * scale  # (..., Br, d_k)
        batch_and_rows = q.shape[:-1]  # (..., Br)
        running_max = torch.full(batch_and_rows, -math.inf, dtype=q.dtype, device=q.device)
        running_sum = torch.zeros(batch_and_rows, dtype=q.dtype, device=q.device)
        output = torch.zeros(*batch_and_rows, value.size(-1), dtype=value.dtype, device=value.device)
        for k0 in range(0, len_k, block_size):
            scores = q @ key[..., k0:k0 + block_size, :].transpose(-2, -1)  # (..., Br, Bc)
            if mask is not None:
                visible = mask[..., q0:q0 + block_size, k0:k0 + block_size]
                if not visible.any():
                    continue  # nothing in this tile can be attended to
                scores = scores.masked_fill(~visible, -math.inf)
            running_max, running_sum, output = online_softmax_update(
                running_max, running_sum, output, scores, value[..., k0:k0 + block_size, :])
        # A row that saw no visible key has sum 0 and output 0: divide by 1 there, not by 0.
        blocks.append(output / torch.where(running_sum > 0, running_sum, 1.0).unsqueeze(-1))
    return torch.cat(blocks, dim=-2)
