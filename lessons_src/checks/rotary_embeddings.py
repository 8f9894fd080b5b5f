"""Checks for exercise 11 (chapter "Rotary position embeddings"): ``apply_rope`` and a decoding step.

Part 1, :func:`check_apply_rope`: ``apply_rope(x, positions, base)``.

The learner rotates each interleaved pair ``(x_2p, x_2p+1)`` of ``x (..., L, d_k)`` by the angle
``positions[l] * base^(-2p/d_k)``, RoFormer's convention and ``lessons_src.apply_rope``'s. The
check compares with the library on several shapes, positions and bases; when the answer is
wrong it rebuilds the usual mistakes (GPT-NeoX's rotate-half pairing, exponent p/d_k, rotation
by -θ, positions ignored, pairs not interleaved back, ...) and names the one that matches.

Part 2, :func:`check_rotary_decode_step`: one decoding step of rotary attention with a KV cache
(the mistakes: positions restarting at 0 or off by one, v rotated, cached keys rotated again, the
two layouts mixed, the cache grown wrong; :data:`DECODE_MISTAKES`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..device import one_cpu_thread
from ..rotary import apply_rope, rope_frequencies
from ._framework import Case, Mistake, Session, attention_variants, done, judge, passed, run_check
from ._result import CheckResult
from ._steps import SEARCH_SECONDS, step
from ._steps import search as search_steps

__all__ = ["check_apply_rope", "check_rotary_decode_step"]

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
        _Case("x (2, 3, 5, 16) = (B, H, L, d_k), positions 0..4, base=10000.0", rand(2, 3, 5, 16), torch.arange(5),
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


_PAIRS = ("position", "pair")


def _steps(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """The chapter's rotation step by step (``_steps.py`` searches small changes to each); equal to
    :func:`_reference`."""
    d_k = x.size(-1)
    two_p = step("2p for pair p = 0 .. d_k/2 - 1", torch.mul, torch.arange(d_k // 2, dtype=torch.float64), 2,
                 axes=("pair",))
    ratio = step("the exponent's 2p / d_k", torch.div, two_p, d_k, axes=("pair",))
    theta = step("frequency θ_p = base^(-2p/d_k)", torch.pow, base, torch.neg(ratio), axes=("pair",))
    angles = step("angle i·θ_p: each position times each frequency", torch.mul, positions.to(torch.float64)[:, None],
                  theta, axes=_PAIRS)
    dtype = torch.promote_types(x.dtype, torch.float32)
    cos = step("cos of the angles", torch.cos, angles, axes=_PAIRS).to(dtype)
    sin = step("sin of the angles", torch.sin, angles, axes=_PAIRS).to(dtype)
    even, odd = x[..., 0::2].to(dtype), x[..., 1::2].to(dtype)  # x_2p, x_2p+1
    first = step("x'_2p = x_2p cos - x_2p+1 sin", torch.sub, torch.mul(even, cos), torch.mul(odd, sin), axes=_PAIRS)
    second = step("x'_2p+1 = x_2p sin + x_2p+1 cos", torch.add, torch.mul(even, sin), torch.mul(odd, cos), axes=_PAIRS)
    rotated = step("interleave the pairs back: pair p at 2p, 2p+1", torch.stack, (first, second), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def _sizes(x: Tensor) -> dict[str, int]:
    """x's sizes by name, (B, H, L, d_k) from the right: sizes a wrong divisor may be taken from."""
    return dict(zip(("B", "H", "L", "d_k")[-x.dim():], x.shape, strict=True))


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


_FORMULA = "θ_p = base ** (-2 * p / d_k) for pair p = 0 .. d_k/2 - 1 (i.e. `base ** (-torch.arange(0, d_k, 2) / d_k)`)"


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


