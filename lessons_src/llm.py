"""From the 2017 block to today's LLM block, one switch at a time: RMSNorm, SwiGLU, rotary
attention inside each head, grouped-query attention with a KV cache, and no biases.

- :class:`RMSNorm`: ``x / rms(x) * weight``, no mean subtracted, no bias (equal to ``torch.nn.RMSNorm``);
- :class:`SwiGLU`: ``down_proj(silu(gate_proj(x)) * up_proj(x))``, no biases;
- :class:`DecoderConfig`: every switch between the two blocks, checked once;
- :class:`Attention`, :class:`MLP`, :class:`DecoderLayer`, :class:`DecoderLM`: the block and the
  decoder-only model, with the parameter names of Llama-style checkpoints (``q_proj``, ``k_proj``,
  ``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``, ``input_layernorm``,
  ``post_attention_layernorm``, ``norm``, ``embed_tokens``, ``lm_head``), so that weights from
  elsewhere load with ``load_state_dict``; decoding token by token with a :class:`lessons_src.KVCache`
  per layer equals the full pass;
- :func:`rename_hf_llama` and :meth:`DecoderLM.from_llama_state_dict`: a Hugging Face ``LlamaForCausalLM``
  checkpoint under these names, with the switches it needs (``HF_LLAMA_SWITCHES``) and its rotary base.

The attention of today's open models adds seven switches to :class:`DecoderConfig`, all off by default
(chapter "Attention in today's open models"): ``qk_norm`` (an RMSNorm of ``head_dim`` on each head's
queries and keys before the rotation, parameters ``q_norm`` and ``k_norm``: Qwen3, Gemma 3; OLMo 2's
QK-norm, one RMSNorm of width ``H · d_k`` over all heads together, is not this switch),
``norm_plus_one`` (RMSNorms that multiply by ``1 + weight``: Gemma, Qwen3-Next), ``query_pre_attn_scalar``
(scores scaled by its ``-1/2`` power instead of ``d_k``'s: Gemma 2 and 3), ``attn_logit_softcapping``
(scores through ``cap · tanh(s / cap)``: Gemma 2), ``sinks`` (one learned logit per head in the softmax's
denominator, parameter ``sinks``: gpt-oss), ``sliding_window`` with ``layer_types`` (interleaved
sliding-window and global layers: Gemma 2 and 3, gpt-oss; a :class:`SlidingKVCache` holds only the window)
and ``attn_output_gate`` (a sigmoid gate from the layer's input on each head's output before ``o_proj``,
the gate's rows interleaved with the queries' in ``q_proj``: Qwen3-Next). The names of the config fields
and of the parameters are those of the Hugging Face configs and checkpoints, so a ``Qwen3ForCausalLM`` or a
dense ``Qwen3NextForCausalLM`` with full rotary loads through :func:`rename_hf_llama`, and a ``Gemma2Attention``,
``Gemma3Attention`` or ``GptOssAttention`` (with ``bias=True``: its four projections have biases) state dict
loads into :class:`Attention` as it is (``tests/test_llm_modern.py``). Not implemented, so a released
checkpoint of these families does not load as it is: Qwen3-Next's partial rotary (``partial_rotary_factor``
0.25: only a quarter of ``head_dim`` rotates; the tests set 1.0), its linear-attention layers and experts;
gpt-oss's experts. (YaRN-stretched rotary angles, Gemma 3's second rotary base for its sliding layers and
whole Gemma 2 and 3 models came later: ``rope_scaling``, ``rope_local_base_freq`` and Gemma's switches below,
read from a checkpoint by :func:`lessons_src.from_pretrained`.)

Taught in the chapter "From the original block to a modern LLM block" (today's switches in the chapter
"Attention in today's open models").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _validate as check
from .alibi import alibi_bias
from .gqa import KVCache
from .positional import sinusoidal_positional_encoding
from .rotary import apply_rope, check_rope_scaling, rope_frequencies

__all__ = ["RMSNorm", "SwiGLU", "swiglu_width", "DecoderConfig", "Attention", "MLP", "DecoderLayer", "DecoderLM",
           "HF_LLAMA_SWITCHES", "rename_hf_llama", "SlidingKVCache", "softmax_with_sink", "cache_bytes"]


class RMSNorm(nn.Module):
    """Root-mean-square normalisation: ``x / sqrt(mean(x²) + eps) * weight`` over the last dim.

    No mean is subtracted and there is no bias (Zhang and Sennrich 2019). Equal to
    ``torch.nn.RMSNorm(d_model, eps=eps)``. ``(..., D) -> (..., D)``. With ``plus_one=True`` it multiplies
    by ``1 + weight`` and ``weight`` starts at 0, as Gemma's and Qwen3-Next's checkpoints store it (the same
    function, another parametrisation: loading such a checkpoint into the plain form would scale by
    ``weight`` near 0). Taught in the chapter "From the original block to a modern LLM block".
    """

    def __init__(self, d_model: int, eps: float = 1e-6, plus_one: bool = False) -> None:
        super().__init__()
        check.positive_int(d_model, "d_model", "RMSNorm")
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
            raise ValueError(f"RMSNorm: eps must be a number > 0, got {eps!r}")
        if not isinstance(plus_one, bool):
            raise ValueError(f"RMSNorm: plus_one must be True or False, got {plus_one!r}")
        self.eps = float(eps)
        self.plus_one = plus_one
        self.weight = nn.Parameter(torch.zeros(d_model) if plus_one else torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.size(-1) != self.weight.numel():
            raise ValueError(f"RMSNorm: x must end in d_model={self.weight.numel()}, got "
                             f"{tuple(getattr(x, 'shape', ()))}")
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x / rms * (1 + self.weight if self.plus_one else self.weight)


def swiglu_width(d_model: int, multiple_of: int = 1) -> int:
    """The SwiGLU hidden width with as many parameters as a 4·D ReLU feed-forward: ``8/3 · D``,
    rounded up to a multiple of ``multiple_of``.

    A ReLU feed-forward has two ``D x 4D`` matrices (``8 D²``); SwiGLU has three ``D x d_ff``, so
    ``3 D d_ff = 8 D²`` gives ``d_ff = 8D/3``. Taught in the chapter "From the original block to a
    modern LLM block".
    """
    check.positive_int(d_model, "d_model", "swiglu_width")
    check.positive_int(multiple_of, "multiple_of", "swiglu_width")
    width = math.ceil(8 * d_model / 3)
    return multiple_of * math.ceil(width / multiple_of)


class SwiGLU(nn.Module):
    """The gated feed-forward of PaLM and Llama: ``down_proj(silu(gate_proj(x)) * up_proj(x))``, no biases.

    ``(..., D) -> (..., D)`` through a hidden width ``d_ff`` (see :func:`swiglu_width`).
    Taught in the chapter "From the original block to a modern LLM block".
    """

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        check.positive_int(d_model, "d_model", "SwiGLU")
        check.positive_int(d_ff, "d_ff", "SwiGLU")
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Derived(int):
    """An int computed from other fields of a config (``head_dim = d_model // num_heads`` when none is given).

    ``dataclasses.replace(config, d_model=...)`` passes every field back to the constructor, a derived one
    included; marked so, it is derived again from the new sizes instead of being taken as given.
    """


_CHOICES = {
    "norm": ("layer", "rms"),
    "placement": ("post", "pre"),
    "ffn": ("relu", "gelu", "gelu_tanh", "swiglu", "geglu"),
    "positions": ("sinusoidal", "learned", "rope", "alibi", "none"),
    "rope_layout": ("interleaved", "half"),
}


@dataclass(frozen=True)
class DecoderConfig:
    """Every switch between the 2017 block and a Llama-style one; checked when made.

    The 2017 block is the default: ``norm="layer"``, ``placement="post"``, ``ffn="relu"``,
    ``positions="sinusoidal"``, ``num_kv_heads=None`` (= ``num_heads``), ``bias=True``. A Llama-style
    block: ``norm="rms"``, ``placement="pre"``, ``ffn="swiglu"``, ``positions="rope"``,
    ``num_kv_heads < num_heads``, ``bias=False``. ``positions="none"`` gives no position information at
    all (only the causal mask tells the tokens apart by order): the control that shows what the other
    schemes add. ``d_ff`` defaults to ``4 · d_model``, or
    :func:`swiglu_width` for SwiGLU. ``ffn="gelu_tanh"`` is GELU's tanh approximation (GPT-2). ``rope_layout`` and ``rope_base`` apply to ``positions="rope"``:
    ``"interleaved"`` pairs (RoFormer, Meta's Llama code) or ``"half"`` (GPT-NeoX, Hugging Face), and
    the base of the angles ``θ_p = rope_base^(-2p/d_k)`` (10,000 in RoFormer, Llama 1 and 2; 500,000 in
    Llama 3). Taught in the chapter "From the original block to a modern LLM block".

    The switches of today's open models (chapter "Attention in today's open models"), all off by
    default, named as in the Hugging Face configs: ``qk_norm`` (RMSNorm of each head's queries and keys,
    before the rotation), ``norm_plus_one`` (every RMSNorm multiplies by ``1 + weight``; needs
    ``norm="rms"``), ``query_pre_attn_scalar`` (scores scaled by ``query_pre_attn_scalar ** -0.5``, not
    ``d_k ** -0.5``), ``attn_logit_softcapping`` (the scaled scores pass through ``cap · tanh(s / cap)``
    before the mask), ``sinks`` (a learned logit per head in the softmax's denominator only),
    ``sliding_window`` ``w`` with ``layer_types`` (one of ``"sliding_attention"``, ``"full_attention"`` per
    layer: a sliding layer's query ``i`` sees keys ``i - w < j ≤ i``; with a ``sliding_window`` and no
    ``layer_types`` every layer slides) and ``attn_output_gate`` (each head's output times
    ``sigmoid(gate)``, the gate computed by ``q_proj`` next to the query).

    What real checkpoints add (:func:`lessons_src.config_from_hf` sets them from a ``config.json``):
    ``head_dim`` (each head's width; by default ``d_model // num_heads``, but Qwen3, Mistral and Gemma set
    their own, so ``num_heads · head_dim`` may differ from ``d_model``), ``qkv_bias`` (biases on ``q_proj``,
    ``k_proj`` and ``v_proj`` only: Qwen 2.5; None follows ``bias``), ``tie_word_embeddings`` (``lm_head``
    shares the embedding matrix: GPT-2, SmolLM2, Llama 3.2 1B) and ``rope_scaling`` (a dict as in the
    Hugging Face config, one of :data:`lessons_src.rotary.ROPE_SCALINGS`: Llama 3.1's ``"llama3"`` or ``"linear"``).
    Gemma's: ``ffn="geglu"`` (SwiGLU's gate through tanh-GELU instead of SiLU), ``sandwich_norms`` (a
    block normalises each sublayer's output too: ``post_attention_layernorm`` after attention and
    ``pre_feedforward_layernorm``/``post_feedforward_layernorm`` around the MLP), ``scale_embeddings``
    (the embeddings times ``sqrt(d_model)``), ``final_logit_softcapping`` (``cap · tanh(logits / cap)``)
    and ``rope_local_base_freq`` (Gemma 3: the sliding layers rotate with this base and no scaling, the
    global ones with ``rope_base`` and ``rope_scaling``; with it, a window as wide as ``max_len`` is allowed,
    since such a layer still differs from a global one by its rotary angles).
    """

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_len: int = 128
    d_ff: int | None = None
    num_kv_heads: int | None = None
    norm: str = "layer"
    placement: str = "post"
    ffn: str = "relu"
    positions: str = "sinusoidal"
    rope_layout: str = "interleaved"
    rope_base: float = 10000.0
    bias: bool = True
    eps: float = 1e-5
    qk_norm: bool = False
    norm_plus_one: bool = False
    query_pre_attn_scalar: float | None = None
    attn_logit_softcapping: float | None = None
    sinks: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    attn_output_gate: bool = False
    head_dim: int | None = None
    qkv_bias: bool | None = None
    tie_word_embeddings: bool = False
    rope_scaling: dict | None = None
    sandwich_norms: bool = False
    scale_embeddings: bool = False
    final_logit_softcapping: float | None = None
    rope_local_base_freq: float | None = None

    def __post_init__(self) -> None:
        where = "DecoderConfig"
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "max_len"):
            check.positive_int(getattr(self, name), name, where)
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{where}: {name} must be one of {', '.join(map(repr, choices))}, "
                                 f"got {getattr(self, name)!r}")
        if self.head_dim is None or type(self.head_dim) is _Derived:
            check.divisible(self.d_model, "d_model", self.num_heads, "num_heads", where)
            object.__setattr__(self, "head_dim", _Derived(self.d_model // self.num_heads))
        else:
            check.positive_int(self.head_dim, "head_dim", where)
        if self.num_kv_heads is not None:
            check.positive_int(self.num_kv_heads, "num_kv_heads", where)
            check.divisible(self.num_heads, "num_heads", self.num_kv_heads, "num_kv_heads", where)
        if self.d_ff is not None:
            check.positive_int(self.d_ff, "d_ff", where)
        if not isinstance(self.bias, bool):
            raise ValueError(f"{where}: bias must be True or False, got {self.bias!r}")
        if self.positions == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"{where}: positions='rope' rotates pairs of features, so head_dim (d_model / "
                             f"num_heads unless given) must be even, got {self.head_dim}")
        if self.rope_layout != "interleaved" and self.positions != "rope":
            raise ValueError(f"{where}: rope_layout={self.rope_layout!r} only applies with positions='rope', "
                             f"not positions={self.positions!r}")
        base = self.rope_base
        if isinstance(base, bool) or not isinstance(base, (int, float)) or not 1 < base < math.inf:
            raise ValueError(f"{where}: rope_base must be a finite number > 1 (10000.0; Llama 3: 500000.0), got {base!r}")
        if base != 10000.0 and self.positions != "rope":
            raise ValueError(f"{where}: rope_base={base!r} only applies with positions='rope', "
                             f"not positions={self.positions!r}")
        self._check_todays_switches(where)
        self._check_checkpoint_fields(where)

    def _check_checkpoint_fields(self, where: str) -> None:
        for name in ("qkv_bias", "tie_word_embeddings", "sandwich_norms", "scale_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "qkv_bias" and value is None):
                raise ValueError(f"{where}: {name} must be True or False, got {value!r}")
        if self.rope_scaling is not None:
            if self.positions != "rope":
                raise ValueError(f"{where}: rope_scaling only applies with positions='rope', not {self.positions!r}")
            check_rope_scaling(self.rope_scaling, where)
        if self.sandwich_norms and self.placement != "pre":
            raise ValueError(f"{where}: sandwich_norms=True adds norms to a pre-norm block; placement is "
                             f"{self.placement!r}")
        cap, local = self.final_logit_softcapping, self.rope_local_base_freq
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < math.inf):
            raise ValueError(f"{where}: final_logit_softcapping must be None or a finite number > 0, got {cap!r}")
        if local is not None:
            if isinstance(local, bool) or not isinstance(local, (int, float)) or not 1 < local < math.inf:
                raise ValueError(f"{where}: rope_local_base_freq must be None or a finite number > 1, got {local!r}")
            if self.positions != "rope" or self.sliding_window is None:
                raise ValueError(f"{where}: rope_local_base_freq is the base of sliding layers' rotary angles; it "
                                 "needs positions='rope' and a sliding_window")

    def _check_todays_switches(self, where: str) -> None:
        for name in ("qk_norm", "norm_plus_one", "sinks", "attn_output_gate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{where}: {name} must be True or False, got {getattr(self, name)!r}")
        if self.norm_plus_one and self.norm != "rms" and not self.qk_norm:
            raise ValueError(f"{where}: norm_plus_one=True changes RMSNorms (1 + weight), but norm={self.norm!r} "
                             "and qk_norm=False leave none; use norm='rms' or qk_norm=True")
        for name in ("query_pre_attn_scalar", "attn_logit_softcapping"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 < value < math.inf):
                raise ValueError(f"{where}: {name} must be None or a finite number > 0, got {value!r}")
        if self.attn_logit_softcapping is not None and self.positions == "alibi":
            raise ValueError(f"{where}: attn_logit_softcapping with positions='alibi' is ambiguous: ALiBi's bias would "
                             "be added after the cap (the scores could leave ±cap); Gemma 2 caps rotary scores")
        if self.layer_types is not None:
            kinds = ("sliding_attention", "full_attention")
            if not isinstance(self.layer_types, tuple) or len(self.layer_types) != self.num_layers or any(
                    t not in kinds for t in self.layer_types):
                raise ValueError(f"{where}: layer_types must be a tuple of num_layers={self.num_layers} entries, each "
                                 f"'sliding_attention' or 'full_attention', got {self.layer_types!r}")
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ValueError(f"{where}: layer_types has sliding_attention layers but sliding_window is None; "
                                 "give the window's width")
        if self.sliding_window is not None:
            check.positive_int(self.sliding_window, "sliding_window", where)
            if self.layer_types is not None and "sliding_attention" not in self.layer_types:
                raise ValueError(f"{where}: sliding_window={self.sliding_window} but no layer in layer_types is "
                                 "'sliding_attention'; drop the window or make a layer slide")
            if self.sliding_window >= self.max_len and self.rope_local_base_freq is None:
                raise ValueError(f"{where}: sliding_window={self.sliding_window} >= max_len={self.max_len}: every "
                                 "query would see all its keys, a global layer; use 'full_attention' instead")

    def is_sliding(self, layer: int) -> bool:
        """Whether layer ``layer`` (from 0) is a sliding-window layer."""
        if self.sliding_window is None:
            return False
        return self.layer_types is None or self.layer_types[layer] == "sliding_attention"

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def hidden(self) -> int:
        if self.d_ff is not None:
            return self.d_ff
        return swiglu_width(self.d_model) if self.ffn in ("swiglu", "geglu") else 4 * self.d_model


def _norm(config: DecoderConfig) -> nn.Module:
    if config.norm == "rms":
        return RMSNorm(config.d_model, eps=config.eps, plus_one=config.norm_plus_one)
    return nn.LayerNorm(config.d_model, eps=config.eps, bias=config.bias)


def softmax_with_sink(scores: Tensor, sinks: Tensor) -> Tensor:
    """Softmax over the keys with one learned logit per head in the denominator only (gpt-oss).

    ``scores (B, H, L_q, L_k)``, ``sinks (H,)`` -> weights ``(B, H, L_q, L_k)``:
    ``exp(s_ij) / (exp(sink_h) + Σ_j' exp(s_ij'))``. Each row sums to less than 1; the rest is the sink's,
    which attends to nothing (no value). Masked scores are ``-inf``; a row with every key masked gives zeros.
    Taught in the chapter "Attention in today's open models".
    """
    if not isinstance(scores, Tensor) or scores.dim() != 4:
        raise ValueError(f"softmax_with_sink: scores must be (B, H, L_q, L_k), got {tuple(getattr(scores, 'shape', ()))}")
    if not isinstance(sinks, Tensor) or sinks.shape != (scores.size(1),):
        raise ValueError(f"softmax_with_sink: sinks must be (H,) = ({scores.size(1)},), got "
                         f"{tuple(getattr(sinks, 'shape', ()))}")
    sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:3], 1)  # (B, H, L_q, 1)
    logits = torch.cat([scores, sink], dim=-1)  # (B, H, L_q, L_k + 1)
    logits = logits - logits.amax(dim=-1, keepdim=True)  # the sink is finite: never -inf - -inf
    return logits.softmax(dim=-1)[..., :-1]  # (B, H, L_q, L_k): the sink's column dropped


class SlidingKVCache(KVCache):
    """A KV cache for a sliding-window layer of width ``w``: it keeps only the last ``w - 1`` positions.

    A query at position ``n`` sees keys ``n - w < j ≤ n``: itself and the ``w - 1`` before it, so older
    keys and values can be dropped. ``append`` returns the kept positions plus the new ones (what the new
    queries may need), then drops the rest. ``seq_len`` is the number of positions seen (where the next
    token sits, as for :class:`lessons_src.KVCache`); ``cached_len`` what is held, at most ``w - 1``.
    Taught in the chapter "Attention in today's open models".
    """

    def __init__(self, window: int) -> None:
        super().__init__()
        check.positive_int(window, "window", "SlidingKVCache")
        self.window = window
        self.dropped = 0

    @property
    def cached_len(self) -> int:
        """Number of positions held."""
        return 0 if self.key is None else self.key.size(2)

    @property
    def seq_len(self) -> int:
        """Number of positions seen, held or dropped."""
        return self.dropped + self.cached_len

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, H_kv, T_new, d_k)``; return the held and new positions, then keep the last ``w - 1``."""
        key, value = super().append(key, value)  # (B, H_kv, T, d_k)
        extra = key.size(2) - (self.window - 1)
        if extra > 0:
            self.key, self.value = key[:, :, extra:], value[:, :, extra:]  # (B, H_kv, w - 1, d_k)
            self.dropped += extra
        return key, value

    def reset(self) -> None:
        super().reset()
        self.dropped = 0


def cache_bytes(caches: list[KVCache]) -> int:
    """Bytes held by a model's KV caches: every cached key and value tensor. Taught in the chapter
    "Attention in today's open models"."""
    return sum(t.numel() * t.element_size() for c in caches for t in (c.key, c.value) if t is not None)


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads, rotary embeddings or ALiBi inside, and a KV cache.

    ``x (B, L_new, D)`` -> ``(B, L_new, D)``. With a cache, the new tokens continue the cached
    positions: rotary angles and ALiBi distances start at ``cache.seq_len``, and the causal mask is
    bottom-right aligned. Rotary embeddings turn the queries and keys of each head, never the values.
    Today's switches of :class:`DecoderConfig` act here: ``q_norm``/``k_norm`` before the rotation, the
    scale, the soft cap (on the scaled scores, before the mask), the sliding window (``layer`` tells
    whether this layer slides), the ``sinks`` and the output gate. Soft-capping and sinks change the
    softmax itself, so those layers compute the weights explicitly; the others call PyTorch's fused
    ``F.scaled_dot_product_attention``. Taught in the chapter "From the original block to a modern LLM
    block" (and today's switches in "Attention in today's open models").
    """

    def __init__(self, config: DecoderConfig, layer: int = 0) -> None:
        super().__init__()
        self.config = config
        self.window = config.sliding_window if config.is_sliding(layer) else None
        d, h_kv = config.head_dim, config.kv_heads
        q_out = config.num_heads * d * (2 if config.attn_output_gate else 1)  # [query_h | gate_h] per head
        qkv_bias = config.bias if config.qkv_bias is None else config.qkv_bias
        self.q_proj = nn.Linear(config.d_model, q_out, bias=qkv_bias)
        self.k_proj = nn.Linear(config.d_model, h_kv * d, bias=qkv_bias)
        self.v_proj = nn.Linear(config.d_model, h_kv * d, bias=qkv_bias)
        self.o_proj = nn.Linear(config.num_heads * d, config.d_model, bias=config.bias)
        if config.qk_norm:  # one RMSNorm of head_dim, shared by the heads
            self.q_norm = RMSNorm(d, eps=config.eps, plus_one=config.norm_plus_one)
            self.k_norm = RMSNorm(d, eps=config.eps, plus_one=config.norm_plus_one)
        if config.sinks:
            self.sinks = nn.Parameter(torch.zeros(config.num_heads))  # (H,): one logit per head
        if config.positions == "rope":
            cos, sin = self.rotary_tables()
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        scalar = config.head_dim if config.query_pre_attn_scalar is None else config.query_pre_attn_scalar
        self.scale = float(scalar) ** -0.5

    def rotary_tables(self) -> tuple[Tensor, Tensor]:
        """This layer's cos and sin ``(max_len, head_dim / 2)``: ``rope_base`` and ``rope_scaling``, or on a
        sliding layer with ``rope_local_base_freq`` (Gemma 3) that base, unscaled."""
        c = self.config
        base, scaling = c.rope_base, c.rope_scaling
        if self.window is not None and c.rope_local_base_freq is not None:
            base, scaling = c.rope_local_base_freq, None
        return rope_frequencies(c.head_dim, c.max_len, base=base, scaling=scaling)

    def _project(self, x: Tensor, past: int) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        c = self.config
        B, L_new, _ = x.shape
        gate = None
        q = self.q_proj(x).view(B, L_new, c.num_heads, -1)  # (B, L_new, H, d_k) or (B, L_new, H, 2 d_k)
        if c.attn_output_gate:
            q, gate = q.chunk(2, dim=-1)  # (B, L_new, H, d_k) each
            gate = gate.reshape(B, L_new, c.num_heads * c.head_dim)  # (B, L_new, H d_k)
        k = self.k_proj(x).view(B, L_new, c.kv_heads, c.head_dim)  # (B, L_new, H_kv, d_k)
        v = self.v_proj(x).view(B, L_new, c.kv_heads, c.head_dim).transpose(1, 2)  # (B, H_kv, L_new, d_k)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, L_new, d_k), (B, H_kv, L_new, d_k)
        if c.positions == "rope":  # queries and keys only, at their absolute positions
            q = apply_rope(q, self.rope_cos, self.rope_sin, past, layout=c.rope_layout)
            k = apply_rope(k, self.rope_cos, self.rope_sin, past, layout=c.rope_layout)
        return q, k, v, gate

    def _mask(self, L_new: int, T: int, total: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        """True = may attend, or ALiBi's additive bias: (L_new, T) or (H, L_new, T); the T keys are the last
        of the ``total`` positions (a sliding cache may have dropped the first ones)."""
        query_pos = torch.arange(total - L_new, total, device=device)  # (L_new,)
        key_pos = torch.arange(total - T, total, device=device)  # (T,)
        allowed = key_pos[None, :] <= query_pos[:, None]  # (L_new, T): causal
        if self.window is not None:
            allowed = allowed & (key_pos[None, :] > query_pos[:, None] - self.window)  # i - w < j
        if self.config.positions == "alibi":
            bias = alibi_bias(self.config.num_heads, L_new, total, device=device)[..., total - T:]  # (H, L_new, T)
            return bias.to(dtype).masked_fill(~allowed, float("-inf"))
        return allowed

    def _weights(self, q: Tensor, k: Tensor, mask: Tensor) -> Tensor:
        """The attention weights (B, H, L_new, T), computed explicitly (soft cap, sinks)."""
        c = self.config
        scores = q @ k.transpose(-2, -1) * self.scale  # (B, H, L_new, T)
        if c.attn_logit_softcapping is not None:
            cap = c.attn_logit_softcapping
            scores = cap * torch.tanh(scores / cap)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
        if c.sinks:
            return softmax_with_sink(scores, self.sinks)
        return scores.softmax(dim=-1)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        c = self.config
        B, L_new, _ = x.shape
        past = 0 if cache is None else cache.seq_len
        q, k, v, gate = self._project(x, past)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, T, d_k), T = past + L_new (or less for a sliding cache)
        group = c.num_heads // c.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, T, d_k)
        mask = self._mask(L_new, k.size(2), past + L_new, x.device, q.dtype)
        if c.sinks or c.attn_logit_softcapping is not None:
            out = self._weights(q, k, mask) @ v  # (B, H, L_new, d_k)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)  # (B, H, L_new, d_k)
        out = out.transpose(1, 2).reshape(B, L_new, c.num_heads * c.head_dim)  # (B, L_new, H d_k)
        if gate is not None:
            out = out * torch.sigmoid(gate)
        return self.o_proj(out)

    def attention_weights(self, x: Tensor) -> Tensor:
        """The attention weights ``(B, H, L, L)`` of ``x (B, L, D)`` from position 0, without a cache
        (each row sums to 1, or less with sinks)."""
        c = self.config
        q, k, _, _ = self._project(x, 0)
        k = k.repeat_interleave(c.num_heads // c.kv_heads, dim=1)  # (B, H, L, d_k)
        L = x.size(1)
        return self._weights(q, k, self._mask(L, L, L, x.device, q.dtype))


class MLP(nn.Module):
    """The feed-forward of a block: ``down_proj(act(up_proj(x)))`` for ReLU or GELU, or :class:`SwiGLU`'s
    ``down_proj(silu(gate_proj(x)) * up_proj(x))``. Taught in the chapter "From the original block to a
    modern LLM block".
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.ffn = config.ffn
        if config.ffn in ("swiglu", "geglu"):
            self.gate_proj = nn.Linear(config.d_model, config.hidden, bias=config.bias)
        self.up_proj = nn.Linear(config.d_model, config.hidden, bias=config.bias)
        self.down_proj = nn.Linear(config.hidden, config.d_model, bias=config.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.ffn == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        if self.ffn == "geglu":  # Gemma
            return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))
        hidden = self.up_proj(x)
        if self.ffn == "relu":
            return self.down_proj(F.relu(hidden))
        return self.down_proj(F.gelu(hidden, approximate="tanh" if self.ffn == "gelu_tanh" else "none"))


class DecoderLayer(nn.Module):
    """One decoder-only block: attention then MLP, each with a residual and a norm.

    ``placement="post"`` (2017): ``x = norm(x + sublayer(x))``; ``"pre"``: ``x = x + sublayer(norm(x))``.
    ``input_layernorm`` belongs to the attention, ``post_attention_layernorm`` to the MLP (Llama's
    names, whatever the placement). Taught in the chapter "From the original block to a modern LLM block".
    """

    def __init__(self, config: DecoderConfig, layer: int = 0) -> None:
        super().__init__()
        self.pre = config.placement == "pre"
        self.self_attn = Attention(config, layer)
        self.mlp = MLP(config)
        self.input_layernorm = _norm(config)
        self.post_attention_layernorm = _norm(config)
        self.sandwich = config.sandwich_norms
        if self.sandwich:  # Gemma 2 and 3: post_attention_layernorm normalises the attention's output
            self.pre_feedforward_layernorm = _norm(config)
            self.post_feedforward_layernorm = _norm(config)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        if self.sandwich:
            x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cache))
            return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
        if self.pre:
            x = x + self.self_attn(self.input_layernorm(x), cache)
            return x + self.mlp(self.post_attention_layernorm(x))
        x = self.input_layernorm(x + self.self_attn(x, cache))
        return self.post_attention_layernorm(x + self.mlp(x))


