"""Check for exercise 11 (chapter "Rotary position embeddings"): ``apply_rope(x, positions, base)``.

The learner rotates each interleaved pair ``(x_2i, x_2i+1)`` of ``x (..., L, d)`` by the angle
``positions[l] * base^(-2i/d)``, RoFormer's convention and ``lessons_src.apply_rope``'s. The
check compares with the library on several shapes, positions and bases; when the answer is
wrong it rebuilds the usual mistakes (GPT-NeoX's rotate-half pairing, exponent i/d, rotation
by -θ, positions ignored, pairs not interleaved back, ...) and names the one that matches.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..device import one_cpu_thread
from ..rotary import apply_rope, rope_frequencies
from ._result import CheckResult, call_learner, close, finish, not_one_tensor, shape_of

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


def _candidates(case: _Case) -> list[tuple[Tensor, str, str]]:
    """Wrong answers for this case: (output, what is wrong, how to fix)."""
    x, positions = case.x, case.positions
    base = 10000.0 if case.base is None else case.base
    d, seq_len = x.size(-1), x.size(-2)
    right = _angles(positions, d, base, _correct_exponent)
    formula = "θ_i = base ** (-2 * i / d) for pair i = 0 .. d/2 - 1 (i.e. `base ** (-torch.arange(0, d, 2) / d)`)"
    out = [
        (_rotate_pairs(x, right, pairing="halves"),
         "you rotated the halves, pairing x_i with x_(i + d/2) (GPT-NeoX's \"rotate half\")",
         "this exercise uses RoFormer's interleaved pairs (x_2i, x_2i+1): take `x[..., 0::2]` and `x[..., 1::2]`, "
         "and interleave the results back."),
        (_rotate_pairs(x, right, layout="halves"),
         "the rotated pairs are returned as [all first coordinates, all second coordinates]",
         "interleave them back so that pair i sits at dimensions 2i and 2i+1: "
         "`torch.stack((first, second), dim=-1).flatten(-2)`."),
        (_rotate_pairs(x, _angles(positions, d, base, lambda i, d: -i / d)),
         "the frequency exponent is i/d instead of 2i/d", f"use {formula}."),
        (_rotate_pairs(x, _angles(positions, d, base, lambda i, d: -4 * i / d)),
         "the frequency exponent is 4i/d instead of 2i/d (the step of 2 was counted twice)", f"use {formula}."),
        (_rotate_pairs(x, _angles(positions, d, base, lambda i, d: 2 * i / d)),
         "the frequency exponent has the wrong sign: base ** (+2i/d) grows instead of shrinking",
         f"use a negative exponent: {formula}."),
        (_rotate_pairs(x, right, sign=-1.0),
         "the rotation goes the wrong way (by -mθ): a sign error",
         "rotate counter-clockwise: x'_2i = x_2i cos - x_2i+1 sin and x'_2i+1 = x_2i sin + x_2i+1 cos."),
        (_rotate_pairs(x, right, swap=True), "cos and sin are swapped",
         "x'_2i = x_2i cos(mθ_i) - x_2i+1 sin(mθ_i): cos multiplies the pair's own coordinate."),
        (_rotate_pairs(x, _angles(torch.ones_like(positions), d, base, _correct_exponent)),
         "positions are not applied: every position gets the same rotation (by θ_i, as if m = 1)",
         "multiply the frequencies by each token's position: angles = positions[:, None] * theta[None, :], "
         "shape (L, d/2)."),
        (x.to(torch.float64), "x is returned unrotated (no position is applied)",
         "rotate each pair by positions[l] * θ_i."),
    ]
    if not torch.equal(positions, torch.arange(seq_len)):
        out.append((_rotate_pairs(x, _angles(torch.arange(seq_len), d, base, _correct_exponent)),
                    "the positions argument is ignored: you used 0 .. L-1",
                    "use the positions you are given (a decoding step starts after the cached tokens)."))
    if base != 10000.0:
        out.append((_rotate_pairs(x, _angles(positions, d, 10000.0, _correct_exponent)),
                    f"the base argument is ignored: you used 10000 instead of {base:g}",
                    "use the `base` parameter in θ_i = base ** (-2i/d)."))
    return out


def _pair_norms(t: Tensor) -> Tensor:
    return t.detach().to(torch.float64).unflatten(-1, (-1, 2)).norm(dim=-1)  # (..., L, d/2)


# -- the check -----------------------------------------------------------------------------------



def check_apply_rope(fn: Callable[..., object]) -> CheckResult:
    """Check exercise 11: ``fn(x, positions, base=10000.0)`` rotates the interleaved pairs of
    ``x (..., L, d)`` like ``lessons_src.apply_rope``, on five cases (batched heads, offset and
    unordered positions, another base, float64).
    """
    if not callable(fn):
        return finish(CheckResult(_NAME, False, f"expected a function, got {type(fn).__name__}",
                                  "pass the function itself, without calling it: `check_apply_rope(apply_rope)`."))
    with one_cpu_thread():
        return _check(fn)


def _accepts_base(fn: Callable[..., object]) -> bool:
    """Whether ``fn(x, positions, base)`` can be called (True when the signature cannot be read)."""
    try:
        inspect.signature(fn).bind(None, None, 10000.0)
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def _check(fn: Callable[..., object]) -> CheckResult:
    cases = _cases()
    if not _accepts_base(fn):
        return finish(CheckResult(_NAME, False, "your function cannot be called as apply_rope(x, positions, base)",
                                  "give it the signature `def apply_rope(x, positions, base=10000.0):`."))
    for number, case in enumerate(cases, start=1):
        where = f"case {number}/{len(cases)} ({case.description})"
        expected = _reference(case.x, case.positions, 10000.0 if case.base is None else case.base)
        args = (case.x, case.positions) if case.base is None else (case.x, case.positions, case.base)
        result, failure = call_learner(_NAME, where, fn, *args)
        if failure is not None:
            return failure
        wrong = not_one_tensor(_NAME, where, result, "end the function with `return rotated`.",
                               "return the rotated tensor only.")
        if wrong is not None:
            return finish(wrong)
        if result.shape != expected.shape:
            hint = "return x's shape: rotate the pairs, then put them back in place of x's dimensions."
            what = f"the output has shape {shape_of(result)}, expected {tuple(expected.shape)} (x's shape)"
            if result.shape[:-1] == expected.shape[:-1] and result.size(-1) * 2 == expected.size(-1):
                hint = "you returned one coordinate per pair: return both, interleaved, so the last dim is d again."
                what = f"one coordinate per pair is returned: {what}"
            return finish(CheckResult(_NAME, False, f"{where}: {what}", hint))
        if torch.isnan(result).any():
            return finish(CheckResult(_NAME, False, f"{where}: the output contains NaN",
                                      "look for a division by zero or a log of 0 in your frequencies."))
        if close(result, expected, tol=_TOL):
            if result.dtype != case.x.dtype:
                return finish(CheckResult(_NAME, False, f"{where}: the values are right but the dtype is "
                                          f"{result.dtype}, expected x's dtype {case.x.dtype}",
                                          "cast at the end: `return rotated.to(x.dtype)`."))
            continue
        for output, what, fix in _candidates(case):
            if close(result, output, tol=1e-4):
                return finish(CheckResult(_NAME, False, f"{where}: {what}", fix))
        norms_in, norms_out = _pair_norms(case.x), _pair_norms(result)
        if not torch.allclose(norms_in, norms_out, rtol=1e-4, atol=1e-4):
            return finish(CheckResult(
                _NAME, False, f"{where}: the norms are not preserved: the pairs (x_2i, x_2i+1) change length",
                "a rotation keeps lengths; check both lines: x'_2i = x_2i cos - x_2i+1 sin, "
                "x'_2i+1 = x_2i sin + x_2i+1 cos (each uses both coordinates, with cos² + sin² = 1).",
                [f"largest change of a pair's length: {(norms_out - norms_in).abs().max():.3g}"]))
        difference = (result.detach().to(torch.float64) - expected.to(torch.float64)).abs().max().item()
        return finish(CheckResult(
            _NAME, False, f"{where}: the output differs from the reference (pair lengths are preserved, "
            "so the angles are wrong)",
            "compute angles = positions[:, None] * base ** (-torch.arange(0, d, 2) / d), shape (L, d/2), "
            "in float64, and rotate pair i by angles[:, i].",
            [f"largest difference: {difference:.3g}"]))
    return finish(CheckResult(_NAME, True, f"all {len(cases)} cases match lessons_src.apply_rope "
                              "(batched heads, offset and unordered positions, base 500, float64)"))
