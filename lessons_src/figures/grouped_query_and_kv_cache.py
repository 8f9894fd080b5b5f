"""Chapter "Grouped-query attention and the KV cache": which KV head each query head reads."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import seaborn as sns
import torch
from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["assignment", "assignment_picture", "sharing_title", "sharing_explorer"]

ALT = (
    "Two panels. Left: an 8 by 8 grid, one row per query head and one column per KV head; each "
    "row has one coloured square at the KV head that query head reads, so consecutive query heads "
    "share a colour, and columns for KV heads the layer does not have are grey. Right: bars of the "
    "KV cache size in GiB for 1, 2, 4 and 8 KV heads at the chosen context length, the chosen "
    "number highlighted."
)
ABSENT, UNUSED = np.array([0.85, 0.85, 0.85]), np.array([1.0, 1.0, 1.0])


def assignment(num_heads: int, num_kv_heads: int) -> Tensor:
    """(H, H_kv) matrix: 1 where query head h reads KV head h // (H / H_kv), else 0."""
    group = num_heads // num_kv_heads
    return torch.eye(num_kv_heads).repeat_interleave(group, dim=0)  # (H, H_kv)


def assignment_picture(num_kv_heads: int, num_heads: int = 8) -> np.ndarray:
    """RGB (H, H, 3): KV head g's colour where query head h reads it, white in the other cells of
    the layer's H_kv columns, grey in the columns of KV heads the layer does not have."""
    palette = np.array(sns.color_palette("colorblind", num_heads))  # one colour per KV head
    picture = np.tile(ABSENT, (num_heads, num_heads, 1))  # (H, H, 3)
    picture[:, :num_kv_heads] = UNUSED
    rows, cols = (i.numpy() for i in assignment(num_heads, num_kv_heads).nonzero(as_tuple=True))
    picture[rows, cols] = palette[cols]
    return picture


def sharing_title(num_kv_heads: int, num_heads: int = 8) -> str:
    """The grid's title: how many query heads share each KV head."""
    plural = "s" if num_kv_heads > 1 else ""
    return f"{num_heads} query heads, {num_kv_heads} KV head{plural}: groups of {num_heads // num_kv_heads}"


def sharing_explorer(
    cache_gib: Mapping[tuple[int, int], float], start_num_kv_heads: int = 2, start_seq_len: int = 4096
) -> InteractiveFigure:
    """Sliders for H_kv and the context length over ``cache_gib[H_kv, tokens]``, for 8 query heads."""
    num_heads = 8
    kv_choices = sorted({h for h, _ in cache_gib})
    contexts = sorted({n for _, n in cache_gib})
    fig = new_figure(8, 3.5)
    ax_heads, ax_cache = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    heads_image = ax_heads.imshow(assignment_picture(start_num_kv_heads, num_heads), interpolation="nearest")
    ax_heads.set_xticks(range(num_heads))
    ax_heads.set_yticks(range(num_heads))
    edges = np.arange(-0.5, num_heads + 0.5)  # cell borders: two line collections
    borders = [ax_heads.hlines(edges, -0.5, num_heads - 0.5, color="0.55", linewidth=1),
               ax_heads.vlines(edges, -0.5, num_heads - 0.5, color="0.55", linewidth=1)]
    ax_heads.set(xlabel="KV head", ylabel="query head")
    heads_title = ax_heads.set_title("", fontsize=10)

    names = {1: "MQA", num_heads: "MHA"}
    bar_names = [f"{names.get(h, 'GQA')}\n{h}" for h in kv_choices]
    cache_bars = ax_cache.bar(bar_names, [1.0] * len(kv_choices), color=COLORS[0])
    bar_labels = [ax_cache.text(i, 0, "", ha="center", va="bottom", fontsize=9) for i in range(len(kv_choices))]
    ax_cache.set(ylim=(0, max(cache_gib.values()) * 1.15), ylabel="GiB", xlabel="KV heads")
    despine(ax_cache)
    cache_title = ax_cache.set_title("", fontsize=10)

    def update(num_kv_heads: int, seq_len: int) -> None:
        heads_image.set_data(assignment_picture(num_kv_heads, num_heads))
        heads_title.set_text(sharing_title(num_kv_heads, num_heads))
        for h_kv, bar, label in zip(kv_choices, cache_bars, bar_labels):
            gib = cache_gib[h_kv, seq_len]
            bar.set_height(gib)
            bar.set_alpha(1.0 if h_kv == num_kv_heads else 0.3)
            label.set(y=gib, text=f"{gib:.3g}")
        cache_title.set_text(f"KV cache, {seq_len} tokens: {cache_gib[num_kv_heads, seq_len]:.3g} GiB")

    update(start_num_kv_heads, start_seq_len)  # fill the titles in before laying out the figure
    fig.tight_layout()

    return InteractiveFigure(
        fig,
        update,
        [
            Slider("num_kv_heads", kv_choices, label="KV heads", initial=start_num_kv_heads),
            Slider("seq_len", contexts, label="context length", initial=start_seq_len),
        ],
        # What update changes (the cell borders too: they are drawn over the grid); the rest is drawn once.
        animated=[heads_image, *borders, heads_title, *cache_bars, *bar_labels, cache_title],
        alt=ALT,
        dpi=DPI,
    )
