"""The input checks of lessons_src, in one place and one wording.

Every public function, and every module's ``forward``, checks its inputs with these functions
once, at its boundary, and raises a ValueError that names the function (``where``), the argument
and the shapes or values at fault, instead of a traceback from inside torch. A block that has
checked its inputs calls its sublayers with ``check_inputs=False``, so nothing is checked twice
and the maths reads as plainly as nanoGPT's. Checks that belong to one function alone (a table's
range, a cache's shape) stay in that function, next to the maths they protect.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "broadcast_shape",
    "positive_int",
    "divisible",
    "attention_inputs",
    "sequence",
    "same_batch",
    "same_length",
    "mask",
    "head_mask_shape",
]


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
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


def positive_int(value: object, name: str, where: str) -> None:
    """``value`` is an int >= 1 (not a bool, not a float)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")


def divisible(numerator: int, numerator_name: str, denominator: int, denominator_name: str, where: str) -> None:
    """``numerator`` is a multiple of ``denominator`` (e.g. d_model of num_heads)."""
    if numerator % denominator != 0:
        raise ValueError(
            f"{where}: {numerator_name}={numerator} is not divisible by {denominator_name}={denominator}; "
            f"pick a {denominator_name} that divides {numerator}"
        )


def _tensor(t: object, name: str, where: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise ValueError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def attention_inputs(query: Tensor, key: Tensor, value: Tensor, where: str) -> tuple[int, ...]:
    """query ``(..., Lq, d_k)``, key ``(..., Lk, d_k)``, value ``(..., Lk, d_v)``; return the scores' shape.

    The leading dims broadcast (as in ``torch.matmul``); the scores' shape is ``(..., Lq, Lk)``.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        _tensor(t, name, where)
        if t.dim() < 2:
            raise ValueError(f"{where}: {name} must have at least 2 dims (..., L, d), got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"{where}: {name} must be floating point, got dtype {t.dtype}")
    if not (query.dtype == key.dtype == value.dtype):
        raise ValueError(
            f"{where}: query, key and value must share a dtype, got {query.dtype}, {key.dtype} and {value.dtype}"
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
    same_length(key, value, where)
    batch_shape = broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if batch_shape is None:
        raise ValueError(
            f"{where}: the leading (batch/head) dims of query {tuple(query.shape)}, "
            f"key {tuple(key.shape)} and value {tuple(value.shape)} do not broadcast"
        )
    return (*batch_shape, query.size(-2), key.size(-2))


def sequence(x: Tensor, name: str, d_model: int, where: str, weight: Tensor | None = None) -> None:
    """``x`` is a float tensor ``(B, L, d_model)``, of the dtype and on the device of ``weight`` if given."""
    _tensor(x, name, where)
    if x.dim() != 3:
        raise ValueError(f"{where}: {name} must be a 3-D tensor (B, L, d_model), got shape {tuple(x.shape)}")
    if x.size(-1) != d_model:
        raise ValueError(
            f"{where}: {name}'s last dim is {x.size(-1)} but d_model={d_model} ({name} shape {tuple(x.shape)})"
        )
    if not x.dtype.is_floating_point:
        raise ValueError(f"{where}: {name} must be floating point, got dtype {x.dtype}")
    if weight is not None and (x.dtype != weight.dtype or x.device != weight.device):
        raise ValueError(
            f"{where}: {name} is {x.dtype} on {x.device} but the weights are "
            f"{weight.dtype} on {weight.device}; move one with .to()"
        )


def tokens(t: object, where: str) -> None:
    """``t`` is an int64 tensor of token ids ``(B, L)``."""
    if not isinstance(t, Tensor) or t.dim() != 2 or t.dtype != torch.long:
        raise ValueError(f"{where}: tokens must be an int64 tensor (B, L), got "
                         f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")


def same_batch(where: str, **tensors: Tensor) -> None:
    """Every tensor has the same batch size B (dim 0)."""
    if len({t.size(0) for t in tensors.values()}) > 1:
        sizes = ", ".join(f"{name} B={t.size(0)}" for name, t in tensors.items())
        raise ValueError(f"{where}: batch sizes differ: {sizes}")


def same_length(key: Tensor, value: Tensor, where: str) -> None:
    """key and value hold the same number of positions Lk (dim -2)."""
    if key.size(-2) != value.size(-2):
        raise ValueError(
            f"{where}: key has Lk={key.size(-2)} positions but value has {value.size(-2)} "
            f"(key {tuple(key.shape)}, value {tuple(value.shape)})"
        )


def head_mask_shape(mask_shape: Sequence[int]) -> tuple[int, ...]:
    """How a module reads a mask: a 3-D mask is ``(B, Lq, Lk)``, one per sequence, so ``(B, 1, Lq, Lk)``.

    Other masks broadcast against ``(B, H, Lq, Lk)`` as they are: ``(Lq, Lk)`` for every sequence
    and head, ``(B, 1, 1, Lk)`` for padding, ``(B, H, Lq, Lk)`` per head.
    """
    mask_shape = tuple(mask_shape)
    return (mask_shape[0], 1, *mask_shape[1:]) if len(mask_shape) == 3 else mask_shape


def mask(
    m: object,
    scores_shape: Sequence[int],
    device: torch.device,
    where: str,
    name: str = "mask",
    per_sequence: bool = False,
) -> None:
    """``m`` is a bool tensor on ``device`` that broadcasts to the scores' shape.

    With ``per_sequence=True`` (the modules, whose scores are ``(B, H, Lq, Lk)``), a 3-D mask is
    read as ``(B, Lq, Lk)``: see :func:`head_mask_shape`. A mask may not enlarge the scores.
    """
    m = _tensor(m, name, where)
    if m.dtype != torch.bool:
        raise ValueError(
            f"{where}: {name} must be boolean (True = may attend), got dtype {m.dtype}. "
            "Convert a 0/1 mask with `mask.bool()`; for an additive float mask (0 / -inf) use `mask == 0`."
        )
    scores_shape = tuple(scores_shape)
    shape = head_mask_shape(m.shape) if per_sequence else tuple(m.shape)
    if shape != scores_shape and broadcast_shape(shape, scores_shape) != scores_shape:
        letters = "(B, H, Lq, Lk)" if per_sequence else "(..., Lq, Lk)"
        read_as = f", read as (B, 1, Lq, Lk) = {shape}," if shape != tuple(m.shape) else ""
        raise ValueError(
            f"{where}: {name} of shape {tuple(m.shape)}{read_as} does not broadcast to the scores' "
            f"shape {scores_shape} = {letters}"
        )
    if m.device != device:
        raise ValueError(f"{where}: {name} is on {m.device} but the inputs are on {device}")
