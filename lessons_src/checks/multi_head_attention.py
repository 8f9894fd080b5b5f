"""Check for exercise 4 (chapter "Multi-head attention"): what each head adds to the output.

The learner writes ``head_contributions(x, attention, mask=None) -> (B, H, L, D)``: ``x`` is
``(B, L, D)``, ``attention`` a :class:`lessons_src.multihead.MultiHeadAttention` ``(D, H)`` used
for self-attention. Head ``h``'s contribution is its attention output ``(B, L, d_k)`` times the
columns ``h * d_k .. (h + 1) * d_k - 1`` of ``W_O`` (the block that reads head ``h``), so that
``contributions.sum(dim=1) + attention.w_o.bias == attention(x, x, x, mask)[0]``: the
concatenation followed by ``W_O`` is a sum over heads. ``W_O``'s bias belongs to no head and is left out.

The cases vary ``B``, ``L``, ``D`` and ``H`` (one head included, where the contribution is the
output minus the bias), a padding mask and a causal mask, and modules without biases. A wrong
answer is matched against the table :data:`MISTAKES` (the bias in every head, ``W_O``'s rows for
its columns, the heads before ``W_O``, a direct-view split, the wrong scale, an untransposed
weight, swapped projections, a mask ignored or inverted, the softmax over the queries, the sum
over heads returned), built on the framework (``_framework.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask, padding_mask
from ..multihead import MultiHeadAttention, split_heads
from ._framework import Case, Mistake, Session, done, passed, run_check, shape_is
from ._result import CheckResult
from ._steps import step

__all__ = ["check_head_contributions"]

NAME = "check_head_contributions"


def _layer(d_model: int, num_heads: int, seed: int, bias: bool = True) -> MultiHeadAttention:
    """A MultiHeadAttention with seeded weights (outputs of unit size) and clearly non-zero biases."""
    g = torch.Generator().manual_seed(seed)
    layer = MultiHeadAttention(d_model, num_heads, bias=bias)
    with torch.no_grad():
        for p in layer.parameters():
            # Biases of 0.5: a bias added to every head is then far outside the tolerance.
            scale = 1.0 / math.sqrt(d_model) if p.dim() == 2 else 0.5
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return layer.eval()


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(4)

    def case(description: str, B: int, L: int, D: int, H: int, seed: int, mask: Tensor | None = None,
             bias: bool = True) -> Case:
        layer = _layer(D, H, seed, bias)
        return Case(f"B={B}, L={L}, d_model={D}, num_heads={H} (d_k={D // H}), {description}",
                    {"x": torch.randn(B, L, D, generator=g), "attention": layer},
                    {} if mask is None else {"mask": mask},
                    {"L": L, "d_k": D // H, "D": D, "H": H, "B": B, "H_minus_1": H - 1})

    # d_k differs from case to case (4, 5, 9, 8, 2) and L != H everywhere, so no size written in the
    # code passes, and a head axis in the wrong place shows in the shape. sqrt(d_k) and sqrt(D)
    # differ whenever H > 1.
    return [
        case("no mask", 2, 5, 12, 3, 1),
        case("no mask", 1, 6, 20, 4, 2),
        case("a padding mask of shape (3, 1, 1, 4) (True = may attend), lengths 4, 2, 3", 3, 4, 18, 2, 3,
             padding_mask([4, 2, 3])[:, None, None, :]),
        case("one head: its contribution is the output minus w_o's bias", 2, 3, 8, 1, 4),
        case("a causal mask (5, 5), a module built with bias=False", 2, 5, 16, 8, 5, causal_mask(5), bias=False),
    ]


def _reference(x: Tensor, attention: MultiHeadAttention, mask: Tensor | None = None) -> Tensor:
    with torch.no_grad():
        H = attention.num_heads
        q, k, v = (split_heads(w(x), H) for w in (attention.w_q, attention.w_k, attention.w_v))  # (B, H, L, d_k)
        heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, H, L, d_k)
        D, d_k = x.size(-1), q.size(-1)
        blocks = attention.w_o.weight.view(D, H, d_k)  # (out, H, d_k): columns h*d_k.. read head h
        return torch.einsum("bhld,ohd->bhlo", heads, blocks)  # (B, H, L, D)


def _projected(x: Tensor, layer: torch.nn.Linear, what: str, W: str, H: int) -> Tensor:
    """The {queries, keys, values} of one projection, split into heads: ``x W_ᵀ + b`` then ``(B, H, L, d_k)``."""
    t = step(f"{what} = x {W}ᵀ", torch.matmul, x, layer.weight.T, axes=("position", "feature"))
    if layer.bias is not None:
        t = step(f"{what}: add the bias of {W}", torch.add, t, layer.bias, axes=("position", "feature"))
    return step(f"split the {what} into heads", split_heads, t, H, axes=("position", "feature"))


def _steps(x: Tensor, attention: MultiHeadAttention, mask: Tensor | None = None) -> Tensor:
    """The chapter's multi-head attention step by step, up to each head's block of W_O (``_steps.py`` searches
    small changes to each); equal to :func:`_reference`."""
    with torch.no_grad():
        H, D = attention.num_heads, x.size(-1)
        q = _projected(x, attention.w_q, "queries", "W_Q", H)  # (B, H, L, d_k)
        k = _projected(x, attention.w_k, "keys", "W_K", H)
        v = _projected(x, attention.w_v, "values", "W_V", H)
        qk = ("query", "key")
        scores = step("scores = query · keyᵀ, per head", torch.matmul, q, k.transpose(-2, -1), axes=("query", "d_k"))
        scores = step("scale by √d_k", torch.div, scores, math.sqrt(q.size(-1)), axes=qk)
        if mask is not None:
            scores = step("mask: -inf where a key is not allowed", Tensor.masked_fill, scores, ~mask, float("-inf"),
                          axes=qk)
        weights = step("softmax over the keys", torch.softmax, scores, dim=-1, axes=qk)
        heads = step("each head's weighted sum of the values", torch.matmul, weights, v, axes=qk)  # (B, H, L, d_k)
        blocks = attention.w_o.weight.view(D, H, -1).permute(1, 2, 0)  # (H, d_k, D): head h's columns of W_O, ᵀ
        return step("each head times its block of W_O's columns", torch.matmul, heads, blocks,
                    axes=("query", "d_k"))  # (B, H, L, D)


# -- known mistakes: each a wrong implementation with the learner's signature, or a predicate --------


def _linear(layer: torch.nn.Linear, x: Tensor) -> Tensor:
    return x @ layer.weight.T + (0 if layer.bias is None else layer.bias)


def _untransposed(layer: torch.nn.Linear, x: Tensor) -> Tensor:
    return x @ layer.weight + (0 if layer.bias is None else layer.bias)  # x W, not x W^T


def _variant(direct_view: bool = False, scale_by_d_model: bool = False,
             project: Callable[[torch.nn.Linear, Tensor], Tensor] = _linear, keys: str = "w_k",
             swap_qk: bool = False, mask_mode: str = "use", dim: int = -1, columns: str = "block",
             bias_per_head: bool = False, output: str = "per_head", raw_values: bool = False,
             transposed_weights: bool = False, interleaved_split: bool = False,
             no_qkv_bias: bool = False) -> Callable[..., Tensor]:
    """The contributions with one thing changed (a known mistake), with the learner's signature."""

    def contributions(x: Tensor, attention: MultiHeadAttention, mask: Tensor | None = None) -> Tensor:
        with torch.no_grad():
            B, L, D = x.shape
            H = attention.num_heads
            d_k = D // H

            def split(t: Tensor, interleaved: bool = False) -> Tensor:
                if interleaved:  # feature d*H + h to head h
                    return t.view(B, L, d_k, H).permute(0, 3, 1, 2)
                return t.reshape(B, H, L, d_k) if direct_view else t.view(B, L, H, d_k).transpose(1, 2)

            proj = (lambda layer, t: t @ layer.weight.T) if no_qkv_bias else project  # noqa: E731
            q = split(proj(attention.w_q, x))
            k = split(proj(getattr(attention, keys), x))
            v = split(x if raw_values else proj(attention.w_v, x), interleaved_split)
            if swap_qk:
                q, k = k, q
            scores = q @ k.transpose(-2, -1) / math.sqrt(D if scale_by_d_model else d_k)  # (B, H, L, L)
            if mask is not None and mask_mode != "ignore":
                scores = scores.masked_fill(mask if mask_mode == "invert" else ~mask, float("-inf"))
            weights = torch.softmax(scores, dim=dim)  # (B, H, L, L)
            heads = (weights.transpose(-2, -1) if transposed_weights else weights) @ v  # (B, H, L, d_k)
            if output == "heads":
                return heads
            W = attention.w_o.weight  # (out, in)
            blocks = {"block": W.view(D, H, d_k),  # [o, h, d] = W[o, h*d_k + d]
                      "rows": W.view(H, d_k, D).permute(2, 0, 1),  # [o, h, d] = W[h*d_k + d, o]
                      "interleaved": W.view(D, d_k, H).permute(0, 2, 1)}[
                "interleaved" if interleaved_split else columns]  # [o, h, d] = W[o, d*H + h]
            out = torch.einsum("bhld,ohd->bhlo", heads, blocks)  # (B, H, L, D)
            if bias_per_head and attention.w_o.bias is not None:
                out = out + attention.w_o.bias
            return out.sum(1) if output == "summed" else out

    return contributions


