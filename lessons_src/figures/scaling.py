"""Chapter "Why scale by √d_k": the scores' spread and the weights, by d_k, scaled or not."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["scores_title", "weights_title", "score_explorer"]

ALT = (
    "Two panels. Left: a histogram of attention scores for random queries and keys, "
    "on fixed bins from -96 to 96; with the scaling on it is a narrow spike around 0 "
    "at every d_k, with it off it spreads wider as d_k grows. Right: a 6 by 12 "
    "heatmap of attention weights, one row per query; with the scaling on the rows "
    "stay spread out, with it off and a large d_k each row is a single bright cell."
)


def scores_title(d_k: int, scaling: str, std: float) -> str:
    """The histogram's title: the measured spread next to what theory expects."""
    reference = "scaled: about 1" if scaling == "on" else f"√d_k = {math.sqrt(d_k):g}"
    return f"Scores: std {std:.2f} ({reference})"


def weights_title(largest: float) -> str:
    """The heatmap's title: how much of each row its largest weight takes, on average."""
    return f"Weights: largest per row {largest:.2f} on average"


def score_explorer(
    frames: Mapping[tuple[int, str], Mapping[str, Tensor | float]],
    edges: Tensor,
    d_ks: Sequence[int],
    start_d_k: int = 64,
    start_scaling: str = "off",
) -> InteractiveFigure:
    """Sliders for d_k and the scaling over the chapter's measurements.

    ``frames[d_k, "off" | "on"]`` holds ``histogram`` (len(edges) - 1,) (shares per bin),
    ``weights`` (Lq, Lk), ``std`` (the scores' standard deviation) and ``largest`` (the mean of
    each row's largest weight).
    """
    first = frames[start_d_k, start_scaling]
    fig = new_figure(8, 3.5)
    ax_hist, ax_weights = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})

    # One step artist over the fixed bins; update() changes its heights in place.
    steps = ax_hist.stairs(first["histogram"].numpy(), edges.numpy(), fill=True, color=COLORS[0])
    ax_hist.set(xlim=(-96, 96), ylim=(0, 0.6), xticks=[-80, -40, 0, 40, 80], yticks=[0, 0.2, 0.4, 0.6],
                xlabel="score seen by the softmax", ylabel="share of scores")
    hist_title = ax_hist.set_title(scores_title(start_d_k, start_scaling, first["std"]))
    despine(ax_hist)

    len_q, len_k = first["weights"].shape
    image = ax_weights.imshow(first["weights"].numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax_weights.set(xticks=range(0, len_k, 2), yticks=range(len_q), xlabel="key position",
                   ylabel="query position")
    ax_weights.tick_params(labelsize=7)
    fig.colorbar(image, ax=ax_weights, label="weight", shrink=0.9, ticks=[0, 0.5, 1])
    map_title = ax_weights.set_title(weights_title(first["largest"]))
    fig.tight_layout()  # after the titles are filled in, so that it leaves room for them

    def update(d_k: int, scaling: str) -> None:
        frame = frames[d_k, scaling]
        steps.set_data(frame["histogram"].numpy())
        hist_title.set_text(scores_title(d_k, scaling, frame["std"]))
        image.set_data(frame["weights"].numpy())
        map_title.set_text(weights_title(frame["largest"]))

    return InteractiveFigure(
        fig,
        update,
        [
            Slider("d_k", d_ks, label="d_k", initial=start_d_k),
            Slider("scaling", ["off", "on"], label="scaling by 1/√d_k", initial=start_scaling),
        ],
        animated=[steps, hist_title, image, map_title],  # what update changes; the rest is drawn once
        alt=ALT,
        dpi=DPI,
    )
