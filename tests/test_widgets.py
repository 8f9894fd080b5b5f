"""InteractiveFigure: a live ipywidgets view and a kernel-free HTML fallback from one object."""

import base64
import re
from io import BytesIO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from lessons_src.widgets import MAX_FRAMES, InteractiveFigure, Slider  # noqa: E402


def _figure():
    fig, ax = plt.subplots(figsize=(3, 2), dpi=50)
    (line,) = ax.plot(np.zeros(8))
    ax.set_ylim(-3, 3)

    def update(amplitude, phase):
        line.set_ydata(amplitude * np.sin(np.arange(8) + phase))

    return fig, update


def _make(**kwargs):
    fig, update = _figure()
    sliders = [Slider("amplitude", [0.5, 1.0, 2.0], initial=1.0), Slider("phase", [0.0, 1.5], label="phase (rad)")]
    return InteractiveFigure(fig, update, sliders, alt="A sine wave.", **kwargs)


def test_frames_differ_and_cover_the_grid():
    figure = _make()
    frames = figure.frames()
    assert len(frames) == 6
    assert all(f.startswith(b"\x89PNG") for f in frames)
    assert len(set(frames)) == 6  # every slider value changes the plot


def test_static_html_is_self_contained():
    html = _make().to_html()
    assert "http://" not in html and "https://" not in html
    assert html.count('type="range"') == 2
    assert 'alt="A sine wave."' in html
    encoded = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert len(encoded) == 1  # the initial frame; the others live in the script's array
    frames = re.search(r"var frames=(\[.*?\]);", html).group(1)
    assert frames.count('"') == 2 * 6
    # initial frame: amplitude=1.0 (index 1), phase index 0 -> flat index 1 * 2 + 0 = 2
    assert 'data-frame="2"' in html
    assert base64.b64decode(encoded[0]) == _make().frames()[2]


def test_static_frames_are_palette_pngs_of_the_live_frames():
    from io import BytesIO

    from PIL import Image

    figure = _make()
    live = Image.open(BytesIO(figure.render(amplitude=2.0, phase=1.5))).convert("RGB")
    static = Image.open(BytesIO(figure.frames()[-1]))
    assert static.mode == "P" and static.size == live.size
    difference = np.abs(np.asarray(static.convert("RGB"), dtype=int) - np.asarray(live, dtype=int))
    assert difference.mean() < 2.0  # the same picture, up to palette rounding


def test_render_is_deterministic_and_restores_initial_state():
    figure = _make()
    first = figure.render()
    figure.frames()
    assert figure.render() == first


def test_widget_redraws_one_image_in_place():
    figure = _make()
    box = figure.widget()
    image = box.children[-1]
    before = image.value
    box.controls[0].value = 2.0
    assert image.value != before
    assert image.value == figure.render(amplitude=2.0)
    assert figure.widget() is box  # one widget, reused


def test_mime_bundle_has_widget_view_and_html_fallback():
    bundle = _make()._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/html"].startswith('<div class="ls-interactive"')
    assert "Sliders: amplitude (3 steps), phase (rad) (2 steps)" in bundle["text/plain"]


def test_widget_view_is_the_same_spec_ipywidgets_7_and_8_display():
    figure = _make()
    view = figure._repr_mimebundle_()["application/vnd.jupyter.widget-view+json"]
    assert view == {"version_major": 2, "version_minor": 0, "model_id": figure.widget().model_id}


def test_without_usable_ipywidgets_the_frames_still_show(monkeypatch):
    figure = _make()

    def broken():
        raise ImportError("No module named 'ipywidgets'")

    monkeypatch.setattr(figure, "widget", broken)
    with pytest.warns(UserWarning, match="live sliders unavailable .*No module named 'ipywidgets'"):
        bundle = figure._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" not in bundle
    assert bundle["text/html"].startswith('<div class="ls-interactive"')


def test_figure_is_detached_from_pyplot():
    fig, update = _figure()
    InteractiveFigure(fig, update, [Slider("amplitude", [1, 2]), Slider("phase", [0, 1])], alt="x")
    assert fig.number not in plt.get_fignums()  # the inline backend will not show a static copy