def _angle_factor(case: Case, got: object) -> dict[str, object] | None:
    """The factor every rotation angle of the learner's output is off by, read back from its pairs."""
    x = case.args["x"]
    if not isinstance(got, Tensor) or got.shape != x.shape or got.dtype.is_complex or not torch.isfinite(got).all():
        return None
    base, positions = case.info["base"], case.args["positions"]
    right = _angles(positions, x.size(-1), base, _correct_exponent)
    for shift in (1, -1):
        moved = _rotate_pairs(x.double(), _angles(positions + shift, x.size(-1), base, _correct_exponent))
        if torch.allclose(got.double(), moved.double(), rtol=1e-4, atol=1e-4):
            return {"how": f"every token is rotated by the angles of position {'+' if shift > 0 else '-'} 1: the "
                           "positions are off by one"}
    a, b = x.double()[..., 0::2], x.double()[..., 1::2]
    c, d = got.double()[..., 0::2], got.double()[..., 1::2]
    theirs = torch.atan2(a * d - b * c, a * c + b * d)  # each pair's angle, in (-π, π]
    small = (right.abs() > 0.05) & (right.abs() < 1.0)  # (L, d_k/2): no wrapping round 2π
    small = small.expand_as(theirs)
    if not small.any():
        return None
    factor = float((theirs[small] / right.expand_as(theirs)[small]).median())
    if abs(factor - 1) < 1e-3 or not torch.allclose(got.double(), _rotate_pairs(x.double(), right * factor).double(),
                                                    rtol=1e-4, atol=1e-4):
        return None
    names = [(base ** (-2 / x.size(-1)), " = base^(-2/d_k): θ_p uses p + 1, the pairs counted from 1, not 0"),
             (math.pi / 180, " ≈ π/180: degrees turned into radians where the angles already were radians"),
             (180 / math.pi, " ≈ 180/π: radians turned into degrees"), (2.0, " = 2"), (0.5, " = 1/2"),
             (2 * math.pi, " ≈ 2π"), (-1.0, " = -1: the rotation goes the wrong way")]
    named = next((text for value, text in names if math.isclose(factor, value, rel_tol=2e-3)), "")
    return {"how": f"every rotation angle is the reference's times {factor:.4g}{named}"}


MISTAKES = [
    Mistake("one coordinate per pair is returned: the last dim is d_k/2, not d_k",
            "you returned one coordinate per pair: return both, interleaved, so the last dim is d_k again.",
            looks_like=lambda case, got: isinstance(got, Tensor) and got.shape[:-1] == case.args["x"].shape[:-1]
            and got.size(-1) * 2 == case.args["x"].size(-1)),
    Mistake("you rotated the halves, pairing x_p with x_(p + d_k/2) (GPT-NeoX's \"rotate half\")",
            "this exercise uses RoFormer's interleaved pairs (x_2p, x_2p+1): take `x[..., 0::2]` and `x[..., 1::2]`, "
            "and interleave the results back.", _wrong(pairing="halves")),
    Mistake("the rotated pairs are returned as [all first coordinates, all second coordinates]",
            "interleave them back so that pair p sits at dimensions 2p and 2p+1: "
            "`torch.stack((first, second), dim=-1).flatten(-2)`.", _wrong(layout="halves")),
    Mistake("the frequency exponent is p/d_k instead of 2p/d_k", f"use {_FORMULA}.", _wrong(lambda i, d: -i / d)),
    Mistake("the frequency exponent is 4p/d_k instead of 2p/d_k (the step of 2 was counted twice)", f"use {_FORMULA}.",
            _wrong(lambda i, d: -4 * i / d)),
    Mistake("the frequency exponent has the wrong sign: base ** (+2p/d_k) grows instead of shrinking",
            f"use a negative exponent: {_FORMULA}.", _wrong(lambda i, d: 2 * i / d)),
    Mistake("the rotation goes the wrong way (by -iθ): a sign error",
            "rotate counter-clockwise: x'_2p = x_2p cos - x_2p+1 sin and x'_2p+1 = x_2p sin + x_2p+1 cos.",
            _wrong(sign=-1.0)),
    Mistake("cos and sin are swapped", "x'_2p = x_2p cos(iθ_p) - x_2p+1 sin(iθ_p): cos multiplies the pair's own "
            "coordinate.", _wrong(swap=True)),
    Mistake("positions are not applied: every position gets the same rotation (by θ_p, as if i = 1)",
            "multiply the frequencies by each token's position: angles = positions[:, None] * theta[None, :], "
            "shape (L, d_k/2).", _wrong(same_positions=True)),
    Mistake("x is returned unrotated (no position is applied)", "rotate each pair by positions[l] * θ_p.",
            lambda x, positions, base=10000.0: x),
    Mistake("the positions argument is ignored: you used 0 .. L-1",
            "use the positions you are given (a decoding step starts after the cached tokens).",
            _wrong(positions_ignored=True)),
    Mistake("the base argument is ignored: you used 10000 instead of {base:g}",
            "use the `base` parameter in θ_p = base ** (-2p/d_k).", _wrong(base_ignored=True),
            when=lambda case: case.info["base"] != 10000.0),
    Mistake("the norms are not preserved: the pairs (x_2p, x_2p+1) change length",
            "a rotation keeps lengths; check both lines: x'_2p = x_2p cos - x_2p+1 sin, "
            "x'_2p+1 = x_2p sin + x_2p+1 cos (each uses both coordinates, with cos² + sin² = 1).",
            looks_like=_lengths_changed, fallback=True),
    Mistake("{how}; pair lengths are preserved", "the angles are in radians: angles = positions[:, None] * base ** (-torch.arange(0, d_k, 2) "
            "/ d_k), with no conversion and no other factor.", looks_like=lambda case, got: _angle_factor(case, got)),
    Mistake("the output differs from the reference (pair lengths are preserved, so the angles are wrong)",
            "compute angles = positions[:, None] * base ** (-torch.arange(0, d_k, 2) / d_k), shape (L, d_k/2), "
            "in float64, and rotate pair p by angles[:, p].", looks_like=_angles_wrong, fallback=True),
]


