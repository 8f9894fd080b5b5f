"""Block diagrams of the layers the course builds, each a static ``Figure`` with its alt text.

- ``multi_head_attention``: split into heads, attend per head, merge (chapter "Multi-head attention")
- ``encoder_blocks``: post-LN and pre-LN encoder blocks side by side (chapters "The transformer
  encoder block" and "Layer norm placement")
- ``decoder_block``: masked self-attention, cross-attention over the encoder memory Z, feed-forward
  (chapter "Decoder blocks and cross-attention")
- ``original_and_modern_blocks``: the 2017 decoder-only block and a Llama-style block side by side,
  with the checkpoint's parameter names (chapter "From the original block to a modern LLM block")
- ``latent_attention``: multi-head latent attention, from the input to the latent cache and back
  (chapter "Multi-head latent attention")
- ``absorbed_decode``: MLA's absorbed decode step, multi-query attention over one cache of d_c + d_R
  numbers per token (chapter "Multi-head latent attention")

Every box names its operation in the course's notation and the shape of the tensor it returns.
Data flows from the top down. Colours say what kind of step a box is (blue: a learned linear map,
orange: attention, green: LayerNorm, pink: feed-forward, grey: a reshape), and every box says it
in words too, so no information is carried by colour alone. A chapter shows one with::

    from lessons_src.figures import diagrams
    diagrams.multi_head_attention()

and gives the cell the matching alt text (``diagrams.MULTI_HEAD_ATTENTION_ALT``) in its
``mystnb.image.alt`` metadata.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

from ._style import COLORS, new_figure

__all__ = [
    "Diagram",
    "DIAGRAM_DPI",
    "MULTI_HEAD_ATTENTION_ALT",
    "ENCODER_BLOCKS_ALT",
    "DECODER_BLOCK_ALT",
    "ORIGINAL_AND_MODERN_BLOCKS_ALT",
    "LATENT_ATTENTION_ALT",
    "ABSORBED_DECODE_ALT",
    "multi_head_attention",
    "encoder_blocks",
    "decoder_block",
    "original_and_modern_blocks",
    "latent_attention",
    "absorbed_decode",
]

#: 110 dpi: a 7.2-inch diagram is 792 px wide, the width of the page's text column.
DIAGRAM_DPI = 110
#: Font sizes in points: nothing under 9, so the text stays legible when a phone shrinks the page.
TITLE_PT, LABEL_PT, SHAPE_PT, NOTE_PT = 12.0, 10.5, 9.5, 9.5

# One colour per kind of step (seaborn's colour-blind palette), as a pale fill behind black text.
LINEAR, ATTENTION, NORM, FEED_FORWARD, RESHAPE, TENSOR = COLORS[0], COLORS[1], COLORS[2], COLORS[4], COLORS[7], "black"
INK = "#333333"

MULTI_HEAD_ATTENTION_ALT = (
    "Block diagram of multi-head self-attention, read from top to bottom. The input X, shape (B, L, D), "
    "goes through three learned linear maps: Q = X W_Q of shape (B, L_q, D), K = X W_K of shape (B, L_k, D) "
    "and V = X W_V of shape (B, L_k, D). Each is split into H heads of d_k = D / H features (view, then "
    "transpose), giving Q_h of shape (B, H, L_q, d_k) and K_h and V_h of shape (B, H, L_k, d_k). Inside a "
    "dashed frame drawn as a stack of H cards, labelled 'every head h = 0, ..., H - 1, all at once', each "
    "head computes its scores S_h = Q_h K_h transposed / sqrt(d_k) of shape (B, H, L_q, L_k) from Q_h and "
    "K_h, then its weights A_h = softmax(S_h) over the keys, of the same shape, then its output A_h V_h of "
    "shape (B, H, L_q, d_k) with V_h. The heads are concatenated (transpose back, then reshape) into shape "
    "(B, L_q, H d_k) = (B, L_q, D), and one more linear map W_O gives the output, (B, L_q, D). A note says "
    "that in self-attention Q, K and V all come from X, so L_q = L_k = L, and that in cross-attention K and "
    "V come from another sequence."
)

ENCODER_BLOCKS_ALT = (
    "Two encoder blocks side by side, read from top to bottom; every tensor between the steps has shape "
    "(B, L, D). Left, post-LN (the original transformer and BERT): the input x goes into multi-head "
    "self-attention, whose weights are (B, H, L, L); a residual line carries x around it to an add node; "
    "the sum goes through LayerNorm 1; that result goes into the feed-forward network, which widens each "
    "position to (B, L, d_ff) and back to (B, L, D); a second residual line adds its input to its output; "
    "LayerNorm 2 normalises the sum, which is the block's output. Right, pre-LN (GPT-2 and most large "
    "models since): the input x first goes through LayerNorm 1, then self-attention, and the residual line "
    "adds the un-normalised x to the result; that sum goes through LayerNorm 2 and the feed-forward "
    "network, and a second residual line adds the sum to its output, which is the block's output, not "
    "normalised. A note says that a pre-LN stack adds one final LayerNorm after its last block, and that "
    "in pre-LN the input reaches the output along an identity path that no LayerNorm touches."
)

DECODER_BLOCK_ALT = (
    "Block diagram of a decoder block in the original post-LN wiring, read from top to bottom. On the "
    "left, the target Y, shape (B, L_t, D), goes into masked (causal) multi-head self-attention, whose "
    "causal mask C, C_ij = [j <= i], lets position i see target positions 0 to i; its weights are "
    "(B, H, L_t, L_t). A residual line adds Y to its output and LayerNorm 1 normalises the sum, shape "
    "(B, L_t, D). That result gives the queries of cross-attention. On the right, the source goes through "
    "the encoder, whose output, the memory Z of shape (B, L_s, D), gives cross-attention its keys and "
    "values. Cross-attention's weights are (B, H, L_t, L_s), with no causal mask, and its output is "
    "(B, L_t, D); a residual line and LayerNorm 2 follow. Then the feed-forward network, (B, L_t, d_ff) "
    "inside, with a residual line and LayerNorm 3, gives the block's output, (B, L_t, D). A note says that "
    "pre-LN moves each LayerNorm in front of its sublayer, as in the encoder."
)

ORIGINAL_AND_MODERN_BLOCKS_ALT = (
    "Two decoder-only language models side by side, read from top to bottom; a dashed frame around each "
    "block marks what is repeated N times. Left, the 2017 block (post-LN, decoder only): token embeddings "
    "plus sinusoidal position vectors, shape (B, L, D), go into masked multi-head self-attention with "
    "biases, whose weights are (B, H, L, L); a residual line adds the input back and LayerNorm normalises "
    "the sum (add & LayerNorm); then the feed-forward network ReLU(x W_1 + b_1) W_2 + b_2, (B, L, d_ff) "
    "inside with d_ff = 4D, and a second add & LayerNorm. After the stack, lm_head gives the logits, "
    "(B, L, |V|). Right, the Llama-style block (pre-norm, no biases): embed_tokens with no positions added, "
    "(B, L, D); RMSNorm (input_layernorm); the projections q_proj, k_proj and v_proj giving Q of shape "
    "(B, H, L, d_k) and K and V of shape (B, H_kv, L, d_k); RoPE rotates each head's Q and K by position, "
    "not V; causal self-attention in which H query heads share H_kv key/value heads (grouped-query "
    "attention); o_proj back to (B, L, D); a residual add of the block's input. Then RMSNorm "
    "(post_attention_layernorm), the SwiGLU feed-forward with gate_proj, up_proj and down_proj, "
    "(B, L, d_ff) inside with d_ff about 8D/3, and a second residual add. After the stack, a final "
    "RMSNorm (norm) and lm_head, (B, L, |V|). A note says that each difference is one switch of "
    "DecoderConfig: placement, norm, ffn, positions, num_kv_heads, bias."
)


class Diagram(Figure):
    """A Figure that shows itself as a PNG when it is a notebook cell's value.

    A plain Figure does that only once pyplot has loaded its inline backend (``plt.subplots``
    does; importing pyplot does not), so a diagram near the top of a page would print as
    ``<Figure size ...>``. Where the inline backend is loaded its PNG is used instead.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=self.dpi, facecolor=self.get_facecolor())
        return buffer.getvalue()


