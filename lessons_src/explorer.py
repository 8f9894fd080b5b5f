"""Type your own text: a trained model of the course run on the reader's text, live in a kernel and in the
browser of the static site.

One object, two renderings (CONTRIBUTING.md, "Model explorer"), as with the sliders of
:mod:`lessons_src.widgets`:

* :class:`ModelExplorer` ``.to_html()``: self-contained HTML. The model's weights are embedded (base64
  float32, or float16 where the page would pass 1 MB) with a forward pass written in plain JavaScript
  (typed arrays; no framework, no WebAssembly, no network). As the reader types, the page shows the
  next-character distribution (top-k bars, a temperature slider), the attention of any layer and head
  over the typed characters (one head large, every head small) and samples a continuation on request.
  The page registers ``window.lessonsModels[<id>] = {forward(text)}`` returning ``{tokens, logits,
  attention}`` (the contract the browser tests use), and ``sinks`` for a model with learned sinks. Every
  model kind the package builds runs there: both kinds of :class:`LanguageModel`, :class:`DecoderLM` with any
  switch (today's included: QK-norm, soft-capping, learned sinks, sliding windows, the output gate) and
  :class:`MLADecoderLM` (the plain form; the absorbed decode gives the same weights).
* In a kernel, ``_repr_mimebundle_`` gives a live ipywidgets view (ipywidgets 7.7 and 8) driven by the
  Python model, with the HTML as the fallback.

:meth:`ModelExplorer.forward` is the Python side of the same contract, computed by the torch model
itself, so the JavaScript can be compared with PyTorch. Taught in the chapter "A language model and its
heads".
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import html
import json
import re
import warnings
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from . import _validate as check
from .alibi import alibi_slopes
from .device import one_cpu_thread
from .encoder import EncoderBlock
from .language_model import CharTokenizer, LanguageModel, _AttentionOnlyBlock
from .llm import DecoderConfig, DecoderLM, RMSNorm
from .masks import causal_mask
from .mla import LATENT_NORM_EPS, MLADecoderLM
from .rotary import apply_rope

__all__ = ["ModelExplorer", "MAX_HTML_BYTES_FLOAT32"]

#: The MIME type of a live ipywidgets view (front ends without widget support skip it).
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"

#: Above this many bytes of HTML with float32 weights, ``precision="auto"`` embeds float16 weights.
MAX_HTML_BYTES_FLOAT32 = 1_000_000

#: The DecoderConfig switches (and their values) that the JavaScript forward implements. A config field
#: that is not here, or a value that is not listed, is refused with its name. None: every value the config
#: accepts (today's switches of the chapter "Attention in today's open models" included).
_SUPPORTED_SWITCHES: dict[str, tuple | None] = {
    "vocab_size": None, "d_model": None, "num_heads": None, "num_layers": None, "max_len": None, "d_ff": None,
    "num_kv_heads": None, "norm": ("layer", "rms"), "placement": ("pre", "post"),
    "ffn": ("relu", "gelu", "gelu_tanh", "swiglu"),
    "positions": ("learned", "sinusoidal", "rope", "alibi", "none"), "rope_layout": ("interleaved", "half"),
    "rope_base": None, "bias": None, "eps": None,
    "qk_norm": None, "norm_plus_one": None, "query_pre_attn_scalar": None, "attn_logit_softcapping": None,
    "sinks": None, "sliding_window": None, "layer_types": None, "attn_output_gate": None,
    "head_dim": None, "qkv_bias": None, "tie_word_embeddings": None, "rope_scaling": (None,),
}

#: The MLAConfig fields the JavaScript forward implements (every value the config accepts).
_SUPPORTED_MLA = ("vocab_size", "d_model", "num_heads", "num_layers", "max_len", "d_ff", "kv_lora_rank", "q_lora_rank",
                  "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_base", "eps")

_ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}\Z")
#: The marks the page draws for characters that would otherwise be invisible (explained under the bars).
_SHOWN = {" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5"}
_NAMED = {" ": "space", "\n": "newline", "\t": "tab", "\r": "carriage return"}


def describe_char(c: str) -> str:
    """A character as a reader can read it in a message: ``'é'``, ``space``, ``newline``, ``U+200B``."""
    if c in _NAMED:
        return _NAMED[c]
    if not c.isprintable() or c.isspace():
        return f"U+{ord(c):04X}"
    return f"'{c}'"


@dataclass
class Prepared:
    """What the model reads of a text: the kept characters (all in the vocabulary, at most max_len),
    and the messages that say what was cut or skipped."""

    text: str
    messages: list[str]
    ids: list[int] | None = None  # the token ids, for a model read with a subword tokenizer (kernel only)


def _linear(module: nn.Linear) -> tuple[Tensor, Tensor | None]:
    return module.weight, module.bias


def _norm_tensors(module: nn.Module, where: str) -> tuple[str, float, Tensor, Tensor | None]:
    """(kind, eps, weight, bias) of a LayerNorm or RMSNorm with a weight (an RMSNorm with ``plus_one`` keeps
    its stored weight: the page multiplies by ``1 + weight``, told by the spec's ``norm_plus_one``)."""
    if isinstance(module, RMSNorm):
        return "rms", module.eps, module.weight, None
    if isinstance(module, nn.RMSNorm):
        if module.weight is None:
            raise ValueError(f"ModelExplorer: {where} is an RMSNorm without a weight; not supported")
        eps = module.eps if module.eps is not None else torch.finfo(torch.float32).eps
        return "rms", float(eps), module.weight, None
    if isinstance(module, nn.LayerNorm):
        if module.weight is None or module.normalized_shape != (module.weight.numel(),):
            raise ValueError(f"ModelExplorer: {where} is a LayerNorm without elementwise_affine or over several "
                             "dims; not supported")
        return "layer", float(module.eps), module.weight, module.bias
    raise ValueError(f"ModelExplorer: {where} is a {type(module).__name__}; the JavaScript forward knows "
                     "LayerNorm and RMSNorm only")


class _Spec:
    """The architecture as the JavaScript reads it (a JSON dict) and the named tensors, in order."""

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.tensors: list[tuple[str, Tensor]] = []

    def add(self, name: str, tensor: Tensor | None) -> None:
        if tensor is not None:
            self.tensors.append((name, tensor.detach().to("cpu", torch.float32).contiguous()))


def _spec_language_model(model: LanguageModel) -> _Spec:
    spec = _Spec()
    d_model = model.embed.embedding_dim
    first = model.blocks[0]
    num_heads = first.self_attn.num_heads
    attention_only = isinstance(first, _AttentionOnlyBlock)
    spec.meta.update(kind="LanguageModel", d_model=d_model, num_heads=num_heads, kv_heads=num_heads,
                     head_dim=d_model // num_heads, num_layers=len(model.blocks), max_len=model.max_len,
                     positions="learned", placement="none" if attention_only else None, ffn=None, norm=None)
    spec.add("embed", model.embed.weight)
    spec.add("pos", model.positions.embedding.weight)
    for i, block in enumerate(model.blocks):
        if isinstance(block, _AttentionOnlyBlock) != attention_only:
            raise ValueError("ModelExplorer: the LanguageModel mixes attention-only and full blocks; not supported")
        attn = block.self_attn
        for name, lin in (("q", attn.w_q), ("k", attn.w_k), ("v", attn.w_v), ("o", attn.w_o)):
            w, b = _linear(lin)
            spec.add(f"l{i}.w{name}", w)
            spec.add(f"l{i}.b{name}", b)
        if attention_only:
            continue
        if not isinstance(block, EncoderBlock):
            raise ValueError(f"ModelExplorer: LanguageModel block {i} is a {type(block).__name__}; not supported")
        act = block.ff.activation
        if isinstance(act, nn.ReLU):
            ffn = "relu"
        elif isinstance(act, nn.GELU) and act.approximate == "none":
            ffn = "gelu"
        else:
            raise ValueError(f"ModelExplorer: LanguageModel block {i} has activation {act!r}; the JavaScript "
                             "forward knows ReLU and exact GELU")
        placement = "pre" if block.norm_first else "post"
        for key, value in (("ffn", ffn), ("placement", placement)):
            if spec.meta[key] not in (None, value):
                raise ValueError(f"ModelExplorer: the LanguageModel's blocks differ in {key}; not supported")
            spec.meta[key] = value
        for name, module in (("n1", block.norm1), ("n2", block.norm2)):
            kind, eps, w, b = _norm_tensors(module, f"block {i} {name}")
            spec.meta.update(norm=kind, eps=eps)
            spec.add(f"l{i}.{name}w", w)
            spec.add(f"l{i}.{name}b", b)
        for name, lin in (("up", block.ff.linear1), ("down", block.ff.linear2)):
            w, b = _linear(lin)
            spec.add(f"l{i}.w{name}", w)
            spec.add(f"l{i}.b{name}", b)
    if isinstance(model.norm, nn.Identity):
        spec.meta["final_norm"] = False
    else:
        kind, eps, w, b = _norm_tensors(model.norm, "the final norm")
        spec.meta.update(final_norm=True, final_norm_kind=kind, final_eps=eps)
        spec.add("fnw", w)
        spec.add("fnb", b)
    w, b = _linear(model.read_out)
    spec.add("head", w)
    spec.add("head_b", b)
    return spec


def _check_config(config: DecoderConfig) -> None:
    # A switch the JavaScript does not know is refused only when it is on (not at its default): a new
    # DecoderConfig field left at its default changes nothing the forward computes.
    unknown = [f.name for f in dataclasses.fields(config) if f.name not in _SUPPORTED_SWITCHES
               and f.default is not dataclasses.MISSING and getattr(config, f.name) != f.default]
    if unknown:
        raise ValueError(f"ModelExplorer: DecoderConfig switch(es) {unknown} are not supported by the JavaScript "
                         "forward; add them to lessons_src/explorer.py and lessons_src/data/explorer.js")
    for name, allowed in _SUPPORTED_SWITCHES.items():
        value = getattr(config, name, None)
        if allowed is not None and value not in allowed:
            raise ValueError(f"ModelExplorer: DecoderConfig {name}={value!r} is not supported by the JavaScript "
                             f"forward (supported: {', '.join(map(repr, allowed))})")


def _spec_decoder(model: DecoderLM) -> _Spec:
    c = model.config
    _check_config(c)
    spec = _Spec()
    scalar = c.head_dim if c.query_pre_attn_scalar is None else c.query_pre_attn_scalar
    spec.meta.update(kind="DecoderLM", d_model=c.d_model, num_heads=c.num_heads, kv_heads=c.kv_heads,
                     head_dim=c.head_dim, num_layers=c.num_layers, max_len=c.max_len, positions=c.positions,
                     placement=c.placement, ffn=c.ffn, norm=c.norm, eps=float(c.eps),
                     final_norm=c.placement == "pre", scale=float(scalar) ** -0.5, qk_norm=c.qk_norm,
                     norm_plus_one=c.norm_plus_one, softcap=c.attn_logit_softcapping, sinks=c.sinks,
                     gate=c.attn_output_gate,
                     windows=[layer.self_attn.window or 0 for layer in model.layers])  # 0: a global layer
    if c.positions == "rope":
        spec.meta.update(rope_layout=c.rope_layout, rope_base=float(c.rope_base))
    if c.positions == "alibi":
        spec.meta["alibi_slopes"] = [float(s) for s in alibi_slopes(c.num_heads)]
    spec.add("embed", model.embed_tokens.weight)
    if c.positions == "learned":
        spec.add("pos", model.embed_positions.weight)
    for i, layer in enumerate(model.layers):
        attn = layer.self_attn
        for name, lin in (("q", attn.q_proj), ("k", attn.k_proj), ("v", attn.v_proj), ("o", attn.o_proj)):
            w, b = _linear(lin)
            spec.add(f"l{i}.w{name}", w)
            spec.add(f"l{i}.b{name}", b)
        if c.qk_norm:
            spec.add(f"l{i}.qnw", attn.q_norm.weight)
            spec.add(f"l{i}.knw", attn.k_norm.weight)
        if c.sinks:
            spec.add(f"l{i}.sinks", attn.sinks)
        for name, module in (("n1", layer.input_layernorm), ("n2", layer.post_attention_layernorm)):
            _, _, w, b = _norm_tensors(module, f"layer {i} {name}")
            spec.add(f"l{i}.{name}w", w)
            spec.add(f"l{i}.{name}b", b)
        names = (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj"))
        for name, attr in names:
            if hasattr(layer.mlp, attr):
                w, b = _linear(getattr(layer.mlp, attr))
                spec.add(f"l{i}.w{name}", w)
                spec.add(f"l{i}.b{name}", b)
    if c.placement == "pre":
        kind, eps, w, b = _norm_tensors(model.norm, "the final norm")
        spec.meta.update(final_norm_kind=kind, final_eps=eps)
        spec.add("fnw", w)
        spec.add("fnb", b)
    w, b = _linear(model.lm_head)
    spec.add("head", w)
    spec.add("head_b", b)
    return spec


def _spec_mla(model: MLADecoderLM) -> _Spec:
    c = model.config
    unknown = [f.name for f in dataclasses.fields(c) if f.name not in _SUPPORTED_MLA
               and f.default is not dataclasses.MISSING and getattr(c, f.name) != f.default]
    if unknown:
        raise ValueError(f"ModelExplorer: MLAConfig field(s) {unknown} are not supported by the JavaScript forward; "
                         "add them to lessons_src/explorer.py and lessons_src/data/explorer.js")
    spec = _Spec()
    spec.meta.update(kind="MLADecoderLM", d_model=c.d_model, num_heads=c.num_heads, kv_heads=c.num_heads,
                     head_dim=c.v_head_dim, num_layers=c.num_layers, max_len=c.max_len, positions="mla",
                     placement="pre", ffn="swiglu", norm="rms", eps=float(c.eps), final_norm=True,
                     final_norm_kind="rms", final_eps=float(c.eps), kv_lora_rank=c.kv_lora_rank,
                     q_lora_rank=c.q_lora_rank or 0, qk_nope_head_dim=c.qk_nope_head_dim,
                     qk_rope_head_dim=c.qk_rope_head_dim, v_head_dim=c.v_head_dim, rope_base=float(c.rope_base),
                     latent_eps=float(LATENT_NORM_EPS), scale=float(c.qk_head_dim) ** -0.5,
                     windows=[0] * c.num_layers)
    spec.add("embed", model.embed_tokens.weight)
    for i, layer in enumerate(model.layers):
        attn = layer.self_attn
        if c.q_lora_rank is None:
            spec.add(f"l{i}.wq", attn.q_proj.weight)
        else:
            spec.add(f"l{i}.wqa", attn.q_a_proj.weight)
            spec.add(f"l{i}.qan", attn.q_a_layernorm.weight)
            spec.add(f"l{i}.wqb", attn.q_b_proj.weight)
        spec.add(f"l{i}.wkva", attn.kv_a_proj_with_mqa.weight)
        spec.add(f"l{i}.kvan", attn.kv_a_layernorm.weight)
        spec.add(f"l{i}.wkvb", attn.kv_b_proj.weight)
        spec.add(f"l{i}.wo", attn.o_proj.weight)
        spec.add(f"l{i}.n1w", layer.input_layernorm.weight)
        spec.add(f"l{i}.n2w", layer.post_attention_layernorm.weight)
        for name in ("gate", "up", "down"):
            spec.add(f"l{i}.w{name}", getattr(layer.mlp, f"{name}_proj").weight)
    spec.add("fnw", model.norm.weight)
    spec.add("head", model.lm_head.weight)
    return spec


def _decoder_attention_hook(store: list[Tensor]):
    """A forward hook on a DecoderLM ``Attention`` that takes its weights ``(B, H, L, L)`` from
    ``Attention.attention_weights`` (every switch: sliding window, soft cap, sinks) and checks that they,
    with the values and the output gate, give the module's output."""

    def hook(module, inputs, output):
        c = module.config
        x = inputs[0]
        B, L, _ = x.shape
        weights = module.attention_weights(x)  # (B, H, L, L); with sinks each row sums to less than 1
        _, _, v, gate = module._project(x, 0)  # v: (B, H_kv, L, d_k); gate: (B, L, H d_k) or None
        v = v.repeat_interleave(c.num_heads // c.kv_heads, dim=1)  # (B, H, L, d_k)
        mixed = (weights @ v).transpose(1, 2).reshape(B, L, c.num_heads * c.head_dim)  # (B, L, H d_k)
        again = module.o_proj(mixed if gate is None else mixed * torch.sigmoid(gate))  # (B, L, D)
        _check_again(again, output, "DecoderLM's Attention", "lessons_src/llm.py")
        store.append(weights)

    return hook


def _mla_attention_hook(store: list[Tensor]):
    """A forward hook on a ``MultiHeadLatentAttention`` that recomputes its weights ``(B, H, L, L)`` in the
    plain form (the latent projected up to each head's keys; the absorbed form gives the same weights) and
    checks them against the module's output."""

    def hook(module, inputs, output):
        c = module.config
        x = inputs[0]
        B, L, _ = x.shape
        query = module.q_proj(x) if c.q_lora_rank is None else module.q_b_proj(module.q_a_layernorm(module.q_a_proj(x)))
        query = query.view(B, L, c.num_heads, c.qk_head_dim).transpose(1, 2)  # (B, H, L, d_k + d_R)
        query_nope, query_rope = query.split([c.qk_nope_head_dim, c.qk_rope_head_dim], dim=-1)
        latent, rope_key = module.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, c.qk_rope_head_dim], dim=-1)
        latent = module.kv_a_layernorm(latent)  # (B, L, d_c)
        query_rope = apply_rope(query_rope, module.rope_cos, module.rope_sin, 0, layout=module.layout)  # (B, H, L, d_R)
        rope_key = apply_rope(rope_key, module.rope_cos, module.rope_sin, 0, layout=module.layout)  # (B, L, d_R)
        kv = module.kv_b_proj(latent).view(B, L, c.num_heads, c.qk_nope_head_dim + c.v_head_dim).transpose(1, 2)
        key_nope, value = kv.split([c.qk_nope_head_dim, c.v_head_dim], dim=-1)  # (B, H, L, d_k), (B, H, L, d_v)
        scores = (query_nope @ key_nope.transpose(-2, -1) + query_rope @ rope_key.unsqueeze(1).transpose(-2, -1)
                  ) * c.softmax_scale  # (B, H, L, L): 1/sqrt(d_k + d_R), or with YaRN's correction
        weights = scores.masked_fill(~causal_mask(L, device=x.device), float("-inf")).softmax(dim=-1)
        again = module.o_proj((weights @ value).transpose(1, 2).reshape(B, L, c.num_heads * c.v_head_dim))
        _check_again(again, output, "MultiHeadLatentAttention", "lessons_src/mla.py")
        store.append(weights)

    return hook


def _check_again(again: Tensor, output: Tensor, module: str, source: str) -> None:
    if not torch.allclose(again, output, atol=1e-4, rtol=1e-4):
        raise RuntimeError(f"ModelExplorer: the attention weights recomputed from the {module} do not give its "
                           f"output (largest difference {(again - output).abs().max():.2e}); "
                           f"lessons_src/explorer.py no longer matches {source}")


class ModelExplorer:
    """A trained character model that the reader types into: predictions and every head's attention.

    ``model``: a :class:`lessons_src.LanguageModel` (either kind), a :class:`lessons_src.DecoderLM` (any
    switch of its config, today's included: with learned sinks each row of weights sums to one minus the
    sink's share, which the page shows beside the map) or a :class:`lessons_src.MLADecoderLM` (the weights
    of the plain form, the latent projected up; the absorbed decode gives the same); ``tokenizer``: the
    :class:`lessons_src.CharTokenizer` it was trained with.
    Keyword-only: ``text`` the text in the box at first (default: "The attention " where the vocabulary
    has it, else a random string typed twice); ``max_len`` the context the page uses (at most the model's);
    ``top_k`` bars (default 10, or the vocabulary if smaller); ``temperature`` τ at first;
    ``continue_chars`` the characters the "continue" button samples; ``alt`` a description for screen
    readers; ``id`` the key of
    ``window.lessonsModels`` (default: from a hash of the weights); ``precision`` ``"auto"`` (float32,
    float16 above ``MAX_HTML_BYTES_FLOAT32``), ``"float32"`` or ``"float16"``; ``seed`` the sampler's seed;
    ``max_chars`` the longest text read at all (pasted text is cut to its last ``max_chars`` first);
    ``layer`` (from 0, shown from 1) and ``head`` (from 0, shown so) the head shown large at first;
    ``answers``: for a model that answers a question at each position with its first ``len(answers)``
    logits instead of predicting the next character (the trigger task of the chapter "Attention in today's
    open models"), the names of those answers: the bars show the softmax over them, and there is no
    "continue" button; ``reference_text``: a text on
    which :meth:`forward` (PyTorch) is run now and its numbers embedded in the HTML, in a
    ``<script type="application/json" class="lsx-reference">`` (``{"text", "tokens", "logits", "attention"}``,
    rounded to 1e-6), so that a test of the built site can compare the page's JavaScript with PyTorch's numbers
    from the notebook that trained the model (default: none embedded).

    :meth:`forward` runs the torch model on a text the way the page does; :meth:`to_html` is the page.

    A real checkpoint read by :func:`lessons_src.from_pretrained` (a ``DecoderLM`` or ``MLADecoderLM`` with any of
    its switches, and the :class:`lessons_src.pretrained.Tokenizer` that came with it) gets the kernel view only:
    the same text box, bars and maps, over tokens, drawn by Python as you type (Jupyter, Colab, Binder);
    ``to_html`` is then a note, since such a model is too large for the page's JavaScript, and ``continue``
    samples tokens. Taught in the chapter "A language model and its heads".
    """

    def __init__(self, model: LanguageModel | DecoderLM | MLADecoderLM, tokenizer: CharTokenizer, *,
                 text: str | None = None, max_len: int | None = None, top_k: int | None = None,
                 temperature: float = 1.0, continue_chars: int = 40, alt: str | None = None, id: str | None = None,
                 precision: str = "auto", seed: int = 0, max_chars: int | None = None, layer: int = 0,
                 head: int = 0, answers: tuple[str, ...] | list[str] | None = None,
                 reference_text: str | None = None) -> None:
        where = "ModelExplorer"
        from .pretrained import Tokenizer as SubwordTokenizer

        self.kernel_only = isinstance(tokenizer, SubwordTokenizer)
        if self.kernel_only:  # a real checkpoint (lessons_src.from_pretrained): drawn by Python in a kernel only
            if not isinstance(model, (DecoderLM, MLADecoderLM)):
                raise ValueError(f"{where}: with a subword Tokenizer, model must be a DecoderLM or MLADecoderLM "
                                 f"(a causal language model), got {type(model).__name__}")
            if reference_text is not None:
                raise ValueError(f"{where}: reference_text checks the in-browser page, which a model read with a "
                                 "subword Tokenizer does not have")
            spec = _Spec()
            spec.meta.update(kind=type(model).__name__, num_layers=model.config.num_layers,
                             num_heads=model.config.num_heads, max_len=model.config.max_len)
            vocab_size = model.config.vocab_size
            if tokenizer.vocab_size > vocab_size:
                raise ValueError(f"{where}: the tokenizer has {tokenizer.vocab_size} tokens but the model's "
                                 f"vocabulary has {vocab_size}; give the tokenizer of the model's checkpoint")
        elif isinstance(model, LanguageModel):
            spec = _spec_language_model(model)
            vocab_size = model.read_out.out_features
        elif isinstance(model, DecoderLM):
            spec = _spec_decoder(model)
            vocab_size = model.config.vocab_size
        elif isinstance(model, MLADecoderLM):
            spec = _spec_mla(model)
            vocab_size = model.config.vocab_size
        else:
            raise ValueError(f"{where}: model must be a lessons_src.LanguageModel, DecoderLM or MLADecoderLM, "
                             f"got {type(model).__name__}")
        if not isinstance(tokenizer, (CharTokenizer, SubwordTokenizer)):
            raise ValueError(f"{where}: tokenizer must be a lessons_src.CharTokenizer (or, for a checkpoint read by "
                             f"lessons_src.from_pretrained, its lessons_src.pretrained.Tokenizer), got "
                             f"{type(tokenizer).__name__}")
        if not self.kernel_only and tokenizer.vocab_size != vocab_size:
            raise ValueError(f"{where}: the tokenizer has {tokenizer.vocab_size} characters but the model's "
                             f"vocabulary has {vocab_size}; give the tokenizer the model was trained with")
        model_max = spec.meta["max_len"]
        max_len = model_max if max_len is None else max_len
        check.positive_int(max_len, "max_len", where)
        if max_len > model_max:
            raise ValueError(f"{where}: max_len={max_len} is longer than the model's max_len={model_max}")
        if answers is not None:
            if (not isinstance(answers, (tuple, list)) or not 2 <= len(answers) <= vocab_size
                    or not all(isinstance(a, str) and a.strip() for a in answers)):
                raise ValueError(f"{where}: answers must be None or 2 to {vocab_size} (the vocabulary) non-empty "
                                 f"names, one per answer logit, got {answers!r}")
            if top_k is not None and top_k != len(answers):
                raise ValueError(f"{where}: top_k={top_k} with {len(answers)} answers; leave top_k out")
            top_k = len(answers)
        top_k = min(10, vocab_size) if top_k is None else top_k
        check.positive_int(top_k, "top_k", where)
        if top_k > vocab_size:
            raise ValueError(f"{where}: top_k={top_k} is more than the {vocab_size} characters of the vocabulary")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0.05 <= temperature <= 5:
            raise ValueError(f"{where}: temperature must be a number in [0.05, 5], got {temperature!r}")
        check.positive_int(continue_chars, "continue_chars", where)
        if continue_chars > 1000:
            raise ValueError(f"{where}: continue_chars={continue_chars} is more than 1000")
        if id is not None and (not isinstance(id, str) or not _ID.match(id)):
            raise ValueError(f"{where}: id must be a letter then up to 63 letters, digits, '-' or '_', got {id!r}")
        if precision not in ("auto", "float32", "float16"):
            raise ValueError(f"{where}: precision must be 'auto', 'float32' or 'float16', got {precision!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"{where}: seed must be an int >= 0, got {seed!r}")
        max_chars = max(4096, 8 * max_len) if max_chars is None else max_chars
        check.positive_int(max_chars, "max_chars", where)
        if max_chars < max_len:
            raise ValueError(f"{where}: max_chars={max_chars} is shorter than max_len={max_len}")
        for name, value, count in (("layer", layer, spec.meta["num_layers"]), ("head", head, spec.meta["num_heads"])):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
                raise ValueError(f"{where}: {name} must be an int from 0 to {count - 1} (the model has {count}), "
                                 f"got {value!r}")
        if text is not None and not isinstance(text, str):
            raise ValueError(f"{where}: text must be a str, got {type(text).__name__}")
        if reference_text is not None and (not isinstance(reference_text, str) or not reference_text):
            raise ValueError(f"{where}: reference_text must be a non-empty str, got {reference_text!r}")
        if alt is not None and not isinstance(alt, str):
            raise ValueError(f"{where}: alt must be a str, got {type(alt).__name__}")
        self.model, self.tokenizer, self.spec = model, tokenizer, spec
        self.max_len, self.top_k, self.temperature = max_len, top_k, float(temperature)
        self.continue_chars, self.seed, self.max_chars = continue_chars, seed, max_chars
        self.layer, self.head = layer, head
        self.answers = None if answers is None else tuple(answers)
        self.text = self._default_text() if text is None else text
        self.alt = alt or (
            f"Type text: the model predicts the next character (the {top_k} likeliest as bars) and shows the "
            "attention of each of its heads over the characters typed." if answers is None else
            f"Type text: the model answers after each character ({', '.join(self.answers)}) and shows the "
            "attention of each of its heads over the characters typed.")
        self.precision = precision
        if self.kernel_only:
            self._payload, self.embedded_dtype, self._weight_error = None, None, None
            self.id = id or "kernel"
        else:
            self._payload = self._pack(precision)
            self.id = id or "m" + hashlib.sha1(self._payload[1].encode("ascii")).hexdigest()[:12]
        self.reference_text = reference_text
        self._reference = None if reference_text is None else self._reference_json(reference_text)
        self._widget = None

    # -- the text the model reads ----------------------------------------------------------------
    def _default_text(self) -> str:
        if self.kernel_only:
            return "The attention of each head reads the keys"
        chars = self.tokenizer.chars
        if set("The attention ") <= set(chars):
            return "The attention "
        rng = np.random.default_rng(0)
        half = "".join(chars[i] for i in rng.integers(0, len(chars), min(12, self.max_len // 2)))
        return half + half

    def prepare(self, text: str) -> Prepared:
        """What the model reads of ``text``, and the messages the page shows (same rules as the page):
        characters outside the vocabulary skipped (named), then the last ``max_len`` kept. A text longer
        than ``max_chars`` is first cut to its last ``max_chars`` characters (so that a pasted megabyte is
        never scanned at each keystroke; the reader's text itself is never changed), and the messages say
        so."""
        if not isinstance(text, str):
            raise ValueError(f"ModelExplorer.prepare: text must be a str, got {type(text).__name__}")
        if self.kernel_only:
            return self._prepare_tokens(text)
        messages, total = [], len(text)
        huge = total > self.max_chars
        if huge:
            text = text[-self.max_chars:]
            messages.append(f"Your text has {total:,} characters: the model reads its end, so only the last "
                            f"{self.max_chars:,} are looked at.")
        ids = self.tokenizer.ids
        unknown = list(dict.fromkeys(c for c in text if c not in ids))
        if unknown:
            shown = ", ".join(describe_char(c) for c in unknown[:12])
            more = f" and {len(unknown) - 12} more" if len(unknown) > 12 else ""
            skipped = sum(c not in ids for c in text)
            messages.append(f"Skipped {skipped} character{'s' * (skipped != 1)} the model does not know: {shown}{more}.")
            text = "".join(c for c in text if c in ids)
        if not text:
            messages.append("Type some text: the model predicts the character that follows it.")
        elif len(text) > self.max_len:
            of = "the characters it knows among them" if huge else f"the {len(text):,} characters it knows"
            messages.append(f"The model reads at most {self.max_len} characters (its max_len): it sees the last "
                            f"{self.max_len} of {of}.")
            text = text[-self.max_len:]
        return Prepared(text, messages)

    def _prepare_tokens(self, text: str) -> Prepared:
        """A subword model's reading: the tokenizer's ids (with the special tokens it adds), the last ``max_len``."""
        messages = []
        if len(text) > self.max_chars:
            messages.append(f"Your text has {len(text):,} characters: the model reads its end, so only the last "
                            f"{self.max_chars:,} are looked at.")
            text = text[-self.max_chars:]
        ids = self.tokenizer.encode(text) if text else []
        if not ids:
            messages.append("Type some text: the model predicts the token that follows it.")
        elif len(ids) > self.max_len:
            messages.append(f"The model reads at most {self.max_len} tokens (its max_len): it sees the last "
                            f"{self.max_len} of the {len(ids):,} tokens of your text.")
            ids = ids[-self.max_len:]
        return Prepared(self.tokenizer.decode(ids), messages, ids)

    def _token_name(self, token: int) -> str:
        """A token as the bars and the map name it: its text, with spaces, newlines and tabs made visible."""
        if not self.kernel_only:
            return describe_char(self.tokenizer.chars[token]).strip("'")
        text = self.tokenizer.decode([token])
        shown = "".join(_SHOWN.get(c) or (c if c.isprintable() else f"U+{ord(c):04X}") for c in text)
        return shown or f"id {token}"

    # -- the forward pass, as the page computes it ------------------------------------------------
    @torch.no_grad()
    def forward(self, text: str, model: nn.Module | None = None) -> dict[str, Any]:
        """The torch model on ``text`` as the page reads it: ``{"tokens": [L ids], "logits": (L, |V|)
        float32 array, "attention": [layer][head] (L, L) arrays, "text": the characters read,
        "messages": [...]}``, and with learned sinks ``"sinks"``: [layer][head] (L,) arrays, each query's
        weight on its head's sink (one minus its row's sum). ``model``: another model of the same architecture (e.g. with rounded weights)."""
        model = self.model if model is None else model
        prepared = self.prepare(text)
        tokens = prepared.ids if self.kernel_only else [self.tokenizer.ids[c] for c in prepared.text]
        L, meta = len(tokens), self.spec.meta
        result: dict[str, Any] = {"tokens": tokens, "text": prepared.text, "messages": prepared.messages}
        if L == 0:
            result["logits"] = np.zeros((0, self.model.config.vocab_size if self.kernel_only else
                                         self.tokenizer.vocab_size), dtype=np.float32)
            result["attention"] = [[np.zeros((0, 0), dtype=np.float32)] * meta["num_heads"]
                                   for _ in range(meta["num_layers"])]
            if meta.get("sinks"):
                result["sinks"] = [[np.zeros(0)] * meta["num_heads"] for _ in range(meta["num_layers"])]
            return result
        device = next(model.parameters()).device
        x = torch.tensor(tokens, dtype=torch.long, device=device)[None]  # (1, L)
        if isinstance(model, LanguageModel):
            logits, weights = model(x, return_weights=True)  # (1, L, |V|), one (1, H, L, L) per layer
        else:
            weights = []
            make = _mla_attention_hook if isinstance(model, MLADecoderLM) else _decoder_attention_hook
            hooks = [layer.self_attn.register_forward_hook(make(weights)) for layer in model.layers]
            try:
                logits = model(x)  # (1, L, |V|)
            finally:
                for hook in hooks:
                    hook.remove()
        result["logits"] = logits[0].float().cpu().numpy()
        result["attention"] = [[w[0, h].float().cpu().numpy() for h in range(w.size(1))] for w in weights]
        if meta.get("sinks"):  # the weight each query gives its head's learned sink: what the row lacks
            result["sinks"] = [[1 - a.astype(np.float64).sum(-1) for a in layer] for layer in result["attention"]]
        return result

    def rounded_model(self) -> nn.Module:
        """A copy of the model with every weight rounded as the page embeds it (float16 or float32)."""
        copy_ = copy.deepcopy(self.model)
        dtype = torch.float16 if self.embedded_dtype == "float16" else torch.float32
        with torch.no_grad():
            for p in copy_.parameters():
                p.copy_(p.to(dtype).to(p.dtype))
        return copy_

    def rounding_error(self, text: str | None = None) -> dict[str, float]:
        """What the embedded precision costs on ``text`` (default: the initial text): the largest absolute
        difference in the logits and in the attention weights between the model and its rounded copy, and
        the largest rounding error of a weight."""
        text = self.text if text is None else text
        exact, rounded = self.forward(text), self.forward(text, self.rounded_model())
        return {
            "logits": float(np.abs(exact["logits"] - rounded["logits"]).max(initial=0.0)),
            "attention": max((float(np.abs(a - b).max(initial=0.0)) for la, lb in
                              zip(exact["attention"], rounded["attention"]) for a, b in zip(la, lb)), default=0.0),
            "weights": self._weight_error,
        }

    # -- the page --------------------------------------------------------------------------------
    def _pack(self, precision: str) -> tuple[str, str]:
        """(dtype, base64 of every tensor concatenated, little-endian)."""
        flat = np.concatenate([t.numpy().ravel() for _, t in self.spec.tensors]).astype("<f4")
        f32 = base64.b64encode(flat.tobytes()).decode("ascii")
        dtype = precision
        if precision == "auto":
            dtype = "float16" if len(f32) + 60_000 > MAX_HTML_BYTES_FLOAT32 else "float32"
        self.embedded_dtype = dtype
        if dtype == "float16":
            half = flat.astype("<f2")
            self._weight_error = float(np.abs(half.astype(np.float32) - flat).max(initial=0.0))
            return dtype, base64.b64encode(half.tobytes()).decode("ascii")
        self._weight_error = 0.0
        return dtype, f32

    def _reference_json(self, text: str) -> str:
        """PyTorch's forward on ``text`` as JSON for the page (numbers rounded to 1e-6), safe inside a script tag."""
        result = self.forward(text)
        reference = {"text": result["text"], "tokens": result["tokens"],
                     "logits": np.round(result["logits"].astype(np.float64), 6).tolist(),
                     "attention": [[np.round(a.astype(np.float64), 6).tolist() for a in layer]
                                   for layer in result["attention"]]}
        packed = json.dumps(reference, ensure_ascii=True, separators=(",", ":"))
        return packed.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

    def config(self) -> dict[str, Any]:
        """The JSON the page's script reads: the architecture, the tensors' places and the interface."""
        offsets, start = [], 0
        for name, tensor in self.spec.tensors:
            offsets.append([name, start, tensor.numel()])
            start += tensor.numel()
        return {**self.spec.meta, "id": self.id, "chars": self.tokenizer.chars, "tensors": offsets,
                "dtype": self._payload[0], "page_max_len": self.max_len, "top_k": self.top_k,
                "temperature": self.temperature, "continue_chars": self.continue_chars, "seed": self.seed,
                "max_chars": self.max_chars, "answers": self.answers}

    def to_html(self) -> str:
        """Self-contained HTML: the weights, the forward pass in plain JavaScript and the controls; no network.
        For a checkpoint read with a subword tokenizer (drawn in a kernel only), a note saying so."""
        if self.kernel_only:
            return ('<p class="ls-explorer-note">This explorer runs in a Python kernel (Jupyter, Colab, Binder): '
                    "a real checkpoint is too large to run in the page's JavaScript, which holds the course's "
                    "own character models.</p>")
        uid = f"lsx-{self.id}"
        config = json.dumps({**self.config(), "weights": self._payload[1]}, ensure_ascii=True)
        config = config.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        script = resources.files("lessons_src").joinpath("data/explorer.js").read_text(encoding="utf-8")
        meta = self.spec.meta
        windows = meta.get("windows") or [0] * meta["num_layers"]
        layers = "".join(f'<option value="{i}"{" selected" * (i == self.layer)}>{i + 1}'
                         f'{f" (sliding, window {w})" if w else ""}</option>'
                         for i, w in enumerate(windows))
        heads = "".join(f'<option value="{h}"{" selected" * (h == self.head)}>{h}</option>'
                        for h in range(meta["num_heads"]))
        reference = ("" if self._reference is None else
                     f'<script type="application/json" class="lsx-reference">{self._reference}</script>')
        e = html.escape
        symbols = ", ".join(f"{mark} {describe_char(c)}" for c, mark in _SHOWN.items() if c in self.tokenizer.ids)
        symbols = f'<p class="lsx-note lsx-symbols">{e(symbols)}</p>' if symbols else ""
        bars = (f"Next character: the {self.top_k} likeliest" if self.answers is None else
                "The model's answer after the last character")
        more = ("" if self.answers is not None else
                f'<button type="button" class="lsx-continue">continue: sample {self.continue_chars} characters</button>')
        notes = []
        if any(windows):
            notes.append("grey: masked (the future, and on a sliding layer the keys outside its window)")
        else:
            notes.append("grey: the future, masked")
        if meta.get("sinks"):
            notes.append("last column, after the gap (\u2205): the weight the head gives its learned sink (no key, no value)")
        plain = ('<p class="lsx-note">Latent attention: the weights of the plain form, the latent projected up to '
                 "each head's keys; the absorbed decode gives the same weights.</p>"
                 if meta["kind"] == "MLADecoderLM" else "")
        return (
            f'<div class="ls-explorer" id="{uid}" data-model-id="{e(self.id)}" role="group" '
            f'aria-labelledby="{uid}-title">'
            f"<style>{_CSS}</style>"
            f'<p class="lsx-title" id="{uid}-title"><strong>Try the model</strong> '
            f'<span class="lsx-desc">{e(self.alt)}</span></p>'
            f'<label class="lsx-label" for="{uid}-text">Your text (the model reads the last {self.max_len} '
            f"characters)</label>"
            f'<textarea id="{uid}-text" class="lsx-text" rows="2" spellcheck="false" autocomplete="off" '
            f'autocapitalize="off">{e(self.text)}</textarea>'
            f'<p class="lsx-msg" role="status" aria-live="polite"></p>'
            f'<div class="lsx-controls">'
            f'<label>temperature τ <input class="lsx-temp" type="range" min="0.1" max="3" step="0.05" '
            f'value="{self.temperature}"> <output class="lsx-temp-out">{self.temperature:.2f}</output></label>'
            f'<label>layer <select class="lsx-layer">{layers}</select></label>'
            f'<label>head <select class="lsx-head">{heads}</select></label>'
            f"{more}</div>"
            f'<div class="lsx-panels">'
            f'<figure class="lsx-bars"><figcaption>{bars}</figcaption>'
            f'<ol class="lsx-bar-list"></ol>{symbols}</figure>'
            f'<figure class="lsx-heat"><figcaption class="lsx-heat-title">Attention</figcaption>'
            # tabindex: a box that scrolls sideways (on a phone) must scroll with the keyboard too (axe).
            f'<div class="lsx-scroll" tabindex="0" role="region" aria-label="attention weights, scrolls sideways">'
            f'<canvas class="lsx-big" role="img" aria-label="attention weights"></canvas>'
            f'</div><p class="lsx-legend" aria-hidden="true">weight 0 <span class="lsx-ramp"></span> 1</p>'
            f'<p class="lsx-note">{"; ".join(notes)}.</p>{plain}</figure></div>'
            f'<figure class="lsx-all"><figcaption>Every head (rows: layers, counted from 1; columns: heads, counted '
            f"from 0 as in the chapters; click one to enlarge it)</figcaption>"
            f'<div class="lsx-scroll" tabindex="0" role="region" aria-label="every head, scrolls sideways">'
            f'<div class="lsx-grid"></div></div></figure>'
            f'<script type="application/json" class="lsx-config">{config}</script>'
            f"{reference}"
            f'<script>(function(){{"use strict";var root=document.getElementById("{uid}");{script}}})();</script>'
            f"</div>"
        )

    # -- live widget -----------------------------------------------------------------------------
    def _live_figure(self):
        """One matplotlib figure (bars and a heatmap), drawn again in place by ``draw(result, layer, head, τ)``:
        artists updated, no new figure, no layout pass (a new figure per keystroke took about 0.5 s)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        from .widgets import _fast_png

        fig = Figure(figsize=(9, 3.6), dpi=80, facecolor="white")
        FigureCanvasAgg(fig)
        ax_bars, ax_heat = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.4]})
        fig.subplots_adjust(left=0.08, right=0.97, bottom=0.14, top=0.9, wspace=0.3)
        bars = ax_bars.barh(range(self.top_k), np.zeros(self.top_k), color="#3b6ea8")
        ax_bars.set(xlim=(0, 1), ylim=(self.top_k - 0.5, -0.5), xlabel="probability", xticks=[0, 0.5, 1])
        ax_bars.set_yticks(range(self.top_k))
        heat = ax_heat.imshow(np.zeros((1, 1)), cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        unit = "tokens" if self.kernel_only else "characters"
        ax_heat.set(xlabel=f"key j (earlier {unit})", ylabel="query i", xticks=[], yticks=[])  # ticks cost most

        def draw(result: dict[str, Any], layer: int, head: int, temperature: float) -> bytes:
            L = len(result["tokens"])
            if L:
                probs, names = self._bar_probabilities(result["logits"][-1], temperature)
                for bar, p in zip(bars, probs):
                    bar.set_width(p)
                ax_bars.set_yticklabels(names)
                what = ("next token" if self.kernel_only else "next character") if self.answers is None else "answer"
                ax_bars.set_title(f"{what} (τ = {temperature:.2f})", fontsize=10)
                heat.set_data(result["attention"][layer][head])
                heat.set_extent((-0.5, L - 0.5, L - 0.5, -0.5))
                ax_heat.set_title(f"layer {layer + 1}, head {head}: {L} {unit}", fontsize=10)
            else:
                for bar in bars:
                    bar.set_width(0)
                ax_bars.set_yticklabels([""] * self.top_k)
                ax_bars.set_title("type some text", fontsize=10)
                heat.set_data(np.zeros((1, 1)))
                heat.set_extent((-0.5, 0.5, 0.5, -0.5))
                ax_heat.set_title(f"no {unit} to attend to", fontsize=10)
            fig.canvas.draw()
            return _fast_png(np.asarray(fig.canvas.buffer_rgba()))

        return draw

    def _bar_probabilities(self, logits: np.ndarray, temperature: float) -> tuple[list[float], list[str]]:
        """The bars of the last position: the ``top_k`` likeliest characters, or every answer in order."""
        logits = torch.from_numpy(np.asarray(logits)).double()
        if self.answers is not None:
            return (logits[: len(self.answers)] / temperature).softmax(dim=-1).tolist(), list(self.answers)
        top = (logits / temperature).softmax(dim=-1).topk(self.top_k)
        return top.values.tolist(), [self._token_name(i) for i in top.indices.tolist()]

    def widget(self):
        """The ipywidgets view: a text box, temperature, layer and head, a continue button, one image
        redrawn by the Python model."""
        if self._widget is not None:
            return self._widget
        import ipywidgets as w

        meta = self.spec.meta
        text = w.Textarea(value=self.text, description="text", continuous_update=True,
                          layout=w.Layout(width="min(40rem, 100%)"))
        temperature = w.FloatSlider(value=self.temperature, min=0.1, max=3.0, step=0.05, description="temperature τ",
                                    continuous_update=True, style={"description_width": "initial"})
        layer = w.Dropdown(options=[(str(i + 1), i) for i in range(meta["num_layers"])], value=self.layer,
                           description="layer")
        head = w.Dropdown(options=[(str(h), h) for h in range(meta["num_heads"])], value=self.head, description="head")
        button = w.Button(description=f"continue (+{self.continue_chars})")
        message = w.HTML()
        image = w.Image(format="png", layout=w.Layout(max_width="100%"))
        generator = torch.Generator().manual_seed(self.seed)
        draw = self._live_figure()

        def redraw(_change=None) -> None:
            with one_cpu_thread():  # tiny tensors: one thread is as fast, and never stalls
                result = self.forward(text.value)
            message.value = "<br>".join(html.escape(m) for m in result["messages"])
            image.value = draw(result, layer.value, head.value, temperature.value)

        def sample(_button=None) -> None:
            with one_cpu_thread():
                more = self.sample(text.value, self.continue_chars, temperature.value, generator)
            text.value = text.value + more

        for control in (text, temperature, layer, head):
            control.observe(redraw, names="value")
        button.on_click(sample)
        redraw()
        row = [temperature, layer, head] + ([button] if self.answers is None else [])
        box = w.VBox([text, w.HBox(row), message, image])
        box.redraw, box.sample = redraw, sample  # for the tests
        box.controls = {"text": text, "temperature": temperature, "layer": layer, "head": head, "button": button,
                        "message": message, "image": image}
        self._widget = box
        return box

    @torch.no_grad()
    def sample(self, text: str, num_chars: int, temperature: float | None = None,
               generator: torch.Generator | None = None) -> str:
        """``num_chars`` characters sampled after ``text`` from the ``top_k`` likeliest at ``temperature``."""
        check.positive_int(num_chars, "num_chars", "ModelExplorer.sample")
        temperature = self.temperature if temperature is None else temperature
        if self.kernel_only:  # num_chars tokens, sampled on the ids and decoded together
            return self._sample_tokens(text, num_chars, temperature, generator)
        out = ""
        for _ in range(num_chars):
            result = self.forward(text + out)
            if not result["tokens"]:
                break
            logits = torch.from_numpy(result["logits"][-1]).double() / temperature
            top = logits.topk(self.top_k)
            choice = torch.multinomial(top.values.softmax(dim=-1), 1, generator=generator).item()
            out += self.tokenizer.chars[top.indices[choice].item()]
        return out

    def _sample_tokens(self, text: str, num_tokens: int, temperature: float,
                       generator: torch.Generator | None) -> str:
        ids, new = list(self.prepare(text).ids or []), []
        if not ids:
            return ""
        device = next(self.model.parameters()).device
        for _ in range(num_tokens):
            context = (ids + new)[-self.max_len:]
            logits = self.model(torch.tensor([context], device=device))[0, -1].double().cpu() / temperature
            top = logits.topk(self.top_k)
            choice = torch.multinomial(top.values.softmax(dim=-1), 1, generator=generator).item()
            new.append(top.indices[choice].item())
        return self.tokenizer.decode(new)

    # -- display ---------------------------------------------------------------------------------
    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        bundle: dict[str, Any] = {}
        try:
            bundle[WIDGET_VIEW_MIME] = self.widget().get_view_spec()  # ipywidgets 7.7 and 8 alike
        except Exception as exc:  # no usable ipywidgets: the HTML below still runs the model in the browser
            warnings.warn(f"live explorer unavailable ({type(exc).__name__}: {exc}); showing the in-browser "
                          "version instead", stacklevel=2)
        bundle["text/html"] = self.to_html()
        bundle["text/plain"] = f"Model explorer: {self.alt}"
        return bundle

    def __repr__(self) -> str:
        m = self.spec.meta
        return (f"ModelExplorer({m['kind']}, {m['num_layers']} layers x {m['num_heads']} heads, "
                f"max_len={self.max_len}, id={self.id!r})")


_CSS = (
    ".ls-explorer{max-width:100%;box-sizing:border-box;margin:1em 0;font-size:.95em}"
    ".ls-explorer *{box-sizing:border-box}"
    ".ls-explorer .lsx-title{margin:.2em 0 .5em}"
    ".ls-explorer .lsx-label{display:block;font-weight:600;margin:.3em 0}"
    ".ls-explorer .lsx-text{width:100%;max-width:100%;font-family:monospace;font-size:1rem;padding:.3em}"
    ".ls-explorer .lsx-msg{min-height:1.3em;margin:.2em 0;color:#8a4b00}"
    ".ls-explorer .lsx-controls{display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:center;margin:.4em 0}"
    ".ls-explorer .lsx-controls label{display:flex;gap:.4em;align-items:center}"
    ".ls-explorer .lsx-temp{width:8rem}"
    ".ls-explorer button{padding:.25em .7em;cursor:pointer}"
    ".ls-explorer .lsx-panels{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}"
    ".ls-explorer figure{margin:.3em 0;max-width:100%;min-width:0}"
    ".ls-explorer figcaption{font-size:.9em;margin-bottom:.2em}"
    ".ls-explorer .lsx-bars{flex:0 1 16rem}"
    ".ls-explorer .lsx-heat{flex:1 1 18rem}"
    ".ls-explorer .lsx-bar-list{list-style:none;padding:0;margin:0;font-family:monospace}"
    ".ls-explorer .lsx-bar-list li{display:flex;align-items:center;gap:.4em;margin:1px 0;height:1.25em}"
    ".ls-explorer .lsx-ch{min-width:4.5em;text-align:right;white-space:pre}"
    ".ls-explorer .lsx-track{flex:1 1 auto;background:rgba(127,127,127,.15);height:.9em;min-width:3em}"
    ".ls-explorer .lsx-fill{background:#3b6ea8;height:100%}"
    ".ls-explorer .lsx-p{min-width:3.6em;text-align:right;font-variant-numeric:tabular-nums}"
    ".ls-explorer .lsx-scroll{max-width:100%;overflow-x:auto}"
    ".ls-explorer canvas{display:block;background:#fff}"
    ".ls-explorer .lsx-grid{display:grid;gap:4px;width:max-content}"
    ".ls-explorer .lsx-grid button{padding:2px;border:2px solid transparent;background:none;line-height:0}"
    ".ls-explorer .lsx-grid button[aria-pressed=true]{border-color:#d9480f}"
    ".ls-explorer .lsx-legend{font-size:.8em;margin:.2em 0;display:flex;gap:.4em;align-items:center}"
    ".ls-explorer .lsx-ramp{display:inline-block;width:6em;height:.8em;background:linear-gradient(90deg,#440154,"
    "#3e4989,#26828e,#35b779,#fde725)}"
    ".ls-explorer .lsx-row-label{align-self:center;font-size:.85em;white-space:nowrap}"
    ".ls-explorer .lsx-note{font-size:.8em;margin:.2em 0}"
    ".ls-explorer .lsx-col-label{font-size:.8em;text-align:center;white-space:nowrap}"
)
