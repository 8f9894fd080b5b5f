"""ModelExplorer: a trained model the reader types into, live in a kernel and in the browser of the static site.

The unit tests (unmarked) check the boundary, the export of the weights and the Python forward. The browser
tests (marked `site`, run by the site stage with the other Chromium tests) load a page written by
`to_html()` in Chromium, offline, and compare the JavaScript forward with PyTorch's on typed text, for both
kinds of LanguageModel and every DecoderLM switch; type with the keyboard; feed bad input; and check a
390 px phone. The largest differences are printed (`-s` shows them)."""

import base64
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from lessons_src import CharTokenizer, DecoderConfig, DecoderLM, LanguageModel, MLAConfig, MLADecoderLM, ModelExplorer
from lessons_src.explorer import describe_char

TOKENIZER = CharTokenizer("abcdefghijklmnopqrstuvwxyz ,.T\n")
TYPED = "the cat sat on the mat, then the cat sat on the hat."  # longer than MAX_LEN: the page crops it
MAX_LEN = 24

# Every DecoderLM switch appears at least once: LayerNorm/RMSNorm, pre/post, ReLU/GELU/SwiGLU, learned/
# sinusoidal/rotary (both layouts)/ALiBi/no positions, grouped-query heads, with and without biases.
DECODER_SWITCHES = {
    "2017: layer post relu sinusoidal": dict(),
    "layer pre gelu learned gqa2 nobias": dict(placement="pre", ffn="gelu", positions="learned", num_kv_heads=2,
                                               bias=False),
    "rms pre swiglu rope interleaved gqa1 nobias": dict(norm="rms", placement="pre", ffn="swiglu", positions="rope",
                                                       num_kv_heads=1, bias=False),
    "rms post swiglu rope half gqa2 bias base5e5": dict(norm="rms", placement="post", ffn="swiglu", positions="rope",
                                                        rope_layout="half", rope_base=500000.0, num_kv_heads=2),
    "layer pre relu alibi": dict(placement="pre", positions="alibi"),
    "rms pre gelu none nobias": dict(norm="rms", placement="pre", ffn="gelu", positions="none", bias=False),
    "alibi 3 heads (not a power of 2) post gelu": dict(num_heads=3, d_model=24, positions="alibi", ffn="gelu"),
}
# Today's switches (chapter "Attention in today's open models"), each alone on a Llama-style base, then three
# family-like combinations (the released models differ in sizes, and in parts the course does not build).
LLAMA = dict(norm="rms", placement="pre", ffn="swiglu", positions="rope", rope_layout="half", bias=False)
TODAYS_SWITCHES = {
    "qk_norm": dict(qk_norm=True),
    "norm_plus_one": dict(norm_plus_one=True),
    "query_pre_attn_scalar": dict(query_pre_attn_scalar=24.0),
    "attn_logit_softcapping": dict(attn_logit_softcapping=2.0),
    "sinks": dict(sinks=True),
    "sliding_window (every layer)": dict(sliding_window=5),
    "sliding_window with layer_types": dict(sliding_window=5, layer_types=("sliding_attention", "full_attention")),
    "attn_output_gate": dict(attn_output_gate=True),
    "Gemma-like": dict(ffn="gelu", norm_plus_one=True, qk_norm=True, query_pre_attn_scalar=16.0,
                       attn_logit_softcapping=3.0, sliding_window=6, num_kv_heads=2,
                       layer_types=("sliding_attention", "full_attention")),
    "gpt-oss-like": dict(bias=True, sinks=True, sliding_window=4, num_kv_heads=2,
                         layer_types=("sliding_attention", "full_attention")),
    "Qwen3-Next-like": dict(norm_plus_one=True, qk_norm=True, attn_output_gate=True, num_kv_heads=1),
    # What real checkpoints add (lessons_src.config_from_hf): a head_dim of its own (num_heads * head_dim is
    # not d_model), biases on q/k/v only, tied embeddings; GPT-2's tanh GELU on a pre-LN learned-position block.
    "Qwen-like head_dim 12, qkv biases, tied": dict(head_dim=12, qkv_bias=True, tie_word_embeddings=True,
                                                    qk_norm=True, num_kv_heads=2),
    "GPT-2-like": dict(norm="layer", ffn="gelu_tanh", positions="learned", rope_layout="interleaved", bias=True,
                       tie_word_embeddings=True),
}
MLA_CONFIGS = {
    "MLADecoderLM": dict(kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8),
    "MLADecoderLM query compressed": dict(kv_lora_rank=8, q_lora_rank=12, qk_nope_head_dim=4, qk_rope_head_dim=8,
                                          v_head_dim=6, rope_base=500.0),
}


