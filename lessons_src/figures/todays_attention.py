"""Chapter "Attention in today's open models": one query's scores through a soft cap and a learned sink."""

from __future__ import annotations

import math

import numpy as np
import torch

from lessons_src.llm import softmax_with_sink
from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["capped_sink_weights", "cap_and_sink_explorer"]

ALT = (
    "Two panels. Left: the soft cap, cap times tanh of score over cap, against the raw score: a straight line "
    "through zero for small scores that bends and flattens at plus and minus the cap (dashed lines); the query's "
    "raw scores are dots on the curve. Right: the query's attention weights over its keys as bars, and one more "
    "bar, the sink's share of the softmax, which no value receives; a lower cap evens out the bars, a larger sink "
    "logit takes weight from every key."
)


def capped_sink_weights(scores: torch.Tensor, cap: float, sink: float) -> tuple[np.ndarray, float]:
    """One query's weights over its keys after ``cap · tanh(s / cap)`` (``cap = inf``: none) and a softmax with a
    sink logit ``sink`` (``-inf``: no sink): ``(weights (L_k,), the sink's share)``."""
    capped = scores if math.isinf(cap) else cap * torch.tanh(scores / cap)
    if math.isinf(sink) and sink < 0:
        return capped.softmax(-1).numpy(), 0.0
    weights = softmax_with_sink(capped.view(1, 1, 1, -1), torch.tensor([sink], dtype=scores.dtype))[0, 0, 0]
    return weights.numpy(), float(1 - weights.sum())


def cap_and_sink_explorer(scores: torch.Tensor, caps: list[float], sinks: list[float]) -> InteractiveFigure:
    """Sliders for the cap (``inf``: none) and the sink logit (``-inf``: none) over one query's raw ``scores (L_k,)``."""
    scores = scores.detach().double()
    top = float(scores.abs().max()) * 1.1
    fig = new_figure(8.5, 3.4)
    ax_cap, ax_bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    grid = torch.linspace(-top, top, 200, dtype=torch.float64)
    (curve,) = ax_cap.plot(grid.numpy(), grid.numpy(), color=COLORS[0])
    (dots,) = ax_cap.plot(scores.numpy(), scores.numpy(), "o", color=COLORS[1], markersize=4)
    upper = ax_cap.axhline(top, color="grey", linestyle="--", linewidth=0.8)
    lower = ax_cap.axhline(-top, color="grey", linestyle="--", linewidth=0.8)
    ax_cap.set(xlabel="raw score s", ylabel="score after the cap", xlim=(-top, top), ylim=(-top, top))
    despine(ax_cap)
    cap_title = ax_cap.set_title("", fontsize=10)
    keys = np.arange(scores.numel())
    sink_at = scores.numel() + 1  # one empty slot before the sink's bar: the sink is not a key
    bars = ax_bars.bar([*keys, sink_at], np.zeros(len(keys) + 1), color=[COLORS[0]] * len(keys) + [COLORS[3]])
    # At most about ten key labels: the chapter's 17 two-digit labels ran together ("10111213...16sink").
    labelled = keys[:: max(1, math.ceil(len(keys) / 10))]
    ax_bars.set_xticks([*labelled, sink_at], [*map(str, labelled), "sink"])
    ax_bars.set_xticks(keys, minor=True)  # every key keeps its tick mark
    ax_bars.set(xlabel="key j", ylabel="weight", ylim=(0, 1))
    despine(ax_bars)
    bars_title = ax_bars.set_title("", fontsize=10)

    def update(cap: float, sink: float) -> None:
        shown = grid if math.isinf(cap) else cap * torch.tanh(grid / cap)
        curve.set_ydata(shown.numpy())
        dots.set_ydata((scores if math.isinf(cap) else cap * torch.tanh(scores / cap)).numpy())
        bound = top if math.isinf(cap) else cap
        upper.set_ydata([bound, bound])
        lower.set_ydata([-bound, -bound])
        cap_title.set_text("no cap" if math.isinf(cap) else f"cap {cap:g}: every score in (-{cap:g}, {cap:g})")
        weights, share = capped_sink_weights(scores, cap, sink)
        for bar, height in zip(bars, [*weights, share]):
            bar.set_height(height)
        bars_title.set_text(("no sink" if math.isinf(sink) else f"sink logit {sink:g}: ") +
                            ("" if math.isinf(sink) else f"the sink takes {share:.2f}") +
                            f"; largest weight {weights.max():.2f}")

    update(caps[0], sinks[0])
    fig.tight_layout()
    fmt = "{:g}"
    return InteractiveFigure(
        fig, update,
        [Slider("cap", caps, label="cap", initial=caps[0], fmt=fmt),
         Slider("sink", sinks, label="sink logit", initial=sinks[0], fmt=fmt)],
        animated=[curve, dots, upper, lower, cap_title, *bars, bars_title], alt=ALT, dpi=DPI,
    )
