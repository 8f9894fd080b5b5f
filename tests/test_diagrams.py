"""lessons_src.figures.diagrams: each block diagram draws, says what it must, and keeps its text apart and on the canvas."""

import io
import itertools

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from PIL import Image  # noqa: E402

from lessons_src.figures import diagrams  # noqa: E402
from lessons_src.figures._style import COLORS  # noqa: E402

# The labels each diagram must carry: the course's notation and every tensor shape it names.
EXPECTED = {
    "multi_head_attention": [
        "input $X$", "$(B, L, D)$", "$Q = X W_Q$", "$K = X W_K$", "$V = X W_V$", "$(B, L_q, D)$", "$(B, L_k, D)$",
        "split into heads: $Q_h$", "split into heads: $K_h$", "split into heads: $V_h$",
        "$(B, H, L_q, d_k)$", "$(B, H, L_k, d_k)$", "$S_h = Q_h K_h^\\top / \\sqrt{d_k}$",
        "$A_h = \\mathrm{softmax}(S_h)$", "$(B, H, L_q, L_k)$", "$A_h V_h$",
        "concatenate the heads (transpose, reshape)", "$(B, L_q, H d_k) = (B, L_q, D)$",
        "$\\mathrm{output} = \\mathrm{concat} \\cdot W_O$",
    ],
    "encoder_blocks": [
        "post-LN", "pre-LN", "input $x$", "multi-head self-attention", "$(B, L, D)$;  $A$: $(B, H, L, L)$",
        "LayerNorm 1", "LayerNorm 2", "feed-forward (per position)", "$(B, L, d_{ff})$ inside, $(B, L, D)$ out",
        "output", "output (not normalised)", "$(B, L, D)$",
    ],
    "decoder_block": [
        "target $Y$", "$(B, L_t, D)$", "masked (causal) self-attention",
        "mask $C_{ij} = [j \\leq i]$;  $A$: $(B, H, L_t, L_t)$", "add & LayerNorm 1", "cross-attention",
        "$A$: $(B, H, L_t, L_s)$, no causal mask", "add & LayerNorm 2", "feed-forward (per position)",
        "$(B, L_t, d_{ff})$ inside", "add & LayerNorm 3", "memory $Z$", "$(B, L_s, D)$", "$Q$ from the target",
        "$K$, $V$ from $Z$", "output",
    ],
    "original_and_modern_blocks": [
        "2017 block (post-LN)", "Llama-style block (pre-norm)", "embeddings + sinusoidal positions", "$(B, L, D)$",
        "masked multi-head self-attention", "with biases;  $A$: $(B, H, L, L)$", "add & LayerNorm",
        "$\\mathrm{ReLU}(x W_1 + b_1)\\, W_2 + b_2$", "$(B, L, d_{ff})$ inside, $d_{ff} = 4D$", "lm_head",
        "embed_tokens (no positions added)", "RMSNorm (input_layernorm)", "q_proj, k_proj, v_proj",
        "$Q$: $(B, H, L, d_k)$;  $K, V$: $(B, H_{kv}, L, d_k)$", "RoPE on $Q$ and $K$ per head, not $V$",
        "causal self-attention (GQA)", "$H$ query heads share $H_{kv}$ KV heads", "o_proj",
        "RMSNorm (post_attention_layernorm)", "SwiGLU: gate_proj, up_proj, down_proj",
        "$(B, L, d_{ff})$ inside, $d_{ff} \\approx 8D/3$", "norm", "final RMSNorm", "$\\times N$ blocks",
    ],
    "latent_attention": [
        "input $X$", "$(B, L, D)$", "q_proj (or q_a_proj, q_b_proj)", "kv_a_proj_with_mqa", "$(B, L, d_c + d_R)$",
        "kv_a_layernorm", "latent $c$: $(B, L, d_c)$", "$k^R$: $(B, L, d_R)$", "latent cache: $c_j$ and $k^R_j$",
        "$(B, L_k, d_c + d_R)$", "kv_b_proj (plain form)", "o_proj",
    ],
    "absorbed_decode": [
        "new token $x_t$", "$(B, 1, D)$", "q_proj", "$(B, H, 1, d_c + d_R)$", "kv_a_proj_with_mqa, kv_a_layernorm",
        "latent cache: $[c_j ; k^R_j]$", "$(B, L_k, d_c + d_R)$", "every head against the same rows: softmax",
        "$(B, H, 1, d_v)$", "o_proj",
    ],
}
ALTS = {"multi_head_attention": diagrams.MULTI_HEAD_ATTENTION_ALT, "encoder_blocks": diagrams.ENCODER_BLOCKS_ALT,
        "decoder_block": diagrams.DECODER_BLOCK_ALT,
        "original_and_modern_blocks": diagrams.ORIGINAL_AND_MODERN_BLOCKS_ALT,
        "latent_attention": diagrams.LATENT_ATTENTION_ALT, "absorbed_decode": diagrams.ABSORBED_DECODE_ALT}
