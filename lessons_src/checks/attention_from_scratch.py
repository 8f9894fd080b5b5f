"""Check for exercise 1 (chapter "Attention from scratch"): scaled dot-product attention.

The learner is handed ``attention(query, key, value, mask=None) -> (output, weights)`` with four
bugs and fixes them one at a time (a bug hunt): each bug first shows on its own case, so the
feedback names one bug at a time, in the order of the cases. The cases vary d_k (6, 4, 24, 12, 10,
20: no fixed number passes for √d_k), the batch and head axes (a batch whose key is square, so a
key transposed on the wrong dims gives wrong values instead of an error), Lq ≠ Lk, causal and
padding masks and a query that may attend to nothing; the mistakes are the table :data:`MISTAKES`,
built on the framework (``_framework.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask, padding_mask
from ._framework import Case, Mistake, Session, done, global_max_softmax, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_scaled_dot_product_attention"]

NAME = "check_scaled_dot_product_attention"


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    def case(description: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Case:
        kwargs = {} if mask is None else {"mask": mask}
        d_k = q.size(-1)
        return Case(f"{description}, d_k={d_k}", {"query": q, "key": k, "value": v}, kwargs,
                    {"d_k": d_k, "sqrt_d_k": f"{math.sqrt(d_k):.3g}"})

    row_mask = torch.ones(3, 5, dtype=torch.bool)
    row_mask[0, 4] = row_mask[2, 0] = False
    row_mask[1] = False  # query 1 may attend to nothing
    return [
        case("one sequence, Lq=3, Lk=5, d_v=6, no mask", rand(3, 6), rand(5, 6), rand(5, 6)),
        # B = Lk = d_k: `key.transpose(0, 1)` and `key.T` still multiply, so they are named by value.
        case("batch of 4 sequences, Lq=3, Lk=4, d_v=5, no mask", rand(4, 3, 4), rand(4, 4, 4), rand(4, 4, 5)),
        case("batch of 2 x 3 heads, Lq=4, Lk=5, d_v=4, no mask", rand(2, 3, 4, 24), rand(2, 3, 5, 24),
             rand(2, 3, 5, 4)),
        case("Lq=Lk=4 with a causal mask (True = may attend)", rand(4, 12), rand(4, 12), rand(4, 8), causal_mask(4)),
        case("batch of 3, Lq=4, Lk=6, padding mask (3, 1, 6), lengths 6, 4, 2", rand(3, 4, 10), rand(3, 6, 10),
             rand(3, 6, 8), padding_mask([6, 4, 2])[:, None, :]),
        case("Lq=3, Lk=5, query 1 may attend to nothing (its weights and output must be 0)", rand(3, 20),
             rand(5, 20), rand(5, 6), row_mask),
        # A softmax stabilised with the largest score of the whole tensor, not of each row, turns
        # row 0 into exp(-hundreds) = 0 everywhere: 0 / 0.
        case("Lq=3, Lk=4, rows whose largest scores are hundreds apart (query 2's are near 300)",
             rand(3, 9) * torch.tensor([[1.0], [1.0], [150.0]]), rand(4, 9), rand(4, 5)),
    ]


def _reference(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    return scaled_dot_product_attention(query, key, value, mask)


def _steps(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The chapter's formula step by step (``_steps.py`` searches small changes to each); equal to :func:`_reference`."""
    qk = ("query", "key")
    scores = step("scores = query · keyᵀ", torch.matmul, query, key.transpose(-2, -1), axes=qk)
    scores = step("scale by √d_k", torch.div, scores, math.sqrt(query.size(-1)), axes=qk)
    if mask is not None:
        scores = step("mask: -inf where a key is not allowed", Tensor.masked_fill, scores, ~mask, float("-inf"), axes=qk)
    weights = step("softmax over the keys", torch.softmax, scores, dim=-1, axes=qk)
    if mask is not None:  # a query with no allowed key: weights and output 0, not NaN
        empty = ~step("a query's allowed keys: any over the keys", torch.any, mask, dim=-1, keepdim=True)
        weights = step("zero the rows with no allowed key", Tensor.masked_fill, weights, empty, 0.0, axes=qk)
    output = step("weighted sum of the values", torch.matmul, weights, value, axes=qk)
    return output, weights


# -- known mistakes: each a wrong implementation with the learner's signature, or a predicate --------


def _masked_scores(case: Case) -> Tensor:
    q, k, mask = case.args["query"], case.args["key"], case.kwargs.get("mask")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., Lq, Lk)
    return scores if mask is None else scores.masked_fill(~mask, float("-inf"))


