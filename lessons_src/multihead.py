"""Multi-head attention: H scaled dot-product attentions side by side, on learned projections.

Taught in the chapter "Multi-head attention". Masks follow the course convention of
:mod:`lessons_src.masks`: boolean, **True = may attend**. PyTorch's ``nn.MultiheadAttention``
uses the opposite convention for boolean masks (True = ignore); the two converters below
translate, and :meth:`MultiHeadAttention.from_torch` copies PyTorch's weights.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .masks import check_mask

__all__ = ["MultiHeadAttention", "key_padding_mask_to_mask", "attn_mask_to_mask"]


def _check_mask(mask: Tensor, scores_shape: tuple[int, int, int, int], where: str) -> None:
    """Validate a course mask against the per-head scores' shape ``(B, H, Lq, Lk)``."""
    if isinstance(mask, Tensor) and mask.dim() == 3:
        # (B, Lq, Lk) would line up with (H, Lq, Lk) under broadcasting and, when B == H,
        # silently mask the wrong rows; make the learner say where the head axis goes.
        raise ValueError(
            f"{where}: a 3-D mask of shape {tuple(mask.shape)} is ambiguous; use a mask of shape "
            f"(Lq, Lk), (B, 1, 1, Lk) or (B, 1, Lq, Lk) (e.g. mask[:, None] for a (B, Lq, Lk) mask), "
            f"broadcastable to (B, num_heads, Lq, Lk) = {scores_shape}"
        )
    check_mask(mask, scores_shape, where)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch first: ``(B, Lq, D), (B, Lk, D), (B, Lk, D) -> (B, Lq, D)``.

    Each of the ``num_heads`` heads attends in its own ``head_dim = d_model // num_heads``
    subspace; their outputs are concatenated and mixed by ``w_o``. Taught in the chapter
    "Multi-head attention".
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        for name, n in (("d_model", d_model), ("num_heads", num_heads)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"MultiHeadAttention: {name} must be a positive int, got {n!r}")
        if d_model % num_heads != 0:
            raise ValueError(
                f"MultiHeadAttention: d_model={d_model} is not divisible by num_heads={num_heads}; "
                f"each head gets d_model / num_heads dims, so pick num_heads dividing {d_model}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1), got {dropout!r}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        where = "MultiHeadAttention"
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise ValueError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dim() != 3:
                raise ValueError(
                    f"{where}: {name} must be 3-D (B, L, d_model), got shape {tuple(t.shape)}"
                )
            if t.size(-1) != self.d_model:
                raise ValueError(
                    f"{where}: {name}'s last dim is {t.size(-1)} but d_model={self.d_model} "
                    f"({name} shape {tuple(t.shape)})"
                )
            if not t.dtype.is_floating_point:
                raise ValueError(f"{where}: {name} must be floating point, got dtype {t.dtype}")
        weight = self.w_q.weight
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dtype != weight.dtype or t.device != weight.device:
                raise ValueError(
                    f"{where}: {name} is {t.dtype} on {t.device} but the weights are "
                    f"{weight.dtype} on {weight.device}; move one with .to()"
                )
        if not (query.size(0) == key.size(0) == value.size(0)):
            raise ValueError(
                f"{where}: batch sizes differ: query B={query.size(0)}, key B={key.size(0)}, "
                f"value B={value.size(0)}"
            )
        if key.size(1) != value.size(1):
            raise ValueError(
                f"{where}: key has Lk={key.size(1)} positions but value has {value.size(1)} "
                f"(key {tuple(key.shape)}, value {tuple(value.shape)})"
            )

    def _split_heads(self, x: Tensor) -> Tensor:
        """``(B, L, D) -> (B, H, L, d_k)``."""
        B, L, _ = x.shape
        x = x.view(B, L, self.num_heads, self.head_dim)  # (B, L, H, d_k)
        return x.transpose(1, 2)  # (B, H, L, d_k)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attend from ``query`` to ``key``/``value``; return ``(output, weights)``.

        Shapes: query ``(B, Lq, D)``, key and value ``(B, Lk, D)``; ``mask`` boolean
        (True = may attend), broadcastable to ``(B, H, Lq, Lk)``, e.g. ``(Lq, Lk)``,
        ``(B, 1, 1, Lk)`` or ``(B, 1, Lq, Lk)``. Returns output ``(B, Lq, D)`` and the
        per-head weights ``(B, H, Lq, Lk)``; in training with dropout these are the weights
        after dropout (the ones multiplied into the values), as PyTorch returns them. A query
        row allowed to attend to nothing gets zero weights (PyTorch gives NaN there).
        """
        self._check_inputs(query, key, value)
        B, Lq, D = query.shape
        Lk = key.size(1)
        if mask is not None:
            _check_mask(mask, (B, self.num_heads, Lq, Lk), "MultiHeadAttention")

        q = self._split_heads(self.w_q(query))  # (B, H, Lq, d_k)
        k = self._split_heads(self.w_k(key))  # (B, H, Lk, d_k)
        v = self._split_heads(self.w_v(value))  # (B, H, Lk, d_k)
        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, Lq, d_k), (B, H, Lq, Lk)
        if self.training and self.dropout.p > 0.0:
            # Dropout acts on the weights, after softmax, so the values are recombined with the
            # dropped weights; PyTorch does the same and returns these dropped weights.
            weights = self.dropout(weights)  # (B, H, Lq, Lk)
            heads = weights @ v  # (B, H, Lq, d_k)
        heads = heads.transpose(1, 2)  # (B, Lq, H, d_k)
        heads = heads.reshape(B, Lq, D)  # (B, Lq, D): the heads side by side
        return self.w_o(heads), weights

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """A :class:`MultiHeadAttention` with the weights, dropout and mode of ``m``.

        ``m.in_proj_weight`` ``(3D, D)`` stacks W_q, W_k, W_v (and ``in_proj_bias`` ``(3D,)``
        their biases); ``m.out_proj`` is ``w_o``. Weights do not depend on ``m.batch_first``,
        but the copy is always batch first: feed it ``(B, L, D)``. Refuses (ValueError) what it
        cannot represent: ``kdim``/``vdim`` != ``embed_dim``, ``add_bias_kv``,
        ``add_zero_attn``. Taught in the chapter "Multi-head attention".
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise ValueError(f"from_torch: expected nn.MultiheadAttention, got {type(m).__name__}")
        D = m.embed_dim
        if not m._qkv_same_embed_dim:
            raise ValueError(
                f"from_torch: kdim={m.kdim} / vdim={m.vdim} differ from embed_dim={D}; "
                "this MultiHeadAttention projects keys and values from d_model dims only"
            )
        if m.bias_k is not None or m.bias_v is not None:
            raise ValueError("from_torch: add_bias_kv=True (an extra learned key/value) is not supported")
        if m.add_zero_attn:
            raise ValueError("from_torch: add_zero_attn=True (an extra zero key/value) is not supported")
        bias = m.in_proj_bias is not None
        if bias != (m.out_proj.bias is not None):
            raise ValueError(
                "from_torch: in_proj_bias and out_proj.bias must both be present or both be absent"
            )
        weight = m.in_proj_weight
        new = cls(D, m.num_heads, dropout=m.dropout, bias=bias).to(device=weight.device, dtype=weight.dtype)
        w_q, w_k, w_v = weight.detach().chunk(3, dim=0)  # 3 x (D, D)
        with torch.no_grad():
            new.w_q.weight.copy_(w_q)
            new.w_k.weight.copy_(w_k)
            new.w_v.weight.copy_(w_v)
            new.w_o.weight.copy_(m.out_proj.weight)
            if bias:
                b_q, b_k, b_v = m.in_proj_bias.detach().chunk(3)  # 3 x (D,)
                new.w_q.bias.copy_(b_q)
                new.w_k.bias.copy_(b_k)
                new.w_v.bias.copy_(b_v)
                new.w_o.bias.copy_(m.out_proj.bias)
        new.train(m.training)
        return new


def key_padding_mask_to_mask(key_padding_mask: Tensor) -> Tensor:
    """PyTorch's ``key_padding_mask`` ``(B, Lk)``, True = ignore -> ours ``(B, 1, 1, Lk)``, True = may attend.

    Taught in the chapter "Multi-head attention".
    """
    if not isinstance(key_padding_mask, Tensor) or key_padding_mask.dtype != torch.bool:
        got = key_padding_mask.dtype if isinstance(key_padding_mask, Tensor) else type(key_padding_mask).__name__
        raise ValueError(
            f"key_padding_mask_to_mask: expected a bool tensor (True = padding), got {got}"
        )
    if key_padding_mask.dim() != 2:
        raise ValueError(
            f"key_padding_mask_to_mask: expected shape (B, Lk), got {tuple(key_padding_mask.shape)}"
        )
    return (~key_padding_mask)[:, None, None, :]  # (B, 1, 1, Lk)


def attn_mask_to_mask(attn_mask: Tensor, num_heads: int | None = None) -> Tensor:
    """PyTorch's boolean ``attn_mask`` (True = ignore) -> ours (True = may attend).

    ``(Lq, Lk)`` -> ``(Lq, Lk)``; ``(B * H, Lq, Lk)`` (row ``b * H + h``, as PyTorch orders
    it) -> ``(B, H, Lq, Lk)``, which needs ``num_heads``. Float (additive) masks are refused.
    Taught in the chapter "Multi-head attention".
    """
    if not isinstance(attn_mask, Tensor) or attn_mask.dtype != torch.bool:
        got = attn_mask.dtype if isinstance(attn_mask, Tensor) else type(attn_mask).__name__
        raise ValueError(
            f"attn_mask_to_mask: expected a bool tensor (True = ignore), got {got}; "
            "for an additive float mask (0 / -inf) use `attn_mask == 0` as our mask directly"
        )
    allowed = ~attn_mask
    if attn_mask.dim() == 2:
        return allowed  # (Lq, Lk)
    if attn_mask.dim() == 3:
        if num_heads is None or attn_mask.size(0) % num_heads != 0:
            raise ValueError(
                f"attn_mask_to_mask: a 3-D attn_mask {tuple(attn_mask.shape)} is (B * num_heads, Lq, Lk); "
                f"pass num_heads dividing {attn_mask.size(0)}, got num_heads={num_heads}"
            )
        BH, Lq, Lk = attn_mask.shape
        return allowed.view(BH // num_heads, num_heads, Lq, Lk)  # (B, H, Lq, Lk)
    raise ValueError(
        f"attn_mask_to_mask: expected shape (Lq, Lk) or (B * num_heads, Lq, Lk), got {tuple(attn_mask.shape)}"
    )
