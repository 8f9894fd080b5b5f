"""Multi-head latent attention (MLA, DeepSeek-V2 and V3): keys and values compressed jointly into one
small latent per token, a decoupled rotary key shared by all heads, and a decode that never expands the
cache.

A sibling of :mod:`lessons_src.llm`, not a switch of :class:`lessons_src.DecoderConfig`: MLA changes what
the attention holds (a latent ``c`` of ``kv_lora_rank`` numbers and one rotary key of
``qk_rope_head_dim`` per token, instead of ``H_kv`` keys and values), so its sizes are its own
(:class:`MLAConfig`), while the rest of the block is the Llama-style one of the previous chapter (pre-norm
:class:`lessons_src.RMSNorm`, :class:`lessons_src.SwiGLU`, no biases), as in DeepSeek's dense layers.

- :class:`MLAConfig`: the sizes, checked once; a setting that makes no sense is named;
- :class:`LatentCache`: the cache of one layer, the latent ``(B, T, d_c)`` and the rotary key ``(B, T, d_R)``;
- :class:`MultiHeadLatentAttention`: ``q_proj`` (or ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj`` when
  the query is compressed too), ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``:
  DeepSeek's names. ``forward(x, cache, absorbed=False)`` projects the cached latent up to per-head keys
  and values (the plain form); ``absorbed=True`` folds the key up-projection ``W_UK`` into the query and
  the value up-projection ``W_UV`` into the output, so the scores are taken against the latent itself;
- :func:`absorbed_scores`: the scores of queries against a cached latent and rotary key, the absorbed way;
- :class:`MLADecoderLayer`, :class:`MLADecoderLM`: the block and the model, with the names of a Hugging Face
  ``DeepseekV3ForCausalLM`` whose layers are all dense (``first_k_dense_replace >= num_hidden_layers``);
  :func:`rename_hf_deepseek` and :meth:`MLADecoderLM.from_deepseek_state_dict` load one. The routed
  mixture-of-experts feed-forward of DeepSeek's other layers is not here;
- :func:`mla_cache_elements`: numbers cached per token and layer for MHA, GQA, MQA and MLA.

The score of query ``i`` and key ``j`` in head ``h`` is
``(q^C_{h,i} · k^C_{h,j} + q^R_{h,i} · k^R_j) / sqrt(d_k + d_R)`` with ``k^C_{h,j} = c_j W_UK^(h)`` and
``k^R_j`` rotated at position ``j`` (DeepSeek-V2, eqs. 9-19). Taught in the chapter "Multi-head latent
attention".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _validate as check
from .llm import RMSNorm, SwiGLU, swiglu_width
from .masks import causal_mask
from .rotary import apply_rope, check_rope_scaling, rope_frequencies, yarn_mscale

__all__ = ["MLAConfig", "LatentCache", "MultiHeadLatentAttention", "MLADecoderLayer", "MLADecoderLM",
           "absorbed_scores", "mla_cache_elements", "rename_hf_deepseek", "LATENT_NORM_EPS"]

#: The eps of ``q_a_layernorm`` and ``kv_a_layernorm``: DeepSeek's code builds them with its RMSNorm's
#: default, 1e-6, whatever ``rms_norm_eps`` the block norms use.
LATENT_NORM_EPS = 1e-6


@dataclass(frozen=True)
class MLAConfig:
    """The sizes of a decoder with multi-head latent attention; checked when made.

    ``kv_lora_rank`` is d_c, the latent's width; ``qk_nope_head_dim`` d_k, the part of each head's query
    and key without positions (its key comes from the latent); ``qk_rope_head_dim`` d_R, the rotary part
    (its key is one per token, shared by every head); ``v_head_dim`` d_v, each head's value width;
    ``q_lora_rank`` d_c', the query's latent width, or None for a plain ``q_proj``. ``rope_scaling``: a
    long-context checkpoint's (:data:`lessons_src.rotary.ROPE_SCALINGS`: DeepSeek-V3's is YaRN, which also
    rescales the softmax, :attr:`softmax_scale`); ``rope_interleave``: the rotary pairs adjacent (DeepSeek's
    ``True``) or in halves (``False``). DeepSeek's names, so a
    ``DeepseekV3Config``'s values carry over (``d_model`` = ``hidden_size``, ``num_heads`` =
    ``num_attention_heads``, ``d_ff`` = ``intermediate_size``, ``eps`` = ``rms_norm_eps``, ``rope_base`` =
    ``rope_theta``). ``d_ff`` defaults to :func:`lessons_src.swiglu_width`. Taught in the chapter
    "Multi-head latent attention".
    """

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_len: int = 128
    d_ff: int | None = None
    kv_lora_rank: int = 16
    q_lora_rank: int | None = None
    qk_nope_head_dim: int = 16
    qk_rope_head_dim: int = 8
    v_head_dim: int = 16
    rope_base: float = 10000.0
    eps: float = 1e-6
    rope_scaling: dict | None = None
    rope_interleave: bool = True

    def __post_init__(self) -> None:
        where = "MLAConfig"
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "max_len", "kv_lora_rank",
                     "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            check.positive_int(getattr(self, name), name, where)
        for name in ("d_ff", "q_lora_rank"):
            if getattr(self, name) is not None:
                check.positive_int(getattr(self, name), name, where)
        if self.qk_rope_head_dim % 2 != 0:
            raise ValueError(f"{where}: qk_rope_head_dim is rotated in pairs, so it must be even, "
                             f"got {self.qk_rope_head_dim}")
        expanded = self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
        if self.kv_lora_rank >= expanded:
            raise ValueError(f"{where}: kv_lora_rank={self.kv_lora_rank} is not smaller than the keys and values "
                             f"it stands for (num_heads * (qk_nope_head_dim + v_head_dim) = {expanded}): "
                             f"a latent that compresses nothing")
        if self.q_lora_rank is not None and self.q_lora_rank >= self.d_model:
            raise ValueError(f"{where}: q_lora_rank={self.q_lora_rank} is not smaller than d_model={self.d_model}: "
                             f"a query latent that compresses nothing; use q_lora_rank=None for a plain q_proj")
        base = self.rope_base
        if isinstance(base, bool) or not isinstance(base, (int, float)) or not 1 < base < math.inf:
            raise ValueError(f"{where}: rope_base must be a finite number > 1, got {base!r}")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not self.eps > 0:
            raise ValueError(f"{where}: eps must be a number > 0, got {self.eps!r}")
        if self.rope_scaling is not None:
            check_rope_scaling(self.rope_scaling, where)
        if not isinstance(self.rope_interleave, bool):
            raise ValueError(f"{where}: rope_interleave must be True or False, got {self.rope_interleave!r}")

    @property
    def softmax_scale(self) -> float:
        """``1/sqrt(d_k + d_R)``, times DeepSeek's YaRN correction ``mscale(factor, mscale_all_dim)²`` when the
        rotary angles are stretched by YaRN with ``mscale_all_dim``."""
        scale = self.qk_head_dim**-0.5
        s = self.rope_scaling
        if s is not None and s["rope_type"] == "yarn" and s.get("mscale_all_dim"):
            scale *= yarn_mscale(s["factor"], s["mscale_all_dim"]) ** 2
        return scale

    @property
    def qk_head_dim(self) -> int:
        """d_k + d_R: the width of each head's query and key, and of the softmax scale 1/sqrt(it)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def hidden(self) -> int:
        return self.d_ff if self.d_ff is not None else swiglu_width(self.d_model)