@dataclass(frozen=True)
class _Box:
    """A drawn box: centre (x, y) and size in inches, y growing downwards."""

    x: float
    y: float
    w: float
    h: float

    @property
    def top(self) -> tuple[float, float]:
        return self.x, self.y - self.h / 2

    @property
    def bottom(self) -> tuple[float, float]:
        return self.x, self.y + self.h / 2

    @property
    def left(self) -> tuple[float, float]:
        return self.x - self.w / 2, self.y

    @property
    def right(self) -> tuple[float, float]:
        return self.x + self.w / 2, self.y


def _pale(color, amount: float = 0.78) -> tuple[float, float, float]:
    """``color`` mixed with white: a fill light enough for black text on it."""
    return tuple(c + (1 - c) * amount for c in to_rgb(color))


def _canvas(width: float, height: float) -> tuple[Diagram, Axes]:
    """A Diagram whose one axes is the whole canvas, in inches, y growing downwards."""
    fig = new_figure(width, height, dpi=DIAGRAM_DPI, figure_class=Diagram)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_axis_off()
    return fig, ax


def _box(ax: Axes, x: float, y: float, w: float, label: str, shape: str | None = None, *,
         color=TENSOR, h: float = 0.58, cards: int = 0) -> _Box:
    """A rounded box centred on (x, y): ``label`` above, the output's ``shape`` below it.

    ``cards`` draws that many offset copies behind the box: one per further head.
    """
    for card in range(cards, 0, -1):
        offset = 0.07 * card
        ax.add_patch(FancyBboxPatch((x - w / 2 + offset, y - h / 2 - offset), w, h,
                                    boxstyle="round,pad=0,rounding_size=0.08", linewidth=0.8,
                                    edgecolor=color, facecolor=_pale(color, 0.9)))
    fill = "white" if color == TENSOR else _pale(color)
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.08",
                                linewidth=1.4, edgecolor=color, facecolor=fill))
    if shape is None:
        ax.text(x, y, label, ha="center", va="center", fontsize=LABEL_PT, color="black")
    else:
        ax.text(x, y - 0.125, label, ha="center", va="center", fontsize=LABEL_PT, color="black")
        ax.text(x, y + 0.135, shape, ha="center", va="center", fontsize=SHAPE_PT, color=INK)
    return _Box(x, y, w, h)


