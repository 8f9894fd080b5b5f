"""Every chapter's slider figure built from small inputs, and a small model explorer of each kind: used by
tests/test_figures.py (each figure drawn and moved in-process) and by the widget probe notebook
(tests/probe_notebook.py), which inlines this file's source into one notebook so that every slider figure
runs in each ipywidgets major and in JupyterLab without executing the chapters.

Only the installed package, torch and the standard library are imported here: the probe runs this file in
a Colab-like venv where nothing from the checkout is importable.
"""

import math

import torch

from lessons_src import (
    CharTokenizer,
    DecoderConfig,
    DecoderLM,
    LanguageModel,
    MLAConfig,
    MLADecoderLM,
    ModelExplorer,
    antidiagonal_mass,
    apply_rope,
    causal_mask,
    kv_cache_bytes,
    padding_mask,
    rope_frequencies,
    scaled_dot_product_attention,
    sinusoidal_positional_encoding,
    sliding_window_mask,
)
from lessons_src.figures import (
    alibi,
    attention_from_scratch,
    decoder_and_cross_attention,
    efficient_attention,
    encoder_block,
    grouped_query_and_kv_cache,
    induction_heads,
    language_model,
    latent_attention,
    layer_norm_placement,
    masking,
    modern_block,
    multi_head_attention,
    rotary_embeddings,
    scaling,
    tiled_attention,
    todays_attention,
    training_attention,
)


