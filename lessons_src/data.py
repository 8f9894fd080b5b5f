"""Toy tasks that a single attention layer can learn.

Taught in the chapter "Training attention".

Every task returns ``(query, key, value, target)``. The inputs are random vectors x ``(B, L, D)``;
key = value = x, and the query at position i is the input vector that the target at position i
copies. To fit the target, attention must learn to match each query with the identical key, so
the learned weights show *which position* each output came from: the anti-diagonal for
reversal, a shifted diagonal for the shift task.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as check

__all__ = ["reversal_batch", "shift_batch"]


def _random_inputs(
    batch_size: int,
    seq_len: int,
    d_model: int,
    generator: torch.Generator | None,
    device: torch.device | str | None,
    where: str,
) -> Tensor:
    for name, n in (("batch_size", batch_size), ("seq_len", seq_len), ("d_model", d_model)):
        check.positive_int(n, name, where)
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    device = torch.device(device)
    if generator is not None and generator.device.type != device.type:
        raise ValueError(
            f"{where}: the generator lives on {generator.device} but device is {device}; "
            f"make it with torch.Generator(device={str(device)!r})"
        )
    return torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)  # (B, L, D)


def reversal_batch(
    batch_size: int,
    seq_len: int,
    d_model: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Sequence reversal: ``(query, key, value, target)``, each ``(B, L, D)``.

    x is standard normal; key = value = x; query = target = x reversed along L, so
    ``target[:, i] = x[:, L-1-i]`` and the ideal weights are the anti-diagonal. ``device``
    defaults to the generator's device (CPU without one). Taught in the chapter "Training attention".
    """
    x = _random_inputs(batch_size, seq_len, d_model, generator, device, "reversal_batch")  # (B, L, D)
    reversed_x = x.flip(1)  # (B, L, D)
    return reversed_x, x, x, reversed_x


def shift_batch(
    batch_size: int,
    seq_len: int,
    d_model: int,
    shift: int = 1,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Cyclic shift: ``(query, key, value, target)``, each ``(B, L, D)``; ``shift=0`` copies.

    key = value = x; query = target = x rolled by ``shift`` along L, so
    ``target[:, i] = x[:, (i - shift) mod L]``. The ideal weights sit on the cyclic diagonal
    ``j = (i - shift) mod L``: measure them with ``diagonal_mass(weights, -shift)``.
    Taught in the chapter "Training attention" (and its exercise).
    """
    if isinstance(shift, bool) or not isinstance(shift, int):
        raise ValueError(f"shift_batch: shift must be an int, got {shift!r}")
    x = _random_inputs(batch_size, seq_len, d_model, generator, device, "shift_batch")  # (B, L, D)
    shifted_x = x.roll(shift, dims=1)  # (B, L, D): shifted_x[:, i] = x[:, (i - shift) % L]
    return shifted_x, x, x, shifted_x
