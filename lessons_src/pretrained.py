"""Real checkpoints on the course's code: read a Hugging Face folder into :class:`lessons_src.DecoderLM`, and
write a course model back in that format.

A checkpoint folder as Hugging Face writes it holds ``config.json`` (the sizes and switches, under each
family's names), the weights as ``*.safetensors`` (one file, or shards listed in
``model.safetensors.index.json``) and ``tokenizer.json``. This module maps each family's names onto the
course's, in one table per family (:data:`FAMILIES`), so that a learner's ``DecoderLM`` runs the real model:

- :func:`config_from_hf`: ``config.json`` -> :class:`lessons_src.DecoderConfig`. Reads both the
  ``rope_theta`` + ``rope_scaling`` of transformers 4 (most checkpoints on the Hub) and the
  ``rope_parameters`` of transformers 5; refuses, by name, what the course does not implement
  (mixtures of experts, partial rotary, dynamic NTK, a family it has no table for).
- :func:`from_pretrained`: ``(model, tokenizer)`` from a local folder or, where the Hub is reachable
  (Colab), a model id. The weights load with ``safetensors``, strictly: a weight missing or left over is
  named. ``model(input_ids)`` gives the logits ``(B, L, vocab)``.
- :func:`save_pretrained`: a course model in the same format (as a Llama, Mistral, Qwen2, Qwen3 or GPT-2
  checkpoint, whichever its switches are), so that ``transformers`` loads it.
- :class:`Tokenizer`: ``tokenizer.json`` read by the ``tokenizers`` library (the ids transformers gives),
  or a course :class:`lessons_src.CharTokenizer` written as one.

Families: Llama (1 to 3.2, with Llama 3.1's rotary scaling; SmolLM2 is a Llama), Mistral (sliding window),
Qwen 2.5 (biases on q/k/v), Qwen3 (its own ``head_dim``, QK-norm), Gemma 2 (sandwich norms, GeGLU, scaled
embeddings, soft-capped scores and logits, interleaved sliding layers), Gemma 3's text models (QK-norm, a
second rotary base for the sliding layers) and GPT-2, each equal to transformers' class in logits and in greedy
decoding with the course's cache; and BERT, as the course's :class:`lessons_src.EncoderModel` (the post-LN
blocks of the chapter "The transformer encoder block"), equal in hidden states and attention weights
(``tests/test_pretrained.py``); and a DeepSeek-V3 whose layers are all dense, as the course's
:class:`lessons_src.MLADecoderLM` with YaRN-stretched rotary angles (a mixture of experts is refused by name). Taught in the chapter "From the original block to a
modern LLM block".
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .encoder import EncoderConfig, EncoderModel
from .language_model import CharTokenizer
from .llm import DecoderConfig, DecoderLM
from .mla import MLAConfig, MLADecoderLM
from .rotary import _OPTIONAL, ROPE_SCALINGS, rope_layout_permutation

__all__ = ["config_from_hf", "from_pretrained", "save_pretrained", "load_safetensors", "greedy", "head_survey",
           "ablated_head", "second_half_losses",
           "Tokenizer", "FAMILIES", "DEFAULT_MAX_LEN"]

#: The longest sequence a loaded model reads unless ``max_len`` says otherwise: each layer keeps a rotary
#: table of ``max_len`` rows, and Llama 3.2's 131,072 positions would take 16 MB of it per layer.
DEFAULT_MAX_LEN = 4096

# Fields of config.json that change nothing the forward computes (training, generation, bookkeeping).
_IGNORED = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "attention_dropout", "tokenizer_class",
    "id2label", "label2id", "return_dict", "output_hidden_states", "output_attentions", "problem_type",
    "chunk_size_feed_forward", "is_encoder_decoder", "pretraining_tp", "auto_map", "max_window_layers",
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_activation", "summary_first_dropout",
    "summary_proj_to_labels", "summary_type", "summary_use_proj", "task_specific_params", "n_ctx",
    "reorder_and_upcast_attn", "tie_encoder_decoder", "prefix", "bad_words_ids",
    "decoder_start_token_id", "sep_token_id", "unk_token_id", "transformers.js_config", "_attn_implementation",
    "is_llama_config", "rope_interleaved",  # nanotron's (SmolLM2): transformers reads neither
    # Found in released files, read by no transformers class: GPT-2's, multilingual BERT's, Llama 1 copies',
    # Gemma 2 9B's repeat of sliding_window, fields transformers 4.48 wrote about itself.
    "n_special", "predict_special_tokens", "directionality", "pooler_fc_size", "pooler_num_attention_heads",
    "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type", "max_sequence_length", "gradient_checkpointing",
    "_attn_implementation_autoset", "sliding_window_size",
}
# The families a config.json without model_type (old files) belongs to, read from its architectures.
_ARCHITECTURES = {"GPT2": "gpt2", "Bert": "bert", "Llama": "llama", "Mistral": "mistral", "Qwen2": "qwen2",
                  "Qwen3": "qwen3", "Gemma2": "gemma2", "Gemma3ForCausalLM": "gemma3_text", "DeepseekV3": "deepseek_v3"}
_MIXTURES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss", "qwen3_next", "olmoe",
             "llama4", "jamba", "dbrx", "granitemoe")
_NOT_YET = {
    "gemma": "Gemma 1 has no loader (Gemma 2 and 3 do)",
    "phi": "Phi-2 has no loader (partial rotary, attention and MLP side by side in one block)",
    "phi3": "Phi-3 has no loader (fused q/k/v and gate/up projections, LongRoPE)",
    "olmo2": "OLMo 2 has no loader (one QK-norm over all heads at once, norms after each sublayer)",
    "gemma3": "model_type 'gemma3' is Gemma 3's image-text model; the course reads its text-only checkpoints "
              "(model_type 'gemma3_text', such as gemma-3-1b)",
}


@dataclass(frozen=True)
class Family:
    """How one family's ``config.json`` and weights map onto the course's: the fields it reads (Hugging Face
    name -> DecoderConfig name), the switches it fixes, and the function that renames its weights."""

    names: dict[str, str]
    switches: dict
    rename: Callable[[dict[str, Tensor], DecoderConfig], dict[str, Tensor]]
    defaults: dict  # the family's value of a field its config.json may leave out


_LLAMA_NAMES = {"vocab_size": "vocab_size", "hidden_size": "d_model", "num_attention_heads": "num_heads",
                "num_hidden_layers": "num_layers", "intermediate_size": "d_ff", "num_key_value_heads": "num_kv_heads",
                "rms_norm_eps": "eps", "head_dim": "head_dim", "tie_word_embeddings": "tie_word_embeddings"}
_LLAMA_SWITCHES = dict(norm="rms", placement="pre", ffn="swiglu", positions="rope", rope_layout="half", bias=False)


def _rename_llama(state_dict: dict[str, Tensor], config: DecoderConfig) -> dict[str, Tensor]:
    """Llama, Mistral, Qwen2, Qwen3: the course uses their names, below ``model.``."""
    renamed = {name.removeprefix("model."): w for name, w in state_dict.items()
               if not name.endswith("rotary_emb.inv_freq")}  # older checkpoints store the frequencies
    if config.tie_word_embeddings:  # transformers ties them whatever the file holds
        renamed["lm_head.weight"] = renamed.get("embed_tokens.weight")
    return renamed


def _rename_gpt2(state_dict: dict[str, Tensor], config: DecoderConfig) -> dict[str, Tensor]:
    """GPT-2: ``c_attn`` holds W_Q, W_K, W_V side by side, and its Conv1D layers store ``(in, out)`` matrices,
    the transpose of ``nn.Linear``'s. The causal-mask buffers of old checkpoints (``attn.bias``) are dropped."""
    sd = {name.removeprefix("transformer."): w for name, w in state_dict.items()
          if not name.endswith((".attn.bias", ".attn.masked_bias"))}
    sd.pop("lm_head.weight", None)  # GPT-2 always ties it to wte
    d = config.d_model
    positions = sd.pop("wpe.weight", None)
    positions = None if positions is None else positions[: config.max_len]  # max_len may be less than the table
    out = {"embed_tokens.weight": sd.pop("wte.weight", None), "embed_positions.weight": positions,
           "norm.weight": sd.pop("ln_f.weight", None), "norm.bias": sd.pop("ln_f.bias", None)}
    for i in range(config.num_layers):
        h, layer = f"h.{i}.", f"layers.{i}."
        qkv_w, qkv_b = sd.pop(h + "attn.c_attn.weight", None), sd.pop(h + "attn.c_attn.bias", None)
        if qkv_w is not None and qkv_b is not None:
            for j, proj in enumerate(("q_proj", "k_proj", "v_proj")):
                out[f"{layer}self_attn.{proj}.weight"] = qkv_w[:, j * d:(j + 1) * d].t()
                out[f"{layer}self_attn.{proj}.bias"] = qkv_b[j * d:(j + 1) * d]
        for theirs, ours, transpose in (("attn.c_proj", "self_attn.o_proj", True), ("mlp.c_fc", "mlp.up_proj", True),
                                        ("mlp.c_proj", "mlp.down_proj", True), ("ln_1", "input_layernorm", False),
                                        ("ln_2", "post_attention_layernorm", False)):
            weight = sd.pop(f"{h}{theirs}.weight", None)
            out[f"{layer}{ours}.weight"] = None if weight is None else (weight.t() if transpose else weight)
            out[f"{layer}{ours}.bias"] = sd.pop(f"{h}{theirs}.bias", None)
    out["lm_head.weight"] = out["embed_tokens.weight"]
    out = {name: w for name, w in out.items() if w is not None}  # a missing one is named by the strict load
    out.update(sd)  # left over: named by the strict load
    return out


