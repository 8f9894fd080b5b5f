"""Today's switches of DecoderConfig (QK-norm, 1 + weight RMSNorm, query_pre_attn_scalar, soft-capping, sinks,
interleaved sliding/global layers with a sliding KV cache, the gated output) against each family's Hugging Face
reference code: tiny random models built offline from a config (no download), their weights copied into the
course's model, equal logits (or, where the reference model is a mixture of experts, equal attention outputs)
and equal token-by-token decoding with the cache.

Hugging Face computes its RMSNorms and rotary angles in float32 even in a float64 model, hence 1e-5.
Weights are random at std 0.3 and norm weights far from their init (std 0.02 puts every score near 0, where a
wrong scale, cap or rotary hardly shows); each family also has a test that a wrong switch fails by far.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing import assert_close

from lessons_src import DecoderConfig, DecoderLM, KVCache, RMSNorm, SlidingKVCache, cache_bytes, softmax_with_sink
from lessons_src.llm import HF_LLAMA_SWITCHES, Attention, rename_hf_llama

TOL = {"atol": 1e-5, "rtol": 1e-5}
VOCAB, D, HEADS, KV_HEADS, HEAD_DIM, LAYERS, MAX_LEN = 61, 32, 4, 2, 8, 2, 24
ALTERNATING = ("sliding_attention", "full_attention")


def _randomize(model, seed: int, plus_one: bool = False) -> None:
    """std 0.3 weights; norm weights around 1 (as 1 + w for plus_one norms); sinks of either sign around 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if name.endswith("norm.weight"):
                p.copy_(0.5 * noise if plus_one else 1 + 0.5 * noise)
            elif name.endswith("sinks"):
                p.copy_(1 + 1.5 * noise)
            else:
                p.copy_(0.3 * noise)


def _config(**switches) -> DecoderConfig:
    base = dict(vocab_size=VOCAB, d_model=D, num_heads=HEADS, num_kv_heads=KV_HEADS, num_layers=LAYERS,
                max_len=MAX_LEN, eps=1e-6, **HF_LLAMA_SWITCHES)
    return DecoderConfig(**{**base, **switches})


# --- Full models: Qwen3 (QK-norm) and a dense Qwen3-Next (QK-norm, 1 + weight norms, gated output) ---------------

def _hf_qwen3(seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM  # test-only dependency (the dev extra)

    config = Qwen3Config(vocab_size=VOCAB, hidden_size=D, intermediate_size=88, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                         max_position_embeddings=MAX_LEN, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, attention_bias=False,
                         attn_implementation="eager")
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float64).eval()
    _randomize(model, seed)
    return model, _config(d_ff=88, rope_base=1000000.0, qk_norm=True)


def _hf_qwen3_next(seed: int):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    config = Qwen3NextConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=88, num_hidden_layers=LAYERS,
                             num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                             max_position_embeddings=MAX_LEN, rms_norm_eps=1e-6, tie_word_embeddings=False,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "partial_rotary_factor": 1.0},
                             partial_rotary_factor=1.0, layer_types=["full_attention"] * LAYERS,
                             mlp_only_layers=list(range(LAYERS)), attention_bias=False, attn_implementation="eager")
    torch.manual_seed(seed)
    model = Qwen3NextForCausalLM(config).to(torch.float64).eval()
    _randomize(model, seed, plus_one=True)
    return model, _config(d_ff=88, rope_base=10000.0, qk_norm=True, norm_plus_one=True, attn_output_gate=True)


FULL_MODELS = {"qwen3": _hf_qwen3, "qwen3_next": _hf_qwen3_next}


