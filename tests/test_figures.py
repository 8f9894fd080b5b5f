"""lessons_src.figures: every chapter's slider figure built, every frame drawn, every slider alive;
the small pure functions behind the pictures checked by value."""

import importlib
import inspect
import io
import itertools
import math
from pathlib import Path

import matplotlib
import nbformat

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from PIL import Image  # noqa: E402

import book  # noqa: E402  (scripts/, on sys.path: tests/conftest.py)
from lessons_src import (  # noqa: E402
    apply_rope,
    rope_frequencies,
    sinusoidal_positional_encoding,
    sliding_window_mask,
)
from lessons_src.figures import (  # noqa: E402
    alibi,
    attention_from_scratch,
    decoder_and_cross_attention,
    efficient_attention,
    encoder_block,
    grouped_query_and_kv_cache,
    language_model,
    latent_attention,
    layer_norm_placement,
    masking,
    modern_block,
    multi_head_attention,
    rotary_embeddings,
    scaling,
    tiled_attention,
    todays_attention,
    training_attention,
)
from lessons_src.figures._style import DPI  # noqa: E402
from lessons_src.widgets import InteractiveFigure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


from figure_builders import (  # noqa: E402  (tests/, on sys.path)
    FIGURES,
    K_SMALL,
    KEYS_2D,
    LATENT_CONFIG,
    Q_SMALL,
    VALUES_2D,
    _shift_scores,
    _steer_query,
    _temperature_explorer,
)


def test_steer_query_draws_what_attend_returns():
    # A chapter passes its own attention: the bars show what it returns.
    uniform = attention_from_scratch.steer_query(
        ["The", "cat", "sat", "down"], KEYS_2D, VALUES_2D, [0.0, 90.0], [1.0, 2.0], start_angle=0.0,
        attend=lambda angle, length: (torch.full((4,), 0.25), torch.zeros(2)))
    uniform.render(angle=90.0)
    assert [bar.get_height() for bar in _bars(uniform)] == [0.25] * 4
    default = _steer_query()
    default.render(angle=90.0, length=2.5)
    weights, _ = attention_from_scratch.attend_2d(90.0, 2.5, KEYS_2D, VALUES_2D)
    assert [bar.get_height() for bar in _bars(default)] == weights.tolist()


def _bars(figure):
    return [artist for artist in figure.animated if isinstance(artist, Rectangle)]


#: ``{topic: "book/<NN>_<topic>"}`` for every chapter of _toc.yml (scripts/book.py reads it).
CHAPTERS = {page.split("/", 1)[1][3:]: page for page in book.pages("Chapters")}


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)


@pytest.fixture(scope="module", params=sorted(FIGURES))
def chapter_figure(request):
    """(the chapter's module name, the name of the figure's alt text constant, the figure)."""
    build, alt = FIGURES[request.param]
    return request.param.split(".")[0], alt, build()


def _module(topic: str):
    return importlib.import_module(f"lessons_src.figures.{topic}")


def _slider_functions(module) -> list[str]:
    """The public functions of a figure module that return an InteractiveFigure (by their annotation)."""
    return [name for name, fn in vars(module).items()
            if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("_")
            and inspect.signature(fn).return_annotation in (InteractiveFigure, "InteractiveFigure")]


def test_the_chapters_are_read_from_the_toc():
    assert len(CHAPTERS) == len(list((ROOT / "book").glob("[0-9][0-9]_*.ipynb")))
    assert CHAPTERS["masking"] == "book/03_masking"


@pytest.mark.parametrize("topic", sorted(CHAPTERS))
def test_every_chapter_has_a_figure_module_named_after_it(topic):
    """Every chapter shows at least one slider figure, built in lessons_src/figures/<topic>.py, whose
    docstring starts with the chapter's title (CONTRIBUTING.md, "Add a chapter")."""
    page = CHAPTERS[topic]
    path = ROOT / "lessons_src" / "figures" / f"{topic}.py"
    assert path.exists(), (f"{page}.ipynb has no figure module: every chapter shows at least one slider figure, "
                           f"built by a function of lessons_src/figures/{topic}.py (CONTRIBUTING.md, \"Add a chapter\")")
    module = _module(topic)
    title = nbformat.read(ROOT / f"{page}.ipynb", as_version=4).cells[0].source.splitlines()[0]
    expected = f'Chapter "{title[2:].split(":")[0].strip()}"'
    assert (module.__doc__ or "").startswith(expected), f"the docstring of {path.relative_to(ROOT)} must start with {expected}"
    assert _slider_functions(module), (f"lessons_src/figures/{topic}.py has no function annotated "
                                       "`-> InteractiveFigure`: the chapter's slider figure is built there")