def _rename_bert(state_dict: dict[str, Tensor], config: EncoderConfig) -> dict[str, Tensor]:
    """BERT: ``BertModel``'s names, or ``BertForMaskedLM``'s under ``bert.``, whose masked-language-model head
    (``cls.``) the encoder does not hold and leaves out. Old checkpoints' ``gamma``/``beta`` are LayerNorm's
    ``weight``/``bias``; the stored ``position_ids`` are dropped."""
    inner = {"attention.self.query": "self_attn.w_q", "attention.self.key": "self_attn.w_k",
             "attention.self.value": "self_attn.w_v", "attention.output.dense": "self_attn.w_o",
             "attention.output.LayerNorm": "norm1", "intermediate.dense": "ff.linear1", "output.dense": "ff.linear2",
             "output.LayerNorm": "norm2"}
    outer = {"embeddings.word_embeddings": "embed_tokens", "embeddings.position_embeddings": "embed_positions",
             "embeddings.token_type_embeddings": "embed_types", "embeddings.LayerNorm": "embed_norm",
             "pooler.dense": "pooler"}
    out = {}
    for name, w in state_dict.items():
        name = name.removeprefix("bert.")
        if name.startswith("cls.") or name.endswith("position_ids"):
            continue
        stem, _, kind = name.rpartition(".")
        kind = {"gamma": "weight", "beta": "bias"}.get(kind, kind)
        if stem in outer:
            name = f"{outer[stem]}.{kind}"
            if name == "embed_positions.weight":
                w = w[: config.max_len]  # max_len may be less than the table
        elif stem.startswith("encoder.layer."):
            number, _, rest = stem.removeprefix("encoder.layer.").partition(".")
            name = f"layers.{number}.{inner.get(rest, rest)}.{kind}"
        out[name] = w
    return out


def _rename_deepseek(state_dict: dict[str, Tensor], config: MLAConfig) -> dict[str, Tensor]:
    """DeepSeek-V3: the course uses its names below ``model.``; the multi-token-prediction layers some
    checkpoints store after the last layer (``model.layers.<num_layers>.``) are named by the strict load."""
    return {name.removeprefix("model."): w for name, w in state_dict.items() if not name.endswith("rotary_emb.inv_freq")}


_DEEPSEEK_NAMES = {"vocab_size": "vocab_size", "hidden_size": "d_model", "num_attention_heads": "num_heads",
                   "num_hidden_layers": "num_layers", "intermediate_size": "d_ff", "kv_lora_rank": "kv_lora_rank",
                   "q_lora_rank": "q_lora_rank", "qk_nope_head_dim": "qk_nope_head_dim",
                   "qk_rope_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim", "rms_norm_eps": "eps",
                   "rope_interleave": "rope_interleave"}


_BERT_NAMES = {"vocab_size": "vocab_size", "hidden_size": "d_model", "num_attention_heads": "num_heads",
               "num_hidden_layers": "num_layers", "intermediate_size": "d_ff", "type_vocab_size": "type_vocab_size",
               "layer_norm_eps": "eps"}

_GPT2_NAMES = {"vocab_size": "vocab_size", "n_embd": "d_model", "n_head": "num_heads", "n_layer": "num_layers",
               "n_inner": "d_ff", "layer_norm_epsilon": "eps"}

_GEMMA_NAMES = dict(_LLAMA_NAMES, query_pre_attn_scalar="query_pre_attn_scalar",
                    attn_logit_softcapping="attn_logit_softcapping", final_logit_softcapping="final_logit_softcapping")
