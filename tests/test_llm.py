"""RMSNorm, SwiGLU, both rotary layouts, and the switchable decoder block and model: against
PyTorch's own RMSNorm and encoder layers, closed forms, and the full pass for cached decoding."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from lessons_src import (
    DecoderConfig,
    DecoderLM,
    KVCache,
    RMSNorm,
    SwiGLU,
    apply_rope,
    rename_hf_llama,
    rope_frequencies,
    rope_layout_permutation,
    swiglu_width,
)
from lessons_src.llm import HF_LLAMA_SWITCHES

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _randomize(module, seed, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 5, 7), (2, 3, 4, 7)])
@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.1])
def test_rms_norm_equals_torch(shape, eps):
    ours, theirs = RMSNorm(7, eps=eps), nn.RMSNorm(7, eps=eps)
    _randomize(ours, 0)
    theirs.weight.data.copy_(ours.weight.data)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 3
    assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
    assert not any(name.endswith("bias") for name, _ in ours.named_parameters())


def test_rms_norm_errors():
    with pytest.raises(ValueError, match="eps must be a number > 0"):
        RMSNorm(4, eps=0)
    with pytest.raises(ValueError, match="x must end in d_model=4"):
        RMSNorm(4)(torch.randn(2, 5))


def test_swiglu_is_its_closed_form_without_biases():
    torch.manual_seed(0)
    ff = SwiGLU(6, 16)
    x = torch.randn(2, 3, 6)
    gate, up, down = ff.gate_proj.weight, ff.up_proj.weight, ff.down_proj.weight
    expected = ((x @ gate.T) * torch.sigmoid(x @ gate.T) * (x @ up.T)) @ down.T
    assert_close(ff(x), expected, **TOL)
    assert [n for n, _ in ff.named_parameters()] == ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]


@pytest.mark.parametrize("d_model", [64, 96, 512, 4096])
def test_swiglu_width_matches_a_4d_relu_feed_forward(d_model):
    width = swiglu_width(d_model)
    assert width == math.ceil(8 * d_model / 3)
    relu_params, swiglu_params = 2 * d_model * 4 * d_model, 3 * d_model * width
    assert abs(swiglu_params - relu_params) <= 3 * d_model
    assert swiglu_width(4096, multiple_of=256) == 11008  # Llama's 7B width


@pytest.mark.parametrize("head_dim", [2, 8, 16])
def test_the_two_rotary_layouts_agree_after_the_permutation(head_dim):
    cos, sin = rope_frequencies(head_dim, 12)
    g = torch.Generator().manual_seed(head_dim)
    q, k = torch.randn(2, 3, 12, head_dim, generator=g), torch.randn(2, 3, 12, head_dim, generator=g)
    p = rope_layout_permutation(head_dim)
    assert_close(apply_rope(q[..., p], cos, sin, layout="half"), apply_rope(q, cos, sin)[..., p])
    scores = apply_rope(q, cos, sin) @ apply_rope(k, cos, sin).transpose(-2, -1)
    permuted = apply_rope(q[..., p], cos, sin, layout="half") @ apply_rope(k[..., p], cos, sin, layout="half").transpose(-2, -1)
    assert_close(scores, permuted, **TOL)
    # Mixing them up does change the scores:
    mixed = apply_rope(q, cos, sin, layout="half") @ apply_rope(k, cos, sin, layout="half").transpose(-2, -1)
    if head_dim > 2:
        assert not torch.allclose(scores, mixed, atol=1e-3)


def test_rotate_half_is_the_gpt_neox_formula():
    cos, sin = rope_frequencies(8, 5)
    x = torch.randn(5, 8)
    x1, x2 = x[..., :4], x[..., 4:]
    rotate_half = torch.cat((-x2, x1), dim=-1)
    expected = x * torch.cat((cos, cos), dim=-1) + rotate_half * torch.cat((sin, sin), dim=-1)
    assert_close(apply_rope(x, cos, sin, layout="half"), expected, **TOL)
    with pytest.raises(ValueError, match="layout must be 'interleaved' or 'half'"):
        apply_rope(x, cos, sin, layout="neox")


def _copy_torch_layer(layer: nn.TransformerEncoderLayer, ours) -> None:
    with torch.no_grad():
        d = layer.self_attn.embed_dim
        w, b = layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias
        for i, proj in enumerate((ours.self_attn.q_proj, ours.self_attn.k_proj, ours.self_attn.v_proj)):
            proj.weight.copy_(w[i * d:(i + 1) * d])
            proj.bias.copy_(b[i * d:(i + 1) * d])
        ours.self_attn.o_proj.load_state_dict(layer.self_attn.out_proj.state_dict())
        ours.mlp.up_proj.load_state_dict(layer.linear1.state_dict())
        ours.mlp.down_proj.load_state_dict(layer.linear2.state_dict())
        ours.input_layernorm.load_state_dict(layer.norm1.state_dict())
        ours.post_attention_layernorm.load_state_dict(layer.norm2.state_dict())


@pytest.mark.parametrize("placement", ["post", "pre"])
@pytest.mark.parametrize("ffn", ["relu", "gelu"])
def test_the_2017_switches_are_pytorchs_encoder_layers_with_a_causal_mask(placement, ffn):
    config = DecoderConfig(vocab_size=13, d_model=16, num_heads=4, num_layers=2, max_len=10, d_ff=24,
                           placement=placement, ffn=ffn, positions="learned")
    model = DecoderLM(config).eval()
    _randomize(model, 1)
    layers = [nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, activation=ffn, norm_first=placement == "pre",
                                         batch_first=True).eval() for _ in range(2)]
    for i, layer in enumerate(layers):
        _randomize(layer, 10 + i)
        _copy_torch_layer(layer, model.layers[i])
    tokens = torch.randint(0, 13, (3, 9), generator=torch.Generator().manual_seed(2))
    x = model.embed_tokens(tokens) + model.embed_positions.weight[:9]
    causal = nn.Transformer.generate_square_subsequent_mask(9)
    for layer in layers:
        x = layer(x, src_mask=causal, is_causal=True)
    assert_close(model(tokens), model.lm_head(model.norm(x)), **TOL)


LLAMA = dict(norm="rms", placement="pre", ffn="swiglu", positions="rope", num_kv_heads=2, bias=False)


def test_the_llama_switches_use_checkpoint_names():
    model = DecoderLM(DecoderConfig(vocab_size=11, d_model=16, num_heads=4, num_layers=2, **LLAMA))
    names = set(model.state_dict())
    layer = {f"layers.0.{n}.weight" for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                            "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                                            "input_layernorm", "post_attention_layernorm")}
    assert layer <= names and {"embed_tokens.weight", "norm.weight", "lm_head.weight"} <= names
    assert not any(n.endswith("bias") for n in names)
    assert model.layers[0].self_attn.k_proj.weight.shape == (2 * 4, 16)  # 2 KV heads of 4
    assert isinstance(model.layers[0].input_layernorm, RMSNorm)


@pytest.mark.parametrize("switches", [
    dict(),  # 2017: post-LN, LayerNorm, ReLU, sinusoidal, biases
    dict(placement="pre", positions="learned"),
    dict(placement="pre", positions="alibi", num_kv_heads=1),
    dict(placement="pre", positions="rope", rope_layout="half", norm="rms"),
    dict(placement="pre", positions="none"),
    LLAMA,
])
def test_decoding_token_by_token_with_a_cache_equals_the_full_pass(switches):
    torch.manual_seed(3)
    config = DecoderConfig(vocab_size=17, d_model=16, num_heads=4, num_layers=2, max_len=12, **switches)
    model = DecoderLM(config).eval()
    tokens = torch.randint(0, 17, (2, 9))
    full = model(tokens)
    caches = [KVCache() for _ in range(config.num_layers)]
    prefix = model(tokens[:, :4], caches)  # a prompt of 4, then one token at a time
    steps = [model(tokens[:, i:i + 1], caches) for i in range(4, 9)]
    assert_close(torch.cat([prefix, *steps], dim=1), full, **TOL)
    assert caches[0].seq_len == 9


def test_a_causal_model_never_sees_the_future():
    model = DecoderLM(DecoderConfig(vocab_size=7, d_model=8, num_heads=2, num_layers=2, **LLAMA)).eval()
    tokens = torch.randint(0, 7, (1, 8))
    changed = tokens.clone()
    changed[0, 5] = (changed[0, 5] + 1) % 7
    assert_close(model(tokens)[:, :5], model(changed)[:, :5])


def test_without_positions_the_last_prediction_ignores_the_order_of_the_prefix():
    """positions='none': nothing but the causal mask orders the tokens, so in one layer the last token's
    logits are the same for any order of the earlier tokens (in a second layer the earlier tokens' own
    outputs would depend on their prefixes); with sinusoidal positions they are not."""
    torch.manual_seed(5)
    tokens = torch.randint(0, 11, (2, 7))
    shuffled = torch.cat([tokens[:, :6][:, torch.randperm(6)], tokens[:, 6:]], dim=1)
    for positions, same in (("none", True), ("sinusoidal", False)):
        config = DecoderConfig(vocab_size=11, d_model=16, num_heads=4, num_layers=1, max_len=8, placement="pre",
                               positions=positions)
        model = DecoderLM(config).eval()
        assert not hasattr(model, "embed_positions") or positions == "sinusoidal"
        gap = (model(tokens)[:, -1] - model(shuffled)[:, -1]).abs().max().item()
        assert (gap < 1e-5) == same, (positions, gap)


def test_rotary_turns_queries_and_keys_never_values():
    """With V's projection only, a rope model and a no-position model whose attention is uniform
    differ: here just check that values pass unrotated, by comparing against F.sdpa by hand."""
    torch.manual_seed(4)
    config = DecoderConfig(vocab_size=5, d_model=8, num_heads=2, num_layers=1, max_len=6, **LLAMA)
    attention = DecoderLM(config).layers[0].self_attn
    x = torch.randn(1, 6, 8)
    q = attention.q_proj(x).view(1, 6, 2, 4).transpose(1, 2)
    k = attention.k_proj(x).view(1, 6, 2, 4).transpose(1, 2)
    v = attention.v_proj(x).view(1, 6, 2, 4).transpose(1, 2)
    cos, sin = rope_frequencies(4, 6)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # v as projected: not rotated
    assert_close(attention(x), attention.o_proj(out.transpose(1, 2).reshape(1, 6, 8)), **TOL)


@pytest.mark.parametrize("bad, message", [
    (dict(norm="batch"), "norm must be one of 'layer', 'rms', got 'batch'"),
    (dict(placement="sandwich"), "placement must be one of 'post', 'pre'"),
    (dict(ffn="swish"), "ffn must be one of 'relu', 'gelu', 'gelu_tanh', 'swiglu'"),
    (dict(positions="nope"), "positions must be one of"),
    (dict(rope_layout="half"), "rope_layout='half' only applies with positions='rope'"),
    (dict(num_kv_heads=3), "num_heads=4 is not divisible by num_kv_heads=3"),
    (dict(d_model=18), "d_model=18 is not divisible by num_heads=4"),
    (dict(d_model=12, num_heads=4, positions="rope"), "head_dim (d_model / num_heads unless given) must be even, got 3"),
    (dict(d_model=12, num_heads=4, head_dim=5, positions="rope"), "must be even, got 5"),
    (dict(d_model=12, num_heads=5), "d_model=12 is not divisible by num_heads=5"),
    (dict(head_dim=0), "head_dim must be a positive int"),
    (dict(qkv_bias="yes"), "qkv_bias must be True or False"),
    (dict(tie_word_embeddings=1), "tie_word_embeddings must be True or False"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling only applies with positions='rope'"),
    (dict(positions="rope", rope_scaling={"rope_type": "dynamic", "factor": 4.0}), "rope_type is one of 'linear', 'llama3', 'yarn'"),
    (dict(positions="rope", rope_scaling={"rope_type": "llama3", "factor": 8.0}), "missing .'low_freq_factor'"),
    (dict(positions="rope", rope_scaling={"rope_type": "linear", "factor": -1}), "must be > 0"),
    (dict(sandwich_norms=True), "sandwich_norms=True adds norms to a pre-norm block; placement is 'post'"),
    (dict(scale_embeddings="yes"), "scale_embeddings must be True or False"),
    (dict(final_logit_softcapping=0), "final_logit_softcapping must be None or a finite number > 0"),
    (dict(positions="rope", rope_local_base_freq=1e4), "it needs positions='rope' and a sliding_window"),
    (dict(positions="rope", sliding_window=4, rope_local_base_freq=1), "rope_local_base_freq must be None or a finite"),
    (dict(bias=1), "bias must be True or False"),
    (dict(positions="rope", rope_base=0), "rope_base must be a finite number > 1"),
    (dict(positions="rope", rope_base=float("inf")), "rope_base must be a finite number > 1"),
    (dict(positions="rope", rope_base="500000"), "rope_base must be a finite number > 1"),
    (dict(rope_base=500000.0), "rope_base=500000.0 only applies with positions='rope'"),
])
def test_a_switch_that_makes_no_sense_is_named(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DecoderConfig(vocab_size=5, **{"d_model": 16, "num_heads": 4, **bad})


def test_bad_model_inputs():
    model = DecoderLM(DecoderConfig(vocab_size=5, d_model=8, num_heads=2, max_len=4))
    with pytest.raises(ValueError, match="positions up to 4, beyond max_len=4"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="1 caches for 2 layers"):
        model(torch.zeros(1, 2, dtype=torch.long), [KVCache()])
    with pytest.raises(ValueError, match="config must be a DecoderConfig"):
        DecoderLM({"vocab_size": 5})


def _tiny_hf_llama(seed: int):
    """A random 2-layer LlamaForCausalLM in float64: GQA (4 query heads, 2 KV heads), rope_theta 500,000
    (Llama 3's base), no biases; weights of std 0.3 and norm weights around 1, not the std-0.02 init
    under which every score is near 0 and a wrong rotary base or layout would hardly show."""
    from transformers import LlamaConfig, LlamaForCausalLM  # test-only dependency (the dev extra)

    config = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=88, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=24, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, attention_bias=False,
                         mlp_bias=False, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float64).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(1 + 0.5 * noise if name.endswith("norm.weight") else 0.3 * noise)
    return model


def _config_for(switches=None, rope_base=500000.0):
    """The DecoderConfig of that checkpoint (the sizes of _tiny_hf_llama)."""
    return DecoderConfig(vocab_size=61, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, d_ff=88, max_len=24,
                         eps=1e-5, rope_base=rope_base, **(switches or HF_LLAMA_SWITCHES))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_hugging_face_llama_checkpoint_loads_and_decodes_alike(seed):
    """Random weights, built offline from a config (no download). Hugging Face computes its RMSNorm and
    rotary angles in float32 even in a float64 model, hence 1e-5 and not 1e-12."""
    hf = _tiny_hf_llama(seed)
    ours = DecoderLM.from_llama_state_dict(hf.state_dict(), _config_for()).eval()
    assert next(ours.parameters()).dtype == torch.float64
    tokens = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(seed + 10))
    with torch.no_grad():
        expected = hf(input_ids=tokens).logits  # (B, L, |V|)
        assert_close(ours(tokens), expected, atol=1e-5, rtol=1e-5)
        # Greedy decoding: ours one token at a time with a KV cache, Hugging Face's by full passes.
        caches = [KVCache() for _ in range(2)]
        logits, ours_sequence, hf_sequence = ours(tokens[:, :6], caches)[:, -1], tokens[:, :6], tokens[:, :6]
        for _ in range(18):
            hf_logits = hf(input_ids=hf_sequence).logits[:, -1]  # (B, |V|)
            assert_close(logits, hf_logits, atol=1e-5, rtol=1e-5)
            ours_sequence = torch.cat([ours_sequence, logits.argmax(-1, keepdim=True)], dim=1)
            hf_sequence = torch.cat([hf_sequence, hf_logits.argmax(-1, keepdim=True)], dim=1)
            logits = ours(ours_sequence[:, -1:], caches)[:, -1]
    assert torch.equal(ours_sequence, hf_sequence)
    assert caches[0].seq_len == 24


def test_a_wrong_rotary_base_or_layout_would_show():
    """The check above can fail: the same weights with Llama 2's base, or Meta's interleaved layout,
    give logits far from Hugging Face's (and no error: only the numbers tell)."""
    hf = _tiny_hf_llama(0)
    tokens = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        expected = hf(input_ids=tokens).logits
        wrong_base = DecoderLM.from_llama_state_dict(hf.state_dict(), _config_for(rope_base=10000.0)).eval()
        assert (wrong_base(tokens) - expected).abs().max() > 0.1
        interleaved = DecoderLM(_config_for(dict(HF_LLAMA_SWITCHES, rope_layout="interleaved"))).double().eval()
        interleaved.load_state_dict(rename_hf_llama(hf.state_dict()))
        assert (interleaved(tokens) - expected).abs().max() > 0.1


def test_rename_hf_llama_drops_the_prefix_and_fills_tied_embeddings():
    embed, norm, rotary = torch.randn(5, 4), torch.ones(4), torch.ones(2)
    renamed = rename_hf_llama({"model.embed_tokens.weight": embed, "model.norm.weight": norm,
                               "model.layers.0.self_attn.rotary_emb.inv_freq": rotary})
    assert set(renamed) == {"embed_tokens.weight", "norm.weight", "lm_head.weight"}
    assert renamed["lm_head.weight"] is embed and renamed["norm.weight"] is norm
    with pytest.raises(ValueError, match="expected a LlamaForCausalLM state dict"):
        rename_hf_llama({"embed_tokens.weight": embed})
    with pytest.raises(ValueError, match=r"config has \{'rope_layout': 'interleaved', 'bias': True\}"):
        DecoderLM.from_llama_state_dict({}, _config_for(dict(HF_LLAMA_SWITCHES, rope_layout="interleaved", bias=True)))


def test_rope_base_reaches_the_rotary_tables():
    model = DecoderLM(DecoderConfig(vocab_size=5, d_model=16, num_heads=2, max_len=6, **LLAMA, rope_base=500000.0))
    cos, sin = rope_frequencies(8, 6, base=500000.0)
    assert_close(model.layers[1].self_attn.rope_cos, cos)
    assert_close(model.layers[1].self_attn.rope_sin, sin)
    assert not torch.allclose(cos, rope_frequencies(8, 6)[0])
