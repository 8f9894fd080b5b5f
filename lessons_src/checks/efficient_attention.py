"""Check for exercise 9 (chapter "Efficient attention"): a causal sliding-window mask.

Built on ``_framework.py``: the cases (:data:`_CASES`) and the mistakes (:data:`MISTAKES`) are
tables. A mask of another dtype is judged by its pattern too (``mask != 0``, or ``mask == 0`` for
an additive 0/-inf mask), so a float mask that is also off by one is named for both.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..masks import sliding_window_mask
from ._framework import Case, Mistake, Session, done, mask_pattern, passed, run_check
from ._result import CheckResult

__all__ = ["check_sliding_window_mask"]

_NAME = "check_sliding_window_mask"

# (seq_len, window): a general band first (every known mistake shows there), then the edges:
# a window of 1 (only the diagonal), window == seq_len and window > seq_len (the causal mask),
# a longer sequence, and a single token.
_CASES = [(6, 3), (7, 1), (5, 5), (4, 9), (12, 4), (1, 1)]


def _offsets(seq_len: int) -> Tensor:
    positions = torch.arange(seq_len)
    return positions[:, None] - positions[None, :]  # (L, L): i - j, query i (row), key j (column)


def _is(wrong: Callable[[int, int], Tensor]) -> Callable[[Case, object], bool]:
    """A predicate: the learner's pattern equals ``wrong(seq_len, window)``."""

    def predicate(case: Case, got: object) -> bool:
        pattern = mask_pattern(got)
        expected = wrong(**case.args)
        return pattern is not None and pattern.shape == expected.shape and torch.equal(pattern, expected)

    return predicate


def _band(low: int, high: Callable[[int], int]) -> Callable[[int, int], Tensor]:
    """Keys j with ``low <= i - j < high(window)``."""
    return lambda seq_len, window: (_offsets(seq_len) >= low) & (_offsets(seq_len) < high(window))


def _future_visible(case: Case, got: object) -> bool:
    pattern = mask_pattern(got)
    L = case.args["seq_len"]
    return pattern is not None and pattern.shape == (L, L) and bool((pattern & ~torch.ones(L, L).bool().tril()).any())


def _diagonal_missing(case: Case, got: object) -> bool:
    pattern, expected = mask_pattern(got), sliding_window_mask(**case.args)
    if pattern is None or pattern.shape != expected.shape or pattern.diagonal().all():
        return False
    off = ~torch.eye(expected.size(0), dtype=torch.bool)
    return torch.equal(pattern & off, expected & off)


def _rightmask_pattern(additive: bool) -> Callable[[Case, object], bool]:
    def predicate(case: Case, got: object) -> bool:
        if not isinstance(got, Tensor) or got.dtype == torch.bool or got.dtype.is_complex:
            return False
        is_additive = got.is_floating_point() and bool((got <= 0).all()) and bool((got < 0).any())
        return is_additive == additive and torch.equal(mask_pattern(got), sliding_window_mask(**case.args))

    return predicate


_RULE = "key j is visible to query i when 0 <= i - j < window, i.e. keys i-window+1 .. i"

MISTAKES = [
    Mistake("an additive float mask (0 = may attend, a negative number = blocked), not a boolean one",
            "return the boolean mask itself, True = may attend (e.g. `mask == 0` of yours). The course's attention "
            "functions take bool masks; a float mask is added to the scores.", looks_like=_rightmask_pattern(True)),
    Mistake("the pattern is right but the dtype is {dtype}, not torch.bool",
            "return a bool tensor (`.bool()`, or build it from comparisons such as `>=` and `<`). "
            "`F.scaled_dot_product_attention` *adds* a float mask to the scores, so 1.0/0.0 would block nothing.",
            looks_like=lambda case, got: _rightmask_pattern(False)(case, got) and {"dtype": got.dtype}),
    Mistake("the mask is inverted (True where the query may NOT attend)",
            "the course's masks mean True = may attend, as in `F.scaled_dot_product_attention`: return the band "
            "itself, not its complement (drop the `~`, or swap True and False).",
            looks_like=_is(lambda seq_len, window: ~sliding_window_mask(seq_len, window))),
    Mistake("off by one: each query sees window + 1 keys (i - window .. i)",
            f"use a strict `<` on the far edge: {_RULE}; exactly `window` keys counting the query itself.",
            looks_like=_is(_band(0, lambda w: w + 1))),
    Mistake("off by one: each query sees only window - 1 keys (i - window + 2 .. i)",
            f"{_RULE}: `(i - j) < window`, not `< window - 1`; the query itself counts as one of the window keys.",
            looks_like=_is(_band(0, lambda w: w - 1))),
    Mistake("the mask is not causal: future keys (j > i) are visible, the band is symmetric around the diagonal",
            "a causal window looks back only: require `i - j >= 0` as well as `i - j < window` "
            "(`abs(i - j) < window` is the non-causal, centred window).",
            looks_like=_is(lambda seq_len, window: _offsets(seq_len).abs() < window)),
    Mistake("the diagonal is missing: a query does not see itself (only window - 1 earlier keys)",
            f"the window includes the query's own position: {_RULE}, so `i - j >= 0`, not `> 0`.",
            looks_like=_is(_band(1, lambda w: w))),
    Mistake("the diagonal is missing: each query sees the window keys before it, but not itself",
            f"the window ends at the query itself: {_RULE}; use `0 <= i - j < window` instead of `0 < i - j <= window`.",
            looks_like=_is(_band(1, lambda w: w + 1))),
    Mistake("the mask is transposed: queries see the keys after them (rows and columns swapped)",
            "rows are queries i and columns are keys j: build the offset as `i - j` with i = row index, "
            "e.g. `positions[:, None] - positions[None, :]`.",
            looks_like=_is(lambda seq_len, window: sliding_window_mask(seq_len, window).T.clone())),
    Mistake("the window is ignored: this is the plain causal mask (every earlier key is visible)",
            f"also block keys more than window - 1 positions back: {_RULE}.",
            looks_like=_is(lambda seq_len, window: _offsets(seq_len) >= 0)),
    Mistake("the mask is not causal: some queries see future keys (j > i)",
            "a causal window looks back only: key j is visible to query i when 0 <= i - j < window.",
            looks_like=_future_visible),
    Mistake("the diagonal is missing: some queries do not see themselves",
            "the window includes the query's own position: `0 <= i - j < window`.", looks_like=_diagonal_missing),
]


def _reference(seq_len: int, window: int) -> Tensor:
    return sliding_window_mask(seq_len, window)


def check_sliding_window_mask(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(seq_len, window) -> bool (L, L)`` causal sliding-window mask (exercise 9).

    Runs six cases, including window 1, window == seq_len, window > seq_len and a single token,
    against ``lessons_src.sliding_window_mask``. Names: an inverted mask, off-by-one windows
    (window + 1 or window - 1 keys), a non-causal (symmetric) band, a missing diagonal, a
    transposed mask, an ignored window, and a right pattern in the wrong dtype (float, int, or
    an additive 0/-inf mask).
    """
    session = Session(_NAME)
    cases = [Case(f"seq_len={L}, window={w}", {"seq_len": L, "window": w}) for L, w in _CASES]
    failure = run_check(session, fn, cases, _reference, ("mask",), MISTAKES)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(_CASES)} cases match the reference (window 1, window = seq_len, "
                                "window > seq_len, a single token, and general bands)"))