_GEMMA_SWITCHES = dict(_LLAMA_SWITCHES, ffn="geglu", norm_plus_one=True, sandwich_norms=True, scale_embeddings=True)

#: Every family :func:`config_from_hf` reads, by ``model_type``: one table each (SmolLM2 is ``"llama"``).
FAMILIES: dict[str, Family] = {
    "llama": Family(_LLAMA_NAMES, _LLAMA_SWITCHES, _rename_llama, dict(tie_word_embeddings=False)),
    "mistral": Family(_LLAMA_NAMES, _LLAMA_SWITCHES, _rename_llama, dict(tie_word_embeddings=False)),
    "qwen2": Family(_LLAMA_NAMES, dict(_LLAMA_SWITCHES, qkv_bias=True), _rename_llama,
                    dict(tie_word_embeddings=False)),
    "qwen3": Family(_LLAMA_NAMES, dict(_LLAMA_SWITCHES, qk_norm=True), _rename_llama,
                    dict(tie_word_embeddings=False)),
    "gemma2": Family(_GEMMA_NAMES, _GEMMA_SWITCHES, _rename_llama, dict(tie_word_embeddings=True)),
    "gemma3_text": Family(_GEMMA_NAMES, dict(_GEMMA_SWITCHES, qk_norm=True), _rename_llama,
                          dict(tie_word_embeddings=True)),
    "bert": Family(_BERT_NAMES, {}, _rename_bert, {}),
    "deepseek_v3": Family(_DEEPSEEK_NAMES, {}, _rename_deepseek, {}),
    "gpt2": Family(_GPT2_NAMES, dict(norm="layer", placement="pre", ffn="gelu_tanh", positions="learned", bias=True,
                                     tie_word_embeddings=True), _rename_gpt2, {}),
}


def _warn_unread(hf: dict, read: set, where: str, stacklevel: int) -> None:
    """Name, in a warning, the fields of ``hf`` neither read nor known to change nothing (fine-tuning tools' own,
    like unsloth's, are); ``stacklevel`` as its caller would give it."""
    unknown = sorted(k for k in hf if k not in read and k not in _IGNORED and not k.startswith("unsloth"))
    if unknown:
        warnings.warn(f"{where}: config.json fields not read (they may change nothing): {unknown}",
                      stacklevel=stacklevel + 1)


def _max_len(longest: int, max_len: int | None, default: int, where: str) -> int:
    """``max_len``, or ``default`` when None; never beyond the checkpoint's ``longest`` positions."""
    chosen = default if max_len is None else max_len
    if chosen > longest:
        raise ValueError(f"{where}: max_len={max_len} is beyond the checkpoint's {longest} positions")
    return chosen


def _read_config(source: dict | str | os.PathLike) -> dict:
    if isinstance(source, dict):
        return dict(source)
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"config_from_hf: no config.json at {str(source)!r}")
    return json.loads(path.read_text(encoding="utf-8"))


def _rope(hf: dict, where: str) -> tuple[float, dict | None]:
    """(rope_base, rope_scaling) from either version's fields."""
    parameters = hf.get("rope_parameters")
    if isinstance(parameters, dict) and "full_attention" in parameters:  # Gemma 3 in transformers 5: the global
        parameters = parameters["full_attention"]  # layers' here; the sliding layers' read by _local_base
    if isinstance(parameters, dict):  # transformers 5: the base and the scaling in one dict
        scaling = {k: v for k, v in parameters.items() if k != "rope_theta"}
        base = parameters.get("rope_theta", hf.get("rope_theta", 10000.0))
        if hf.get("rope_scaling"):  # transformers 5 reads a rope_scaling given beside it into rope_parameters
            scaling = {k: v for k, v in scaling.items() if k not in ("rope_type", "type")} | dict(hf["rope_scaling"])
    else:  # transformers 4
        scaling, base = dict(hf.get("rope_scaling") or {}), hf.get("rope_theta", 10000.0)
    kind = scaling.pop("type", None) or scaling.get("rope_type", "default")  # old configs say "type"
    scaling["rope_type"] = kind
    partial = scaling.pop("partial_rotary_factor", hf.get("partial_rotary_factor"))
    if partial not in (None, 1, 1.0):
        raise ValueError(f"{where}: partial_rotary_factor={partial}: partial rotary is not implemented")
    if kind == "default":
        return float(base), None
    if kind not in ROPE_SCALINGS:
        raise ValueError(f"{where}: rope_type {kind!r} is not implemented (the course implements "
                         f"{', '.join(map(repr, ROPE_SCALINGS))}; dynamic NTK and LongRoPE are not)")
    keep = {k: v for k, v in scaling.items() if k in ("rope_type", *ROPE_SCALINGS[kind], *_OPTIONAL.get(kind, ()))}
    return float(base), keep


def _local_base(hf: dict, where: str) -> float | None:
    """Gemma 3's rotary base for its sliding layers (plain angles, no scaling), from either version's fields."""
    parameters = hf.get("rope_parameters")
    if isinstance(parameters, dict) and "sliding_attention" in parameters:
        local = dict(parameters["sliding_attention"] or {})
        if local.get("rope_type", "default") != "default":
            raise ValueError(f"{where}: rescaled rotary angles on sliding layers ({local}) are not implemented")
        return float(local.get("rope_theta", 10000.0))
    return float(hf.get("rope_local_base_freq", 10000.0))


def _layer_types(hf: dict, kind: str) -> tuple[str, ...] | None:
    """Which layers slide: ``layer_types`` where the config lists them, else each Gemma's pattern (Gemma 2
    alternates from a sliding layer; Gemma 3 has ``sliding_window_pattern - 1`` sliding layers, then a global one)."""
    if hf.get("layer_types"):
        return tuple(hf["layer_types"])
    every = {"gemma2": 2, "gemma3_text": hf.get("sliding_window_pattern", hf.get("_sliding_window_pattern", 6))}[kind]
    return tuple("sliding_attention" if (i + 1) % every else "full_attention" for i in range(hf["num_hidden_layers"]))


