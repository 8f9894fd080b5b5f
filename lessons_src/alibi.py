"""ALiBi, attention with linear biases (Press, Smith and Lewis, 2022): no position vectors at all;
each head adds ``-β_h · distance`` to its scores, with a fixed slope ``β_h`` per head.

Taught in the chapter "ALiBi and length extrapolation".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _validate as check

__all__ = ["alibi_slopes", "alibi_bias"]


def alibi_slopes(num_heads: int) -> Tensor:
    """The paper's slope of each head, float32 ``(num_heads,)``.

    For ``H`` a power of 2: the geometric sequence ``2^(-8/H), 2^(-16/H), ..., 2^(-8)``
    (for 8 heads: 1/2, 1/4, ..., 1/256). Otherwise: the slopes of the largest power of 2 below
    ``H``, then every other slope of twice that power, as the paper's code does. Taught in the
    chapter "ALiBi and length extrapolation".
    """
    check.positive_int(num_heads, "num_heads", "alibi_slopes")

    def power_of_2(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if num_heads & (num_heads - 1) == 0:
        slopes = power_of_2(num_heads)
    else:
        below = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_2(below) + power_of_2(2 * below)[0::2][: num_heads - below]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(num_heads: int, len_q: int, len_k: int | None = None, *,
               device: torch.device | str | None = None) -> Tensor:
    """The biases ALiBi adds to the scores, float32 ``(num_heads, len_q, len_k)``: ``-β_h · (p_i - j)``.

    ``p_i`` is the position of query ``i`` and ``j`` the position of key ``j``. As with
    :func:`lessons_src.causal_mask`, the queries are the *last* ``len_q`` of the ``len_k``
    positions (a decoding step with a KV cache: ``len_q = 1``), so ``p_i = len_k - len_q + i``
    (``p_i = i`` when ``len_q = len_k``). Use it with a causal mask: the entries for keys after their
    query (``j > p_i``) are positive and must be masked. Add it to the scaled scores, or pass it (plus the
    mask as ``-inf``) as ``attn_mask`` to ``F.scaled_dot_product_attention``. Taught in the chapter
    "ALiBi and length extrapolation".
    """
    where = "alibi_bias"
    check.positive_int(num_heads, "num_heads", where)
    check.positive_int(len_q, "len_q", where)
    len_k = len_q if len_k is None else len_k
    check.positive_int(len_k, "len_k", where)
    if len_q > len_k:
        raise ValueError(f"{where}: len_q={len_q} is larger than len_k={len_k}; the queries are the last len_q "
                         "of the len_k positions")
    query_pos = torch.arange(len_k - len_q, len_k, device=device)  # (Lq,)
    key_pos = torch.arange(len_k, device=device)  # (Lk,)
    distance = (query_pos[:, None] - key_pos[None, :]).float()  # (Lq, Lk): p_i - j
    return -alibi_slopes(num_heads).to(device)[:, None, None] * distance  # (H, Lq, Lk)