def scramble(model: nn.Module, seed: int, gain: float = 1.5) -> nn.Module:
    """Large random weights: peaked attention and non-trivial norms, so a wrong scale, rotation or slope shows
    (at PyTorch's small initial weights every score is near 0 and such mistakes hide). Matrices get
    ``gain / sqrt(fan_in)``; the attention-only model, with no norm, takes a smaller gain so that its logits
    stay in a trained model's range (tens, where float32's rounding is below 1e-4)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("sinks"):  # a learned sink's logit per head: from negligible to most of the weight
                p.copy_(2 * noise)
            elif p.dim() == 1 and name.endswith("weight"):  # a norm's gain (Gemma's: times 1 + weight)
                p.copy_(1 + 0.3 * noise)
            elif p.dim() == 1:  # a bias
                p.copy_(0.2 * noise)
            elif "embed" in name or "positions" in name:
                p.copy_(noise)
            else:  # (out, in)
                p.copy_(noise * gain / p.size(1) ** 0.5)
    return model.eval()


def make_models(seed: int = 0) -> dict[str, nn.Module]:
    """One small random model of each kind and of each switch set (named)."""
    torch.manual_seed(seed)
    V = TOKENIZER.vocab_size
    models = {
        "LanguageModel": LanguageModel(V, d_model=32, num_heads=4, num_layers=2, max_len=MAX_LEN),
        "LanguageModel attention-only": LanguageModel(V, d_model=32, num_heads=4, num_layers=2, max_len=MAX_LEN,
                                                      attention_only=True),
    }
    for name, switches in DECODER_SWITCHES.items():
        config = dict(vocab_size=V, d_model=32, num_heads=4, num_layers=2, max_len=MAX_LEN) | switches
        models[f"DecoderLM {name}"] = DecoderLM(DecoderConfig(**config))
    for name, switches in TODAYS_SWITCHES.items():
        config = dict(vocab_size=V, d_model=32, num_heads=4, num_layers=2, max_len=MAX_LEN) | LLAMA | switches
        models[f"DecoderLM {name}"] = DecoderLM(DecoderConfig(**config))
    for name, sizes in MLA_CONFIGS.items():
        models[name] = MLADecoderLM(MLAConfig(vocab_size=V, d_model=32, num_heads=4, num_layers=2, max_len=MAX_LEN,
                                              **sizes))
    return {name: scramble(m, seed + i, gain=1.0 if "attention-only" in name else 1.5)
            for i, (name, m) in enumerate(models.items())}


def max_differences(ours: dict, theirs: dict) -> tuple[float, float]:
    """Largest absolute difference of the logits and of any head's weights between two forwards."""
    logits = np.abs(np.asarray(ours["logits"], dtype=np.float64) - np.asarray(theirs["logits"], dtype=np.float64))
    attention = [np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max(initial=0.0)
                 for la, lb in zip(ours["attention"], theirs["attention"]) for a, b in zip(la, lb)]
    return float(logits.max(initial=0.0)), float(max(attention, default=0.0))


# -- the boundary -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models():
    return make_models()


@pytest.fixture(scope="module")
def lm(models):
    return models["LanguageModel"]