def config_from_hf(config: dict | str | os.PathLike, *, max_len: int | None = None
                   ) -> DecoderConfig | EncoderConfig:
    """The :class:`lessons_src.DecoderConfig` of a Hugging Face ``config.json`` (a dict, the file, or its folder),
    or for BERT the :class:`lessons_src.EncoderConfig`.

    ``max_len``: the longest sequence the model will read, at most ``max_position_embeddings``; by default
    that or :data:`DEFAULT_MAX_LEN`, whichever is less. A sliding window at least ``max_len`` wide is
    dropped (every query would see all its keys anyway). A field that changes the computation and that the
    course does not implement is refused by name; a field this module does not know is named in a warning.
    Taught in the chapter "From the original block to a modern LLM block".
    """
    where = "config_from_hf"
    hf = _read_config(config)
    kind = hf.get("model_type")
    if kind is None:  # files older than model_type: the family from the class that wrote them
        kind = next((family for name in hf.get("architectures") or [] for prefix, family in _ARCHITECTURES.items()
                     if name.startswith(prefix)), None)
        if kind is None:
            raise ValueError(f"{where}: config.json has no model_type and no architectures to tell the family by; "
                             f"add \"model_type\" (one of {', '.join(map(repr, FAMILIES))})")
        hf["model_type"] = kind
    dense_deepseek = kind == "deepseek_v3" and (hf.get("first_k_dense_replace") or 0) >= hf.get("num_hidden_layers", 1)
    if kind in _MIXTURES and not dense_deepseek:
        raise ValueError(f"{where}: model_type {kind!r} has mixture-of-experts layers, which the course does not "
                         "implement" + (" (a DeepSeek-V3 whose first_k_dense_replace covers every layer is dense, "
                                        "and loads)" if kind == "deepseek_v3" else ""))
    if dense_deepseek:
        return _deepseek_config(hf, max_len, where)
    if kind in _NOT_YET:
        raise ValueError(f"{where}: {_NOT_YET[kind]}")
    if kind not in FAMILIES:
        raise ValueError(f"{where}: model_type {kind!r} is not a family the course reads; it reads "
                         f"{', '.join(map(repr, FAMILIES))} (SmolLM2 is 'llama')")
    family = FAMILIES[kind]
    fields = {ours: hf[theirs] for theirs, ours in family.names.items() if hf.get(theirs) is not None}
    if kind == "bert":
        return _bert_config(hf, fields, max_len, where)
    for name, value in family.defaults.items():
        fields.setdefault(name, value)
    fields.update(family.switches)
    read = set(family.names) | {"max_position_embeddings", "n_positions", "rope_theta", "rope_scaling",
                                "rope_parameters", "partial_rotary_factor"}
    refused = _refusals(kind, hf)
    if refused:
        raise ValueError(f"{where}: this {kind} checkpoint sets {refused}, which the course does not implement")
    read |= _CHECKED
    if fields.get("positions") == "rope":
        fields["rope_base"], fields["rope_scaling"] = _rope(hf, where)
    longest = hf.get("max_position_embeddings", hf.get("n_positions"))
    if not isinstance(longest, int):
        raise ValueError(f"{where}: config.json gives no max_position_embeddings (or n_positions)")
    fields["max_len"] = _max_len(longest, max_len, min(longest, DEFAULT_MAX_LEN), where)
    window = hf.get("sliding_window") if kind in ("mistral", "gemma2", "gemma3_text") else None
    # Gemma 3's sliding layers keep their own rotary base even where the window covers max_len: kept for them.
    if window is not None and (window < fields["max_len"] or kind == "gemma3_text"):
        fields["sliding_window"] = window
        if kind.startswith("gemma"):
            fields["layer_types"] = _layer_types(hf, kind)
            if "sliding_attention" not in fields["layer_types"]:
                del fields["sliding_window"]
    if kind == "gemma3_text" and "sliding_window" in fields:
        fields["rope_local_base_freq"] = _local_base(hf, where)
    if kind == "gemma3_text" and hf.get("use_bidirectional_attention"):
        raise ValueError(f"{where}: use_bidirectional_attention=True (EmbeddingGemma) is not implemented")
    _warn_unread(hf, read, where, stacklevel=2)
    return DecoderConfig(**fields)


# Fields read only to check that they hold the value the course implements.
_CHECKED = {"hidden_act", "activation_function", "attention_bias", "mlp_bias", "use_sliding_window", "sliding_window",
            "layer_types", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention", "head_dim",
            "tie_word_embeddings", "hidden_activation", "rope_local_base_freq", "sliding_window_pattern",
            "use_bidirectional_attention", "cache_implementation", "final_logit_softcapping", "attn_logit_softcapping",
            "query_pre_attn_scalar", "_sliding_window_pattern", "use_mrope"}


def _deepseek_config(hf: dict, max_len: int | None, where: str) -> MLAConfig:
    """A DeepSeek-V3 whose every layer is dense: multi-head latent attention and SwiGLU (the experts' fields of its
    config.json describe layers it does not have)."""
    wrong = {name: hf[name] for name, value in (("hidden_act", "silu"), ("attention_bias", False),
                                                ("tie_word_embeddings", False)) if hf.get(name, value) != value}
    if wrong:
        raise ValueError(f"{where}: this deepseek_v3 checkpoint sets {wrong}, which the course does not implement")
    fields = {ours: hf[theirs] for theirs, ours in _DEEPSEEK_NAMES.items() if theirs in hf}
    fields["q_lora_rank"] = hf.get("q_lora_rank")  # None: a plain q_proj
    fields["rope_base"], fields["rope_scaling"] = _rope(hf, where)
    longest = hf.get("max_position_embeddings", 4096)
    fields["max_len"] = _max_len(longest, max_len, min(longest, DEFAULT_MAX_LEN), where)
    known = set(_DEEPSEEK_NAMES) | {"max_position_embeddings", "rope_theta", "rope_scaling", "rope_parameters",
                                    "hidden_act", "attention_bias", "tie_word_embeddings", "first_k_dense_replace",
                                    "num_key_value_heads", "moe_intermediate_size", "n_shared_experts",
                                    "n_routed_experts", "routed_scaling_factor", "n_group", "topk_group",
                                    "num_experts_per_tok", "norm_topk_prob", "output_router_logits",
                                    "num_mtp_layers", "num_nextn_predict_layers", "topk_method", "scoring_func",
                                    "aux_loss_alpha", "seq_aux", "ep_size", "moe_layer_freq", "head_dim",
                                    "qk_head_dim", "rope_interleave"}
    _warn_unread(hf, known, where, stacklevel=3)
    return MLAConfig(**fields)


def _bert_config(hf: dict, fields: dict, max_len: int | None, where: str) -> EncoderConfig:
    wrong = {name: hf[name] for name, value in (("hidden_act", "gelu"), ("position_embedding_type", "absolute"),
                                                ("is_decoder", False), ("add_cross_attention", False))
             if hf.get(name, value) != value}
    if wrong:
        raise ValueError(f"{where}: this bert checkpoint sets {wrong}, which the course does not implement")
    longest = hf.get("max_position_embeddings", 512)
    max_len = _max_len(longest, max_len, longest, where)  # BERT stores its position table: no rotary cost
    known = set(_BERT_NAMES) | {"hidden_act", "position_embedding_type", "is_decoder", "add_cross_attention",
                                "max_position_embeddings", "hidden_dropout_prob", "attention_probs_dropout_prob",
                                "classifier_dropout", "gradient_checkpointing", "layer_norm_eps",
                                "tie_word_embeddings"}  # the masked-LM head's tie: the encoder has no head
    _warn_unread(hf, known, where, stacklevel=3)
    return EncoderConfig(**fields, max_len=max_len)


