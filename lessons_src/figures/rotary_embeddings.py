"""Chapter "Rotary position embeddings": rotate a query and a key; their score depends on the distance only."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from torch import Tensor

from lessons_src import apply_rope, rope_frequencies
from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["rotate", "rotated_pairs", "score_curve", "pair_angle", "rope_explorer"]

ALT = (
    "Three panels. Left and middle: the first two pairs of an 8-dimensional query (blue arrow) "
    "and key (orange arrow), each rotated to its position; the angle between them is printed "
    "below. Right: the score q·k against the distance i - j from 0 to 16, a grey line computed "
    "at query position i = 16 with blue dots computed at the chosen i lying on it, and a black "
    "circle at the chosen distance."
)


def rotate(x: Tensor, positions: Tensor) -> Tensor:
    """One vector x (d,) rotated to each of ``positions`` (n,) by ``apply_rope``: (n, d)."""
    cos, sin = rope_frequencies(x.size(-1), max_len=int(positions.max()) + 1)
    return apply_rope(x.expand(len(positions), x.size(-1)), cos, sin, positions=positions)  # (n, d)


def rotated_pairs(query: Tensor, key: Tensor, i: int, delta: int) -> tuple[Tensor, Tensor]:
    """The query (d,) at position i and the key (d,) at j = i - delta, rotated, as (d/2, 2) pairs."""
    q_i = rotate(query, torch.tensor([i]))[0].view(-1, 2)  # (d/2, 2)
    k_j = rotate(key, torch.tensor([i - delta]))[0].view(-1, 2)  # (d/2, 2)
    return q_i, k_j


def score_curve(query: Tensor, key: Tensor, i: int, distances: Tensor) -> Tensor:
    """q_i · k_j at j = i - Δ for each Δ in ``distances`` (n,): the query at i against the key at every distance."""
    q_i = rotate(query, torch.tensor([i]))[0]  # (d,)
    return rotate(key, i - distances) @ q_i  # (n, d) @ (d,) -> (n,)


def pair_angle(a: Tensor, b: Tensor) -> float:
    """Angle in degrees from 2-D vector a to 2-D vector b, in (-180, 180]."""
    return math.degrees(math.atan2(a[0] * b[1] - a[1] * b[0], a @ b))


def rope_explorer(
    query: Tensor,
    key: Tensor,
    positions: Sequence[int],
    distances: Sequence[int],
    max_distance: int = 16,
    start_i: int = 20,
    start_delta: int = 2,
) -> InteractiveFigure:
    """Sliders for the query's position i and the distance Δ = i - j to the key's position j; query
    and key (d,).

    The score line is computed at the first of ``positions``, for Δ = 0 .. ``max_distance``; the
    dots at the slider's i.
    """
    curve_distances = torch.arange(0, max_distance + 1)  # (n,): Δ, also the index into a curve
    head_dim = query.size(-1)
    reference = score_curve(query, key, positions[0], curve_distances)
    fig = new_figure(8, 3.5)
    ax_pair0, ax_pair1, ax_score = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1.35]})
    arrow_style = dict(angles="xy", scale_units="xy", scale=1, width=0.025)
    arrows, angle_texts = [], []
    for p, ax in enumerate([ax_pair0, ax_pair1]):  # pair p: dimensions 2p, 2p + 1
        radius = max(query[2 * p : 2 * p + 2].norm(), key[2 * p : 2 * p + 2].norm()).item()
        ax.add_patch(plt.Circle((0, 0), radius, fill=False, ls=":", color="grey"))
        arrows.append((ax.quiver([0], [0], [1], [0], color=COLORS[0], **arrow_style),
                       ax.quiver([0], [0], [1], [0], color=COLORS[1], **arrow_style)))
        angle_texts.append(ax.text(0, -1.38, "", ha="center", fontsize=9))
        ax.set(xlim=(-1.5, 1.5), ylim=(-1.5, 1.5), aspect="equal", xticks=[], yticks=[],
               title=f"pair {p} (θ = {10000 ** (-2 * p / head_dim):g})")
    ax_pair0.legend(arrows[0], ["query at i", "key at j"], loc="upper left", fontsize=8, frameon=False,
                    handlelength=1)

    ax_score.plot(curve_distances, reference, color="grey", lw=1.5, label=f"computed at i = {positions[0]}")
    dots = ax_score.scatter(curve_distances, reference, s=14, color=COLORS[0], zorder=3,
                            label="computed at the slider's i")
    current = ax_score.scatter([0], [0], s=110, facecolors="none", edgecolors="black", lw=2, zorder=4)
    score_title = ax_score.set_title("", fontsize=10)
    ax_score.set(xlabel="distance Δ = i - j", ylabel="score $q_i \\cdot k_j$", xticks=range(0, max_distance + 1, 4))
    ax_score.legend(fontsize=8, frameon=False, loc="lower left")
    despine(ax_score)

    def update(i: int, delta: int) -> None:
        q_i, k_j = rotated_pairs(query, key, i, delta)
        for p, (query_arrow, key_arrow) in enumerate(arrows):
            query_arrow.set_UVC([q_i[p, 0]], [q_i[p, 1]])
            key_arrow.set_UVC([k_j[p, 0]], [k_j[p, 1]])
            angle_texts[p].set_text(f"angle key→query {pair_angle(k_j[p], q_i[p]):.0f}°")
        curve = score_curve(query, key, i, curve_distances)
        dots.set_offsets(torch.stack([curve_distances.float(), curve], dim=1))
        current.set_offsets([[delta, curve[delta].item()]])
        score_title.set_text(f"i = {i}, j = {i - delta}: score {curve[delta]:.3f}")

    update(start_i, start_delta)  # fill the texts in before the layout pass, so it makes room for them
    fig.tight_layout()
    return InteractiveFigure(
        fig,
        update,
        [
            Slider("i", positions, label="query position i", initial=start_i),
            Slider("delta", distances, label="distance Δ = i - j", initial=start_delta),
        ],
        # What update changes; the circles, axes, line and legends are drawn once.
        animated=[*(arrow for pair in arrows for arrow in pair), *angle_texts, dots, current, score_title],
        alt=ALT,
        dpi=DPI,
    )
