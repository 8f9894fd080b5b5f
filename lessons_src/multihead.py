"""Multi-head attention: H scaled dot-product attentions side by side, on learned projections.

Taught in the chapter "Multi-head attention". Masks follow the course convention of
:mod:`lessons_src.masks`: boolean, **True = may attend**. PyTorch's ``nn.MultiheadAttention``
uses the opposite convention for boolean masks (True = ignore); the two converters below
translate, and :meth:`MultiHeadAttention.from_torch` copies PyTorch's weights.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import _validate as check
from .attention import scaled_dot_product_attention

__all__ = ["split_heads", "merge_heads", "MultiHeadAttention", "key_padding_mask_to_mask", "attn_mask_to_mask"]


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """Cut each position's features into heads: ``(B, L, D) -> (B, H, L, d_k)``, ``d_k = D / H``.

    Head h gets features ``h·d_k .. (h+1)·d_k - 1``. A view of ``x`` (nothing is copied), no
    longer contiguous. Grouped-query attention cuts its keys and values into ``num_kv_heads``
    heads the same way. Taught in the chapter "Multi-head attention".
    """
    if not isinstance(x, Tensor) or x.dim() != 3:
        raise ValueError(f"split_heads: x must be a 3-D tensor (B, L, D), got {getattr(x, 'shape', type(x).__name__)}")
    check.positive_int(num_heads, "num_heads", "split_heads")
    B, L, D = x.shape
    check.divisible(D, "D", num_heads, "num_heads", "split_heads")
    x = x.view(B, L, num_heads, D // num_heads)  # (B, L, H, d_k)
    return x.transpose(1, 2)  # (B, H, L, d_k)


def merge_heads(x: Tensor) -> Tensor:
    """Put the heads side by side again: ``(B, H, L, d_k) -> (B, L, H·d_k)``, the inverse of :func:`split_heads`.

    The result is ``Concat(head_0, ..., head_{H-1})`` along the features (a copy: the transposed
    tensor is not contiguous). Taught in the chapter "Multi-head attention".
    """
    if not isinstance(x, Tensor) or x.dim() != 4:
        raise ValueError(f"merge_heads: x must be a 4-D tensor (B, H, L, d_k), got {getattr(x, 'shape', type(x).__name__)}")
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, H, d_k) -> (B, L, D)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch first: ``(B, Lq, D), (B, Lk, D), (B, Lk, D) -> (B, Lq, D)``.

    Each of the ``num_heads`` heads attends in its own ``head_dim = d_model // num_heads``
    subspace; their outputs are concatenated and mixed by ``w_o``. Taught in the chapter
    "Multi-head attention".
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        check.positive_int(d_model, "d_model", "MultiHeadAttention")
        check.positive_int(num_heads, "num_heads", "MultiHeadAttention")
        check.divisible(d_model, "d_model", num_heads, "num_heads", "MultiHeadAttention")
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

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, check_inputs: bool = True
    ) -> tuple[Tensor, Tensor]:
        """Attend from ``query`` to ``key``/``value``; return ``(output, weights)``.

        Shapes: query ``(B, Lq, D)``, key and value ``(B, Lk, D)``. ``mask`` is boolean (True =
        may attend), broadcastable to the per-head scores ``(B, H, Lq, Lk)``: ``(Lq, Lk)`` for
        every sequence, ``(B, 1, 1, Lk)`` for padding, ``(B, H, Lq, Lk)`` per head; a 3-D mask is
        ``(B, Lq, Lk)``, one per sequence, shared by the heads (PyTorch's ``nn.MultiheadAttention``
        reads a 3-D ``attn_mask`` as ``(B * H, Lq, Lk)`` instead: see :func:`attn_mask_to_mask`).
        Returns output ``(B, Lq, D)`` and the per-head weights ``(B, H, Lq, Lk)``; in training
        with dropout these are the weights after dropout (the ones multiplied into the values), as
        PyTorch returns them. A query row allowed to attend to nothing gets zero weights (PyTorch
        gives NaN there). ``check_inputs=False`` skips the checks, for a block that has made them.
        """
        if check_inputs:
            self._check(query, key, value, mask)
        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]  # (B, 1, Lq, Lk): one mask per sequence, shared by the heads

        q = split_heads(self.w_q(query), self.num_heads)  # (B, H, Lq, d_k)
        k = split_heads(self.w_k(key), self.num_heads)  # (B, H, Lk, d_k)
        v = split_heads(self.w_v(value), self.num_heads)  # (B, H, Lk, d_k)
        heads, weights = scaled_dot_product_attention(q, k, v, mask, check_inputs=False)  # (B, H, Lq, d_k), (B, H, Lq, Lk)
        if self.training and self.dropout.p > 0.0:
            # Dropout acts on the weights, after softmax, so the values are recombined with the
            # dropped weights; PyTorch does the same and returns these dropped weights.
            weights = self.dropout(weights)  # (B, H, Lq, Lk)
            heads = weights @ v  # (B, H, Lq, d_k)
        return self.w_o(merge_heads(heads)), weights  # (B, Lq, D): the heads side by side, mixed by W_O

    def _check(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
        where = "MultiHeadAttention"
        for name, t in (("query", query), ("key", key), ("value", value)):
            check.sequence(t, name, self.d_model, where, weight=self.w_q.weight)
        check.same_batch(where, query=query, key=key, value=value)
        check.same_length(key, value, where)
        if mask is not None:
            scores_shape = (query.size(0), self.num_heads, query.size(1), key.size(1))
            check.mask(mask, scores_shape, query.device, where, per_sequence=True)

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
