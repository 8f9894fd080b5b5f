"""Checks for exercise 16 (chapter "From the original block to a modern LLM block"): RMSNorm and SwiGLU.

Part 1, :func:`check_rms_norm`: the learner writes ``rms_norm(x, weight, eps=1e-6) -> (..., D)``,
``x / sqrt(mean(x²) + eps) * weight`` over the last dim. The cases vary the leading dims, D, eps (up to
0.5, where eps outside the root shows) and x's mean (0 and far from 0, where subtracting the mean
shows). The mistakes are the table :data:`MISTAKES`.

Part 2, :func:`check_swiglu`: the learner writes the SwiGLU feed-forward from a checkpoint's three
weight matrices, stored ``(out, in)`` as ``nn.Linear`` stores them:
``swiglu(x, w_gate, w_up, w_down) = (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T``. The cases vary D,
the hidden width and the leading dims; the mistakes (gate and up swapped, SiLU on the product or after the down
projection, ReLU/GELU/sigmoid instead of SiLU, no gate, a sum instead of a product, ...) are
:data:`SWIGLU_MISTAKES`. Both are built on the framework (``_framework.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_rms_norm", "check_swiglu"]

NAME = "check_rms_norm"


def _reference(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def _steps(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """The chapter's formula step by step (``_steps.py`` searches small changes to each); equal to :func:`_reference`."""
    rows = ("vector", "feature")
    squares = step("the squares x²", torch.square, x, axes=rows)
    mean_square = step("the mean of the squares over the features", torch.mean, squares, dim=-1, keepdim=True,
                       axes=rows)
    mean_square = step("eps added to the mean square, under the root", torch.add, mean_square, eps, axes=rows)
    rms = step("the root mean square √(mean(x²) + eps)", torch.sqrt, mean_square, axes=rows)
    normalised = step("x divided by its root mean square", torch.div, x, rms, axes=rows)
    return step("times the gain weight", torch.mul, normalised, weight, axes=rows)


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(16)

    def case(description: str, x: Tensor, eps: float) -> Case:
        weight = 1.0 + 0.5 * torch.randn(x.size(-1), generator=g)
        return Case(f"{description}, eps={eps}", {"x": x, "weight": weight}, {"eps": eps}, {"eps": eps})

    return [
        case("one vector of 8 with mean 2", 2.0 + torch.randn(8, generator=g), 1e-6),
        case("(3, 5) rows of mean 0", torch.randn(3, 5, generator=g), 1e-6),
        case("(2, 4, 6), mean 1, a large eps", 1.0 + torch.randn(2, 4, 6, generator=g), 0.5),
        case("(2, 3, 16), values around 100", 100.0 + 10 * torch.randn(2, 3, 16, generator=g), 1e-5),
    ]


