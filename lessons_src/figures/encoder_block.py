"""Chapter "The transformer encoder block": the sinusoidal table, one row and one column at a time."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["dimension_wave", "table_explorer"]

ALT = (
    "Three panels. Left: the sinusoidal encoding table as a heatmap, positions 0 to 63 down, "
    "dimensions 0 to 63 across, with stripes that widen to the right; an orange line marks the "
    "chosen position and a black line the chosen dimension. Middle: that dimension's sine or "
    "cosine wave over the positions, with an orange dot at the chosen position. Right: the chosen "
    "position's vector over the dimensions: fast oscillation on the left, flat near 0 and 1 on the right."
)


def dimension_wave(dim: int, d_model: int) -> tuple[str, float]:
    """The function in column ``dim`` of the table ('sin' or 'cos') and its wavelength in positions."""
    omega = 10000.0 ** (-2 * (dim // 2) / d_model)  # the angular frequency of dim's pair
    return ("sin" if dim % 2 == 0 else "cos"), 2 * math.pi / omega


def table_explorer(
    table: Tensor,
    positions: Sequence[int],
    dims: Sequence[int],
    start_position: int = 20,
    start_dim: int = 6,
) -> InteractiveFigure:
    """Sliders for a row (position) and a column (dimension) of a positional table (max_len, D)."""
    table = table.detach().cpu().float()
    max_len, d_model = table.shape
    fig = new_figure(8, 3.5)
    ax_table, ax_column, ax_row = fig.subplots(1, 3)
    ticks = [0, 20, 40, 60]

    ax_table.imshow(table.numpy(), cmap="viridis", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    row_line = ax_table.axhline(start_position, color=COLORS[1], lw=2)
    column_line = ax_table.axvline(start_dim, color="black", lw=2)
    # Arrowheads outside the table, visible whatever colour the cells under the lines have.
    (row_mark,) = ax_table.plot([d_model + 2.5], [start_position], "<", color=COLORS[1], ms=9, clip_on=False)
    (column_mark,) = ax_table.plot([start_dim], [-3], "v", color="black", ms=9, clip_on=False)
    ax_table.set(xlabel="dimension", ylabel="position", title="the table PE", xticks=ticks, yticks=ticks,
                 xlim=(-0.5, d_model - 0.5), ylim=(max_len - 0.5, -0.5))

    (column_curve,) = ax_column.plot(range(max_len), table[:, start_dim], color="black", lw=1.5)
    (column_dot,) = ax_column.plot([], [], "o", color=COLORS[1], ms=8)
    ax_column.set(xlim=(0, max_len - 1), ylim=(-1.15, 1.15), xlabel="position", ylabel="value",
                  xticks=ticks, yticks=[-1, 0, 1])
    column_title = ax_column.set_title("", fontsize=10)

    (row_curve,) = ax_row.plot(range(d_model), table[start_position], color=COLORS[1], lw=1.5)
    (row_dot,) = ax_row.plot([], [], "o", color="black", ms=8)
    ax_row.set(xlim=(0, d_model - 1), ylim=(-1.15, 1.15), xlabel="dimension", xticks=ticks,
               yticks=[-1, 0, 1], yticklabels=[])
    row_title = ax_row.set_title("", fontsize=10)
    despine(ax_column, ax_row)
    fig.tight_layout()

    def update(position: int, dim: int) -> None:
        kind, wavelength = dimension_wave(dim, d_model)
        row_line.set_ydata([position, position])
        row_mark.set_ydata([position])
        column_line.set_xdata([dim, dim])
        column_mark.set_xdata([dim])
        column_curve.set_ydata(table[:, dim])
        column_dot.set_data([position], [table[position, dim]])
        column_title.set_text(f"dim {dim}: {kind}, wavelength {wavelength:.3g}")
        row_curve.set_ydata(table[position])
        row_dot.set_data([dim], [table[position, dim]])
        row_title.set_text(f"position {position}'s vector")

    return InteractiveFigure(
        fig,
        update,
        [
            Slider("position", positions, label="position (row)", initial=start_position),
            Slider("dim", dims, label="dimension (column)", initial=start_dim),
        ],
        # What update changes; the table, the axes and their labels are drawn once.
        animated=[row_line, column_line, row_mark, column_mark, column_curve, column_dot, column_title,
                  row_curve, row_dot, row_title],
        alt=ALT,
        dpi=DPI,
    )