def test_refuses_what_it_cannot_run(lm):
    with pytest.raises(ValueError, match="model must be a lessons_src.LanguageModel, DecoderLM or MLADecoderLM, "
                                         "got Linear"):
        ModelExplorer(nn.Linear(3, 3), TOKENIZER)
    with pytest.raises(ValueError, match=r"tokenizer must be a lessons_src.CharTokenizer \(or, for a checkpoint read by .*\), got str"):
        ModelExplorer(lm, "abc")
    with pytest.raises(ValueError, match=r"the tokenizer has 3 characters but the model's vocabulary has 31"):
        ModelExplorer(lm, CharTokenizer("abc"))


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_len=MAX_LEN + 1), "max_len=25 is longer than the model's max_len=24"),
    (dict(max_len=0), "max_len must be a positive int"),
    (dict(top_k=32), "top_k=32 is more than the 31 characters"),
    (dict(top_k=2.5), "top_k must be a positive int"),
    (dict(temperature=0), r"temperature must be a number in \[0.05, 5\]"),
    (dict(temperature="hot"), "temperature must be a number"),
    (dict(continue_chars=0), "continue_chars must be a positive int"),
    (dict(continue_chars=5000), "continue_chars=5000 is more than 1000"),
    (dict(id="1abc"), "id must be a letter"),
    (dict(id="a b"), "id must be a letter"),
    (dict(precision="float64"), "precision must be 'auto', 'float32' or 'float16'"),
    (dict(seed=-1), "seed must be an int >= 0"),
    (dict(max_chars=10), "max_chars=10 is shorter than max_len=24"),
    (dict(text=3), "text must be a str, got int"),
    (dict(layer=2), r"layer must be an int from 0 to 1 \(the model has 2\), got 2"),
    (dict(head=-1), "head must be an int from 0 to 3"),
    (dict(reference_text=""), "reference_text must be a non-empty str"),
    (dict(reference_text=b"the"), "reference_text must be a non-empty str"),
])
def test_bad_arguments_name_the_fault(lm, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelExplorer(lm, TOKENIZER, **kwargs)


def test_a_small_vocabulary_gets_fewer_bars():
    tiny = CharTokenizer("ab ")
    explorer = ModelExplorer(LanguageModel(3, d_model=8, num_heads=2, num_layers=1, max_len=8), tiny)
    half = explorer.text[: len(explorer.text) // 2]
    assert explorer.top_k == 3 and explorer.text == half + half and explorer.forward("ab")["logits"].shape == (2, 3)


def test_arguments_are_keyword_only(lm):
    with pytest.raises(TypeError):
        ModelExplorer(lm, TOKENIZER, "some text")


def test_an_unsupported_switch_is_named():
    model = DecoderLM(DecoderConfig(vocab_size=TOKENIZER.vocab_size, max_len=8))
    object.__setattr__(model.config, "positions", "xpos")  # a value the JavaScript does not know
    with pytest.raises(ValueError, match=r"DecoderConfig positions='xpos' is not supported.*'alibi'"):
        ModelExplorer(model, TOKENIZER)

    @dataclasses.dataclass(frozen=True)
    class NewConfig(DecoderConfig):
        chunk_size: int | None = None

    model.config = NewConfig(vocab_size=TOKENIZER.vocab_size, max_len=8)
    ModelExplorer(model, TOKENIZER)  # a new switch left off changes nothing the forward computes
    model.config = NewConfig(vocab_size=TOKENIZER.vocab_size, max_len=8, chunk_size=4)
    with pytest.raises(ValueError, match=r"switch\(es\) \['chunk_size'\] are not supported"):
        ModelExplorer(model, TOKENIZER)
    # The same rule for latent attention: a new MLAConfig field left at its default runs, set it is named.

    @dataclasses.dataclass(frozen=True)
    class NewMLAConfig(MLAConfig):
        absorbed_output: bool = False

    mla = MLADecoderLM(MLAConfig(vocab_size=TOKENIZER.vocab_size, max_len=8))
    mla.config = NewMLAConfig(vocab_size=TOKENIZER.vocab_size, max_len=8)
    ModelExplorer(mla, TOKENIZER)
    mla.config = NewMLAConfig(vocab_size=TOKENIZER.vocab_size, max_len=8, absorbed_output=True)
    with pytest.raises(ValueError, match=r"MLAConfig field\(s\) \['absorbed_output'\] are not supported"):
        ModelExplorer(mla, TOKENIZER)
    # Real checkpoints' fields the JavaScript does not compute (rotate-half pairs, YaRN) are refused by name too.
    for field in (dict(rope_interleave=False), dict(rope_scaling={"rope_type": "linear", "factor": 2.0})):
        with pytest.raises(ValueError, match=rf"MLAConfig field\(s\) \['{next(iter(field))}'\] are not supported"):
            ModelExplorer(MLADecoderLM(MLAConfig(vocab_size=TOKENIZER.vocab_size, max_len=8, **field)), TOKENIZER)
    with pytest.raises(ValueError, match=r"DecoderConfig switch\(es\) \['sandwich_norms', 'scale_embeddings'\]"):
        ModelExplorer(DecoderLM(DecoderConfig(vocab_size=TOKENIZER.vocab_size, max_len=8, placement="pre",
                                              sandwich_norms=True, scale_embeddings=True)), TOKENIZER)


def test_an_unsupported_activation_is_named(lm):
    import copy

    model = copy.deepcopy(lm)
    model.blocks[1].ff.activation = nn.GELU(approximate="tanh")
    with pytest.raises(ValueError, match="block 1 has activation GELU.*ReLU and exact GELU"):
        ModelExplorer(model, TOKENIZER)


# -- the text the model reads ----------------------------------------------------------------------------------


def test_prepare_skips_unknown_characters_and_names_them(lm):
    explorer = ModelExplorer(lm, TOKENIZER)
    prepared = explorer.prepare("héllo wörld\u200b!!")
    assert prepared.text == "hllo wrld"
    assert prepared.messages == ["Skipped 5 characters the model does not know: 'é', 'ö', U+200B, '!'."]
    assert describe_char(" ") == "space" and describe_char("\n") == "newline" and describe_char("\xa0") == "U+00A0"


def test_prepare_says_what_it_does_with_empty_long_and_huge_text(lm):
    explorer = ModelExplorer(lm, TOKENIZER, max_chars=100)
    assert explorer.prepare("").messages == ["Type some text: the model predicts the character that follows it."]
    assert explorer.prepare("!!").text == ""
    assert len(explorer.prepare("!!").messages) == 2
    long = explorer.prepare("abcdefghij" * 3)
    assert long.text == ("abcdefghij" * 3)[-MAX_LEN:]
    assert long.messages == [f"The model reads at most {MAX_LEN} characters (its max_len): it sees the last "
                             f"{MAX_LEN} of the 30 characters it knows."]
    huge = explorer.prepare("a" * 2_000_000 + "xyz")  # cut to its last 100 before it is scanned; said so
    assert huge.messages == ["Your text has 2,000,003 characters: the model reads its end, so only the last 100 are "
                             "looked at.", f"The model reads at most {MAX_LEN} characters (its max_len): it sees the "
                             f"last {MAX_LEN} of the characters it knows among them."]
    assert huge.text.endswith("xyz") and len(huge.text) == MAX_LEN
    assert explorer.prepare("é" * 2_000_000 + "xyz").messages == [
        "Your text has 2,000,003 characters: the model reads its end, so only the last 100 are looked at.",
        "Skipped 97 characters the model does not know: 'é'."]


# -- the export and the Python forward ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["LanguageModel", "LanguageModel attention-only",
                                  "DecoderLM rms pre swiglu rope interleaved gqa1 nobias",
                                  "DecoderLM 2017: layer post relu sinusoidal"])
