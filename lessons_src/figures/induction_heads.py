"""Chapter "Induction heads": a head's attention on a repeated sequence, and the induction scores
and second-half loss, step by step of training."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["induction_explorer"]

ALT = (
    "Two panels. Left: the attention weights of the chosen head of the second layer on one repeated "
    "sequence of random tokens at the chosen training step, queries down and keys across; once the "
    "induction head has formed, the second half of the queries attend along a stripe just above the "
    "diagonal of the first half: the token after the previous occurrence. Right: the induction score "
    "of every head of the second layer and the loss on the second half, against training steps, with "
    "a marker at the chosen step."
)


def induction_explorer(weights: Mapping[int, Tensor], scores: Mapping[int, Sequence[float]],
                       losses: Mapping[int, float], half_len: int) -> InteractiveFigure:
    """Sliders for the training step and the head over ``weights[step] (H, 2T, 2T)`` (the second
    layer's weights on one repeated sequence), ``scores[step]`` (each head's induction score) and
    ``losses[step]`` (the loss on the second halves)."""
    steps = sorted(weights)
    num_heads = weights[steps[0]].size(0)
    fig = new_figure(9, 3.6)
    ax_map, ax_curve = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    image = ax_map.imshow(weights[steps[0]][0].numpy(), cmap="mako", vmin=0, vmax=1, interpolation="nearest")
    ax_map.axhline(half_len - 0.5, color="white", linewidth=0.8, linestyle=":")
    ax_map.axvline(half_len - 0.5, color="white", linewidth=0.8, linestyle=":")
    ax_map.set(xlabel="key position", ylabel="query position")
    map_title = ax_map.set_title("", fontsize=10)

    x = np.array(steps)
    for h in range(num_heads):
        ax_curve.plot(x, [scores[s][h] for s in steps], "-", color=COLORS[h % len(COLORS)], linewidth=1.2,
                      label=f"head {h} induction score")
    ax_loss = ax_curve.twinx()
    ax_loss.plot(x, [losses[s] for s in steps], "--", color="0.35", linewidth=1.2, label="second-half loss")
    ax_curve.set(xlabel="training step", ylabel="induction score", ylim=(0, 1.05))
    ax_loss.set(ylabel="loss on the second half (nats)", ylim=(0, max(losses.values()) * 1.1))
    despine(ax_curve)
    ax_loss.spines["top"].set_visible(False)
    # On the twin axes, drawn last, so that a blitted frame stacks the layers as a full draw does.
    (marker,) = ax_loss.plot([], [], "o", color="black", markersize=7, transform=ax_curve.transData)
    cursor = ax_loss.axvline(steps[0], color="0.5", linewidth=0.8)
    handles = ax_curve.get_legend_handles_labels()[0] + ax_loss.get_legend_handles_labels()[0]
    ax_curve.legend(handles=handles, frameon=False, fontsize=7, loc="center right")
    curve_title = ax_curve.set_title("", fontsize=10)

    def update(step: int, head: int) -> None:
        image.set_data(weights[step][head].numpy())
        map_title.set_text(f"layer 2, head {head}, step {step}")
        marker.set_data([step], [scores[step][head]])
        cursor.set_xdata([step, step])
        curve_title.set_text(f"step {step}: score {scores[step][head]:.2f}, loss {losses[step]:.2f}")

    update(steps[-1], 0)
    fig.tight_layout()
    return InteractiveFigure(
        fig, update,
        [Slider("step", steps, label="training step", initial=steps[-1]),
         Slider("head", list(range(num_heads)), label="head", initial=0)],
        animated=[image, map_title, marker, cursor, curve_title], alt=ALT, dpi=DPI,
    )
