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

Taught in the chapter "From the original block to a modern LLM block".
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
from .masks import causal_mask
from .positional import sinusoidal_positional_encoding
from .rotary import apply_rope, rope_frequencies

__all__ = ["RMSNorm", "SwiGLU", "swiglu_width", "DecoderConfig", "Attention", "MLP", "DecoderLayer", "DecoderLM",
           "HF_LLAMA_SWITCHES", "rename_hf_llama"]


class RMSNorm(nn.Module):
    """Root-mean-square normalisation: ``x / sqrt(mean(x²) + eps) * weight`` over the last dim.

    No mean is subtracted and there is no bias (Zhang and Sennrich 2019). Equal to
    ``torch.nn.RMSNorm(d_model, eps=eps)``. ``(..., D) -> (..., D)``. Taught in the chapter "From the
    original block to a modern LLM block".
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        check.positive_int(d_model, "d_model", "RMSNorm")
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
            raise ValueError(f"RMSNorm: eps must be a number > 0, got {eps!r}")
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.size(-1) != self.weight.numel():
            raise ValueError(f"RMSNorm: x must end in d_model={self.weight.numel()}, got "
                             f"{tuple(getattr(x, 'shape', ()))}")
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x / rms * self.weight


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


_CHOICES = {
    "norm": ("layer", "rms"),
    "placement": ("post", "pre"),
    "ffn": ("relu", "gelu", "swiglu"),
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
    :func:`swiglu_width` for SwiGLU. ``rope_layout`` and ``rope_base`` apply to ``positions="rope"``:
    ``"interleaved"`` pairs (RoFormer, Meta's Llama code) or ``"half"`` (GPT-NeoX, Hugging Face), and
    the base of the angles ``θ_p = rope_base^(-2p/d_k)`` (10,000 in RoFormer, Llama 1 and 2; 500,000 in
    Llama 3). Taught in the chapter "From the original block to a modern LLM block".
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

    def __post_init__(self) -> None:
        where = "DecoderConfig"
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "max_len"):
            check.positive_int(getattr(self, name), name, where)
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{where}: {name} must be one of {', '.join(map(repr, choices))}, "
                                 f"got {getattr(self, name)!r}")
        check.divisible(self.d_model, "d_model", self.num_heads, "num_heads", where)
        if self.num_kv_heads is not None:
            check.positive_int(self.num_kv_heads, "num_kv_heads", where)
            check.divisible(self.num_heads, "num_heads", self.num_kv_heads, "num_kv_heads", where)
        if self.d_ff is not None:
            check.positive_int(self.d_ff, "d_ff", where)
        if not isinstance(self.bias, bool):
            raise ValueError(f"{where}: bias must be True or False, got {self.bias!r}")
        if self.positions == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"{where}: positions='rope' rotates pairs of features, so head_dim = d_model / "
                             f"num_heads must be even, got {self.head_dim}")
        if self.rope_layout != "interleaved" and self.positions != "rope":
            raise ValueError(f"{where}: rope_layout={self.rope_layout!r} only applies with positions='rope', "
                             f"not positions={self.positions!r}")
        base = self.rope_base
        if isinstance(base, bool) or not isinstance(base, (int, float)) or not 1 < base < math.inf:
            raise ValueError(f"{where}: rope_base must be a finite number > 1 (10000.0; Llama 3: 500000.0), got {base!r}")
        if base != 10000.0 and self.positions != "rope":
            raise ValueError(f"{where}: rope_base={base!r} only applies with positions='rope', "
                             f"not positions={self.positions!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def hidden(self) -> int:
        if self.d_ff is not None:
            return self.d_ff
        return swiglu_width(self.d_model) if self.ffn == "swiglu" else 4 * self.d_model


def _norm(config: DecoderConfig) -> nn.Module:
    if config.norm == "rms":
        return RMSNorm(config.d_model, eps=config.eps)
    return nn.LayerNorm(config.d_model, eps=config.eps, bias=config.bias)


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads, rotary embeddings or ALiBi inside, and a KV cache.

    ``x (B, L_new, D)`` -> ``(B, L_new, D)``. With a cache, the new tokens continue the cached
    positions: rotary angles and ALiBi distances start at ``cache.seq_len``, and the causal mask is
    bottom-right aligned. Rotary embeddings turn the queries and keys of each head, never the values.
    Taught in the chapter "From the original block to a modern LLM block".
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        d, h_kv = config.head_dim, config.kv_heads
        self.q_proj = nn.Linear(config.d_model, config.num_heads * d, bias=config.bias)
        self.k_proj = nn.Linear(config.d_model, h_kv * d, bias=config.bias)
        self.v_proj = nn.Linear(config.d_model, h_kv * d, bias=config.bias)
        self.o_proj = nn.Linear(config.num_heads * d, config.d_model, bias=config.bias)
        if config.positions == "rope":
            cos, sin = rope_frequencies(d, config.max_len, base=config.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        c = self.config
        B, L_new, _ = x.shape
        past = 0 if cache is None else cache.seq_len
        q = self.q_proj(x).view(B, L_new, c.num_heads, c.head_dim).transpose(1, 2)  # (B, H, L_new, d_k)
        k = self.k_proj(x).view(B, L_new, c.kv_heads, c.head_dim).transpose(1, 2)  # (B, H_kv, L_new, d_k)
        v = self.v_proj(x).view(B, L_new, c.kv_heads, c.head_dim).transpose(1, 2)  # (B, H_kv, L_new, d_k)
        if c.positions == "rope":  # queries and keys only, at their absolute positions
            q = apply_rope(q, self.rope_cos, self.rope_sin, past, layout=c.rope_layout)
            k = apply_rope(k, self.rope_cos, self.rope_sin, past, layout=c.rope_layout)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, T, d_k), T = past + L_new
        group = c.num_heads // c.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, T, d_k)
        total = past + L_new
        allowed = causal_mask(L_new, total, device=x.device)  # (L_new, T)
        if c.positions == "alibi":
            mask = alibi_bias(c.num_heads, L_new, total, device=x.device).to(q.dtype)  # (H, L_new, T)
            mask = mask.masked_fill(~allowed, float("-inf"))
        else:
            mask = allowed
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, L_new, d_k)
        return self.o_proj(out.transpose(1, 2).reshape(B, L_new, c.num_heads * c.head_dim))


class MLP(nn.Module):
    """The feed-forward of a block: ``down_proj(act(up_proj(x)))`` for ReLU or GELU, or :class:`SwiGLU`'s
    ``down_proj(silu(gate_proj(x)) * up_proj(x))``. Taught in the chapter "From the original block to a
    modern LLM block".
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.ffn = config.ffn
        if config.ffn == "swiglu":
            self.gate_proj = nn.Linear(config.d_model, config.hidden, bias=config.bias)
        self.up_proj = nn.Linear(config.d_model, config.hidden, bias=config.bias)
        self.down_proj = nn.Linear(config.hidden, config.d_model, bias=config.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.ffn == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        hidden = self.up_proj(x)
        return self.down_proj(F.relu(hidden) if self.ffn == "relu" else F.gelu(hidden))


class DecoderLayer(nn.Module):
    """One decoder-only block: attention then MLP, each with a residual and a norm.

    ``placement="post"`` (2017): ``x = norm(x + sublayer(x))``; ``"pre"``: ``x = x + sublayer(norm(x))``.
    ``input_layernorm`` belongs to the attention, ``post_attention_layernorm`` to the MLP (Llama's
    names, whatever the placement). Taught in the chapter "From the original block to a modern LLM block".
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.pre = config.placement == "pre"
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = _norm(config)
        self.post_attention_layernorm = _norm(config)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
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
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = _norm(config) if config.placement == "pre" else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, tokens: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        c = self.config
        check.tokens(tokens, "DecoderLM")
        if caches is not None and len(caches) != c.num_layers:
            raise ValueError(f"DecoderLM: {len(caches)} caches for {c.num_layers} layers; give one KVCache per layer")
        past = 0 if caches is None else caches[0].seq_len
        end = past + tokens.size(1)
        if end > c.max_len:
            raise ValueError(f"DecoderLM: positions up to {end - 1}, beyond max_len={c.max_len}")
        x = self.embed_tokens(tokens)  # (B, L, D)
        if c.positions == "learned":
            x = x + self.embed_positions.weight[past:end]
        elif c.positions == "sinusoidal":
            x = x + self.embed_positions[past:end].to(x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))  # (B, L, V)

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
        frequencies (``rope_type="llama3"``), which this model does not do.
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