def test_the_export_round_trips_every_weight(models, name):
    model = models[name]
    explorer = ModelExplorer(model, TOKENIZER)
    config = explorer.config()
    flat = np.frombuffer(base64.b64decode(explorer._payload[1]), dtype="<f4")
    exported = {n: flat[start:start + size] for n, start, size in config["tensors"]}
    params = {n: p.detach().numpy().ravel() for n, p in model.named_parameters()}
    assert sum(size for _, _, size in config["tensors"]) == len(flat) == sum(p.size for p in params.values())
    matched = {n for n, values in params.items() for e in exported.values() if np.array_equal(values, e)}
    assert matched == set(params), f"weights missing from the export: {set(params) - matched}"
    assert explorer.embedded_dtype == "float32" and explorer.rounding_error()["logits"] == 0.0


def test_float16_export_and_its_error(lm):
    explorer = ModelExplorer(lm, TOKENIZER, precision="float16")
    flat = np.frombuffer(base64.b64decode(explorer._payload[1]), dtype="<f2")
    assert explorer.embedded_dtype == "float16"
    assert np.array_equal(flat.astype(np.float32)[: lm.embed.weight.numel()],
                          lm.embed.weight.detach().numpy().ravel().astype(np.float16).astype(np.float32))
    error = explorer.rounding_error(TYPED)
    print(f"float16 weights: largest weight error {error['weights']:.1e}, logits {error['logits']:.1e}, "
          f"attention {error['attention']:.1e}")
    assert 0 < error["weights"] < 2e-3 and 0 < error["logits"] < 0.1 and error["attention"] < 0.05


def test_auto_precision_switches_to_float16_above_the_limit():
    torch.manual_seed(0)
    big = LanguageModel(TOKENIZER.vocab_size, d_model=128, num_heads=4, num_layers=2, max_len=64).eval()
    small = LanguageModel(TOKENIZER.vocab_size, d_model=32, num_heads=4, num_layers=2, max_len=64).eval()
    auto, full = ModelExplorer(big, TOKENIZER), ModelExplorer(big, TOKENIZER, precision="float32")
    assert auto.embedded_dtype == "float16"  # 420k weights: 2.2 MB of float32 in base64
    assert len(full.to_html()) > 2_000_000 and len(auto.to_html()) < 0.55 * len(full.to_html())
    assert ModelExplorer(small, TOKENIZER).embedded_dtype == "float32"


@pytest.mark.parametrize("name", list(make_models()))
def test_python_forward_is_the_models_own(models, name):
    model = models[name]
    explorer = ModelExplorer(model, TOKENIZER)
    result = explorer.forward(TYPED)
    tokens = TOKENIZER.encode(TYPED[-MAX_LEN:])
    assert result["tokens"] == tokens.tolist() and result["text"] == TYPED[-MAX_LEN:]
    with torch.no_grad():
        expected = model(tokens[None])
        logits = expected[0] if isinstance(expected, tuple) else expected
    assert np.array_equal(result["logits"], logits[0].numpy())
    weights = np.array(result["attention"])  # (layers, H, L, L)
    heads = model.config.num_heads if isinstance(model, DecoderLM) else 4
    assert weights.shape == (2, heads, MAX_LEN, MAX_LEN)
    sinks = np.array(result["sinks"]) if "sinks" in result else 0  # (layers, H, L): a learned sink's share
    np.testing.assert_allclose(weights.sum(-1) + sinks, 1, atol=1e-5)
    assert np.all(np.triu(weights, k=1) == 0), "a query must not see the future"
    if isinstance(model, LanguageModel):
        with torch.no_grad():
            _, theirs = model(tokens[None], return_weights=True)
        assert all(np.array_equal(weights[layer], w[0].numpy()) for layer, w in enumerate(theirs))


def test_decoder_weights_are_checked_against_the_modules_output(models, monkeypatch):
    explorer = ModelExplorer(models["DecoderLM layer pre relu alibi"], TOKENIZER)
    explorer.forward("the cat")

    def uniform(self, x):  # every key, the future too, weighted alike
        return torch.full((x.size(0), self.config.num_heads, x.size(1), x.size(1)), 1 / x.size(1))

    monkeypatch.setattr("lessons_src.llm.Attention.attention_weights", uniform)  # weights that are not the module's
    with pytest.raises(RuntimeError, match="from the DecoderLM's Attention do not give its output"):
        explorer.forward("the cat")
    mla = ModelExplorer(models["MLADecoderLM"], TOKENIZER)
    mla.forward("the cat")
    monkeypatch.setattr("lessons_src.explorer.apply_rope", lambda x, *args, **kwargs: x)  # the hook's maths, wrong
    with pytest.raises(RuntimeError, match="from the MultiHeadLatentAttention do not give its output"):
        mla.forward("the cat")


