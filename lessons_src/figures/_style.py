"""What every chapter's slider figure shares: the canvas, the colours, the resolution."""

from __future__ import annotations

import seaborn as sns
from matplotlib.figure import Figure

#: Live frames at 80 dpi: legible at the page's width, and a fifth fewer pixels to encode than 100.
DPI = 80
#: The colour-blind-safe palette of every line and bar (viridis for maps).
COLORS = sns.color_palette("colorblind")


def new_figure(
    width: float = 8.0, height: float = 3.5, dpi: float | None = None, figure_class: type[Figure] = Figure
) -> Figure:
    """A bare Figure with a white face (it reads the same on light and dark pages).

    Not ``plt.subplots``: the InteractiveFigure owns the figure, and pyplot never shows a copy.
    ``dpi`` (default: matplotlib's) is the resolution of ``savefig`` and of the notebook's PNG;
    ``figure_class`` a subclass of Figure to make instead.
    """
    return figure_class(figsize=(width, height), facecolor="white", dpi=dpi)


def despine(*axes) -> None:
    """Hide the top and right spines: plots, not boxes."""
    for ax in axes:
        ax.spines[["top", "right"]].set_visible(False)
