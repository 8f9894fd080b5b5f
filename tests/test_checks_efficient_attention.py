"""The sliding-window mask check (exercise 9): correct masks written differently pass; each mistake is named."""


import numpy as np
import torch
from checks_learners import REFERENCES, add, add_fns

from lessons_src.checks.efficient_attention import check_sliding_window_mask
from lessons_src.masks import sliding_window_mask

# -- correct implementations, written differently --------------------------------------------------


def with_offsets(seq_len, window):
    positions = torch.arange(seq_len)
    offset = positions[:, None] - positions[None, :]  # i - j
    return (offset >= 0) & (offset < window)


def with_tril(seq_len, window):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.tril() & ~ones.tril(diagonal=-window)


def with_loops(seq_len, window):
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        mask[i, max(0, i - window + 1) : i + 1] = True
    return mask


def with_numpy(seq_len, window):
    i, j = np.indices((seq_len, seq_len))
    return torch.from_numpy((j <= i) & (j > i - window))


def with_triu_and_float_then_bool(seq_len, window):
    ones = torch.ones(seq_len, seq_len)
    return (torch.triu(ones, diagonal=-(window - 1)) * torch.tril(ones)).bool()


# -- known mistakes, each named ----------------------------------------------------------------------


def _offset(seq_len):
    positions = torch.arange(seq_len)
    return positions[:, None] - positions[None, :]


def window_plus_one(seq_len, window):
    offset = _offset(seq_len)
    return (offset >= 0) & (offset <= window)


def window_minus_one(seq_len, window):
    offset = _offset(seq_len)
    return (offset >= 0) & (offset < window - 1)


def symmetric(seq_len, window):
    return _offset(seq_len).abs() < window


def future_only_a_little(seq_len, window):
    offset = _offset(seq_len)
    return (offset >= -1) & (offset < window)


def inverted(seq_len, window):
    return ~with_offsets(seq_len, window)


def no_diagonal(seq_len, window):
    offset = _offset(seq_len)
    return (offset > 0) & (offset < window)


def strictly_past(seq_len, window):
    offset = _offset(seq_len)
    return (offset > 0) & (offset <= window)


def first_row_empty(seq_len, window):
    mask = with_offsets(seq_len, window).clone()
    mask[0, 0] = False
    return mask


def transposed(seq_len, window):
    return with_offsets(seq_len, window).T


def causal_only(seq_len, window):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()


def float_mask(seq_len, window):
    return with_offsets(seq_len, window).float()


def int_mask(seq_len, window):
    return with_offsets(seq_len, window).long()


def additive_mask(seq_len, window):
    return torch.zeros(seq_len, seq_len).masked_fill(~with_offsets(seq_len, window), float("-inf"))


def additive_minus_1e9(seq_len, window):
    return torch.zeros(seq_len, seq_len).masked_fill(~with_offsets(seq_len, window), -1e9)


def float_and_off_by_one(seq_len, window):
    return window_plus_one(seq_len, window).float()


def something_else(seq_len, window):
    mask = with_offsets(seq_len, window).clone()
    mask[-1, -2] = ~mask[-1, -2]
    return mask


def stub(seq_len, window):
    raise NotImplementedError


def raises(seq_len, window):
    raise IndexError("boom")


def returns_list(seq_len, window):
    return with_offsets(seq_len, window).tolist()


def batched(seq_len, window):
    return with_offsets(seq_len, window)[None]


def flat(seq_len, window):
    return with_offsets(seq_len, window).flatten()


MISTAKES = [
    (window_plus_one, "window + 1 keys"),
    (window_minus_one, "window - 1 keys"),
    (symmetric, "not causal"),
    (future_only_a_little, "not causal"),
    (inverted, "inverted"),
    (no_diagonal, "diagonal is missing"),
    (strictly_past, "diagonal is missing"),
    (first_row_empty, "diagonal is missing"),
    (transposed, "transposed"),
    (causal_only, "window is ignored"),
    (float_mask, "dtype is torch.float32"),
    (int_mask, "dtype is torch.int64"),
    (additive_mask, "additive float mask"),
    (additive_minus_1e9, "additive float mask"),
    (float_and_off_by_one, "window + 1 keys"),
    (something_else, "differs from the reference"),
    (stub, "not implemented yet"),
    (raises, "IndexError: boom"),
    (returns_list, "returned a list"),
    (batched, "shape (1, 6, 6)"),
    (flat, "shape (36,)"),
]