def test_sinks_sliding_windows_and_answers_in_the_python_forward(models):
    sinks = ModelExplorer(models["DecoderLM gpt-oss-like"], TOKENIZER).forward(TYPED)
    weights, shares = np.array(sinks["attention"]), np.array(sinks["sinks"])  # (2, H, L, L), (2, H, L)
    np.testing.assert_allclose(weights.sum(-1) + shares, 1, atol=1e-5)
    assert shares.min() > 1e-4 and shares.max() > 0.5, "the scrambled sinks take from a little to most of a row"
    i, j = np.indices((MAX_LEN, MAX_LEN))
    assert np.all(weights[0][:, j <= i - 4] == 0), "layer 1 slides: query i sees keys i - 4 < j <= i only"
    assert np.all(weights[1][:, (j <= i - 4) & (j <= i)] > 0), "layer 2 is global"
    assert "sinks" not in ModelExplorer(models["LanguageModel"], TOKENIZER).forward(TYPED)
    with pytest.raises(ValueError, match="answers must be None or 2 to 31"):
        ModelExplorer(models["LanguageModel"], TOKENIZER, answers=("yes",))
    with pytest.raises(ValueError, match="top_k=5 with 2 answers"):
        ModelExplorer(models["LanguageModel"], TOKENIZER, answers=("no", "yes"), top_k=5)
    answering = ModelExplorer(models["LanguageModel"], TOKENIZER, answers=("no", "yes"))
    assert answering.top_k == 2 and 'class="lsx-continue"' not in answering.to_html()
    probabilities, names = answering._bar_probabilities(np.array([1.0, 2.0, 9.0]), 1.0)
    assert names == ["no", "yes"] and np.allclose(probabilities, torch.tensor([1.0, 2.0]).softmax(0).tolist())


def test_empty_text_gives_empty_arrays_not_an_error(lm):
    result = ModelExplorer(lm, TOKENIZER).forward("!?")
    assert result["tokens"] == [] and result["logits"].shape == (0, TOKENIZER.vocab_size)
    assert len(result["messages"]) == 2


# -- the renderings ---------------------------------------------------------------------------------------------


def test_the_first_head_shown_can_be_chosen(lm):
    html = ModelExplorer(lm, TOKENIZER, layer=1, head=3).to_html()
    assert '<option value="1" selected>2</option>' in html and '<option value="3" selected>3</option>' in html
    box = ModelExplorer(lm, TOKENIZER, layer=1, head=3).widget()
    assert (box.controls["layer"].value, box.controls["head"].value) == (1, 3)


def test_the_page_explains_its_marks_and_its_numbering(models, lm):
    """The bars draw space, newline and tab as marks: the page says which is which (for the characters the
    vocabulary has); the small multiples say how layers and heads are counted; a sliding layer is named so."""
    html = ModelExplorer(lm, TOKENIZER).to_html()
    assert '<p class="lsx-note lsx-symbols">\u2423 space, \u21b5 newline</p>' in html  # no tab in TOKENIZER
    assert "lsx-symbols" not in ModelExplorer(lm.eval(), CharTokenizer("".join(TOKENIZER.chars).replace(" ", "_")
                                                                        .replace("\n", "~"))).to_html()
    assert "rows: layers, counted from 1; columns: heads, counted from 0" in html
    sliding = ModelExplorer(models["DecoderLM sliding_window with layer_types"], TOKENIZER).to_html()
    assert '<option value="0" selected>1 (sliding, window 5)</option><option value="1">2</option>' in sliding
    assert "keys outside its window" in sliding and "keys outside its window" not in html
    mla = ModelExplorer(models["MLADecoderLM"], TOKENIZER).to_html()
    assert "the weights of the plain form" in mla and "the weights of the plain form" not in html


def test_html_is_self_contained(lm):
    html = ModelExplorer(lm, TOKENIZER, id="demo", text="the </script> cat").to_html()
    for forbidden in ("http://", "https://", "<script src", "import(", "fetch(", "XMLHttpRequest", "WebAssembly"):
        assert forbidden not in html, forbidden
    assert html.count("</script>") == 2  # the config and the code; the text is escaped
    assert "window.lessonsModels[cfg.id]" in html and '"id": "demo"' in html
    assert 'aria-label="attention weights"' in html and "<label" in html


def test_a_reference_text_embeds_pytorchs_numbers_for_the_site_tests(lm):
    """tests/test_site.py compares the built page's JavaScript with these numbers, computed by the notebook."""
    import json
    import re

    assert "lsx-reference" not in ModelExplorer(lm, TOKENIZER).to_html()  # none by default
    explorer = ModelExplorer(lm, TOKENIZER, text="the cat", reference_text="the <b>cat</b> & é")
    html = explorer.to_html()
    assert html.count("</script>") == 3  # the config, the reference and the code: the text is escaped
    embedded = json.loads(re.search(r'<script type="application/json" class="lsx-reference">(.*?)</script>',
                                    html).group(1))
    expected = explorer.forward("the <b>cat</b> & é")
    assert embedded["text"] == expected["text"] == "the bcatb  " and embedded["tokens"] == expected["tokens"]
    logits, attention = max_differences(embedded, expected)
    assert logits <= 5e-7 and attention <= 5e-7, (logits, attention)


def test_the_bundle_has_the_widget_and_the_html(lm):
    explorer = ModelExplorer(lm, TOKENIZER, text="the cat")
    bundle = explorer._repr_mimebundle_()
    assert set(bundle) == {"application/vnd.jupyter.widget-view+json", "text/html", "text/plain"}
    assert bundle["text/html"].startswith('<div class="ls-explorer"')