def test_every_figure_module_belongs_to_a_chapter():
    import lessons_src.figures as figures

    orphans = [f"lessons_src/figures/{name}.py" for name in figures.__all__ if name not in CHAPTERS]
    assert not orphans, (f"{orphans}: no chapter of _toc.yml is named after these figure modules "
                         "(book/<NN>_<topic>.ipynb for lessons_src/figures/<topic>.py)")


@pytest.mark.parametrize("topic", sorted(CHAPTERS))
def test_every_slider_function_has_a_builder_here(topic):
    """Each slider figure is built, drawn and moved below: it needs small inputs, in FIGURES (tests/figure_builders.py)."""
    if not (ROOT / "lessons_src" / "figures" / f"{topic}.py").exists():
        pytest.skip("no figure module (test_every_chapter_has_a_figure_module_named_after_it fails)")
    missing = [f"{topic}.{name}" for name in _slider_functions(_module(topic)) if f"{topic}.{name}" not in FIGURES]
    assert not missing, (f"{missing}: add to FIGURES in tests/figure_builders.py a builder that calls each with small "
                         "inputs, and the name of its alt text constant (CONTRIBUTING.md, \"Add a chapter\")")


def test_figure_has_its_alt_text(chapter_figure):
    name, alt, figure = chapter_figure
    module = _module(name)
    assert isinstance(figure, InteractiveFigure), f"{name}: a slider figure is an InteractiveFigure"
    assert figure.alt == getattr(module, alt) and len(figure.alt) > 100, (
        f"lessons_src/figures/{name}.py: pass alt={alt}, a constant of the module of over 100 characters")
    assert figure.fig.get_dpi() == DPI, f"lessons_src/figures/{name}.py: pass dpi=DPI (from ._style) to InteractiveFigure"


def test_every_frame_renders(chapter_figure):
    *_, figure = chapter_figure
    frames = figure.frames()
    assert len(frames) == math.prod(len(s.values) for s in figure.sliders)
    width, height = figure.fig.canvas.get_width_height()
    for frame in frames:
        assert frame.startswith(b"\x89PNG")
        assert Image.open(io.BytesIO(frame)).size == (width, height)


def test_moving_each_slider_changes_the_image(chapter_figure):
    *_, figure = chapter_figure
    initial = figure.initial_values()
    first = figure.render()
    for slider in figure.sliders:
        for value in slider.values:
            if value != initial[slider.name]:
                assert figure.render(**{slider.name: value}) != first, (slider.name, value)
    assert figure.render() == first  # back at the start: the same picture


def test_blitting_draws_what_a_full_redraw_draws(chapter_figure):
    # The animated artists are drawn over a saved background: the picture must not change.
    *_, figure = chapter_figure
    grid = list(itertools.product(*(s.values for s in figure.sliders)))
    names = [s.name for s in figure.sliders]
    for combo in (grid[0], grid[-1]):
        values = dict(zip(names, combo))
        blitted = _pixels(figure.render(**values))
        for artist in (*figure.animated, *figure.overlay):
            artist.set_animated(False)
        full = figure.fig.canvas
        full.draw()
        drawn = np.asarray(full.buffer_rgba())[..., :3].astype(int)
        for artist in (*figure.animated, *figure.overlay):
            artist.set_animated(True)
        assert np.abs(blitted - drawn).mean() < 0.005, values  # a few tick marks' half pixels
    figure.render()


def _crowded_tick_labels(fig) -> list[str]:
    """Pairs of one axis's tick labels, as drawn, closer than a space (0.3 em): "10111213" reads as one number."""
    renderer = fig.canvas.get_renderer()
    crowded = []
    for number, ax in enumerate(fig.axes):
        for axis, coordinate in ((ax.xaxis, 0), (ax.yaxis, 1)):
            low, high = sorted(axis.get_view_interval())
            labels = [label for label in axis.get_ticklabels() if label.get_visible() and label.get_text().strip()
                      and low <= label.get_position()[coordinate] <= high]
            for a, b in itertools.combinations(labels, 2):
                half_space = 0.15 * max(a.get_fontsize(), b.get_fontsize()) * fig.dpi / 72
                box_a, box_b = (label.get_window_extent(renderer).padded(half_space) for label in (a, b))
                if box_a.overlaps(box_b):
                    crowded.append(f"axes {number} {axis.axis_name}: {a.get_text()!r} and {b.get_text()!r}")
    return crowded