def _add(ax: Axes, x: float, y: float, radius: float = 0.15) -> _Box:
    """The residual addition: a circle with a plus sign."""
    ax.add_patch(Circle((x, y), radius, facecolor="white", edgecolor=INK, linewidth=1.4))
    ax.add_line(Line2D([x - radius * 0.6, x + radius * 0.6], [y, y], color=INK, linewidth=1.4))
    ax.add_line(Line2D([x, x], [y - radius * 0.6, y + radius * 0.6], color=INK, linewidth=1.4))
    return _Box(x, y, 2 * radius, 2 * radius)


def _arrow(ax: Axes, *points: tuple[float, float], color=INK, dashed: bool = False) -> None:
    """A polyline through ``points`` with an arrowhead at the last one."""
    style = (0, (4, 2)) if dashed else "solid"
    for start, end in zip(points[:-2], points[1:-1]):
        ax.add_line(Line2D([start[0], end[0]], [start[1], end[1]], color=color, linewidth=1.3, linestyle=style))
    ax.add_patch(FancyArrowPatch(points[-2], points[-1], arrowstyle="-|>", mutation_scale=13, color=color,
                                 linewidth=1.3, linestyle=style, shrinkA=0, shrinkB=0))


def _note(ax: Axes, x: float, y: float, text: str, *, ha: str = "left", size: float = NOTE_PT,
          color=INK, **kwargs) -> None:
    ax.text(x, y, text, ha=ha, va="center", fontsize=size, color=color, **kwargs)


def multi_head_attention() -> Figure:
    """Multi-head self-attention as a block diagram: project, split into H heads, attend, merge, W_O.

    Every box carries the course's notation and its output shape, from ``X (B, L, D)`` through
    ``Q_h (B, H, L_q, d_k)`` and ``S_h, A_h (B, H, L_q, L_k)`` to the output ``(B, L_q, D)``.
    Alt text: ``MULTI_HEAD_ATTENTION_ALT``. Shown in the chapter "Multi-head attention".
    """
    fig, ax = _canvas(7.2, 7.5)
    ax.text(3.6, 0.3, "Multi-head attention: $H$ heads of $d_k = D / H$ features",
            ha="center", va="center", fontsize=TITLE_PT, weight="bold")
    columns = (1.3, 3.6, 5.9)
    width = 1.9

    x_in = _box(ax, 3.6, 0.95, 1.7, "input $X$", "$(B, L, D)$")
    names = (("Q", "q", "W_Q"), ("K", "k", "W_K"), ("V", "k", "W_V"))
    projected, split = [], []
    for x, (name, length, weight) in zip(columns, names):
        projected.append(_box(ax, x, 1.95, width, f"${name} = X {weight}$", f"$(B, L_{length}, D)$", color=LINEAR))
        split.append(_box(ax, x, 2.95, width, f"split into heads: ${name}_h$",
                          f"$(B, H, L_{length}, d_k)$", color=RESHAPE))
    for box in projected:
        _arrow(ax, (x_in.x + (box.x - x_in.x) * 0.25, x_in.bottom[1]), box.top)
    for upper, lower in zip(projected, split):
        _arrow(ax, upper.bottom, lower.top)

    # The per-head frame: one dashed card per head, the front one holding the three steps.
    frame_top, frame_bottom = 3.75, 5.25
    for card in range(2, -1, -1):
        offset = 0.07 * card
        ax.add_patch(FancyBboxPatch((0.15 + offset, frame_top - offset), 6.85, frame_bottom - frame_top,
                                    boxstyle="round,pad=0,rounding_size=0.12", linewidth=1.0,
                                    linestyle=(0, (4, 3)), edgecolor=ATTENTION, facecolor="white"))
    _note(ax, 0.45, frame_bottom - 0.33, "every head $h = 0, \\dots, H-1$, all at once", color="black")
    row = 4.3
    scores = _box(ax, columns[0], row, width, "$S_h = Q_h K_h^\\top / \\sqrt{d_k}$", "$(B, H, L_q, L_k)$",
                  color=ATTENTION)
    weights = _box(ax, columns[1], row, width, "$A_h = \\mathrm{softmax}(S_h)$", "$(B, H, L_q, L_k)$",
                   color=ATTENTION)
    heads = _box(ax, columns[2], row, width, "$A_h V_h$", "$(B, H, L_q, d_k)$", color=ATTENTION)
    _arrow(ax, split[0].bottom, scores.top)
    bend = 3.5  # K_h turns left above the frame, into the scores box
    _arrow(ax, split[1].bottom, (split[1].x, bend), (scores.x + 0.6, bend), (scores.x + 0.6, scores.top[1]))
    _arrow(ax, split[2].bottom, heads.top)
    _arrow(ax, scores.right, weights.left)
    _arrow(ax, weights.right, heads.left)

    merged = _box(ax, 3.6, 5.97, 4.2, "concatenate the heads (transpose, reshape)",
                  "$(B, L_q, H d_k) = (B, L_q, D)$", color=RESHAPE)
    _arrow(ax, heads.bottom, (heads.x, 5.45), (merged.x + 1.2, 5.45), (merged.x + 1.2, merged.top[1]))
    output = _box(ax, 3.6, 6.9, 2.6, "$\\mathrm{output} = \\mathrm{concat} \\cdot W_O$", "$(B, L_q, D)$",
                  color=LINEAR)
    _arrow(ax, merged.bottom, output.top)
    _note(ax, 0.15, 6.85, "Self-attention: $Q$, $K$, $V$ all\ncome from $X$, so $L_q = L_k = L$.")
    _note(ax, 7.05, 6.85, "Cross-attention: $K$, $V$ come\nfrom another sequence.", ha="right")
    return fig