def test_widget_redraws_from_the_python_model(lm):
    explorer = ModelExplorer(lm, TOKENIZER, text="the cat", continue_chars=5)
    box = explorer.widget()
    c = box.controls
    first = c["image"].value
    c["text"].value = "the cat sat"
    assert c["image"].value != first and c["message"].value == ""
    c["head"].value = 2
    c["temperature"].value = 2.0
    c["text"].value = "the cät"
    assert "Skipped 1 character the model does not know: &#x27;ä&#x27;." in c["message"].value
    c["text"].value = ""
    assert "Type some text" in c["message"].value
    c["text"].value = "the cat"
    c["button"].click()
    assert len(c["text"].value) == len("the cat") + 5 and c["text"].value.startswith("the cat")
    assert explorer.widget() is box


# -- in a browser ------------------------------------------------------------------------------------------------


def write_page(path, explorers, width_note=""):
    """A page shaped like the site's (a main column) holding the explorers' HTML."""
    body = "".join(f"<section><h2>{' '.join(map(str, name)) if isinstance(name, tuple) else name}</h2>{e.to_html()}"
                   "</section>" for name, e in explorers.items())
    path.write_text(f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>explorers</title>'
                    f'<meta name="viewport" content="width=device-width, initial-scale=1"></head>'
                    f'<body style="margin:0"><main style="max-width:60rem;margin:0 auto;padding:0 1rem">'
                    f"{width_note}{body}</main></body></html>")
    return path


SEEDS = (0, 1)


@pytest.fixture(scope="module")
def explorers(models):
    """Every kind and switch set at two seeds (the key: (name, seed)), a float16 export, and a model that answers."""
    made = {}
    for seed in SEEDS:
        for i, (name, model) in enumerate((models if seed == 0 else make_models(seed)).items()):
            made[name, seed] = ModelExplorer(model, TOKENIZER, id=f"s{seed}m{i}", text="the ca")
    made["LanguageModel float16", 0] = ModelExplorer(models["LanguageModel"], TOKENIZER, id="mhalf", text="the ca",
                                                     precision="float16")
    made["answers", 0] = ModelExplorer(models["DecoderLM sinks"], TOKENIZER, id="manswers", text="the ca",
                                       answers=("no trigger yet", "trigger seen"))
    return made


@pytest.fixture(scope="module")
def page_file(explorers, tmp_path_factory):
    return write_page(tmp_path_factory.mktemp("explorer") / "explorers.html", explorers)


def open_page(browser, page_file, **context_args):
    """The page, offline; every console error, page error and request is collected in `problems`."""
    context = browser.new_context(offline=True, **context_args)
    page = context.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: problems.append(f"request: {r.url}") if not r.url.startswith(("file:", "data:"))
            else None)
    page.goto(page_file.as_uri(), wait_until="load")
    return context, page, problems


@pytest.fixture(scope="module")
def loaded(browser, page_file):
    context, page, problems = open_page(browser, page_file, viewport={"width": 1280, "height": 900})
    yield page, problems
    context.close()


JS_FORWARD = """([id, text]) => {
    const r = window.lessonsModels[id].forward(text);
    return {tokens: Array.from(r.tokens), text: r.text, messages: r.messages,
            logits: r.logits.map(row => Array.from(row)),
            attention: r.attention.map(layer => layer.map(head => head.map(row => Array.from(row)))),
            sinks: r.sinks || null};
}"""


def max_sink_difference(ours: dict, theirs: dict) -> float:
    """Largest difference of a learned sink's share (0 for models without sinks, which must give none)."""
    assert (ours["sinks"] is None) == ("sinks" not in theirs)
    if ours["sinks"] is None:
        return 0.0
    return float(np.abs(np.asarray(ours["sinks"], dtype=np.float64) - np.array(theirs["sinks"])).max(initial=0.0))


@pytest.mark.site
@pytest.mark.parametrize("name, seed", [*((n, s) for s in SEEDS for n in make_models()), ("LanguageModel float16", 0)])
def test_js_forward_equals_pytorch_on_typed_text(loaded, explorers, name, seed):
    page, problems = loaded
    explorer = explorers[name, seed]
    box = page.locator(f"#lsx-{explorer.id} textarea")
    box.click()
    page.keyboard.press("End")
    page.keyboard.type(TYPED[len("the ca"):])  # the reader types the rest: longer than max_len
    typed = box.input_value()
    assert typed == "the ca" + TYPED[len("the ca"):]
    ours = page.evaluate(JS_FORWARD, [explorer.id, typed])
    model = explorer.rounded_model() if explorer.embedded_dtype == "float16" else None
    theirs = explorer.forward(typed, model)
    assert ours["tokens"] == theirs["tokens"] and ours["text"] == theirs["text"]
    assert ours["messages"] == theirs["messages"]  # the same words as the Python side
    logits, attention = max_differences(ours, theirs)
    sinks = max_sink_difference(ours, theirs)
    print(f"{name}, seed {seed}: JavaScript vs PyTorch, largest difference: logits {logits:.1e}, attention "
          f"{attention:.1e}, sinks {sinks:.1e}")
    assert logits < 1e-4 and attention < 1e-4 and sinks < 1e-4, (
        f"{name}: logits {logits:.2e}, attention {attention:.2e}, sinks {sinks:.2e}")
    for text in ("t", "the cat sat"):  # short texts too, and the one-character edge
        short_ours, short_theirs = page.evaluate(JS_FORWARD, [explorer.id, text]), explorer.forward(text, model)
        logits, attention = max_differences(short_ours, short_theirs)
        sinks = max_sink_difference(short_ours, short_theirs)
        assert max(logits, attention, sinks) < 1e-4, f"{name} on {text!r}: {logits:.2e}, {attention:.2e}, {sinks:.2e}"
    assert problems == []