def test_tick_labels_stay_apart(chapter_figure):
    """Each tick label is a space or more from the next once drawn, at the first and the last slider values."""
    name, _, figure = chapter_figure
    grid = list(itertools.product(*(s.values for s in figure.sliders)))
    for combo in (grid[0], grid[-1]):
        values = dict(zip([s.name for s in figure.sliders], combo))
        figure.render(**values)
        figure.fig.canvas.draw()
        crowded = _crowded_tick_labels(figure.fig)
        assert not crowded, f"lessons_src/figures/{name}.py at {values}: tick labels run together: {crowded}"
    figure.render()


# -- the pure functions, by value ---------------------------------------------------------------
def test_query_vector_and_attend_2d():
    torch.testing.assert_close(attention_from_scratch.query_vector(90.0, 2.0), torch.tensor([0.0, 2.0]))
    keys = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    values = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    weights, output = attention_from_scratch.attend_2d(0.0, math.sqrt(2), keys, values)
    # scores ±sqrt(2)/sqrt(2) = ±1: weights softmax([1, -1])
    expected = torch.softmax(torch.tensor([1.0, -1.0]), dim=0)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(output, expected)  # values are the unit vectors
    weights, _ = attention_from_scratch.attend_2d(90.0, 1.0, keys, values)  # orthogonal: even split
    torch.testing.assert_close(weights, torch.tensor([0.5, 0.5]))


def test_bar_label_style():
    assert attention_from_scratch.bar_label_style(0.9) == {"y": pytest.approx(0.87), "va": "top",
                                                            "color": "white", "text": "0.90"}
    assert attention_from_scratch.bar_label_style(0.25) == {"y": pytest.approx(0.28), "va": "bottom",
                                                             "color": "black", "text": "0.25"}


def test_scaling_titles():
    assert scaling.scores_title(64, "off", 7.96) == "Scores: std 7.96 (√d_k = 8)"
    assert scaling.scores_title(64, "on", 0.995) == "Scores: std 0.99 (scaled: about 1)"
    assert scaling.weights_title(0.876) == "Weights: largest per row 0.88 on average"


def test_masking_helpers():
    assert masking.square_extent(4) == (-0.5, 3.5, 3.5, -0.5)
    assert masking.mask_title("on") == "mask: padding & causal\nblue: may attend, grey: blocked"
    assert masking.mask_title("off").startswith("mask: padding only\n")
    assert masking.weights_title(6, 2) == "weights: 4 real + 2 <pad>"
    assert masking.MASK_CMAP(1.0)[:3] != masking.MASK_CMAP(0.0)[:3]


def test_entropy_and_head_entropies():
    uniform, one_hot = torch.full((8,), 1 / 8), torch.eye(8)[3]
    torch.testing.assert_close(multi_head_attention.entropy(uniform), torch.tensor(math.log(8)))
    assert multi_head_attention.entropy(one_hot) == 0
    # Two sharp heads that look at different keys: each has entropy 0, their average log 2.
    maps = torch.stack([torch.eye(4), torch.eye(4).roll(1, dims=-1)])  # (2, 4, 4)
    per_head, average = multi_head_attention.head_entropies(maps)
    torch.testing.assert_close(per_head, torch.zeros(2))
    assert average == pytest.approx(math.log(2))


def test_head_titles():
    assert multi_head_attention.head_titles(4, 1) == ("head 1 of H = 4", "", "average of the 4 heads")
    assert multi_head_attention.head_titles(2, 5) == ("head 5: not in H = 2", "H = 2 has only\nheads 0 to 1",
                                                      "average of the 2 heads")
    assert multi_head_attention.head_titles(1, 0)[2] == "the only head (H = 1)"


def test_curve_steps_and_map_title():
    steps = training_attention.curve_steps(2000)
    assert steps[0] == 0 and steps[1] == 1 and steps[-1] == 1999
    assert steps == sorted(set(steps)) and 100 <= len(steps) <= 151
    assert steps[:11] == list(range(11))  # every step at first (the symlog axis is linear to 10) ...
    assert np.diff(np.log(steps[10:])).max() < 0.1  # ... then log-spaced: no big jump on a log axis
    assert training_attention.map_title(20, 0.512) == "step 20\n0.51 on the anti-diagonal"


def test_dimension_wave_matches_the_table():
    table = sinusoidal_positional_encoding(64, 64).double()
    positions = torch.arange(64, dtype=torch.float64)
    for dim in (0, 1, 6, 17, 62, 63):
        kind, wavelength = encoder_block.dimension_wave(dim, 64)
        assert kind == ("sin" if dim % 2 == 0 else "cos")
        wave = getattr(torch, kind)(2 * math.pi * positions / wavelength)
        torch.testing.assert_close(table[:, dim], wave, atol=1e-5, rtol=1e-5)
    assert encoder_block.dimension_wave(0, 64)[1] == pytest.approx(2 * math.pi)
    assert encoder_block.dimension_wave(63, 64)[1] == pytest.approx(2 * math.pi * 10000 ** (62 / 64))


