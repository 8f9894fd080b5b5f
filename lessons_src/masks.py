"""Boolean attention masks. Convention: **True means "may attend"**, as in
``torch.nn.functional.scaled_dot_product_attention``'s ``attn_mask``.

Taught in the chapter "Masking"; ``sliding_window_mask`` in the chapter "Efficient attention".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import _validate as check

__all__ = ["causal_mask", "padding_mask", "sliding_window_mask"]


def causal_mask(len_q: int, len_k: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """Causal mask: bool ``(Lq, Lk)``, True where query i may attend to key j, i.e. ``j <= i + Lk - Lq``.

    ``causal_mask(L)`` is the usual ``(L, L)`` lower triangle: position t sees 0..t. With
    ``len_k``, the queries are the *last* Lq of Lk positions (bottom-right aligned, as when
    decoding with a KV cache: the last query sees every key), like PyTorch's
    ``torch.nn.attention.bias.causal_lower_right``; ``F.scaled_dot_product_attention``'s
    ``is_causal=True`` aligns top-left instead (query i sees keys 0..i), which differs when
    Lq != Lk. With Lq > Lk the first Lq - Lk queries see nothing. Taught in the chapter "Masking".
    """
    check.positive_int(len_q, "len_q", "causal_mask")
    if len_k is None:
        len_k = len_q
    check.positive_int(len_k, "len_k", "causal_mask")
    return torch.ones(len_q, len_k, dtype=torch.bool, device=device).tril(diagonal=len_k - len_q)  # (Lq, Lk)


def padding_mask(lengths: Sequence[int] | Tensor, max_len: int | None = None) -> Tensor:
    """Padding mask: bool ``(B, L)``, True at the first ``lengths[b]`` (real) tokens of row b.

    ``L`` is ``max_len``, or the longest length when ``max_len`` is None. To mask *keys*
    in attention scores ``(B, Lq, Lk)``, use ``padding_mask(lengths)[:, None, :]``.
    Taught in the chapter "Masking".
    """
    if isinstance(lengths, Tensor):
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.dim() != 1:
            raise ValueError(
                "padding_mask: lengths must be a 1-D integer tensor, got "
                f"dtype {lengths.dtype} and shape {tuple(lengths.shape)}"
            )
        lengths_t = lengths
    else:
        values = list(lengths)
        if any(isinstance(n, bool) or not isinstance(n, int) for n in values):
            raise ValueError(f"padding_mask: lengths must be integers, got {values!r}")
        lengths_t = torch.tensor(values, dtype=torch.long)
    if lengths_t.numel() == 0:
        raise ValueError("padding_mask: lengths is empty; give one length per sequence")
    if (lengths_t < 0).any():
        raise ValueError(f"padding_mask: lengths must be >= 0, got {lengths_t.tolist()}")
    longest = int(lengths_t.max())
    if max_len is None:
        max_len = longest
    elif longest > max_len:
        too_long = [int(n) for n in lengths_t.tolist() if n > max_len]
        raise ValueError(
            f"padding_mask: lengths {too_long} are longer than max_len={max_len}"
        )
    positions = torch.arange(max_len, device=lengths_t.device)  # (L,)
    return positions[None, :] < lengths_t[:, None]  # (B, L)


def sliding_window_mask(
    seq_len: int, window: int, causal: bool = True, *, device: torch.device | str | None = None
) -> Tensor:
    """Banded mask: bool ``(L, L)``, True where query i may attend to key j.

    Causal (default): ``i - window < j <= i``, so each query sees ``window`` keys ending at
    itself (fewer at the start). Not causal: ``|i - j| < window``, so up to ``2*window - 1``
    keys centred on i. ``window >= seq_len`` (causal) gives ``causal_mask(seq_len)``. Combine
    with other masks by ``&``. Taught in the chapter "Efficient attention".
    """
    check.positive_int(seq_len, "seq_len", "sliding_window_mask")
    check.positive_int(window, "window", "sliding_window_mask")
    positions = torch.arange(seq_len, device=device)  # (L,)
    offset = positions[:, None] - positions[None, :]  # (L, L): i - j
    if causal:
        return causal_mask(seq_len, device=device) & (offset < window)  # (L, L): 0 <= i - j < window
    return offset.abs() < window  # (L, L)
