"""Check for exercise 11 (chapter "Rotary position embeddings"): ``apply_rope(x, positions, base)``.

The learner rotates each interleaved pair ``(x_2i, x_2i+1)`` of ``x (..., L, d)`` by the angle
``positions[l] * base^(-2i/d)``, RoFormer's convention and ``lessons_src.apply_rope``'s. The
check compares with the library on several shapes, positions and bases; when the answer is
wrong it rebuilds the usual mistakes (GPT-NeoX's rotate-half pairing, exponent i/d, rotation
by -θ, positions ignored, pairs not interleaved back, ...) and names the one that matches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..device import one_cpu_thread
from ..rotary import apply_rope, rope_frequencies
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult

__all__ = ["check_apply_rope"]

_NAME = "check_apply_rope"
_TOL = 1e-5


@dataclass(frozen=True)
class _Case:
    description: str
    x: Tensor
    positions: Tensor
    base: float | None  # None: call without `base`, so the default (10000) applies


def _cases() -> list[_Case]:
    g = torch.Generator().manual_seed(11)

    def rand(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    return [
        _Case("x (6, 8), positions 0..5, default base", rand(6, 8), torch.arange(6), None),
        _Case("x (2, 3, 5, 16) = (B, H, L, d), positions 0..4, base=10000.0", rand(2, 3, 5, 16), torch.arange(5),
              10000.0),
        _Case("x (4, 8), positions 7..10 (a decoding step after 7 cached tokens)", rand(4, 8), torch.arange(7, 11),
              None),
        _Case("x (5, 4), positions [3, 0, 3, 9, 1] (any order, repeats allowed), base=500.0", rand(5, 4),
              torch.tensor([3, 0, 3, 9, 1]), 500.0),
        _Case("x (2, 6, 12) in float64, positions 20..25", rand(2, 6, 12, dtype=torch.float64),
              torch.arange(20, 26), None),
    ]


def _reference(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    cos, sin = rope_frequencies(x.size(-1), int(positions.max()) + 1, base=base)
    return apply_rope(x, cos, sin, positions=positions)


# -- known mistakes ------------------------------------------------------------------------------


def _angles(positions: Tensor, d: int, base: float, exponent: Callable[[Tensor, int], Tensor]) -> Tensor:
    """positions (L,) times θ_i for i = 0..d/2-1, with θ_i = base ** exponent(i, d); (L, d/2) float64."""
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = base ** exponent(i, d)
    return positions.to(torch.float64)[:, None] * theta[None, :]


def _rotate_pairs(x: Tensor, angles: Tensor, pairing: str = "interleaved", sign: float = 1.0,
                  layout: str = "interleaved", swap: bool = False) -> Tensor:
    """A rotation of x's pairs, right or wrong; computed in float64."""
    x64 = x.to(torch.float64)
    cos, sin = angles.cos(), sign * angles.sin()
    if swap:
        cos, sin = sin, cos
    if pairing == "interleaved":
        a, b = x64[..., 0::2], x64[..., 1::2]
    else:  # GPT-NeoX's rotate-half: x_i with x_{i + d/2}
        a, b = x64.chunk(2, dim=-1)
    first, second = a * cos - b * sin, a * sin + b * cos
    if pairing == "halves" or layout == "halves":
        return torch.cat((first, second), dim=-1)
    return torch.stack((first, second), dim=-1).flatten(-2)


def _correct_exponent(i: Tensor, d: int) -> Tensor:
    return -2 * i / d


_FORMULA = "θ_i = base ** (-2 * i / d) for pair i = 0 .. d/2 - 1 (i.e. `base ** (-torch.arange(0, d, 2) / d)`)"


def _wrong(exponent: Callable[[Tensor, int], Tensor] = _correct_exponent, same_positions: bool = False,
           base_ignored: bool = False, positions_ignored: bool = False, **rotate: object) -> Callable[..., Tensor]:
    """A wrong ``apply_rope(x, positions, base=10000.0)``: one switch per mistake."""

    def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
        used = torch.arange(x.size(-2)) if positions_ignored else positions
        used = torch.ones_like(used) if same_positions else used
        angles = _angles(used, x.size(-1), 10000.0 if base_ignored else base, exponent)
        return _rotate_pairs(x, angles, **rotate)

    return apply_rope


def _lengths_changed(case: Case, got: object) -> bool:
    x = case.args["x"]
    return (isinstance(got, Tensor) and got.shape == x.shape and not got.dtype.is_complex
            and bool(torch.isfinite(got).all())
            and not torch.allclose(_pair_norms(x), _pair_norms(got), rtol=1e-4, atol=1e-4))


def _angles_wrong(case: Case, got: object) -> bool:
    x = case.args["x"]
    return (isinstance(got, Tensor) and got.shape == x.shape and not got.dtype.is_complex
            and bool(torch.isfinite(got).all())
            and not torch.allclose(got.double(), _reference(**case.args).double(), rtol=_TOL, atol=_TOL))