def _load(hf, config: DecoderConfig) -> DecoderLM:
    model = DecoderLM(config).double().eval()
    model.load_state_dict(rename_hf_llama(hf.state_dict()))  # strict: every weight has its place
    return model


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("family", sorted(FULL_MODELS))
def test_a_hugging_face_model_loads_and_decodes_alike(family, seed):
    hf, config = FULL_MODELS[family](seed)
    ours = _load(hf, config)
    tokens = torch.randint(0, VOCAB, (2, MAX_LEN), generator=torch.Generator().manual_seed(seed + 10))
    with torch.no_grad():
        expected = hf(input_ids=tokens).logits  # (B, L, |V|)
        assert expected.abs().max() > 1, "the logits should be far from 0, or a mistake could hide"
        assert_close(ours(tokens), expected, **TOL)
        # Greedy decoding: ours one token at a time with its caches, Hugging Face's by full passes.
        caches = ours.new_caches()
        logits, ours_sequence, hf_sequence = ours(tokens[:, :6], caches)[:, -1], tokens[:, :6], tokens[:, :6]
        for _ in range(MAX_LEN - 6):
            hf_logits = hf(input_ids=hf_sequence).logits[:, -1]  # (B, |V|)
            assert_close(logits, hf_logits, **TOL)
            ours_sequence = torch.cat([ours_sequence, logits.argmax(-1, keepdim=True)], dim=1)
            hf_sequence = torch.cat([hf_sequence, hf_logits.argmax(-1, keepdim=True)], dim=1)
            logits = ours(ours_sequence[:, -1:], caches)[:, -1]
    assert torch.equal(ours_sequence, hf_sequence)