def test_layer_norm_titles():
    post, pre = torch.tensor([0.2, 0.3, 0.4]), torch.tensor([0.4, 0.3, 0.2])
    assert layer_norm_placement.last_over_first(post) == pytest.approx(2.0)
    assert layer_norm_placement.depth_title(3, post, pre) == "N = 3: last/first layer 2.00 (post-LN), 0.50 (pre-LN)"


def test_cross_attention_title():
    assert decoder_and_cross_attention.map_title(2, 300, 0.6789) == "layer 2, step 300: anti-diagonal mass 0.68"


def test_window_share_and_bar_label():
    for seq_len, window in ((10, 3), (64, 16), (8, 8), (5, 9)):
        allowed = sliding_window_mask(seq_len, window).sum().item()
        assert efficient_attention.window_share(seq_len, window) == pytest.approx(allowed / seq_len**2)
    assert efficient_attention.bar_label(1234.5) == "1234"
    assert efficient_attention.bar_label(12.345) == "12.3"
    assert efficient_attention.bar_label(0.01234) == "0.0123"


def test_assignment_and_its_picture():
    matrix = grouped_query_and_kv_cache.assignment(8, 2)
    assert matrix.shape == (8, 2)
    assert matrix.argmax(dim=1).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # repeat_interleave, not repeat
    picture = grouped_query_and_kv_cache.assignment_picture(2)
    assert picture.shape == (8, 8, 3)
    assert (picture[:, 2:] == grouped_query_and_kv_cache.ABSENT).all()  # KV heads 2..7 do not exist
    assert (picture[:4, 0] == picture[0, 0]).all() and (picture[4:, 1] == picture[4, 1]).all()
    assert (picture[0, 0] != picture[4, 1]).any()  # two KV heads, two colours
    assert (picture[4:, 0] == grouped_query_and_kv_cache.UNUSED).all()
    assert grouped_query_and_kv_cache.sharing_title(2) == "8 query heads, 2 KV heads: groups of 4"
    assert grouped_query_and_kv_cache.sharing_title(1) == "8 query heads, 1 KV head: groups of 8"


