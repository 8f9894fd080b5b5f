"""Checks for exercise 10 (chapter "Grouped-query attention and the KV cache").

``check_expand_kv``: expanding ``(B, H_kv, L, d_k)`` keys or values to ``(B, H, L, d_k)``.
``check_attend_with_cache``: one decoding step of grouped-query attention with a KV cache.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ._framework import Case, Mistake, Session, attention_variants, done, judge, passed, run_check
from ._result import (
    CheckResult,
    close,
)
from ._steps import SEARCH_SECONDS, step
from ._steps import search as search_steps

__all__ = ["check_expand_kv", "check_attend_with_cache"]

_CONVENTION = "query head h uses KV head h // (H / H_kv): consecutive query heads share a KV head"
_REPEAT_INTERLEAVE = "`kv.repeat_interleave(num_heads // kv.size(1), dim=1)`"


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _expand(kv: Tensor, num_heads: int) -> Tensor:
    """The reference: (B, H_kv, L, d_k) -> (B, H, L, d_k), query head h gets KV head h // group."""
    return kv.repeat_interleave(num_heads // kv.size(1), dim=1)


_HEADS = ("head", "position", "feature")


def _expand_steps(kv: Tensor, num_heads: int) -> Tensor:
    """:func:`_expand` step by step (``_steps.py`` searches small changes to each)."""
    group = step("the group size: query heads per KV head, H // H_kv", operator.floordiv, num_heads, kv.size(1))
    return step("repeat each KV head group times, next to itself, along the heads (dim 1)", torch.repeat_interleave,
                kv, group, dim=1, axes=_HEADS)


def _heads_used(result: Tensor, kv: Tensor) -> list[int | None]:
    """For each head of ``result`` (B, H, L, d_k), the head of ``kv`` it copies (None: no match)."""
    used: list[int | None] = []
    for h in range(result.size(1)):
        match = [g for g in range(kv.size(1)) if torch.allclose(result[:, h].double(), kv[:, g].double())]
        used.append(match[0] if match else None)
    return used


# -- expand_kv ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ExpandCase:
    description: str
    kv: Tensor
    num_heads: int


def _expand_cases() -> list[_ExpandCase]:
    g = _generator(0)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    # Shapes chosen so that expanding the wrong dimension never gives the right shape by accident.
    # The last case is a transposed view, as in a model: (B, L, H_kv, d_k) -> (B, H_kv, L, d_k).
    return [
        _ExpandCase("B=2, H_kv=2 -> H=8 heads, L=3, d_k=5 (groups of 4)", rand(2, 2, 3, 5), 8),
        _ExpandCase("B=1, H_kv=1 -> H=4 (multi-query), L=6, d_k=3", rand(1, 1, 6, 3), 4),
        _ExpandCase("B=2, H_kv=4 -> H=4 (multi-head: nothing to expand), L=3, d_k=2", rand(2, 4, 3, 2), 4),
        _ExpandCase("B=3, H_kv=3 -> H=6 (groups of 2), L=2, d_k=7", rand(3, 3, 2, 7), 6),
        _ExpandCase("B=2, H_kv=2 -> H=6, L=5, d_k=3, a non-contiguous view from .transpose(1, 2)",
                    rand(2, 5, 2, 3).transpose(1, 2), 6),
    ]


def _shape_is(shape: Callable[[int, int, int, int, int], tuple[int, ...]]) -> Callable[[Case, object], bool]:
    """A predicate: the result has ``shape(B, H_kv, L, d, group)``."""

    def predicate(case: Case, got: object) -> bool:
        B, num_kv_heads, L, head_dim = case.args["kv"].shape
        group = case.args["num_heads"] // num_kv_heads
        return isinstance(got, Tensor) and tuple(got.shape) == shape(B, num_kv_heads, L, head_dim, group)

    return predicate


def _grouping(order: str) -> Callable[[Case, object], dict[str, object] | None]:
    """A predicate on which KV head each query head copies: ``"tiled"`` (h % H_kv) or ``"other"`` (any order)."""

    def predicate(case: Case, got: object) -> dict[str, object] | None:
        kv, num_heads = case.args["kv"], case.args["num_heads"]
        if not isinstance(got, Tensor) or got.shape != _expand(kv, num_heads).shape or got.dtype.is_complex:
            return None
        used = _heads_used(got.detach(), kv)
        wanted = [h // (num_heads // kv.size(1)) for h in range(num_heads)]
        tiled = used == [h % kv.size(1) for h in range(num_heads)]
        if None in used or (order == "tiled") != tiled:
            return None
        return {"used": used, "wanted": wanted}

    return predicate


_FIX_DIM = f"expand the heads, dim 1: {_REPEAT_INTERLEAVE}."

EXPAND_MISTAKES = [
    Mistake("expanded along dim 0 (the batch) instead of dim 1 (the heads)", _FIX_DIM,
            looks_like=_shape_is(lambda B, Hkv, L, d, g: (B * g, Hkv, L, d))),
    Mistake("expanded along dim 2 (the sequence) instead of dim 1 (the heads)", _FIX_DIM,
            looks_like=_shape_is(lambda B, Hkv, L, d, g: (B, Hkv, L * g, d))),
    Mistake("expanded along the last dim (the features) instead of dim 1 (the heads)", _FIX_DIM,
            looks_like=_shape_is(lambda B, Hkv, L, d, g: (B, Hkv, L, d * g))),
    Mistake("each KV head was repeated num_heads times instead of num_heads // H_kv times",
            "repeat each KV head by the group size `num_heads // kv.size(1)`, so the result has num_heads heads.",
            looks_like=_shape_is(lambda B, Hkv, L, d, g: (B, Hkv * Hkv * g, L, d))),
    Mistake("wrong grouping: query head h got KV head h % H_kv (the order of `repeat`/tiling), not h // (H / H_kv): "
            "query heads got KV heads {used}, expected {wanted}",
            f"{_CONVENTION}. `kv.repeat(1, group, 1, 1)` tiles [0, 1, 0, 1, ...]; use {_REPEAT_INTERLEAVE}, which "
            "gives [0, 0, ..., 1, 1, ...].", looks_like=_grouping("tiled")),
    Mistake("every head is a copy of a KV head, but not in the right order: query heads got KV heads {used}, "
            "expected {wanted}", f"{_CONVENTION}: {_REPEAT_INTERLEAVE}.", looks_like=_grouping("other")),
    Mistake("the values differ from the reference: some heads are not copies of any KV head",
            f"expansion only copies: each output head must equal one input KV head, unchanged. {_CONVENTION}.",
            looks_like=lambda case, got: isinstance(got, Tensor) and not got.dtype.is_complex
            and got.shape == _expand(case.args["kv"], case.args["num_heads"]).shape
            and None in _heads_used(got.detach(), case.args["kv"]), fallback=True),
]

def _expand_framework_cases() -> list[Case]:
    return [Case(c.description, {"kv": c.kv, "num_heads": c.num_heads}) for c in _expand_cases()]


_VIEW_HINT = (r"view size is not compatible",
              "the tensor is not contiguous (it came from a transpose), so `.view` cannot reshape it: "
              "use `.reshape`, or `repeat_interleave`, which needs no reshape.",
              "`.view` on a tensor that is not contiguous (it came from a transpose)")


def check_expand_kv(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(kv, num_heads) -> (B, num_heads, L, d_k)`` (exercise 10, part 1).

    ``kv`` is ``(B, H_kv, L, d_k)``; query head h must get KV head ``h // (num_heads // H_kv)``, the
    convention of ``F.scaled_dot_product_attention(..., enable_gqa=True)`` and of
    ``lessons_src.GroupedQueryAttention``. Five cases: groups of 4, multi-query, multi-head (no
    expansion), groups of 2 with odd sizes, and a non-contiguous input. Names: ``repeat``/tiling
    instead of ``repeat_interleave`` (head h gets KV head h % H_kv), expanding the wrong
    dimension (batch, sequence or features), repeating by num_heads instead of the group size.
    Built on ``_framework.py``: the mistakes are the table :data:`EXPAND_MISTAKES`.
    """
    session = Session("check_expand_kv", [_VIEW_HINT])
    cases = _expand_framework_cases()
    failure = run_check(session, fn, cases, _expand, ("expanded",), EXPAND_MISTAKES, steps=_expand_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match the reference (groups of 4 and 2, multi-query, "
                                "multi-head, a non-contiguous input)"))


# -- attend_with_cache ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    query: Tensor  # (B, H, 1, d_k)
    key_cache: Tensor  # (B, H_kv, n, d_k)
    value_cache: Tensor
    key_new: Tensor  # (B, H_kv, 1, d_k)
    value_new: Tensor


def _reference_step(step: _Step) -> tuple[Tensor, Tensor, Tensor]:
    key = torch.cat([step.key_cache, step.key_new], dim=2)  # (B, H_kv, n + 1, d_k)
    value = torch.cat([step.value_cache, step.value_new], dim=2)
    num_heads = step.query.size(1)
    out, _ = scaled_dot_product_attention(step.query, _expand(key, num_heads), _expand(value, num_heads))
    return out, key, value


def _step_steps(query: Tensor, key_cache: Tensor, value_cache: Tensor, key_new: Tensor,
                value_new: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_step_reference` step by step, in the chapter's words (``_steps.py`` searches small changes to each)."""
    qk = ("query", "key")
    key = step("append the new key to the cache, along the positions (dim 2)", torch.cat, [key_cache, key_new], dim=2)
    value = step("append the new value to the cache, along the positions (dim 2)", torch.cat, [value_cache, value_new],
                 dim=2)
    group = step("the group size: query heads per KV head, H // H_kv", operator.floordiv, query.size(1), key.size(1))
    keys = step("expand the keys to every query head (dim 1)", torch.repeat_interleave, key, group, dim=1, axes=_HEADS)
    values = step("expand the values to every query head (dim 1)", torch.repeat_interleave, value, group, dim=1,
                  axes=_HEADS)
    scores = step("scores = query · keysᵀ", torch.matmul, query, keys.transpose(-2, -1), axes=qk)
    scores = step("scale by √d_k", torch.div, scores, math.sqrt(query.size(-1)), axes=qk)
    weights = step("softmax over the keys", torch.softmax, scores, dim=-1, axes=qk)
    return step("weighted sum of the values", torch.matmul, weights, values, axes=qk), key, value


def _step_fn(grouping: str = "interleave", scale: bool = True, prepend: bool = False, first_key_only: bool = False,
             without_new: bool = False) -> Callable[..., tuple[Tensor, Tensor, Tensor]]:
    """A wrong decoding step with the learner's signature: one switch per mistake."""

    def step(query: Tensor, key_cache: Tensor, value_cache: Tensor, key_new: Tensor,
             value_new: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        num_heads, group = query.size(1), query.size(1) // key_new.size(1)
        key = torch.cat([key_new, key_cache] if prepend else [key_cache, key_new], dim=2)
        value = torch.cat([value_new, value_cache] if prepend else [value_cache, value_new], dim=2)
        k, v = (key_cache, value_cache) if without_new else (key, value)
        if first_key_only:
            k, v = k[:, :, :1], v[:, :, :1]
        expand = (lambda t: t.repeat(1, group, 1, 1)) if grouping == "tile" else (lambda t: _expand(t, num_heads))
        scores = query @ expand(k).transpose(-2, -1) / (math.sqrt(query.size(-1)) if scale else 1.0)
        return torch.softmax(scores, dim=-1) @ expand(v), key, value

    return step


def _step_qkv(case: Case) -> tuple[Tensor, Tensor, Tensor]:
    """The query and the keys and values the step attends over, expanded to every query head."""
    _, key, value = _reference_step(_Step(**case.args))
    num_heads = case.args["query"].size(1)
    return case.args["query"], _expand(key, num_heads), _expand(value, num_heads)


def _cache_shape(label: str, shape: Callable[[int, int, int, int], tuple[int, ...]]) -> Callable[[Case, object], object]:
    """A predicate: the returned cache ``label`` has ``shape(B, H_kv, n + 1, d_k)``; gives the fields for the name."""

    def predicate(case: Case, got: object) -> dict[str, object] | None:
        index = 1 if label == "key_cache" else 2
        cache = got[index] if isinstance(got, (tuple, list)) and len(got) == 3 else None
        B, num_kv_heads, past, head_dim = case.args[label].shape
        if isinstance(cache, Tensor) and tuple(cache.shape) == shape(B, num_kv_heads, past + 1, head_dim):
            return {"label": label, "got": tuple(cache.shape), "heads": cache.size(1), "H_kv": num_kv_heads}
        return None

    return predicate


def _caches_swapped(case: Case, got: object) -> bool:
    _, key, value = _reference_step(_Step(**case.args))
    return (isinstance(got, (tuple, list)) and len(got) == 3 and isinstance(got[1], Tensor)
            and got[1].shape == value.shape and close(got[1], value) and not close(key, value))


def _nan_output(case: Case, got: object) -> bool:
    return (isinstance(got, (tuple, list)) and len(got) == 3 and isinstance(got[0], Tensor)
            and not got[0].dtype.is_complex and bool(got[0].isnan().any()))


_APPEND = "the cache is (B, H_kv, n, d_k) and grows in n: `torch.cat([key_cache, key_new], dim=2)`."

STEP_MISTAKES = [
    Mistake("the cache was appended along dim 1 (the heads), not along the sequence (dim 2)", _APPEND,
            looks_like=_cache_shape("key_cache", lambda B, H, L, d: (B, 2 * H, L - 1, d) if L == 2 else None)),
    Mistake("the cache was appended along dim 0 (the batch), not along the sequence (dim 2)", _APPEND,
            looks_like=_cache_shape("key_cache", lambda B, H, L, d: (2 * B, H, L - 1, d) if L == 2 else None)),
    Mistake("the cache was appended along the last dim (the features), not along the sequence (dim 2)", _APPEND,
            looks_like=_cache_shape("key_cache", lambda B, H, L, d: (B, H, L - 1, 2 * d) if L == 2 else None)),
    Mistake("the cache holds the expanded keys/values ({heads} heads), not the H_kv={H_kv} shared ones",
            "cache the small (B, H_kv, n, d_k) tensors and expand a copy for the attention: that is the memory "
            "grouped-query attention saves.",
            looks_like=lambda case, got: (lambda f: f if f and f["heads"] != f["H_kv"] else None)(
                _cache_shape("key_cache", lambda B, H, L, d: (B, case.args["query"].size(1), L, d))(case, got))),
    Mistake("the returned {label} was not updated with the new token",
            "return the caches with the new key and value appended (n + 1 positions), so that the next step sees "
            "this token.", looks_like=lambda case, got: _cache_shape("key_cache", lambda B, H, L, d: (B, H, L - 1, d))(
                case, got) or _cache_shape("value_cache", lambda B, H, L, d: (B, H, L - 1, d))(case, got)),
    Mistake("the key and value caches are returned in the wrong order", "return `(output, key_cache, value_cache)`.",
            looks_like=_caches_swapped),
    Mistake("wrong grouping: query head h attended to KV head h % H_kv (`repeat`/tiling), not h // (H / H_kv)",
            f"{_CONVENTION}: expand with `repeat_interleave` (your `expand_kv` from part 1), not `repeat`.",
            _step_fn(grouping="tile")),
    Mistake("the scores are not scaled", "divide the scores q Kᵀ by sqrt(d_k), as in every attention.",
            _step_fn(scale=False)),
    Mistake("the new key is put in front of the cache, not appended at the end",
            "append: `torch.cat([key_cache, key_new], dim=2)`; each token must stay at the index of its position in the cache "
            "(the output alone cannot tell, but positions and later steps can).", _step_fn(prepend=True)),
    Mistake("the new token does not attend to its own key and value",
            "append the new key and value to the caches *before* attending: the new token is one of the keys it "
            "looks at.", _step_fn(without_new=True), when=lambda case: case.args["key_cache"].size(2) > 0),
    *attention_variants(lambda case: _step_qkv(case)),
    Mistake("the output contains NaN", "with an empty cache (n = 0) the new token is the only key: append before "
            "attending, and do not mask it out.", looks_like=_nan_output),
]

_CACHE_HINTS = [
    _VIEW_HINT,
    (r"Sizes of tensors must match except in dimension (?P<axis>[013]|-[134])\b",
     "the cache is (B, H_kv, n, d_k) and grows in n, one position per step: `torch.cat([key_cache, key_new], dim=2)`.",
     "the cache was appended along dim \\g<axis>, not along the sequence (dim 2)"),
]


def _step_reference(query: Tensor, key_cache: Tensor, value_cache: Tensor, key_new: Tensor,
                    value_new: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return _reference_step(_Step(query, key_cache, value_cache, key_new, value_new))


def _step_case(description: str, step: _Step) -> Case:
    return Case(description, {"query": step.query, "key_cache": step.key_cache, "value_cache": step.value_cache,
                              "key_new": step.key_new, "value_new": step.value_new})


def _step(seed: int, B: int, num_heads: int, num_kv_heads: int, head_dim: int, past: int) -> _Step:
    """One decoding step whose cache already holds ``past`` positions."""
    g = _generator(seed)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    return _Step(rand(B, num_heads, 1, head_dim), rand(B, num_kv_heads, past, head_dim), rand(B, num_kv_heads, past, head_dim),
                 rand(B, num_kv_heads, 1, head_dim), rand(B, num_kv_heads, 1, head_dim))


def _searcher(session: Session, case: Case) -> Callable[[object, object], object]:
    """The step search on one decoding step of the last case (no other case to compare with)."""
    return lambda got, expected: search_steps(_step_steps, case, got, expected, 1e-5,
                                              seconds=SEARCH_SECONDS * session.slowness)


_CONFIGS = [  # (description, seed, B, H, H_kv, d, cached positions n)
    ("B=2, H=4 query heads, H_kv=2, d_k=8, a cache of n=3 positions", 1, 2, 4, 2, 8, 3),
    ("B=1, H=6, H_kv=3, d_k=4, an empty cache (n=0)", 2, 1, 6, 3, 4, 0),
    ("B=2, H=4, H_kv=1 (multi-query), d_k=8, n=5", 3, 2, 4, 1, 8, 5),
]


def _step_cases() -> list[Case]:
    return [_step_case(description, _step(seed, B, H, H_kv, d, past))
            for description, seed, B, H, H_kv, d, past in _CONFIGS]


def check_attend_with_cache(fn: Callable[..., object]) -> CheckResult:
    """Check ``fn(query, key_cache, value_cache, key_new, value_new) -> (output, key_cache, value_cache)``.

    Exercise 10, part 2: one decoding step of grouped-query attention. ``query`` is ``(B, H, 1, d_k)``,
    the caches ``(B, H_kv, n, d_k)`` (n may be 0), the new key/value ``(B, H_kv, 1, d_k)``. Cases: a cache
    of 3 positions, an empty cache, multi-query, and six steps decoded from an empty cache, feeding
    back the learner's own caches, compared with the full causal pass. Names: a cache appended along
    the wrong axis (heads, batch or features), prepended instead of appended, not returned updated,
    holding expanded heads, ``repeat`` instead of ``repeat_interleave``, unscaled scores, and a new
    token that does not attend to itself. Built on ``_framework.py``: the mistakes are :data:`STEP_MISTAKES`.
    """
    session = Session("check_attend_with_cache", _CACHE_HINTS)
    outputs = ("output", "key_cache", "value_cache")
    n = len(_CONFIGS) + 1
    cases = _step_cases()
    failure = run_check(session, fn, cases, _step_reference, outputs, STEP_MISTAKES, steps=_step_steps)
    if failure is not None:
        return done(failure)

    # Decode a whole sequence from an empty cache, feeding back the learner's caches.
    B, num_heads, num_kv_heads, head_dim, L = 2, 4, 2, 8, 6
    g = _generator(4)
    query = torch.randn(B, num_heads, L, head_dim, generator=g)  # (B, H, L, d_k)
    key = torch.randn(B, num_kv_heads, L, head_dim, generator=g)  # (B, H_kv, L, d_k)
    value = torch.randn(B, num_kv_heads, L, head_dim, generator=g)
    full, _ = scaled_dot_product_attention(query, _expand(key, num_heads), _expand(value, num_heads),
                                           causal_mask(L))  # (B, H, L, d_k)
    key_cache = torch.zeros(B, num_kv_heads, 0, head_dim)
    value_cache = torch.zeros(B, num_kv_heads, 0, head_dim)
    for t in range(L):
        where = (f"the last case: decoding L={L} tokens one by one from an empty cache, B={B}, H={num_heads}, "
                 f"H_kv={num_kv_heads}; step {t}")
        case = _step_case(where, _Step(query[:, :, t : t + 1], key_cache, value_cache, key[:, :, t : t + 1],
                                       value[:, :, t : t + 1]))
        got, failure = session.call(where, fn, case.args)
        if failure is None:
            failure = judge(session, where, case, got, _step_reference(**case.args), outputs, STEP_MISTAKES,
                            steps=_searcher(session, case))
        if failure is not None:
            return done(failure)
        output, key_cache, value_cache = (x.detach().to(torch.float32) for x in got)  # type: ignore[union-attr]
        if not close(output, full[:, :, t : t + 1]):
            return done(session.fail(f"the output differs from the full causal pass ({where})",
                                     "each step must equal row t of causal attention over the whole sequence."))
    return done(passed(session, f"all {n} cases match the reference (a cache of 3, an empty cache, multi-query, "
                                f"and {L} steps equal to the full causal pass)"))


#: The references written as named steps, with the cases they must equal the references on (tests/test_checks_steps.py).
STEPPED = [(_expand_framework_cases, _expand, _expand_steps), (_step_cases, _step_reference, _step_steps)]
