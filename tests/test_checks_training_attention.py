"""Exercise 5's check: correct shift tasks and patterns written differently pass; each mistake is named."""

import random

import numpy as np
import torch
from checks_learners import REFERENCES, add_fns

from lessons_src.checks.training_attention import check_shift_attention

# -- correct answers, written differently -------------------------------------------------------------


def task_roll(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)  # (B, L, D)
    target = x.roll(shift, dims=1)
    return target, x, x, target


def task_slices(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    s = shift % seq_len
    target = torch.cat([x[:, seq_len - s :], x[:, : seq_len - s]], dim=1)  # the last s positions come first
    return target, x, x, target


def task_gather(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model, generator=generator, device=device)
    source = (torch.arange(seq_len, device=x.device) - shift) % seq_len  # target i comes from x position source[i]
    query = x[:, source]
    return query, x, x.clone(), query.clone()


def task_kwargs(batch_size, seq_len, d_model, *, shift=1, **kwargs):
    x = torch.randn(batch_size, seq_len, d_model, generator=kwargs.get("generator"))
    return x.roll(shift, 1), x, x, x.roll(shift, 1)


def pattern_index(seq_len, shift):
    rows = torch.arange(seq_len)
    pattern = torch.zeros(seq_len, seq_len)
    pattern[rows, (rows - shift) % seq_len] = 1.0
    return pattern


def pattern_eye_roll(seq_len, shift):
    return torch.eye(seq_len).roll(shift, dims=0)  # row i is eye's row (i - shift): a 1 at column i - shift


def pattern_bool(seq_len, shift):
    rows, cols = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return cols == (rows - shift) % seq_len  # bool is fine


def pattern_numpy_int(seq_len, shift):
    return np.roll(np.eye(seq_len, dtype=int), -shift, axis=1)  # column j gets eye's column j + shift


def pattern_lists(seq_len, shift):
    return [[1 if j == (i - shift) % seq_len else 0 for j in range(seq_len)] for i in range(seq_len)]


CORRECT_TASKS = [task_roll, task_slices, task_gather, task_kwargs]
CORRECT_PATTERNS = [pattern_index, pattern_eye_roll, pattern_bool, pattern_numpy_int, pattern_lists]


def test_library_task_passes():
    from lessons_src.data import shift_batch

    assert check_shift_attention(shift_batch, pattern_index)


def test_pass_reports_the_learned_pattern_and_is_deterministic():
    first, second = (str(check_shift_attention(task_roll, pattern_index)) for _ in range(2))
    assert first == second
    assert "learned query → key: 0→6, 1→7, 2→0" in first  # L = 8, shift 2: key (i - 2) mod 8


def test_the_check_leaves_the_callers_random_state_and_threads_alone():
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    threads = torch.get_num_threads()
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    assert check_shift_attention(task_roll, pattern_index)
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected
    assert torch.get_num_threads() == threads


# -- known mistakes in the task, each named ----------------------------------------------------------


def _x(batch_size, seq_len, d_model, generator):
    return torch.randn(batch_size, seq_len, d_model, generator=generator)


def task_not_shifted(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    return x, x, x, x


def task_wrong_way(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    target = x.roll(-shift, dims=1)
    return target, x, x, target


def task_swapped(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    shifted = x.roll(shift, dims=1)
    return x, shifted, shifted, shifted  # query = x, key = value = shifted x


def task_swapped_key_only(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    shifted = x.roll(shift, dims=1)
    return x, shifted, x, shifted


def task_query_unshifted(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    return x, x, x, x.roll(shift, dims=1)


def task_reversed(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    return x.flip(1), x, x, x.flip(1)


def task_value_shifted(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    target = x.roll(shift, dims=1)
    return target, x, target, target


def task_rolls_features(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    target = x.roll(shift, dims=-1)
    return target, x, x, target


def task_no_wrap(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    target = torch.zeros_like(x)
    target[:, shift:] = x[:, : seq_len - shift]  # zero padding instead of wrapping around
    return target, x, x, target


def task_in_range_only(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    target = torch.cat([x[:, seq_len - shift :], x[:, : seq_len - shift]], dim=1)  # needs 0 <= shift < L
    return target, x, x, target


def task_ignores_generator(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.randn(batch_size, seq_len, d_model)
    return x.roll(shift, 1), x, x, x.roll(shift, 1)


def task_uniform(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = torch.rand(batch_size, seq_len, d_model, generator=generator)
    return x.roll(shift, 1), x, x, x.roll(shift, 1)


def task_float64(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator).double()
    return x.roll(shift, 1), x, x, x.roll(shift, 1)


def task_three_tensors(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    return x.roll(shift, 1), x, x


def task_sliced(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    return x[:, shift:], x, x, x[:, shift:]


def task_other_mix(batch_size, seq_len, d_model, shift, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    target = x[:, torch.arange(seq_len).flip(0).roll(1)]
    return target, x, x, target


def task_no_shift_parameter(batch_size, seq_len, d_model, generator=None, device=None):
    x = _x(batch_size, seq_len, d_model, generator)
    return x.roll(1, 1), x, x, x.roll(1, 1)


def task_raises(batch_size, seq_len, d_model, shift, generator=None, device=None):
    raise RuntimeError("boom")


def stub(*args, **kwargs):
    raise NotImplementedError


TASK_MISTAKES = [
    (task_not_shifted, "target is not shifted"),
    (task_wrong_way, "shifted the wrong way"),
    (task_swapped, "query and key roles are swapped"),
    (task_swapped_key_only, "query and key roles are swapped"),
    (task_query_unshifted, "the query is the unshifted input"),
    (task_reversed, "reversed input, not the shifted one"),
    (task_value_shifted, "value differs from key"),
    (task_rolls_features, "rolled along dim 2 (the feature dimension)"),
    (task_no_wrap, "the shift does not wrap around: target positions [0, 1]"),
    (task_in_range_only, "target is not shifted"),  # shift -1 gives back x; the hint says wrap
    (task_ignores_generator, "does not come from the `generator` argument"),
    (task_uniform, "expected standard normal"),
    (task_float64, "expected torch.float32"),
    (task_three_tensors, "expected 4 (query, key, value, target)"),
    (task_sliced, "query has shape (16, 6, 32), expected (16, 8, 32)"),
    (task_other_mix, "not x rolled by shift along L"),
    (task_no_shift_parameter, "cannot be called as shift_task("),
    (task_raises, "RuntimeError: boom"),
    (stub, "shift_task: not implemented yet"),
]


def test_in_range_only_hint_says_wrap_around():
    result = check_shift_attention(task_in_range_only, pattern_index)
    assert "shift=-1, which wraps around to 4" in result.summary and "wrap around" in result.hint


def test_other_mix_lists_the_positions():
    result = check_shift_attention(task_other_mix, pattern_index)
    assert any(d.startswith("target position 0 holds x position") for d in result.details), str(result)


# -- known mistakes in the predicted pattern, each named ---------------------------------------------


def pattern_wrong_sign(seq_len, shift):
    return pattern_index(seq_len, -shift)


def pattern_transposed(seq_len, shift):
    return pattern_index(seq_len, shift).T


def pattern_antidiagonal(seq_len, shift):
    return torch.eye(seq_len).flip(-1)


def pattern_identity(seq_len, shift):
    return torch.eye(seq_len)


def pattern_off_by_one(seq_len, shift):
    return pattern_index(seq_len, shift + 1)


def pattern_off_by_one_other_side(seq_len, shift):
    return pattern_index(seq_len, shift - 1)


def pattern_no_wrap(seq_len, shift):
    return torch.diag(torch.ones(seq_len - shift), -shift) if 0 <= shift < seq_len else torch.zeros(seq_len, seq_len)


def pattern_two_per_row(seq_len, shift):
    return pattern_index(seq_len, shift) + pattern_index(seq_len, shift + 3)


def pattern_soft(seq_len, shift):
    return 0.9 * pattern_index(seq_len, shift) + 0.1 / seq_len


def pattern_columns(seq_len, shift):
    return (torch.arange(seq_len) - shift) % seq_len


def pattern_no_modulo(seq_len, shift):
    rows = torch.arange(seq_len)
    pattern = torch.zeros(seq_len, seq_len)
    pattern[rows, rows - shift] = 1.0  # negative indices wrap, but a negative shift runs off the end
    return pattern


def pattern_wrong_shape(seq_len, shift):
    return pattern_index(seq_len, shift)[None]


def pattern_none(seq_len, shift):
    return None


def pattern_nan(seq_len, shift):
    return torch.full((seq_len, seq_len), float("nan"))


PATTERN_MISTAKES = [
    (pattern_wrong_sign, "shifted the wrong way (the sign of shift)"),
    (pattern_transposed, "shifted the wrong way (the sign of shift)"),
    (pattern_antidiagonal, "reversal pattern (the anti-diagonal"),
    (pattern_identity, "copy pattern (the main diagonal)"),
    (pattern_off_by_one, "off by one"),
    (pattern_off_by_one_other_side, "off by one"),
    (pattern_no_wrap, "does not wrap around"),
    (pattern_two_per_row, "not one 1 per query row, so the rows do not sum to 1"),
    (pattern_soft, "entries other than 0 and 1"),
    (pattern_columns, "one number per row"),
    (pattern_no_modulo, "IndexError"),
    (pattern_wrong_shape, "has shape (1, 8, 8), expected (8, 8)"),
    (pattern_none, "returned None"),
    (pattern_nan, "NaN or inf"),
    (stub, "expected_pattern: not implemented yet"),
]


def test_rows_that_are_off_are_listed_with_what_the_layer_learned():
    result = check_shift_attention(task_roll, pattern_off_by_one)
    assert "8 of 8 query rows are off" in result.summary
    assert "row (query) 0: you predicted key 5, the trained layer attends to key 6" in result.details[0]


def test_only_the_rows_that_are_off_are_listed():
    def one_row_wrong(seq_len, shift):
        pattern = pattern_index(seq_len, shift)
        if seq_len == 8:
            pattern[3] = torch.eye(seq_len)[0]  # row 3 should look at key 1
        return pattern

    result = check_shift_attention(task_roll, one_row_wrong)
    assert not result and "1 of 8 query rows are off" in result.summary
    assert result.details == [result.details[0]] and "row (query) 3: you predicted key 0" in result.details[0]


def test_index_error_on_an_edge_case_hints_at_modulo():
    result = check_shift_attention(task_roll, pattern_no_modulo)
    assert "shift=-1" in result.summary and "% seq_len" in result.hint


def test_edge_case_mistakes_name_the_case():
    def copy_is_wrong(seq_len, shift):
        return pattern_index(seq_len, shift) if shift % seq_len else torch.eye(seq_len).flip(-1)

    result = check_shift_attention(task_roll, copy_is_wrong)
    assert not result and "case 2/5 (seq_len=5, shift=0 (a copy))" in result.summary


# -- plumbing ----------------------------------------------------------------------------------------


def test_both_stubs_say_not_implemented():
    result = check_shift_attention(stub, stub)
    assert not result and "not implemented yet" in str(result)


CHECK = "check_shift_attention"

# == the learner table (checks_learners.py) ==========================================================

REFERENCES[CHECK] = (task_roll, pattern_index)
for _task in CORRECT_TASKS[1:]:
    add_fns(CHECK, (_task, pattern_index))
for _pattern in CORRECT_PATTERNS[1:]:
    add_fns(CHECK, (task_roll, _pattern))
for _fn, _named in TASK_MISTAKES:
    add_fns(CHECK, (_fn, pattern_index), _named, f"task-{_fn.__name__}")
for _fn, _named in PATTERN_MISTAKES:
    add_fns(CHECK, (task_roll, _fn), _named, f"pattern-{_fn.__name__}")