def test_bad_sliders():
    fig, update = _figure()
    with pytest.raises(ValueError, match="at least 2 values"):
        Slider("a", [1])
    with pytest.raises(ValueError, match=r"initial value 5 is not one of \[1, 2\]"):
        Slider("a", [1, 2], initial=5)
    with pytest.raises(ValueError, match="identifier"):
        Slider("not a name", [1, 2])
    with pytest.raises(ValueError, match="unique"):
        InteractiveFigure(fig, update, [Slider("a", [1, 2]), Slider("a", [1, 2])], alt="x")
    with pytest.raises(ValueError, match=f"more than {MAX_FRAMES}"):
        InteractiveFigure(fig, update, [Slider("a", range(10)), Slider("b", range(10))], alt="x")
    with pytest.raises(ValueError, match=r"unknown slider\(s\) \['nope'\]"):
        _make().render(nope=1)


def _frames_rgb(figure):
    from io import BytesIO

    from PIL import Image

    return [np.asarray(Image.open(BytesIO(figure.render(amplitude=a, phase=p))).convert("RGB"))
            for a in (0.5, 1.0, 2.0) for p in (0.0, 1.5)]


def test_blitting_draws_the_same_frames_as_full_redraws():
    def make(blit):
        fig, ax = plt.subplots(figsize=(3, 2), dpi=50)
        (line,) = ax.plot(np.zeros(8), zorder=3)
        title = ax.set_title("")
        ax.set_ylim(-3, 3)
        ax.set_xlabel("position")

        def update(amplitude, phase):
            line.set_ydata(amplitude * np.sin(np.arange(8) + phase))
            title.set_text(f"amplitude {amplitude}")

        sliders = [Slider("amplitude", [0.5, 1.0, 2.0]), Slider("phase", [0.0, 1.5])]
        return InteractiveFigure(fig, update, sliders, alt="x", animated=[line, title] if blit else ())

    full, blitted = _frames_rgb(make(False)), _frames_rgb(make(True))
    assert len({f.tobytes() for f in blitted}) == 6  # every frame differs
    for a, b in zip(full, blitted):
        assert np.array_equal(a, b)


def _ticks_figure(blit):
    """A line whose length changes the tick labels (static parts), under a legend."""
    fig, ax = plt.subplots(figsize=(3, 2), dpi=50)
    (line,) = ax.plot(np.zeros(8), zorder=3, label="wave")
    ax.legend(loc="upper left")  # drawn over the line by a full draw
    ax.set_ylim(-3, 3)

    def update(length, amplitude):
        line.set_data(np.arange(length), amplitude * np.sin(np.arange(length)))
        ax.set_xlim(0, length - 1)
        ax.set_xticks(range(length), [f"t{i}" for i in range(length)])

    sliders = [Slider("length", [4, 8]), Slider("amplitude", [0.5, 1.0, 2.0])]
    if not blit:
        return InteractiveFigure(fig, update, sliders, alt="x")
    return InteractiveFigure(fig, update, sliders, alt="x", animated=[line], background_sliders=["length"])


def test_background_sliders_keep_one_background_per_value():
    blitted, full = _ticks_figure(True), _ticks_figure(False)
    assert blitted.overlay == [blitted.fig.axes[0].get_legend()]  # a full draw puts it over the line
    for length in (4, 8, 4):
        for amplitude in (0.5, 2.0):
            a = np.asarray(Image.open(BytesIO(blitted.render(length=length, amplitude=amplitude))).convert("RGB"), int)
            b = np.asarray(Image.open(BytesIO(full.render(length=length, amplitude=amplitude))).convert("RGB"), int)
            assert np.abs(a - b).max() <= 2  # the same picture, up to the overlay's rounding
    assert sorted(blitted._backgrounds) == [(4,), (8,)]


def test_bad_background_sliders():
    fig, update = _figure()
    sliders = [Slider("amplitude", [1, 2]), Slider("phase", [0, 1])]
    with pytest.raises(ValueError, match=r"background_sliders \['nope'\] are not slider names"):
        InteractiveFigure(fig, update, sliders, alt="x", animated=fig.axes[0].lines, background_sliders=["nope"])
    with pytest.raises(ValueError, match="needs the animated artists"):
        InteractiveFigure(fig, update, sliders, alt="x", background_sliders=["phase"])
