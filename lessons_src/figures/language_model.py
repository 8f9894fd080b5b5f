"""Chapter "A language model and its heads": the next-character distribution and a sample, by
temperature and top-k."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lessons_src.language_model import next_token_probs
from lessons_src.widgets import InteractiveFigure, Slider

from ._style import COLORS, DPI, despine, new_figure

__all__ = ["shown_char", "temperature_explorer"]

ALT = (
    "Two panels. Left: bars of the probability of the most likely next characters after the prompt, "
    "at the chosen temperature and top-k; a low temperature concentrates the probability on the likeliest few "
    "characters, a high one spreads it, and top-k leaves only k bars above zero. Right: a text "
    "sampled from the model at those settings, continuing the prompt."
)


def shown_char(c: str) -> str:
    """A character as a bar label: the space and the newline made visible."""
    return {" ": "sp", "\n": "\\n", "\t": "\\t"}.get(c, c)


def temperature_explorer(chars: Sequence[str], logits: Tensor, samples: Mapping[tuple[float, int | None], str],
                         prompt: str, shown: int = 12) -> InteractiveFigure:
    """Sliders for the temperature and top-k over the next-character ``logits (V,)`` after ``prompt``
    and ``samples[temperature, top_k]``, a text sampled at each setting (``top_k`` None = all)."""
    temperatures = sorted({t for t, _ in samples})
    top_ks = sorted({k for _, k in samples}, key=lambda k: (k is None, k or 0))
    order = torch.argsort(logits, descending=True)[:shown].tolist()  # the most likely at T = 1
    fig = new_figure(9, 3.4)
    ax_bars, ax_text = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.25]})
    bars = ax_bars.bar(range(shown), [0.0] * shown, color=COLORS[0])
    ax_bars.set_xticks(range(shown), [shown_char(chars[i]) for i in order])
    ax_bars.set(ylim=(0, 1.05), ylabel="probability", xlabel=f"the {shown} likeliest next characters")
    despine(ax_bars)
    bars_title = ax_bars.set_title("", fontsize=10)
    ax_text.set_axis_off()
    ax_text.set_title(f"a sample after {prompt!r}", fontsize=10)
    text = ax_text.text(0.0, 1.0, "", va="top", ha="left", family="monospace", fontsize=8.5,
                        transform=ax_text.transAxes)

    def update(temperature: float, top_k: int) -> None:
        k = None if top_k == 0 else top_k
        probs = next_token_probs(logits, temperature, k)
        for bar, i in zip(bars, order):
            bar.set_height(probs[i].item())
        kept = "all characters" if k is None else f"top {k}"
        bars_title.set_text(f"τ = {temperature:g}, {kept}: largest p = {probs.max().item():.2f}")
        body = (prompt + samples[temperature, k]).replace("\n", " ")
        text.set_text("\n".join(textwrap.wrap(body, 44)[:12]))

    update(1.0 if 1.0 in temperatures else temperatures[0], 0)
    fig.tight_layout()
    return InteractiveFigure(
        fig, update,
        [Slider("temperature", temperatures, label="temperature τ", initial=1.0 if 1.0 in temperatures else None),
         Slider("top_k", [0 if k is None else k for k in top_ks], label="top-k (0 = all)", initial=0)],
        animated=[*bars, bars_title, text], alt=ALT, dpi=DPI,
    )