def _refusals(kind: str, hf: dict) -> dict:
    """The fields of ``hf`` whose values the course does not implement, with those values."""
    wrong = {}
    if kind == "gpt2":
        if hf.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
            wrong["activation_function"] = hf["activation_function"]
        for name, value in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                            ("add_cross_attention", False), ("tie_word_embeddings", True)):
            if hf.get(name, value) != value:
                wrong[name] = hf[name]
        return wrong
    if hf.get("hidden_act", "silu") != "silu":
        wrong["hidden_act"] = hf["hidden_act"]
    for name in ("attention_bias", "mlp_bias"):  # Llama's and Qwen3's: biases on q, k, v and o (or the MLP)
        if hf.get(name):
            wrong[name] = hf[name]
    if kind in ("qwen2", "qwen3") and hf.get("use_sliding_window"):
        wrong["use_sliding_window"] = True
    if hf.get("use_mrope"):  # Qwen2-VL's multimodal rotary positions
        wrong["use_mrope"] = True
    if kind.startswith("gemma") and hf.get("hidden_activation", "gelu_pytorch_tanh") not in ("gelu_pytorch_tanh",
                                                                                               "gelu_new"):
        wrong["hidden_activation"] = hf["hidden_activation"]
    if kind.startswith("gemma"):
        wrong.pop("hidden_act", None)  # Gemma reads hidden_activation; old configs carry an unused hidden_act
    types = hf.get("layer_types")
    if types and any(t != "full_attention" for t in types) and kind in ("llama", "qwen2", "qwen3"):
        wrong["layer_types"] = sorted(set(types))
    return wrong


def load_safetensors(folder: str | os.PathLike) -> dict[str, Tensor]:
    """Every tensor of a checkpoint folder's ``*.safetensors`` (one file, or the shards its
    ``model.safetensors.index.json`` lists), by name, as stored. Taught in the chapter "From the original
    block to a modern LLM block"."""
    from safetensors.torch import load_file

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    else:
        files = [p.name for p in sorted(folder.glob("*.safetensors"))]
    if not files:
        if any(folder.glob("*.bin")):
            raise ValueError(f"load_safetensors: {str(folder)!r} holds pytorch_model.bin weights, not safetensors; the "
                             "course reads safetensors only (pickled .bin files can run code when loaded). Convert "
                             "once with transformers: AutoModelForCausalLM.from_pretrained(folder)"
                             ".save_pretrained(new_folder) writes model.safetensors")
        raise ValueError(f"load_safetensors: no *.safetensors in {str(folder)!r}")
    weights: dict[str, Tensor] = {}
    for name in files:
        for key, tensor in load_file(folder / name).items():
            if key in weights:
                raise ValueError(f"load_safetensors: {key!r} is in two files of {str(folder)!r}")
            weights[key] = tensor
    return weights


class Tokenizer:
    """A ``tokenizer.json`` read by the ``tokenizers`` library: ``encode(text)`` gives the ids transformers'
    tokenizer gives (with the special tokens the file adds, such as a beginning-of-text id), ``decode(ids)``
    the text. Taught in the chapter "From the original block to a modern LLM block".
    """

    def __init__(self, tokenizer) -> None:
        self.backend = tokenizer

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Tokenizer:
        try:
            from tokenizers import Tokenizer as Backend
        except ImportError as error:
            raise ImportError("Tokenizer: reading tokenizer.json needs the 'tokenizers' package (pip install "
                              "tokenizers; Colab has it)") from error
        return cls(Backend.from_file(str(path)))

    @classmethod
    def from_char_tokenizer(cls, chars: CharTokenizer) -> Tokenizer:
        """A course :class:`lessons_src.CharTokenizer` as a ``tokenizers`` one: one id per character, the same ids."""
        from tokenizers import Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as Backend

        if not isinstance(chars, CharTokenizer):
            raise ValueError(f"Tokenizer.from_char_tokenizer: expected a CharTokenizer, got {type(chars).__name__}")
        # The unknown token is not in the vocabulary, so a character the model never saw is an error, as in
        # CharTokenizer.encode, never silently another character's id.
        backend = Backend(models.WordLevel({c: i for i, c in enumerate(chars.chars)}, unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character
        backend.decoder = decoders.Fuse()  # the characters back together, no spaces between
        return cls(backend)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"Tokenizer.encode: text must be a str, got {type(text).__name__}")
        try:
            return self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        except Exception as error:  # tokenizers raises its own Exception type
            unknown = sorted({c for c in text if self.backend.token_to_id(c) is None})[:10]
            raise ValueError(f"Tokenizer.encode: the text cannot be encoded ({error}); characters without an id "
                             f"in this vocabulary: {unknown}") from error

    def decode(self, ids: list[int] | Tensor, skip_special_tokens: bool = False) -> str:
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def save(self, path: str | os.PathLike) -> None:
        self.backend.save(str(path))

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size})"


def _resolve(path_or_id: str | os.PathLike, revision: str | None) -> Path:
    path = Path(path_or_id)
    if path.is_dir():
        return path
    name = str(path_or_id)
    if path.exists() or name.count("/") != 1 or name.startswith((".", "/")):
        raise ValueError(f"from_pretrained: {name!r} is not a checkpoint folder here, nor a Hub id ('org/name')")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as error:
        raise ValueError(f"from_pretrained: {name!r} is not a folder here, and fetching it from the Hugging Face "
                         "Hub needs the 'huggingface_hub' package (pip install huggingface_hub; Colab has it)") from error
    try:
        return Path(snapshot_download(name, revision=revision,
                                      allow_patterns=["config.json", "*.safetensors", "*.safetensors.index.json",
                                                      "tokenizer.json"]))
    except Exception as error:  # no network, no such model, a gated model without a token
        raise ValueError(f"from_pretrained: {name!r} is not a folder here, and the Hub did not give it: "
                         f"{type(error).__name__}: {error}") from error