def _loose(hf, config: DecoderConfig) -> DecoderLM:
    """The same weights in a model with one switch wrong (weights that have no place are left out)."""
    model = DecoderLM(config).double().eval()
    own = model.state_dict()
    weights = {k: v for k, v in rename_hf_llama(hf.state_dict()).items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(weights, strict=False)
    return model


@pytest.mark.parametrize("family, wrong", [
    ("qwen3", dict(qk_norm=False)),
    ("qwen3", dict(qk_norm=True, norm_plus_one=True)),
    ("qwen3_next", dict(norm_plus_one=False)),
    ("qwen3_next", dict(query_pre_attn_scalar=HEAD_DIM * 2)),
])
def test_a_wrong_switch_would_show(family, wrong):
    hf, config = FULL_MODELS[family](0)
    tokens = torch.randint(0, VOCAB, (2, MAX_LEN), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        gap = (_loose(hf, dataclasses.replace(config, **wrong))(tokens) - hf(input_ids=tokens).logits).abs().max()
    assert gap > 0.1, f"{wrong}: the logits moved only {gap:.2e}"


def test_without_its_gate_qwen3_next_does_not_load():
    hf, config = _hf_qwen3_next(0)
    with pytest.raises(RuntimeError, match="size mismatch for layers.0.self_attn.q_proj.weight"):
        _load(hf, dataclasses.replace(config, attn_output_gate=False))


# --- Mixture-of-experts or otherwise different blocks: compare at the attention module -------------------------

def _hf_gpt_oss(seed: int):
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=16, num_hidden_layers=LAYERS,
                          num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                          num_local_experts=2, num_experts_per_tok=1, sliding_window=5,
                          layer_types=list(ALTERNATING), max_position_embeddings=MAX_LEN, rms_norm_eps=1e-6,
                          rope_parameters={"rope_type": "default", "rope_theta": 150000.0}, attention_bias=True,
                          tie_word_embeddings=False, attn_implementation="eager",
                          experts_implementation="eager")  # the grouped kernel has no float64
    torch.manual_seed(seed)
    model = GptOssForCausalLM(config).to(torch.float64).eval()
    _randomize(model, seed)
    return model, _config(rope_base=150000.0, bias=True, sinks=True, sliding_window=5, layer_types=ALTERNATING)


def _hf_gemma2(seed: int):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(vocab_size=VOCAB, hidden_size=D, intermediate_size=48, num_hidden_layers=LAYERS,
                          num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                          query_pre_attn_scalar=12, attn_logit_softcapping=3.0, final_logit_softcapping=None,
                          sliding_window=5, layer_types=list(ALTERNATING), max_position_embeddings=MAX_LEN,
                          rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                          attention_bias=False, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(seed)
    model = Gemma2ForCausalLM(config).to(torch.float64).eval()
    _randomize(model, seed, plus_one=True)
    return model, _config(query_pre_attn_scalar=12, attn_logit_softcapping=3.0, sliding_window=5,
                          layer_types=ALTERNATING, norm_plus_one=True)


def _hf_gemma3(seed: int):
    """Gemma 3's text model: QK-norm with 1 + weight norms, query_pre_attn_scalar, a sliding layer then a global
    one; one rotary base for both kinds of layer (Gemma 3 uses 10,000 for the sliding layers and 1,000,000 for
    the global ones, which DecoderConfig's single rope_base cannot express: compare each layer at one base)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    rope = {"rope_type": "default", "rope_theta": 10000.0}
    config = Gemma3TextConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=48, num_hidden_layers=LAYERS,
                              num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                              query_pre_attn_scalar=12, sliding_window=5, layer_types=list(ALTERNATING),
                              max_position_embeddings=MAX_LEN, rms_norm_eps=1e-6,
                              rope_parameters={"full_attention": dict(rope), "sliding_attention": dict(rope)},
                              attention_bias=False, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(config).to(torch.float64).eval()
    _randomize(model, seed, plus_one=True)
    return model, _config(query_pre_attn_scalar=12, sliding_window=5, layer_types=ALTERNATING, qk_norm=True,
                          norm_plus_one=True)


MODULE_MODELS = {"gpt_oss": _hf_gpt_oss, "gemma2": _hf_gemma2, "gemma3": _hf_gemma3}


def _attention_io(hf, tokens):
    """Each layer's attention input (B, L, D) and output (B, L, D) in Hugging Face's own full pass."""
    seen = []

    def hook(module, args, kwargs, output):
        seen.append((kwargs["hidden_states"], output[0]))

    handles = [layer.self_attn.register_forward_hook(hook, with_kwargs=True) for layer in hf.model.layers]
    with torch.no_grad():
        hf(input_ids=tokens)
    for h in handles:
        h.remove()
    return seen


def _our_attention(hf, config: DecoderConfig, layer: int, strict: bool = True) -> Attention:
    attention = Attention(config, layer).double().eval()
    attention.load_state_dict(hf.model.layers[layer].self_attn.state_dict(), strict=strict)  # the names as they are
    return attention


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("family", sorted(MODULE_MODELS))
def test_the_attention_of_a_hugging_face_model_computes_and_decodes_alike(family, seed):
    hf, config = MODULE_MODELS[family](seed)
    tokens = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(seed + 10))
    for layer, (x, expected) in enumerate(_attention_io(hf, tokens)):
        ours = _our_attention(hf, config, layer)
        assert (ours.window is not None) == (layer == 0), "layer 0 slides, layer 1 is global"
        with torch.no_grad():
            assert_close(ours(x), expected, **TOL)
            # Token by token, with the cache the layer needs: a sliding layer's holds at most w - 1 = 4.
            cache = KVCache() if ours.window is None else SlidingKVCache(ours.window)
            steps = [ours(x[:, :3], cache)] + [ours(x[:, t:t + 1], cache) for t in range(3, 20)]
        assert_close(torch.cat(steps, dim=1), expected, **TOL)
        held = cache.key.size(2)
        assert held == (20 if ours.window is None else 4), f"layer {layer} holds {held} positions"


@pytest.mark.parametrize("family, wrong", [
    ("gpt_oss", dict(sinks=False)),
    ("gpt_oss", dict(sliding_window=None, layer_types=None)),
    ("gemma2", dict(attn_logit_softcapping=None)),
    ("gemma2", dict(query_pre_attn_scalar=None)),
    ("gemma2", dict(sliding_window=6)),
    ("gemma3", dict(norm_plus_one=False)),
    ("gemma3", dict(qk_norm=False)),
])
def test_a_wrong_attention_switch_would_show(family, wrong):
    hf, config = MODULE_MODELS[family](0)
    tokens = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(10))
    x, expected = _attention_io(hf, tokens)[0]  # layer 0: a sliding layer
    with torch.no_grad():
        gap = (_our_attention(hf, dataclasses.replace(config, **wrong), 0, strict=False)(x) - expected).abs().max()
    assert gap > 0.05, f"{wrong}: the output moved only {gap:.2e}"


# --- The pieces, by value --------------------------------------------------------------------------------------

def test_plus_one_rms_norm_is_the_plain_one_with_weight_plus_one():
    plain, shifted = RMSNorm(6), RMSNorm(6, plus_one=True)
    assert torch.equal(shifted.weight, torch.zeros(6)), "a 1 + weight norm starts at weight 0"
    with torch.no_grad():
        shifted.weight.copy_(torch.randn(6))
        plain.weight.copy_(1 + shifted.weight)
    x = torch.randn(3, 6)
    assert_close(shifted(x), plain(x))


def test_softmax_with_sink_is_its_closed_form():
    g = torch.Generator().manual_seed(0)
    scores, sinks = torch.randn(2, 3, 4, 5, generator=g), torch.randn(3, generator=g)
    expected = scores.exp() / (sinks.exp().view(1, 3, 1, 1) + scores.exp().sum(-1, keepdim=True))
    assert_close(softmax_with_sink(scores, sinks), expected)
    # A very negative sink is plain softmax; a masked key (-inf) gets 0; the rows sum to less than 1.
    assert_close(softmax_with_sink(scores, torch.full((3,), -1e4)), scores.softmax(-1))
    masked = scores.clone()
    masked[..., 0] = float("-inf")
    assert softmax_with_sink(masked, sinks)[..., 0].eq(0).all()
    assert (softmax_with_sink(scores, sinks).sum(-1) < 1).all()
    with pytest.raises(ValueError, match=r"sinks must be \(H,\) = \(3,\)"):
        softmax_with_sink(scores, torch.zeros(4))
    with pytest.raises(ValueError, match="scores must be"):
        softmax_with_sink(scores[0], sinks)


def test_soft_capping_bounds_the_scores_and_qk_norm_bounds_them_by_the_scale():
    """With a cap c every score lies in (-c, c); with QK-norm (unit norm weights) |q·k| ≤ d_k, so |s| ≤ √d_k."""
    torch.manual_seed(0)
    x = 30 * torch.randn(2, 12, D)
    capped = Attention(_config(attn_logit_softcapping=2.0)).eval()
    normed = Attention(_config(qk_norm=True)).eval()
    with torch.no_grad():
        q, k, _, _ = capped._project(x, 0)
        raw = (q @ k.repeat_interleave(2, 1).transpose(-2, -1) * capped.scale).abs().max()
        q, k, _, _ = normed._project(x, 0)
        bounded = (q @ k.repeat_interleave(2, 1).transpose(-2, -1) * normed.scale).abs().max()
    assert raw > 10, "without a cap the scores of large inputs are large"
    assert bounded <= HEAD_DIM ** 0.5 + 1e-5, f"QK-norm scores should be at most sqrt(d_k), got {bounded:.3f}"
    row = capped.attention_weights(x)[0, 0, -1]  # the last query: every key allowed
    assert row.max() / row.min() <= torch.exp(torch.tensor(4.0)) + 1e-4, "a cap of 2: at most e^4 between two keys"


def test_a_sliding_model_decodes_alike_and_caches_only_the_window():
    torch.manual_seed(2)
    config = DecoderConfig(vocab_size=17, d_model=16, num_heads=4, num_kv_heads=2, num_layers=4, max_len=20,
                           sliding_window=4, layer_types=("sliding_attention",) * 3 + ("full_attention",),
                           **{**HF_LLAMA_SWITCHES, "positions": "alibi", "rope_layout": "interleaved"})
    model = DecoderLM(config).eval()
    tokens = torch.randint(0, 17, (2, 20))
    caches = model.new_caches()
    with torch.no_grad():
        full = model(tokens)
        steps = [model(tokens[:, :7], caches)] + [model(tokens[:, t:t + 1], caches) for t in range(7, 20)]
    assert_close(torch.cat(steps, dim=1), full, **TOL)
    assert [c.key.size(2) for c in caches] == [3, 3, 3, 20]
    assert cache_bytes(caches) == 2 * 2 * 2 * 4 * 4 * (3 + 3 + 3 + 20)  # K and V, B, H_kv, d_k, float32
    # The window is real: changing a token more than w - 1 back leaves a sliding-only model's prediction alone.
    slide = DecoderLM(dataclasses.replace(config, num_layers=1, layer_types=None)).eval()
    changed = tokens.clone()
    changed[:, 15] = (changed[:, 15] + 1) % 17
    with torch.no_grad():
        assert_close(slide(tokens)[:, -1], slide(changed)[:, -1])
        assert (slide(tokens)[:, 18] - slide(changed)[:, 18]).abs().max() > 1e-3


def test_sinks_and_gates_use_the_checkpoint_names():
    model = DecoderLM(_config(sinks=True, qk_norm=True, attn_output_gate=True))
    names = set(model.state_dict())
    assert {"layers.0.self_attn.sinks", "layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"} <= names
    assert model.layers[0].self_attn.q_proj.weight.shape == (2 * HEADS * HEAD_DIM, D)


@pytest.mark.parametrize("bad, message", [
    (dict(qk_norm=1), "qk_norm must be True or False"),
    (dict(norm_plus_one=True, norm="layer"), "norm_plus_one=True changes RMSNorms"),
    (dict(attn_logit_softcapping=0.0), "attn_logit_softcapping must be None or a finite number > 0"),
    (dict(query_pre_attn_scalar=-4), "query_pre_attn_scalar must be None or a finite number > 0"),
    (dict(attn_logit_softcapping=5.0, positions="alibi", rope_layout="interleaved"),
     "attn_logit_softcapping with positions='alibi' is ambiguous"),
    (dict(layer_types=("full_attention",)), "layer_types must be a tuple of num_layers=2 entries"),
    (dict(layer_types=["full_attention"] * 2), "layer_types must be a tuple"),
    (dict(layer_types=("sliding_attention", "local")), "each 'sliding_attention' or 'full_attention'"),
    (dict(layer_types=ALTERNATING), "has sliding_attention layers but sliding_window is None"),
    (dict(sliding_window=4, layer_types=("full_attention",) * 2), "no layer in layer_types is 'sliding_attention'"),
    (dict(sliding_window=0), "sliding_window must be a positive int, got 0"),
    (dict(sliding_window=MAX_LEN), "sliding_window=24 >= max_len=24"),
])
def test_a_switch_that_makes_no_sense_is_named(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _config(**bad)


def test_a_cache_of_the_wrong_window_is_refused():
    model = DecoderLM(_config(sliding_window=4, layer_types=ALTERNATING))
    assert [type(c).__name__ for c in model.new_caches()] == ["SlidingKVCache", "KVCache"]
    with pytest.raises(ValueError, match="layer 0 has sliding_window=4 but its cache keeps a window of 3"):
        model(torch.zeros(1, 2, dtype=torch.long), [SlidingKVCache(3), KVCache()])
    with pytest.raises(ValueError, match="layer 1 has sliding_window=None"):
        model(torch.zeros(1, 2, dtype=torch.long), [SlidingKVCache(4), SlidingKVCache(4)])