class LatentCache:
    """What MLA caches for one layer: the latent ``c (B, T, d_c)`` and the rotary key ``k^R (B, T, d_R)``.

    No per-head key or value is ever stored: ``d_c + d_R`` numbers per token, whatever the number of
    heads. ``append`` concatenates along T and returns everything cached. Taught in the chapter
    "Multi-head latent attention".
    """

    def __init__(self) -> None:
        self.latent: Tensor | None = None
        self.rope_key: Tensor | None = None

    @property
    def seq_len(self) -> int:
        """Number of cached positions T."""
        return 0 if self.latent is None else self.latent.size(1)

    def append(self, latent: Tensor, rope_key: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, T_new, d_c)`` latents and ``(B, T_new, d_R)`` rotary keys; return all cached so far."""
        if not isinstance(latent, Tensor) or not isinstance(rope_key, Tensor) or latent.dim() != 3 \
                or rope_key.dim() != 3 or latent.shape[:2] != rope_key.shape[:2]:
            raise ValueError("LatentCache.append: latent and rope_key must be (B, T_new, d_c) and (B, T_new, d_R) "
                             f"with matching (B, T_new), got {tuple(getattr(latent, 'shape', ()))} and "
                             f"{tuple(getattr(rope_key, 'shape', ()))}")
        if self.latent is None or self.rope_key is None:
            self.latent, self.rope_key = latent, rope_key
        else:
            if latent.size(0) != self.latent.size(0) or latent.size(2) != self.latent.size(2) \
                    or rope_key.size(2) != self.rope_key.size(2):
                raise ValueError(f"LatentCache.append: new latent {tuple(latent.shape)} and rotary key "
                                 f"{tuple(rope_key.shape)} do not continue the cached {tuple(self.latent.shape)} and "
                                 f"{tuple(self.rope_key.shape)} (B, d_c and d_R must match; reset() for a new batch)")
            self.latent = torch.cat([self.latent, latent], dim=1)  # (B, T, d_c)
            self.rope_key = torch.cat([self.rope_key, rope_key], dim=1)  # (B, T, d_R)
        return self.latent, self.rope_key

    def reset(self) -> None:
        """Forget every cached position (start a new sequence)."""
        self.latent = None
        self.rope_key = None


def absorbed_scores(query_nope: Tensor, query_rope: Tensor, latent: Tensor, rope_key: Tensor,
                    w_uk: Tensor) -> Tensor:
    """Scaled scores of queries against a cached latent, with ``W_UK`` folded into the query.

    ``query_nope (B, H, L, d_k)`` and ``query_rope (B, H, L, d_R)`` (already rotated), the cached
    ``latent (B, T, d_c)`` and ``rope_key (B, T, d_R)`` (already rotated), and the key up-projection
    ``w_uk (H, d_k, d_c)``, as ``kv_b_proj`` stores it: ``w_uk[h]`` is the transpose of the chapter's
    ``W_UK^(h)``, which is ``(d_c, d_k)``. Returns ``(B, H, L, T)``:
    ``((q^C W_UK^(h)T) · c_j + q^R · k^R_j) / sqrt(d_k + d_R)``, equal to the scores against the keys
    ``k^C_{h,j} = c_j W_UK^(h)`` that are never built. Before the mask and the softmax. Taught in the
    chapter "Multi-head latent attention".
    """
    where = "absorbed_scores"
    for name, t, dims in (("query_nope", query_nope, 4), ("query_rope", query_rope, 4), ("latent", latent, 3),
                          ("rope_key", rope_key, 3), ("w_uk", w_uk, 3)):
        if not isinstance(t, Tensor) or t.dim() != dims:
            raise ValueError(f"{where}: {name} must be a {dims}-d tensor, got {tuple(getattr(t, 'shape', ()))}")
    B, H, L, d_nope = query_nope.shape
    if query_rope.shape[:3] != (B, H, L):
        raise ValueError(f"{where}: query_rope {tuple(query_rope.shape)} must be (B, H, L, d_R) with the "
                         f"(B, H, L) of query_nope {tuple(query_nope.shape)}")
    if latent.size(0) != B or rope_key.shape[:2] != latent.shape[:2] or rope_key.size(2) != query_rope.size(3):
        raise ValueError(f"{where}: latent {tuple(latent.shape)} and rope_key {tuple(rope_key.shape)} must be "
                         f"(B={B}, T, d_c) and (B={B}, T, d_R={query_rope.size(3)})")
    if w_uk.shape != (H, d_nope, latent.size(2)):
        raise ValueError(f"{where}: w_uk must be (H={H}, d_k={d_nope}, d_c={latent.size(2)}), "
                         f"got {tuple(w_uk.shape)}")
    query_latent = torch.einsum("bhln,hnc->bhlc", query_nope, w_uk)  # (B, H, L, d_c): W_UK folded in
    # Every head reads the same latents and rotary keys, as the heads of MQA read one key head:
    # (B, H·L, d_c) @ (B, d_c, T), with no copy of the cache per head.
    scores = torch.einsum("bhlc,btc->bhlt", query_latent, latent)  # (B, H, L, T)
    scores = scores + torch.einsum("bhlr,btr->bhlt", query_rope, rope_key)  # (B, H, L, T): shared rotary key
    return scores / math.sqrt(d_nope + query_rope.size(3))


class MultiHeadLatentAttention(nn.Module):
    """Causal multi-head latent attention with a :class:`LatentCache`: ``x (B, L_new, D) -> (B, L_new, D)``.

    ``kv_a_proj_with_mqa`` maps each token to ``[c | k^R]`` (d_c + d_R numbers); ``kv_a_layernorm``
    normalises c only; ``kv_b_proj`` holds, per head, the key and value up-projections transposed,
    ``[W_UK^(h)T ; W_UV^(h)T]`` of ``(d_k + d_v, d_c)``, as ``nn.Linear`` keeps (out, in).
    ``absorbed=False`` builds every head's keys and values from the cached latent; ``absorbed=True`` never
    does: ``W_UK`` goes into the query (:func:`absorbed_scores`) and ``W_UV`` is applied after the weighted
    sum of latents, before ``o_proj``. Both give the same output. With a cache,
    the new tokens continue the cached positions. Taught in the chapter "Multi-head latent attention".
    """

    def __init__(self, config: MLAConfig) -> None:
        super().__init__()
        if not isinstance(config, MLAConfig):
            raise ValueError(f"MultiHeadLatentAttention: config must be an MLAConfig, got {type(config).__name__}")
        self.config = c = config
        if c.q_lora_rank is None:
            self.q_proj = nn.Linear(c.d_model, c.num_heads * c.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(c.d_model, c.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, eps=LATENT_NORM_EPS)
            self.q_b_proj = nn.Linear(c.q_lora_rank, c.num_heads * c.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.d_model, c.kv_lora_rank + c.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, eps=LATENT_NORM_EPS)
        self.kv_b_proj = nn.Linear(c.kv_lora_rank, c.num_heads * (c.qk_nope_head_dim + c.v_head_dim), bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.v_head_dim, c.d_model, bias=False)
        cos, sin = self.rotary_tables()
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.layout = "interleaved" if c.rope_interleave else "half"

    def rotary_tables(self) -> tuple[Tensor, Tensor]:
        """cos and sin ``(max_len, d_R / 2)`` of the decoupled rotary part."""
        c = self.config
        return rope_frequencies(c.qk_rope_head_dim, c.max_len, base=c.rope_base, scaling=c.rope_scaling)

    def up_projections(self) -> tuple[Tensor, Tensor]:
        """``w_uk (H, d_k, d_c)`` and ``w_uv (H, d_v, d_c)``, the two halves of ``kv_b_proj`` per head.

        As ``nn.Linear`` stores them, (out, in): ``w_uk[h]`` and ``w_uv[h]`` are the transposes of the
        chapter's ``W_UK^(h)`` and ``W_UV^(h)``, which are ``(d_c, d_k)`` and ``(d_c, d_v)``.
        """
        c = self.config
        w = self.kv_b_proj.weight.view(c.num_heads, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)
        return w[:, : c.qk_nope_head_dim], w[:, c.qk_nope_head_dim :]  # (H, d_k, d_c), (H, d_v, d_c)

    def forward(self, x: Tensor, cache: LatentCache | None = None, absorbed: bool = False) -> Tensor:
        c = self.config
        check.sequence(x, "x", c.d_model, "MultiHeadLatentAttention")
        if cache is not None and not isinstance(cache, LatentCache):
            raise ValueError(f"MultiHeadLatentAttention: cache must be a LatentCache, got {type(cache).__name__}")
        if not isinstance(absorbed, bool):
            raise ValueError(f"MultiHeadLatentAttention: absorbed must be True or False, got {absorbed!r}")
        B, L_new, _ = x.shape
        past = 0 if cache is None else cache.seq_len
        if past + L_new > c.max_len:
            raise ValueError(f"MultiHeadLatentAttention: positions up to {past + L_new - 1}, beyond max_len={c.max_len}")
        query = self.q_proj(x) if c.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        query = query.view(B, L_new, c.num_heads, c.qk_head_dim).transpose(1, 2)  # (B, H, L_new, d_k + d_R)
        query_nope, query_rope = query.split([c.qk_nope_head_dim, c.qk_rope_head_dim], dim=-1)
        latent, rope_key = self.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, c.qk_rope_head_dim], dim=-1)
        latent = self.kv_a_layernorm(latent)  # (B, L_new, d_c); the rotary key is not normalised
        query_rope = apply_rope(query_rope, self.rope_cos, self.rope_sin, past, layout=self.layout)  # (B, H, L_new, d_R)
        rope_key = apply_rope(rope_key, self.rope_cos, self.rope_sin, past, layout=self.layout)  # (B, L_new, d_R)
        if cache is not None:
            latent, rope_key = cache.append(latent, rope_key)  # (B, T, d_c), (B, T, d_R)
        allowed = causal_mask(L_new, past + L_new, device=x.device)  # (L_new, T), bottom-right aligned
        w_uk, w_uv = self.up_projections()
        if absorbed:
            scores = absorbed_scores(query_nope, query_rope, latent, rope_key, w_uk)  # (B, H, L_new, T)
            scores = scores * (c.softmax_scale * c.qk_head_dim**0.5)  # 1, or YaRN's correction
            weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)  # (B, H, L_new, T)
            mixed_latent = torch.einsum("bhlt,btc->bhlc", weights, latent)  # (B, H, L_new, d_c)
            out = torch.einsum("bhlc,hvc->bhlv", mixed_latent, w_uv)  # (B, H, L_new, d_v): W_UV after the sum
        else:
            T = latent.size(1)
            kv = self.kv_b_proj(latent).view(B, T, c.num_heads, c.qk_nope_head_dim + c.v_head_dim)
            key_nope, value = kv.transpose(1, 2).split([c.qk_nope_head_dim, c.v_head_dim], dim=-1)  # (B, H, T, .)
            key = torch.cat([key_nope, rope_key.unsqueeze(1).expand(B, c.num_heads, T, c.qk_rope_head_dim)],
                            dim=-1)  # (B, H, T, d_k + d_R): the rotary key shared by every head
            out = F.scaled_dot_product_attention(torch.cat([query_nope, query_rope], dim=-1), key, value,
                                                 attn_mask=allowed, scale=c.softmax_scale)  # (B, H, L_new, d_v)
        return self.o_proj(out.transpose(1, 2).reshape(B, L_new, c.num_heads * c.v_head_dim))


class MLADecoderLayer(nn.Module):
    """One pre-norm block: ``x + self_attn(input_layernorm(x))``, then ``x + mlp(post_attention_layernorm(x))``,
    with :class:`MultiHeadLatentAttention` and a :class:`lessons_src.SwiGLU` (DeepSeek's dense layer).
    Taught in the chapter "Multi-head latent attention".
    """

    def __init__(self, config: MLAConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadLatentAttention(config)
        self.mlp = SwiGLU(config.d_model, config.hidden)
        self.input_layernorm = RMSNorm(config.d_model, eps=config.eps)
        self.post_attention_layernorm = RMSNorm(config.d_model, eps=config.eps)

    def forward(self, x: Tensor, cache: LatentCache | None = None, absorbed: bool = False) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cache, absorbed)
        return x + self.mlp(self.post_attention_layernorm(x))


class MLADecoderLM(nn.Module):
    """A decoder-only model with latent attention: ``tokens (B, L) -> logits (B, L, |V|)``.

    ``embed_tokens``, ``num_layers`` :class:`MLADecoderLayer` s, a final ``norm`` and ``lm_head`` (no
    position embedding: rotary acts inside attention). ``forward(tokens, caches, absorbed)`` with one
    :class:`LatentCache` per layer decodes incrementally; ``absorbed=True`` takes the absorbed path.
    Taught in the chapter "Multi-head latent attention".
    """

    def __init__(self, config: MLAConfig) -> None:
        super().__init__()
        if not isinstance(config, MLAConfig):
            raise ValueError(f"MLADecoderLM: config must be an MLAConfig, got {type(config).__name__}")
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(MLADecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.d_model, eps=config.eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, tokens: Tensor, caches: list[LatentCache] | None = None, absorbed: bool = False) -> Tensor:
        c = self.config
        check.tokens(tokens, "MLADecoderLM")
        if caches is not None and (len(caches) != c.num_layers
                                   or not all(isinstance(cache, LatentCache) for cache in caches)):
            raise ValueError(f"MLADecoderLM: give one LatentCache per layer ({c.num_layers}), got "
                             f"{[type(cache).__name__ for cache in caches]}")
        if tokens.numel() and int(tokens.max()) >= c.vocab_size:
            raise ValueError(f"MLADecoderLM: token id {int(tokens.max())} is outside the vocabulary of {c.vocab_size}")
        past = 0 if caches is None else caches[0].seq_len
        if past + tokens.size(1) > c.max_len:
            raise ValueError(f"MLADecoderLM: positions up to {past + tokens.size(1) - 1}, beyond max_len={c.max_len}")
        x = self.embed_tokens(tokens)  # (B, L, D)
        for i, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[i], absorbed)
        return self.lm_head(self.norm(x))  # (B, L, |V|)

    def new_caches(self) -> list[LatentCache]:
        """One empty :class:`LatentCache` per layer, for ``forward(tokens, caches)``."""
        return [LatentCache() for _ in self.layers]

    @classmethod
    def from_deepseek_state_dict(cls, state_dict: dict[str, Tensor], config: MLAConfig) -> MLADecoderLM:
        """An :class:`MLADecoderLM` holding a dense Hugging Face ``DeepseekV3ForCausalLM`` checkpoint, in its dtype.

        ``config`` must carry the checkpoint's sizes (see :class:`MLAConfig`). The names go through
        :func:`rename_hf_deepseek`, and ``load_state_dict`` (strict) names any weight missing or left over
        (a mixture-of-experts layer's ``mlp.experts...`` among them). The rotary pairs are adjacent, as
        DeepSeek's ``rope_interleave=True``. DeepSeek-V3's released configuration extends its context with YaRN
        (``rope_type="yarn"``), which rescales the frequencies and the softmax scale: give the config that
        ``rope_scaling`` (:func:`lessons_src.config_from_hf` reads it from the checkpoint's config.json, and
        :func:`lessons_src.from_pretrained` loads a whole dense checkpoint folder). Taught in the chapter
        "Multi-head latent attention".
        """
        if not isinstance(config, MLAConfig):
            raise ValueError(f"from_deepseek_state_dict: config must be an MLAConfig, got {type(config).__name__}")
        renamed = rename_hf_deepseek(state_dict)
        model = cls(config).to(renamed["embed_tokens.weight"].dtype)
        model.load_state_dict(renamed)
        return model


def rename_hf_deepseek(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """A Hugging Face ``DeepseekV3ForCausalLM`` (or V2) state dict under :class:`MLADecoderLM`'s names.

    The only renaming: every name loses its ``model.`` prefix; ``lm_head.weight`` stays (or is the
    embedding matrix when tied and left out); stored rotary frequencies (``...rotary_emb.inv_freq``) are
    dropped. Every attention name (``q_a_proj``, ``q_a_layernorm``, ``q_b_proj`` or ``q_proj``,
    ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``) is DeepSeek's own. The tensors
    are not copied. Taught in the chapter "Multi-head latent attention".
    """
    if not isinstance(state_dict, dict) or "model.embed_tokens.weight" not in state_dict:
        raise ValueError("rename_hf_deepseek: expected a DeepseekV3ForCausalLM state dict, with "
                         "'model.embed_tokens.weight'")
    renamed = {name.removeprefix("model."): weight for name, weight in state_dict.items()
               if not name.endswith("rotary_emb.inv_freq")}
    renamed.setdefault("lm_head.weight", renamed["embed_tokens.weight"])  # tied embeddings
    return renamed


def mla_cache_elements(kind: str, *, num_heads: int, head_dim: int, num_kv_heads: int | None = None,
                       kv_lora_rank: int | None = None, qk_rope_head_dim: int | None = None) -> int:
    """Numbers one layer caches per token: ``"mha"`` 2·H·d_k, ``"gqa"`` 2·H_kv·d_k, ``"mqa"`` 2·d_k,
    ``"mla"`` d_c + d_R (the latent and the shared rotary key, whatever H).

    Multiply by the layers, the tokens, the batch and the bytes per element for a cache's size.
    Taught in the chapter "Multi-head latent attention".
    """
    where = "mla_cache_elements"
    check.positive_int(num_heads, "num_heads", where)
    check.positive_int(head_dim, "head_dim", where)
    if kind == "mha":
        return 2 * num_heads * head_dim
    if kind == "mqa":
        return 2 * head_dim
    if kind == "gqa":
        check.positive_int(num_kv_heads, "num_kv_heads", where)
        check.divisible(num_heads, "num_heads", num_kv_heads, "num_kv_heads", where)
        return 2 * num_kv_heads * head_dim
    if kind == "mla":
        check.positive_int(kv_lora_rank, "kv_lora_rank", where)
        check.positive_int(qk_rope_head_dim, "qk_rope_head_dim", where)
        return kv_lora_rank + qk_rope_head_dim
    raise ValueError(f"{where}: kind must be one of 'mha', 'gqa', 'mqa', 'mla', got {kind!r}")
