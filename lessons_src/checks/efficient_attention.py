"""Checks for exercise 9 (chapter "Efficient attention"): a causal sliding-window mask (part 1,
:func:`check_sliding_window_mask`), and the same window with attention sinks (part 2,
:func:`check_sink_window_mask`, mistakes :data:`SINK_MISTAKES`).

Built on ``_framework.py``: the cases (:data:`_CASES`) and the mistakes (:data:`MISTAKES`) are
tables. A mask of another dtype is judged by its pattern too (``mask != 0``, or ``mask == 0`` for
an additive 0/-inf mask), so a float mask that is also off by one is named for both.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..masks import sliding_window_mask
from ._framework import Case, Mistake, Session, done, mask_mistakes, mask_pattern, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_sliding_window_mask", "check_sink_window_mask"]

_NAME = "check_sliding_window_mask"

# (seq_len, window): a general band first (every known mistake shows there), then the edges:
# a window of 1 (only the diagonal), window == seq_len and window > seq_len (the causal mask),
# a longer sequence, and a single token.
_CASES = [(6, 3), (7, 1), (5, 5), (4, 9), (12, 4), (1, 1)]


def _offsets(seq_len: int) -> Tensor:
    positions = torch.arange(seq_len)
    return positions[:, None] - positions[None, :]  # (L, L): i - j, query i (row), key j (column)


_QK = ("query", "key")


def _steps(seq_len: int, window: int) -> Tensor:
    """The chapter's rule step by step (``_steps.py`` searches small changes to each); equal to :func:`_reference`."""
    positions = torch.arange(seq_len)
    offsets = step("offset i - j (query i, key j)", torch.sub, positions[:, None], positions[None, :], axes=_QK)
    causal = step("causal: key j not after query i, i - j >= 0", torch.ge, offsets, 0, axes=_QK)
    recent = step("in the window: i - j < window", torch.lt, offsets, window, axes=_QK)
    return step("causal and in the window", torch.logical_and, causal, recent, axes=_QK)


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
    cases = _window_cases()
    failure = run_check(session, fn, cases, _reference, ("mask",), MISTAKES, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(_CASES)} cases match the reference (window 1, window = seq_len, "
                                "window > seq_len, a single token, and general bands)"))


# == part 2: a sliding window with attention sinks ==================================================
#
# StreamingLLM (Xiao et al., 2024) keeps the first few tokens, the "attention sinks", visible to every
# later query on top of a causal sliding window: ``sink_window_mask(seq_len, window, num_sinks)``,
# key j visible to query i when j <= i and (i - j < window or j < num_sinks).

SINKS = "check_sink_window_mask"
# (seq_len, window, num_sinks): no sinks, more sinks than the window, window >= seq_len, a single token, ...
_SINK_SHAPES = [(8, 3, 2), (10, 2, 1), (7, 1, 0), (9, 2, 4), (6, 8, 1), (1, 1, 1)]


def _sink_reference(seq_len: int, window: int, num_sinks: int) -> Tensor:
    offsets = _offsets(seq_len)
    is_sink = torch.arange(seq_len) < num_sinks  # (L,): the first num_sinks keys
    return (offsets >= 0) & ((offsets < window) | is_sink[None, :])


def _sink_steps(seq_len: int, window: int, num_sinks: int) -> Tensor:
    """The sink-window rule step by step (``_steps.py`` searches small changes to each); equal to
    :func:`_sink_reference`."""
    positions = torch.arange(seq_len)
    offsets = step("offset i - j (query i, key j)", torch.sub, positions[:, None], positions[None, :], axes=_QK)
    causal = step("causal: key j not after query i, i - j >= 0", torch.ge, offsets, 0, axes=_QK)
    recent = step("in the window: i - j < window", torch.lt, offsets, window, axes=_QK)
    sink = step("a sink key: j < num_sinks", torch.lt, positions[None, :], num_sinks, axes=_QK)
    visible = step("in the window or a sink key", torch.logical_or, recent, sink, axes=_QK)
    return step("causal and (in the window or a sink key)", torch.logical_and, causal, visible, axes=_QK)


def _sinks(window_edge: Callable[[Tensor, int], Tensor] = lambda off, w: off < w, causal_sinks: bool = True,
           sinks_as_rows: bool = False, sinks: bool = True, causal: bool = True, sink_count: int = 0
           ) -> Callable[[int, int, int], Tensor]:
    """A sink-window mask with one switch per mistake."""

    def wrong(seq_len: int, window: int, num_sinks: int) -> Tensor:
        off = _offsets(seq_len)
        positions = torch.arange(seq_len)
        band = window_edge(off, window) & ((off >= 0) if causal else (off > -window))
        if not sinks:
            return band
        is_sink = positions < num_sinks + sink_count
        sink = is_sink[:, None] if sinks_as_rows else is_sink[None, :]
        sink = sink & (off >= 0) if causal_sinks else sink.expand(seq_len, seq_len)
        return band | sink

    return wrong