class DecoderLM(nn.Module):
    """A decoder-only language model built from :class:`DecoderConfig`: ``tokens (B, L) -> logits (B, L, V)``.

    ``embed_tokens``, then sinusoidal or learned positions added (``embed_positions``, for those
    two switches; rotary, ALiBi and ``"none"`` add nothing here), ``num_layers``
    :class:`DecoderLayer` s, a final ``norm`` with pre-LN placement (post-LN blocks end normalised
    already), and ``lm_head``. ``forward(tokens, caches)`` with one
    :class:`lessons_src.KVCache` per layer decodes incrementally: the new tokens continue the cached
    positions. Taught in the chapter "From the original block to a modern LLM block".
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        if not isinstance(config, DecoderConfig):
            raise ValueError(f"DecoderLM: config must be a DecoderConfig, got {type(config).__name__}")
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        if config.positions == "learned":
            self.embed_positions = nn.Embedding(config.max_len, config.d_model)
        elif config.positions == "sinusoidal":
            table = sinusoidal_positional_encoding(config.max_len, config.d_model)
            self.register_buffer("embed_positions", table, persistent=False)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = _norm(config) if config.placement == "pre" else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_word_embeddings:  # one matrix, read in and written out
            self.lm_head.weight = self.embed_tokens.weight
            # drawn as GPT-2 draws them: nn.Embedding's standard deviation of 1 would start the logits at
            # about sqrt(d_model) and the loss near 60 nats; learned positions beside them at 0.01, or they
            # would drown the tokens (the zoo's code-gpt2 with positions at std 1 stood at 2.34 nats per
            # character after 750 steps, against 1.58 drawn so)
            nn.init.normal_(self.embed_tokens.weight, std=0.02)
            if config.positions == "learned":
                nn.init.normal_(self.embed_positions.weight, std=0.01)

    def forward(self, tokens: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        c = self.config
        check.tokens(tokens, "DecoderLM")
        if caches is not None and len(caches) != c.num_layers:
            raise ValueError(f"DecoderLM: {len(caches)} caches for {c.num_layers} layers; give one KVCache per layer")
        for i, cache in enumerate(caches or []):
            window = self.layers[i].self_attn.window
            if isinstance(cache, SlidingKVCache) and cache.window != window:
                raise ValueError(f"DecoderLM: layer {i} has sliding_window={window} but its cache keeps a window of "
                                 f"{cache.window}; make the caches with new_caches()")
        past = 0 if caches is None else caches[0].seq_len
        end = past + tokens.size(1)
        if end > c.max_len:
            raise ValueError(f"DecoderLM: positions up to {end - 1}, beyond max_len={c.max_len}")
        x = self.embed_tokens(tokens)  # (B, L, D)
        if c.scale_embeddings:  # Gemma: sqrt(d_model), rounded to the weights' dtype as Gemma's code does
            x = x * torch.tensor(c.d_model**0.5, dtype=x.dtype)
        if c.positions == "learned":
            x = x + self.embed_positions.weight[past:end]
        elif c.positions == "sinusoidal":
            x = x + self.embed_positions[past:end].to(x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[i])
        logits = self.lm_head(self.norm(x))  # (B, L, V)
        if c.final_logit_softcapping is not None:  # Gemma 2
            logits = c.final_logit_softcapping * torch.tanh(logits / c.final_logit_softcapping)
        return logits

    def new_caches(self) -> list[KVCache]:
        """One empty cache per layer: a :class:`SlidingKVCache` for a sliding-window layer, a
        :class:`lessons_src.KVCache` for a global one."""
        return [KVCache() if layer.self_attn.window is None else SlidingKVCache(layer.self_attn.window)
                for layer in self.layers]

    @classmethod
    def from_llama_state_dict(cls, state_dict: dict[str, Tensor], config: DecoderConfig) -> DecoderLM:
        """A :class:`DecoderLM` holding a Hugging Face ``LlamaForCausalLM`` checkpoint, in the checkpoint's dtype.

        ``config`` must have the switches of ``HF_LLAMA_SWITCHES`` (``rope_layout="half"`` among them)
        and the checkpoint's sizes: ``d_model`` = ``hidden_size``, ``num_heads`` =
        ``num_attention_heads``, ``num_kv_heads`` = ``num_key_value_heads``, ``d_ff`` =
        ``intermediate_size``, ``eps`` = ``rms_norm_eps`` and ``rope_base`` = ``rope_theta`` (500,000 for
        Llama 3). The names go through :func:`rename_hf_llama`, and ``load_state_dict`` (strict) names
        any weight that is missing or left over. The base is not stored in recent checkpoints: a wrong
        one loads without error and gives wrong logits. Llama 3.1 and later also rescale the rotary
        frequencies (``rope_type="llama3"``): give ``config`` the checkpoint's ``rope_scaling``
        (:func:`lessons_src.from_pretrained` reads it from the checkpoint's config).
        Taught in the chapter "From the original block to a modern LLM block".
        """
        if not isinstance(config, DecoderConfig):
            raise ValueError(f"from_llama_state_dict: config must be a DecoderConfig, got {type(config).__name__}")
        wrong = {k: getattr(config, k) for k, v in HF_LLAMA_SWITCHES.items() if getattr(config, k) != v}
        if wrong:
            raise ValueError(f"from_llama_state_dict: a Hugging Face Llama checkpoint needs {HF_LLAMA_SWITCHES}; "
                             f"config has {wrong}")
        renamed = rename_hf_llama(state_dict)
        model = cls(config).to(renamed["embed_tokens.weight"].dtype)
        model.load_state_dict(renamed)
        return model


#: The DecoderConfig switches of a Hugging Face ``LlamaForCausalLM``: pre-norm RMSNorm, SwiGLU, no biases,
#: rotary embeddings in the rotate-half layout (Hugging Face's conversion script permuted the columns of
#: Meta's W_Q and W_K, which rotate interleaved pairs, so that rotate-half gives the same scores).
HF_LLAMA_SWITCHES = {"norm": "rms", "placement": "pre", "ffn": "swiglu", "positions": "rope", "rope_layout": "half",
                     "bias": False}


def rename_hf_llama(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """A Hugging Face ``LlamaForCausalLM`` state dict under :class:`DecoderLM`'s names.

    Every name below ``model.`` loses that prefix (``model.layers.0.self_attn.q_proj.weight`` becomes
    ``layers.0.self_attn.q_proj.weight``); ``lm_head.weight`` stays; a checkpoint that ties the output
    to the embeddings and leaves ``lm_head.weight`` out (Llama 3.2 1B and 3B) gets the embedding matrix;
    the rotary frequencies that older checkpoints store (``...rotary_emb.inv_freq``) are dropped, since
    DecoderLM computes them from ``rope_base``. The tensors are not copied. Taught in the chapter "From
    the original block to a modern LLM block".
    """
    if not isinstance(state_dict, dict) or "model.embed_tokens.weight" not in state_dict:
        raise ValueError("rename_hf_llama: expected a LlamaForCausalLM state dict, with 'model.embed_tokens.weight'")
    renamed = {name.removeprefix("model."): weight for name, weight in state_dict.items()
               if not name.endswith("rotary_emb.inv_freq")}
    renamed.setdefault("lm_head.weight", renamed["embed_tokens.weight"])  # tied embeddings
    return renamed
