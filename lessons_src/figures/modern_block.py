"""Chapter "From the original block to a modern LLM block": each step of the ladder, its training
curve against the 2017 block's, and every step's held-out loss."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["ladder_explorer"]

ALT = (
    "Two panels. Left: training loss against step for the 2017 block in grey and for the chosen step "
    "of the ladder in colour. Right: a bar per step of the ladder, from the 2017 block to the "
    "Llama-style block, giving its held-out loss, the chosen step highlighted; the bar drops clearly "
    "at the step that moves positions inside attention (rotary embeddings), and changes little at "
    "the other steps."
)


def ladder_explorer(names: Sequence[str], curves: Mapping[str, Sequence[tuple[int, float]]],
                    held_out: Mapping[str, float], start: str | None = None) -> InteractiveFigure:
    """A slider over the ladder's steps ``names`` (the first is the 2017 block): ``curves[name]`` is
    its training loss as ``(step, loss)`` pairs, ``held_out[name]`` its held-out loss."""
    names = list(names)
    start = names[-1] if start is None else start
    fig = new_figure(9, 3.6)
    ax_curve, ax_bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    base_steps, base_losses = zip(*curves[names[0]])
    ax_curve.plot(base_steps, base_losses, color="0.6", linewidth=1.2, label=names[0])
    (line,) = ax_curve.plot(base_steps, base_losses, color=COLORS[0], linewidth=1.6, label="chosen step")
    every = [loss for name in names for _, loss in curves[name]]
    ax_curve.set(xlabel="training step", ylabel="training loss (nats per character)",
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
                             animated=[line, curve_title, *bars, bars_title], alt=ALT, dpi=DPI)