# What the alt text must tell a screen-reader user: the same notation and shapes, in words.
ALT_MENTIONS = {
    "multi_head_attention": ["(B, L, D)", "(B, H, L_q, d_k)", "(B, H, L_q, L_k)", "softmax", "W_O", "d_k = D / H",
                             "concatenated", "top to bottom"],
    "encoder_blocks": ["post-LN", "pre-LN", "(B, L, D)", "(B, H, L, L)", "(B, L, d_ff)", "LayerNorm 1",
                       "LayerNorm 2", "residual", "final LayerNorm", "top to bottom"],
    "decoder_block": ["(B, L_t, D)", "(B, L_s, D)", "(B, H, L_t, L_t)", "(B, H, L_t, L_s)", "memory Z",
                      "C_ij = [j <= i]", "queries", "keys and values", "LayerNorm 3", "top to bottom"],
    "original_and_modern_blocks": ["2017", "Llama-style", "(B, L, D)", "(B, H, L, d_k)", "(B, H_kv, L, d_k)",
                                   "(B, L, d_ff)", "sinusoidal", "RMSNorm", "SwiGLU", "RoPE", "not V", "q_proj",
                                   "o_proj", "gate_proj", "input_layernorm", "post_attention_layernorm", "lm_head",
                                   "no biases", "N times", "top to bottom"],
    "latent_attention": ["(B, L, D)", "(B, L, d_c)", "(B, L, d_R)", "(B, L_k, d_c + d_R)", "kv_a_proj_with_mqa",
                         "kv_b_proj", "W_UK", "W_UV", "shared by every head", "top to bottom"],
    "absorbed_decode": ["(B, 1, D)", "(B, L_k, d_c + d_R)", "(B, H, 1, d_c + d_R)", "(B, H, 1, d_c)", "W_UK", "W_UV",
                        "multi-query attention", "576", "kv_b_proj never runs", "top to bottom"],
}


def _texts(fig: Figure) -> list[Text]:
    """Every visible, non-empty Text artist of the figure."""
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def drawn(request):
    """(name, figure, renderer) with the figure drawn once."""
    fig = getattr(diagrams, request.param)()
    canvas = FigureCanvasAgg(fig)  # a bare Figure has no renderer of its own
    canvas.draw()
    return request.param, fig, canvas.get_renderer()


def test_returns_a_static_figure_of_page_width(drawn):
    name, fig, _ = drawn
    assert isinstance(fig, Figure)
    width, height = fig.get_size_inches()
    assert 6 <= width <= 8 and height <= 8.5, (name, width, height)
    assert fig.get_dpi() == diagrams.DIAGRAM_DPI
    assert 760 <= width * fig.get_dpi() <= 840  # about 800 px wide, the page's text column


def test_has_the_expected_labels(drawn):
    name, fig, _ = drawn
    shown = {t.get_text() for t in _texts(fig)}
    missing = [label for label in EXPECTED[name] if label not in shown]
    assert not missing, f"{name}: missing labels {missing}"


def test_no_text_smaller_than_9_points(drawn):
    name, fig, _ = drawn
    small = [(t.get_text(), t.get_fontsize()) for t in _texts(fig) if t.get_fontsize() < 9]
    assert not small, f"{name}: text under 9 pt: {small}"


def test_no_two_texts_overlap(drawn):
    name, fig, renderer = drawn
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in _texts(fig)]
    overlapping = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]
    assert not overlapping, f"{name}: overlapping texts {overlapping}"


def test_nothing_outside_the_figure(drawn):
    name, fig, renderer = drawn
    canvas = fig.bbox
    ax = fig.axes[0]
    artists = _texts(fig) + list(ax.patches) + list(ax.lines)
    outside = []
    for artist in artists:
        box = artist.get_window_extent(renderer)
        if box.x0 < canvas.x0 - 0.5 or box.y0 < canvas.y0 - 0.5 or box.x1 > canvas.x1 + 0.5 or box.y1 > canvas.y1 + 0.5:
            outside.append((type(artist).__name__, getattr(artist, "get_text", lambda: "")(), box.bounds))
    assert not outside, f"{name}: outside the figure: {outside}"