def _stack(top: float, heights: list[float], gap: float = 0.36) -> list[float]:
    """Centres of boxes of the given heights stacked downwards from ``top``, ``gap`` apart."""
    centres, y = [], top
    for h in heights:
        centres.append(y + h / 2)
        y += h + gap
    return centres


def _encoder_column(ax: Axes, x: float, norm_first: bool, top: float) -> None:
    """One encoder block, post-LN or pre-LN, down the column at ``x`` from ``top``."""
    w, side = 2.35, x + 1.45  # box width; the residual lines run down the right-hand side
    attention = ("multi-head self-attention", "$(B, L, D)$;  $A$: $(B, H, L, L)$")
    feed_forward = ("feed-forward (per position)", "$(B, L, d_{ff})$ inside, $(B, L, D)$ out")
    box, add = 0.58, 0.3
    if norm_first:
        rows = _stack(top, [box, box, box, add, box, box, add, box], gap=0.3)
        x_in = _box(ax, x, rows[0], 1.5, "input $x$", "$(B, L, D)$")
        norm1 = _box(ax, x, rows[1], w, "LayerNorm 1", "$(B, L, D)$", color=NORM)
        attend = _box(ax, x, rows[2], w, *attention, color=ATTENTION)
        add1 = _add(ax, x, rows[3])
        norm2 = _box(ax, x, rows[4], w, "LayerNorm 2", "$(B, L, D)$", color=NORM)
        ff = _box(ax, x, rows[5], w, *feed_forward, color=FEED_FORWARD)
        add2 = _add(ax, x, rows[6])
        out = _box(ax, x, rows[7], 2.1, "output (not normalised)", "$(B, L, D)$")
        chain = (x_in, norm1, attend, add1, norm2, ff, add2, out)
        residuals = ((x_in, add1), (add1, add2))
    else:
        rows = _stack(top, [box, box, add, box, box, add, box, box], gap=0.3)
        x_in = _box(ax, x, rows[0], 1.5, "input $x$", "$(B, L, D)$")
        attend = _box(ax, x, rows[1], w, *attention, color=ATTENTION)
        add1 = _add(ax, x, rows[2])
        norm1 = _box(ax, x, rows[3], w, "LayerNorm 1", "$(B, L, D)$", color=NORM)
        ff = _box(ax, x, rows[4], w, *feed_forward, color=FEED_FORWARD)
        add2 = _add(ax, x, rows[5])
        norm2 = _box(ax, x, rows[6], w, "LayerNorm 2", "$(B, L, D)$", color=NORM)
        out = _box(ax, x, rows[7], 1.5, "output", "$(B, L, D)$")
        chain = (x_in, attend, add1, norm1, ff, add2, norm2, out)
        residuals = ((x_in, add1), (norm1, add2))
    for upper, lower in zip(chain, chain[1:]):
        _arrow(ax, upper.bottom, lower.top)
    for source, add in residuals:
        _residual(ax, source, add, side, add.right)


def _residual(ax: Axes, source: _Box, target: _Box, side: float, end: tuple[float, float]) -> None:
    """A residual line: it leaves the main line just below ``source`` and runs down at ``side`` to ``end``."""
    branch = source.bottom[1] + 0.12
    ax.add_patch(Circle((source.x, branch), 0.045, color=INK))
    _arrow(ax, (source.x, branch), (side, branch), (side, target.y), end)


def encoder_blocks() -> Figure:
    """Post-LN and pre-LN encoder blocks side by side: attention, feed-forward, residual adds, LayerNorms.

    Left, post-LN ``x = LN(x + sublayer(x))``; right, pre-LN ``x = x + sublayer(LN(x))``; every
    tensor between steps is ``(B, L, D)``. Alt text: ``ENCODER_BLOCKS_ALT``. Shown in the chapters
    "The transformer encoder block" and "Layer norm placement".
    """
    fig, ax = _canvas(7.2, 7.6)
    for x, norm_first, title, subtitle in (
        (1.75, False, "post-LN", "original transformer, BERT"),
        (5.25, True, "pre-LN", "GPT-2 and most since"),
    ):
        ax.text(x, 0.25, title, ha="center", va="center", fontsize=TITLE_PT, weight="bold")
        _note(ax, x, 0.52, subtitle, ha="center")
        _encoder_column(ax, x, norm_first, 0.78)
    _note(ax, 0.15, 7.27, "$\\oplus$: add the sublayer's input back (the residual).  A pre-LN stack ends with one\n"
          "more LayerNorm; in pre-LN, $x$ reaches the output on a path no LayerNorm touches.")
    return fig


