"""Multi-head latent attention against Hugging Face's DeepseekV3ForCausalLM (random weights, no download),
and the absorbed decode against the course's own plain (projected-up) form."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from lessons_src import (
    LatentCache,
    MLAConfig,
    MLADecoderLM,
    MultiHeadLatentAttention,
    absorbed_scores,
    apply_rope,
    mla_cache_elements,
    rename_hf_deepseek,
)

SIZES = dict(vocab_size=61, d_model=32, num_heads=4, num_layers=2, max_len=24, d_ff=88, kv_lora_rank=12,
             qk_nope_head_dim=8, qk_rope_head_dim=6, v_head_dim=10, eps=1e-5)


def _tiny_hf_deepseek(seed: int, q_lora_rank: int | None):
    """A random 2-layer DeepseekV3ForCausalLM in float64 with dense layers only (first_k_dense_replace = 2
    layers), weights of std 0.3 and norm weights around 1: at the std-0.02 init every score is near 0 and
    a wrong scale or rotary layout would hardly show."""
    transformers = pytest.importorskip("transformers", reason="transformers is the reference (the dev extra)")
    config = transformers.DeepseekV3Config(
        vocab_size=61, hidden_size=32, intermediate_size=88, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, first_k_dense_replace=2, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, kv_lora_rank=12, q_lora_rank=q_lora_rank,
        qk_rope_head_dim=6, qk_nope_head_dim=8, v_head_dim=10, max_position_embeddings=24, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
        attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.DeepseekV3ForCausalLM(config).to(torch.float64).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(1 + 0.5 * noise if name.endswith("norm.weight") else 0.3 * noise)
    assert not any("experts" in name for name in model.state_dict()), "every layer should be dense"
    return model


def _random_model(seed: int, **overrides) -> MLADecoderLM:
    torch.manual_seed(seed)
    model = MLADecoderLM(MLAConfig(**{**SIZES, **overrides})).double().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(1 + 0.5 * noise if name.endswith("norm.weight") else 0.3 * noise)
    return model


@pytest.mark.parametrize("q_lora_rank", [None, 12])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_hugging_face_deepseek_checkpoint_loads_and_decodes_alike(seed, q_lora_rank):
    """Hugging Face computes its rotary angles in float32 even in a float64 model, hence 1e-5."""
    hf = _tiny_hf_deepseek(seed, q_lora_rank)
    ours = MLADecoderLM.from_deepseek_state_dict(hf.state_dict(), MLAConfig(**SIZES, q_lora_rank=q_lora_rank)).eval()
    assert next(ours.parameters()).dtype == torch.float64
    tokens = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(seed + 10))
    with torch.no_grad():
        expected = hf(input_ids=tokens).logits  # (B, L, |V|)
        assert expected.abs().max() > 1, "logits this large let a wrong scale or rotation show"
        assert_close(ours(tokens), expected, atol=1e-5, rtol=1e-5)
        assert_close(ours(tokens, absorbed=True), expected, atol=1e-5, rtol=1e-5)
        for absorbed in (False, True):  # greedy decoding: ours with a latent cache, Hugging Face's by full passes
            caches = ours.new_caches()  # one LatentCache per layer
            logits = ours(tokens[:, :6], caches, absorbed=absorbed)[:, -1]
            ours_sequence, hf_sequence = tokens[:, :6], tokens[:, :6]
            for _ in range(18):
                hf_logits = hf(input_ids=hf_sequence).logits[:, -1]  # (B, |V|)
                assert_close(logits, hf_logits, atol=1e-5, rtol=1e-5)
                ours_sequence = torch.cat([ours_sequence, logits.argmax(-1, keepdim=True)], dim=1)
                hf_sequence = torch.cat([hf_sequence, hf_logits.argmax(-1, keepdim=True)], dim=1)
                logits = ours(ours_sequence[:, -1:], caches, absorbed=absorbed)[:, -1]
            assert torch.equal(ours_sequence, hf_sequence)
            assert caches[0].latent.shape == (2, 24, 12) and caches[0].rope_key.shape == (2, 24, 6)


def test_a_wrong_scale_or_rotary_layout_would_show():
    """The check above can fail: scaling by 1/sqrt(d_k) alone, or rotating in the rotate-half layout,
    gives logits far from Hugging Face's."""
    hf = _tiny_hf_deepseek(0, None)
    ours = MLADecoderLM.from_deepseek_state_dict(hf.state_dict(), MLAConfig(**SIZES)).eval()
    tokens = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        expected = hf(input_ids=tokens).logits
        for layer in ours.layers:  # the rotate-half layout (rope_interleave=False) instead of adjacent pairs
            layer.self_attn.layout = "half"
        assert (ours(tokens) - expected).abs().max() > 0.1
        for layer in ours.layers:
            layer.self_attn.layout = "interleaved"
        assert_close(ours(tokens), expected, atol=1e-5, rtol=1e-5)
        for layer in ours.layers:  # scale the queries so the scores are divided by sqrt(d_k) only
            layer.self_attn.q_proj.weight.mul_(math.sqrt(14 / 8))
        assert (ours(tokens) - expected).abs().max() > 0.1


