"""Check for exercise 16 (chapter "From the original block to a modern LLM block"): RMSNorm.

The learner writes ``rms_norm(x, weight, eps=1e-6) -> (..., D)``: ``x / sqrt(mean(x²) + eps) * weight``
over the last dim. The cases vary the leading dims, D, eps (up to 0.5, where eps outside the root
shows) and x's mean (0 and far from 0, where subtracting the mean shows). The mistakes are the table
:data:`MISTAKES`, built on the framework (``_framework.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult

__all__ = ["check_rms_norm"]

NAME = "check_rms_norm"


def _reference(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


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
    failure = run_check(session, fn, cases, _reference, ("output",), MISTAKES)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match torch.nn.RMSNorm's formula (one vector, rows, "
                                "a large eps, values around 100)"))