def decoder_block() -> Figure:
    """A post-LN decoder block: causal self-attention, cross-attention over the memory Z, feed-forward.

    The target ``Y (B, L_t, D)`` gives the queries; the encoder's memory ``Z (B, L_s, D)`` the
    keys and values of cross-attention, whose weights are ``(B, H, L_t, L_s)``.
    Alt text: ``DECODER_BLOCK_ALT``. Shown in the chapter "Decoder blocks and cross-attention".
    """
    fig, ax = _canvas(7.2, 7.95)
    ax.text(3.6, 0.3, "Decoder block (post-LN)", ha="center", va="center", fontsize=TITLE_PT, weight="bold")
    x, w, side = 2.75, 3.3, 0.45  # the target's column; residual lines run down the left-hand side
    rows = _stack(0.7, [0.58] * 8, gap=0.34)
    target = _box(ax, x, rows[0], 1.9, "target $Y$", "$(B, L_t, D)$")
    masked = _box(ax, x, rows[1], w, "masked (causal) self-attention",
                  "mask $C_{ij} = [j \\leq i]$;  $A$: $(B, H, L_t, L_t)$", color=ATTENTION)
    norm1 = _box(ax, x, rows[2], w, "add & LayerNorm 1", "$(B, L_t, D)$", color=NORM)
    cross = _box(ax, x, rows[3], w, "cross-attention", "$A$: $(B, H, L_t, L_s)$, no causal mask",
                 color=ATTENTION)
    norm2 = _box(ax, x, rows[4], w, "add & LayerNorm 2", "$(B, L_t, D)$", color=NORM)
    ff = _box(ax, x, rows[5], w, "feed-forward (per position)", "$(B, L_t, d_{ff})$ inside", color=FEED_FORWARD)
    norm3 = _box(ax, x, rows[6], w, "add & LayerNorm 3", "$(B, L_t, D)$", color=NORM)
    out = _box(ax, x, rows[7], 1.9, "output", "$(B, L_t, D)$")
    chain = (target, masked, norm1, cross, norm2, ff, norm3, out)
    for upper, lower in zip(chain, chain[1:]):
        _arrow(ax, upper.bottom, lower.top)
    for source, norm in ((target, norm1), (norm1, norm2), (norm2, norm3)):
        _residual(ax, source, norm, side, norm.left)
    _note(ax, x + 0.12, cross.top[1] - 0.11, "$Q$ from the target")

    # The encoder's side: the embedded source, the encoder, its memory Z into cross-attention.
    right = 5.95
    source = _box(ax, right, rows[0], 2.0, "embedded source", "$(B, L_s, D)$")
    encoder = _box(ax, right, rows[1], 2.0, "encoder: $N$ blocks", "$(B, L_s, D)$", color=RESHAPE)
    memory = _box(ax, right, rows[2], 2.0, "memory $Z$", "$(B, L_s, D)$")
    _arrow(ax, source.bottom, encoder.top)
    _arrow(ax, encoder.bottom, memory.top)
    _arrow(ax, memory.bottom, (right, cross.y), cross.right)
    _note(ax, right + 0.1, (memory.bottom[1] + cross.y) / 2, "$K$, $V$ from $Z$")
    _note(ax, 4.6, rows[5], "Pre-LN moves each\nLayerNorm in front of\nits sublayer, as in\nthe encoder.")
    return fig


def _frame(ax: Axes, left: float, top: float, right: float, bottom: float, label: str, label_at: tuple[float, float],
           ha: str) -> None:
    """A dashed frame around one block of a stack, with ``label`` (e.g. "× N blocks") inside it."""
    ax.add_patch(FancyBboxPatch((left, top), right - left, bottom - top, boxstyle="round,pad=0,rounding_size=0.12",
                                linewidth=1.0, linestyle=(0, (4, 3)), edgecolor=RESHAPE, facecolor="none"))
    _note(ax, *label_at, label, ha=ha, color="black")


