"""Chapter "Attention from scratch": steer one 2-D query over four fixed keys and values."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import seaborn as sns
import torch
from torch import Tensor

from lessons_src import scaled_dot_product_attention
from lessons_src.widgets import InteractiveFigure, Slider

from ._style import DPI, new_figure

__all__ = ["query_vector", "attend_2d", "bar_label_style", "steer_query"]

ALT = (
    "Three panels. Left: four coloured key arrows for The, cat, sat and down, and a black "
    "query arrow set by the sliders. Middle: a bar chart of the attention weight on each "
    "token, from 0 to 1. Right: the four value points at the corners of a square, sized by "
    "their weight, and a black star at the output, their weighted average."
)


def query_vector(angle: float, length: float) -> Tensor:
    """A 2-D query, shape (2,), at ``angle`` degrees with the given length."""
    theta = math.radians(angle)
    return torch.tensor([length * math.cos(theta), length * math.sin(theta)])


def attend_2d(angle: float, length: float, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """Weights (L,) and output (2,) of one query against keys (L, 2) and values (L, 2)."""
    output, weights = scaled_dot_product_attention(query_vector(angle, length)[None], keys, values)  # (1, 2), (1, L)
    return weights[0], output[0]


def bar_label_style(weight: float) -> dict:
    """Where a bar's label goes: a tall bar carries it inside (white), clear of the title."""
    inside = weight > 0.8
    return {"y": weight - 0.03 if inside else weight + 0.03, "va": "top" if inside else "bottom",
            "color": "white" if inside else "black", "text": f"{weight:.2f}"}


def steer_query(
    tokens: Sequence[str],
    keys: Tensor,
    values: Tensor,
    angles: Sequence[float],
    lengths: Sequence[float],
    attend: Callable[[float, float], tuple[Tensor, Tensor]] | None = None,
    start_angle: float = 90.0,
    start_length: float = 1.0,
) -> InteractiveFigure:
    """Sliders for a query's angle and length; keys, weights and output in three panels.

    ``keys`` and ``values`` are (L, 2), one row per token. ``attend(angle, length)`` returns the
    weights (L,) and the output (2,) of the query ``query_vector(angle, length)``; by default
    ``attend_2d`` with these keys and values.
    """
    keys, values = keys.detach().cpu().float(), values.detach().cpu().float()
    attend = attend or partial(attend_2d, keys=keys, values=values)

    colors = sns.color_palette("colorblind", len(tokens))
    weights, output = (t.detach().cpu().numpy() for t in attend(start_angle, start_length))
    query = query_vector(start_angle, start_length).numpy()
    # Matplotlib gets NumPy arrays: handing it tensors works, but warns under NumPy 2.
    keys_np, values_np = keys.numpy(), values.numpy()

    fig = new_figure(8, 3.5)
    ax_keys, ax_weights, ax_values = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.15, 1]})

    # Left: the keys (coloured arrows) and the query (black arrow), in key space.
    zeros = torch.zeros(len(tokens)).numpy()
    key_arrows = ax_keys.quiver(zeros, zeros, keys_np[:, 0], keys_np[:, 1], color=colors, angles="xy",
                                scale_units="xy", scale=1, width=0.012, zorder=3)  # over the query
    for token, k, c in zip(tokens, keys, colors):
        ax_keys.text(1.42 * k[0], 1.42 * k[1], token, color=c, ha="center", va="center", fontweight="bold")
    query_arrow = ax_keys.quiver([0.0], [0.0], [query[0]], [query[1]], color="black",
                                 angles="xy", scale_units="xy", scale=1, width=0.022)
    ax_keys.set(xlim=(-3.4, 3.4), ylim=(-3.4, 3.4), aspect="equal", xticks=[], yticks=[],
                title="keys and the query (black)")

    # Middle: the weights, one bar per key.
    bars = ax_weights.bar(tokens, weights, color=colors)
    bar_labels = [ax_weights.text(i, 0, "", ha="center") for i in range(len(tokens))]
    ax_weights.set(ylim=(0, 1), ylabel="weight", title="weights = softmax(scores)")
    ax_weights.spines[["top", "right"]].set_visible(False)

    # Right: the values (dots sized by weight) and the output, their weighted average.
    value_dots = ax_values.scatter(values_np[:, 0], values_np[:, 1], s=40 + 400 * weights, c=colors)
    for token, v, c in zip(tokens, values, colors):
        ax_values.text(v[0], 1.5 * v[1], token, color=c, ha="center", va="center", fontweight="bold")
    output_star = ax_values.scatter([output[0]], [output[1]], marker="*", s=260, c="black", zorder=3)
    ax_values.set(xlim=(-1.9, 1.9), ylim=(-1.9, 1.9), aspect="equal", xticks=[], yticks=[],
                  title="values and the output (★)")
    fig.tight_layout()

    def update(angle: float, length: float) -> None:
        weights, output = (t.detach().cpu().numpy() for t in attend(angle, length))
        query = query_vector(angle, length).numpy()
        query_arrow.set_UVC([query[0]], [query[1]])
        for bar, label, w in zip(bars, bar_labels, weights.tolist()):
            bar.set_height(w)
            label.set(**bar_label_style(w))
        value_dots.set_sizes(40 + 400 * weights)
        output_star.set_offsets([output.tolist()])

    return InteractiveFigure(
        fig,
        update,
        [
            Slider("angle", angles, label="query angle", initial=start_angle, fmt="{:g}°"),
            Slider("length", lengths, label="query length", initial=start_length, fmt="{:g}"),
        ],
        # What update changes (the keys too: they are drawn over the query); the rest is drawn once.
        animated=[query_arrow, key_arrows, *bars, *bar_labels, value_dots, output_star],
        alt=ALT,
        dpi=DPI,
    )
