"""Checks for exercise 3 (chapter "Masking"): causal and padding masks and their combination (part 1,
:func:`check_masks`), and the causal mask of packed documents (part 2, :func:`check_document_causal_mask`,
mistakes :data:`DOCUMENT_MISTAKES`).

The learner writes three functions; every mask is boolean with **True = may attend**:

- ``make_causal_mask(seq_len) -> (L, L)``, True where key j <= query i;
- ``make_padding_mask(lengths, max_len) -> (B, max_len)``, True at the first ``lengths[b]`` positions;
- ``combine_masks(padding, causal) -> (B, L, L)``, ``padding[:, None, :] & causal``.

:func:`check_masks` checks them in that order against :mod:`lessons_src.masks` and names the
mistake it recognises: inverted polarity (True = ignore), an off-by-one diagonal or length, a
transposed mask, padding broadcast along the query axis, a float/int (or additive) mask instead
of a boolean one, and wrong shapes. Built on ``_framework.py``: for each function, its cases and
its mistakes are tables (a mask of another dtype is judged on its pattern too).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..masks import causal_mask, padding_mask
from ._framework import (
    Case,
    Mistake,
    Session,
    done,
    mask_mistakes,
    passed,
    pattern_is,
    run_check,
    shape_is,
)
from ._result import CheckResult
from ._steps import step

__all__ = ["check_masks", "check_document_causal_mask"]

CHECK = "check_masks"

_INVERTED = (
    "the polarity is inverted: your mask is True where attention is *blocked* (True = ignore, the "
    "convention of nn.MultiheadAttention's key_padding_mask and boolean attn_mask)"
)
_POLARITY_FIX = "in this course True means *may attend* (as in F.scaled_dot_product_attention); "


# -- make_causal_mask ------------------------------------------------------------------------------


def _causal_cases() -> list[Case]:
    # 5 first: on it every named diagonal mistake gives a different mask. 1 is the edge case.
    return [Case(f"seq_len={L}", {"seq_len": L}, info={"L": L}) for L in (5, 1, 8)]


def _causal_steps(seq_len: int) -> Tensor:
    """``make_causal_mask`` step by step (``_steps.py`` searches small changes to each); equal to ``causal_mask``."""
    ones = step("a square of True, (L, L)", torch.ones, seq_len, seq_len, dtype=torch.bool)
    return step("the causal triangle: key j <= query i (tril)", torch.tril, ones, diagonal=0, axes=("query", "key"))


def _ones(seq_len: int) -> Tensor:
    return torch.ones(seq_len, seq_len, dtype=torch.bool)


CAUSAL_MISTAKES = [
    *mask_mistakes(causal_mask),
    Mistake("an extra leading axis", "return the (L, L) mask itself; broadcasting adds the batch axis where it is "
            "needed.", looks_like=shape_is(lambda L: (1, L, L))),
    Mistake(_INVERTED + "; here True sits above the diagonal, on the future",
            _POLARITY_FIX + "query i may see key j when j <= i: `torch.ones(L, L, dtype=torch.bool).tril()`, "
            "or flip yours with `~`.", looks_like=pattern_is(lambda seq_len: _ones(seq_len).triu(1))),
    Mistake("off by one: the diagonal is missing, so a position may not see itself (a strictly lower triangle; the "
            "first position then sees nothing)",
            "include the diagonal: `.tril()` with the default diagonal=0, or `j <= i` rather than `j < i`.",
            looks_like=pattern_is(lambda seq_len: _ones(seq_len).tril(-1))),
    Mistake("off by one: each position may also see the next, future position (the diagonal just above the main "
            "one is True)", "use `.tril()` with diagonal=0 (key j <= query i), not diagonal=1.",
            looks_like=pattern_is(lambda seq_len: _ones(seq_len).tril(1))),
    Mistake("the mask is transposed: position i sees itself and the positions *after* it (`triu` instead of `tril`)",
            "rows are queries and columns are keys: mask[i, j] is True when j <= i, the lower triangle `.tril()`.",
            looks_like=pattern_is(lambda seq_len: _ones(seq_len).triu())),
    Mistake("the mask blocks nothing (all True)", "block the future: mask[i, j] is True only when j <= i, e.g. "
            "`.tril()`.", looks_like=pattern_is(_ones)),
]


# -- make_padding_mask -----------------------------------------------------------------------------


def _padding_cases() -> list[Case]:
    # B != max_len everywhere, so a transposed (max_len, B) mask is told apart by its shape; in the
    # second case max_len is beyond the longest length (and a sentence is empty).
    cases = []
    for values, max_len in (([3, 1, 4], 4), ([2, 0, 5], 7), ([6, 6], 6)):
        cases.append(Case(f"lengths={values}, max_len={max_len}", {"lengths": torch.tensor(values), "max_len": max_len},
                          info={"B": len(values), "max_len": max_len, "longest": max(values),
                                "dims": {"mask": ("sentence", "position")}}))
    return cases


def _positions(lengths: Tensor, max_len: int) -> tuple[Tensor, Tensor]:
    return torch.arange(max_len)[None, :], lengths[:, None]  # (1, max_len), (B, 1)


def _padding_steps(lengths: Tensor, max_len: int) -> Tensor:
    """``make_padding_mask`` step by step; equal to ``padding_mask``."""
    positions = step("the positions j = 0 .. max_len - 1", torch.arange, max_len)  # (max_len,)
    column = step("the lengths as a column, (B, 1)", torch.unsqueeze, lengths, 1)
    return step("a real token: position j < lengths[b]", torch.lt, positions, column, axes=("position",))


PADDING_MISTAKES = [
    *mask_mistakes(padding_mask),
    Mistake("transposed: rows must be sentences and columns positions, (B, max_len)",
            "compare `torch.arange(max_len)[None, :]` (1, max_len) with `lengths[:, None]` (B, 1).",
            looks_like=shape_is(lambda B, max_len, longest: (max_len, B))),
    Mistake("it already has the key axis of the scores, (B, 1, max_len)",
            "return (B, max_len) here; `combine_masks` adds the axis with `padding[:, None, :]`.",
            looks_like=shape_is(lambda B, max_len, longest: (B, 1, max_len))),
    Mistake("max_len={max_len} is ignored: the mask has max(lengths)={longest} columns",
            "make max_len columns: `torch.arange(max_len)`, not `torch.arange(lengths.max())`.",
            looks_like=shape_is(lambda B, max_len, longest: (B, longest) if longest != max_len else None)),
    Mistake(_INVERTED + "; here True sits on the padding", _POLARITY_FIX + "True on the real tokens: "
            "`torch.arange(max_len)[None, :] < lengths[:, None]`, or flip yours with `~`.",
            looks_like=pattern_is(lambda lengths, max_len: _positions(lengths, max_len)[0]
                                  >= _positions(lengths, max_len)[1])),
    Mistake("off by one: each row also lets through the first padding position (`<=` instead of `<`)",
            "positions 0 .. lengths[b] - 1 are real: compare with `<`, not `<=`.",
            looks_like=pattern_is(lambda lengths, max_len: _positions(lengths, max_len)[0]
                                  <= _positions(lengths, max_len)[1])),
    Mistake("off by one: each row drops its last real token (`< lengths - 1`)",
            "positions 0 .. lengths[b] - 1 are real, so use `positions < lengths[:, None]`.",
            looks_like=pattern_is(lambda lengths, max_len: _positions(lengths, max_len)[0]
                                  < _positions(lengths, max_len)[1] - 1)),
    Mistake("the mask blocks nothing (all True)", "mask[b, j] is True only when j < lengths[b].",
            looks_like=pattern_is(lambda lengths, max_len: torch.ones(len(lengths), max_len, dtype=torch.bool))),
]


# -- combine_masks ---------------------------------------------------------------------------------


def _combine_cases() -> list[Case]:
    # L = max(lengths) and B != L in each case.
    cases = []
    for values in ([3, 1, 4], [2, 5], [0, 3]):
        B, L = len(values), max(values)
        padding, causal = padding_mask(values, L), causal_mask(L)  # (B, L), (L, L)
        cases.append(Case(f"padding {tuple(padding.shape)} from lengths={values}, causal ({L}, {L})",
                          {"padding": padding, "causal": causal}, info={"B": B, "L": L}))
    return cases


def _combined(padding: Tensor, causal: Tensor) -> Tensor:
    return padding[:, None, :] & causal  # (B, L, L)


def _combine_steps(padding: Tensor, causal: Tensor) -> Tensor:
    """``combine_masks`` step by step; equal to :func:`_combined`."""
    keys = step("padding on the key axis, (B, 1, L)", torch.unsqueeze, padding, 1, axes=("sentence", "key"))
    return step("a real key and causal: padding & causal", torch.logical_and, keys, causal,
                axes=("sentence", "query", "key"))


COMBINE_MISTAKES = [
    *mask_mistakes(_combined),
    Mistake("the (B, 1, L, L) shape for multi-head scores, with a head axis",
            "this exercise asks for (B, L, L): `padding[:, None, :] & causal`; add `[:, None]` only where heads "
            "need it.", looks_like=shape_is(lambda B, L: (B, 1, L, L))),
    Mistake("the batch axis is gone: one (L, L) mask cannot hold a different padding per sentence",
            "broadcast the padding as (B, 1, L): `padding[:, None, :] & causal` is (B, L, L).",
            looks_like=shape_is(lambda B, L: (L, L))),
    Mistake("this is the padding mask's shape; the combined mask has one row per query",
            "broadcast: `padding[:, None, :]` (B, 1, L) `& causal` (L, L) gives (B, L, L).",
            looks_like=shape_is(lambda B, L: (B, L))),
    Mistake("broadcastable, but not combined with the causal mask",
            "`padding[:, None, :] & causal` gives the full (B, L, L).", looks_like=shape_is(lambda B, L: (B, 1, L))),
    Mistake(_INVERTED, _POLARITY_FIX + "the inputs already mean True = may attend, so combine them as they are: "
            "`padding[:, None, :] & causal`, with no `~`.",
            looks_like=pattern_is(lambda padding, causal: ~_combined(padding, causal))),
    Mistake("the padding is broadcast along the wrong axis: `padding[:, :, None]` has shape (B, L, 1) and masks the "
            "*queries* (rows) of padding tokens instead of the padding *keys* (columns); their rows end up empty "
            "(all False), and without the causal mask real tokens would still see padding",
            "padding is a property of keys: `padding[:, None, :]` has shape (B, 1, L), the same row of allowed keys "
            "for every query; then `& causal` broadcasts to (B, L, L).",
            looks_like=pattern_is(lambda padding, causal: padding[:, :, None] & causal)),
    Mistake("the padding mask is inverted before combining: padding keys are allowed and real ones blocked",
            "`padding` is already True at the real tokens: use it as it is, `padding[:, None, :] & causal`.",
            looks_like=pattern_is(lambda padding, causal: (~padding)[:, None, :] & causal)),
    Mistake("the masks are combined with | (or): a key allowed by *either* mask passes",
            "a key is allowed only when *both* masks allow it: use `&` (or `torch.logical_and`).",
            looks_like=pattern_is(lambda padding, causal: padding[:, None, :] | causal)),
    Mistake("the padding mask is missing: the result is the causal mask for every sentence",
            "also require the key to be a real token: `padding[:, None, :] & causal`.",
            looks_like=pattern_is(lambda padding, causal: causal.expand(padding.size(0), *causal.shape))),
    Mistake("the causal mask is missing: the result is the padding mask for every query",
            "also require key j <= query i: `padding[:, None, :] & causal`.",
            looks_like=pattern_is(lambda padding, causal: padding[:, None, :].expand(-1, causal.size(0), -1))),
]


# -- the check -------------------------------------------------------------------------------------


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
        ("make_causal_mask", make_causal_mask, _causal_cases(), causal_mask, CAUSAL_MISTAKES, _causal_steps),
        ("make_padding_mask", make_padding_mask, _padding_cases(), padding_mask, PADDING_MISTAKES, _padding_steps),
        ("combine_masks", combine_masks, _combine_cases(), _combined, COMBINE_MISTAKES, _combine_steps),
    ]
    counts = []
    for number, (label, fn, cases, reference, mistakes, stepped) in enumerate(functions):
        session = Session(f"{CHECK} ({label})")
        if not callable(fn):
            return done(session.fail(f"expected a function, got {type(fn).__name__}",
                                     "pass the three functions themselves, without calling them: "
                                     "`check_masks(make_causal_mask, make_padding_mask, combine_masks)`."))
        failure = run_check(session, fn, cases, reference, ("mask",), mistakes, steps=stepped)
        if failure is not None:
            done_before = [name for name, *_ in functions[:number]]
            if done_before:
                failure.details.insert(0, f"{' and '.join(done_before)} passed")
            return done(failure)
        counts.append(f"{label} on {len(cases)} cases")
    return done(passed(Session(CHECK), "all three functions match the reference: " + ", ".join(counts)))


# == part 2: packed sequences ===========================================================================
#
# LLM pre-training packs several short documents into one row of the batch so that no position is
# padding; a document must then not see the one before it. ``document_causal_mask(doc_ids)``:
# doc_ids (B, L) integers, the document of each position (non-decreasing along L) -> bool (B, L, L),
# True where key j is in query i's document and j <= i.

DOCUMENTS = "check_document_causal_mask"


def _document_reference(doc_ids: Tensor) -> Tensor:
    same = doc_ids[:, :, None] == doc_ids[:, None, :]  # (B, L, L): query i's document is key j's
    return same & causal_mask(doc_ids.size(-1), device=doc_ids.device)


def _document_steps(doc_ids: Tensor) -> Tensor:
    """``document_causal_mask`` step by step: two conditions, combined; equal to :func:`_document_reference`."""
    same = step("same document: doc id of query i == doc id of key j", torch.eq, doc_ids[:, :, None],
                doc_ids[:, None, :], axes=("row", "query", "key"))
    L = doc_ids.size(-1)
    ones = step("a square of True, (L, L)", torch.ones, L, L, dtype=torch.bool)
    causal = step("the causal triangle: key j <= query i (tril)", torch.tril, ones, diagonal=0, axes=("query", "key"))
    return step("both conditions: same document & causal", torch.logical_and, same, causal,
                axes=("row", "query", "key"))


def _document_cases() -> list[Case]:
    rows = [
        ("two rows of three and two documents", [[0, 0, 1, 1, 1, 2], [5, 5, 5, 5, 6, 6]]),
        ("one row, a one-token document in the middle", [[3, 3, 4, 7, 7, 7, 7]]),
        ("one document per row (plain causal)", [[0, 0, 0, 0], [2, 2, 2, 2], [1, 1, 1, 1]]),
        ("every token its own document", [[0, 1, 2, 3, 4]]),
        ("a single token", [[9]]),
    ]
    return [Case(f"{text}: doc_ids {ids}", {"doc_ids": torch.tensor(ids)}) for text, ids in rows]


def _doc_variant(causal: bool = True, same: bool = True, diagonal: bool = True, rows_only: bool = False,
                 transposed: bool = False) -> Callable[[Tensor], Tensor]:
    def wrong(doc_ids: Tensor) -> Tensor:
        L = doc_ids.size(-1)
        mask = torch.ones(doc_ids.size(0), L, L, dtype=torch.bool)
        if same:
            mask &= doc_ids[:, :, None] == doc_ids[:, None, :]
        if causal:
            mask &= causal_mask(L) if diagonal else torch.ones(L, L, dtype=torch.bool).tril(-1)
        if rows_only:
            mask = mask[:1].expand_as(mask)
        return mask.transpose(-2, -1) if transposed else mask

    return wrong


_DOC_RULE = "key j is visible to query i when both are in the same document (doc_ids equal) and j <= i"

DOCUMENT_MISTAKES = [
    *mask_mistakes(_document_reference),
    Mistake(_INVERTED, _POLARITY_FIX + "return the allowed pattern itself, not its complement.",
            looks_like=pattern_is(lambda doc_ids: ~_document_reference(doc_ids))),
    Mistake("the documents leak into each other: this is the plain causal mask",
            f"a token must not see an earlier document packed into the same row: {_DOC_RULE}.",
            looks_like=pattern_is(_doc_variant(same=False)), fallback=True),
    Mistake("the mask is not causal: a token sees the later tokens of its own document",
            f"packing does not change causality: {_DOC_RULE}. Combine the same-document test with `j <= i` (`&`).",
            looks_like=pattern_is(_doc_variant(causal=False))),
    Mistake("the diagonal is missing: a token does not see itself (the first token of each document sees nothing)",
            f"{_DOC_RULE}: `j <= i`, not `j < i`.", looks_like=pattern_is(_doc_variant(diagonal=False))),
    Mistake("the mask is transposed: rows are keys and columns queries",
            "rows are queries i, columns keys j: compare `doc_ids[:, :, None]` (query) with `doc_ids[:, None, :]` "
            "(key), and keep the lower triangle.", looks_like=pattern_is(_doc_variant(transposed=True)),
            fallback=True),
    Mistake("every row of the batch gets the first row's mask",
            "each row packs its own documents: compare doc ids within each row, keeping the batch dim "
            "(`doc_ids[:, :, None] == doc_ids[:, None, :]`, shape (B, L, L)).",
            looks_like=pattern_is(_doc_variant(rows_only=True)),
            when=lambda case: case.args["doc_ids"].size(0) > 1),
    Mistake("the mask has one row per batch, not one (L, L) matrix per row: shape {shape}",
            "compare every query's document with every key's: broadcast a `(B, L, 1)` view against a `(B, 1, L)` "
            "one, which gives `(B, L, L)`.",
            looks_like=lambda case, got: isinstance(got, Tensor) and tuple(got.shape) == tuple(case.args["doc_ids"].shape)
            and {"shape": tuple(got.shape)}),
]


def check_document_causal_mask(fn: Callable[..., object]) -> CheckResult:
    """Check exercise 3, part 2: ``fn(doc_ids) -> bool (B, L, L)``, the causal mask of packed documents
    (True where key j is in query i's document and j <= i). Five cases (several rows, a one-token
    document, one document per row, every token its own document, a single token); the mistakes are
    :data:`DOCUMENT_MISTAKES`.
    """
    session = Session(DOCUMENTS)
    cases = _document_cases()
    failure = run_check(session, fn, cases, _document_reference, ("mask",), DOCUMENT_MISTAKES,
                        steps=_document_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match (several rows, one-token documents, one document per "
                                "row, a single token)"))


#: The references written as named steps, with the cases each must equal its reference on (tests/test_checks_steps.py).
STEPPED = [(_causal_cases, causal_mask, _causal_steps), (_padding_cases, padding_mask, _padding_steps),
           (_combine_cases, _combined, _combine_steps), (_document_cases, _document_reference, _document_steps)]