def from_pretrained(path_or_id: str | os.PathLike, *, dtype: torch.dtype | None = torch.float32,
                    max_len: int | None = None, revision: str | None = None
                    ) -> tuple[DecoderLM | EncoderModel, Tokenizer | None]:
    """``(model, tokenizer)`` of a Hugging Face checkpoint: a local folder, or a model id fetched from the Hub.

    ``model`` is the course's own :class:`lessons_src.DecoderLM` (no transformers class in it), or for BERT
    its :class:`lessons_src.EncoderModel` (``BertModel``'s weights, or ``BertForMaskedLM``'s encoder under
    ``bert.``; ``model(tokens, attention_mask)`` gives the last hidden state), with the
    checkpoint's weights in ``dtype`` (float32 by default: real checkpoints are stored in bfloat16, which a
    CPU computes slowly and coarsely; ``None`` keeps the stored dtype), in eval mode. ``tokenizer`` is a
    :class:`Tokenizer` of the folder's ``tokenizer.json``, or None when there is none. ``max_len``: see
    :func:`config_from_hf`. Taught in the chapter "From the original block to a modern LLM block".
    """
    folder = _resolve(path_or_id, revision)
    hf = _read_config(folder)
    config = config_from_hf(hf, max_len=max_len)
    weights = load_safetensors(folder)
    renamed = FAMILIES[hf["model_type"]].rename(weights, config)
    if isinstance(config, EncoderConfig) and "pooler.weight" in renamed:  # BertModel has one, BertForMaskedLM not
        config = dataclasses.replace(config, pooler=True)
    stored = next(iter(weights.values())).dtype
    kind = {DecoderConfig: DecoderLM, EncoderConfig: EncoderModel, MLAConfig: MLADecoderLM}[type(config)]
    with torch.device("meta"):
        model = kind(config)
    model = model.to_empty(device="cpu").to(stored if dtype is None else dtype)
    _load_strictly(model, renamed, folder)
    for module in model.modules():  # the rotary tables and position buffers were made on "meta"
        _rebuild_buffers(module, config)
    model.token_ids = {k: hf.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}  # for save_pretrained
    tokenizer_file = folder / "tokenizer.json"
    tokenizer = Tokenizer.from_file(tokenizer_file) if tokenizer_file.is_file() else None
    return model.eval(), tokenizer


def _load_strictly(model: DecoderLM, weights: dict[str, Tensor], folder: Path) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    wrong = [f"{name}: checkpoint {tuple(weights[name].shape)}, model {tuple(expected[name].shape)}"
             for name in expected if name in weights and weights[name].shape != expected[name].shape]
    if missing or extra or wrong:
        raise ValueError(f"from_pretrained: the weights in {str(folder)!r} do not fit the model its config.json "
                         f"describes: missing {missing[:6]}{' ...' if len(missing) > 6 else ''}, left over "
                         f"{extra[:6]}{' ...' if len(extra) > 6 else ''}, wrong shape {wrong[:3]}")
    model.load_state_dict(weights, strict=True)
    if getattr(model.config, "tie_word_embeddings", False):
        model.lm_head.weight = model.embed_tokens.weight


def _rebuild_buffers(module: torch.nn.Module, config: DecoderConfig) -> None:
    """Buffers that are computed, not stored (the rotary tables), computed again on the CPU."""
    from .llm import Attention
    from .mla import MultiHeadLatentAttention

    if isinstance(module, Attention) and config.positions == "rope" or isinstance(module, MultiHeadLatentAttention):
        module.rope_cos, module.rope_sin = module.rotary_tables()


def _family_of(config: DecoderConfig) -> str:
    """The Hugging Face family whose class computes what ``config`` computes, or a ValueError naming why none does."""
    c = config
    todays = {name: getattr(c, name) for name in ("norm_plus_one", "query_pre_attn_scalar", "attn_logit_softcapping",
                                                    "sinks", "attn_output_gate") if getattr(c, name)}
    if todays:
        raise ValueError(f"save_pretrained: no family save_pretrained writes has {todays} (Gemma's and gpt-oss's "
                         "switches)")
    if (c.norm, c.placement, c.ffn, c.positions, c.bias) == ("layer", "pre", "gelu_tanh", "learned", True):
        if c.kv_heads != c.num_heads or c.head_dim * c.num_heads != c.d_model or not c.tie_word_embeddings \
                or c.qk_norm or c.sliding_window or c.qkv_bias is False:
            raise ValueError("save_pretrained: a GPT-2 has as many KV heads as heads, head_dim = d_model / num_heads, "
                             "tied embeddings, no QK-norm and no sliding window")
        return "gpt2"
    llama = {k: v for k, v in _LLAMA_SWITCHES.items() if k != "rope_layout"}
    wrong = {k: getattr(c, k) for k, v in llama.items() if getattr(c, k) != v}
    if wrong:
        raise ValueError(f"save_pretrained: a Llama-style checkpoint needs {llama}, and a GPT-2 one norm='layer', "
                         f"placement='pre', ffn='gelu_tanh', positions='learned', bias=True; this model has {wrong}")
    if c.layer_types is not None and c.sliding_window is not None and "full_attention" in c.layer_types:
        raise ValueError("save_pretrained: interleaved sliding and global layers (layer_types) are Gemma's and "
                         "gpt-oss's, not written here")
    if c.qk_norm:
        if c.qkv_bias or c.sliding_window:
            raise ValueError("save_pretrained: Qwen3 (QK-norm) has no q/k/v biases and no sliding window here")
        return "qwen3"
    if c.qkv_bias:
        if c.sliding_window:
            raise ValueError("save_pretrained: Qwen2 (q/k/v biases) with a sliding window is not written here")
        return "qwen2"
    return "mistral" if c.sliding_window else "llama"


def _hf_config(config: DecoderConfig, family: str) -> dict:
    c = config
    if family == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": c.vocab_size,
                "n_embd": c.d_model, "n_head": c.num_heads, "n_layer": c.num_layers, "n_positions": c.max_len,
                "n_inner": c.hidden, "layer_norm_epsilon": c.eps, "activation_function": "gelu_new",
                "tie_word_embeddings": True, "scale_attn_weights": True, "bos_token_id": None, "eos_token_id": None}
    architecture = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                    "qwen3": "Qwen3ForCausalLM"}[family]
    hf = {"architectures": [architecture], "model_type": family, "vocab_size": c.vocab_size,
          "hidden_size": c.d_model, "num_attention_heads": c.num_heads, "num_key_value_heads": c.kv_heads,
          "num_hidden_layers": c.num_layers, "intermediate_size": c.hidden, "head_dim": int(c.head_dim),
          "rms_norm_eps": c.eps, "max_position_embeddings": c.max_len, "hidden_act": "silu",
          "tie_word_embeddings": c.tie_word_embeddings, "rope_theta": float(c.rope_base),
          "rope_scaling": c.rope_scaling, "bos_token_id": None, "eos_token_id": None}
    if family in ("llama", "qwen3"):
        hf.update(attention_bias=False)
    if family == "llama":
        hf.update(mlp_bias=False)
    if family == "mistral":
        hf["sliding_window"] = c.sliding_window
    if family in ("qwen2", "qwen3"):
        hf.update(use_sliding_window=False, sliding_window=None)
    return hf


