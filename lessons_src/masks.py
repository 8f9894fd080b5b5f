"""Boolean attention masks. Convention: **True means "may attend"**, as in
``torch.nn.functional.scaled_dot_product_attention``'s ``attn_mask``.

Taught in the chapter "Masking"; ``sliding_window_mask`` in the chapter "Efficient attention".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["causal_mask", "padding_mask", "sliding_window_mask", "check_mask", "broadcast_shape"]


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape that ``shapes`` broadcast to, or None where they do not.

    Same rule as ``torch.broadcast_shapes``, which costs ~25 us a call: too much on the hot
    path of a small model's training step (measured in benchmarks/bench_training.py).
    """
    ndim = max(len(s) for s in shapes)
    result = []
    for axis in range(-ndim, 0):
        size = 1
        for shape in shapes:
            if len(shape) >= -axis:
                n = shape[axis]
                if n != 1:
                    if size not in (1, n):
                        return None
                    size = n
        result.append(size)
    return tuple(result)


def _check_positive_int(value: object, name: str, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")


def causal_mask(seq_len: int, device: torch.device | str | None = None) -> Tensor:
    """Causal mask: bool ``(L, L)``, True on and below the diagonal (position t sees 0..t).

    Taught in the chapter "Masking".
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"causal_mask: seq_len must be a positive int, got {seq_len!r}")
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()  # (L, L)


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


def check_mask(mask: Tensor, scores_shape: torch.Size | tuple[int, ...], where: str) -> None:
    """Raise a ValueError unless ``mask`` is a bool tensor that broadcasts to ``scores_shape``."""
    if not isinstance(mask, Tensor):
        raise ValueError(f"{where}: mask must be a torch.Tensor of dtype bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{where}: mask must be boolean (True = may attend), got dtype {mask.dtype}. "
            "Convert a 0/1 mask with `mask.bool()`; for an additive float mask "
            "(0 / -inf) use `mask == 0`."
        )
    if tuple(mask.shape) != tuple(scores_shape) and broadcast_shape(mask.shape, scores_shape) != tuple(scores_shape):
        raise ValueError(
            f"{where}: mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
            f"shape {tuple(scores_shape)} = (..., Lq, Lk)"
        )


def sliding_window_mask(
    seq_len: int, window: int, causal: bool = True, device: torch.device | str | None = None
) -> Tensor:
    """Banded mask: bool ``(L, L)``, True where query i may attend to key j.

    Causal (default): ``i - window < j <= i``, so each query sees ``window`` keys ending at
    itself (fewer at the start). Not causal: ``|i - j| < window``, so up to ``2*window - 1``
    keys centred on i. ``window >= seq_len`` (causal) gives ``causal_mask(seq_len)``. Combine
    with other masks by ``&``. Taught in the chapter "Efficient attention".
    """
    _check_positive_int(seq_len, "seq_len", "sliding_window_mask")
    _check_positive_int(window, "window", "sliding_window_mask")
    positions = torch.arange(seq_len, device=device)  # (L,)
    offset = positions[:, None] - positions[None, :]  # (L, L): i - j
    if causal:
        return (offset >= 0) & (offset < window)  # (L, L)
    return offset.abs() < window  # (L, L)
