"""Chapter "Decoder blocks and cross-attention": a trained decoder's cross-attention, step by step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["map_title", "cross_attention_explorer"]

ALT = (
    "Left: an 8 by 8 heatmap of cross-attention weights, decoder positions as rows and source "
    "positions as columns, for the training step and decoder layer chosen by the sliders; it starts "
    "uniform and becomes a bright anti-diagonal band. Right: the weight on the anti-diagonal for "
    "both decoder layers against the training step, rising from 1/8, with the chosen step marked."
)


def map_title(layer: int, step: int, mass: float) -> str:
    """The map's title: which layer, which step, and its weight on the anti-diagonal."""
    return f"layer {layer}, step {step}: anti-diagonal mass {mass:.2f}"


def cross_attention_explorer(
    snapshots: Mapping[int, Tensor],
    masses: Mapping[int, Sequence[float]],
    start_step: int | None = None,
    start_layer: int | None = None,
) -> InteractiveFigure:
    """Sliders for the training step and the decoder layer over recorded maps.

    ``snapshots[step]``: each decoder layer's cross-attention map at that step, (layers, Lt, Ls);
    ``masses[layer]`` (layers count from 1): its anti-diagonal mass at every step, in step order.
    Starts at the last step and the last layer unless told otherwise.
    """
    steps = sorted(snapshots)
    layers = sorted(masses)
    start_step = steps[-1] if start_step is None else start_step
    start_layer = layers[-1] if start_layer is None else start_layer
    seq_len = snapshots[start_step].size(-1)

    fig = new_figure(8, 3.5)
    ax_map, ax_mass = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.25]})
    image = ax_map.imshow(snapshots[start_step][start_layer - 1].detach().cpu().numpy(), cmap="viridis", vmin=0, vmax=1,
                          interpolation="nearest")
    fig.colorbar(image, ax=ax_map, fraction=0.046, pad=0.04, label="weight", ticks=[0, 0.5, 1])
    ax_map.set(xticks=range(seq_len), yticks=range(seq_len), xlabel="source position (key)",
               ylabel="decoder position (query)")
    title = ax_map.set_title("", fontsize=10)

    for layer, style in zip(layers, ["o--", "s-"]):
        ax_mass.plot(steps, masses[layer], style, color=COLORS[layer - 1], label=f"decoder layer {layer}")
    ax_mass.axhline(1 / seq_len, color="grey", lw=1, ls=":", label=f"uniform (1/{seq_len})")
    step_line = ax_mass.axvline(start_step, color="black", lw=1)
    (current,) = ax_mass.plot([], [], "o", ms=13, mfc="none", mec="black", mew=1.5)
    ax_mass.set(xlim=(-10, steps[-1] + 10), ylim=(0, 1), xticks=range(0, steps[-1] + 1, 100), yticks=[0, 0.5, 1],
                xlabel="training step", ylabel="anti-diagonal mass", title=f"weight on source position {seq_len - 1} - t")
    ax_mass.legend(frameon=False, fontsize=8, loc="upper left")
    despine(ax_mass)
    fig.tight_layout()

    def update(step: int, layer: int) -> None:
        mass = masses[layer][steps.index(step)]
        image.set_data(snapshots[step][layer - 1].detach().cpu().numpy())
        title.set_text(map_title(layer, step, mass))
        step_line.set_xdata([step, step])
        current.set_data([step], [mass])

    return InteractiveFigure(
        fig,
        update,
        [
            Slider("step", steps, label="training step", initial=start_step),
            Slider("layer", layers, label="decoder layer", initial=start_layer),
        ],
        animated=[image, title, step_line, current],  # what update changes; the rest is drawn once
        alt=ALT,
        dpi=DPI,
    )