def _figure_state(page, uid):
    return page.evaluate("""uid => {
        const root = document.getElementById(uid);
        return {big: root.querySelector('canvas.lsx-big').toDataURL(),
                small: [...root.querySelectorAll('.lsx-grid canvas')].map(c => c.toDataURL()).join('|'),
                bars: root.querySelector('.lsx-bar-list').innerText, redraws: root.dataset.redraws,
                message: root.querySelector('.lsx-msg').textContent, state: root.dataset.state};
    }""", uid)


@pytest.mark.site
def test_typing_changes_the_figure_and_the_controls_work(loaded, explorers):
    page, problems = loaded
    uid = f"lsx-{explorers['LanguageModel', 0].id}"
    box = page.locator(f"#{uid} textarea")
    box.click()
    page.keyboard.press("Control+End")
    before = _figure_state(page, uid)
    page.keyboard.type("t")
    after = _figure_state(page, uid)
    assert after["big"] != before["big"] and after["small"] != before["small"] and after["bars"] != before["bars"]
    assert int(after["redraws"]) == int(before["redraws"]) + 1
    top = explorers["LanguageModel", 0].forward(box.input_value())
    likeliest = TOKENIZER.chars[int(np.argmax(top["logits"][-1]))]
    assert after["bars"].split("\n")[0].strip().startswith({" ": "\u2423", "\n": "\u21b5"}.get(likeliest, likeliest))
    # the temperature slider changes the bars, the head selector and the small multiples the large heatmap
    slider = page.locator(f"#{uid} input.lsx-temp")
    slider.focus()
    page.keyboard.press("ArrowRight")
    assert _figure_state(page, uid)["bars"] != after["bars"]
    page.locator(f"#{uid} select.lsx-head").select_option("3")
    assert _figure_state(page, uid)["big"] != after["big"]
    page.locator(f"#{uid} .lsx-grid button").nth(4).click()  # layer 2, head 0
    assert page.locator(f"#{uid} select.lsx-layer").input_value() == "1"
    assert page.locator(f"#{uid} .lsx-grid button").nth(4).get_attribute("aria-pressed") == "true"
    text = box.input_value()
    page.locator(f"#{uid} button.lsx-continue").click()
    continued = box.input_value()
    assert continued.startswith(text) and len(continued) == len(text) + 40
    assert box.evaluate("b => b.scrollTop + b.clientHeight >= b.scrollHeight - 1"), "the sampled text is out of view"
    heads = page.evaluate(f"[...document.querySelectorAll('#{uid} .lsx-col-label')].map(e => e.textContent)")
    assert heads == ["head 0", "head 1", "head 2", "head 3"], heads
    grouped = explorers["DecoderLM layer pre gelu learned gqa2 nobias", 0].id
    heads = page.evaluate(f"[...document.querySelectorAll('#lsx-{grouped} .lsx-col-label')].map(e => e.textContent)")
    assert heads == ["head 0 (kv 0)", "head 1 (kv 0)", "head 2 (kv 1)", "head 3 (kv 1)"], heads
    assert set(continued) <= set(TOKENIZER.chars)
    assert problems == []


@pytest.mark.site
def test_bad_input_shows_a_message_never_an_error(loaded, explorers):
    page, problems = loaded
    explorer = explorers["DecoderLM rms pre swiglu rope interleaved gqa1 nobias", 0]
    uid = f"lsx-{explorer.id}"
    box = page.locator(f"#{uid} textarea")
    box.click()
    page.keyboard.type("é€!")  # out of the vocabulary, typed
    state = _figure_state(page, uid)
    assert state["message"] == " ".join(explorer.prepare(box.input_value()).messages)
    assert "Skipped 3 characters the model does not know: 'é', '€', '!'." in state["message"]
    assert state["state"] == "ok"
    box.fill("")  # empty
    state = _figure_state(page, uid)
    assert state["message"] == "Type some text: the model predicts the character that follows it."
    assert state["state"] == "empty" and state["bars"].strip() == "\u2014"
    page.locator(f"#{uid} button.lsx-continue").click()  # continue with nothing to continue
    assert "Type some text first" in _figure_state(page, uid)["message"]
    box.fill("!!!")  # nothing the model knows
    assert _figure_state(page, uid)["state"] == "empty"
    box.fill(TYPED * 2)  # longer than max_len
    assert (f"it sees the last {MAX_LEN} of the {2 * len(TYPED)} characters it knows." in
            _figure_state(page, uid)["message"])
    page.evaluate("""uid => { const box = document.querySelector('#' + uid + ' textarea');
        box.value = 'abc '.repeat(500000); box.dispatchEvent(new Event('input')); }""", uid)  # a pasted 2 MB
    state = _figure_state(page, uid)
    assert state["message"] == ("Your text has 2,000,000 characters: the model reads its end, so only the last 4,096 "
                                f"are looked at. The model reads at most {MAX_LEN} characters (its max_len): it sees "
                                f"the last {MAX_LEN} of the characters it knows among them.")
    assert len(box.input_value()) == 2_000_000 and state["state"] == "ok", "the reader's text is never cut"
    box.press("End")
    page.keyboard.type("x")  # typing goes on at the end of the whole text
    assert _figure_state(page, uid)["message"].startswith("Your text has 2,000,001 characters")
    assert len(box.input_value()) == 2_000_001 and box.input_value().endswith("abc x")
    assert problems == []


