"""Check for exercise 9 (chapter "Efficient attention"): a causal sliding-window mask."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..masks import sliding_window_mask
from ._result import CheckResult, call_learner, finish, shape_of

__all__ = ["check_sliding_window_mask"]

_NAME = "check_sliding_window_mask"

# (seq_len, window): a general band first (every known mistake shows there), then the edges:
# a window of 1 (only the diagonal), window == seq_len and window > seq_len (the causal mask),
# a longer sequence, and a single token.
_CASES = [(6, 3), (7, 1), (5, 5), (4, 9), (12, 4), (1, 1)]


def _offsets(seq_len: int) -> Tensor:
    positions = torch.arange(seq_len)
    return positions[:, None] - positions[None, :]  # (L, L): i - j, query i (row), key j (column)


def _keys(row: Tensor) -> str:
    """The key positions a mask row lets through, e.g. ``[2, 3, 4]``."""
    return str(row.nonzero().flatten().tolist())


def _first_difference(actual: Tensor, expected: Tensor) -> str:
    """``query i: expected keys [...], got [...]`` for the first row that differs."""
    for i in range(expected.size(0)):
        if not torch.equal(actual[i], expected[i]):
            return f"query {i}: expected keys {_keys(expected[i])}, got {_keys(actual[i])}"
    return "no row differs"


def _mistakes(seq_len: int, window: int) -> list[tuple[Tensor, str, str]]:
    """Known wrong masks for one case: (mask, what is wrong, how to fix)."""
    offset = _offsets(seq_len)
    expected = sliding_window_mask(seq_len, window)
    rule = "key j is visible to query i when 0 <= i - j < window, i.e. keys i-window+1 .. i"
    return [
        (~expected, "the mask is inverted (True where the query may NOT attend)",
         "the course's masks mean True = may attend, as in `F.scaled_dot_product_attention`: "
         "return the band itself, not its complement (drop the `~`, or swap True and False)."),
        ((offset >= 0) & (offset <= window),
         "off by one: each query sees window + 1 keys (i - window .. i)",
         f"use a strict `<` on the far edge: {rule}; exactly `window` keys counting the query itself."),
        ((offset >= 0) & (offset < window - 1),
         "off by one: each query sees only window - 1 keys (i - window + 2 .. i)",
         f"{rule}: `(i - j) < window`, not `< window - 1`; the query itself counts as one of the window keys."),
        (offset.abs() < window,
         "the mask is not causal: future keys (j > i) are visible, the band is symmetric around the diagonal",
         "a causal window looks back only: require `i - j >= 0` as well as `i - j < window` "
         "(`abs(i - j) < window` is the non-causal, centred window)."),
        ((offset > 0) & (offset < window),
         "the diagonal is missing: a query does not see itself (only window - 1 earlier keys)",
         f"the window includes the query's own position: {rule}, so `i - j >= 0`, not `> 0`."),
        ((offset > 0) & (offset <= window),
         "the diagonal is missing: each query sees the window keys before it, but not itself",
         f"the window ends at the query itself: {rule}; use `0 <= i - j < window` instead of `0 < i - j <= window`."),
        (expected.T.clone(),
         "the mask is transposed: queries see the keys after them (rows and columns swapped)",
         "rows are queries i and columns are keys j: build the offset as `i - j` with i = row index, "
         "e.g. `positions[:, None] - positions[None, :]`."),
        (offset >= 0,
         "the window is ignored: this is the plain causal mask (every earlier key is visible)",
         f"also block keys more than window - 1 positions back: {rule}."),
    ]


def _diagnose(pattern: Tensor, seq_len: int, window: int) -> tuple[str, str]:
    """Name the mistake behind a wrong (L, L) bool ``pattern``: (what is wrong, how to fix)."""
    for candidate, what, fix in _mistakes(seq_len, window):
        if torch.equal(pattern, candidate):
            return what, fix
    expected = sliding_window_mask(seq_len, window)
    future = ~torch.ones(seq_len, seq_len, dtype=torch.bool).tril()  # (L, L): j > i
    if (pattern & future).any():
        return ("the mask is not causal: some queries see future keys (j > i)",
                "a causal window looks back only: key j is visible to query i when 0 <= i - j < window.")
    off_diagonal = ~torch.eye(seq_len, dtype=torch.bool)
    if not pattern.diagonal().all() and torch.equal(pattern & off_diagonal, expected & off_diagonal):
        return ("the diagonal is missing: some queries do not see themselves",
                "the window includes the query's own position: `0 <= i - j < window`.")
    return ("the mask differs from the reference",
            "key j is visible to query i when 0 <= i - j < window (so i - window + 1 <= j <= i); print your "
            "mask for seq_len=6, window=3 and compare it row by row.")


def check_sliding_window_mask(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(seq_len, window) -> bool (L, L)`` causal sliding-window mask (exercise 9).

    Runs six cases, including window 1, window == seq_len, window > seq_len and a single token,
    against ``lessons_src.sliding_window_mask``. Names: an inverted mask, off-by-one windows
    (window + 1 or window - 1 keys), a non-causal (symmetric) band, a missing diagonal, a
    transposed mask, an ignored window, and a right pattern in the wrong dtype (float, int, or
    an additive 0/-inf mask).
    """
    for number, (seq_len, window) in enumerate(_CASES, start=1):
        where = f"case {number}/{len(_CASES)} (seq_len={seq_len}, window={window})"
        result, failure = call_learner(_NAME, where, fn, seq_len, window)
        if failure is not None:
            return failure
        expected = sliding_window_mask(seq_len, window)
        if not isinstance(result, Tensor):
            return finish(CheckResult(_NAME, False, f"{where}: returned {type(result).__name__}, expected a "
                                      "torch tensor", "return a bool tensor of shape (seq_len, seq_len), e.g. built "
                                      "from `torch.arange(seq_len)` with comparisons."))
        if result.shape != expected.shape:
            hint = "one row per query and one column per key: shape (seq_len, seq_len)."
            if result.numel() == expected.numel():
                hint += " Drop the extra dimensions (or reshape)."
            return finish(CheckResult(_NAME, False, f"{where}: the mask has shape {shape_of(result)}, expected "
                                      f"{tuple(expected.shape)} = (seq_len, seq_len)", hint))
        mask = result.detach().cpu()
        dtype_note = ""
        if mask.dtype != torch.bool:
            if mask.dtype.is_floating_point and bool((mask <= 0).all()) and bool((mask < 0).any()):
                additive = mask == 0  # an additive mask: 0 where allowed, -inf (or -1e9) where blocked
                if torch.equal(additive, expected):
                    return finish(CheckResult(
                        _NAME, False, f"{where}: an additive float mask (0 = may attend, a negative number = blocked), "
                        "not a boolean one", "return the boolean mask itself, True = may attend (e.g. "
                        "`mask == 0` of yours). The course's attention functions take bool masks; a float mask "
                        "is added to the scores."))
                pattern = additive
            else:
                pattern = mask != 0
                if torch.equal(pattern, expected):
                    return finish(CheckResult(
                        _NAME, False, f"{where}: the pattern is right but the dtype is {mask.dtype}, not torch.bool",
                        "return a bool tensor (`.bool()`, or build it from comparisons such as `>=` and `<`). "
                        "`F.scaled_dot_product_attention` *adds* a float mask to the scores, so 1.0/0.0 would "
                        "block nothing."))
            dtype_note = f"also: the dtype is {mask.dtype}; the mask must be torch.bool"
        else:
            pattern = mask
        if torch.equal(pattern, expected):
            continue
        what, fix = _diagnose(pattern, seq_len, window)
        details = [_first_difference(pattern, expected)] + ([dtype_note] if dtype_note else [])
        return finish(CheckResult(_NAME, False, f"{where}: {what}", fix, details))
    return finish(CheckResult(_NAME, True, f"all {len(_CASES)} cases match the reference (window 1, window = "
                              "seq_len, window > seq_len, a single token, and general bands)"))
