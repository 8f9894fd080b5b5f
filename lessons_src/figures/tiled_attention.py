"""Chapter "Tiled attention and the online softmax": the running maximum, sum and output of one
query, block of keys after block of keys, converging to the exact softmax."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lessons_src.tiled import online_softmax_steps
from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["weights_so_far", "tile_explorer"]

ALT = (
    "Three panels for one query. Left: its score with every key as bars, the keys of the blocks "
    "seen so far coloured and the others grey, with a solid line at the running maximum and a "
    "dashed line at the maximum over all keys. Middle: the attention weights computed from the "
    "blocks seen so far as bars, next to dots at the exact softmax weights; the bars shrink onto "
    "the dots as more blocks arrive. Right: the output so far as bars next to dots at the exact "
    "output, one pair per value dimension; after the last block they coincide."
)
SEEN, UNSEEN = COLORS[0], (0.82, 0.82, 0.82)


def weights_so_far(scores: Tensor, running_max: Tensor, running_sum: Tensor, seen: int) -> Tensor:
    """The weights ``exp(s - m) / l`` over the first ``seen`` keys, zero for the others: what the
    online softmax implies after those keys (``scores`` ``(..., Lk)``, ``running_max`` and
    ``running_sum`` ``(...)``)."""
    weights = torch.exp(scores - running_max.unsqueeze(-1)) / running_sum.unsqueeze(-1)
    weights[..., seen:] = 0.0
    return weights


def tile_explorer(scores: Tensor, value: Tensor, block_size: int, start_query: int = 0) -> InteractiveFigure:
    """Sliders for the number of key blocks seen and the query, over ``scores`` ``(Lq, Lk)``
    (scaled, unmasked) and ``value`` ``(Lk, d_v)``, the keys taken ``block_size`` at a time."""
    scores, value = scores.detach().cpu().double(), value.detach().cpu().double()
    len_q, len_k = scores.shape
    steps = online_softmax_steps(scores, value, block_size)
    exact_weights = torch.softmax(scores, dim=-1)  # (Lq, Lk)
    exact_output = exact_weights @ value  # (Lq, d_v)
    keys, dims = np.arange(len_k), np.arange(value.size(-1))

    fig = new_figure(9.5, 3.4)
    ax_scores, ax_weights, ax_output = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.3, 1.3, 1]})
    score_bars = ax_scores.bar(keys, np.zeros(len_k), color=UNSEEN)
    (max_line,) = ax_scores.plot([-0.5, len_k - 0.5], [0, 0], color=COLORS[1], linewidth=2, label="running max m")
    (exact_max_line,) = ax_scores.plot([-0.5, len_k - 0.5], [0, 0], color="0.3", linestyle="--", linewidth=1,
                                       label="max over all keys")
    for edge in range(block_size, len_k, block_size):
        ax_scores.axvline(edge - 0.5, color="0.6", linewidth=0.8, linestyle=":")
    low, high = scores.min().item(), scores.max().item()
    top = max(high, 0) + 0.45 * (max(high, 0) - min(low, 0)) + 0.1  # room for the legend above the bars
    ax_scores.set(xlabel="key j", ylabel="score", ylim=(min(low, 0) * 1.1 - 0.1, top))
    ax_scores.legend(frameon=False, fontsize=7, loc="upper center", ncols=2)
    scores_title = ax_scores.set_title("", fontsize=10)

    weight_bars = ax_weights.bar(keys, np.zeros(len_k), color=SEEN, label="from the blocks seen")
    (exact_weight_dots,) = ax_weights.plot(keys, np.zeros(len_k), "o", color="0.2", markersize=3,
                                           label="exact softmax")
    all_weights = torch.stack([weights_so_far(scores, m, s, min(len_k, (t + 1) * block_size))
                               for t, (m, s, _) in enumerate(steps)])
    ax_weights.set(xlabel="key j", ylabel="weight", ylim=(0, all_weights.max().item() * 1.15))
    ax_weights.legend(frameon=False, fontsize=8, loc="upper right")
    weights_title = ax_weights.set_title("", fontsize=10)

    width = 0.38
    output_bars = ax_output.bar(dims - width / 2, np.zeros(len(dims)), width, color=SEEN, label="so far")
    exact_output_bars = ax_output.bar(dims + width / 2, np.zeros(len(dims)), width, color="0.55", label="exact")
    every_output = torch.cat([torch.stack([o for _, _, o in steps]).flatten(), exact_output.flatten()])
    ax_output.axhline(0, color="0.3", linewidth=0.8)
    ax_output.set(xticks=dims, xlabel="value dimension", ylabel="output",
                  ylim=(min(0, every_output.min().item()) * 1.2, max(0, every_output.max().item()) * 1.2 + 1e-9))
    ax_output.legend(frameon=False, fontsize=8, loc="best")
    output_title = ax_output.set_title("", fontsize=10)
    despine(ax_scores, ax_weights, ax_output)

    def update(blocks: int, query: int) -> None:
        running_max, running_sum, output = (t[query] for t in steps[blocks - 1])
        seen = min(len_k, blocks * block_size)
        for j, bar in enumerate(score_bars):
            bar.set_height(scores[query, j].item())
            bar.set_color(SEEN if j < seen else UNSEEN)
        max_line.set_ydata([running_max.item()] * 2)
        exact_max_line.set_ydata([scores[query].max().item()] * 2)
        scores_title.set_text(f"query {query}: {blocks} of {len(steps)} blocks, m = {running_max.item():.2f}")
        weights = weights_so_far(scores[query], running_max, running_sum, seen)
        for bar, w in zip(weight_bars, weights.tolist()):
            bar.set_height(w)
        exact_weight_dots.set_ydata(exact_weights[query].numpy())
        weights_title.set_text(f"l = Σ exp(s - m) = {running_sum.item():.3f}")
        for bar, o in zip(output_bars, output.tolist()):
            bar.set_height(o)
        for bar, o in zip(exact_output_bars, exact_output[query].tolist()):
            bar.set_height(o)
        gap = (output - exact_output[query]).abs().max().item()
        output_title.set_text(f"gap to exact: {gap:.1e}")

    update(1, start_query)
    fig.tight_layout()
    return InteractiveFigure(
        fig,
        update,
        [
            Slider("blocks", list(range(1, len(steps) + 1)), label="key blocks seen", initial=1),
            Slider("query", list(range(len_q)), label="query i", initial=start_query),
        ],
        animated=[*score_bars, max_line, exact_max_line, scores_title, *weight_bars, exact_weight_dots,
                  weights_title, *output_bars, *exact_output_bars, output_title],
        alt=ALT,
        dpi=DPI,
    )