def test_rope_helpers():
    cos, sin = rope_frequencies(8, max_len=40)
    rotated = rotary_embeddings.rotate(Q_SMALL, torch.tensor([3, 30]))  # (2, 8)
    expected = apply_rope(Q_SMALL.expand(40, 8), cos, sin)[[3, 30]]
    torch.testing.assert_close(rotated, expected)
    # Pair 0 turns by i radians at position i: at i = 0 nothing moves.
    q_0, k_0 = rotary_embeddings.rotated_pairs(Q_SMALL, K_SMALL, 0, 0)
    torch.testing.assert_close(q_0, Q_SMALL.view(4, 2))
    q_i, k_j = rotary_embeddings.rotated_pairs(Q_SMALL, K_SMALL, 20, 3)
    assert rotary_embeddings.pair_angle(k_j[0], q_i[0]) == pytest.approx(
        math.degrees(math.remainder(3 + math.atan2(0.2, 1.0) - math.atan2(-0.6, 0.8), 2 * math.pi)), abs=1e-3)
    assert rotary_embeddings.pair_angle(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])) == pytest.approx(90.0)
    # The score depends on the distance only, and Δ = 0 is the plain dot product.
    distances = torch.arange(0, 17)
    at_16 = rotary_embeddings.score_curve(Q_SMALL, K_SMALL, 16, distances)
    torch.testing.assert_close(rotary_embeddings.score_curve(Q_SMALL, K_SMALL, 40, distances), at_16,
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(at_16[0], Q_SMALL @ K_SMALL)


def test_tile_explorer_shows_the_online_softmax_state():
    g = torch.Generator().manual_seed(1)
    scores, value = torch.randn(2, 10, generator=g) * 2, torch.randn(10, 3, generator=g)
    figure = tiled_attention.tile_explorer(scores, value, 4)
    figure.render(blocks=2, query=1)
    bars = _bars(figure)
    score_bars, weight_bars, output_bars = bars[:10], bars[10:20], bars[20:23]
    assert [b.get_height() for b in score_bars] == pytest.approx(scores[1].tolist())
    seen = torch.softmax(scores[1, :8].double(), dim=-1)  # two blocks of 4 keys seen
    assert [b.get_height() for b in weight_bars] == pytest.approx(seen.tolist() + [0.0, 0.0])
    assert [b.get_height() for b in output_bars] == pytest.approx((seen @ value[:8].double()).tolist())
    weights = tiled_attention.weights_so_far(scores.double(), scores.double().amax(-1),
                                             torch.exp(scores.double() - scores.double().amax(-1, keepdim=True)).sum(-1), 10)
    assert torch.allclose(weights, torch.softmax(scores.double(), dim=-1))


def test_masked_bias_hides_the_future_and_keeps_the_bias():
    from lessons_src import alibi_bias

    picture = alibi.masked_bias(4, 1, 6)
    assert picture.mask.tolist() == torch.ones(6, 6, dtype=torch.bool).triu(1).tolist()
    assert np.allclose(picture.filled(0), alibi_bias(4, 6)[1].numpy() * np.tril(np.ones((6, 6))))


def test_temperature_explorer_draws_next_token_probs():
    from lessons_src import next_token_probs

    figure = _temperature_explorer()
    figure.render(temperature=0.5, top_k=2)
    heights = [bar.get_height() for bar in _bars(figure)]
    probs = next_token_probs(torch.tensor([2.0, 1.0, 0.5, -1.0, 0.0]), 0.5, 2)
    assert heights == pytest.approx(probs[[0, 1, 2, 4]].tolist())  # the 4 likeliest at T = 1, in order
    assert language_model.shown_char(" ") == "sp" and language_model.shown_char("x") == "x"


def test_shift_explorer_shows_each_shifts_scores_and_their_change():
    shifts = [0, 3, 10]
    rotary, added = _shift_scores(shifts)
    rotary_changes = modern_block.largest_changes(shifts, rotary)
    added_changes = modern_block.largest_changes(shifts, added)
    assert rotary_changes[0] == 0 and max(rotary_changes.values()) < 1e-4  # rotary: the distance only
    assert min(added_changes[3], added_changes[10]) > 0.1  # added: every score moves
    assert added_changes[10] == pytest.approx((added[10] - added[0]).abs().max().item())
    assert [modern_block.change_label(c) for c in (0.0, 2.4e-7, 1.2345)] == ["0", "2e-07", "1.23"]

    figure = modern_block.shift_explorer(shifts, rotary, added)
    figure.render(shift=10)
    left, right = (artist for artist in figure.animated if hasattr(artist, "get_array"))
    assert np.allclose(left.get_array(), rotary[10].numpy()) and np.allclose(right.get_array(), added[10].numpy())
    assert left.get_clim() == right.get_clim()  # one colour scale for both panels
    texts = [artist.get_text() for artist in figure.animated if hasattr(artist, "get_text")]
    assert texts == [modern_block.change_label(rotary_changes[10]), modern_block.change_label(added_changes[10]),
                     "10 to 14"]  # the numbers after "largest change from shift 0:" and "positions"
    with pytest.raises(ValueError, match="no scores for the shifts \\[10\\]"):
        modern_block.shift_explorer(shifts, {0: rotary[0], 3: rotary[3]}, added)
    with pytest.raises(ValueError, match="must be \\(L, L\\)"):
        modern_block.shift_explorer(shifts, rotary, {**added, 3: added[3][:, :4]})


def test_latent_cache_sizes_and_title():
    gib = {k: latent_attention.cache_gib(k, 16, 1024, LATENT_CONFIG) * 2**30 for k in latent_attention.KINDS}
    assert gib == {"MHA": 2 * 8 * 16 * 2 * 1024 * 2, "GQA": 2 * 2 * 16 * 2 * 1024 * 2, "MQA": 2 * 16 * 2 * 1024 * 2,
                   "MLA": (16 + 8) * 2 * 1024 * 2}
    assert latent_attention.cache_title(16, 1024, LATENT_CONFIG).endswith("1/11 of MHA, 1/2.7 of GQA")


def test_capped_sink_weights_by_value():
    scores = torch.tensor([6.0, -2.0, 1.0, 9.0], dtype=torch.float64)
    weights, share = todays_attention.capped_sink_weights(scores, math.inf, -math.inf)
    assert share == 0 and np.allclose(weights, scores.softmax(-1).numpy())
    capped = 2.0 * torch.tanh(scores / 2.0)
    weights, share = todays_attention.capped_sink_weights(scores, 2.0, 1.0)
    expected = capped.exp() / (math.exp(1.0) + capped.exp().sum())
    assert np.allclose(weights, expected.numpy()) and math.isclose(share, 1 - float(expected.sum()))
    assert weights.max() / weights.min() <= math.exp(4.0) + 1e-9  # a cap of 2: scores within (-2, 2)