def _sink_is(wrong: Callable[[int, int, int], Tensor]) -> Callable[[Case, object], bool]:
    def predicate(case: Case, got: object) -> bool:
        pattern, expected = mask_pattern(got), wrong(**case.args)
        return pattern is not None and pattern.shape == expected.shape and torch.equal(pattern, expected)

    return predicate


_SINK_RULE = "key j is visible to query i when j <= i and (i - j < window or j < num_sinks)"

SINK_MISTAKES = [
    *mask_mistakes(_sink_reference),
    Mistake("the mask is inverted (True where the query may NOT attend)",
            "True = may attend, as in `F.scaled_dot_product_attention`: return the allowed pattern, not its complement.",
            looks_like=_sink_is(lambda **a: ~_sink_reference(**a))),
    Mistake("no query sees a sink key outside its window: this is the plain sliding window",
            f"the sinks are key *columns*, j < num_sinks, visible to every later query (a condition on the query "
            f"index i changes nothing: those queries see their past anyway): {_SINK_RULE}.",
            looks_like=_sink_is(_sinks(sinks=False)), when=lambda case: case.args["num_sinks"] > 0, fallback=True),
    Mistake("the sinks break causality: a query sees sink keys that come after it",
            "a sink is still a key in the past: the first queries (i < num_sinks) must not see the later sinks. "
            "Combine the sink columns with the causal condition `j <= i`.",
            looks_like=_sink_is(_sinks(causal_sinks=False))),
    Mistake("the sinks are rows, not columns: the sink *queries* see everything, while the other queries do not see "
            "the sinks", "the sinks are keys every query may look at: mark the first num_sinks *columns* (keys j), "
            "`j < num_sinks`, broadcast as `[None, :]`.", looks_like=_sink_is(_sinks(sinks_as_rows=True, causal_sinks=False))),
    Mistake("off by one in the window: each query sees window + 1 recent keys",
            f"{_SINK_RULE}: a strict `<` on the far edge, the query itself counting as one of the window keys.",
            looks_like=_sink_is(_sinks(lambda off, w: off <= w))),
    Mistake("off by one in the window: each query sees only window - 1 recent keys",
            f"{_SINK_RULE}: `i - j < window`, not `< window - 1`.", looks_like=_sink_is(_sinks(lambda off, w: off < w - 1))),
    Mistake("off by one in the sinks: num_sinks + 1 sink keys", f"the sinks are keys 0 .. num_sinks - 1: {_SINK_RULE}.",
            looks_like=_sink_is(_sinks(sink_count=1))),
    Mistake("one sink key too few: num_sinks - 1 of them (an off-by-one, or a count written in the code)",
            f"the sinks are keys 0 .. num_sinks - 1, as many as the argument says: {_SINK_RULE}.",
            looks_like=_sink_is(_sinks(sink_count=-1)), when=lambda case: case.args["num_sinks"] > 0),
    Mistake("the window is not causal: it is two-sided around the query",
            f"a decoder's window looks back only: {_SINK_RULE}.", looks_like=_sink_is(_sinks(causal=False))),
    Mistake("the mask is not causal: some queries see future keys (j > i)",
            f"{_SINK_RULE}; check with `(mask & ~torch.ones(L, L, dtype=torch.bool).tril()).any()`, which must be "
            "False.", looks_like=lambda case, got: _future_visible(case, got)),
]


def check_sink_window_mask(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(seq_len, window, num_sinks) -> bool (L, L)`` (exercise 9, part 2): a causal
    sliding window of ``window`` keys plus the first ``num_sinks`` keys (attention sinks) visible to every
    later query. Six cases (no sinks, more sinks than the window, window >= seq_len, a single token, ...);
    the mistakes are :data:`SINK_MISTAKES`.
    """
    session = Session(SINKS)
    cases = _sink_cases()
    failure = run_check(session, fn, cases, _sink_reference, ("mask",), SINK_MISTAKES, steps=_sink_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match (no sinks, more sinks than the window, window >= "
                                "seq_len, a single token, and general cases)"))


def _window_cases() -> list[Case]:
    return [Case(f"seq_len={L}, window={w}", {"seq_len": L, "window": w}) for L, w in _CASES]


def _sink_cases() -> list[Case]:
    return [Case(f"seq_len={L}, window={w}, num_sinks={s}", {"seq_len": L, "window": w, "num_sinks": s},
                 info={"seq_len": L}) for L, w, s in _SINK_SHAPES]


#: The references written as named steps, with the cases they must equal the references on (tests/test_checks_steps.py).
STEPPED = [(_window_cases, _reference, _steps), (_sink_cases, _sink_reference, _sink_steps)]