def _attend(scale: Callable[[Tensor, int], Tensor] | None = None, dim: int = -1, fill: float = float("-inf"),
            mask_after: bool = False, invert: bool = False, ignore_mask: bool = False,
            log: bool = False, return_scores: bool = False,
            transpose: Callable[[Tensor], Tensor] | None = None) -> Callable[..., tuple[Tensor, Tensor]]:
    """A wrong attention, one switch per mistake (``scale(raw_scores, d_k)`` replaces ``/ sqrt(d_k)``,
    ``transpose(key)`` replaces ``key.transpose(-2, -1)``)."""

    def attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        raw = query @ (key.transpose(-2, -1) if transpose is None else transpose(key))  # (..., Lq, Lk)
        d_k = query.size(-1)
        scores = scale(raw, d_k) if scale is not None else raw / math.sqrt(d_k)
        if mask is not None and not ignore_mask and not mask_after:
            scores = scores.masked_fill(mask if invert else ~mask, fill)
        if return_scores:
            weights = _reference(query, key, value, mask)[1]
            return weights @ value, scores
        weights = torch.log_softmax(scores, dim=dim) if log else torch.softmax(scores, dim=dim)
        if mask is not None and mask_after:
            weights = weights.masked_fill(~mask, 0.0)
        return weights @ value, weights

    return attention


def _swapped(case: Case, got: object) -> bool:
    out, w = _reference(**case.args, **case.kwargs)
    return (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], Tensor)
            and isinstance(got[1], Tensor) and got[0].shape == w.shape and got[1].shape == out.shape
            and out.shape != w.shape)


def _weights_right_output_wrong(case: Case, got: object) -> bool:
    out, w = _reference(**case.args, **case.kwargs)
    return (isinstance(got[1], Tensor) and got[1].shape == w.shape and bool(torch.isfinite(got[1]).all())
            and torch.allclose(got[1].double(), w.double(), atol=1e-4)
            and not (isinstance(got[0], Tensor) and got[0].shape == out.shape
                     and torch.allclose(got[0].double(), out.double(), atol=1e-4)))


def _empty_rows(case: Case) -> Tensor | None:
    mask = case.kwargs.get("mask")
    if mask is None or mask.dim() != 2 or mask.any(-1).all():
        return None
    return ~mask.any(-1)  # (Lq,): the queries with no key


def _empty_rows_wrong(nan: bool) -> Callable[[Case, object], bool]:
    """The learner is right except on the queries that may attend to nothing (NaN there, or not zero)."""

    def predicate(case: Case, got: object) -> bool:
        empty = _empty_rows(case)
        _, w = _reference(**case.args, **case.kwargs)
        weights = got[1]
        if empty is None or not isinstance(weights, Tensor) or weights.shape != w.shape:
            return False
        alive = ~empty
        rows_ok = torch.allclose(weights[alive].double(), w[alive].double(), atol=1e-4)
        return rows_ok and bool(weights[empty].isnan().any()) == nan

    return predicate


def _scale_used(case: Case, got: object) -> float | None:
    """The number the learner divided the scores by, read off its weights (unmasked cases), else None."""
    weights = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
    if "mask" in case.kwargs or not isinstance(weights, Tensor) or weights.dtype.is_complex:
        return None
    raw = (case.args["query"] @ case.args["key"].transpose(-2, -1)).double()
    if weights.shape != raw.shape or not (weights > 0).all():
        return None
    x = raw - raw.mean(-1, keepdim=True)
    y = weights.double().log()
    y = y - y.mean(-1, keepdim=True)
    slope = float((x * y).sum() / (x * x).sum())  # y = x / c
    if slope <= 0 or not torch.allclose(y, x * slope, atol=1e-3):
        return None
    return 1.0 / slope


def _divided_by_other(case: Case, got: object) -> bool:
    c = _scale_used(case, got)
    return c is not None and not math.isclose(c, math.sqrt(case.info["d_k"]), rel_tol=1e-3)


_SQRT = "divide the scores by `math.sqrt(query.size(-1))`: d_k is the last dim of the query ({d_k} here)"