@pytest.mark.parametrize("q_lora_rank", [None, 12])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_absorbed_decode_equals_the_projected_up_one(seed, q_lora_rank):
    model = _random_model(seed, q_lora_rank=q_lora_rank)
    tokens = torch.randint(0, 61, (3, 20), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = model(tokens)
        plain, absorbed = [LatentCache() for _ in range(2)], [LatentCache() for _ in range(2)]
        steps_plain = [model(tokens[:, :5], plain)] + [model(tokens[:, i:i + 1], plain) for i in range(5, 20)]
        steps_absorbed = [model(tokens[:, :5], absorbed, absorbed=True)]
        steps_absorbed += [model(tokens[:, i:i + 1], absorbed, absorbed=True) for i in range(5, 20)]
    assert full.abs().max() > 1
    assert_close(torch.cat(steps_plain, dim=1), full, atol=1e-10, rtol=1e-10)
    assert_close(torch.cat(steps_absorbed, dim=1), full, atol=1e-10, rtol=1e-10)
    assert_close(absorbed[1].latent, plain[1].latent, atol=1e-12, rtol=1e-12)


def test_absorbed_scores_are_the_scores_against_the_projected_up_keys():
    g = torch.Generator().manual_seed(0)
    B, H, L, T, d_nope, d_rope, d_c = 2, 3, 4, 7, 5, 4, 6
    q_nope, q_rope = torch.randn(B, H, L, d_nope, generator=g), torch.randn(B, H, L, d_rope, generator=g)
    latent, rope_key = torch.randn(B, T, d_c, generator=g), torch.randn(B, T, d_rope, generator=g)
    w_uk = torch.randn(H, d_nope, d_c, generator=g)
    key_nope = torch.einsum("hnc,btc->bhtn", w_uk, latent)  # (B, H, T, d_nope): the keys MLA never builds
    key = torch.cat([key_nope, rope_key.unsqueeze(1).expand(B, H, T, d_rope)], dim=-1)  # (B, H, T, d_nope + d_R)
    expected = torch.cat([q_nope, q_rope], dim=-1) @ key.transpose(-2, -1) / math.sqrt(d_nope + d_rope)
    got = absorbed_scores(q_nope, q_rope, latent, rope_key, w_uk)
    assert_close(got, expected)
    assert (got * math.sqrt(d_nope + d_rope) / math.sqrt(d_nope) - expected).abs().max() > 0.1  # a wrong scale shows


def test_the_rotary_key_is_one_per_token_and_not_normalised():
    model = _random_model(0)
    attn = model.layers[0].self_attn
    x = torch.randn(1, 5, 32, dtype=torch.float64)
    cache = LatentCache()
    with torch.no_grad():
        attn(x, cache)
        _, raw_rope_key = attn.kv_a_proj_with_mqa(x).split([12, 6], dim=-1)
    assert_close(cache.rope_key, apply_rope(raw_rope_key, attn.rope_cos, attn.rope_sin))
    assert cache.rope_key.shape == (1, 5, 6), "one rotary key per token, shared by all heads"


def test_parameter_names_are_deepseeks():
    names = {n for n, _ in MLADecoderLM(MLAConfig(**SIZES, q_lora_rank=12)).named_parameters() if "layers.0." in n}
    assert {n.removeprefix("layers.0.") for n in names} == {
        "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
        "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight",
        "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        "input_layernorm.weight", "post_attention_layernorm.weight"}


def test_cache_elements_per_token():
    assert mla_cache_elements("mha", num_heads=128, head_dim=128) == 32768
    assert mla_cache_elements("gqa", num_heads=128, head_dim=128, num_kv_heads=8) == 2048
    assert mla_cache_elements("mqa", num_heads=128, head_dim=128) == 256
    assert mla_cache_elements("mla", num_heads=128, head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64) == 576
    with pytest.raises(ValueError, match="kind must be one of"):
        mla_cache_elements("mlx", num_heads=4, head_dim=4)
    with pytest.raises(ValueError, match="num_heads"):
        mla_cache_elements("gqa", num_heads=6, head_dim=4, num_kv_heads=4)


@pytest.mark.parametrize("bad, message", [
    (dict(qk_rope_head_dim=5), "qk_rope_head_dim is rotated in pairs, so it must be even, got 5"),
    (dict(kv_lora_rank=72), "kv_lora_rank=72 is not smaller than the keys and values"),
    (dict(q_lora_rank=32), "q_lora_rank=32 is not smaller than d_model=32"),
    (dict(kv_lora_rank=0), "kv_lora_rank"),
    (dict(rope_base=1), "rope_base must be a finite number > 1"),
    (dict(eps=0), "eps must be a number > 0"),
])
def test_a_setting_that_makes_no_sense_is_named(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MLAConfig(**{**SIZES, **bad})


def test_bad_inputs_are_named():
    model = MLADecoderLM(MLAConfig(**{**SIZES, "max_len": 4}))
    with pytest.raises(ValueError, match="positions up to 4, beyond max_len=4"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="give one LatentCache per layer"):
        model(torch.zeros(1, 2, dtype=torch.long), [LatentCache()])
    with pytest.raises(ValueError, match="outside the vocabulary of 61"):
        model(torch.full((1, 2), 61))
    with pytest.raises(ValueError, match="tokens must be an int64 tensor"):
        model(torch.zeros(1, 2))
    with pytest.raises(ValueError, match="config must be an MLAConfig"):
        MLADecoderLM({"vocab_size": 5})
    attn = MultiHeadLatentAttention(MLAConfig(**SIZES))
    with pytest.raises(ValueError, match="absorbed must be True or False"):
        attn(torch.zeros(1, 2, 32), None, "yes")
    with pytest.raises(ValueError, match="cache must be a LatentCache"):
        attn(torch.zeros(1, 2, 32), object())
    with pytest.raises(ValueError, match="d_model"):
        attn(torch.zeros(1, 2, 31))
    cache = LatentCache()
    cache.append(torch.zeros(2, 3, 12), torch.zeros(2, 3, 6))
    with pytest.raises(ValueError, match="do not continue the cached"):
        cache.append(torch.zeros(1, 1, 12), torch.zeros(1, 1, 6))
    with pytest.raises(ValueError, match="matching"):
        cache.append(torch.zeros(2, 3, 12), torch.zeros(2, 2, 6))
    with pytest.raises(ValueError, match=r"w_uk must be \(H=3, d_k=5, d_c=6\)"):
        absorbed_scores(torch.zeros(1, 3, 2, 5), torch.zeros(1, 3, 2, 4), torch.zeros(1, 7, 6), torch.zeros(1, 7, 4),
                        torch.zeros(3, 6, 5))
    with pytest.raises(ValueError, match="expected a DeepseekV3ForCausalLM state dict"):
        rename_hf_deepseek({"embed_tokens.weight": torch.zeros(1)})


def test_rename_drops_the_prefix_and_fills_tied_embeddings():
    embed = torch.randn(5, 4)
    renamed = rename_hf_deepseek({"model.embed_tokens.weight": embed, "model.layers.0.self_attn.kv_b_proj.weight": embed,
                                  "model.rotary_emb.inv_freq": torch.ones(2)})
    assert set(renamed) == {"embed_tokens.weight", "layers.0.self_attn.kv_b_proj.weight", "lm_head.weight"}
    assert renamed["lm_head.weight"] is embed
