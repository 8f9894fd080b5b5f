"""Grouped-query attention and the KV cache: fewer key/value heads, cached while decoding.

Taught in the chapter "Grouped-query attention and the KV cache".

* ``GroupedQueryAttention``: several query heads share one key/value head (Ainslie et al. 2023);
  ``num_kv_heads=1`` is multi-query attention (Shazeer 2019), ``num_kv_heads=num_heads`` is
  multi-head attention.
* ``KVCache``, ``CausalSelfAttention``, ``kv_cache_bytes``: incremental decoding.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import _validate as check
from .attention import scaled_dot_product_attention
from .masks import causal_mask
from .multihead import merge_heads, split_heads

__all__ = ["GroupedQueryAttention", "KVCache", "CausalSelfAttention", "kv_cache_bytes"]


class KVCache:
    """Keys and values of the tokens seen so far, ``(B, H_kv, T, d_k)``, for one attention layer.

    ``append`` concatenates along T and returns everything cached. Real servers preallocate (or
    page) this memory; concatenation keeps the idea visible. Use one cache per layer.
    Taught in the chapter "Grouped-query attention and the KV cache".
    """

    def __init__(self) -> None:
        self.key: Tensor | None = None
        self.value: Tensor | None = None

    @property
    def seq_len(self) -> int:
        """Number of cached positions T."""
        return 0 if self.key is None else self.key.size(2)

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, H_kv, T_new, d_k)`` keys and values; return all ``(B, H_kv, T, d_k)`` so far."""
        if key.dim() != 4 or value.dim() != 4 or key.shape[:3] != value.shape[:3]:
            raise ValueError(
                "KVCache.append: key and value must be (B, H_kv, T_new, d_k) with matching "
                f"(B, H_kv, T_new), got key {tuple(key.shape)} and value {tuple(value.shape)}"
            )
        if self.key is None or self.value is None:
            self.key, self.value = key, value
        else:
            if key.shape[:2] != self.key.shape[:2] or key.size(3) != self.key.size(3):
                raise ValueError(
                    f"KVCache.append: new key {tuple(key.shape)} does not continue the cached "
                    f"key {tuple(self.key.shape)} (B, H_kv and d_k must match; reset() the cache for a new batch)"
                )
            if key.dtype != self.key.dtype or key.device != self.key.device:
                raise ValueError(
                    f"KVCache.append: new keys are {key.dtype} on {key.device} but the cached ones "
                    f"{self.key.dtype} on {self.key.device}"
                )
            self.key = torch.cat([self.key, key], dim=2)  # (B, H_kv, T, d_k)
            self.value = torch.cat([self.value, value], dim=2)  # (B, H_kv, T, d_v)
        return self.key, self.value

    def reset(self) -> None:
        """Forget every cached position (start a new sequence)."""
        self.key = None
        self.value = None


def kv_cache_bytes(
    batch_size: int,
    seq_len: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype = torch.float16,
) -> int:
    """Bytes a KV cache holds: 2 (K and V) · layers · B · H_kv · T · d_k · bytes per element.

    ``batch_size`` is B and ``seq_len`` the cached length T.

    Grouped-query attention shrinks it by ``num_heads / num_kv_heads``.
    Taught in the chapter "Grouped-query attention and the KV cache".
    """
    for name, n in (
        ("batch_size", batch_size),
        ("seq_len", seq_len),
        ("num_layers", num_layers),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
    ):
        check.positive_int(n, name, "kv_cache_bytes")
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"kv_cache_bytes: dtype must be a torch.dtype, got {dtype!r}")
    return 2 * num_layers * batch_size * num_kv_heads * seq_len * head_dim * dtype.itemsize


