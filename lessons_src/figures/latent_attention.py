"""Chapter "Multi-head latent attention": the cache of MHA, GQA, MQA and MLA by latent width and context."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lessons_src.mla import mla_cache_elements
from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["KINDS", "cache_gib", "cache_title", "cache_explorer", "ALT"]

ALT = (
    "Bars of the KV cache in GiB, on a logarithmic axis, for one sequence of the chosen number of tokens in "
    "a model with the chosen configuration: multi-head attention (a key and a value per head), grouped-query "
    "attention, multi-query attention (one key and one value head) and multi-head latent attention (a latent "
    "of kv_lora_rank numbers plus one rotary key per token). A slider sets kv_lora_rank, the latent's width, "
    "which changes only the MLA bar; another sets the context length, which scales every bar. The title gives "
    "MLA's cache as a fraction of MHA's and of GQA's."
)
#: The four kinds of attention, in the order of the bars.
KINDS = ("MHA", "GQA", "MQA", "MLA")


def cache_gib(kind: str, kv_lora_rank: int, seq_len: int, config: Mapping[str, int]) -> float:
    """GiB one sequence of ``seq_len`` tokens caches, all layers: elements per token and layer
    (:func:`lessons_src.mla_cache_elements`) x layers x tokens x bytes per element.

    ``config``: ``num_layers``, ``num_heads``, ``head_dim``, ``num_kv_heads`` (for GQA),
    ``qk_rope_head_dim`` (for MLA) and ``bytes_per_element``.
    """
    elements = mla_cache_elements(kind.lower(), num_heads=config["num_heads"], head_dim=config["head_dim"],
                                  num_kv_heads=config["num_kv_heads"], kv_lora_rank=kv_lora_rank,
                                  qk_rope_head_dim=config["qk_rope_head_dim"])
    return elements * config["num_layers"] * seq_len * config["bytes_per_element"] / 2**30


def cache_title(kv_lora_rank: int, seq_len: int, config: Mapping[str, int]) -> str:
    """The title: MLA's cache against MHA's and GQA's, in words."""
    mla = cache_gib("MLA", kv_lora_rank, seq_len, config)
    return (f"d_c = {kv_lora_rank}, {seq_len:,} tokens: MLA {mla:.3g} GiB, "
            f"1/{cache_gib('MHA', kv_lora_rank, seq_len, config) / mla:.0f} of MHA, "
            f"1/{cache_gib('GQA', kv_lora_rank, seq_len, config) / mla:.1f} of GQA")


def cache_explorer(config: Mapping[str, int], ranks: Sequence[int], seq_lens: Sequence[int],
                   start_rank: int | None = None, start_seq_len: int | None = None) -> InteractiveFigure:
    """Sliders for kv_lora_rank and the context length over the four caches of ``config`` (see :func:`cache_gib`)."""
    start_rank = ranks[len(ranks) // 2] if start_rank is None else start_rank
    start_seq_len = seq_lens[len(seq_lens) // 2] if start_seq_len is None else start_seq_len
    every = [cache_gib(k, r, n, config) for k in KINDS for r in ranks for n in seq_lens]
    fig = new_figure(8, 3.6)
    ax = fig.add_subplot()
    bars = ax.bar(KINDS, [1.0] * len(KINDS), color=[COLORS[i] for i in range(len(KINDS))])
    labels = [ax.text(i, 1.0, "", ha="center", va="bottom", fontsize=9) for i in range(len(KINDS))]
    ax.set_yscale("log")
    ax.set(ylim=(min(every) / 2, max(every) * 4), ylabel="KV cache, GiB (log scale)",
           xlabel=f"{config['num_heads']} query heads, {config['num_kv_heads']} KV heads for GQA, "
                  f"{config['num_layers']} layers")
    despine(ax)
    title = ax.set_title("", fontsize=10)

    def update(kv_lora_rank: int, seq_len: int) -> None:
        for kind, bar, label in zip(KINDS, bars, labels):
            gib = cache_gib(kind, kv_lora_rank, seq_len, config)
            bar.set_height(gib)
            label.set(y=gib * 1.1, text=f"{gib:.3g}")
        title.set_text(cache_title(kv_lora_rank, seq_len, config))

    update(start_rank, start_seq_len)
    fig.tight_layout()
    return InteractiveFigure(
        fig, update,
        [Slider("kv_lora_rank", list(ranks), label="d_c (kv_lora_rank)", initial=start_rank),
         Slider("seq_len", list(seq_lens), label="context length", initial=start_seq_len)],
        animated=[*bars, *labels, title], alt=ALT, dpi=DPI,
    )