@pytest.mark.site
@pytest.mark.parametrize("width", [1280, 390])
def test_the_large_map_shows_its_newest_column(browser, page_file, explorers, width):
    """The map of a long text is wider than its box on a phone: the box keeps the newest keys (the right edge,
    where the last query's weights are) in view as the reader types, rather than the first ones."""
    context, page, problems = open_page(browser, page_file, viewport={"width": width, "height": 900})
    try:
        uid = f"lsx-{explorers['LanguageModel', 0].id}"
        box = page.locator(f"#{uid} textarea")
        box.fill("")
        box.click()
        page.keyboard.type(TYPED[:MAX_LEN])
        newest = """uid => { const s = document.querySelector('#' + uid + ' .lsx-big').parentNode;
            return {left: s.scrollLeft, width: s.clientWidth, full: s.scrollWidth}; }"""
        shown = page.evaluate(newest, uid)
        assert shown["left"] + shown["width"] >= shown["full"] - 1, f"the newest column is out of view: {shown}"
        for size in (width + 500, width):  # a resized window, a phone turned and back: still the newest column
            page.set_viewport_size({"width": size, "height": 900})
            page.wait_for_timeout(100)
            shown = page.evaluate(newest, uid)
            assert shown["left"] + shown["width"] >= shown["full"] - 1, f"after a resize to {size}: {shown}"
        # the queries are labelled on both sides of the map, so they stay in view with its right edge
        big = page.evaluate("""uid => { const c = document.querySelector('#' + uid + ' .lsx-big');
            return {width: parseFloat(c.style.width), cell: +c.dataset.cell, margin: +c.dataset.margin}; }""", uid)
        assert big["width"] == MAX_LEN * big["cell"] + 2 * big["margin"], big
        assert problems == []
    finally:
        context.close()


@pytest.mark.site
def test_a_model_that_answers_shows_its_answers_and_a_sink_column(loaded, explorers):
    page, problems = loaded
    explorer = explorers["answers", 0]
    uid = f"lsx-{explorer.id}"
    bars = page.evaluate(f"[...document.querySelectorAll('#{uid} .lsx-bar-list li')].map(li => li.ariaLabel)")
    p = torch.tensor(explorer.forward("the ca")["logits"][-1][:2]).double().softmax(0)
    assert bars == [f"no trigger yet {100 * p[0]:.1f}%", f"trigger seen {100 * p[1]:.1f}%"], bars
    assert page.locator(f"#{uid} button.lsx-continue").count() == 0
    assert "learned sink" in page.locator(f"#{uid} .lsx-heat-title").inner_text()
    label = page.locator(f"#{uid} canvas.lsx-big").get_attribute("aria-label")
    share = explorer.forward("the ca")["sinks"][0][0][-1]
    assert f"gives the learned sink {share:.2f}" in label, label
    assert problems == []


@pytest.mark.site
def test_a_phone_never_scrolls_the_page_sideways(browser, page_file):
    context, page, problems = open_page(browser, page_file, viewport={"width": 390, "height": 844},
                                        device_scale_factor=2, is_mobile=True)
    try:
        for uid in page.evaluate("[...document.querySelectorAll('.ls-explorer')].map(e => e.id)")[:2]:
            page.locator(f"#{uid} textarea").fill(TYPED)  # the largest heatmap: max_len characters
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a 390 px phone"
        widest = page.evaluate("Math.max(...[...document.querySelectorAll('.lsx-scroll')].map(e => e.scrollWidth))")
        assert widest > 390, "the large heatmap should be wider than the phone, scrolling inside its own box"
        from axe import audit

        violations = audit(page, ".ls-explorer")  # a box that scrolls must scroll with the keyboard too
        assert violations == [], "\n".join(violations)
        assert problems == []
    finally:
        context.close()


@pytest.mark.site
def test_every_control_has_an_accessible_name(loaded):
    page, _ = loaded
    unnamed = page.evaluate("""() => [...document.querySelectorAll(
            '.ls-explorer textarea, .ls-explorer input, .ls-explorer select, .ls-explorer button, .ls-explorer canvas')]
        .filter(e => !(e.closest('[aria-hidden=true]')))
        .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())
        .map(e => e.outerHTML.slice(0, 80))""")
    assert unnamed == []


@pytest.mark.site
def test_the_explorer_passes_the_accessibility_audit(loaded):
    from axe import audit

    page, problems = loaded
    violations = audit(page, ".ls-explorer")
    assert violations == [], "\n".join(violations)