def test_every_text_inside_a_box_stays_inside_it(drawn):
    """A label and its shape line fit their box: no text spills over a box's edge."""
    name, fig, renderer = drawn
    ax = fig.axes[0]
    boxes = [p.get_window_extent(renderer) for p in ax.patches if type(p).__name__ == "FancyBboxPatch"]
    for text in _texts(fig):
        extent = text.get_window_extent(renderer)
        for box in boxes:
            # A text that starts inside a box (its centre is in it) must end inside it too.
            if box.contains((extent.x0 + extent.x1) / 2, (extent.y0 + extent.y1) / 2):
                inner = box.padded(-2)  # 2 px of air at the edges
                assert inner.contains(extent.x0, extent.y0) and inner.contains(extent.x1, extent.y1), (
                    f"{name}: {text.get_text()!r} spills out of its box")


def _polylines(fig: Figure) -> list[np.ndarray]:
    """Every line and arrow of the diagram as an (n, 2) array of points in pixels."""
    ax = fig.axes[0]
    lines = [ax.transData.transform(line.get_xydata()) for line in ax.lines]
    arrows = [ax.transData.transform(piece) for p in ax.patches if isinstance(p, FancyArrowPatch)
              for piece in p.get_path().to_polygons(closed_only=False)]  # the shaft, the head
    return lines + arrows


def test_no_line_or_arrow_crosses_a_text(drawn):
    name, fig, renderer = drawn
    crossed = []
    for text in _texts(fig):
        extent = text.get_window_extent(renderer).padded(-1)
        for points in _polylines(fig):
            for start, end in zip(points[:-1], points[1:]):
                steps = max(2, int(np.hypot(*(end - start))))  # one sample per pixel
                samples = start + np.linspace(0, 1, steps)[:, None] * (end - start)
                if any(extent.contains(x, y) for x, y in samples):
                    crossed.append(text.get_text())
    assert not crossed, f"{name}: lines cross the texts {sorted(set(crossed))}"


def test_texts_outside_boxes_keep_off_them(drawn):
    """A note or arrow label lies either inside a box or clear of every box."""
    name, fig, renderer = drawn
    shapes = [p.get_window_extent(renderer) for p in fig.axes[0].patches if isinstance(p, (FancyBboxPatch, Circle))]
    for text in _texts(fig):
        extent = text.get_window_extent(renderer)
        centre = ((extent.x0 + extent.x1) / 2, (extent.y0 + extent.y1) / 2)
        if not any(shape.contains(*centre) for shape in shapes):
            hit = [shape.bounds for shape in shapes if shape.overlaps(extent)]
            assert not hit, f"{name}: {text.get_text()!r} overlaps a box at {hit}"


def test_colours_come_from_the_colour_blind_palette(drawn):
    """Every box edge is black, grey or one of the palette's colours, and at least three kinds are used."""
    name, fig, _ = drawn
    allowed = {tuple(round(c, 3) for c in color) for color in COLORS}
    edges = set()
    for patch in fig.axes[0].patches:
        if type(patch).__name__ == "FancyBboxPatch":
            rgb = tuple(round(c, 3) for c in patch.get_edgecolor()[:3])
            if rgb != (0.0, 0.0, 0.0):
                assert rgb in allowed, f"{name}: edge colour {rgb} is not in the colour-blind palette"
                edges.add(rgb)
    assert len(edges) >= 3, name


def test_draws_to_a_png_with_ink(drawn):
    name, fig, _ = drawn
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("L")
    width, height = image.size
    assert width == round(fig.get_size_inches()[0] * diagrams.DIAGRAM_DPI)
    dark = (np.asarray(image) < 128).mean()
    assert 0.01 < dark < 0.25  # lines and letters, on a white page


def test_alt_text_describes_the_diagram(drawn):
    name, _, _ = drawn
    alt = ALTS[name]
    assert len(alt) > 400
    missing = [m for m in ALT_MENTIONS[name] if m not in alt]
    assert not missing, f"{name}: the alt text does not mention {missing}"


def test_shows_itself_as_a_png_in_a_notebook(drawn):
    """The PNG a notebook shows without pyplot's inline backend: the whole diagram, at DIAGRAM_DPI."""
    name, fig, _ = drawn
    assert isinstance(fig, diagrams.Diagram)
    image = Image.open(io.BytesIO(fig._repr_png_()))
    assert image.size == tuple(round(side * diagrams.DIAGRAM_DPI) for side in fig.get_size_inches()), name


def test_each_call_builds_a_new_figure():
    first, second = diagrams.encoder_blocks(), diagrams.encoder_blocks()
    assert first is not second and first.axes[0] is not second.axes[0]