class GroupedQueryAttention(nn.Module):
    """Multi-head attention whose ``num_heads`` query heads share ``num_kv_heads`` key/value heads.

    Query heads ``g*r .. g*r + r - 1`` (``r = num_heads // num_kv_heads``) use key/value head g,
    the grouping of ``F.scaled_dot_product_attention(..., enable_gqa=True)``.
    Taught in the chapter "Grouped-query attention and the KV cache".
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, bias: bool = True) -> None:
        super().__init__()
        where = "GroupedQueryAttention"
        for name, n in (("d_model", d_model), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            check.positive_int(n, name, where)
        check.divisible(d_model, "d_model", num_heads, "num_heads", where)
        check.divisible(num_heads, "num_heads", num_kv_heads, "num_kv_heads", where)
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        # The one change from multi-head attention: K and V have only num_kv_heads heads.
        self.w_k = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=bias)
        self.w_v = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        kv_cache: KVCache | None = None,
        check_inputs: bool = True,
    ) -> tuple[Tensor, Tensor]:
        """Attend; return output ``(B, Lq, D)`` and weights ``(B, num_heads, Lq, Lk)``.

        query ``(B, Lq, D)``, key and value ``(B, Lk, D)``. ``mask`` is bool (True = may attend)
        and read as by ``MultiHeadAttention``: ``(Lq, Lk)``, ``(B, Lq, Lk)`` (one per sequence),
        or anything broadcastable to ``(B, H, Lq, Lk)`` such as padding ``(B, 1, 1, Lk)``. With
        ``kv_cache``, the new keys/values are appended to it first and Lk counts every cached
        position. ``check_inputs=False`` skips the checks, for a caller that has made them.
        """
        if check_inputs:  # before the cache grows, so a bad call leaves it unchanged
            self._check(query, key, value, mask, kv_cache)
        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]  # (B, 1, Lq, Lk): one mask per sequence, shared by the heads
        q = split_heads(self.w_q(query), self.num_heads)  # (B, H, Lq, d_k)
        k = split_heads(self.w_k(key), self.num_kv_heads)  # (B, H_kv, Lk, d_k): only H_kv key heads
        v = split_heads(self.w_v(value), self.num_kv_heads)  # (B, H_kv, Lk, d_k)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (B, H_kv, T, d_k): the cache stores the small K/V
        group = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (B, H, T, d_k)
        v = v.repeat_interleave(group, dim=1)  # (B, H, T, d_k)
        out, weights = scaled_dot_product_attention(q, k, v, mask, check_inputs=False)  # (B, H, Lq, d_k), (B, H, Lq, T)
        return self.w_o(merge_heads(out)), weights  # (B, Lq, D)

    def _check(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, kv_cache: KVCache | None
    ) -> None:
        where = "GroupedQueryAttention"
        for name, t in (("query", query), ("key", key), ("value", value)):
            check.sequence(t, name, self.d_model, where, weight=self.w_q.weight)
        check.same_batch(where, query=query, key=key, value=value)
        check.same_length(key, value, where)
        if mask is not None:
            total = key.size(1) + (0 if kv_cache is None else kv_cache.seq_len)
            scores_shape = (query.size(0), self.num_heads, query.size(1), total)
            check.mask(mask, scores_shape, query.device, where, per_sequence=True)


class CausalSelfAttention(nn.Module):
    """Causal self-attention that can run one token at a time against a ``KVCache``.

    ``forward(x)`` on a whole sequence and ``forward(x_t, cache)`` token by token give the same
    outputs. ``num_kv_heads`` defaults to ``num_heads`` (plain multi-head).
    Taught in the chapter "Grouped-query attention and the KV cache".
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, bias: bool = True) -> None:
        super().__init__()
        self.attention = GroupedQueryAttention(
            d_model, num_heads, num_heads if num_kv_heads is None else num_kv_heads, bias=bias
        )

    def forward(self, x: Tensor, kv_cache: KVCache | None = None) -> tuple[Tensor, Tensor]:
        """x ``(B, L_new, D)`` -> output ``(B, L_new, D)``, weights ``(B, H, L_new, T)``.

        The new tokens sit at positions ``past .. past + L_new - 1`` (``past = kv_cache.seq_len``);
        token ``past + i`` sees keys ``0 .. past + i``.
        """
        check.sequence(x, "x", self.attention.d_model, "CausalSelfAttention", weight=self.attention.w_q.weight)
        past = 0 if kv_cache is None else kv_cache.seq_len
        L_new = x.size(1)
        # Bottom-right aligned: the new tokens are the last of the T = past + L_new positions.
        # (PyTorch's is_causal=True aligns top-left, which is wrong for a decoding step.)
        mask = causal_mask(L_new, past + L_new, device=x.device)  # (L_new, T)
        return self.attention(x, x, x, mask=mask, kv_cache=kv_cache, check_inputs=False)