_BLOCKS = ("write W_O as a block matrix [W_O^1 ... W_O^H], one block of d_k = {d_k} columns per head: "
           "`w_o.weight` has shape (out, in), and its *in* features are the concatenated heads")

MISTAKES = [
    Mistake("returned shape (B, H, L, d_k) = ({B}, {H}, {L}, {d_k}): the heads' attention outputs, before W_O",
            "each head's output must still go through its part of W_O, back to d_model = {D} features: "
            + _BLOCKS + ".", looks_like=shape_is(lambda B, L, D, H, d_k, **_: (B, H, L, d_k) if H > 1 else None)),
    Mistake("the heads' attention outputs are returned before W_O",
            "each head's output must still go through its block of W_O's columns.", _variant(output="heads")),
    Mistake("returned shape (B, L, D) = ({B}, {L}, {D}): the contributions are summed over the heads (or this is "
            "the layer's output)", "keep one contribution per head, stacked on dim 1: (B, H, L, D). Their sum over "
            "dim 1, plus w_o's bias, is the layer's output.",
            looks_like=shape_is(lambda B, L, D, H, d_k, **_: (B, L, D))),
    Mistake("returned shape (B, L, H, D): the head axis must come right after the batch",
            "stack the heads on dim 1, giving (B, H, L, D).",
            looks_like=shape_is(lambda B, L, D, H, d_k, **_: (B, L, H, D) if H > 1 else None)),
    Mistake("w_o's bias is added to every head's contribution (their sum is off by H - 1 = {H_minus_1} biases)",
            "the bias is added once, after the sum over heads: it belongs to no head. Leave it out (calling "
            "`attention.w_o(...)` adds it).", _variant(bias_per_head=True)),
    Mistake("W_O's rows are used instead of its columns (`w_o.weight[h*d_k:(h+1)*d_k, :]`)",
            "nn.Linear computes x @ weight.T, so input feature j meets *column* j of `w_o.weight`; "
            + _BLOCKS + ".", _variant(columns="rows")),
    Mistake("head h's block of W_O is taken as the interleaved columns h, h+H, h+2H, ...",
            "head h owns a contiguous block of features, h*d_k .. (h+1)*d_k - 1, in the concatenation, so it "
            "meets a contiguous block of W_O's columns.", _variant(columns="interleaved")),
    Mistake("the values and W_O are split interleaved (feature d*H + h to head h, `[..., h::H]`), "
            "not in contiguous blocks of d_k = {d_k}",
            "head h owns the contiguous features h*d_k .. (h+1)*d_k - 1: split with `.view(B, L, H, d_k)` then "
            "`.transpose(1, 2)`, and take W_O's columns h*d_k .. (h+1)*d_k - 1 for it.",
            _variant(interleaved_split=True)),
    Mistake("the weights multiply x split into heads, not the projected values: w_v is skipped",
            "each head averages its *values*, v = w_v(x) split into heads, not x itself.", _variant(raw_values=True)),
    Mistake("the transposed weights multiply the values (key j's column, not query i's row)",
            "the output at query i is the weighted sum over the keys, weights[..., i, :] @ v: `weights @ v`, "
            "not `weights.transpose(-2, -1) @ v`.", _variant(transposed_weights=True)),
    Mistake("the queries, keys and values are projected without their biases (`x @ w.weight.T` alone)",
            "the module's projections are affine: `attention.w_q(x)` (= x @ Wᵀ + b); call the layers, or add "
            "`.bias` when it is not None.", _variant(no_qkv_bias=True), when=lambda case: case.info.get("bias", True)),
    Mistake("the heads are split with a direct view (B, H, L, d_k): positions and heads are mixed",
            "cut each position's features into H blocks of d_k first, then move the head axis in front of the "
            "positions (the chapter's `split_heads`, also in lessons_src).", _variant(direct_view=True)),
    Mistake("the scores are divided by sqrt(d_model) = sqrt({D}) instead of sqrt(d_k) = sqrt({d_k})",
            "each head's dot products run over its d_k = {d_k} features.", _variant(scale_by_d_model=True)),
    Mistake("a projection computes x @ W instead of x @ W.T (the weight is not transposed)",
            "nn.Linear stores its weight as (out, in) and computes x @ weight.T + bias: call the layer, "
            "`attention.w_q(x)`, or use `F.linear`.", _variant(project=_untransposed)),
    Mistake("the keys are projected with w_q", "keys come from `attention.w_k`, queries from `attention.w_q`.",
            _variant(keys="w_q")),
    Mistake("the queries and keys are swapped (scores = K Q^T, transposed)",
            "queries come from `attention.w_q`, keys from `attention.w_k`; scores are Q K^T, one row per query.",
            _variant(swap_qk=True)),
    Mistake("the softmax runs over the queries (dim=-2), not the keys",
            "each query's weights over the keys sum to 1: the softmax runs over the last dim.", _variant(dim=-2)),
    Mistake("the mask is inverted", "our masks mean True = may attend: hide the positions where the mask is False.",
            _variant(mask_mode="invert")),
    Mistake("the mask is ignored", "pass the mask on to the attention of every head: it broadcasts to "
            "(B, H, L, L).", _variant(mask_mode="ignore")),
]

