"""Slider-driven figures that are live in a kernel and still interactive on the static site.

One object, two renderings (CONTRIBUTING.md, "Sliders"):

* In Jupyter, Colab or Binder, the notebook shows real ipywidgets sliders. Moving one calls
  ``update(**values)``, which changes the artists of *one* matplotlib figure in place; the figure
  is re-encoded as a PNG into the same ``Image`` widget (no new figure per move).
* On the built website there is no kernel. The same object's ``text/html`` rendering holds
  every frame of the slider grid, computed at build time, plus a few lines of inline JavaScript
  that swap the image when a slider moves. No CDN, no network.

The site build prefers ``text/html`` (``nb_mime_priority_overrides`` in ``_config.yml``);
Jupyter front ends prefer the widget view from the same MIME bundle, and one that cannot show
widgets (or a kernel without ipywidgets) shows the ``text/html`` frames. Works with ipywidgets 7.7
(Colab) and 8.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["Slider", "InteractiveFigure"]

#: The MIME type of a live ipywidgets view (front ends without widget support skip it).
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"

#: Frames above this count make a page too heavy for the static fallback.
MAX_FRAMES = 96


@dataclass(frozen=True)
class Slider:
    """One slider: a parameter ``name`` of ``update`` and the values it steps through."""

    name: str
    values: Sequence[Any]
    label: str | None = None
    initial: Any = None
    fmt: str = "{}"
    labels: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"Slider: name must be a Python identifier, got {self.name!r}")
        values = tuple(self.values)
        if len(values) < 2:
            raise ValueError(f"Slider {self.name!r}: needs at least 2 values, got {len(values)}")
        object.__setattr__(self, "values", values)
        if self.initial is not None and self.initial not in values:
            raise ValueError(
                f"Slider {self.name!r}: initial value {self.initial!r} is not one of {list(values)}"
            )
        object.__setattr__(self, "labels", tuple(self.fmt.format(v) for v in values))

    @property
    def initial_index(self) -> int:
        return 0 if self.initial is None else self.values.index(self.initial)

    @property
    def description(self) -> str:
        return self.label or self.name


def _fast_png(rgba: np.ndarray) -> bytes:
    """An (H, W, 4) uint8 canvas as an RGB PNG at zlib level 1: a few ms faster per redraw than
    matplotlib's RGBA level-6 PNG, for a slightly larger file (static frames are re-encoded)."""
    from PIL import Image

    image = Image.fromarray(rgba, "RGBA")
    if rgba[..., 3].min() < 255:  # a transparent figure: flatten onto white, not black
        image = Image.alpha_composite(Image.new("RGBA", image.size, "white"), image)
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _palette_png(png: bytes, colors: int = 128) -> bytes:
    """Re-encode an RGBA PNG with an adaptive palette (about 3x smaller for plots)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def _blit_layers(fig: Figure, animated: Sequence[Artist]) -> tuple[list[Artist], list[Artist]]:
    """Split a blitted figure's drawing into what is drawn on every redraw and what goes on top.

    A full draw draws each Axes' children in z-order (then insertion order). Per Axes, the
    animated artists and the static children between them (spines, reference lines) are drawn on
    every redraw in that order; the static children after the last animated one (a legend, the
    spines over an image) are drawn once into a transparent layer and laid over each redraw. Tick
    labels and titles stay in the background unless animated: they lie outside the plotting area.
    Animated artists outside any Axes are drawn last, in z-order. Returns (every redraw, on top).
    """
    from matplotlib.axis import Axis

    wanted = {id(artist) for artist in animated}
    every, on_top = [], []
    for ax in fig.axes:
        titles = (ax.title, ax._left_title, ax._right_title)
        inside = sorted((c for c in ax.get_children() if c is not ax.patch and c not in titles
                         and (id(c) in wanted or (c.get_visible() and not isinstance(c, Axis)))),
                        key=lambda c: c.get_zorder())
        mine = [i for i, c in enumerate(inside) if id(c) in wanted]
        if mine:
            every += inside[mine[0] : mine[-1] + 1]
            on_top += inside[mine[-1] + 1 :]
        every += [t for t in titles if id(t) in wanted]
    placed = {id(artist) for artist in every}
    every += sorted((a for a in animated if id(a) not in placed), key=lambda a: a.get_zorder())
    return every, on_top


class _Overlay:
    """Pixels drawn once on a transparent canvas, laid over each redraw (alpha blending)."""

    def __init__(self, rgba: np.ndarray) -> None:
        self.rows, self.cols = np.nonzero(rgba[..., 3])
        alpha = rgba[self.rows, self.cols, 3:4].astype(np.float32) / 255  # (N, 1): only drawn pixels
        self.color = rgba[self.rows, self.cols, :3] * alpha + 0.5  # premultiplied, +0.5 to round
        self.keep = 1 - alpha

    def blend_into(self, rgba: np.ndarray) -> None:
        under = rgba[self.rows, self.cols, :3]
        rgba[self.rows, self.cols, :3] = (self.color + under * self.keep).astype(np.uint8)


class InteractiveFigure:
    """A matplotlib figure redrawn by ``update(**slider_values)`` as sliders move.

    ``fig`` is drawn once; ``update`` must only change its artists (``set_data``,
    ``set_height``, ...), with the maths in pure, tested functions. Display the object as the
    last expression of a cell. ``alt`` describes the figure for screen readers.

    ``animated``: optionally, every artist that ``update`` changes. The rest of the figure (axes,
    tick labels, legends, colorbars) is then rendered once and reused, and each redraw draws only
    these artists on top of it (blitting): several times faster for figures with many labels.
    What a full draw would put over them inside their Axes (a legend, the spines over an image's
    edge) is drawn once too, into a transparent layer laid over each redraw, so a blitted frame
    looks like a full redraw (see ``_blit_layers``).

    ``background_sliders``: with ``animated``, the names of the sliders whose values also change
    the static parts (tick labels, limits). One background is drawn and kept per combination of
    their values, so moving any other slider only redraws the animated artists.
    """

    def __init__(
        self,
        fig: Figure,
        update: Callable[..., None],
        sliders: Sequence[Slider],
        *,
        alt: str,
        dpi: float | None = None,
        animated: Sequence[Artist] = (),
        background_sliders: Sequence[str] = (),
    ) -> None:
        sliders = tuple(sliders)
        if not sliders:
            raise ValueError("InteractiveFigure: give at least one Slider")
        names = [s.name for s in sliders]
        if len(set(names)) != len(names):
            raise ValueError(f"InteractiveFigure: slider names must be unique, got {names}")
        n_frames = 1
        for s in sliders:
            n_frames *= len(s.values)
        if n_frames > MAX_FRAMES:
            raise ValueError(
                f"InteractiveFigure: {n_frames} frames ({' x '.join(str(len(s.values)) for s in sliders)}) "
                f"is more than {MAX_FRAMES}; use fewer slider values"
            )
        background_sliders = tuple(background_sliders)
        if set(background_sliders) - set(names):
            raise ValueError(
                f"InteractiveFigure: background_sliders {sorted(set(background_sliders) - set(names))} "
                f"are not slider names {names}"
            )
        if background_sliders and not animated:
            raise ValueError("InteractiveFigure: background_sliders needs the animated artists too")
        self.fig = fig
        self.update = update
        self.sliders = sliders
        self.alt = alt
        if dpi is not None:
            fig.set_dpi(dpi)
        # Draw off-screen on the Agg canvas, and detach from pyplot so the inline backend
        # does not also show a static copy of the figure at the end of the cell.
        # (Closing first: pyplot swaps in a bare canvas when it lets go of a figure.)
        import matplotlib.pyplot as plt

        plt.close(fig)
        FigureCanvasAgg(fig)
        self._widget = None
        self.animated, self.overlay = _blit_layers(fig, animated) if animated else ([], [])
        for artist in (*self.animated, *self.overlay):
            artist.set_animated(True)  # left out of a full draw: the reused background
        self.background_sliders = background_sliders
        # background_sliders' values -> (the saved background, the overlay or None)
        self._backgrounds: dict[tuple, tuple[Any, _Overlay | None]] = {}

    # -- rendering -------------------------------------------------------------------------
    def initial_values(self) -> dict[str, Any]:
        return {s.name: s.values[s.initial_index] for s in self.sliders}

    def render(self, **values: Any) -> bytes:
        """Call ``update(**values)`` and return the figure as PNG bytes."""
        unknown = set(values) - {s.name for s in self.sliders}
        if unknown:
            raise ValueError(f"InteractiveFigure.render: unknown slider(s) {sorted(unknown)}")
        params = {**self.initial_values(), **values}
        self.update(**params)
        canvas = self.fig.canvas
        overlay = None
        if not self.animated:
            canvas.draw()  # not savefig: no bbox or layout pass
        else:
            key = tuple(params[name] for name in self.background_sliders)
            if key not in self._backgrounds:
                self._backgrounds[key] = self._draw_background()
            background, overlay = self._backgrounds[key]
            canvas.restore_region(background)
            for artist in self.animated:
                self.fig.draw_artist(artist)
        pixels = np.asarray(canvas.buffer_rgba())
        if overlay is not None:
            overlay.blend_into(pixels)
        return _fast_png(pixels)

    def _draw_background(self) -> tuple[Any, _Overlay | None]:
        """Everything but the animated artists and the overlay, then the overlay on its own."""
        canvas = self.fig.canvas
        canvas.draw()  # leaves out every artist marked animated
        background = canvas.copy_from_bbox(self.fig.bbox)
        if not self.overlay:
            return background, None
        renderer = canvas.get_renderer()
        renderer.clear()  # transparent
        for artist in self.overlay:
            artist.draw(renderer)
        return background, _Overlay(np.asarray(canvas.buffer_rgba()))

    def frames(self) -> list[bytes]:
        """Every frame of the slider grid, in row-major order (last slider fastest), as
        palette PNGs: flat plots lose nothing visible and the page weighs a third as much."""
        grid = itertools.product(*(s.values for s in self.sliders))
        names = [s.name for s in self.sliders]
        frames = [_palette_png(self.render(**dict(zip(names, combo)))) for combo in grid]
        self.render()  # leave the figure at its initial state
        return frames

    # -- live widget -----------------------------------------------------------------------
    def widget(self):
        """The ipywidgets view: one SelectionSlider per parameter above an Image, redrawn in place."""
        if self._widget is not None:
            return self._widget
        import ipywidgets as w

        image = w.Image(value=self.render(), format="png", layout=w.Layout(max_width="100%"))
        controls = []
        for s in self.sliders:
            control = w.SelectionSlider(
                options=list(zip(s.labels, s.values)),
                value=s.values[s.initial_index],
                description=s.description,
                continuous_update=True,
                style={"description_width": "initial"},
                layout=w.Layout(width="min(32rem, 100%)"),
            )
            controls.append(control)

        def redraw(_change=None) -> None:
            image.value = self.render(**{s.name: c.value for s, c in zip(self.sliders, controls)})

        for control in controls:
            control.observe(redraw, names="value")
        self._widget = w.VBox([*controls, image])
        self._widget.redraw = redraw  # used by the benchmark to time one update
        self._widget.controls = controls
        return self._widget

    # -- static fallback -------------------------------------------------------------------
    def to_html(self) -> str:
        """Self-contained HTML: every frame as a data URI, range inputs and inline JS, no network."""
        frames = [base64.b64encode(f).decode("ascii") for f in self.frames()]
        uid = "ls-" + hashlib.sha1("".join(frames).encode("ascii")).hexdigest()[:12]
        sizes = [len(s.values) for s in self.sliders]
        start = 0
        for s in self.sliders:
            start = start * len(s.values) + s.initial_index
        rows = []
        for i, s in enumerate(self.sliders):
            label = html.escape(s.description)
            rows.append(
                f'<label class="ls-slider" style="display:flex;gap:.75em;align-items:center;margin:.2em 0">'
                f'<span style="min-width:9em">{label}</span>'
                f'<input type="range" min="0" max="{len(s.values) - 1}" step="1" '
                f'value="{s.initial_index}" data-index="{i}" aria-label="{label}" style="flex:0 1 20rem">'
                f'<output style="min-width:4em;font-variant-numeric:tabular-nums">'
                f"{html.escape(s.labels[s.initial_index])}</output></label>"
            )
        script = (
            "(function(){"
            f'var root=document.getElementById("{uid}");'
            f"var frames={json.dumps(frames)};"
            f"var labels={json.dumps([list(s.labels) for s in self.sliders])};"
            f"var sizes={json.dumps(sizes)};"
            'var img=root.querySelector("img");'
            'var inputs=root.querySelectorAll("input[type=range]");'
            "function show(){var k=0;inputs.forEach(function(inp,i){"
            "var v=parseInt(inp.value,10);k=k*sizes[i]+v;"
            'inp.parentNode.querySelector("output").textContent=labels[i][v];});'
            'img.src="data:image/png;base64,"+frames[k];'
            'root.setAttribute("data-frame",String(k));}'
            'inputs.forEach(function(inp){inp.addEventListener("input",show);});'
            "})();"
        )
        return (
            f'<div class="ls-interactive" id="{uid}" data-frame="{start}">'
            f'<div class="ls-controls">{"".join(rows)}</div>'
            f'<img src="data:image/png;base64,{frames[start]}" alt="{html.escape(self.alt)}" '
            f'style="max-width:100%;height:auto">'
            f"<script>{script}</script></div>"
        )

    # -- display ---------------------------------------------------------------------------
    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        bundle: dict[str, Any] = {}
        try:
            # The widget view by hand: ipywidgets 8 has _repr_mimebundle_, but 7.7 (Colab's) only
            # _ipython_display_; both give this same view spec.
            bundle[WIDGET_VIEW_MIME] = self.widget().get_view_spec()
        except Exception as exc:  # no usable ipywidgets: the precomputed frames below still work
            warnings.warn(f"live sliders unavailable ({type(exc).__name__}: {exc}); "
                          "showing the precomputed frames instead", stacklevel=2)
        bundle["text/html"] = self.to_html()
        names = ", ".join(f"{s.description} ({len(s.values)} steps)" for s in self.sliders)
        bundle["text/plain"] = f"Interactive figure: {self.alt} Sliders: {names}."
        return bundle

    def __repr__(self) -> str:
        return f"InteractiveFigure(sliders={[s.name for s in self.sliders]})"
