"""Rotary position embeddings (RoPE): rotate queries and keys by position-dependent angles.

Taught in the chapter "Rotary position embeddings". RoFormer (Su et al. 2021); the interleaved
pairs ``(x_{2p}, x_{2p+1})`` of the paper and of Meta's Llama code (which multiplies the pairs, read
as complex numbers, by ``e^{i·θ_p}``). Notation as on the course's notation page: pair ``p``,
position ``i``, ``head_dim`` = d_k.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _validate as check

__all__ = ["rope_frequencies", "apply_rope", "rope_layout_permutation", "ROPE_SCALINGS", "check_rope_scaling",
           "yarn_mscale", "yarn_attention_factor"]

#: The rescaled frequencies of long-context checkpoints that :func:`rope_frequencies` implements: the
#: ``rope_type`` of a Hugging Face config's ``rope_scaling`` (or ``rope_parameters``) and the keys each needs.
ROPE_SCALINGS = {"linear": ("factor",),
                 "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                 "yarn": ("factor", "original_max_position_embeddings")}
#: The keys a scaling may give and need not (YaRN's, with their defaults in :func:`_scaled`).
_OPTIONAL = {"yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate")}


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction for a context stretched ``factor`` times: ``0.1 · mscale · ln(factor) + 1``
    (1 when ``factor <= 1``). Taught in the chapter "Rotary position embeddings"."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def check_rope_scaling(scaling: dict, where: str) -> None:
    """Raise a ValueError, naming ``where``, unless ``scaling`` is one of :data:`ROPE_SCALINGS` with its keys."""
    kind = scaling.get("rope_type") if isinstance(scaling, dict) else None
    if kind not in ROPE_SCALINGS:
        raise ValueError(f"{where}: rope_scaling must be a dict whose rope_type is one of "
                         f"{', '.join(map(repr, ROPE_SCALINGS))}, got {scaling!r}")
    missing = [key for key in ROPE_SCALINGS[kind] if key not in scaling]
    unknown = sorted(set(scaling) - set(ROPE_SCALINGS[kind]) - set(_OPTIONAL.get(kind, ())) - {"rope_type"})
    if missing or unknown:
        raise ValueError(f"{where}: rope_scaling of rope_type {kind!r} needs the keys {ROPE_SCALINGS[kind]}; "
                         f"missing {missing}, not understood {unknown}")
    if any(isinstance(scaling[key], bool) or not isinstance(scaling[key], (int, float)) or not scaling[key] > 0
           for key in ROPE_SCALINGS[kind]):
        raise ValueError(f"{where}: every number of rope_scaling must be > 0, got {scaling!r}")
    if kind == "llama3" and not scaling["high_freq_factor"] > scaling["low_freq_factor"]:
        raise ValueError(f"{where}: rope_scaling needs high_freq_factor > low_freq_factor, got {scaling!r}")


def _yarn(theta: Tensor, scaling: dict, base: float, head_dim: int) -> Tensor:
    """YaRN (Peng et al. 2023, as Hugging Face computes it): pairs that turn more than ``beta_fast`` times over the
    original context keep their frequency, pairs that turn fewer than ``beta_slow`` times are divided by
    ``factor``, and a linear ramp over the pair index blends the ones between."""
    original = scaling["original_max_position_embeddings"]

    def pair_turning(turns: float) -> float:  # the pair index that turns `turns` times over `original` positions
        return head_dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(scaling.get("beta_fast") or 32), pair_turning(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    high = high + 0.001 if low == high else high
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)  # 0 fast, 1 slow
    return theta / scaling["factor"] * ramp + theta * (1 - ramp)


def yarn_attention_factor(scaling: dict) -> float:
    """What YaRN multiplies cos and sin by: ``attention_factor`` if given, else the ratio of the two mscales
    (DeepSeek gives both) or the mscale of ``factor`` alone. Taught in the chapter "Rotary position embeddings"."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    mscale, all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and all_dim:
        return yarn_mscale(scaling["factor"], mscale) / yarn_mscale(scaling["factor"], all_dim)
    return yarn_mscale(scaling["factor"])


def _scaled(theta: Tensor, scaling: dict) -> Tensor:
    """The frequencies ``theta (d/2,)`` of a long-context checkpoint: all divided by ``factor`` (``"linear"``),
    or (``"llama3"``, Llama 3.1) the slow pairs, whose wavelength exceeds ``original / low_freq_factor``
    positions, divided by ``factor``, the fast ones (wavelength under ``original / high_freq_factor``) kept,
    and the pairs between blended smoothly from one to the other."""
    factor = scaling["factor"]
    if scaling["rope_type"] == "linear":
        return theta / factor
    original, low, high = (scaling[k] for k in ("original_max_position_embeddings", "low_freq_factor",
                                                  "high_freq_factor"))
    wavelength = 2 * math.pi / theta  # positions per full turn of each pair
    kept_share = (original / wavelength - low) / (high - low)  # 0 at the slow edge, 1 at the fast edge
    blended = (1 - kept_share) * theta / factor + kept_share * theta
    scaled = torch.where(wavelength > original / low, theta / factor, theta)
    between = (wavelength >= original / high) & (wavelength <= original / low)
    return torch.where(between, blended, scaled)


