"""Chapter "From the original block to a modern LLM block": each step of the ladder, its training
curve against the 2017 block's, and every step's held-out loss (``ladder_explorer``); one head's
scores as every position shifts, with rotary embeddings inside attention and with sinusoidal
vectors added to the input (``shift_explorer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["ladder_explorer", "shift_explorer", "largest_changes", "change_label"]

ALT = (
    "Two panels. Left: training loss against step for the 2017 block in grey and for the chosen step "
    "of the ladder in colour. Right: a bar per step of the ladder, from the 2017 block to the "
    "Llama-style block, giving its held-out loss, the chosen step highlighted; the bar drops clearly "
    "at the step that moves positions inside attention (rotary embeddings), and changes little at "
    "the other steps."
)

TRAINED_ALT = (
    "Two panels. Left: held-out loss on the first 64 held-out windows against training step, every 250 steps to "
    "3,000, the mean of three seeds, for the zoo's 2017 block in grey and for the chosen rung of the trained "
    "ladder in colour. Right: a bar per rung, from the 2017 block to the Llama-style block with one key/value "
    "head, giving its held-out loss on every held-out file (the mean of three seeds), the chosen rung highlighted. "
    "The rungs with rotary embeddings start far below the 2017 block and end above it; the bars rise at that rung."
)


def ladder_explorer(names: Sequence[str], curves: Mapping[str, Sequence[tuple[int, float]]],
                    held_out: Mapping[str, float], start: str | None = None, *,
                    curve_label: str = "training loss (nats per character)", alt: str = ALT) -> InteractiveFigure:
    """A slider over the ladder's steps ``names`` (the first is the 2017 block): ``curves[name]`` is
    its training loss as ``(step, loss)`` pairs (or the loss the y-axis label ``curve_label`` names), ``held_out[name]`` its
    held-out loss; ``alt`` describes the figure (``TRAINED_ALT`` for the zoo's trained ladder)."""
    names = list(names)
    start = names[-1] if start is None else start
    fig = new_figure(9, 3.6)
    ax_curve, ax_bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    base_steps, base_losses = zip(*curves[names[0]])
    ax_curve.plot(base_steps, base_losses, color="0.6", linewidth=1.2, label=names[0])
    (line,) = ax_curve.plot(base_steps, base_losses, color=COLORS[0], linewidth=1.6, label="chosen step")
    every = [loss for name in names for _, loss in curves[name]]
    ax_curve.set(xlabel="training step", ylabel=curve_label,
                 ylim=(min(every) * 0.95, max(every) * 1.02))
    ax_curve.legend(frameon=False, fontsize=8)
    despine(ax_curve)
    curve_title = ax_curve.set_title("", fontsize=10)

    bars = ax_bars.barh(range(len(names)), [held_out[n] for n in names], color="0.75")
    ax_bars.set_yticks(range(len(names)), names, fontsize=8)
    ax_bars.invert_yaxis()
    low, high = min(held_out.values()), max(held_out.values())
    ax_bars.set(xlim=(low - 0.3 * (high - low) - 0.05, high + 0.15 * (high - low) + 0.02),
                xlabel="held-out loss (lower is better)")
    despine(ax_bars)
    bars_title = ax_bars.set_title("", fontsize=10)

    def update(step: str) -> None:
        steps, losses = zip(*curves[step])
        line.set_data(steps, losses)
        curve_title.set_text(f"{step} against {names[0]}")
        for name, bar in zip(names, bars):
            bar.set_color(COLORS[0] if name == step else "0.75")
        change = held_out[step] - held_out[names[0]]
        bars_title.set_text(f"{step}: {held_out[step]:.3f} ({change:+.3f} against 2017)")

    update(start)
    fig.tight_layout()
    return InteractiveFigure(fig, update, [Slider("step", names, label="step of the ladder", initial=start)],
                             animated=[line, curve_title, *bars, bars_title], alt=alt, dpi=DPI)


SHIFT_ALT = (
    "Two heatmaps side by side on one colour scale, queries down and keys across: the attention scores of "
    "one head for the same tokens placed at positions s, s + 1, ... for the chosen shift s. Left, rotary "
    "embeddings applied to the queries and keys inside attention: the matrix looks the same at every shift, "
    "and its title gives its largest change from shift 0, a millionth or less (float32 rounding). Right, "
    "sinusoidal position vectors added to the token embeddings before the projections: the matrix changes "
    "as the shift grows, and its title gives a largest change of order one. A line under the panels says "
    "that rotary scores depend only on the distance between positions."
)


def _matrix(scores) -> np.ndarray:
    """A tensor or array of scores as a float64 NumPy array (a tensor is detached first)."""
    if hasattr(scores, "detach"):
        scores = scores.detach().cpu().double()
    return np.asarray(scores, dtype=np.float64)


def largest_changes(shifts: Sequence[int], scores: Mapping[int, object]) -> dict[int, float]:
    """For each shift s: the largest ``|scores[s] - scores[shifts[0]]|``, over every (query, key) pair."""
    first = _matrix(scores[shifts[0]])
    return {s: float(np.abs(_matrix(scores[s]) - first).max()) for s in shifts}


def change_label(change: float) -> str:
    """A change as a title reads it: ``0`` exactly, rounding-sized ones as ``2e-06``, others as ``1.37``."""
    if change == 0:
        return "0"
    return f"{change:.0e}" if change < 1e-3 else f"{change:.2f}"


def _label_and_value(parent, x: float, y: float, label: str, widest: Sequence[str], renderer, **kwargs) -> Text:
    """A static ``label`` and, right after it, an empty Text returned for a value that changes; label
    and value are centred on ``x`` (in ``kwargs["transform"]``'s coordinates) for the widest value."""
    def width(text: str) -> float:  # in the transform's units
        box = parent.text(x, y, text, **kwargs)
        extent = box.get_window_extent(renderer)
        box.remove()
        left, right = kwargs["transform"].inverted().transform([(extent.x0, 0), (extent.x1, 0)])[:, 0]
        return right - left

    space = width("a b") - width("ab")
    start = x - (width(label) + space + max(width(v) for v in widest)) / 2
    # Drawn before the image in its Axes (zorder -1): the blitted background holds it, no redraw draws it.
    parent.text(start, y, label, ha="left", zorder=-1, **kwargs)
    return parent.text(start + width(label) + space, y, "", ha="left", **kwargs)


def shift_explorer(shifts: Sequence[int], rotary: Mapping[int, object], added: Mapping[int, object],
                   start: int | None = None) -> InteractiveFigure:
    """A slider over a shift s added to every position of the same L tokens (positions s .. s+L-1).

    ``rotary[s]`` and ``added[s]``: one head's ``(L, L)`` scores (tensors or arrays), with rotary
    embeddings applied to its queries and keys inside attention, and with sinusoidal position vectors
    added to the token embeddings before the projections. Both panels share one colour scale; over
    each panel, its largest change from ``shifts[0]``.
    """
    shifts = list(shifts)
    for name, scores in (("rotary", rotary), ("added", added)):
        missing = [s for s in shifts if s not in scores]
        if missing:
            raise ValueError(f"shift_explorer: {name} has no scores for the shifts {missing}")
    rotary = {s: _matrix(rotary[s]) for s in shifts}
    added = {s: _matrix(added[s]) for s in shifts}
    seq_len = rotary[shifts[0]].shape[0]
    wrong = {(name, s): m.shape for name, matrices in (("rotary", rotary), ("added", added))
             for s, m in matrices.items() if m.shape != (seq_len, seq_len)}
    if wrong:
        raise ValueError(f"shift_explorer: every score matrix must be (L, L) = ({seq_len}, {seq_len}), got {wrong}")
    start = shifts[0] if start is None else start
    changes = {"rotary": largest_changes(shifts, rotary), "added": largest_changes(shifts, added)}
    largest = max(np.abs(m).max() for matrices in (rotary, added) for m in matrices.values())

    fig = new_figure(8.5, 4.4, dpi=DPI)
    *axes, ax_bar = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 0.05]})
    fig.subplots_adjust(left=0.08, right=0.9, top=0.79, bottom=0.24, wspace=0.14)
    renderer = FigureCanvasAgg(fig).get_renderer()  # to measure the static labels, once
    images, values = [], []
    for ax, matrices, name, kind in zip(axes, (rotary, added), ("rotary inside attention", "sinusoidal added to the input"),
                                        changes):
        images.append(ax.imshow(matrices[start], cmap="viridis", vmin=-largest, vmax=largest,
                                interpolation="nearest", aspect="auto"))
        ax.set(xlabel="key j", xticks=range(seq_len), yticks=range(seq_len))
        ax.tick_params(labelsize=8)
        ax.set_title(name, fontsize=10, pad=17)
        values.append(_label_and_value(ax, 0.5, 1.025, f"largest change from shift {shifts[0]}:",
                                       [change_label(c) for c in changes[kind].values()], renderer,
                                       transform=ax.transAxes, va="bottom", fontsize=9.5))
    axes[0].set_ylabel("query i")  # the right panel's rows are the same queries
    fig.colorbar(images[1], cax=ax_bar, label="score $q_i \\cdot k_j / \\sqrt{d_k}$")  # one scale for both
    positions = _label_and_value(fig, 0.49, 0.955, f"the same {seq_len} tokens at positions",
                                 [f"{s} to {s + seq_len - 1}" for s in shifts], renderer,
                                 transform=fig.transFigure, va="center", fontsize=11)
    fig.text(0.49, 0.055, "The same tokens with every position shifted by s. Rotary scores depend only on the "
             "distance i - j,\nso they stay put (up to rounding); position vectors added to the input change "
             "every score.", ha="center", va="center", fontsize=9)

    # Only the numbers change: the redraw renders a few glyphs, not whole titles.
    def update(shift: int) -> None:
        positions.set_text(f"{shift} to {shift + seq_len - 1}")
        for image, value, matrices, kind in zip(images, values, (rotary, added), changes):
            image.set_data(matrices[shift])
            value.set_text(change_label(changes[kind][shift]))

    update(start)
    return InteractiveFigure(fig, update, [Slider("shift", shifts, label="shift s of every position", initial=start)],
                             animated=[*images, *values, positions], alt=SHIFT_ALT, dpi=DPI)
