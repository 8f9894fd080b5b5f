"""Chapter "ALiBi and length extrapolation": each head's linear bias, as a matrix and by distance."""

from __future__ import annotations

import numpy as np

from lessons_src.alibi import alibi_bias, alibi_slopes
from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["masked_bias", "bias_explorer"]

ALT = (
    "Two panels. Left: the bias matrix of the chosen head for the chosen length, queries down and keys "
    "across; zero on the diagonal, darker further into the past, the future above the diagonal blank "
    "because the causal mask hides it. Right: the bias against the distance from the query for every "
    "head, straight lines through zero whose steepness halves from one head to the next, the chosen "
    "head drawn thick."
)


def masked_bias(num_heads: int, head: int, seq_len: int) -> np.ma.MaskedArray:
    """``bias[head]``, the ``(L, L)`` bias of head ``h = head + 1``, with the future (keys after their query) masked out."""
    bias = alibi_bias(num_heads, seq_len)[head].numpy()
    future = np.triu(np.ones((seq_len, seq_len), dtype=bool), k=1)
    return np.ma.masked_array(bias, mask=future)


def bias_explorer(num_heads: int = 8, lengths: tuple[int, ...] = (16, 32, 64), start_head: int = 1) -> InteractiveFigure:
    """Sliders for the head and the length over ALiBi's biases for ``num_heads`` heads.

    The head slider counts ``h = 1, ..., H`` as the chapter's formulas do; head ``h`` is ``bias[h - 1]``.
    """
    longest = max(lengths)
    slopes = alibi_slopes(num_heads).tolist()
    fig = new_figure(8.5, 3.5)
    ax_matrix, ax_lines = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    lowest = -slopes[0] * (longest - 1)
    image = ax_matrix.imshow(masked_bias(num_heads, start_head - 1, longest), cmap="mako", vmin=lowest, vmax=0,
                             interpolation="nearest")
    fig.colorbar(image, ax=ax_matrix, shrink=0.85, label="bias added to the score")
    ax_matrix.set(xlabel="key j", ylabel="query i")
    matrix_title = ax_matrix.set_title("", fontsize=10)

    distance = np.arange(longest)
    lines = [ax_lines.plot(distance, -m * distance, color=COLORS[h % len(COLORS)], linewidth=1)[0]
             for h, m in enumerate(slopes)]
    ax_lines.set(xlabel="distance i - j (tokens into the past)", ylabel="bias", ylim=(lowest * 1.05, 1))
    despine(ax_lines)
    lines_title = ax_lines.set_title("", fontsize=10)

    def update(head: int, seq_len: int) -> None:  # head: h, from 1
        index = head - 1  # the code's index of head h
        image.set_data(masked_bias(num_heads, index, seq_len))
        image.set_extent((-0.5, seq_len - 0.5, seq_len - 0.5, -0.5))
        ax_matrix.set(xlim=(-0.5, seq_len - 0.5), ylim=(seq_len - 0.5, -0.5))
        matrix_title.set_text(f"head h = {head}: slope β = 1/{1 / slopes[index]:.4g}, L = {seq_len}")
        for h, line in enumerate(lines):
            line.set_linewidth(3.0 if h == index else 0.8)
            line.set_alpha(1.0 if h == index else 0.45)
        ax_lines.set_xlim(0, seq_len - 1)
        lines_title.set_text(f"at distance {seq_len - 1}: bias {-slopes[index] * (seq_len - 1):.3g}")

    update(start_head, longest)
    fig.tight_layout()
    return InteractiveFigure(
        fig, update,
        [Slider("head", list(range(1, num_heads + 1)), label="head h", initial=start_head),
         Slider("seq_len", list(lengths), label="length L", initial=longest)],
        # The length changes the limits and ticks: one background per length; the head only the artists.
        animated=[image, matrix_title, *lines, lines_title], background_sliders=["seq_len"],
        alt=ALT, dpi=DPI,
    )