def original_and_modern_blocks() -> Figure:
    """The 2017 decoder-only block and a Llama-style block side by side, with the checkpoint names.

    Left: sinusoidal positions added to the embeddings, masked multi-head self-attention with
    biases, post-LN ``add & LayerNorm``, the ReLU feed-forward. Right: pre-norm RMSNorm, q/k/v/o
    projections without biases, RoPE on each head's Q and K (never V), ``H_kv`` key/value heads,
    SwiGLU, then a final RMSNorm before ``lm_head``. Alt text: ``ORIGINAL_AND_MODERN_BLOCKS_ALT``.
    Shown in the chapter "From the original block to a modern LLM block".
    """
    fig, ax = _canvas(7.2, 8.4)
    box, add, gap = 0.56, 0.28, 0.17

    # Left: the 2017 block, decoder only, post-LN; residual lines down the left-hand side.
    x, w, side = 1.9, 2.9, 0.2
    ax.text(x, 0.22, "2017 block (post-LN)", ha="center", va="center", fontsize=TITLE_PT, weight="bold")
    _note(ax, x, 0.48, "Vaswani et al., decoder only", ha="center")
    rows = _stack(0.72, [box] * 6, gap=gap + 0.05)
    rows[1:] = [y + 0.12 for y in rows[1:]]  # room for the block's frame
    rows[5] += 0.3  # and for its label
    embed = _box(ax, x, rows[0], w, "embeddings + sinusoidal positions", "$(B, L, D)$", color=LINEAR)
    attend = _box(ax, x, rows[1], w, "masked multi-head self-attention", "with biases;  $A$: $(B, H, L, L)$",
                  color=ATTENTION)
    norm1 = _box(ax, x, rows[2], w, "add & LayerNorm", "$(B, L, D)$", color=NORM)
    ff = _box(ax, x, rows[3], w, "$\\mathrm{ReLU}(x W_1 + b_1)\\, W_2 + b_2$", "$(B, L, d_{ff})$ inside, $d_{ff} = 4D$",
              color=FEED_FORWARD)
    norm2 = _box(ax, x, rows[4], w, "add & LayerNorm", "$(B, L, D)$", color=NORM)
    head = _box(ax, x, rows[5], w, "lm_head", "logits $(B, L, |\\mathcal{V}|)$", color=LINEAR)
    for upper, lower in zip((embed, attend, norm1, ff, norm2), (attend, norm1, ff, norm2, head)):
        _arrow(ax, upper.bottom, lower.top)
    for source, target in ((embed, norm1), (norm1, norm2)):
        _residual(ax, source, target, side, target.left)
    frame_bottom = norm2.bottom[1] + 0.42
    _frame(ax, 0.06, embed.bottom[1] + 0.06, x + w / 2 + 0.1, frame_bottom, "$\\times N$ blocks",
           (x + w / 2, frame_bottom - 0.17), ha="right")
    _note(ax, 0.1, head.bottom[1] + 0.75,
          "Each difference is one switch of\n"
          "DecoderConfig: placement, norm, ffn,\n"
          "positions, num_kv_heads, bias.\n"
          "$\\oplus$: add the sublayer's input back.")

    # Right: the Llama-style block, pre-norm, no biases; residual lines down the right-hand side.
    x, w, side = 5.35, 3.0, 7.02
    ax.text(x, 0.22, "Llama-style block (pre-norm)", ha="center", va="center", fontsize=TITLE_PT, weight="bold")
    _note(ax, x, 0.48, "Llama, Mistral: no biases (Qwen 1–2.5: q, k, v biases)", ha="center")
    rows = _stack(0.72, [box, box, box, box, box, box, add, box, box, add, box], gap=gap)
    rows[1:] = [y + 0.06 for y in rows[1:]]
    rows[10] += 0.3
    embed = _box(ax, x, rows[0], w, "embed_tokens (no positions added)", "$(B, L, D)$", color=LINEAR)
    norm1 = _box(ax, x, rows[1], w, "RMSNorm (input_layernorm)", "$(B, L, D)$", color=NORM)
    project = _box(ax, x, rows[2], w, "q_proj, k_proj, v_proj",
                   "$Q$: $(B, H, L, d_k)$;  $K, V$: $(B, H_{kv}, L, d_k)$", color=LINEAR)
    rope = _box(ax, x, rows[3], w, "RoPE on $Q$ and $K$ per head, not $V$", "row $i$ turned: $x R_i^\\top$",
                color=ATTENTION)
    attend = _box(ax, x, rows[4], w, "causal self-attention (GQA)", "$H$ query heads share $H_{kv}$ KV heads",
                  color=ATTENTION)
    out = _box(ax, x, rows[5], w, "o_proj", "$(B, L, D)$", color=LINEAR)
    add1 = _add(ax, x, rows[6], add / 2)
    norm2 = _box(ax, x, rows[7], w, "RMSNorm (post_attention_layernorm)", "$(B, L, D)$", color=NORM)
    swiglu = _box(ax, x, rows[8], w, "SwiGLU: gate_proj, up_proj, down_proj", "$(B, L, d_{ff})$ inside, $d_{ff} \\approx 8D/3$",
                  color=FEED_FORWARD)
    add2 = _add(ax, x, rows[9], add / 2)
    final = _box(ax, x - 0.8, rows[10], 1.4, "norm", "final RMSNorm", color=NORM)
    logits = _box(ax, x + 0.8, rows[10], 1.4, "lm_head", "$(B, L, |\\mathcal{V}|)$", color=LINEAR)
    chain = (embed, norm1, project, rope, attend, out, add1, norm2, swiglu, add2)
    for upper, lower in zip(chain, chain[1:]):
        _arrow(ax, upper.bottom, lower.top)
    _arrow(ax, add2.bottom, (x, (add2.bottom[1] + final.top[1]) / 2 - 0.05),
           (final.x, (add2.bottom[1] + final.top[1]) / 2 - 0.05), final.top)
    _arrow(ax, final.right, logits.left)
    for source, target in ((embed, add1), (add1, add2)):
        _residual(ax, source, target, side, target.right)
    frame_bottom = add2.bottom[1] + 0.14
    _frame(ax, x - w / 2 - 0.12, embed.bottom[1] + 0.05, 7.14, frame_bottom, "$\\times N$ blocks",
           (x - w / 2 - 0.02, add2.y), ha="left")
    return fig


