"""Checks for exercise 17 (chapter "Multi-head latent attention"): the absorbed scores of a new query.

:func:`check_absorbed_scores`: the learner writes
``absorbed_scores(query_nope, query_rope, latent, rope_key, w_uk) -> (B, H, L_k)``, the scaled scores of
the newest token's query against every cached token, without building a key:

- ``query_nope (B, H, d_k)``: each head's query part without positions; ``query_rope (B, H, d_R)``: its
  rotary part, **not yet rotated**; the newest token sits at position ``L_k - 1`` (the cache holds it);
- ``latent (B, L_k, d_c)``: the cached latents; ``rope_key (B, L_k, d_R)``: the cached rotary keys, each
  already rotated at its own position;
- ``w_uk (H, d_k, d_c)``: each head's key up-projection as ``kv_b_proj`` stores it, so head h's keys
  would be ``latent @ w_uk[h].T``.

The answer: ``((query_nope[:, h] @ w_uk[h]) @ latent.T + rot(query_rope) @ rope_key.T) / sqrt(d_k + d_R)``,
with ``rot`` the interleaved rotation of :func:`lessons_src.apply_rope` at position ``L_k - 1``. The cases
vary every size (d_k never equal to d_c but in one case, where a transposed ``w_uk`` would not raise) and
the mistakes are the table :data:`MISTAKES`. Built on the framework (``_framework.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..rotary import apply_rope, rope_frequencies
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_absorbed_scores"]

NAME = "check_absorbed_scores"


def _rotate(x: Tensor, position: int, max_len: int) -> Tensor:
    """``x (B, H, d_R)`` rotated at ``position``: the interleaved pairs of :func:`lessons_src.apply_rope`."""
    cos, sin = rope_frequencies(x.size(-1), max_len)
    return apply_rope(x.unsqueeze(-2), cos, sin, position).squeeze(-2)  # (B, H, 1, d_R) -> (B, H, d_R)


def _scores(query_nope: Tensor, query_rope: Tensor, latent: Tensor, rope_key: Tensor, w_uk: Tensor, *,
            scale: str = "right", rotate: str = "right", rope: bool = True, content: bool = True,
            one_w: bool = False, transpose_w: bool = False, softmax: bool = False) -> Tensor:
    """The absorbed scores, with one slip chosen by the keywords (the defaults give the right answer)."""
    L_k = latent.size(1)
    d_k, d_R, d_c = query_nope.size(-1), query_rope.size(-1), latent.size(-1)
    w = w_uk[:1].expand_as(w_uk) if one_w else w_uk
    if transpose_w:
        w = w.transpose(1, 2)
    absorbed = torch.einsum("bhk,hkc->bhc", query_nope, w)  # (B, H, d_c): W_UK folded into the query
    if rotate == "right":
        q_rope = _rotate(query_rope, L_k - 1, L_k + 1)
    elif rotate == "next":
        q_rope = _rotate(query_rope, L_k, L_k + 1)
    elif rotate == "previous":
        q_rope = _rotate(query_rope, max(L_k - 2, 0), L_k + 1)
    else:
        q_rope = query_rope
    keys = _rotate_each(rope_key) if rotate == "twice" else rope_key
    if rotate == "twice":
        q_rope = _rotate(query_rope, L_k - 1, L_k + 1)
    content_part = torch.einsum("bhc,btc->bht", absorbed, latent)  # (B, H, L_k)
    rope_part = torch.einsum("bhr,btr->bht", q_rope, keys)  # (B, H, L_k)
    factor = {"right": d_k + d_R, "content": d_k, "latent": d_c + d_R, "none": 1.0}
    if scale == "content only":
        scores = content_part / math.sqrt(d_k + d_R) + (rope_part if rope else 0)
    else:
        scores = ((content_part if content else 0) + (rope_part if rope else 0)) / math.sqrt(factor[scale])
    return scores.softmax(dim=-1) if softmax else scores


def _rotate_each(rope_key: Tensor) -> Tensor:
    """The cached rotary keys rotated once more at their positions (a second rotation)."""
    cos, sin = rope_frequencies(rope_key.size(-1), rope_key.size(1))
    return apply_rope(rope_key, cos, sin)  # (B, L_k, d_R)


def _reference(query_nope: Tensor, query_rope: Tensor, latent: Tensor, rope_key: Tensor, w_uk: Tensor) -> Tensor:
    return _scores(query_nope, query_rope, latent, rope_key, w_uk)


def _steps(query_nope: Tensor, query_rope: Tensor, latent: Tensor, rope_key: Tensor, w_uk: Tensor) -> Tensor:
    """The chapter's absorbed scores step by step (``_steps.py`` searches small changes to each); equal to
    :func:`_reference`."""
    L_k, d_k, d_R = latent.size(1), query_nope.size(-1), query_rope.size(-1)
    scores = ("head", "cached token")
    absorbed = step("W_UK folded into each head's query: q_nope · W_UK[h]", torch.matmul, query_nope.unsqueeze(-2),
                    w_uk).squeeze(-2)  # (B, H, 1, d_k) @ (H, d_k, d_c) -> (B, H, d_c)
    content = step("the content part: the absorbed query against the latents", torch.matmul, absorbed,
                   latent.transpose(-2, -1), axes=("head", "latent dim"))  # (B, H, L_k)
    rotated = step("the query's rotary part rotated at the newest position, L_k - 1", _rotate, query_rope,
                   position=L_k - 1, max_len=L_k + 1, axes=("head", "rotary dim"))
    rope = step("the rotary part: the rotated query against the cached rotary keys", torch.matmul, rotated,
                rope_key.transpose(-2, -1), axes=("head", "rotary dim"))  # (B, H, L_k)
    total = step("the two parts added", torch.add, content, rope, axes=scores)
    return step("scaled by 1/√(d_k + d_R)", torch.div, total, math.sqrt(d_k + d_R), axes=scores)


def _slip(**slip: object) -> Callable[..., Tensor]:
    def absorbed_scores(query_nope: Tensor, query_rope: Tensor, latent: Tensor, rope_key: Tensor,
                        w_uk: Tensor) -> Tensor:
        return _scores(query_nope, query_rope, latent, rope_key, w_uk, **slip)

    return absorbed_scores


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(17)

    def case(description: str, B: int, H: int, L_k: int, d_k: int, d_c: int, d_R: int) -> Case:
        def rand(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=g)

        cos, sin = rope_frequencies(d_R, L_k)
        args = {"query_nope": rand(B, H, d_k), "query_rope": 2 * rand(B, H, d_R), "latent": rand(B, L_k, d_c),
                "rope_key": apply_rope(2 * rand(B, L_k, d_R), cos, sin), "w_uk": rand(H, d_k, d_c) / math.sqrt(d_k)}
        sizes = f"B={B}, H={H}, L_k={L_k}, d_k={d_k}, d_c={d_c}, d_R={d_R}"
        info = {"(d_k + d_R)": d_k + d_R, "d_k": d_k, "d_R": d_R, "d_c": d_c, "L_k": L_k, "same": d_k == d_c}
        return Case(f"{description} ({sizes})", args, info=info)

    return [
        case("one sequence, two heads", 1, 2, 5, 3, 6, 4),
        case("a batch of 2, four heads, a longer cache", 2, 4, 9, 5, 8, 2),
        case("d_k equal to d_c", 2, 3, 6, 4, 4, 6),
        case("one head, one cached token", 3, 1, 1, 2, 7, 4),
    ]


_SCALE = "divide the sum of both parts by sqrt(d_k + d_R) = sqrt({d_k} + {d_R}): each head's query and key have d_k + d_R numbers."
_FOLD = ("fold each head's W_UK into its query, a row of d_c numbers per head "
         "(`torch.einsum('bhk,hkc->bhc', query_nope, w_uk)`), then take it against the latents.")

MISTAKES = [
    Mistake("the scores are divided by sqrt(d_k), the width of the content part only", _SCALE, _slip(scale="content")),
    Mistake("the scores are divided by sqrt(d_c + d_R), the width of what is cached, not of a head's query",
            _SCALE, _slip(scale="latent")),
    Mistake("the scores are not scaled", _SCALE, _slip(scale="none")),
    Mistake("only the content part is scaled; the rotary part is added unscaled",
            "add the two parts first, then divide the sum by sqrt(d_k + d_R).", _slip(scale="content only")),
    Mistake("the rotary part is left out", "add the rotary part, the rotated query against the cached rotary keys "
            "(`rot(query_rope) @ rope_key.T`): it is what tells the cached positions apart.", _slip(rope=False)),
    Mistake("the content part (the absorbed query against the latents) is left out", _FOLD, _slip(content=False)),
    Mistake("the query's rotary part is not rotated", "rotate `query_rope` at the newest position, L_k - 1 = "
            "{L_k} - 1, with `apply_rope` (interleaved pairs); the cached keys are already rotated.",
            _slip(rotate="none")),
    Mistake("the query is rotated at position L_k instead of L_k - 1",
            "the cache already holds the new token: it sits at position L_k - 1 = {L_k} - 1.", _slip(rotate="next")),
    Mistake("the query is rotated at position L_k - 2 instead of L_k - 1 (the newest cached token is counted out)",
            "the cache already holds the new token: it sits at position L_k - 1 = {L_k} - 1, the last one.",
            _slip(rotate="previous"), when=lambda case: case.args["latent"].size(1) > 1),
    Mistake("the cached rotary keys are rotated a second time", "rope_key was rotated when it was cached; use it as "
            "it is, and rotate only the query.", _slip(rotate="twice")),
    Mistake("every head uses head 0's W_UK", "each head has its own up-projection: use `w_uk[h]` for head h (an "
            "einsum over h does it for all heads at once).", _slip(one_w=True)),
    Mistake("w_uk is used transposed", "w_uk[h] is (d_k, d_c), as `kv_b_proj` stores it: multiply each head's query by "
            "w_uk[h] itself, not its transpose (`query_nope[:, h] @ w_uk[h]`, (B, d_c)).", _slip(transpose_w=True), when=lambda case: case.info["same"]),
    Mistake("a softmax was applied: these are the weights, not the scores",
            "return the scaled scores, before any softmax.", _slip(softmax=True)),
]

ERRORS = [
    (r"cannot be multiplied|size of tensor a .* must match|subscript .* has size|operands could not be broadcast",
     "check the shapes: w_uk[h] is (d_k, d_c), so the absorbed query is `query_nope[:, h] @ w_uk[h]`, (B, d_c); "
     "its scores are against `latent`, (B, L_k, d_c), and the rotary part is (B, H, d_R) against (B, L_k, d_R).",
     "a shape mismatch in a product"),
]


def check_absorbed_scores(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(query_nope, query_rope, latent, rope_key, w_uk) -> (B, H, L_k)`` (exercise 17):
    the absorbed MLA scores of the newest token against a cached latent and rotary key. Four cases; the
    first failing one is reported, naming the mistake. Never raises because of the learner's code (under
    ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(NAME, ERRORS)
    cases = _cases()
    failure = run_check(session, fn, cases, _reference, ("scores",), MISTAKES, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match the scores against the projected-up keys (one head "
                                "to four, a single cached token, d_k equal to d_c)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_cases, _reference, _steps)]