def _hf_weights(model: DecoderLM, family: str) -> dict[str, Tensor]:
    c = model.config
    weights = {name: w.detach() for name, w in model.state_dict().items()}
    if family == "gpt2":
        out = {"transformer.wte.weight": weights["embed_tokens.weight"],
               "transformer.wpe.weight": weights["embed_positions.weight"],
               "transformer.ln_f.weight": weights["norm.weight"], "transformer.ln_f.bias": weights["norm.bias"]}
        for i in range(c.num_layers):
            h, layer = f"transformer.h.{i}.", f"layers.{i}."
            attn = [weights[f"{layer}self_attn.{p}_proj.weight"].t() for p in "qkv"]
            out[h + "attn.c_attn.weight"] = torch.cat(attn, dim=1)
            out[h + "attn.c_attn.bias"] = torch.cat([weights[f"{layer}self_attn.{p}_proj.bias"] for p in "qkv"])
            for theirs, ours, transpose in (("attn.c_proj", "self_attn.o_proj", True),
                                            ("mlp.c_fc", "mlp.up_proj", True), ("mlp.c_proj", "mlp.down_proj", True),
                                            ("ln_1", "input_layernorm", False),
                                            ("ln_2", "post_attention_layernorm", False)):
                weight = weights[f"{layer}{ours}.weight"]
                out[f"{h}{theirs}.weight"] = weight.t() if transpose else weight
                out[f"{h}{theirs}.bias"] = weights[f"{layer}{ours}.bias"]
        return out
    if c.rope_layout == "interleaved":  # Hugging Face's classes rotate halves: reorder each head's features
        order = rope_layout_permutation(c.head_dim)
        for name in list(weights):
            if name.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias")):
                w = weights[name]
                weights[name] = w.view(-1, c.head_dim, *w.shape[1:])[:, order].reshape(w.shape)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                weights[name] = weights[name][order]
    out = {(name if name == "lm_head.weight" else "model." + name): w for name, w in weights.items()}
    if c.tie_word_embeddings:
        del out["lm_head.weight"]  # written once, as transformers writes a tied checkpoint
    return out


def save_pretrained(model: DecoderLM, folder: str | os.PathLike, tokenizer: Tokenizer | CharTokenizer | None = None
                    ) -> str:
    """Write ``model`` as a Hugging Face checkpoint folder (``config.json``, ``model.safetensors`` and, with a
    tokenizer, ``tokenizer.json``), in the family its switches match; returns that family's ``model_type``. A model
    :func:`from_pretrained` loaded keeps its checkpoint's ``bos_token_id``/``eos_token_id``/``pad_token_id``
    (``model.token_ids``); a course model has none (null).

    A Llama-style model (RMSNorm, pre-norm, SwiGLU, rotary, no biases) becomes a Llama, or a Mistral with a
    sliding window, a Qwen2 with q/k/v biases, a Qwen3 with QK-norm; a pre-LN GPT-2-style one (LayerNorm,
    tanh GELU, learned positions, biases, tied embeddings) a GPT-2. Rotary pairs in the interleaved layout
    are reordered to Hugging Face's rotate-half (the same scores, :func:`lessons_src.rope_layout_permutation`).
    Anything else is refused, naming the switches no family has. Taught in the chapter "From the original
    block to a modern LLM block".
    """
    from safetensors.torch import save_file

    if not isinstance(model, DecoderLM):
        raise ValueError(f"save_pretrained: model must be a lessons_src.DecoderLM, got {type(model).__name__}")
    family = _family_of(model.config)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hf = _hf_config(model.config, family)
    hf.update(getattr(model, "token_ids", {}))  # a loaded checkpoint's bos/eos/pad ids, so generate stops where it did
    hf["torch_dtype"] = str(model.embed_tokens.weight.dtype).removeprefix("torch.")
    (folder / "config.json").write_text(json.dumps(hf, indent=2) + "\n", encoding="utf-8")
    weights = {name: w.contiguous().clone() for name, w in _hf_weights(model, family).items()}
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    if tokenizer is not None:
        if isinstance(tokenizer, CharTokenizer):
            tokenizer = Tokenizer.from_char_tokenizer(tokenizer)
        if not isinstance(tokenizer, Tokenizer):
            raise ValueError(f"save_pretrained: tokenizer must be a Tokenizer or CharTokenizer, got "
                             f"{type(tokenizer).__name__}")
        tokenizer.save(folder / "tokenizer.json")
    return family