def rope_frequencies(
    head_dim: int, max_len: int, base: float = 10000.0, *, device: torch.device | str | None = None,
    scaling: dict | None = None,
) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotation angles ``i · θ_p``, each float32 ``(max_len, head_dim // 2)``: row ``i`` is
    position ``i``, column ``p`` is pair ``p``.

    ``θ_p = base^(-2p / head_dim)`` for pair p (RoFormer eq. 15). Angles are computed in float64
    on the CPU, then rounded, so long positions keep their precision. ``scaling``: None, or a long-context
    checkpoint's ``rope_scaling`` dict (:data:`ROPE_SCALINGS`: ``{"rope_type": "llama3", "factor": 8.0,
    "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}`` in Llama
    3.1), which rescales the frequencies θ_p before the angles are taken; YaRN's (``"yarn"``, DeepSeek-V3, Qwen
    at long context) also multiplies cos and sin by its attention factor, which scales every score by its square.
    Taught in the chapter "Rotary position embeddings".
    """
    check.positive_int(head_dim, "head_dim", "rope_frequencies")
    check.positive_int(max_len, "max_len", "rope_frequencies")
    if head_dim % 2 != 0:
        raise ValueError(f"rope_frequencies: head_dim must be even (it rotates pairs), got {head_dim}")
    if not base > 0:
        raise ValueError(f"rope_frequencies: base must be positive, got {base!r}")
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d/2,)
    magnitude = 1.0
    if scaling is not None:
        check_rope_scaling(scaling, "rope_frequencies")
        if scaling["rope_type"] == "yarn":
            theta, magnitude = _yarn(theta, scaling, base, head_dim), yarn_attention_factor(scaling)
        else:
            theta = _scaled(theta, scaling)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * theta[None, :]  # (max_len, d/2)
    return (magnitude * angles.cos()).float().to(device), (magnitude * angles.sin()).float().to(device)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | int | None = None, *,
               layout: str = "interleaved") -> Tensor:
    """Rotate pair ``p`` of the features of ``x (..., L, head_dim)`` at position ``i`` by angle ``i · θ_p``.

    ``layout="interleaved"`` (the default): the pairs ``(x_{2p}, x_{2p+1})`` of RoFormer.
    ``layout="half"``: the pairs ``(x_p, x_{p + d_k/2})`` of GPT-NeoX and of Hugging Face's Llama port
    ("rotate half"; Meta's own Llama code rotates interleaved pairs); the two give the same scores
    once the features are reordered by :func:`rope_layout_permutation`. ``positions``: None for ``0 .. L-1``; an int offset n for
    ``n .. n+L-1`` (decoding after n cached tokens); or an integer tensor ``(L,)`` or ``(..., L)``.
    ``cos``/``sin`` come from ``rope_frequencies``. Returns x's shape and dtype.
    Taught in the chapter "Rotary position embeddings".
    """
    if not isinstance(x, Tensor) or x.dim() < 2:
        raise ValueError(f"apply_rope: x must be a tensor (..., L, head_dim), got {getattr(x, 'shape', x)!r}")
    if layout not in ("interleaved", "half"):
        raise ValueError(f"apply_rope: layout must be 'interleaved' or 'half', got {layout!r}")
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
    if layout == "half":
        x_1, x_2 = x[..., : head_dim // 2].to(dtype), x[..., head_dim // 2 :].to(dtype)  # (..., L, d/2) each
        return torch.cat((x_1 * cos_m - x_2 * sin_m, x_1 * sin_m + x_2 * cos_m), dim=-1).to(x.dtype)  # (..., L, d)
    x_even = x[..., 0::2].to(dtype)  # (..., L, d/2)
    x_odd = x[..., 1::2].to(dtype)  # (..., L, d/2)
    rotated = torch.stack(
        (x_even * cos_m - x_odd * sin_m, x_even * sin_m + x_odd * cos_m), dim=-1
    )  # (..., L, d/2, 2)
    return rotated.flatten(-2).to(x.dtype)  # (..., L, d)


def rope_layout_permutation(head_dim: int) -> Tensor:
    """The order of features that turns the interleaved layout into rotate-half: ``(0, 2, 4, ..., 1, 3, 5, ...)``.

    ``apply_rope(x[..., p], layout="half") == apply_rope(x, layout="interleaved")[..., p]`` for
    ``p = rope_layout_permutation(head_dim)``: permute each head's columns of W_Q and W_K by ``p``
    (with ``q = x W_Q``; in ``nn.Linear``'s ``q_proj.weight``, stored as W_Q transposed, they are rows)
    and a checkpoint trained with one layout gives the same scores in code written for the other.
    Hugging Face's script that converts Meta's Llama checkpoints (interleaved) applies this permutation.
    Taught in the chapter "Rotary position embeddings".
    """
    check.positive_int(head_dim, "head_dim", "rope_layout_permutation")
    if head_dim % 2 != 0:
        raise ValueError(f"rope_layout_permutation: head_dim must be even, got {head_dim}")
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
