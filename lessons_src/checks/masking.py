"""Check for exercise 3 (chapter "Masking"): causal and padding masks, and their combination.

The learner writes three functions; every mask is boolean with **True = may attend**:

- ``make_causal_mask(seq_len) -> (L, L)``, True where key j <= query i;
- ``make_padding_mask(lengths, max_len) -> (B, max_len)``, True at the first ``lengths[b]`` positions;
- ``combine_masks(padding, causal) -> (B, L, L)``, ``padding[:, None, :] & causal``.

:func:`check_masks` checks them in that order against :mod:`lessons_src.masks` and names the
mistake it recognises: inverted polarity (True = ignore), an off-by-one diagonal or length, a
transposed mask, padding broadcast along the query axis, a float/int (or additive) mask instead
of a boolean one, and wrong shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..masks import causal_mask, padding_mask
from ._result import CheckResult, call_learner, finish

__all__ = ["check_masks"]

CHECK = "check_masks"

_INVERTED = (
    "the polarity is inverted: your mask is True where attention is *blocked* (True = ignore, the "
    "convention of nn.MultiheadAttention's key_padding_mask and boolean attn_mask)"
)
_POLARITY_FIX = "in this course True means *may attend* (as in F.scaled_dot_product_attention); "


@dataclass(frozen=True)
class _Mistake:
    """A known wrong answer for one case: its value, what is wrong, and how to fix it."""

    value: Tensor
    what: str
    fix: str


# -- the cases -------------------------------------------------------------------------------------


def _causal_cases() -> list[int]:
    # 5 first: on it every named diagonal mistake gives a different mask. 1 is the edge case.
    return [5, 1, 8]


def _padding_cases() -> list[tuple[list[int], int]]:
    # B != max_len everywhere, so a transposed (max_len, B) mask is told apart by its shape.
    return [
        ([3, 1, 4], 4),  # the longest sentence fills max_len
        ([2, 0, 5], 7),  # max_len beyond the longest length; an empty sentence
        ([6, 6], 6),  # no padding at all
    ]


def _combine_cases() -> list[list[int]]:
    # L = max(lengths) and B != L in each case.
    return [[3, 1, 4], [2, 5], [0, 3]]


# -- known mistakes --------------------------------------------------------------------------------


def _causal_mistakes(seq_len: int) -> list[_Mistake]:
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return [
        _Mistake(ones.triu(1), _INVERTED + "; here True sits above the diagonal, on the future",
                 _POLARITY_FIX + "query i may see key j when j <= i: `torch.ones(L, L, dtype=torch.bool).tril()`, "
                 "or flip yours with `~`."),
        _Mistake(ones.tril(-1), "off by one: the diagonal is missing, so a position may not see itself "
                 "(a strictly lower triangle; the first position then sees nothing)",
                 "include the diagonal: `.tril()` with the default diagonal=0, or `j <= i` rather than `j < i`."),
        _Mistake(ones.tril(1), "off by one: each position may also see the next, future position "
                 "(the diagonal just above the main one is True)",
                 "use `.tril()` with diagonal=0 (key j <= query i), not diagonal=1."),
        _Mistake(ones.triu(), "the mask is transposed: position i sees itself and the positions *after* it "
                 "(`triu` instead of `tril`)",
                 "rows are queries and columns are keys: mask[i, j] is True when j <= i, the lower triangle `.tril()`."),
        _Mistake(ones, "the mask blocks nothing (all True)",
                 "block the future: mask[i, j] is True only when j <= i, e.g. `.tril()`."),
    ]


def _padding_mistakes(lengths: Tensor, max_len: int) -> list[_Mistake]:
    positions = torch.arange(max_len)[None, :]  # (1, max_len)
    n = lengths[:, None]  # (B, 1)
    return [
        _Mistake(positions >= n, _INVERTED + "; here True sits on the padding",
                 _POLARITY_FIX + "True on the real tokens: `torch.arange(max_len)[None, :] < lengths[:, None]`, "
                 "or flip yours with `~`."),
        _Mistake(positions <= n, "off by one: each row also lets through the first padding position "
                 "(`<=` instead of `<`)",
                 "positions 0 .. lengths[b] - 1 are real: compare with `<`, not `<=`."),
        _Mistake(positions < n - 1, "off by one: each row drops its last real token (`< lengths - 1`)",
                 "positions 0 .. lengths[b] - 1 are real, so use `positions < lengths[:, None]`."),
        _Mistake(torch.ones(len(lengths), max_len, dtype=torch.bool), "the mask blocks nothing (all True)",
                 "mask[b, j] is True only when j < lengths[b]."),
    ]


def _combine_mistakes(padding: Tensor, causal: Tensor) -> list[_Mistake]:
    B, L = padding.shape
    key_axis = padding[:, None, :]  # (B, 1, L)
    full = (B, L, L)
    return [
        _Mistake(~(key_axis & causal), _INVERTED,
                 _POLARITY_FIX + "the inputs already mean True = may attend, so combine them as they are: "
                 "`padding[:, None, :] & causal`, with no `~`."),
        _Mistake(padding[:, :, None] & causal,
                 "the padding is broadcast along the wrong axis: `padding[:, :, None]` has shape (B, L, 1) and "
                 "masks the *queries* (rows) of padding tokens instead of the padding *keys* (columns); their "
                 "rows end up empty (all False), and without the causal mask real tokens would still see padding",
                 "padding is a property of keys: `padding[:, None, :]` has shape (B, 1, L), the same row of "
                 "allowed keys for every query; then `& causal` broadcasts to (B, L, L)."),
        _Mistake((~padding)[:, None, :] & causal, "the padding mask is inverted before combining: "
                 "padding keys are allowed and real ones blocked",
                 "`padding` is already True at the real tokens: use it as it is, `padding[:, None, :] & causal`."),
        _Mistake(key_axis | causal, "the masks are combined with | (or): a key allowed by *either* mask passes",
                 "a key is allowed only when *both* masks allow it: use `&` (or `torch.logical_and`)."),
        _Mistake(causal.expand(full), "the padding mask is missing: the result is the causal mask for every sentence",
                 "also require the key to be a real token: `padding[:, None, :] & causal`."),
        _Mistake(key_axis.expand(full), "the causal mask is missing: the result is the padding mask for every query",
                 "also require key j <= query i: `padding[:, None, :] & causal`."),
    ]


# -- judging one result ----------------------------------------------------------------------------


def _fail(label: str, summary: str, hint: str, details: list[str] | None = None) -> CheckResult:
    return finish(CheckResult(f"{CHECK} ({label})", False, summary, hint, details or []))


def _first_difference(actual: Tensor, expected: Tensor, axes: str) -> str:
    wrong = (actual != expected).nonzero()
    first = tuple(int(i) for i in wrong[0])
    return (f"{len(wrong)} of {expected.numel()} entries differ; the first is {axes} = {first}: "
            f"you have {bool(actual[first])}, expected {bool(expected[first])}")


def _judge(
    label: str,
    where: str,
    result: object,
    expected: Tensor,
    mistakes: list[_Mistake],
    shapes: dict[tuple[int, ...], tuple[str, str]],
    spec: str,
    axes: str,
) -> CheckResult | None:
    """None when ``result`` equals ``expected``; otherwise the failure, naming the mistake."""
    if not isinstance(result, Tensor):
        return _fail(label, f"{where}: returned {type(result).__name__}, expected a torch.Tensor",
                     "build the mask with torch operations (comparisons, `tril`, `&`) and return the tensor.")
    shape = tuple(result.shape)
    if shape != tuple(expected.shape):
        if shape in shapes:
            what, fix = shapes[shape]
            return _fail(label, f"{where}: shape {shape}: {what}", fix)
        return _fail(label, f"{where}: returned shape {shape}, expected {tuple(expected.shape)} = {spec}",
                     f"the result must have shape exactly {spec}; print `mask.shape` as you build it.")
    if result.dtype != torch.bool:
        if result.dtype.is_floating_point and torch.isinf(result).any():
            values = result == 0
            what = f"{where}: an additive float mask (0 / -inf, dtype {result.dtype}), not a boolean one"
            fix = ("this exercise wants booleans, True = may attend (what masked_fill and "
                   "F.scaled_dot_product_attention take); convert with `mask == 0`, or build it with comparisons.")
        else:
            values = result != 0
            what = f"{where}: dtype {result.dtype}, expected torch.bool"
            fix = ("return a boolean mask: comparisons (`<`, `>=`) and `&` give bools directly, "
                   "`torch.ones(..., dtype=torch.bool)` makes a boolean tensor, `.bool()` converts a 0/1 one. "
                   "`~mask` and `masked_fill(~mask, ...)` only work on booleans.")
        if torch.equal(values, expected):
            return _fail(label, f"{what}; the values are right", fix)
        for mistake in mistakes:
            if torch.equal(values, mistake.value):
                return _fail(label, f"{what}; and, read as booleans, {mistake.what}", f"{fix} Then: {mistake.fix}")
        return _fail(label, what, fix, [_first_difference(values, expected, axes)])
    if torch.equal(result, expected):
        return None
    for mistake in mistakes:
        if torch.equal(result, mistake.value):
            return _fail(label, f"{where}: {mistake.what}", mistake.fix)
    return _fail(label, f"{where}: the mask differs from the reference", f"recheck the rule: {spec}.",
                 [_first_difference(result, expected, axes)])


# -- the check -------------------------------------------------------------------------------------


def _check_causal(fn: Callable[..., object]) -> tuple[int, CheckResult | None]:
    label = "make_causal_mask"
    cases = _causal_cases()
    for number, seq_len in enumerate(cases, start=1):
        where = f"case {number}/{len(cases)} (seq_len={seq_len})"
        result, failure = call_learner(f"{CHECK} ({label})", where, fn, seq_len)
        if failure is not None:
            return 0, failure
        shapes = {
            (1, seq_len, seq_len): ("an extra leading axis", "return the (L, L) mask itself; "
                                    "broadcasting adds the batch axis where it is needed."),
        }
        spec = "(L, L), mask[i, j] = (j <= i)"
        failed = _judge(label, where, result, causal_mask(seq_len), _causal_mistakes(seq_len), shapes, spec, "[i, j]")
        if failed is not None:
            return 0, failed
    return len(cases), None


def _check_padding(fn: Callable[..., object]) -> tuple[int, CheckResult | None]:
    label = "make_padding_mask"
    cases = _padding_cases()
    for number, (values, max_len) in enumerate(cases, start=1):
        lengths = torch.tensor(values)
        B = len(values)
        where = f"case {number}/{len(cases)} (lengths={values}, max_len={max_len})"
        result, failure = call_learner(f"{CHECK} ({label})", where, fn, lengths, max_len)
        if failure is not None:
            return 0, failure
        shapes = {
            (max_len, B): ("transposed: rows must be sentences and columns positions, (B, max_len)",
                           "compare `torch.arange(max_len)[None, :]` (1, max_len) with `lengths[:, None]` (B, 1)."),
            (B, 1, max_len): ("it already has the key axis of the scores, (B, 1, max_len)",
                              "return (B, max_len) here; `combine_masks` adds the axis with `padding[:, None, :]`."),
        }
        if max(values) != max_len:
            shapes[(B, max(values))] = (
                f"max_len={max_len} is ignored: the mask has max(lengths)={max(values)} columns",
                "make max_len columns: `torch.arange(max_len)`, not `torch.arange(lengths.max())`.")
        spec = "(B, max_len), mask[b, j] = (j < lengths[b])"
        expected = padding_mask(lengths, max_len)
        failed = _judge(label, where, result, expected, _padding_mistakes(lengths, max_len), shapes, spec, "[b, j]")
        if failed is not None:
            return 0, failed
    return len(cases), None


def _check_combine(fn: Callable[..., object]) -> tuple[int, CheckResult | None]:
    label = "combine_masks"
    cases = _combine_cases()
    for number, values in enumerate(cases, start=1):
        B, L = len(values), max(values)
        padding, causal = padding_mask(values, L), causal_mask(L)  # (B, L), (L, L)
        where = f"case {number}/{len(cases)} (padding {tuple(padding.shape)} from lengths={values}, causal ({L}, {L}))"
        result, failure = call_learner(f"{CHECK} ({label})", where, fn, padding, causal)
        if failure is not None:
            return 0, failure
        shapes = {
            (B, 1, L, L): ("the (B, 1, L, L) shape for multi-head scores, with a head axis",
                           "this exercise asks for (B, L, L): `padding[:, None, :] & causal`; add `[:, None]` "
                           "only where heads need it."),
            (L, L): ("the batch axis is gone: one (L, L) mask cannot hold a different padding per sentence",
                     "broadcast the padding as (B, 1, L): `padding[:, None, :] & causal` is (B, L, L)."),
            (B, L): ("this is the padding mask's shape; the combined mask has one row per query",
                     "broadcast: `padding[:, None, :]` (B, 1, L) `& causal` (L, L) gives (B, L, L)."),
            (B, 1, L): ("broadcastable, but not combined with the causal mask",
                        "`padding[:, None, :] & causal` gives the full (B, L, L)."),
        }
        spec = "(B, L, L), mask[b, i, j] = padding[b, j] and j <= i"
        expected = padding[:, None, :] & causal
        failed = _judge(label, where, result, expected, _combine_mistakes(padding, causal), shapes, spec, "[b, i, j]")
        if failed is not None:
            return 0, failed
    return len(cases), None


def check_masks(
    make_causal_mask: Callable[..., object],
    make_padding_mask: Callable[..., object],
    combine_masks: Callable[..., object],
) -> CheckResult:
    """Check exercise 3's three mask functions, in order; report the first mistake, named.

    ``make_causal_mask(seq_len)`` must return bool ``(L, L)``, True where j <= i;
    ``make_padding_mask(lengths, max_len)`` (lengths: 1-D long tensor ``(B,)``) bool
    ``(B, max_len)``, True where j < lengths[b]; ``combine_masks(padding, causal)`` bool
    ``(B, L, L)`` equal to ``padding[:, None, :] & causal``. Never raises because of the
    learner's code (except under ``LESSONS_SRC_STRICT=1``, where a failure raises AssertionError).
    """
    functions = [
        ("make_causal_mask", make_causal_mask, _check_causal),
        ("make_padding_mask", make_padding_mask, _check_padding),
        ("combine_masks", combine_masks, _check_combine),
    ]
    counts = []
    for number, (label, fn, check) in enumerate(functions):
        if not callable(fn):
            return _fail(label, f"expected a function, got {type(fn).__name__}",
                         "pass the three functions themselves, without calling them: "
                         "`check_masks(make_causal_mask, make_padding_mask, combine_masks)`.")
        count, failure = check(fn)
        if failure is not None:
            passed = [name for name, _, _ in functions[:number]]
            if passed:
                failure.details.insert(0, f"{' and '.join(passed)} passed")
            return failure
        counts.append(f"{label} on {count} cases")
    return finish(CheckResult(CHECK, True, "all three functions match the reference: " + ", ".join(counts)))