def _pair_norms(t: Tensor) -> Tensor:
    return t.detach().to(torch.float64).unflatten(-1, (-1, 2)).norm(dim=-1)  # (..., L, d/2)


# -- the check -----------------------------------------------------------------------------------


def _rope_cases() -> list[Case]:
    """The framework's cases; ``info`` holds the base and x's sizes by name."""
    cases = []
    for c in _cases():
        args = {"x": c.x, "positions": c.positions} | ({} if c.base is None else {"base": c.base})
        cases.append(Case(c.description, args, info={"base": 10000.0 if c.base is None else c.base, **_sizes(c.x)}))
    return cases


def check_apply_rope(fn: Callable[..., object]) -> CheckResult:
    """Check exercise 11: ``fn(x, positions, base=10000.0)`` rotates the interleaved pairs of
    ``x (..., L, d_k)`` like ``lessons_src.apply_rope``, on five cases (batched heads, offset and
    unordered positions, another base, float64). The result must have x's dtype. Built on
    ``_framework.py``: the mistakes are the table :data:`MISTAKES`.
    """
    session = Session(_NAME)
    cases = _rope_cases()
    with one_cpu_thread():
        failure = run_check(session, fn, cases, _reference, ("the output",), MISTAKES, tol=_TOL, same_dtype=True,
                            steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match lessons_src.apply_rope (batched heads, offset and "
                                "unordered positions, another base, float64)"))


# == part 2: rotary attention at decoding positions ==================================================
#
# The learner writes ``rotary_decode_step(q, k, v, key_cache, value_cache, cos, sin)``: one step of
# causal self-attention with rotary embeddings while generating, for one new token. The cache holds
# the keys of the n earlier tokens already rotated to positions 0..n-1, and their values; the new
# token sits at position n. The step rotates q and k to n (never v), appends, and attends. The
# mistakes are the usual ones of real decoding code: positions restarting at 0, off by one, v
# rotated, cached keys rotated again, the layouts mixed, the cache grown wrong.

DECODE = "check_rotary_decode_step"