def _rms(centre: bool = False, eps_outside: bool = False, reduce: str = "mean", sqrt: bool = True,
         weight: bool = True, dim: int = -1, std: bool = False) -> Callable[..., Tensor]:
    def rms_norm(x: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor:
        if std:
            scale = x.std(dim=-1, keepdim=True) + eps
            return x / scale * w
        y = x - x.mean(dim=-1, keepdim=True) if centre else x
        square = y.pow(2).sum(dim=dim, keepdim=True) if reduce == "sum" else y.pow(2).mean(dim=dim, keepdim=True)
        if eps_outside:
            denominator = torch.sqrt(square) + eps
        else:
            denominator = torch.sqrt(square + eps) if sqrt else square + eps
        out = y / denominator
        return out * w if weight else out

    return rms_norm


MISTAKES = [
    Mistake("the mean is subtracted first: that is LayerNorm, not RMSNorm",
            "RMSNorm divides x itself by its root mean square; do not centre it (`x - x.mean(...)`).",
            _rms(centre=True)),
    Mistake("x is divided by its standard deviation (`x.std()`), not by its root mean square",
            "use `torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)`: no mean subtracted, no n - 1.",
            _rms(std=True)),
    Mistake("eps is added outside the square root",
            "add eps under the root: `torch.sqrt(mean_of_squares + eps)` ({eps} here).", _rms(eps_outside=True)),
    Mistake("the squares are summed, not averaged", "take the *mean* of the squares over the last dim, "
            "`x.pow(2).mean(dim=-1, keepdim=True)`, so the result does not grow with D.", _rms(reduce="sum")),
    Mistake("the square root is missing: x is divided by its mean square",
            "divide by the root mean square: `torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)`.",
            _rms(sqrt=False)),
    Mistake("the weight is not applied", "multiply the normalised x by `weight` (one gain per feature).",
            _rms(weight=False)),
    Mistake("the output is multiplied by (1 + weight), Gemma's convention, not by weight",
            "this course's RMSNorm, like `torch.nn.RMSNorm` and Llama's, multiplies by `weight` itself; Gemma stores "
            "weight - 1 in its checkpoints and multiplies by (1 + weight).",
            lambda x, w, eps=1e-6: _rms(weight=False)(x, w, eps) * (1 + w)),
    Mistake("the mean square runs over the wrong dim", "normalise each vector over its features, the last dim: "
            "`mean(dim=-1, keepdim=True)`.", _rms(dim=0), when=lambda case: case.args["x"].dim() > 1),
]


def check_rms_norm(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(x, weight, eps=1e-6) -> (..., D)`` (exercise 16):
    ``x / sqrt(mean(x², last dim) + eps) * weight``. Four cases; the first failing one is reported,
    naming the mistake. Never raises because of the learner's code (under ``LESSONS_SRC_STRICT=1``
    a failure raises AssertionError).
    """
    session = Session(NAME)
    cases = _cases()
    failure = run_check(session, fn, cases, _reference, ("output",), MISTAKES, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match torch.nn.RMSNorm's formula (one vector, rows, "
                                "a large eps, values around 100)"))


# -- part 2: SwiGLU ----------------------------------------------------------------------------------------

SWIGLU = "check_swiglu"


def _swiglu_reference(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def _swiglu_steps(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """The chapter's formula step by step (``_steps.py`` searches small changes to each); equal to
    :func:`_swiglu_reference`. The weights are ``(out, in)``, so each projection multiplies by a transpose."""
    gate = step("the gate branch x · W_gateᵀ", torch.matmul, x, w_gate.transpose(-2, -1))
    up = step("the up branch x · W_upᵀ", torch.matmul, x, w_up.transpose(-2, -1))
    activated = step("SiLU on the gate branch", F.silu, gate, axes=("hidden unit",))
    hidden = step("the gated hidden vector silu(gate) ⊙ up", torch.mul, activated, up, axes=("hidden unit",))
    return step("the down projection · W_downᵀ", torch.matmul, hidden, w_down.transpose(-2, -1))


def _swiglu_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1616)

    def case(description: str, leading: tuple[int, ...], d_model: int, d_ff: int) -> Case:
        x = 1.5 * torch.randn(*leading, d_model, generator=g)  # many negative pre-activations: ReLU, GELU, SiLU differ
        weights = [torch.randn(d_ff, d_model, generator=g) / d_model**0.5,
                   torch.randn(d_ff, d_model, generator=g) / d_model**0.5,
                   torch.randn(d_model, d_ff, generator=g) / d_ff**0.5]
        return Case(f"{description}: x {tuple(x.shape)}, d_ff={d_ff}",
                    {"x": x, "w_gate": weights[0], "w_up": weights[1], "w_down": weights[2]}, info={"hidden": d_ff})

    return [
        case("one vector", (), 6, 16),
        case("a batch of sequences", (2, 5), 8, 24),  # the 8/3 width rule: 8 * 8/3 rounded up
        case("a wider block", (3,), 12, 32),
    ]


def _ffn(act: Callable[[Tensor], Tensor], gate: str = "gate", on: str = "gate",
         combine: str = "product") -> Callable[..., Tensor]:
    """A feed-forward with one slip: which activation, on which branch, combined how."""

    def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
        a, b = F.linear(x, w_gate), F.linear(x, w_up)
        if gate == "up":
            a, b = b, a
        if on == "product":
            return F.linear(act(a * b), w_down)
        if on == "down":
            return act(F.linear(a * b, w_down))
        if on == "both":
            return F.linear(act(a) * act(b), w_down)
        if combine == "sum":
            return F.linear(act(a) + b, w_down)
        if combine == "none":
            return F.linear(act(a), w_down)
        return F.linear(act(a) * b, w_down)

    return swiglu


_SILU = "SiLU (`F.silu`, x * sigmoid(x))"

SWIGLU_MISTAKES = [
    Mistake("the gate and up projections are swapped: SiLU is applied to the up branch, x @ w_up.T",
            "SiLU goes on the *gate* branch only: silu(x @ w_gate.T), then multiply by x @ w_up.T. A checkpoint's "
            "names say which is which; swapping them runs without error and gives other outputs.",
            _ffn(F.silu, gate="up")),
    Mistake("SiLU is applied to the product of the two branches, not to the gate branch alone",
            "apply SiLU to x @ w_gate.T first, then multiply by the up branch: the up branch stays linear.",
            _ffn(F.silu, on="product")),
    Mistake("SiLU is applied after the down projection",
            "the activation acts inside the hidden width, before w_down: silu(gate) * up, then the down projection.",
            _ffn(F.silu, on="down")),
    Mistake("SiLU is applied to both branches",
            "only the gate branch goes through SiLU; the up branch is the plain linear projection x @ w_up.T.",
            _ffn(F.silu, on="both")),
    Mistake("ReLU instead of SiLU (that is ReGLU)", f"SwiGLU uses {_SILU}: smooth, and not 0 for negative inputs.",
            _ffn(F.relu)),
    Mistake("GELU instead of SiLU (that is GeGLU)", f"SwiGLU uses {_SILU}, not `F.gelu`.", _ffn(F.gelu)),
    Mistake("sigmoid instead of SiLU (that is the original GLU)",
            f"SwiGLU uses {_SILU}: x times sigmoid(x), not sigmoid(x) alone.", _ffn(torch.sigmoid)),
    Mistake("the up branch is missing: there is no gate, only silu(x @ w_gate.T) @ w_down.T",
            "multiply the activated gate by the up branch, x @ w_up.T, elementwise: that product is the gating.",
            _ffn(F.silu, combine="none")),
    Mistake("the down projection is missing: the result has the hidden width d_ff={hidden}, not D",
            "project back to the model width: multiply the gated hidden vector by w_down.T, shape (d_ff, D).",
            looks_like=lambda case, got: isinstance(got, Tensor) and got.shape[:-1] == case.args["x"].shape[:-1]
            and got.size(-1) == case.args["w_gate"].size(0) and {"hidden": got.size(-1)}),
    Mistake("SiLU's sign is reversed: z / (1 + exp(z)) = z * sigmoid(-z), not z / (1 + exp(-z))",
            f"SwiGLU uses {_SILU} = z / (1 + exp(-z)): large positive z pass almost unchanged, negative ones are "
            "damped towards 0.", _ffn(lambda z: z * torch.sigmoid(-z))),
    Mistake("z * sigmoid(1.702 z), the quick approximation of GELU, instead of SiLU = z * sigmoid(z)",
            f"SwiGLU uses {_SILU}, with no factor inside the sigmoid.", _ffn(lambda z: z * torch.sigmoid(1.702 * z))),
    Mistake("each branch is projected down to D and the two are multiplied there: the product belongs in the hidden "
            "width d_ff={hidden}, before w_down",
            "multiply the two branches first, silu(x @ w_gate.T) * (x @ w_up.T), shape (..., d_ff), then project "
            "the product down once with w_down.",
            lambda x, wg, wu, wd: F.linear(F.silu(F.linear(x, wg)), wd) * F.linear(F.linear(x, wu), wd)),
    Mistake("SiLU is applied to the input x, before the gate projection, not to the gate's output x @ w_gate.T",
            f"project first, then activate: silu(x @ w_gate.T), {_SILU}.",
            lambda x, wg, wu, wd: F.linear(F.linear(F.silu(x), wg) * F.linear(x, wu), wd)),
    Mistake("the two branches are added, not multiplied",
            "the gate *multiplies* the up branch elementwise (`*`): each hidden unit is scaled by its gate.",
            _ffn(F.silu, combine="sum")),
]

_SWIGLU_HINTS = [
    (r"mat1 and mat2 shapes cannot be multiplied|shapes cannot be multiplied",
     "the weights are stored as nn.Linear stores them, (out, in): w_gate and w_up are (d_ff, D), w_down is "
     "(D, d_ff). Multiply by the transpose, `x @ w_gate.T` (or `F.linear(x, w_gate)`).",
     "a weight is used without its transpose"),
]


def check_swiglu(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``swiglu(x, w_gate, w_up, w_down) -> (..., D)`` (exercise 16, part 2):
    ``(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T`` with checkpoint-layout weights ``(out, in)``. Three
    cases; the first failing one is reported, naming the mistake (:data:`SWIGLU_MISTAKES`). Never raises because
    of the learner's code (under ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(SWIGLU, _SWIGLU_HINTS)
    cases = _swiglu_cases()
    failure = run_check(session, fn, cases, _swiglu_reference, ("output",), SWIGLU_MISTAKES,
                        steps=_swiglu_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match SwiGLU, down(silu(gate) * up), with the checkpoint's "
                                "(out, in) weights (one vector, sequences, a wider block)"))


#: The references written as named steps, with the cases they must equal the references on (tests/test_checks_steps.py).
STEPPED = [(_cases, _reference, _steps), (_swiglu_cases, _swiglu_reference, _swiglu_steps)]
