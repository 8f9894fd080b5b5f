"""Chapter "Masking": one padded sentence's mask and attention weights, causal or not."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from matplotlib.colors import ListedColormap
from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, new_figure

__all__ = ["MASK_CMAP", "square_extent", "mask_title", "weights_title", "mask_explorer"]

#: Blocked: grey; may attend: blue (the chapter's mask pictures use the same two colours).
MASK_CMAP = ListedColormap(["#e6e6e6", COLORS[0]])

ALT = (
    "Two square panels for the second sentence of a padded batch, labelled by its words "
    "and <pad> tokens. Left: its boolean mask, blue where a query may attend to a key and "
    "grey where it is blocked. Right: the attention weights from 0 to 1 in viridis colours; "
    "the columns of <pad> keys and, with the causal mask on, everything above the diagonal "
    "are zero."
)


def square_extent(seq_len: int) -> tuple[float, float, float, float]:
    """imshow's extent (left, right, bottom, top) for an (L, L) matrix: cell centres on 0..L-1."""
    return (-0.5, seq_len - 0.5, seq_len - 0.5, -0.5)


def mask_title(causal: str) -> str:
    """The mask panel's title, naming the masks that are on."""
    kind = "padding & causal" if causal == "on" else "padding only"
    return f"mask: {kind}\nblue: may attend, grey: blocked"


def weights_title(seq_len: int, padding: int) -> str:
    """The weights panel's title: how many of the L tokens are real."""
    return f"weights: {seq_len - padding} real + {padding} <pad>"


def mask_explorer(
    mask_and_weights: Callable[[int, int, bool], tuple[list[str], Tensor, Tensor]],
    seq_lens: Sequence[int],
    paddings: Sequence[int],
    start_seq_len: int = 6,
    start_padding: int = 2,
    start_causal: str = "on",
) -> InteractiveFigure:
    """Sliders for the length, the padding and the causal mask, over the chapter's function.

    ``mask_and_weights(seq_len, padding, causal_on)`` returns one sentence's tokens (L words),
    its boolean mask (L, L) (True = may attend) and its attention weights (L, L).
    """
    fig = new_figure(8, 3.8)
    ax_mask, ax_weights = fig.subplots(1, 2)
    blank = torch.zeros(max(seq_lens), max(seq_lens)).numpy()
    mask_image = ax_mask.imshow(blank, cmap=MASK_CMAP, vmin=0, vmax=1)
    weights_image = ax_weights.imshow(blank, cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(weights_image, ax=ax_weights, label="attention weight", fraction=0.046, pad=0.04)
    mask_text = ax_mask.set_title("mask")
    weights_text = ax_weights.set_title("weights")
    ax_mask.set(xlabel="key", ylabel="query")
    ax_weights.set(xlabel="key", ylabel="query (as on the left)")
    fig.subplots_adjust(left=0.1, right=0.93, bottom=0.24, top=0.86, wspace=0.4)

    def update(seq_len: int, padding: int, causal: str) -> None:
        tokens, mask, weights = mask_and_weights(seq_len, padding, causal == "on")
        extent = square_extent(seq_len)
        for image, data in ((mask_image, mask.int().numpy()), (weights_image, weights.numpy())):
            image.set_data(data)
            image.set_extent(extent)
        for ax in (ax_mask, ax_weights):
            ax.set_xticks(range(seq_len), tokens, rotation=90, fontsize=8)
            ax.set(xlim=extent[:2], ylim=extent[2:])
        # Query labels on the left panel only: the rows are the same on the right.
        ax_mask.set_yticks(range(seq_len), tokens, fontsize=8)
        ax_weights.set_yticks(range(seq_len), [])
        mask_text.set_text(mask_title(causal))
        weights_text.set_text(weights_title(seq_len, padding))

    return InteractiveFigure(
        fig,
        update,
        [
            Slider("seq_len", seq_lens, label="sequence length L", initial=start_seq_len),
            Slider("padding", paddings, label="padding in sentence 2", initial=start_padding),
            Slider("causal", ["off", "on"], label="causal mask", initial=start_causal),
        ],
        # What update changes; the axes and their word labels are drawn once per length and padding.
        animated=[mask_image, weights_image, mask_text, weights_text],
        background_sliders=["seq_len", "padding"],
        alt=ALT,
        dpi=DPI,
    )