LATENT_ATTENTION_ALT = (
    "Block diagram of multi-head latent attention, read from top to bottom. The input X, shape (B, L, D), goes "
    "two ways. Left, the queries: q_proj (or, with a compressed query, q_a_proj, q_a_layernorm and q_b_proj) "
    "gives per head a part without positions q^C, (B, H, L, d_k), which goes around the RoPE box unrotated, "
    "and a rotary part q^R, (B, H, L, d_R), which RoPE turns by position. Right, the keys and values: kv_a_proj_with_mqa gives, per token, d_c + d_R numbers; "
    "kv_a_layernorm normalises the first d_c, the latent c, (B, L, d_c); RoPE turns the other d_R, the rotary key "
    "k^R, (B, L, d_R), one per token shared by every head. Only these two go into the latent cache, (B, L_k, d_c + "
    "d_R) for L_k cached tokens. Plain form: kv_b_proj projects the cached latent up to each head's key k^C, "
    "(B, H, L_k, d_k), and value, (B, H, L_k, d_v). Attention takes the scores (q^C k^C + q^R k^R) / sqrt(d_k + "
    "d_R), (B, H, L, L_k), their softmax and the weighted values; o_proj maps the H d_v numbers back to (B, L, D). "
    "A note says that the absorbed form folds W_UK into the query and W_UV into the output, so kv_b_proj is "
    "never applied to the cache."
)


def latent_attention() -> Figure:
    """Multi-head latent attention as a block diagram: the query path, the latent and rotary key that
    are cached, the up-projection, attention and ``o_proj``, with the course's notation and shapes.

    Alt text: ``LATENT_ATTENTION_ALT``. Shown in the chapter "Multi-head latent attention".
    """
    fig, ax = _canvas(7.2, 7.6)
    ax.text(3.6, 0.3, "Multi-head latent attention: cache $d_c + d_R$ numbers per token",
            ha="center", va="center", fontsize=TITLE_PT, weight="bold")
    x_in = _box(ax, 3.6, 0.95, 1.7, "input $X$", "$(B, L, D)$")
    left, right = 1.55, 5.1
    query = _box(ax, left, 1.95, 2.9, "q_proj (or q_a_proj, q_b_proj)", "$q^C, q^R$: $(B, H, L, d_k + d_R)$",
                 color=LINEAR)
    compress = _box(ax, right, 1.95, 3.6, "kv_a_proj_with_mqa", "$(B, L, d_c + d_R)$", color=LINEAR)
    _arrow(ax, (x_in.x - 0.5, x_in.bottom[1]), (x_in.x - 0.5, 1.45), (left, 1.45), query.top)
    _arrow(ax, (x_in.x + 0.5, x_in.bottom[1]), (x_in.x + 0.5, 1.45), (right, 1.45), compress.top)
    rope_query = _box(ax, left + 0.6, 2.95, 1.7, "RoPE on $q^R$", "$(B, H, L, d_R)$", color=ATTENTION)
    latent = _box(ax, right - 0.95, 2.95, 1.7, "kv_a_layernorm", "latent $c$: $(B, L, d_c)$", color=NORM)
    rope_key = _box(ax, right + 0.95, 2.95, 1.7, "RoPE", "$k^R$: $(B, L, d_R)$", color=ATTENTION)
    _arrow(ax, (rope_query.x, query.bottom[1]), rope_query.top)
    _arrow(ax, (latent.x, compress.bottom[1]), latent.top)
    _arrow(ax, (rope_key.x, compress.bottom[1]), rope_key.top)
    cache = _box(ax, right, 3.95, 3.6, "latent cache: $c_j$ and $k^R_j$", "$(B, L_k, d_c + d_R)$", color=RESHAPE)
    _arrow(ax, latent.bottom, (latent.x, cache.top[1]))
    _arrow(ax, rope_key.bottom, (rope_key.x, cache.top[1]))
    up = _box(ax, right - 0.5, 4.95, 2.6, "kv_b_proj (plain form)", "$k^C, v$: $(B, H, L_k, d_k)$, $d_v$",
              color=LINEAR)
    _arrow(ax, (up.x, cache.bottom[1]), up.top)
    attend = _box(ax, 3.6, 6.0, 4.6, "$(q^C k^{C\\top} + q^R k^{R\\top}) / \\sqrt{d_k + d_R}$",
                  "softmax, weighted values: $(B, H, L, d_v)$", color=ATTENTION)
    _arrow(ax, rope_query.bottom, (rope_query.x, attend.top[1]))
    bypass = attend.top[1] - 0.25  # q^C is not rotated: it goes around the RoPE box
    _arrow(ax, (0.45, query.bottom[1]), (0.45, bypass), (1.6, bypass), (1.6, attend.top[1]))
    _note(ax, 0.55, 3.75, "$q^C$: not\nrotated")
    _arrow(ax, up.bottom, (up.x, attend.top[1]))
    bend = attend.top[1] - 0.25
    _arrow(ax, (6.65, cache.bottom[1]), (6.65, bend), (5.6, bend), (5.6, attend.top[1]))
    output = _box(ax, 3.6, 7.05, 2.2, "o_proj", "$(B, L, D)$", color=LINEAR)
    _arrow(ax, attend.bottom, output.top)
    _note(ax, 0.12, 7.05, "Absorbed form: $W_{UK}$\nfolded into the query,\n$W_{UV}$ into the output;\n"
          "kv_b_proj never runs\non the cache.")
    _note(ax, 7.1, 7.05, "$k^R$: one per token,\nshared by every head", ha="right")
    return fig