def test_mismatch_shows_the_first_wrong_row():
    result = check_sliding_window_mask(window_plus_one)
    assert "first difference at mask[3, 0]: expected False, got True" in str(result), str(result)


def test_wrong_dtype_is_also_mentioned_when_the_pattern_is_wrong():
    result = check_sliding_window_mask(float_and_off_by_one)
    assert "also: mask has dtype torch.float32, expected a bool tensor" in str(result), str(result)


CHECK = "check_sliding_window_mask"

# == the learner table (checks_learners.py) ==========================================================

REFERENCES[CHECK] = (with_offsets,)
for _fn in (with_tril, with_loops, with_numpy, with_triu_and_float_then_bool, sliding_window_mask):
    add_fns(CHECK, (_fn,))
for _fn, _named in MISTAKES:
    add_fns(CHECK, (_fn,), _named)


# == part 2: a sliding window with attention sinks ====================================================

SINKS = "check_sink_window_mask"


def sinks_reference(seq_len, window, num_sinks):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return (j <= i) & ((i - j < window) | (j < num_sinks))


REFERENCES[SINKS] = (sinks_reference,)


@add(SINKS)
def sinks_from_the_window_mask(seq_len, window, num_sinks):
    # The chapter's causal window, plus the sink columns cut to the causal triangle.
    sink_columns = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    sink_columns[:, :num_sinks] = True
    return sliding_window_mask(seq_len, window) | (sink_columns & torch.ones(seq_len, seq_len, dtype=torch.bool).tril())


@add(SINKS)
def sinks_with_loops(seq_len, window, num_sinks):
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        for j in range(i + 1):
            mask[i, j] = i - j < window or j < num_sinks
    return mask


def _sink_variant(edge=lambda off, w: off < w, sink_rows=False, causal_sinks=True, sinks=True, extra=0, causal=True):
    def sink_window_mask(seq_len, window, num_sinks):
        i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
        band = edge(i - j, window) & ((i - j >= 0) if causal else (i - j > -window))
        if not sinks:
            return band
        sink = (i < num_sinks + extra) if sink_rows else (j < num_sinks + extra)
        return band | ((sink & (j <= i)) if causal_sinks else sink.expand(seq_len, seq_len))

    return sink_window_mask


SINK_WRONG = [
    (_sink_variant(sinks=False), "at step 'in the window or a sink key': it is left out"),
    (_sink_variant(causal_sinks=False), "the sinks break causality"),
    (_sink_variant(sink_rows=True, causal_sinks=False), "the sinks are rows, not columns"),
    (_sink_variant(edge=lambda off, w: off <= w), "window + 1 recent keys"),
    (_sink_variant(edge=lambda off, w: off < w - 1), "window - 1 recent keys"),
    (_sink_variant(extra=1), "num_sinks + 1 sink keys"),
    (_sink_variant(extra=-1), "num_sinks - 1 of them"),
    (_sink_variant(causal=False), "two-sided"),
    (lambda seq_len, window, num_sinks: ~sinks_reference(seq_len, window, num_sinks), "inverted"),
    (lambda seq_len, window, num_sinks: sinks_reference(seq_len, window, num_sinks).float(), "expected torch.bool"),
    (lambda seq_len, window, num_sinks: torch.zeros(seq_len, seq_len).masked_fill(
        ~sinks_reference(seq_len, window, num_sinks), float("-inf")), "additive float mask"),
]
for _fn, _named in SINK_WRONG:
    add_fns(SINKS, (_fn,), _named, f"sinks-{_named}")