MISTAKES = [
    Mistake("the output and the weights are swapped", "return them in this order: `return output, weights`.",
            looks_like=_swapped),
    Mistake("the scores are not scaled", _SQRT + ", so sqrt(d_k) = {sqrt_d_k}.",
            _attend(lambda raw, d: raw)),
    Mistake("`d_k ** 1/2` is not sqrt(d_k): `**` binds tighter than `/`, so the scores are divided by d_k / 2",
            "write `d_k ** 0.5` (or `math.sqrt(d_k)`); `d_k ** 1/2` means `(d_k ** 1) / 2`.",
            _attend(lambda raw, d: raw / (d ** 1 / 2))),
    Mistake("`scores / d_k ** 1/2` is not scores / sqrt(d_k): `**` and `/` run left to right, so the scores are "
            "divided by 2 d_k", "write `scores / d_k ** 0.5` (or `scores / math.sqrt(d_k)`).",
            _attend(lambda raw, d: raw / d ** 1 / 2)),
    Mistake("the scores are divided by d_k instead of sqrt(d_k)",
            "divide by `math.sqrt(d_k)` ({sqrt_d_k} here), not d_k = {d_k}: the spread of q·k grows like sqrt(d_k).",
            _attend(lambda raw, d: raw / d)),
    Mistake("the scores are multiplied by sqrt(d_k) instead of divided", "scale with `/ math.sqrt(d_k)`.",
            _attend(lambda raw, d: raw * math.sqrt(d))),
    Mistake("the weights are a log-softmax (log-probabilities), not a softmax",
            "use `torch.softmax(scores, dim=-1)`: weights are probabilities in [0, 1] that sum to 1.",
            _attend(log=True)),
    Mistake("the weights returned are the scores, before the softmax",
            "return the weights after the softmax (each row sums to 1), not the scores.",
            _attend(return_scores=True)),
    Mistake("the softmax runs over the queries (dim=-2), not the keys",
            "each query shares its attention among the keys, so its weights over the keys sum to 1: which dim of "
            "the scores (..., Lq, Lk) holds the keys? Check with `weights.sum(dim=...)`.",
            _attend(dim=-2)),
    Mistake("the key is transposed on its first two dims (`key.transpose(0, 1)`), not its last two",
            "Q K^T pairs each query with every key *of the same sequence*: swap only the key's last two dims "
            "(Lk, d_k), whatever batch or head dims come before them; dims 0 and 1 are batch dims here.",
            _attend(transpose=lambda k: k.transpose(0, 1)), when=lambda case: case.args["key"].dim() > 2),
    Mistake("`key.T` reverses *all* the dims of a batched key, not just the last two",
            "on a batched key `.T` gives (d_k, Lk, ..., B): swap only the last two dims (Lk, d_k); PyTorch "
            "has a name for the transpose of a batch of matrices.",
            _attend(transpose=lambda k: k.permute(*reversed(range(k.dim())))),
            when=lambda case: case.args["key"].dim() > 2),
    Mistake("the mask is inverted", "our masks mean True = may attend, and `masked_fill(m, value)` writes where m "
            "is True: -inf belongs where the mask is False.", _attend(invert=True)),
    Mistake("the mask is ignored",
            "apply the mask to the scores before the softmax: `scores.masked_fill(~mask, float('-inf'))`.",
            _attend(ignore_mask=True)),
    Mistake("masked scores are set to 0, not -inf", "a score of 0 still gets weight exp(0); fill masked scores with "
            "float('-inf') (or `torch.finfo(scores.dtype).min`) so they get weight 0.", _attend(fill=0.0)),
    Mistake("the mask is applied after the softmax",
            "mask the scores before the softmax, so the remaining weights still sum to 1.", _attend(mask_after=True)),
    Mistake("NaN for the query that may attend to nothing", "a row of all -inf gives softmax 0/0 = NaN: find the "
            "queries with no allowed key (a mask row with no True: an `any` along the keys, keeping the dim so it "
            "broadcasts) and set their weights to 0; or fill with `torch.finfo(scores.dtype).min` and zero those "
            "rows.", looks_like=_empty_rows_wrong(True), fallback=True),
    Mistake("the query that may attend to nothing does not get zero weights", "when a row of the mask is all "
            "False, its weights (and so its output) must be 0, not uniform: "
            "`weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)`.", looks_like=_empty_rows_wrong(False),
            fallback=True),
    global_max_softmax(_masked_scores, item=1),
    Mistake("the weights are right but the output is not weights @ value",
            "the output is the weighted sum of the values: `weights @ value`.",
            looks_like=_weights_right_output_wrong),
    Mistake("the scores are divided by the wrong number (not sqrt(d_k) = {sqrt_d_k}): a fixed number, or the "
            "wrong dimension", _SQRT + "; a number written in the code is right for one d_k only.",
            looks_like=_divided_by_other),
]

#: Exceptions this exercise often raises, and their fix (before the framework's general table).
HINTS = [(r"mat1 and mat2|shapes cannot be multiplied|Expected size for first two dimensions of batch2",
          "transpose the last two dims of key: `key.transpose(-2, -1)`, so Q Kᵀ has shape (..., Lq, Lk) "
          "(`.T` reverses *all* the dims of a batched tensor).")]


def check_scaled_dot_product_attention(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(query, key, value, mask=None) -> (output, weights)`` (exercise 1).

    ``query (..., Lq, d_k)``, ``key (..., Lk, d_k)``, ``value (..., Lk, d_v)``, ``mask`` bool
    broadcastable to ``(..., Lq, Lk)`` (True = may attend) -> ``output (..., Lq, d_v)``,
    ``weights (..., Lq, Lk)``; a query with no allowed key gets zero weights. Six cases; the
    first failing one is reported, naming the mistake. Never raises because of the learner's
    code (under ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(NAME, HINTS)
    cases = _cases()
    failure = run_check(session, fn, cases, _reference, ("output", "weights"), MISTAKES, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match the reference (d_k = 6, 4, 24, 12, 10, 20, 9; "
                                "unmasked, batched, batched heads, causal, padding, a query that may attend to "
                                "nothing, rows whose scores are hundreds apart)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_cases, _reference, _steps)]