def _weights(*shape: int, seed: int = 0) -> torch.Tensor:
    """Random attention weights: rows that sum to 1."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).mul(2).softmax(dim=-1)


# Small inputs of the chapters' kinds, made with the package, for each figure function.
KEY_ANGLES = torch.tensor([180.0, 67.5, 22.5, 270.0])
KEYS_2D = 2.0 * torch.stack([torch.cos(torch.deg2rad(KEY_ANGLES)), torch.sin(torch.deg2rad(KEY_ANGLES))], dim=-1)
VALUES_2D = torch.tensor([[-1.0, 1.0], [1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]])


def _steer_query():
    return attention_from_scratch.steer_query(["The", "cat", "sat", "down"], KEYS_2D, VALUES_2D,
                                              [22.5 * i for i in range(0, 16, 4)], [0.5, 1.0, 2.5])


def _score_explorer():
    generator = torch.Generator().manual_seed(0)
    edges = torch.linspace(-96, 96, 65)
    frames = {}
    for d_k in (4, 64):
        query, key = torch.randn(6, d_k, generator=generator), torch.randn(12, d_k, generator=generator)
        for scaling_on in ("off", "on"):
            scores = query @ key.T / (math.sqrt(d_k) if scaling_on == "on" else 1.0)  # (6, 12)
            counts = torch.histogram(scores.flatten().clamp(-96, 96), bins=edges).hist
            weights = scores.softmax(dim=-1)
            frames[d_k, scaling_on] = {"histogram": counts / counts.sum(), "weights": weights,
                                       "std": scores.std().item(), "largest": weights.amax(-1).mean().item()}
    return scaling.score_explorer(frames, edges, [4, 64])


def _mask_and_weights(seq_len, padding, causal_on):
    tokens = [f"w{i}" for i in range(seq_len - padding)] + ["<pad>"] * padding
    mask = padding_mask([seq_len - padding], seq_len)[0][None, :].expand(seq_len, seq_len)  # (L, L)
    if causal_on:
        mask = mask & causal_mask(seq_len)
    x = torch.randn(seq_len, 8, generator=torch.Generator().manual_seed(seq_len))  # (L, D)
    return tokens, mask, scaled_dot_product_attention(x, x, x, mask)[1]


def _mask_explorer():
    return masking.mask_explorer(_mask_and_weights, [4, 6], [0, 2])


def _head_explorer():
    maps = {h: _weights(h, 8, 8, seed=h) for h in (1, 2, 4, 8)}
    return multi_head_attention.head_explorer(maps, "the cat sat on the mat and slept".split())


def _emergence_explorer():
    maps = _weights(60, 10, 10)
    losses = torch.logspace(0, -2, 60)

    def at_step(step):
        return maps[step], antidiagonal_mass(maps[step]), losses[step].item()

    return training_attention.emergence_explorer(at_step, losses, [0, 10, 20, 59])


def _table_explorer():
    return encoder_block.table_explorer(sinusoidal_positional_encoding(64, 64), [0, 20, 63], [0, 6, 62])


def _depth_explorer():
    norms = {(norm_first, d): torch.linspace(0.2, 0.6, d).flip(0) if norm_first else torch.linspace(0.2, 0.6, d)
             for norm_first in (False, True) for d in (2, 4, 8)}
    return layer_norm_placement.depth_explorer(norms)


def _cross_attention_explorer():
    snapshots = {s: _weights(2, 8, 8, seed=s) for s in (0, 100, 300)}
    masses = {layer: [antidiagonal_mass(snapshots[s][layer - 1]) for s in (0, 100, 300)] for layer in (1, 2)}
    return decoder_and_cross_attention.cross_attention_explorer(snapshots, masses)


def _window_explorer():
    pictures = {(n, w): sliding_window_mask(n, w).float().view(32, n // 32, 32, n // 32).mean(dim=(1, 3))
                for n in (256, 512) for w in (16, 32)}
    memory = {(v, n, w): (1 + i) * n / 64 for i, v in enumerate(efficient_attention.VARIANTS)
              for n, w in pictures}
    times = {(v, n, w): (4 - i) * n / 100 * (1 + w / 64) for i, v in enumerate(efficient_attention.VARIANTS)
             for n, w in pictures}
    return efficient_attention.window_explorer(pictures, memory, times)


def _sharing_explorer():
    cache = {(h, n): kv_cache_bytes(1, n, 32, h, 128, torch.float16) / 2**30 for h in (1, 2, 4, 8) for n in (1024, 4096)}
    return grouped_query_and_kv_cache.sharing_explorer(cache)


Q_SMALL = torch.tensor([1.0, 0.2, 0.6, 0.8, 0.5, -0.5, 0.3, 0.9])
K_SMALL = torch.tensor([0.8, -0.6, 0.9, 0.3, -0.2, 0.7, 0.6, 0.4])


def _rope_explorer():
    return rotary_embeddings.rope_explorer(Q_SMALL, K_SMALL, [16, 20, 24], [0, 2, 8])


def _tile_explorer():
    g = torch.Generator().manual_seed(0)
    return tiled_attention.tile_explorer(torch.randn(3, 10, generator=g) * 2, torch.randn(10, 3, generator=g), 4)


def _bias_explorer():
    return alibi.bias_explorer(4, (8, 12))


def _temperature_explorer():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, 0.0])
    samples = {(t, k): f"sample at {t} {k}" for t in (0.5, 1.0) for k in (None, 2)}
    return language_model.temperature_explorer(list("ab cd"), logits, samples, "pr", shown=4)


def _induction_explorer():
    g = torch.Generator().manual_seed(0)
    weights = {s: _weights(2, 8, 8, seed=s) for s in (0, 10, 20)}
    scores = {s: torch.rand(2, generator=g).tolist() for s in (0, 10, 20)}
    return induction_heads.induction_explorer(weights, scores, {0: 3.0, 10: 2.0, 20: 0.5}, 4)


def _ladder_explorer():
    names = ["2017", "+ pre-LN", "+ RoPE"]
    curves = {n: [(s, 3.0 - 0.1 * s - 0.05 * i) for s in range(5)] for i, n in enumerate(names)}
    return modern_block.ladder_explorer(names, curves, {"2017": 2.3, "+ pre-LN": 2.31, "+ RoPE": 2.1})


LATENT_CONFIG = dict(num_layers=2, num_heads=8, head_dim=16, num_kv_heads=2, qk_rope_head_dim=8, bytes_per_element=2)


def _cache_explorer():
    return latent_attention.cache_explorer(LATENT_CONFIG, [8, 16, 32], [1024, 4096])


def _shift_scores(shifts, seq_len=5, d_model=8):
    """One head's (L, L) scores per shift: rotary inside attention, and sinusoidal added to the input."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(seq_len, d_model, generator=g)  # (L, D)
    w_q, w_k = torch.randn(d_model, d_model, generator=g), torch.randn(d_model, d_model, generator=g)
    cos, sin = rope_frequencies(d_model, max_len=max(shifts) + seq_len)
    table = sinusoidal_positional_encoding(max(shifts) + seq_len, d_model)
    rotary = {s: apply_rope(x @ w_q, cos, sin, s) @ apply_rope(x @ w_k, cos, sin, s).T for s in shifts}
    added = {s: ((x + table[s:s + seq_len]) @ w_q) @ ((x + table[s:s + seq_len]) @ w_k).T for s in shifts}
    return rotary, added