def _decode(position: Callable[[int], int] = lambda t: t, rotate_q: bool = True, rotate_k: bool = True,
            rotate_v: bool = False, rerotate_cache: bool = False, layout: str = "interleaved",
            prepend: bool = False, cache_unrotated: bool = False, scale: bool = True) -> Callable[..., tuple]:
    """A decoding step, right by default, with one switch per mistake."""

    def rotary_decode_step(q: Tensor, k: Tensor, v: Tensor, key_cache: Tensor, value_cache: Tensor, cos: Tensor,
                           sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        t = key_cache.size(-2)
        p = position(t)
        q_rot = apply_rope(q, cos, sin, p, layout=layout) if rotate_q else q
        k_rot = apply_rope(k, cos, sin, p, layout=layout) if rotate_k else k
        v_new = apply_rope(v, cos, sin, p, layout=layout) if rotate_v else v
        cached = apply_rope(key_cache, cos, sin, 0, layout=layout) if rerotate_cache and t > 0 else key_cache
        parts_k = [k_rot, cached] if prepend else [cached, k_rot]
        parts_v = [v_new, value_cache] if prepend else [value_cache, v_new]
        keys, values = torch.cat(parts_k, dim=-2), torch.cat(parts_v, dim=-2)
        scores = q_rot @ keys.transpose(-2, -1)
        if scale:
            scores = scores / q.size(-1) ** 0.5
        output = torch.softmax(scores, dim=-1) @ values  # (B, H, 1, d)
        if cache_unrotated:  # rotated for the attention, but the plain k is what gets cached
            keys = torch.cat([key_cache, k], dim=-2)
        return output, keys, values

    return rotary_decode_step


_decode_reference = _decode()


def _decode_steps(q: Tensor, k: Tensor, v: Tensor, key_cache: Tensor, value_cache: Tensor, cos: Tensor,
                  sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The decoding step in the chapter's words (``_steps.py`` searches small changes to each); equal to
    :data:`_decode_reference`."""
    qk = ("query", "key")
    n = step("n = key_cache.size(-2), the number of cached tokens", Tensor.size, key_cache, dim=-2,
             axes=("head", "position", "feature"))
    q_rot = step("rotate q to position n", apply_rope, q, cos, sin, positions=n, axes=("position", "feature"))
    k_rot = step("rotate k to position n", apply_rope, k, cos, sin, positions=n, axes=("position", "feature"))
    keys = step("append the rotated key to the key cache (dim -2)", torch.cat, [key_cache, k_rot], dim=-2)
    values = step("append the value, not rotated, to the value cache (dim -2)", torch.cat, [value_cache, v], dim=-2)
    scores = step("scores = q · keysᵀ", torch.matmul, q_rot, keys.transpose(-2, -1), axes=qk)
    scores = step("scale by √d_k", torch.div, scores, math.sqrt(q.size(-1)), axes=qk)
    weights = step("softmax over the keys", torch.softmax, scores, dim=-1, axes=qk)
    return step("weighted sum of the values", torch.matmul, weights, values, axes=qk), keys, values


def _decode_qkv(q: Tensor, k: Tensor, v: Tensor, key_cache: Tensor, value_cache: Tensor, cos: Tensor,
                sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The rotated query and the keys and values a right step attends over."""
    n = key_cache.size(-2)
    _, keys, values = _decode_reference(q, k, v, key_cache, value_cache, cos, sin)
    return apply_rope(q, cos, sin, n), keys, values


def _decode_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1111)

    def case(description: str, b: int, h: int, d: int, t: int, dtype: torch.dtype = torch.float32) -> Case:
        cos, sin = rope_frequencies(d, 64)
        rand = lambda length: torch.randn(b, h, length, d, generator=g, dtype=torch.float64).to(dtype)  # noqa: E731
        # The cache holds keys already rotated to 0..n-1, as the earlier steps left them.
        key_cache = apply_rope(rand(t), cos, sin, 0) if t else rand(0)
        args = {"q": rand(1), "k": rand(1), "v": rand(1), "key_cache": key_cache, "value_cache": rand(t),
                "cos": cos, "sin": sin}
        return Case(f"{description}: B={b}, H={h}, d_k={d}, n={t} cached tokens", args, info={"n": t})

    return [
        case("a step after three cached tokens", 1, 5, 8, 3),
        case("the first token, an empty cache", 2, 3, 16, 0),
        case("a step after one cached token", 2, 1, 6, 1),
        case("a later step, more heads", 1, 4, 8, 9),
        case("a step in float64", 1, 2, 12, 5, torch.float64),
    ]


_POSITION = ("the new token's position is n, the number of tokens already in the cache (key_cache.size(-2)): "
             "rotate q and k to that position, e.g. `lessons_src.apply_rope(q, cos, sin, n)`.")

DECODE_MISTAKES = [
    Mistake("the caches are returned without the new token", "append the new key and value at the end of the "
            "caches, along the sequence axis (dim -2), and return the grown caches: the next step continues from "
            "them.", looks_like=lambda case, got: isinstance(got, (tuple, list)) and len(got) == 3
            and isinstance(got[1], Tensor) and got[1].shape == case.args["key_cache"].shape),
    Mistake("the positions restart at 0: the new token is rotated to position 0 (that is, not rotated at all)",
            _POSITION, _decode(lambda t: 0), when=lambda case: case.info["n"] > 0),
    Mistake("off by one: the new token is rotated to position n + 1 instead of n",
            "positions count from 0: the n cached tokens sit at 0 .. n-1, so the new one is at n.",
            _decode(lambda t: t + 1)),
    Mistake("off by one: the new token is rotated to position n - 1, the last cached token's",
            "positions count from 0: the n cached tokens sit at 0 .. n-1, so the new one is at n.",
            _decode(lambda t: t - 1), when=lambda case: case.info["n"] > 0),
    Mistake("the value is rotated too", "rotate only q and k: their dot product is what carries the relative "
            "position; values are what gets averaged and must stay as they are.", _decode(rotate_v=True)),
    Mistake("the cached keys are rotated a second time", "the cache holds keys already rotated to their "
            "positions when they were new: append the new rotated key to it, and leave the cached ones alone.",
            _decode(rerotate_cache=True), when=lambda case: case.info["n"] > 0),
    Mistake("the query is not rotated (only the key is)", _POSITION, _decode(rotate_q=False),
            when=lambda case: case.info["n"] > 0),
    Mistake("the new key is not rotated (only the query is)", _POSITION, _decode(rotate_k=False),
            when=lambda case: case.info["n"] > 0),
    Mistake("the rotate-half layout is used: the two rotary layouts are mixed",
            "the cache and this exercise use RoFormer's interleaved pairs (the default of `apply_rope`): do not pass "
            "`layout=\"half\"`, or rotate pairs (x_2p, x_2p+1) if you wrote the rotation yourself.",
            _decode(layout="half")),
    Mistake("the new key and value are put at the start of the caches, not at the end",
            "append: `torch.cat([key_cache, k_rotated], dim=-2)`; the cache is in position order.",
            _decode(prepend=True), when=lambda case: case.info["n"] > 0),
    Mistake("the cache gets the new key unrotated (it was rotated only for the attention)",
            "put the *rotated* key in the cache: the next steps read it as a key at position n.",
            _decode(cache_unrotated=True)),
    *attention_variants(lambda case: _decode_qkv(**case.args)),
    Mistake("the scores are not scaled by 1/sqrt(d_k)", "divide the scores by `math.sqrt(d_k)`, with d_k = `q.size(-1)`, before the softmax.",
            _decode(scale=False)),
]


def _full_pass(q: Tensor, k: Tensor, v: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Causal rotary attention over a whole sequence (B, H, L, d): what token-by-token decoding must equal."""
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    causal = torch.ones(q.size(-2), q.size(-2), dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v


def check_rotary_decode_step(fn: Callable[..., object]) -> CheckResult:
    """Check exercise 11, part 2: ``fn(q, k, v, key_cache, value_cache, cos, sin)`` returns
    ``(output, key_cache, value_cache)`` for one new token at position n = ``key_cache.size(-2)``:
    q and k rotated to n (interleaved layout), the rotated key and the plain value appended, then
    attention over all n + 1 keys. Five single steps (n = 0, 1, 3, 5, 9; float64 once), then six tokens
    decoded one by one from an empty cache, each output compared with full causal rotary attention.
    The mistakes are :data:`DECODE_MISTAKES`.
    """
    session = Session(DECODE)
    cases = _decode_cases()
    with one_cpu_thread():
        failure = run_check(session, fn, cases, _decode_reference, ("output", "key_cache", "value_cache"),
                            DECODE_MISTAKES, tol=_TOL, same_dtype=True, steps=_decode_steps)
        if failure is not None:
            return done(failure)
        # A whole sequence, decoded with the learner's own caches from one step to the next.
        g = torch.Generator().manual_seed(2222)
        length, d = 6, 8
        cos, sin = rope_frequencies(d, 64)
        q, k, v = (torch.randn(1, 2, length, d, generator=g) for _ in range(3))
        full = _full_pass(q, k, v, cos, sin)  # (1, 2, L, d)
        key_cache, value_cache = q.new_zeros(1, 2, 0, d), q.new_zeros(1, 2, 0, d)
        for i in range(length):
            where = f"decoding a sequence of {length} tokens from an empty cache, step {i + 1}"
            args = {"q": q[:, :, i:i + 1], "k": k[:, :, i:i + 1], "v": v[:, :, i:i + 1], "key_cache": key_cache,
                    "value_cache": value_cache, "cos": cos, "sin": sin}
            got, failure = session.call(where, fn, args)
            if failure is None:
                case = Case(where, args, info={"n": i})
                failure = judge(session, where, case, got, _decode_reference(**args),
                                ("output", "key_cache", "value_cache"), DECODE_MISTAKES, tol=_TOL, same_dtype=True,
                                steps=lambda got, expected, case=case: search_steps(
                                    _decode_steps, case, got, expected, _TOL,
                                    seconds=SEARCH_SECONDS * session.slowness))
            if failure is None and not torch.allclose(got[0], full[:, :, i:i + 1], rtol=_TOL, atol=_TOL):
                failure = session.fail(f"step {i + 1} differs from full causal attention over the sequence ({where})",
                                       "each step must give the row of the full pass: rotate to the new token's "
                                       "position, append, attend.")
            if failure is not None:
                return done(failure)
            _, key_cache, value_cache = got
    return done(passed(session, f"all {len(cases)} steps match (n = 0 to 9, float64), and {length} tokens decoded "
                                "one by one equal full causal rotary attention"))


#: The references written as named steps, with the cases they must equal the references on (tests/test_checks_steps.py).
STEPPED = [(_rope_cases, _reference, _steps), (_decode_cases, _decode_reference, _decode_steps)]
