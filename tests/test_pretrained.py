"""Real checkpoints on the course's code (lessons_src.pretrained): for each family, a tiny random checkpoint that
transformers itself writes (save_pretrained: config.json, model.safetensors) next to a small trained tokenizer,
loaded through the entry point a learner uses; logits equal to transformers' class in float64 (1e-5) and greedy
decoding with the course's KV cache equal to transformers' token for token. Then the other way: course models
written by lessons_src.save_pretrained and read by transformers. Offline: nothing is downloaded.

Hugging Face computes its RMSNorms and rotary angles in float32 even in a float64 model, hence 1e-5 (GPT-2's class
has no float32 step, and there the two agree to 1e-12). Weights are random at std 0.2, logits up to about 5
(std 0.02 puts every score near 0, where a wrong scale or rotary hardly shows; at std 0.3, logits up to 10, Llama
3's float32 rounding alone reaches 1.3e-5).
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from lessons_src import DecoderConfig, DecoderLM, MLADecoderLM, course_text
from lessons_src.pretrained import (
    DEFAULT_MAX_LEN,
    Tokenizer,
    config_from_hf,
    from_pretrained,
    greedy,
    load_safetensors,
    save_pretrained,
)

transformers = pytest.importorskip("transformers")  # the dev extra; the course package never imports it

TOL = {"atol": 1e-5, "rtol": 1e-5}
VOCAB, D, HEADS, KV_HEADS, LAYERS, MAX_LEN = 320, 32, 4, 2, 2, 48
SIZES = dict(vocab_size=VOCAB, hidden_size=D, intermediate_size=72, num_hidden_layers=LAYERS,
             num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=MAX_LEN,
             rms_norm_eps=1e-6, attn_implementation="eager")
GEMMA = {**SIZES, "head_dim": 16, "sliding_window": 8}
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 12,
        "beta_fast": 8, "beta_slow": 1}
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}


def _families():
    t = transformers
    return {
        # Llama 3.1-style: its rotary scaling (original context 16, so that every band of the blend is used).
        "llama3": lambda: t.LlamaForCausalLM(t.LlamaConfig(**SIZES, rope_parameters=LLAMA3_ROPE)),
        "smollm2": lambda: t.LlamaForCausalLM(t.LlamaConfig(**SIZES, tie_word_embeddings=True,
                                                            rope_parameters={"rope_type": "default",
                                                                             "rope_theta": 100000.0})),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**SIZES, sliding_window=8)),
        "qwen2.5": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**SIZES, tie_word_embeddings=True,
                                                           rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 1000000.0})),
        # Qwen3's own head_dim: 4 heads of 16 on a model of width 32.
        "qwen3": lambda: t.Qwen3ForCausalLM(t.Qwen3Config(**SIZES, head_dim=16)),
        # Gemma 2: sandwich norms, GeGLU, scaled embeddings, soft-capped scores and logits, sliding layers 0 and 2.
        "gemma2": lambda: t.Gemma2ForCausalLM(t.Gemma2Config(**GEMMA, query_pre_attn_scalar=24,
                                                             attn_logit_softcapping=4.0, final_logit_softcapping=3.0)),
        # Gemma 3: QK-norm, linear-scaled angles on its global layer, another base on its sliding ones.
        "gemma3": lambda: t.Gemma3ForCausalLM(t.Gemma3TextConfig(
            **GEMMA, query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
        # Qwen3 at long context: YaRN-stretched angles, cos and sin times YaRN's attention factor.
        "qwen3-yarn": lambda: t.Qwen3ForCausalLM(t.Qwen3Config(**SIZES, head_dim=16, rope_parameters=YARN)),
        # DeepSeek-V3 with every layer dense: latent attention, YaRN with DeepSeek's softmax correction.
        "deepseek-v3": lambda: t.DeepseekV3ForCausalLM(t.DeepseekV3Config(
            **{k: v for k, v in SIZES.items() if k != "num_key_value_heads"}, num_key_value_heads=HEADS,
            first_k_dense_replace=LAYERS, moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2,
            n_group=1, topk_group=1, kv_lora_rank=12, q_lora_rank=20, qk_rope_head_dim=6, qk_nope_head_dim=8,
            v_head_dim=10, rope_parameters=dict(YARN, mscale=0.707, mscale_all_dim=1.0))),
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(vocab_size=VOCAB, n_embd=D, n_head=HEADS, n_layer=LAYERS,
                                                       n_positions=MAX_LEN, bos_token_id=0, eos_token_id=0,
                                                       attn_implementation="eager")),
    }


def _randomize(model, seed: int) -> None:
    """Weights at std 0.2; norm weights around 1 (Gemma's norms multiply by 1 + weight: around 0 there)."""
    g = torch.Generator().manual_seed(seed)
    plus_one = "Gemma" in type(model).__name__
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            norm = "norm" in name or ".ln_" in name
            p.copy_((0.5 * noise if plus_one else 1 + 0.5 * noise) if norm else 0.2 * noise)


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A byte-level BPE tokenizer (the 256 bytes, a beginning-of-text id, merges up to VOCAB ids) trained on the
    course's text, as tokenizer.json."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|bos|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator([course_text()[:20000]], trainer)
    backend.post_processor = processors.TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", 0)])
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    backend.save(str(path))
    assert backend.get_vocab_size() <= VOCAB
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tokenizer_file):
    """family -> (folder written by transformers' save_pretrained, the transformers model, float64)."""
    out = {}
    for seed, (family, make) in enumerate(_families().items()):
        torch.manual_seed(seed)
        hf = make().to(torch.float64).eval()
        _randomize(hf, seed)
        folder = tmp_path_factory.mktemp(family)
        hf.save_pretrained(folder)
        (folder / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
        out[family] = folder, hf
    return out


FAMILY_NAMES = ["llama3", "smollm2", "mistral", "qwen2.5", "qwen3", "gemma2", "gemma3", "qwen3-yarn", "deepseek-v3",
                "gpt2"]


def _greedy_hf(hf, ids: list[int], new_tokens: int) -> list[int]:
    sequence = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(new_tokens):
            sequence = torch.cat([sequence, hf(input_ids=sequence).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return sequence[0].tolist()


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_a_checkpoint_written_by_transformers_loads_and_decodes_alike(family, checkpoints):
    folder, hf = checkpoints[family]
    model, tokenizer = from_pretrained(folder, dtype=torch.float64)
    assert type(model) is (MLADecoderLM if family == "deepseek-v3" else DecoderLM)
    assert not any("transformers" in type(m).__module__ for m in model.modules())
    ids = tokenizer.encode("The attention of each head reads the keys.")[:MAX_LEN]
    tokens = torch.tensor([ids, ids[::-1]])[:, :24]
    with torch.no_grad():
        expected = hf(input_ids=tokens).logits  # (B, L, V)
        assert expected.abs().max() > 1, "the logits should be far from 0, or a mistake could hide"
        assert_close(model(tokens), expected, **(TOL if family != "gpt2" else {"atol": 1e-12, "rtol": 1e-12}))
    prompt = ids[:6]
    assert greedy(model, prompt, MAX_LEN - 6) == _greedy_hf(hf, prompt, MAX_LEN - 6)


def test_the_families_set_what_makes_them_differ(checkpoints):
    configs = {family: from_pretrained(checkpoints[family][0])[0].config for family in FAMILY_NAMES}
    assert configs["llama3"].rope_scaling == {k: v for k, v in LLAMA3_ROPE.items() if k != "rope_theta"}
    assert configs["llama3"].rope_base == 500000.0 and configs["qwen2.5"].rope_base == 1000000.0
    assert configs["smollm2"].tie_word_embeddings and not configs["llama3"].tie_word_embeddings
    assert configs["mistral"].sliding_window == 8 and configs["mistral"].layer_types is None
    assert configs["qwen2.5"].qkv_bias and not configs["qwen2.5"].bias
    assert configs["qwen3"].qk_norm and configs["qwen3"].head_dim == 16 and configs["qwen3"].d_model == 32
    assert (configs["gpt2"].norm, configs["gpt2"].ffn, configs["gpt2"].positions) == ("layer", "gelu_tanh", "learned")
    assert configs["qwen3-yarn"].rope_scaling == {k: v for k, v in YARN.items() if k != "rope_theta"}
    deepseek = configs["deepseek-v3"]
    assert (deepseek.kv_lora_rank, deepseek.q_lora_rank, deepseek.qk_rope_head_dim) == (12, 20, 6)
    assert deepseek.softmax_scale == pytest.approx((8 + 6) ** -0.5 * (0.1 * math.log(4.0) + 1) ** 2)
    gemma2, gemma3 = configs["gemma2"], configs["gemma3"]
    assert gemma2.layer_types == ("sliding_attention", "full_attention") and gemma2.sliding_window == 8
    assert (gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping, gemma2.query_pre_attn_scalar) == (4, 3, 24)
    assert gemma2.sandwich_norms and gemma2.scale_embeddings and gemma2.norm_plus_one and gemma2.ffn == "geglu"
    assert gemma3.qk_norm and gemma3.rope_local_base_freq == 10000.0 and gemma3.rope_base == 1000000.0
    assert gemma3.rope_scaling == {"rope_type": "linear", "factor": 4.0}


def test_the_tokenizer_gives_the_ids_transformers_gives(tokenizer_file):
    from transformers import PreTrainedTokenizerFast

    ours = Tokenizer.from_file(tokenizer_file)
    theirs = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
    for text in ("The attention of each head.", "  two spaces, a tab\tand a newline\n", "ünïcödé ✓"):
        assert ours.encode(text) == theirs(text)["input_ids"]
        assert ours.encode(text)[0] == 0, "the file's post-processor adds the beginning-of-text id"
        assert ours.decode(ours.encode(text, add_special_tokens=False)) == text


def test_a_transformers_4_config_reads_as_its_version_5_form(checkpoints, tmp_path):
    """Most checkpoints on the Hub were written by transformers 4: rope_theta and rope_scaling ("type" in the oldest)."""
    folder, _ = checkpoints["llama3"]
    v5 = json.loads((folder / "config.json").read_text())
    v4 = {k: v for k, v in v5.items() if k != "rope_parameters"}
    scaling = {k: v for k, v in LLAMA3_ROPE.items() if k not in ("rope_theta", "rope_type")}
    v4.update(rope_theta=500000.0, rope_scaling={"type": "llama3", **scaling})
    assert config_from_hf(v4) == config_from_hf(v5)
    assert config_from_hf({**v4, "rope_scaling": None}).rope_scaling is None


def test_max_len_and_a_window_wider_than_it(checkpoints):
    folder, _ = checkpoints["mistral"]
    hf = json.loads((folder / "config.json").read_text())
    assert config_from_hf(hf).max_len == MAX_LEN
    assert config_from_hf({**hf, "max_position_embeddings": 131072}).max_len == DEFAULT_MAX_LEN
    assert config_from_hf(hf, max_len=8).sliding_window is None, "a window as wide as max_len is no window"
    with pytest.raises(ValueError, match="max_len=64 is beyond the checkpoint's 48 positions"):
        config_from_hf(hf, max_len=64)


# --- What the course does not implement is refused by name ---------------------------------------------------

def _llama(**changes):
    return {"model_type": "llama", "vocab_size": 10, "hidden_size": 16, "num_attention_heads": 2,
            "num_hidden_layers": 1, "intermediate_size": 32, "max_position_embeddings": 32, **changes}


@pytest.mark.parametrize("hf, message", [
    (_llama(model_type="mixtral"), "'mixtral' has mixture-of-experts layers"),
    (_llama(model_type="qwen3_moe"), "'qwen3_moe' has mixture-of-experts layers"),
    (_llama(model_type="deepseek_v3", first_k_dense_replace=0), "'deepseek_v3' has mixture-of-experts layers, .* "
                                                                "first_k_dense_replace covers every layer is dense"),
    (_llama(model_type="deepseek_v3", first_k_dense_replace=1, num_hidden_layers=2), "mixture-of-experts"),
    (_llama(model_type="deepseek_v3", first_k_dense_replace=1, attention_bias=True), "'attention_bias': True"),
    (_llama(model_type="gemma3"), "Gemma 3's image-text model"),
    (_llama(model_type="gemma2", hidden_activation="gelu"), "'hidden_activation': 'gelu'"),
    (_llama(model_type="gemma3_text", sliding_window=4, use_bidirectional_attention=True),
     "use_bidirectional_attention=True"),
    (_llama(model_type="gemma3_text", sliding_window=4, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0}}), "rescaled rotary angles on sliding layers"),
    (_llama(model_type="falcon"), "model_type 'falcon' is not a family the course reads"),
    (_llama(rope_scaling={"rope_type": "longrope", "factor": 4.0}), "rope_type 'longrope' is not implemented"),
    (_llama(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_type 'dynamic' is not implemented"),
    (_llama(partial_rotary_factor=0.5), "partial rotary is not implemented"),
    (_llama(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25}),
     "partial rotary is not implemented"),
    (_llama(hidden_act="gelu"), r"sets \{'hidden_act': 'gelu'\}"),
    (_llama(attention_bias=True), "'attention_bias': True"),
    (_llama(mlp_bias=True), "'mlp_bias': True"),
    ({**_llama(), "model_type": "qwen2", "use_sliding_window": True}, "'use_sliding_window': True"),
    ({"model_type": "gpt2", "vocab_size": 10, "n_embd": 16, "n_head": 2, "n_layer": 1, "n_positions": 32,
      "scale_attn_by_inverse_layer_idx": True}, "'scale_attn_by_inverse_layer_idx': True"),
])
def test_what_the_course_does_not_implement_is_refused_by_name(hf, message):
    with pytest.raises(ValueError, match=message):
        config_from_hf(hf)


def test_a_field_it_does_not_know_is_named():
    with pytest.warns(UserWarning, match=r"fields not read .*\['quantization_config'\]"):
        config_from_hf(_llama(quantization_config={"quant_method": "gptq"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a config written by transformers itself: every field known
        config_from_hf(transformers.LlamaConfig(**{k: v for k, v in SIZES.items() if k != "attn_implementation"}
                                                ).to_dict())


def test_weights_that_do_not_fit_are_named(checkpoints, tmp_path):
    from safetensors.torch import save_file

    folder, _ = checkpoints["qwen3"]
    weights = load_safetensors(folder)
    (tmp_path / "config.json").write_bytes((folder / "config.json").read_bytes())
    broken = {k: v for k, v in weights.items() if "layers.1.self_attn.k_norm" not in k}
    broken["model.layers.0.self_attn.extra.weight"] = torch.zeros(2)
    save_file(broken, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing \['layers.1.self_attn.k_norm.weight'\], left over "
                                         r"\['layers.0.self_attn.extra.weight'\]"):
        from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no .*safetensors"):
        (tmp_path / "model.safetensors").unlink()
        from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="is not a checkpoint folder here, nor a Hub id"):
        from_pretrained(tmp_path / "nowhere")


# --- The other way: course models that transformers reads -----------------------------------------------------

COURSE_MODELS = {
    "llama": dict(),  # the course's default layout: interleaved pairs, reordered when written
    "mistral": dict(sliding_window=6, rope_layout="half"),
    "qwen2": dict(qkv_bias=True, tie_word_embeddings=True),
    "qwen3": dict(qk_norm=True, head_dim=12, rope_scaling=dict(LLAMA3_ROPE, rope_type="llama3")),
    "gpt2": dict(norm="layer", ffn="gelu_tanh", positions="learned", bias=True, tie_word_embeddings=True,
                 num_kv_heads=None),
}


@pytest.mark.parametrize("family", sorted(COURSE_MODELS))
def test_a_course_model_saved_loads_in_transformers_alike(family, tmp_path):
    switches = dict(norm="rms", placement="pre", ffn="swiglu", positions="rope", bias=False, num_kv_heads=2)
    switches |= COURSE_MODELS[family]
    if family == "qwen3":
        switches["rope_scaling"] = {k: v for k, v in LLAMA3_ROPE.items() if k != "rope_theta"}
    torch.manual_seed(0)
    ours = DecoderLM(DecoderConfig(vocab_size=VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, max_len=MAX_LEN,
                                   **switches)).double().eval()
    _randomize(ours, 1)
    assert save_pretrained(ours, tmp_path) == family
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()
    tokens = torch.randint(0, VOCAB, (2, MAX_LEN), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert_close(theirs(input_ids=tokens).logits, ours(tokens), **TOL)
    again, _ = from_pretrained(tmp_path, dtype=torch.float64)
    with torch.no_grad():
        assert_close(again(tokens), ours(tokens), **TOL)


def test_a_zoo_model_and_its_characters_round_trip(tmp_path):
    """A trained course model (the zoo's code-llama) and its CharTokenizer, read by transformers."""
    from transformers import PreTrainedTokenizerFast

    from lessons_src import zoo

    model, chars, _ = zoo.load("code-llama")
    save_pretrained(model, tmp_path, chars)
    text = "def forward(self, x):\n\treturn x  # 'ü' is not in the vocabulary"
    known = "".join(c for c in text if c in chars.ids)
    ids = chars.encode(known).tolist()
    loaded = Tokenizer.from_file(tmp_path / "tokenizer.json")
    assert loaded.encode(known) == ids == PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "tokenizer.json"))(known)["input_ids"]
    assert loaded.decode(ids) == known
    with pytest.raises(ValueError, match=r"characters without an id in this vocabulary: .*'ü'"):
        loaded.encode(text)  # never another character's id
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert_close(theirs(input_ids=torch.tensor([ids])).logits, model(torch.tensor([ids])), atol=1e-4, rtol=1e-4)


def test_what_no_family_computes_is_not_saved(tmp_path):
    for switches, message in ((dict(placement="post"), "a Llama-style checkpoint needs"),
                              (dict(norm="rms", placement="pre", ffn="swiglu", positions="rope", bias=False,
                                    sinks=True), "no family save_pretrained writes has {'sinks': True}"),
                              (dict(norm="layer", placement="pre", ffn="gelu_tanh", positions="learned"),
                               "a GPT-2 has .* tied embeddings")):
        with pytest.raises(ValueError, match=message):
            save_pretrained(DecoderLM(DecoderConfig(vocab_size=10, d_model=16, num_heads=2, **switches)), tmp_path)


def test_a_derived_head_dim_follows_a_replaced_width():
    config = DecoderConfig(vocab_size=10, d_model=32, num_heads=4)
    assert config.head_dim == 8
    assert dataclasses.replace(config, d_model=64).head_dim == 16, "derived again, not copied"
    given = DecoderConfig(vocab_size=10, d_model=32, num_heads=4, head_dim=16)
    assert dataclasses.replace(given, d_model=64).head_dim == 16, "a given head_dim stays"
    assert json.loads(json.dumps(dataclasses.asdict(config)))["head_dim"] == 8


# --- A released configuration, and the Hub path with a local folder standing in for the download -------------

SMOLLM2_135M = {  # HuggingFaceTB/SmolLM2-135M's config.json, as published (transformers 4.40, nanotron's two keys)
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0,
    "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.041666666666666664,
    "intermediate_size": 1536, "is_llama_config": True, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_interleaved": False, "rope_scaling": None, "rope_theta": 100000,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "vocab_size": 49152,
}


def test_a_released_configuration_reads_whole():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every field of the published file is known
        config = config_from_hf(SMOLLM2_135M)
    assert (config.d_model, config.num_heads, config.kv_heads, config.head_dim, config.hidden) == (576, 9, 3, 64, 1536)
    assert config.tie_word_embeddings and config.rope_base == 100000.0 and config.max_len == DEFAULT_MAX_LEN
    with torch.device("meta"):  # its shapes, without the memory
        model = DecoderLM(config)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008, "SmolLM2-135M's parameter count"


def _hub_cache_with(folder_of, repo_id: str, cache):
    """The Hugging Face cache laid out as huggingface_hub writes it after a download of repo_id, holding
    folder_of's files: with HF_HUB_OFFLINE=1, snapshot_download answers from it as it would after a download."""
    commit = "0" * 40
    root = cache / f"models--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    (root / "snapshots").mkdir()
    (root / "snapshots" / commit).symlink_to(folder_of, target_is_directory=True)
    return root / "snapshots" / commit


def test_a_model_id_goes_through_the_hub_path(checkpoints, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    folder, hf = checkpoints["smollm2"]
    _hub_cache_with(folder, "HuggingFaceTB/SmolLM2-135M", tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import importlib

    import huggingface_hub.constants

    importlib.reload(huggingface_hub.constants)  # it reads the environment when imported
    try:
        model, tokenizer = from_pretrained("HuggingFaceTB/SmolLM2-135M", dtype=torch.float64)
        tokens = torch.tensor([tokenizer.encode("attention")])
        with torch.no_grad():
            assert_close(model(tokens), hf(input_ids=tokens).logits, **TOL)
        with pytest.raises(ValueError, match="the Hub did not give it"):
            from_pretrained("HuggingFaceTB/not-a-model")
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)


def test_the_head_survey_scores_a_copying_model_and_its_baselines():
    from lessons_src.pretrained import ablated_head, head_survey

    model, chars, _ = __import__("lessons_src").zoo.load("code-gpt2")
    piece = torch.randint(0, chars.vocab_size, (4, 16), generator=torch.Generator().manual_seed(0))
    other = torch.randint(0, chars.vocab_size, (4, 16), generator=torch.Generator().manual_seed(1))
    repeated, control = torch.cat([piece, piece], 1), torch.cat([other, piece], 1)
    survey = head_survey(model, repeated, control)
    assert survey["induction"].shape == (4, 4) and survey["two back"].shape == (4, 4)
    assert survey["loss copy"].shape == (4,) and survey["loss natural"].shape == (4,)
    L = 32  # a uniform head's weight 1 / (i + 1), averaged as each score averages it
    assert survey["uniform previous"] == pytest.approx(sum(1 / (i + 1) for i in range(1, L)) / (L - 1))
    assert survey["uniform induction"] == pytest.approx(sum(1 / (i + 1) for i in range(16, L)) / 16)
    assert survey["uniform first token"] == survey["uniform previous"]
    distinct = torch.arange(16).repeat(1, 2)  # no token twice in a piece: the ideal head finds exactly the copy
    assert head_survey(model, distinct, torch.cat([distinct[:, :16] + 20, distinct[:, 16:]], 1))[
        "reference induction 1"] == pytest.approx(1.0)
    with torch.no_grad(), ablated_head(model, 3, 1):  # the model's induction head (layer 4, head 1), off
        ablated = head_survey(model, repeated, control)
    assert ablated["induction"][3, 1] == survey["induction"][3, 1], "its weights are computed before it is zeroed"
    assert (ablated["loss copy"] - survey["loss copy"]).mean() > 0.1, "switched off, the copy costs more"
    with pytest.raises(ValueError, match="must copy its first half"):
        head_survey(model, control, control)
    with pytest.raises(ValueError, match="control must have repeated's shape and its second halves"):
        head_survey(model, repeated, torch.cat([piece, other], 1))
    with pytest.raises(ValueError, match="head must be 0 .. 3, got 4"):
        with ablated_head(model, 0, 4):
            pass


def _section(notebook: str, heading: str) -> list[str]:
    """The code of a chapter's imports (its first code cell after the install cell) and of one section."""
    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    code = [c.source for c in cells if c.cell_type == "code"]
    start = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith(heading))
    end = next(i for i, c in enumerate(cells) if i > start and c.cell_type == "markdown" and c.source.startswith("## "))
    return [code[1]] + [c.source for c in cells[start:end] if c.cell_type == "code"]


def test_the_chapter_takes_its_online_path_where_the_hub_answers(tmp_path, monkeypatch):
    """Chapter "Attention in today's open models" asks the Hub for SmolLM2-135M. Its online path, run in a kernel
    as Colab would, with a folder laid out as huggingface_hub's cache standing in for the download (the course's
    code-gpt2 written by save_pretrained under SmolLM2's id): the page must take that path and say so."""
    import nbformat
    from nbclient import NotebookClient

    from lessons_src import zoo

    model, characters, _ = zoo.load("code-gpt2")
    save_pretrained(model, tmp_path / "stand-in", characters)
    _hub_cache_with(tmp_path / "stand-in", "HuggingFaceTB/SmolLM2-135M", tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the kernel inherits it: huggingface_hub answers from the cache
    sources = _section("book/18_todays_attention.ipynb", "## Today's open models on the course's code")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    printed = "".join(o.get("text", "") for c in notebook.cells for o in c.outputs)
    assert "running: HuggingFaceTB/SmolLM2-135M, from the Hugging Face Hub" in printed, printed[:2000]
    assert "OFFLINE" not in printed and "No Hugging Face Hub here" not in printed


# --- BERT: the encoder of the chapter "The transformer encoder block" -------------------------------------------

BERT_SIZES = dict(vocab_size=VOCAB, hidden_size=D, num_attention_heads=HEADS, num_hidden_layers=LAYERS,
                  intermediate_size=72, max_position_embeddings=MAX_LEN, attn_implementation="eager")


@pytest.mark.parametrize("kind", ["BertModel", "BertForMaskedLM"])
def test_a_bert_checkpoint_gives_its_hidden_states_and_attention(kind, tmp_path, tokenizer_file):
    from lessons_src import EncoderModel

    torch.manual_seed(0)
    hf = getattr(transformers, kind)(transformers.BertConfig(**BERT_SIZES)).to(torch.float64).eval()
    _randomize(hf, 0)
    hf.save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    model, tokenizer = from_pretrained(tmp_path, dtype=torch.float64)
    assert type(model) is EncoderModel and (model.pooler is not None) == (kind == "BertModel")
    tokens = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, 13:] = 0  # the second sequence is 13 tokens, then padding
    types = (torch.arange(20) >= 8).long().expand(2, 20)  # sentence A, then sentence B
    bert = hf if kind == "BertModel" else hf.bert
    with torch.no_grad():
        expected = bert(input_ids=tokens, attention_mask=mask, token_type_ids=types, output_attentions=True)
        hidden, weights = model(tokens, attention_mask=mask, token_type_ids=types, return_weights=True)
    assert expected.last_hidden_state.abs().max() > 1
    assert_close(hidden, expected.last_hidden_state, atol=1e-10, rtol=1e-10)
    for ours, theirs in zip(weights, expected.attentions, strict=True):
        assert_close(ours, theirs, atol=1e-10, rtol=1e-10)
    assert weights[0][1, :, :, 13:].abs().max() == 0, "padded keys get no weight"
    if kind == "BertModel":
        assert_close(model.pooled(hidden), expected.pooler_output, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("changes, message", [
    (dict(position_embedding_type="relative_key"), "'position_embedding_type': 'relative_key'"),
    (dict(hidden_act="gelu_new"), "'hidden_act': 'gelu_new'"),
    (dict(is_decoder=True), "'is_decoder': True"),
])
def test_what_bert_the_course_lacks_is_refused_by_name(changes, message):
    bert = {"model_type": "bert", "vocab_size": 10, "hidden_size": 16, "num_attention_heads": 2,
            "num_hidden_layers": 1, "intermediate_size": 32, "max_position_embeddings": 32}
    config_from_hf(bert)
    with pytest.raises(ValueError, match=message):
        config_from_hf({**bert, **changes})


def test_a_rope_scaling_beside_transformers_5_rope_parameters_is_read_as_transformers_reads_it(checkpoints):
    """A file with rope_parameters (version 5) and a rope_scaling added beside it: transformers applies the
    scaling, so must the course; one it does not implement is refused, not dropped (a blind reader's find)."""
    folder, _ = checkpoints["smollm2"]
    hf = json.loads((folder / "config.json").read_text())
    assert hf["rope_parameters"]["rope_type"] == "default"
    config = config_from_hf({**hf, "rope_scaling": {"rope_type": "linear", "factor": 4.0}})
    assert config.rope_scaling == {"rope_type": "linear", "factor": 4.0} and config.rope_base == 100000.0
    ours = transformers.LlamaConfig(**{**hf, "rope_scaling": {"rope_type": "linear", "factor": 4.0}})
    assert ours.rope_parameters["factor"] == 4.0, "transformers reads it so too"
    for kind in ("dynamic", "longrope"):
        with pytest.raises(ValueError, match=f"rope_type '{kind}' is not implemented"):
            config_from_hf({**hf, "rope_scaling": {"type": kind, "factor": 2.0}})


def test_greedy_decodes_one_sequence_and_stops_at_the_end_token(checkpoints):
    model, tokenizer = from_pretrained(checkpoints["mistral"][0])
    ids = tokenizer.encode("The keys")
    full = greedy(model, ids, 12)
    assert full[: len(ids)] == ids and len(full) == len(ids) + 12
    assert greedy(model, torch.tensor([ids]), 12) == greedy(model, torch.tensor(ids), 12) == full
    end = full[len(ids) + 3]
    stopped = greedy(model, ids, 12, eos_id=end)
    assert stopped[-1] == end and len(stopped) <= len(ids) + 4
    with pytest.raises(ValueError, match=r"ids must be one non-empty sequence, \(L,\) or \(1, L\), got \(2, "):
        greedy(model, torch.tensor([ids, ids]), 3)


def test_a_loaded_checkpoint_keeps_its_token_ids_when_saved(checkpoints, tmp_path):
    folder, _ = checkpoints["gpt2"]
    model, _ = from_pretrained(folder)
    save_pretrained(model, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert (written["bos_token_id"], written["eos_token_id"]) == (0, 0)


def test_pickled_weights_get_the_conversion_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_llama()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"pytorch_model.bin weights, not safetensors.*save_pretrained\(new_folder\)"):
        from_pretrained(tmp_path)


# --- Found by running 42 released config.json files through config_from_hf (a reviewer's) ----------------------

def test_gemma_3_keeps_its_local_rotary_base_where_the_window_covers_max_len(checkpoints):
    """Gemma 3's sliding layers rotate with their own base whatever max_len is: with max_len at most the window, a
    sliding layer sees every key but must still rotate as trained (it was silently given the global base)."""
    folder, hf = checkpoints["gemma3"]  # window 8
    model, _ = from_pretrained(folder, dtype=torch.float64, max_len=8)
    assert model.config.rope_local_base_freq == 10000.0 and model.config.layer_types[0] == "sliding_attention"
    tokens = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert_close(model(tokens), hf(input_ids=tokens).logits, **TOL)


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_a_max_len_below_the_position_table_cuts_the_table(family, checkpoints, tmp_path):
    if family == "gpt2":
        folder, hf = checkpoints["gpt2"]
    else:
        torch.manual_seed(0)
        hf = transformers.BertModel(transformers.BertConfig(**BERT_SIZES)).to(torch.float64).eval()
        hf.save_pretrained(folder := tmp_path)
    model, _ = from_pretrained(folder, dtype=torch.float64, max_len=16)
    assert model.embed_positions.weight.shape[0] == 16
    tokens = torch.randint(0, VOCAB, (1, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ours = model(tokens)
        theirs = hf(input_ids=tokens)
    assert_close(ours, theirs.logits if family == "gpt2" else theirs.last_hidden_state, atol=1e-10, rtol=1e-10)


def test_released_files_harmless_fields_and_old_files_without_model_type():
    gpt2_medium = {"architectures": ["GPT2LMHeadModel"], "vocab_size": 50257, "n_embd": 1024, "n_head": 16,
                   "n_layer": 24, "n_positions": 1024, "n_ctx": 1024, "n_special": 0, "predict_special_tokens": True,
                   "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}  # an old revision: no model_type
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = config_from_hf(gpt2_medium)
        config_from_hf(_llama(max_sequence_length=2048, _attn_implementation_autoset=True, unsloth_fixed=True))
    assert (config.d_model, config.num_layers, config.ffn) == (1024, 24, "gelu_tanh")
    with pytest.raises(ValueError, match="no model_type and no architectures"):
        config_from_hf({k: v for k, v in _llama().items() if k != "model_type"})
    with pytest.raises(ValueError, match="'use_mrope': True"):
        config_from_hf(_llama(model_type="qwen2", use_mrope=True))
    with pytest.raises(ValueError, match="Phi-3 has no loader .*LongRoPE"):
        config_from_hf(_llama(model_type="phi3"))


# --- ModelExplorer's kernel view on a loaded checkpoint ---------------------------------------------------------

@pytest.mark.parametrize("family", ["smollm2", "gemma3", "deepseek-v3"])
def test_the_explorer_draws_a_loaded_checkpoint_in_a_kernel(family, checkpoints):
    from lessons_src import ModelExplorer

    model, tokenizer = from_pretrained(checkpoints[family][0])
    explorer = ModelExplorer(model, tokenizer, max_len=16)
    text = "The attention of each head reads the keys again and again"
    result = explorer.forward(text)
    ids = tokenizer.encode(text)
    assert result["tokens"] == ids[-16:] and len(ids) > 16
    assert result["messages"] == [f"The model reads at most 16 tokens (its max_len): it sees the last 16 of the "
                                  f"{len(ids)} tokens of your text."]
    with torch.no_grad():  # the bars read the model's own logits
        assert_close(torch.from_numpy(result["logits"]), model(torch.tensor([ids[-16:]]))[0], atol=1e-5, rtol=1e-5)
    for layer in result["attention"]:
        for head in layer:
            assert head.shape == (16, 16) and abs(head.sum(-1) - 1).max() < 1e-5 and abs(np.triu(head, 1)).max() == 0
    box = explorer.widget()
    before = box.controls["image"].value
    box.controls["text"].value = "Attention!"
    assert box.controls["image"].value != before, "typing redraws the map"
    box.controls["head"].value = 3
    names = explorer._bar_probabilities(result["logits"][-1], 1.0)[1]
    assert len(names) == 10 and all(n.isprintable() for n in names)
    assert isinstance(explorer.sample("The keys", 5, generator=torch.Generator().manual_seed(0)), str)
    assert "runs in a Python kernel" in explorer.to_html()
    assert "application/vnd.jupyter.widget-view+json" in explorer._repr_mimebundle_()


def test_the_explorer_refuses_what_it_cannot_draw_from_a_checkpoint(checkpoints, tmp_path):
    from lessons_src import ModelExplorer

    model, tokenizer = from_pretrained(checkpoints["qwen3"][0])
    with pytest.raises(ValueError, match="reference_text checks the in-browser page"):
        ModelExplorer(model, tokenizer, reference_text="abc")
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**BERT_SIZES)).save_pretrained(tmp_path)
    bert, _ = from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="must be a DecoderLM or MLADecoderLM .*got EncoderModel"):
        ModelExplorer(bert, tokenizer)