#: Exceptions this exercise often raises (before the framework's table).
HINTS = [
    (r"unsupported operand type\(s\) for .*'NoneType'|'NoneType' object",
     "a module built with bias=False has `w_o.bias = None` (and no bias in w_q, w_k, w_v either): the "
     "contributions do not need w_o's bias at all; let the layers handle their own biases (call them).",
     "`w_o.bias` is None: this module has no biases (bias=False)"),
]


def check_head_contributions(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(x, attention, mask=None) -> contributions (B, H, L, D)`` (exercise 4).

    ``x (B, L, D)``; ``attention`` a ``MultiHeadAttention(D, H)`` (self-attention); ``mask`` bool,
    broadcastable to ``(B, H, L, L)`` (True = may attend). ``contributions[:, h]`` is head ``h``'s
    attention output times the columns of ``W_O`` that read it; their sum over heads plus
    ``w_o.bias`` is the layer's output. Five cases; the first failing one is reported, naming
    the mistake. Never raises because of the learner's code (under ``LESSONS_SRC_STRICT=1`` a
    failure raises AssertionError).
    """
    session = Session(NAME, HINTS, copy_modules=True)
    cases = _cases()
    failure = run_check(session, fn, cases, _reference, ("contributions",), MISTAKES, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match (1 to 8 heads; padding and causal masks; a module "
                                "without biases): the heads' contributions sum to the output, less w_o's bias"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_cases, _reference, _steps)]
