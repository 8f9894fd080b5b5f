"""Chapter "Multi-head attention": one layer cut into 1, 2, 4 or 8 heads, one head at a time."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["entropy", "head_entropies", "head_titles", "head_explorer"]

ALT = (
    "Three panels for the sentence 'the cat sat on the mat and slept'. Left: the attention map of "
    "the chosen head (queries as rows, keys as columns, brighter is more weight), or a grey square "
    "saying the head does not exist for this number of heads. Middle: the average map of all heads. "
    "Right: bars of each head's mean entropy, the chosen head highlighted, with a dashed line at the "
    "uniform level and a solid line at the average map's entropy."
)


def entropy(weights: Tensor) -> Tensor:
    """Entropy in nats of attention weights (..., Lk) -> (...): 0 = one key, log(Lk) = uniform."""
    return -(weights * weights.clamp_min(1e-12).log()).sum(dim=-1)


def head_entropies(maps: Tensor) -> tuple[Tensor, float]:
    """Each head's mean entropy over its queries (H,), and that of the heads' average map.

    ``maps`` is one layer's weights (H, Lq, Lk).
    """
    return entropy(maps).mean(dim=-1), entropy(maps.mean(dim=0)).mean().item()


def head_titles(num_heads: int, head: int) -> tuple[str, str, str]:
    """The left panel's title, its note when the head does not exist (else ""), the middle's title."""
    if head < num_heads:
        left, note = f"head {head} of H = {num_heads}", ""
    else:
        left, note = f"head {head}: not in H = {num_heads}", f"H = {num_heads} has only\nheads 0 to {num_heads - 1}"
    middle = "the only head (H = 1)" if num_heads == 1 else f"average of the {num_heads} heads"
    return left, note, middle


def head_explorer(
    maps: Mapping[int, Tensor],
    sentence: Sequence[str],
    start_num_heads: int = 4,
    start_head: int = 0,
) -> InteractiveFigure:
    """Sliders for the number of heads and the head shown, over the chapter's weights.

    ``maps[H]`` is the layer's weights cut into H heads, (H, L, L), for one sentence of L words.
    """
    head_counts = sorted(maps)
    most = max(head_counts)
    maps = {h: m.detach().cpu() for h, m in maps.items()}
    averages = {h: m.mean(dim=0) for h, m in maps.items()}  # H -> (L, L)
    entropies = {h: head_entropies(m) for h, m in maps.items()}  # H -> ((H,), average)
    length = len(sentence)
    cmap = plt.get_cmap("viridis").with_extremes(bad="#e8e8e8")  # grey where a head does not exist
    blank = np.full((length, length), np.nan)

    fig = new_figure(8, 3.5)
    ax_head, ax_average, ax_entropy = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 0.9]})
    head_image = ax_head.imshow(blank, cmap=cmap, vmin=0, vmax=1)
    ax_head.set_xticks(range(length), sentence, rotation=90, fontsize=7)
    ax_head.set_yticks(range(length), sentence, fontsize=7)
    ax_head.set(xlabel="key", ylabel="query")
    head_title = ax_head.set_title("", fontsize=9)
    missing = ax_head.text((length - 1) / 2, (length - 1) / 2, "", ha="center", va="center", fontsize=9)
    # The average panel shares the left panel's axes, so it needs no labels; no colorbar either:
    # the colours are those of the chapter's grids (viridis, 0 dark to 1 yellow).
    average_image = ax_average.imshow(blank, cmap=cmap, vmin=0, vmax=1)
    ax_average.set(xticks=[], yticks=[], xlabel="key (same order)")
    average_title = ax_average.set_title("", fontsize=9)

    bars = ax_entropy.bar(range(most), np.zeros(most), color=COLORS[0])
    ax_entropy.axhline(math.log(length), color="grey", linestyle="--", linewidth=1, label="uniform")
    average_line = ax_entropy.axhline(0.0, color=COLORS[2], linewidth=1.5, label="average map")
    # Every other head numbered: the highlighted bar marks the chosen one.
    ax_entropy.set(xticks=range(0, most, 2), yticks=[0, 1, 2], ylim=(0, 2.4), xlabel="head")
    ax_entropy.set_title("mean entropy per head (nats)", fontsize=9)
    ax_entropy.legend(fontsize=7, loc="upper left", frameon=False, ncols=2)
    despine(ax_entropy)
    fig.tight_layout()

    def update(num_heads: int, head: int) -> None:
        left, note, middle = head_titles(num_heads, head)
        head_image.set_data(maps[num_heads][head].numpy() if head < num_heads else blank)
        head_title.set_text(left)
        missing.set_text(note)
        average_image.set_data(averages[num_heads].numpy())
        average_title.set_text(middle)
        per_head, average = entropies[num_heads]
        for h, bar in enumerate(bars):
            bar.set_height(per_head[h] if h < num_heads else 0.0)
            bar.set_color(COLORS[1] if h == head else COLORS[0])
        average_line.set_ydata([average] * 2)

    return InteractiveFigure(
        fig,
        update,
        [
            Slider("num_heads", head_counts, label="number of heads H", initial=start_num_heads),
            Slider("head", list(range(most)), label="head shown", initial=start_head),
        ],
        # What update changes; the axes, labels and legend are drawn once and reused.
        animated=[head_image, head_title, missing, average_image, average_title, *bars, average_line],
        alt=ALT,
        dpi=DPI,
    )