MISTAKES = [
    Mistake("one coordinate per pair is returned: the last dim is d/2, not d",
            "you returned one coordinate per pair: return both, interleaved, so the last dim is d again.",
            looks_like=lambda case, got: isinstance(got, Tensor) and got.shape[:-1] == case.args["x"].shape[:-1]
            and got.size(-1) * 2 == case.args["x"].size(-1)),
    Mistake("you rotated the halves, pairing x_i with x_(i + d/2) (GPT-NeoX's \"rotate half\")",
            "this exercise uses RoFormer's interleaved pairs (x_2i, x_2i+1): take `x[..., 0::2]` and `x[..., 1::2]`, "
            "and interleave the results back.", _wrong(pairing="halves")),
    Mistake("the rotated pairs are returned as [all first coordinates, all second coordinates]",
            "interleave them back so that pair i sits at dimensions 2i and 2i+1: "
            "`torch.stack((first, second), dim=-1).flatten(-2)`.", _wrong(layout="halves")),
    Mistake("the frequency exponent is i/d instead of 2i/d", f"use {_FORMULA}.", _wrong(lambda i, d: -i / d)),
    Mistake("the frequency exponent is 4i/d instead of 2i/d (the step of 2 was counted twice)", f"use {_FORMULA}.",
            _wrong(lambda i, d: -4 * i / d)),
    Mistake("the frequency exponent has the wrong sign: base ** (+2i/d) grows instead of shrinking",
            f"use a negative exponent: {_FORMULA}.", _wrong(lambda i, d: 2 * i / d)),
    Mistake("the rotation goes the wrong way (by -mθ): a sign error",
            "rotate counter-clockwise: x'_2i = x_2i cos - x_2i+1 sin and x'_2i+1 = x_2i sin + x_2i+1 cos.",
            _wrong(sign=-1.0)),
    Mistake("cos and sin are swapped", "x'_2i = x_2i cos(mθ_i) - x_2i+1 sin(mθ_i): cos multiplies the pair's own "
            "coordinate.", _wrong(swap=True)),
    Mistake("positions are not applied: every position gets the same rotation (by θ_i, as if m = 1)",
            "multiply the frequencies by each token's position: angles = positions[:, None] * theta[None, :], "
            "shape (L, d/2).", _wrong(same_positions=True)),
    Mistake("x is returned unrotated (no position is applied)", "rotate each pair by positions[l] * θ_i.",
            lambda x, positions, base=10000.0: x),
    Mistake("the positions argument is ignored: you used 0 .. L-1",
            "use the positions you are given (a decoding step starts after the cached tokens).",
            _wrong(positions_ignored=True)),
    Mistake("the base argument is ignored: you used 10000 instead of {base:g}",
            "use the `base` parameter in θ_i = base ** (-2i/d).", _wrong(base_ignored=True),
            when=lambda case: case.info["base"] != 10000.0),
    Mistake("the norms are not preserved: the pairs (x_2i, x_2i+1) change length",
            "a rotation keeps lengths; check both lines: x'_2i = x_2i cos - x_2i+1 sin, "
            "x'_2i+1 = x_2i sin + x_2i+1 cos (each uses both coordinates, with cos² + sin² = 1).",
            looks_like=_lengths_changed),
    Mistake("the output differs from the reference (pair lengths are preserved, so the angles are wrong)",
            "compute angles = positions[:, None] * base ** (-torch.arange(0, d, 2) / d), shape (L, d/2), "
            "in float64, and rotate pair i by angles[:, i].", looks_like=_angles_wrong),
]


def _pair_norms(t: Tensor) -> Tensor:
    return t.detach().to(torch.float64).unflatten(-1, (-1, 2)).norm(dim=-1)  # (..., L, d/2)


# -- the check -----------------------------------------------------------------------------------


def check_apply_rope(fn: Callable[..., object]) -> CheckResult:
    """Check exercise 11: ``fn(x, positions, base=10000.0)`` rotates the interleaved pairs of
    ``x (..., L, d)`` like ``lessons_src.apply_rope``, on five cases (batched heads, offset and
    unordered positions, another base, float64). The result must have x's dtype. Built on
    ``_framework.py``: the mistakes are the table :data:`MISTAKES`.
    """
    session = Session(_NAME)
    cases = []
    for c in _cases():
        args = {"x": c.x, "positions": c.positions} | ({} if c.base is None else {"base": c.base})
        cases.append(Case(c.description, args, info={"base": 10000.0 if c.base is None else c.base}))
    with one_cpu_thread():
        failure = run_check(session, fn, cases, _reference, ("the output",), MISTAKES, tol=_TOL, same_dtype=True)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match lessons_src.apply_rope (batched heads, offset and "
                                "unordered positions, another base, float64)"))