ABSORBED_DECODE_ALT = (
    "Block diagram of one decode step of multi-head latent attention in the absorbed form, read from top to "
    "bottom. The new token x_t, shape (B, 1, D), goes two ways. Right: kv_a_proj_with_mqa, kv_a_layernorm and "
    "RoPE give its latent c_t and rotary key k^R_t, which are appended to the latent cache, (B, L_k, d_c + d_R): "
    "one row [c_j ; k^R_j] per cached token, the same row for every head. Left: q_proj gives each head's query "
    "parts q^C, (B, H, 1, d_k), and q^R, (B, H, 1, d_R); q^C is multiplied by W_UK transposed, head by head, "
    "which turns it into d_c numbers, and RoPE turns q^R, so each head's query has d_c + d_R numbers, "
    "(B, H, 1, d_c + d_R). Attention then takes every head's scores against the same cached rows, the softmax, "
    "and the weighted sum of the cached latents c_j, (B, H, 1, d_c). Each head's sum is multiplied by its "
    "W_UV, giving (B, H, 1, d_v), and o_proj maps the H d_v numbers to (B, 1, D). A note says that this is "
    "multi-query attention: H query heads and one key of d_c + d_R numbers and one value of d_c numbers per "
    "token, 576 and 512 at DeepSeek-V3's sizes, with 128 heads. A second note says that kv_b_proj never runs "
    "on the cache."
)


def absorbed_decode() -> Figure:
    """MLA's absorbed decode step as a block diagram: the query folded through ``W_UK``, every head's scores
    against one cached row of ``d_c + d_R`` numbers (multi-query attention), the weighted latents unfolded
    by ``W_UV``, with the course's notation and shapes.

    Alt text: ``ABSORBED_DECODE_ALT``. Shown in the chapter "Multi-head latent attention".
    """
    fig, ax = _canvas(7.2, 6.6)
    ax.text(3.6, 0.3, "Absorbed decode: multi-query attention over $d_c + d_R$ numbers per token",
            ha="center", va="center", fontsize=TITLE_PT, weight="bold")
    left, right = 1.85, 5.35
    token = _box(ax, left, 0.95, 2.2, "new token $x_t$", "$(B, 1, D)$")
    query = _box(ax, left, 1.95, 3.1, "q_proj", "$q^C$: $(B, H, 1, d_k)$;  $q^R$: $d_R$", color=LINEAR)
    fold = _box(ax, left, 2.95, 3.1, "$q^C W_{UK}^{(h)\\top}$;  RoPE on $q^R$", "$(B, H, 1, d_c + d_R)$",
                color=LINEAR)
    append = _box(ax, right, 1.95, 3.3, "kv_a_proj_with_mqa, kv_a_layernorm", "RoPE on $k^R_t$; append $[c_t ; k^R_t]$",
                  color=LINEAR)
    cache = _box(ax, right, 2.95, 3.1, "latent cache: $[c_j ; k^R_j]$", "$(B, L_k, d_c + d_R)$", color=RESHAPE)
    _arrow(ax, token.bottom, query.top)
    _arrow(ax, query.bottom, fold.top)
    _arrow(ax, token.right, (right, token.y), append.top)
    _arrow(ax, append.bottom, cache.top)
    attend = _box(ax, 3.6, 4.05, 4.9, "every head against the same rows: softmax",
                  "weighted latents $c_j$:  $(B, H, 1, d_c)$", color=ATTENTION)
    _arrow(ax, fold.bottom, (left, attend.top[1]))
    _arrow(ax, cache.bottom, (right, attend.top[1]))
    unfold = _box(ax, 3.6, 5.05, 2.4, "$\\times\\, W_{UV}^{(h)}$", "$(B, H, 1, d_v)$", color=LINEAR)
    output = _box(ax, 3.6, 6.0, 2.0, "o_proj", "$(B, 1, D)$", color=LINEAR)
    _arrow(ax, attend.bottom, unfold.top)
    _arrow(ax, unfold.bottom, output.top)
    _note(ax, 0.12, 5.55, "MQA: $H$ query heads,\none key of $d_c + d_R$\nand one value of $d_c$\nper token")
    _note(ax, 7.1, 5.55, "DeepSeek-V3: 576 and 512,\n$H = 128$; kv_b_proj\nnever runs on the cache", ha="right")
    return fig
