"""Variants of attention used by modern models. Taught in the chapter "Variants".

Each idea differs from plain multi-head attention by one marked change:

* ``sliding_window_mask``: each query sees only a band of nearby keys (Longformer, Mistral).
* ``GroupedQueryAttention``: several query heads share one key/value head (Ainslie et al. 2023);
  ``num_kv_heads=1`` is multi-query attention (Shazeer 2019), ``num_kv_heads=num_heads`` is
  multi-head attention.
* ``rope_frequencies`` / ``apply_rope``: rotary position embedding (Su et al. 2021, RoFormer).
* ``linear_attention``: softmax replaced by a feature map, O(L) memory (Katharopoulos et al. 2020).
* ``fused_attention``: the same maths as ``scaled_dot_product_attention``, dispatched to
  PyTorch's fused kernels (flash / memory-efficient on GPU) and returning no weights.
* ``KVCache``, ``CausalSelfAttention``, ``kv_cache_bytes``: incremental decoding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import _check_inputs, scaled_dot_product_attention
from .masks import check_mask

__all__ = [
    "sliding_window_mask",
    "GroupedQueryAttention",
    "KVCache",
    "CausalSelfAttention",
    "kv_cache_bytes",
    "rope_frequencies",
    "apply_rope",
    "elu_feature_map",
    "linear_attention",
    "fused_attention",
]


def _check_positive_int(value: object, name: str, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")


# --------------------------------------------------------------------------------------------
# Sliding-window (local) attention
# --------------------------------------------------------------------------------------------


def sliding_window_mask(
    seq_len: int, window: int, causal: bool = True, device: torch.device | str | None = None
) -> Tensor:
    """Banded mask: bool ``(L, L)``, True where query i may attend to key j.

    Causal (default): ``i - window < j <= i``, so each query sees ``window`` keys ending at
    itself (fewer at the start). Not causal: ``|i - j| < window``, so up to ``2*window - 1``
    keys centred on i. ``window >= seq_len`` (causal) gives ``causal_mask(seq_len)``. Combine
    with other masks by ``&``. Taught in the chapter "Variants".
    """
    _check_positive_int(seq_len, "seq_len", "sliding_window_mask")
    _check_positive_int(window, "window", "sliding_window_mask")
    positions = torch.arange(seq_len, device=device)  # (L,)
    offset = positions[:, None] - positions[None, :]  # (L, L): i - j
    if causal:
        return (offset >= 0) & (offset < window)  # (L, L)
    return offset.abs() < window  # (L, L)


# --------------------------------------------------------------------------------------------
# Grouped-query attention and the KV cache
# --------------------------------------------------------------------------------------------


class KVCache:
    """Keys and values of the tokens seen so far, ``(B, H_kv, T, d_k)``, for one attention layer.

    ``append`` concatenates along T and returns everything cached. Real servers preallocate (or
    page) this memory; concatenation keeps the idea visible. Use one cache per layer.
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
                    f"key {tuple(self.key.shape)} (B, H_kv and d_k must match)"
                )
            self.key = torch.cat([self.key, key], dim=2)  # (B, H_kv, T, d_k)
            self.value = torch.cat([self.value, value], dim=2)  # (B, H_kv, T, d_v)
        return self.key, self.value

    def reset(self) -> None:
        """Forget every cached position (start a new sequence)."""
        self.key = None
        self.value = None


def kv_cache_bytes(
    batch: int,
    seq_len: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype = torch.float16,
) -> int:
    """Bytes a KV cache holds: 2 (K and V) · layers · B · H_kv · T · d_k · bytes per element.

    Grouped-query attention shrinks it by ``num_heads / num_kv_heads``. Chapter "Variants".
    """
    for name, v in (
        ("batch", batch),
        ("seq_len", seq_len),
        ("num_layers", num_layers),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
    ):
        _check_positive_int(v, name, "kv_cache_bytes")
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"kv_cache_bytes: dtype must be a torch.dtype, got {dtype!r}")
    return 2 * num_layers * batch * num_kv_heads * seq_len * head_dim * dtype.itemsize