def greedy(model: DecoderLM | MLADecoderLM, ids: list[int] | Tensor, new_tokens: int,
           eos_id: int | None = None) -> list[int]:
    """One sequence ``ids`` (a list, or a tensor ``(L,)`` or ``(1, L)``) followed by up to ``new_tokens`` more, each
    the likeliest next token, decoded one at a time with the model's KV caches
    (:meth:`lessons_src.DecoderLM.new_caches`): the prompt and the new tokens, as one list. With ``eos_id``, stops
    after that token (as transformers' ``generate`` stops at the config's ``eos_token_id``); without, never.
    Taught in the chapter "From the original block to a modern LLM block"."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() > 2 or (ids.dim() == 2 and ids.size(0) != 1) or ids.numel() == 0:
        raise ValueError(f"greedy: ids must be one non-empty sequence, (L,) or (1, L), got {tuple(ids.shape)}; "
                         "decode a batch one sequence at a time")
    ids = ids.view(1, -1)
    if ids.size(1) + new_tokens > model.config.max_len:
        raise ValueError(f"greedy: {ids.size(1)} + {new_tokens} tokens is more than max_len={model.config.max_len}")
    caches = model.new_caches()
    out = ids[0].tolist()
    with torch.no_grad():
        logits = model(ids, caches)[:, -1]
        for step in range(new_tokens):
            out.append(int(logits.argmax(-1)))
            if out[-1] == eos_id or step == new_tokens - 1:
                break
            logits = model(torch.tensor([[out[-1]]]), caches)[:, -1]
    return out



@torch.no_grad()
def head_survey(model: torch.nn.Module, repeated: Tensor, control: Tensor, unrelated: Tensor | None = None
                ) -> dict[str, Tensor | float]:
    """Every head's score on the behaviours the course's chapters found in small models, each ``(layers, H)``, with
    the baselines to read them against.

    ``repeated (B, 2T)``: pieces of text each followed by a copy of itself, ``[Y, Y]``; ``control (B, 2T)``: the
    same pieces after the text that really precedes them, ``[X, Y]``. The second halves are the same tokens at the
    same positions with as much context before them; only ``repeated`` has a copy there. Scores:
    ``"induction"``, the weight from each token of the second half of ``repeated`` on the token after its copy
    ``T`` positions earlier (:func:`lessons_src.induction_score`, chapter "Induction heads"); ``"induction
    control"``, the same offset on ``control``, where the first half is other text (a head that looks ``T - 1``
    back by position scores there too); ``"previous"`` and ``"two back"``, the weight on the token one and two
    before (:func:`lessons_src.previous_token_score`, chapter "A language model and its heads"), on ``control``;
    ``"first token"``, the mean weight of queries 1 .. 2T-1 on position 0, on ``control`` (chapter "Attention in
    today's open models"). Baselines: ``"uniform <score>"``, what a head spreading its weight evenly over the
    keys gets (a float); ``"reference induction 1"`` and ``"... 2"``, what a head gets that attends evenly to
    every token that followed an earlier occurrence of the current token (of the last two tokens): references,
    not upper bounds (a longer match scores higher). Losses, per piece ``(B,)``: ``"loss copy"`` on the second
    half of ``repeated``, ``"loss natural"`` on the second half of ``control``, and with ``unrelated (B, 2T)``
    (the same pieces after other text, ``[Z, Y]``: the same seam at the middle as the copy) ``"loss
    unrelated"``. Taught in the chapter "Attention in today's open models".
    """
    from .language_model import induction_score, previous_token_score
    from .zoo import logits_and_weights

    for name, tokens in (("repeated", repeated), ("control", control)):
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.size(1) % 2 or tokens.size(1) < 4:
            raise ValueError(f"head_survey: {name} must be token ids (B, 2T) with T >= 2, got "
                             f"{tuple(getattr(tokens, 'shape', ()))}")
    T = repeated.size(1) // 2
    if repeated.shape != control.shape or not torch.equal(repeated[:, T:], control[:, T:]):
        raise ValueError("head_survey: control must have repeated's shape and its second halves, got "
                         f"{tuple(control.shape)} and {tuple(repeated.shape)}")
    if not torch.equal(repeated[:, :T], repeated[:, T:]):
        raise ValueError("head_survey: the second half of each repeated sequence must copy its first half")
    if unrelated is not None and (not isinstance(unrelated, Tensor) or unrelated.shape != repeated.shape
                                  or not torch.equal(unrelated[:, T:], repeated[:, T:])):
        raise ValueError("head_survey: unrelated must have repeated's shape and its second halves")
    logits, on_repeats = logits_and_weights(model, repeated)
    control_logits, on_control = logits_and_weights(model, control)
    L = 2 * T
    uniform = (torch.tril(torch.ones(L, L)) / torch.arange(1, L + 1)[:, None])[None, None]  # (1, 1, L, L)
    return {
        "induction": torch.stack([induction_score(w, T) for w in on_repeats]),
        "induction control": torch.stack([induction_score(w, T) for w in on_control]),
        "previous": torch.stack([previous_token_score(w) for w in on_control]),
        "two back": torch.stack([w.diagonal(offset=-2, dim1=-2, dim2=-1).mean(dim=(0, -1)) for w in on_control]),
        "first token": torch.stack([w[..., 1:, 0].mean(dim=(0, 2)) for w in on_control]),
        "uniform induction": induction_score(uniform, T).item(),
        "uniform previous": previous_token_score(uniform).item(),
        "uniform first token": uniform[..., 1:, 0].mean().item(),
        "reference induction 1": induction_score(_matching_induction(repeated, 1), T).item(),
        "reference induction 2": induction_score(_matching_induction(repeated, 2), T).item(),
        "loss copy": _second_half_loss(logits, repeated),
        "loss natural": _second_half_loss(control_logits, control),
    } | ({} if unrelated is None else {"loss unrelated": second_half_losses(model, unrelated)})


@torch.no_grad()
def second_half_losses(model: torch.nn.Module, tokens: Tensor) -> Tensor:
    """Each sequence's mean loss (nats per token) on its second half, tokens T+1 .. 2T-1 of ``tokens (B, 2T)``:
    ``(B,)``. Taught in the chapter "Attention in today's open models"."""
    return _second_half_loss(model(tokens), tokens)


def _second_half_loss(logits: Tensor, tokens: Tensor) -> Tensor:
    """Each sequence's mean loss on predicting its second half's tokens T+1 .. 2T-1: ``(B,)``."""
    T = tokens.size(1) // 2
    losses = torch.nn.functional.cross_entropy(logits[:, T:-1].flatten(0, 1).float(), tokens[:, T + 1:].flatten(),
                                               reduction="none")
    return losses.view(tokens.size(0), -1).mean(dim=1)


def _matching_induction(tokens: Tensor, match: int) -> Tensor:
    """The weights ``(B, 1, L, L)`` of a head that attends, from each query, evenly to every key whose ``match``
    previous tokens are the query's last ``match`` tokens (an earlier occurrence), or to key 0 where there is none."""
    B, L = tokens.shape
    follows = torch.zeros(B, L, L)
    follows[:, :, 1:] = (tokens[:, :, None] == tokens[:, None, :-1]).float()  # [b, i, k]: tokens[k-1] == tokens[i]
    for back in range(1, match):  # and tokens[k-1-back] == tokens[i-back]
        same = torch.zeros(B, L, L)
        same[:, back:, back + 1:] = (tokens[:, :-back, None] == tokens[:, None, :-back - 1]).float()
        follows = follows * same
    follows = follows * torch.tril(torch.ones(L, L))  # keys k <= i only
    none = follows.sum(-1, keepdim=True) == 0
    follows[..., :1] = torch.where(none, 1.0, follows[..., :1])
    return (follows / follows.sum(-1, keepdim=True))[:, None]


@contextmanager
def ablated_head(model: torch.nn.Module, layer: int, head: int):
    """Within the ``with`` block, head ``head`` of layer ``layer`` (both from 0) writes nothing: its output is
    zeroed before ``o_proj`` mixes the heads. For a ``DecoderLM`` or an ``MLADecoderLM``. Taught in the chapter
    "Attention in today's open models"."""
    attention = model.layers[layer].self_attn
    heads = model.config.num_heads
    if not 0 <= head < heads:
        raise ValueError(f"ablated_head: head must be 0 .. {heads - 1}, got {head}")
    width = attention.o_proj.in_features // heads

    def zero(_module, args):
        x = args[0].clone()
        x[..., head * width:(head + 1) * width] = 0
        return (x,)

    handle = attention.o_proj.register_forward_pre_hook(zero)
    try:
        yield
    finally:
        handle.remove()
