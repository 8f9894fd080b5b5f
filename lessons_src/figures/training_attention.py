"""Chapter "Training attention": the anti-diagonal appearing, step by step, next to the loss."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, new_figure

__all__ = ["curve_steps", "map_title", "emergence_explorer"]

ALT = (
    "Two panels for the training step chosen by the slider. Left: the 10 by 10 "
    "attention map averaged over the four heads, rows are queries and columns keys, "
    "titled with its weight on the anti-diagonal; at step 0 it is uniform, and within a "
    "few dozen steps a bright anti-diagonal from top right to bottom left appears. Right: "
    "the training loss against the step on log scales, falling from about 1 to below "
    "0.01, with a dot at the chosen step."
)


def curve_steps(num_steps: int, points: int = 150) -> list[int]:
    """Step 0 and about ``points`` log-spaced steps up to the last: a smooth curve on a log axis."""
    spaced = torch.logspace(0, math.log10(num_steps - 1), points).round().int().tolist()
    return sorted({0, *spaced})


def map_title(step: int, mass: float) -> str:
    """The map's title: the step and the weight on the anti-diagonal."""
    return f"step {step}\n{mass:.2f} on the anti-diagonal"


def emergence_explorer(
    at_step: Callable[[int], tuple[Tensor, float, float]],
    losses: Tensor,
    steps: Sequence[int],
    start_step: int = 20,
) -> InteractiveFigure:
    """A slider over training steps: the head-averaged map at that step, and the loss curve.

    ``at_step(step)`` returns that step's weights averaged over the heads (L, L), their weight
    on the anti-diagonal and the loss; ``losses`` (STEPS,) is every step's loss, drawn as a
    curve. ``steps``: the slider's steps.
    """
    weights, _, loss = at_step(start_step)
    seq_len = weights.size(-1)
    curve = curve_steps(len(losses))
    fig = new_figure(8, 3.5)
    ax_map, ax_loss = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.2]})

    image = ax_map.imshow(weights.numpy(), cmap="viridis", vmin=0, vmax=1)
    ticks = range(0, seq_len, 3)
    ax_map.set(xlabel="key position", ylabel="query position", xticks=ticks, yticks=ticks)
    title = ax_map.set_title("\n", fontsize=10)  # two lines: the layout leaves room for them
    fig.colorbar(image, ax=ax_map, fraction=0.046, pad=0.04, label="weight", ticks=[0, 0.5, 1])

    ax_loss.plot(curve, losses[curve].numpy(), color=COLORS[0], linewidth=1.5)
    ax_loss.set_xscale("symlog", linthresh=10)  # linear up to step 10, logarithmic beyond
    ax_loss.set(yscale="log", xlabel="training step", ylabel="MSE loss (mean of 9 steps)", title="loss")
    ax_loss.set_xticks([0, 10, 100, 1000], labels=["0", "10", "100", "1000"])
    ax_loss.set_yticks([1, 0.1, 0.01], labels=["1", "0.1", "0.01"])
    ax_loss.minorticks_off()
    (marker,) = ax_loss.plot([start_step], [loss], "o", color="black", markersize=7)
    step_line = ax_loss.axvline(start_step, color="black", linewidth=0.8, alpha=0.5)
    fig.tight_layout()

    def update(step: int) -> None:
        weights, mass, loss = at_step(step)
        image.set_data(weights.numpy())
        title.set_text(map_title(step, mass))
        marker.set_data([step], [loss])
        step_line.set_xdata([step, step])

    return InteractiveFigure(
        fig,
        update,
        [Slider("step", steps, label="training step", initial=start_step)],
        animated=[image, title, marker, step_line],  # what update changes; the rest is drawn once
        alt=ALT,
        dpi=DPI,
    )
