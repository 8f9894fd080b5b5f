"""Chapter "Efficient attention": measured memory and time of four attentions, by window and length."""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib.ticker import FormatStrFormatter, NullLocator
from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["VARIANTS", "window_share", "bar_label", "window_explorer"]

#: The four attentions, in the order of the bars and of the colours.
VARIANTS = ("explicit", "fused", "sliding window", "linear")

ALT = (
    "Three panels. Left: the sliding-window attention mask for the chosen window and length, shrunk to a "
    "square, a bright band along the diagonal that gets thinner as the length grows. Middle and right: "
    "bar charts on log scales of the measured peak memory in MiB and time in milliseconds of explicit, "
    "fused, sliding-window and linear attention at that length."
)


def window_share(seq_len: int, window: int) -> float:
    """Share of the L² (query, key) pairs a causal window allows: (L·w - w(w-1)/2) / L²."""
    window = min(window, seq_len)
    return (seq_len * window - window * (window - 1) // 2) / seq_len**2


def bar_label(x: float) -> str:
    """A bar label: 3 significant digits, without scientific notation."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def window_explorer(
    pictures: Mapping[tuple[int, int], Tensor],
    memory_mib: Mapping[tuple[str, int, int], float],
    time_ms: Mapping[tuple[str, int, int], float],
    start_window: int = 32,
    start_seq_len: int | None = None,
) -> InteractiveFigure:
    """Sliders for the window w and the length L over the chapter's measurements.

    ``pictures[L, w]``: the window mask shrunk to a square; ``memory_mib[variant, L, w]`` and
    ``time_ms[variant, L, w]`` for each of ``VARIANTS``. Starts at the longest length unless told otherwise.
    """
    lengths = sorted({n for n, _ in pictures})
    windows = sorted({w for _, w in pictures})
    start_seq_len = lengths[-1] if start_seq_len is None else start_seq_len

    fig = new_figure(8, 3.5)
    ax_mask, ax_memory, ax_time = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.25, 1.25]})
    mask_image = ax_mask.imshow(pictures[start_seq_len, start_window].numpy(), cmap="mako", vmin=0, vmax=1,
                                interpolation="nearest")
    ax_mask.set(xticks=[], yticks=[], xlabel="key j", ylabel="query i")
    mask_title = ax_mask.set_title("", fontsize=9)

    short_names = ["explicit", "fused", "window", "linear"]
    bar_colors = COLORS[: len(VARIANTS)]
    panels = []
    for ax, values, title in ((ax_memory, memory_mib, "peak memory, MiB"), (ax_time, time_ms, "time, ms")):
        bars = ax.bar(short_names, [1.0] * len(VARIANTS), color=bar_colors)
        labels = [ax.text(i, 1, "", ha="center", va="bottom", fontsize=8) for i in range(len(VARIANTS))]
        ax.set(yscale="log", ylim=(min(values.values()) / 2, max(values.values()) * 4), title=title)
        ax.yaxis.set_minor_locator(NullLocator())  # fewer tick labels, and plain ones (no mathtext)
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.tick_params(labelsize=8)
        despine(ax)
        panels.append((values, bars, labels))

    def update(window: int, seq_len: int) -> None:
        mask_image.set_data(pictures[seq_len, window].numpy())
        mask_title.set_text(f"w={window}, L={seq_len}: {window_share(seq_len, window):.1%} of pairs")
        for values, bars, labels in panels:
            for name, bar, label in zip(VARIANTS, bars, labels):
                bar.set_height(values[name, seq_len, window])
                label.set(y=values[name, seq_len, window] * 1.1, text=bar_label(values[name, seq_len, window]))

    update(start_window, start_seq_len)  # fill the titles and bars before laying out the figure
    fig.tight_layout()
    return InteractiveFigure(
        fig,
        update,
        [
            Slider("window", windows, label="window w", initial=start_window),
            Slider("seq_len", lengths, label="sequence length L", initial=start_seq_len),
        ],
        # What update changes; the axes and their log-scale labels are drawn once.
        animated=[mask_image, mask_title, *(artist for _, bars, labels in panels for artist in (*bars, *labels))],
        alt=ALT,
        dpi=DPI,
    )
