"""The masking exercise's check: correct answers written differently pass; each known mistake is named."""

import numpy as np
import torch
from checks_learners import REFERENCES, add, add_fns

from lessons_src import causal_mask, padding_mask
from lessons_src.checks.masking import check_masks

# -- correct implementations, written differently --------------------------------------------------


def causal_tril(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()


def causal_compare(seq_len):
    positions = torch.arange(seq_len)
    return positions[:, None] >= positions[None, :]


def causal_not_triu(seq_len):
    return ~torch.ones(seq_len, seq_len).triu(1).bool()


def padding_compare(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


def padding_loop(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        mask[b, :n] = True
    return mask


def padding_expand(lengths, max_len):
    return torch.arange(max_len).expand(len(lengths), -1).lt(lengths.unsqueeze(-1))


def combine_index(padding, causal):
    return padding[:, None, :] & causal


def combine_logical_and(padding, causal):
    B, L = padding.shape
    return torch.logical_and(padding.unsqueeze(1).expand(B, L, L), causal.expand(B, L, L))


def combine_multiply(padding, causal):
    return (padding.unsqueeze(-2) * causal).bool()  # bool * bool is already bool


CORRECT = [
    (causal_tril, padding_compare, combine_index),
    (causal_compare, padding_loop, combine_logical_and),
    (causal_not_triu, padding_expand, combine_multiply),
    (causal_mask, padding_mask, combine_index),  # the library's own functions
]


# -- known mistakes, each named ----------------------------------------------------------------------


def stub(*args):
    raise NotImplementedError


def causal_inverted(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)  # True = ignore


def causal_strict(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-1)


def causal_one_future(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(1)


def causal_transposed(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()


def causal_float(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len))


def causal_int(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.long).tril()


def causal_float_strict(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len), diagonal=-1)


def causal_additive(seq_len):
    return torch.zeros(seq_len, seq_len).masked_fill(~causal_tril(seq_len), float("-inf"))


def causal_batched(seq_len):
    return causal_tril(seq_len)[None]


def causal_numpy(seq_len):
    return np.tril(np.ones((seq_len, seq_len), dtype=bool))


def causal_too_big(seq_len):
    return causal_tril(seq_len + 1)


def causal_random(seq_len):
    mask = causal_tril(seq_len)
    if seq_len > 2:
        mask[seq_len - 1, 0] = False
    return mask


def padding_inverted(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]


def padding_one_more(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]


def padding_one_less(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None] - 1


def padding_transposed(lengths, max_len):
    return padding_compare(lengths, max_len).T


def padding_ignores_max_len(lengths, max_len):
    return padding_compare(lengths, int(lengths.max()))


def padding_key_axis(lengths, max_len):
    return padding_compare(lengths, max_len)[:, None, :]


def padding_float(lengths, max_len):
    return padding_compare(lengths, max_len).float()


def padding_int(lengths, max_len):
    return padding_compare(lengths, max_len).int()


def combine_query_axis(padding, causal):
    return padding[:, :, None] & causal  # (B, L, 1): the wrong axis


def combine_both_axes(padding, causal):
    return padding[:, :, None] & padding[:, None, :] & causal


def combine_or(padding, causal):
    return padding[:, None, :] | causal


def combine_inverted(padding, causal):
    return ~(padding[:, None, :] & causal)


def combine_inverted_padding(padding, causal):
    return ~padding[:, None, :] & causal


def combine_no_padding(padding, causal):
    return causal.expand(padding.size(0), -1, -1)


def combine_no_causal(padding, causal):
    L = padding.size(1)
    return padding[:, None, :].expand(-1, L, -1)


def combine_float(padding, causal):
    return padding.float()[:, None, :] * causal.float()


def combine_heads(padding, causal):
    return (padding[:, None, :] & causal)[:, None]


def combine_broadcastable(padding, causal):
    return padding[:, None, :]


def combine_wrong_broadcast_raises(padding, causal):
    return padding[None, :, :] & causal  # (1, B, L) & (L, L): fails when B != L


CAUSAL_MISTAKES = [
    (causal_inverted, "polarity is inverted"),
    (causal_strict, "the diagonal is missing"),
    (causal_one_future, "see the next, future position"),
    (causal_transposed, "transposed"),
    (causal_float, "dtype torch.float32, expected torch.bool; the values are right"),
    (causal_int, "dtype torch.int64, expected torch.bool"),
    (causal_float_strict, "the diagonal is missing"),
    (causal_additive, "additive float mask"),
    (causal_batched, "an extra leading axis"),
    (causal_numpy, "expected a tensor"),
    (causal_too_big, "expected (5, 5)"),
    (causal_random, "differs from the reference"),
    (stub, "not implemented yet"),
]
PADDING_MISTAKES = [
    (padding_inverted, "polarity is inverted"),
    (padding_one_more, "first padding position"),
    (padding_one_less, "drops its last real token"),
    (padding_transposed, "transposed"),
    (padding_ignores_max_len, "max_len=7 is ignored"),
    (padding_key_axis, "already has the key axis"),
    (padding_float, "dtype torch.float32"),
    (padding_int, "dtype torch.int32"),
    (stub, "not implemented yet"),
]
COMBINE_MISTAKES = [
    (combine_query_axis, "broadcast along the wrong axis"),
    (combine_both_axes, "broadcast along the wrong axis"),
    (combine_or, "| (or)"),
    (combine_inverted, "polarity is inverted"),
    (combine_inverted_padding, "padding mask is inverted"),
    (combine_no_padding, "padding mask is missing"),
    (combine_no_causal, "causal mask is missing"),
    (combine_float, "dtype torch.float32"),
    (combine_heads, "(B, 1, L, L)"),
    (combine_broadcastable, "not combined with the causal mask"),
    (combine_wrong_broadcast_raises, "RuntimeError"),
    (stub, "not implemented yet"),
]


def _assert_named(result, function, named):
    assert not result
    text = str(result)
    assert text.startswith(f"FAIL check_masks ({function})"), text
    assert named in text, text
    assert "How to fix:" in text, text


def test_wrong_axis_hint_gives_the_right_broadcast():
    result = check_masks(causal_tril, padding_compare, combine_query_axis)
    assert "(B, L, 1)" in result.summary and "padding[:, None, :]" in result.hint


def test_polarity_hint_says_true_means_may_attend():
    for result in (check_masks(causal_inverted, padding_compare, combine_index),
                   check_masks(causal_tril, padding_inverted, combine_index)):
        assert "True = ignore" in result.summary and "True means *may attend*" in result.hint


def test_float_mask_with_a_wrong_diagonal_names_both():
    result = check_masks(causal_float_strict, padding_compare, combine_index)
    assert "diagonal is missing" in result.summary and "also: mask has dtype torch.float32" in str(result), str(result)


def test_the_stub_is_not_implemented_yet():
    result = check_masks(stub, stub, stub)
    assert not result and "not implemented yet" in str(result)
    assert "make_causal_mask" in str(result)


CHECK = "check_masks"

# == the learner table (checks_learners.py) ==========================================================

REFERENCES[CHECK] = CORRECT[0]
for _fns in CORRECT[1:]:
    add_fns(CHECK, _fns)
for _fn, _named in CAUSAL_MISTAKES:
    add_fns(CHECK, (_fn, padding_compare, combine_index), _named, f"causal-{_fn.__name__}")
for _fn, _named in PADDING_MISTAKES:
    add_fns(CHECK, (causal_tril, _fn, combine_index), _named, f"padding-{_fn.__name__}")
for _fn, _named in COMBINE_MISTAKES:
    add_fns(CHECK, (causal_tril, padding_compare, _fn), _named, f"combine-{_fn.__name__}")


# == part 2: packed documents ===========================================================================

DOCUMENTS = "check_document_causal_mask"


def documents_reference(doc_ids):
    L = doc_ids.size(-1)
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril()


REFERENCES[DOCUMENTS] = (documents_reference,)


@add(DOCUMENTS)
def documents_with_loops(doc_ids):
    B, L = doc_ids.shape
    mask = torch.zeros(B, L, L, dtype=torch.bool)
    for b in range(B):
        for i in range(L):
            for j in range(i + 1):
                mask[b, i, j] = bool(doc_ids[b, i] == doc_ids[b, j])
    return mask


@add(DOCUMENTS)
def documents_from_block_diagonals(doc_ids):
    # One lower triangle per document, laid along the diagonal of each row.
    masks = []
    for row in doc_ids:
        sizes = torch.unique_consecutive(row, return_counts=True)[1].tolist()
        masks.append(torch.block_diag(*[torch.ones(n, n, dtype=torch.bool).tril() for n in sizes]))
    return torch.stack(masks)


@add(DOCUMENTS)
def documents_with_library_mask(doc_ids):
    return causal_mask(doc_ids.size(1)) & doc_ids.unsqueeze(2).eq(doc_ids.unsqueeze(1))


def _documents(same=True, causal=True, diagonal=True, first_row=False, transposed=False):
    def document_causal_mask(doc_ids):
        L = doc_ids.size(-1)
        ids = doc_ids[:1] if first_row else doc_ids
        mask = (ids[:, :, None] == ids[:, None, :]) if same else torch.ones(ids.size(0), L, L, dtype=torch.bool)
        if causal:
            mask = mask & torch.ones(L, L, dtype=torch.bool).tril(0 if diagonal else -1)
        mask = mask.expand(doc_ids.size(0), L, L)
        return mask.transpose(-2, -1) if transposed else mask

    return document_causal_mask


DOCUMENT_WRONG = [
    (_documents(same=False), "the condition 'same document: doc id of query i == doc id of key j' is left out"),
    (_documents(causal=False), "the mask is not causal"),
    (_documents(diagonal=False), "the diagonal is missing"),
    (_documents(transposed=True), "triu where the step takes tril"),
    (_documents(first_row=True), "every row of the batch gets the first row's mask"),
    (lambda doc_ids: ~documents_reference(doc_ids), "inverted"),
    (lambda doc_ids: documents_reference(doc_ids).float(), "expected torch.bool"),
    (lambda doc_ids: torch.zeros(doc_ids.shape + doc_ids.shape[-1:]).masked_fill(~documents_reference(doc_ids),
                                                                                  float("-inf")), "additive float mask"),
    (lambda doc_ids: doc_ids == doc_ids, "one row per batch"),
]
for _fn, _named in DOCUMENT_WRONG:
    add_fns(DOCUMENTS, (_fn,), _named, f"documents-{_named}")