class GroupedQueryAttention(nn.Module):
    """Multi-head attention whose ``num_heads`` query heads share ``num_kv_heads`` key/value heads.

    Query heads ``g*r .. g*r + r - 1`` (``r = num_heads // num_kv_heads``) use key/value head g,
    the grouping of ``F.scaled_dot_product_attention(..., enable_gqa=True)``. Chapter "Variants".
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, bias: bool = True) -> None:
        super().__init__()
        for name, v in (("d_model", d_model), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            _check_positive_int(v, name, "GroupedQueryAttention")
        if d_model % num_heads != 0:
            raise ValueError(
                f"GroupedQueryAttention: d_model={d_model} is not divisible by num_heads={num_heads}"
            )
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"GroupedQueryAttention: num_heads={num_heads} is not divisible by "
                f"num_kv_heads={num_kv_heads}"
            )
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
    ) -> tuple[Tensor, Tensor]:
        """Attend; return output ``(B, Lq, D)`` and weights ``(B, num_heads, Lq, Lk)``.

        query ``(B, Lq, D)``, key and value ``(B, Lk, D)``. ``mask`` is bool (True = may
        attend), broadcastable to ``(B, H, Lq, Lk)``: ``(Lq, Lk)``, ``(B, 1, 1, Lk)`` or
        ``(B, 1 or H, Lq, Lk)``; 3-D masks are refused as ambiguous. With ``kv_cache``, the
        new keys/values are appended to it first and Lk counts every cached position.
        """
        self._check_shapes(query, key, value)
        batch, len_q, _ = query.shape
        len_k = key.size(1)
        if mask is not None:  # checked before the cache grows, so a bad call leaves it unchanged
            total = len_k + (0 if kv_cache is None else kv_cache.seq_len)
            self._check_mask(mask, (batch, self.num_heads, len_q, total))
        q = self.w_q(query).view(batch, len_q, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, Lq, d_k)
        k = self.w_k(key).view(batch, len_k, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, Lk, d_k)
        v = self.w_v(value).view(batch, len_k, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, Lk, d_k)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (B, H_kv, T, d_k): the cache stores the small K/V
        group = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (B, H, T, d_k)
        v = v.repeat_interleave(group, dim=1)  # (B, H, T, d_k)
        out, weights = scaled_dot_product_attention(q, k, v, mask=mask)  # (B, H, Lq, d_k), (B, H, Lq, T)
        out = out.transpose(1, 2).reshape(batch, len_q, self.d_model)  # (B, Lq, D)
        return self.w_o(out), weights

    @staticmethod
    def _check_mask(mask: Tensor, scores_shape: tuple[int, int, int, int]) -> None:
        if isinstance(mask, Tensor) and mask.dim() == 3:
            # (B, Lq, Lk) would broadcast against (H, Lq, Lk) and, when B == H, silently mask
            # the wrong rows: the same rule as MultiHeadAttention.
            raise ValueError(
                f"GroupedQueryAttention: a 3-D mask of shape {tuple(mask.shape)} is ambiguous; use "
                "(Lq, Lk), (B, 1, 1, Lk) or (B, 1, Lq, Lk) (e.g. mask[:, None] for a (B, Lq, Lk) mask)"
            )
        check_mask(mask, scores_shape, "GroupedQueryAttention")

    def _check_shapes(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor) or t.dim() != 3 or t.size(-1) != self.d_model:
                shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"GroupedQueryAttention: {name} must be (B, L, d_model={self.d_model}), got {shape}"
                )
        if not (query.size(0) == key.size(0) == value.size(0)) or key.size(1) != value.size(1):
            raise ValueError(
                "GroupedQueryAttention: query, key and value must share B, and key and value L; got "
                f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )


class CausalSelfAttention(nn.Module):
    """Causal self-attention that can run one token at a time against a ``KVCache``.

    ``forward(x)`` on a whole sequence and ``forward(x_t, cache)`` token by token give the same
    outputs. ``num_kv_heads`` defaults to ``num_heads`` (plain multi-head). Chapter "Variants".
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
        if not isinstance(x, Tensor) or x.dim() != 3:
            raise ValueError(f"CausalSelfAttention: x must be (B, L, D), got {getattr(x, 'shape', x)!r}")
        past = 0 if kv_cache is None else kv_cache.seq_len
        len_new = x.size(1)
        # Bottom-right aligned: the last query lines up with the last key. (PyTorch's
        # is_causal=True aligns top-left, which is wrong for a decoding step.)
        mask = torch.ones(len_new, past + len_new, dtype=torch.bool, device=x.device).tril(diagonal=past)  # (L_new, T)
        return self.attention(x, x, x, mask=mask, kv_cache=kv_cache)


# --------------------------------------------------------------------------------------------
# Rotary position embedding
# --------------------------------------------------------------------------------------------


