"""Chapter "Layer norm placement": gradient norms per layer at initialization, post-LN and pre-LN."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["last_over_first", "depth_title", "depth_explorer"]

ALT = (
    "Two panels. Left: the gradient norm of each layer's weights at initialization, for a post-LN "
    "and a pre-LN encoder with the number of layers set by the slider; the post-LN curve rises "
    "towards the output and the pre-LN curve falls gently and lies lower. Right: the last layer's "
    "gradient norm against the number of layers; post-LN stays high while pre-LN drops as layers are added."
)


def last_over_first(norms: Tensor) -> float:
    """The last layer's gradient norm over the first's, from per-layer norms (N,)."""
    return (norms[-1] / norms[0]).item()


def depth_title(depth: int, post: Tensor, pre: Tensor) -> str:
    """The left panel's title: last/first ratio of both wirings at this depth."""
    return (f"N = {depth}: last/first layer {last_over_first(post):.2f} (post-LN), "
            f"{last_over_first(pre):.2f} (pre-LN)")


def depth_explorer(grad_norms: Mapping[tuple[bool, int], Tensor], start_depth: int = 8) -> InteractiveFigure:
    """A slider over the depth N; ``grad_norms[norm_first, N]`` holds the N layers' norms (N,)."""
    depths = sorted({depth for _, depth in grad_norms})
    max_depth = max(depths)
    y_top = 1.15 * max(g.max().item() for g in grad_norms.values())
    fig = new_figure(8, 3.5)
    ax_layers, ax_depth = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1.35, 1]})

    (post_line,) = ax_layers.plot([], [], "o-", color=COLORS[0], label="post-LN")
    (pre_line,) = ax_layers.plot([], [], "s-", color=COLORS[1], label="pre-LN")
    ax_layers.set(xlim=(0.5, max_depth + 0.5), ylim=(0, y_top), xticks=[1, *depths],
                  yticks=[0, 0.2, 0.4, 0.6, 0.8], xlabel="layer (1 = next to the input)",
                  ylabel="gradient norm of a layer's weights")
    ax_layers.legend(frameon=False, loc="lower left")
    title = ax_layers.set_title("", fontsize=10)

    for norm_first, marker, color, name in ((False, "o", COLORS[0], "post-LN"), (True, "s", COLORS[1], "pre-LN")):
        last = [grad_norms[norm_first, d][-1].item() for d in depths]
        ax_depth.plot(depths, last, marker + "-", color=color, label=name)
    (current,) = ax_depth.plot([], [], "o", ms=14, mfc="none", mec="black", mew=1.5)
    ax_depth.set(xlim=(1, max_depth + 1), xticks=depths, xlabel="number of layers N", title="last layer, by depth")
    despine(ax_layers, ax_depth)
    fig.tight_layout()

    def update(depth: int) -> None:
        post, pre = grad_norms[False, depth], grad_norms[True, depth]
        layer_numbers = range(1, depth + 1)
        post_line.set_data(layer_numbers, post)
        pre_line.set_data(layer_numbers, pre)
        title.set_text(depth_title(depth, post, pre))
        current.set_data([depth, depth], [post[-1].item(), pre[-1].item()])

    return InteractiveFigure(
        fig,
        update,
        [Slider("depth", depths, label="layers N", initial=start_depth)],
        animated=[post_line, pre_line, title, current],  # what update changes; the rest is drawn once
        alt=ALT,
        dpi=DPI,
    )