def _shift_explorer():
    return modern_block.shift_explorer([0, 3, 10], *_shift_scores([0, 3, 10]))


def _cap_and_sink_explorer():
    # As many keys as chapter 18's query sees (17: two-digit labels) and scores as large (tens).
    scores = 60.0 * torch.sin(1.7 * torch.arange(17.0))
    return todays_attention.cap_and_sink_explorer(scores, [math.inf, 5.0, 2.0], [-math.inf, 0.0, 3.0])


# Every slider figure, by ``<module>.<function>``: (its builder from small inputs above, the name of
# its alt text constant in the module). A chapter's figure module names the chapter after which it
# is called (CONTRIBUTING.md, "Add a chapter"); which chapters there are is read from _toc.yml, and
# test_every_slider_function_has_a_builder_here says which entry a new figure function lacks.
FIGURES = {
    "attention_from_scratch.steer_query": (_steer_query, "ALT"),
    "scaling.score_explorer": (_score_explorer, "ALT"),
    "masking.mask_explorer": (_mask_explorer, "ALT"),
    "multi_head_attention.head_explorer": (_head_explorer, "ALT"),
    "training_attention.emergence_explorer": (_emergence_explorer, "ALT"),
    "encoder_block.table_explorer": (_table_explorer, "ALT"),
    "layer_norm_placement.depth_explorer": (_depth_explorer, "ALT"),
    "decoder_and_cross_attention.cross_attention_explorer": (_cross_attention_explorer, "ALT"),
    "efficient_attention.window_explorer": (_window_explorer, "ALT"),
    "grouped_query_and_kv_cache.sharing_explorer": (_sharing_explorer, "ALT"),
    "rotary_embeddings.rope_explorer": (_rope_explorer, "ALT"),
    "tiled_attention.tile_explorer": (_tile_explorer, "ALT"),
    "alibi.bias_explorer": (_bias_explorer, "ALT"),
    "language_model.temperature_explorer": (_temperature_explorer, "ALT"),
    "induction_heads.induction_explorer": (_induction_explorer, "ALT"),
    "modern_block.ladder_explorer": (_ladder_explorer, "ALT"),
    "modern_block.shift_explorer": (_shift_explorer, "SHIFT_ALT"),
    "latent_attention.cache_explorer": (_cache_explorer, "ALT"),
    "todays_attention.cap_and_sink_explorer": (_cap_and_sink_explorer, "ALT"),
}


# A ModelExplorer of each kind a chapter shows (chapter 14's LanguageModel, chapter 15's attention-only one,
# chapter 16's Llama-style DecoderLM), small and untrained: the live view (text box, temperature slider,
# image) is the same whatever the weights.
EXPLORER_CHARS = "abcdefghijklmnopqrstuvwxyz ,.\n"


def _explorer(kind: str) -> ModelExplorer:
    torch.manual_seed(0)
    tokenizer = CharTokenizer(EXPLORER_CHARS)
    V = tokenizer.vocab_size
    llama = dict(vocab_size=V, d_model=32, num_heads=4, num_layers=2, max_len=24, norm="rms", placement="pre",
                 ffn="swiglu", positions="rope", num_kv_heads=2, bias=False)
    answers = None
    if kind == "DecoderLM":
        model = DecoderLM(DecoderConfig(**llama))
    elif kind == "DecoderLM today's switches, answers":  # chapter 18's kind of model: sinks, a sliding layer, a gate
        model = DecoderLM(DecoderConfig(**llama, qk_norm=True, sinks=True, attn_output_gate=True, sliding_window=4,
                                        layer_types=("sliding_attention", "full_attention")))
        answers = ("no", "yes")
    elif kind == "MLADecoderLM":
        model = MLADecoderLM(MLAConfig(vocab_size=V, d_model=32, num_heads=4, num_layers=2, max_len=24, kv_lora_rank=12,
                                       qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8))
    else:
        model = LanguageModel(V, d_model=32, num_heads=4, num_layers=2, max_len=24,
                              attention_only=kind == "LanguageModel attention-only")
    return ModelExplorer(model.eval(), tokenizer, text="the cat sat", answers=answers,
                         id="".join(c for c in kind.replace(" ", "-").lower() if c.isalnum() or c == "-"))


EXPLORERS = {kind: (lambda kind=kind: _explorer(kind))
             for kind in ("LanguageModel", "LanguageModel attention-only", "DecoderLM", "MLADecoderLM",
                          "DecoderLM today's switches, answers")}