def rope_frequencies(
    head_dim: int, max_len: int, base: float = 10000.0, device: torch.device | str | None = None
) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotation angles ``m · θ_i``, each float32 ``(max_len, head_dim // 2)``.

    ``θ_i = base^(-2i / head_dim)`` for pair i (RoFormer eq. 15). Angles are computed in float64
    on the CPU, then rounded, so long positions keep their precision. Chapter "Variants".
    """
    _check_positive_int(head_dim, "head_dim", "rope_frequencies")
    _check_positive_int(max_len, "max_len", "rope_frequencies")
    if head_dim % 2 != 0:
        raise ValueError(f"rope_frequencies: head_dim must be even (it rotates pairs), got {head_dim}")
    if not base > 0:
        raise ValueError(f"rope_frequencies: base must be positive, got {base!r}")
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d/2,)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * theta[None, :]  # (max_len, d/2)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | int | None = None) -> Tensor:
    """Rotate each pair ``(x_{2i}, x_{2i+1})`` of ``x (..., L, head_dim)`` by angle ``m · θ_i``.

    The interleaved-pairs convention of RoFormer (not GPT-NeoX's rotate-half, which pairs
    ``x_i`` with ``x_{i + d/2}``). ``positions``: None for ``0 .. L-1``; an int offset p for
    ``p .. p+L-1`` (decoding with a cache); or an integer tensor ``(L,)`` or ``(..., L)``.
    ``cos``/``sin`` come from ``rope_frequencies``. Returns x's shape and dtype. Chapter "Variants".
    """
    if not isinstance(x, Tensor) or x.dim() < 2:
        raise ValueError(f"apply_rope: x must be a tensor (..., L, head_dim), got {getattr(x, 'shape', x)!r}")
    head_dim, seq_len = x.size(-1), x.size(-2)
    if head_dim % 2 != 0:
        raise ValueError(f"apply_rope: head_dim must be even (it rotates pairs), got {head_dim} in x {tuple(x.shape)}")
    if cos.shape != sin.shape or cos.dim() != 2 or cos.size(1) != head_dim // 2:
        raise ValueError(
            f"apply_rope: cos and sin must both be (max_len, head_dim/2={head_dim // 2}), "
            f"got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    max_len = cos.size(0)
    if positions is None or isinstance(positions, int):
        start = 0 if positions is None else positions
        if start < 0 or start + seq_len > max_len:
            raise ValueError(
                f"apply_rope: positions {start}..{start + seq_len - 1} are outside the "
                f"table's 0..{max_len - 1}; build rope_frequencies with a larger max_len"
            )
        cos_m, sin_m = cos[start : start + seq_len], sin[start : start + seq_len]  # (L, d/2)
    else:
        if positions.dtype.is_floating_point or positions.size(-1) != seq_len:
            raise ValueError(
                f"apply_rope: positions must be an integer tensor (..., L={seq_len}), "
                f"got dtype {positions.dtype} and shape {tuple(positions.shape)}"
            )
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= max_len):
            raise ValueError(
                f"apply_rope: positions span {int(positions.min())}..{int(positions.max())} but the "
                f"table covers 0..{max_len - 1}"
            )
        positions = positions.to(cos.device)
        cos_m, sin_m = cos[positions], sin[positions]  # (..., L, d/2)
    # Rotate in at least float32 (half-precision angles drift), then return x's dtype.
    dtype = torch.promote_types(x.dtype, torch.float32)
    cos_m = cos_m.to(device=x.device, dtype=dtype)
    sin_m = sin_m.to(device=x.device, dtype=dtype)
    x_even = x[..., 0::2].to(dtype)  # (..., L, d/2)
    x_odd = x[..., 1::2].to(dtype)  # (..., L, d/2)
    rotated = torch.stack(
        (x_even * cos_m - x_odd * sin_m, x_even * sin_m + x_odd * cos_m), dim=-1
    )  # (..., L, d/2, 2)
    return rotated.flatten(-2).to(x.dtype)  # (..., L, d)


# --------------------------------------------------------------------------------------------
# Linear attention
# --------------------------------------------------------------------------------------------


def elu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1, elementwise and positive (Katharopoulos et al. 2020, eq. 7). Chapter "Variants"."""
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
    chunk this instead. Taught in the chapter "Variants".
    """
    _check_inputs(query, key, value, "linear_attention")
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


# --------------------------------------------------------------------------------------------
# Fused attention
# --------------------------------------------------------------------------------------------


def fused_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, causal: bool = False
) -> Tensor:
    """``scaled_dot_product_attention``'s output through PyTorch's fused kernels; no weights.

    Same shapes, mask convention (bool, True = may attend) and fully-masked rows (zero
    output) as ``lessons_src.scaled_dot_product_attention``. On a GPU, PyTorch picks flash or
    memory-efficient attention, which never store the ``(Lq, Lk)`` weights; flash needs
    ``mask=None``, so pass ``causal=True`` rather than a causal mask. ``causal`` is
    bottom-right aligned (the last query sees every key), unlike PyTorch's ``is_causal``
    when Lq != Lk. Taught in the chapter "Variants".
    """
    scores_shape = _check_inputs(query, key, value, "fused_attention")
    len_q, len_k = query.size(-2), key.size(-2)
    if mask is not None:
        check_mask(mask, scores_shape, "fused_attention")
        if mask.device != query.device:
            raise ValueError(f"fused_attention: mask is on {mask.device} but query is on {query.device}")
    if causal and (mask is not None or len_q != len_k):
        # PyTorch's is_causal=True is top-left aligned; build the bottom-right mask ourselves.
        causal_part = torch.ones(len_q, len_k, dtype=torch.bool, device=query.device).tril(len_k - len_q)  # (Lq, Lk)
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

