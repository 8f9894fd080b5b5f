"""Check for exercise 5 (chapter "Training attention"): a shift task, and its attention predicted.

The learner writes two functions:

- ``shift_task(batch_size, seq_len, d_model, shift, generator=None, device=None)`` returns
  ``(query, key, value, target)``, each ``(B, L, D)``: key = value = x (standard normal),
  query = target = x rolled by ``shift`` along L, so ``target[:, i] = x[:, (i - shift) mod L]``;
- ``expected_pattern(seq_len, shift)`` returns the ``(L, L)`` 0/1 matrix with one 1 per query
  row, at the key the trained layer should attend to: column ``(i - shift) mod L``.

:func:`check_shift_attention` first checks the task on a few cases, then trains a small
one-head attention layer on the learner's own task (CPU, fixed seed: deterministic, well under
a second) and compares the learned attention with the learner's predicted pattern row by row,
then checks the pattern on edge cases (copy, negative shift, shift >= L, L = 1). Both functions are
judged by the framework's ``judge`` (type, dtype, shape, values), and the known mistakes are two
tables, :data:`TASK_MISTAKES` (predicates on the returned batch, read against the learner's own x)
and :data:`PATTERN_MISTAKES`; rows (queries) that are off are listed.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..device import one_cpu_thread
from ..multihead import MultiHeadAttention
from ..training import diagonal_mass, train_attention
from ._framework import Case, Mistake, Session, judge
from ._result import CheckResult, error_hint, finish, is_device_error, learner_error
from ._steps import SEARCH_SECONDS, Found, search, step

__all__ = ["check_shift_attention", "TASK_MISTAKES", "PATTERN_MISTAKES"]

NAME = "check_shift_attention"
SIGNATURE = "shift_task(batch_size, seq_len, d_model, shift, generator=None, device=None)"

#: The trained case: a one-head layer on L = 8, shift 2 learns its diagonal to ~0.99 in 150 steps
#: (measured over 8 seeds: 0.987-0.990, every row's largest weight on the right key).
TRAIN_SHIFT = 2
TRAIN = {"steps": 150, "batch_size": 16, "seq_len": 8, "d_model": 32, "lr": 1e-2, "step_size": 100, "gamma": 0.1,
         "seed": 0}
MIN_MASS = 0.9
EVAL_SEED, EVAL_BATCH = 1234, 256

#: (batch_size, seq_len, d_model, shift): the first is large enough to test "standard normal".
TASK_CASES = [(16, 8, 32, 2), (3, 5, 4, -1), (2, 5, 4, 7), (2, 4, 3, 0)]
#: (seq_len, shift) checked without training, after the trained case (TRAIN seq_len, TRAIN_SHIFT).
PATTERN_CASES = [(5, 0), (6, -1), (5, 7), (1, 3)]


def _reference_pattern(seq_len: int, shift: int) -> Tensor:
    """The ideal attention of the shift task: ``(L, L)``, 1 at ``[i, (i - shift) % L]``, else 0."""
    rows = torch.arange(seq_len)
    pattern = torch.zeros(seq_len, seq_len)
    pattern[rows, (rows - shift) % seq_len] = 1.0
    return pattern


def _pattern_steps(seq_len: int, shift: int) -> Tensor:
    """The ideal pattern step by step (``_steps.py`` searches small changes to each); equal to
    :func:`_reference_pattern`."""
    rows = step("the query positions i", torch.arange, seq_len)
    back = step("the key query i reads: i - shift", torch.sub, rows, shift, axes=("query",))
    column = step("wrapped around: (i - shift) mod seq_len", torch.remainder, back, seq_len, axes=("query",))
    return step("a 1 in row i at that key, 0 elsewhere", F.one_hot, column, seq_len, axes=("query",)).float()


def _case_text(seq_len: int, shift: int) -> str:
    wraps = f", which wraps around to {shift % seq_len}" if not 0 <= shift < seq_len else ""
    kind = " (a copy)" if shift % seq_len == 0 else ""
    return f"seq_len={seq_len}, shift={shift}{wraps}{kind}"


# -- the task ---------------------------------------------------------------------------------------
#
# The learner draws x themselves (from the generator), so the expected batch is built from the
# learner's own key when it is a usable (B, L, D) tensor: (roll(x), x, x, roll(x)). The mistakes
# below are predicates on the returned (query, key, value, target), tried in order by ``judge``.


def _source_positions(target: Tensor, x: Tensor) -> list[int | None]:
    """For each target position i, the position j with ``target[:, i] == x[:, j]`` (None if none)."""
    found: list[int | None] = []
    for i in range(target.size(1)):
        match = [j for j in range(x.size(1)) if torch.equal(target[:, i], x[:, j])]
        found.append(match[0] if match else None)
    return found


def _batch(got: object) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The learner's four tensors (the predicates run only on a well-formed batch; anything else raises)."""
    query, key, value, target = got
    assert all(isinstance(t, Tensor) and t.shape == key.shape for t in (query, value, target))
    return query, key, value, target


def _roll(case: Case, x: Tensor, sign: int = 1, dims: int = 1) -> Tensor:
    return torch.roll(x, sign * case.info["shift"], dims=dims)


def _moves(case: Case) -> bool:
    """The case's shift moves the vectors (it is not a multiple of L)."""
    return case.info["shift"] % case.info["L"] != 0


def _swapped(case: Case, got: object) -> bool:
    # Without `target == key`, key == roll(query) would also match a task shifted the wrong way.
    query, key, _, target = _batch(got)
    return (_moves(case) and not torch.equal(query, key) and torch.equal(key, _roll(case, query))
            and torch.equal(target, key))


def _rolled_other_dim(case: Case, got: object) -> dict[str, object] | None:
    _, key, _, target = _batch(got)
    for dim, axis in ((0, "batch"), (2, "feature")):
        if key.size(dim) > 1 and _moves(case) and torch.equal(target, _roll(case, key, dims=dim)):
            return {"dim": dim, "axis": axis}
    return None


def _target_right(case: Case, got: object) -> bool:
    _, key, _, target = _batch(got)
    return torch.equal(target, _roll(case, key))


def _no_wrap(case: Case, got: object) -> dict[str, object] | None:
    _, key, _, target = _batch(got)
    shift, seq_len = case.info["shift"], case.info["L"]
    expected = [(i - shift) % seq_len for i in range(seq_len)]
    found = _source_positions(target, key)
    inside = [i for i in range(seq_len) if 0 <= i - shift < seq_len]  # positions that need no wrap-around
    outside = [i for i in range(seq_len) if i not in inside]
    if not (_moves(case) and inside and all(found[i] == expected[i] for i in inside)
            and any(found[i] != expected[i] for i in outside)):
        return None
    return {"outside": outside, "sources": [expected[i] for i in outside]}


_ROLE = ("key = value = x, the unshifted input (what can be looked up and copied); query = target = "
         "x.roll(shift, dims=1), so that query i is the vector stored at key (i - shift) mod L.")

#: Tried in order on a batch of the right types and shapes that differs from (roll(x), x, x, roll(x)).
TASK_MISTAKES = [
    Mistake("the query and key roles are swapped: your key is the shifted sequence", _ROLE, looks_like=_swapped),
    Mistake("value differs from key",
            "both must be the input x itself: `return query, x, x, target`. The layer copies values, so they must "
            "hold the unshifted vectors that the queries match.",
            looks_like=lambda c, g: not torch.equal(_batch(g)[2], _batch(g)[1])),
    Mistake("the target is not shifted: it equals the input x (a copy task)",
            "shift it along the sequence, `x.roll(shift, dims=1)`, and use it as the query too.",
            looks_like=lambda c, g: _moves(c) and torch.equal(_batch(g)[3], _batch(g)[1])),
    Mistake("the sequence is shifted the wrong way (target[:, i] = x[:, (i + shift) mod L])",
            "the target at position i must be x[:, (i - shift) mod L]; check `x.roll(shift, dims=1)` against that "
            "on position 0 (`x.roll(-shift, dims=1)` shifts the other way).",
            looks_like=lambda c, g: _moves(c) and torch.equal(_batch(g)[3], _roll(c, _batch(g)[1], -1))),
    Mistake("the target is the reversed input, not the shifted one",
            "this exercise shifts instead of reversing: each vector moves `shift` places along L, wrapping around.",
            looks_like=lambda c, g: torch.equal(_batch(g)[3], _batch(g)[1].flip(1))),
    Mistake("the target is rolled along dim {dim} (the {axis} dimension), not along L",
            "roll along the sequence dimension, dims=1 of (B, L, D).", looks_like=_rolled_other_dim),
    Mistake("the target is right but the query is the unshifted input",
            "the query must equal the target (`query = target`): the query at position i has to be the vector the "
            "output should copy, so that it matches key (i - shift) mod L.",
            looks_like=lambda c, g: _target_right(c, g) and torch.equal(_batch(g)[0], _batch(g)[1])),
    Mistake("the target is right but the query differs from it",
            "return the shifted sequence twice: `return target, x, x, target`.",
            looks_like=lambda c, g: _target_right(c, g) and not torch.equal(_batch(g)[0], _batch(g)[3])),
    Mistake("the shift does not wrap around: target positions {outside} do not hold x positions {sources}",
            "the shift is cyclic: what falls off one end comes back at the other. `x.roll(shift, dims=1)` does that "
            "(padding with zeros or dropping vectors does not).", looks_like=_no_wrap),
    Mistake("the target is not x rolled by shift along L",
            "key = value = x; query = target = `x.roll(shift, dims=1)`, so target[:, i] = x[:, (i - shift) mod L].",
            looks_like=lambda c, g: not _target_right(c, g)),
]

#: Recognised from the function itself, before the first call.
TASK_BEFORE = [
    Mistake(f"shift_task cannot be called as {SIGNATURE}",
            f"define it as `def {SIGNATURE}:` (the check and train_attention pass shift, generator and device by name).",
            looks_like=lambda c, fn: not _binds(fn)),
]


def _binds(fn: Callable[..., object]) -> bool:
    try:
        inspect.signature(fn).bind(1, 2, 3, shift=0, generator=None, device="cpu")
    except TypeError:
        return False
    except ValueError:  # no signature to inspect (a builtin): just call it
        pass
    return True


def _task_case(batch_size: int, seq_len: int, d_model: int, shift: int, seed: int = 0) -> Case:
    """One call of the task, with a fresh CPU generator seeded with ``seed``."""
    return Case(f"B={batch_size}, {_case_text(seq_len, shift)}, d_model={d_model}",
                {"batch_size": batch_size, "seq_len": seq_len, "d_model": d_model},
                {"shift": shift, "generator": torch.Generator().manual_seed(seed), "device": "cpu"},
                info={"shift": shift, "L": seq_len})


def _expected_batch(case: Case, got: object) -> tuple[Tensor, ...]:
    """(roll(x), x, x, roll(x)) for the learner's own x when it is usable, else for a reference x."""
    shape = (case.args["batch_size"], case.args["seq_len"], case.args["d_model"])
    key = got[1] if isinstance(got, (tuple, list)) and len(got) == 4 else None
    if not (isinstance(key, Tensor) and tuple(key.shape) == shape and key.dtype == torch.float32
            and bool(torch.isfinite(key).all())):
        key = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    key = key.detach()
    return _roll(case, key), key, key, _roll(case, key)


def _same_batch(batch: object, reference: object) -> bool:
    return (isinstance(batch, (tuple, list)) and isinstance(reference, (tuple, list)) and len(batch) == len(reference)
            and all(isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape
                    and torch.equal(a.detach(), b.detach()) for a, b in zip(batch, reference, strict=True)))


def _wrap_hint(failure: CheckResult, shift: int, seq_len: int, hint: str) -> None:
    """On a case whose shift is outside 0..L-1, say that the shift wraps around."""
    if not 0 <= shift < seq_len:
        if "raised" in failure.summary and not is_device_error(failure.summary):
            failure.hint = hint
        elif "wrong way" not in failure.summary:
            failure.hint += (" Your function works for 0 <= shift < L but not here: the shift is cyclic, so any integer "
                             "shift must wrap around (`x.roll` and `% seq_len` both do).")


def _check_task(shift_task: Callable[..., object], session: Session) -> CheckResult | None:
    """The task on :data:`TASK_CASES`: judged, then drawn from its generator, then standard normal."""
    if callable(shift_task):
        for mistake in TASK_BEFORE:
            if mistake.looks_like(None, shift_task):
                return session.fail(*mistake.text({}))
    for number, (batch_size, seq_len, d_model, shift) in enumerate(TASK_CASES, start=1):
        case = _task_case(batch_size, seq_len, d_model, shift)
        where = f"shift_task case {number}/{len(TASK_CASES)} ({case.description})"
        batch, failure = _call(session, shift_task, "shift_task", where, case)
        if failure is None:
            failure = judge(session, where, case, batch, _expected_batch(case, batch),
                            ("query", "key", "value", "target"), TASK_MISTAKES, tol=0.0, same_dtype=True)
            if failure is not None and "not x rolled by shift" in failure.summary:
                _, key, _, target = _batch(batch)
                failure.details = [f"target position {i} holds x position {'(none)' if j is None else j}, expected "
                                   f"{(i - shift) % seq_len}" for i, j in enumerate(_source_positions(target, key))
                                   if j != (i - shift) % seq_len][:8]
        if failure is None:  # right on this draw: is the draw the generator's, and standard normal?
            again, failure = _call(session, shift_task, "shift_task", where, case=_task_case(*TASK_CASES[number - 1]))
            other, failure = (None, failure) if failure else _call(session, shift_task, "shift_task", where,
                                                                   _task_case(*TASK_CASES[number - 1], seed=1))
            if failure is None and (not _same_batch(again, batch) or _same_batch(other, batch)):
                failure = session.fail(f"the batch does not come from the `generator` argument ({where})",
                                       "draw x with `torch.randn(batch_size, seq_len, d_model, generator=generator, "
                                       "device=device)`, so one seed gives one batch (training needs that to be "
                                       "reproducible).")
            key = batch[1]
            if failure is None and number == 1 and (abs(key.mean().item()) > 0.1 or abs(key.std().item() - 1) > 0.1):
                failure = session.fail(f"x has mean {key.mean().item():.3f} and standard deviation {key.std().item():.3f}, "
                                       f"expected standard normal (0 and 1) ({where})",
                                       "draw x with `torch.randn` (standard normal), not `torch.rand` (uniform).")
        if failure is not None:
            _wrap_hint(failure, shift, seq_len, "this case's shift is outside 0..L-1: `x.roll(shift, dims=1)` wraps "
                       "around for any integer shift (or reduce it first: `shift % seq_len`).")
            return failure
    return None


def _call(session: Session, fn: Callable[..., object], label: str, where: str, case: Case
          ) -> tuple[object, CheckResult | None]:
    """``fn`` on ``case`` through the check's ``session`` (one time budget for both functions); a stub's
    "not implemented yet" names which of the two functions it is."""
    value, failure = session.call(where, fn, case.args, case.kwargs)
    if failure is not None and failure.summary == "not implemented yet":
        failure.summary = f"{label}: not implemented yet"
    return value, failure


# -- the predicted pattern --------------------------------------------------------------------------


def _no_wrap_pattern(seq_len: int, shift: int) -> Tensor:
    rows = torch.arange(seq_len)
    inside = ((rows - shift >= 0) & (rows - shift < seq_len)).float()[:, None]
    return _reference_pattern(seq_len, shift) * inside


def _well_formed(case: Case, got: object) -> bool:
    """An (L, L) pattern of 0s and 1s."""
    L = case.info["L"]
    return (isinstance(got, Tensor) and tuple(got.shape) == (L, L) and not got.dtype.is_complex
            and bool(((got == 0) | (got == 1)).all()))


def _not_binary(case: Case, got: object) -> dict[str, object] | None:
    L = case.info["L"]
    if not (isinstance(got, Tensor) and tuple(got.shape) == (L, L) and bool(torch.isfinite(got).all())):
        return None
    bad = sorted({int(i) for i in torch.nonzero((got != 0) & (got != 1))[:, 0]})
    return {"rows": bad} if bad else None


def _rows_off(case: Case, got: object) -> dict[str, object] | None:
    if not _well_formed(case, got) or not bool((got.sum(-1) == 1).all()):
        return None
    off = int((got.argmax(-1) != _reference_pattern(case.info["L"], case.info["shift"]).argmax(-1)).sum())
    return {"off": off}


_RIGHT = "row i (query i) needs its 1 in column (i - shift) % seq_len, the key that holds the vector query i carries"
_ALL = lambda case: True  # noqa: E731

#: Tried in order on a pattern that differs from the ideal one (judged as float 0/1 numbers).
PATTERN_MISTAKES = [
    Mistake("one number per row is returned, not the (L, L) matrix",
            "return the whole (L, L) 0/1 matrix: one row per query, one column per key, with the 1 of row i at the "
            "key query i should attend to.",
            looks_like=lambda c, g: isinstance(g, Tensor) and tuple(g.shape) == (c.info["L"],)),
    Mistake("the pattern has entries other than 0 and 1 (in rows {rows})",
            "predict the ideal pattern, not soft weights: a 1 at the key each query should attend to, 0 elsewhere.",
            looks_like=_not_binary),
    Mistake("the diagonal is shifted the wrong way (the sign of shift): your 1 is at column (i + shift) mod L",
            f"{_RIGHT}; (i + shift) is the other direction (also what you get by transposing: rows are queries, "
            "columns are keys).", mistaken=lambda seq_len, shift: _reference_pattern(seq_len, -shift),
            when=lambda c: (-c.info["shift"]) % c.info["L"] != c.info["shift"] % c.info["L"]),
    Mistake("this is the reversal pattern (the anti-diagonal, column L-1-i), not the shift's",
            f"the shift task moves every vector by the same amount: {_RIGHT}.",
            mistaken=lambda seq_len, shift: torch.eye(seq_len).flip(-1), when=lambda c: c.info["L"] > 1),
    Mistake("this is the copy pattern (the main diagonal), as if shift were 0", f"move each row's 1 by the shift: {_RIGHT}.",
            mistaken=lambda seq_len, shift: torch.eye(seq_len), when=lambda c: c.info["shift"] % c.info["L"] != 0),
    Mistake("off by one: every 1 is one column to the left of the right key",
            f"{_RIGHT}; check it by hand on row 0: with shift={{shift}} and L={{L}} the 1 belongs in column {{column0}}.",
            mistaken=lambda seq_len, shift: _reference_pattern(seq_len, shift + 1), when=lambda c: c.info["L"] > 2),
    Mistake("off by one: every 1 is one column to the right of the right key",
            f"{_RIGHT}; check it by hand on row 0: with shift={{shift}} and L={{L}} the 1 belongs in column {{column0}}.",
            mistaken=lambda seq_len, shift: _reference_pattern(seq_len, shift - 1), when=lambda c: c.info["L"] > 2),
    Mistake("the diagonal does not wrap around: some rows have no 1",
            "the shift is cyclic, so the vectors pushed off one end come back at the other: the column is "
            "(i - shift) taken modulo seq_len.", mistaken=_no_wrap_pattern),
    Mistake("not one 1 per query row, so the rows do not sum to 1",
            "each query attends to exactly one key: every row needs exactly one 1 (and each row of attention weights "
            "sums to 1).", looks_like=lambda c, g: _well_formed(c, g) and not bool((g.sum(-1) == 1).all())),
    Mistake("every 1 is {k} columns (cyclically) right of the right key: this is the pattern of shift {wrong}, not "
            "shift={shift} "
            "(a shift written in the code?)", f"{_RIGHT}; use the `shift` argument, whatever its value.",
            looks_like=lambda c, g: _well_formed(c, g) and next(
                ({"k": (k - c.info["shift"]) % c.info["L"], "wrong": k} for k in range(c.info["L"])
                 if k % c.info["L"] != c.info["shift"] % c.info["L"]
                 and torch.equal(g.double(), _reference_pattern(c.info["L"], k).double())), None)),
    Mistake("{off} of {L} query rows are off: their 1 is in the wrong column", f"{_RIGHT}.", looks_like=_rows_off),
]


def _pattern_case(seq_len: int, shift: int) -> Case:
    return Case(_case_text(seq_len, shift), {"seq_len": seq_len, "shift": shift},
                info={"L": seq_len, "shift": shift, "column0": (0 - shift) % seq_len})


def _as_tensor(value: object) -> object:
    """The learner's pattern as a float64 tensor when it is a real tensor, array or nested list of numbers
    (0/1 of any dtype, bool included, is fine); anything else as it came, for the judge to name."""
    try:
        pattern = value.detach().cpu() if isinstance(value, Tensor) else torch.as_tensor(np.asarray(value))
    except Exception:  # None, strings, ragged lists: the judge names the type
        return value
    if value is None or pattern.dtype.is_complex:
        return value if value is None else pattern
    return pattern.to(torch.float64)


def _pattern_searcher(session: Session, expected_pattern: Callable[..., object], cases: list[Case],
                      number: int) -> Callable[[object, object], Found | None]:
    """The step search on pattern case ``number`` (1-based): the cases before it passed; the learner's patterns
    of the ones after it are asked for only when a change needs comparing with them."""

    def learner(case: Case) -> Callable[[], object]:
        def pattern() -> object:
            value, failure = session.call("the step search", expected_pattern, case.args)
            return None if failure is not None else _as_tensor(value)
        return pattern

    def searched(got: object, expected: object) -> Found | None:
        others = [(c, _reference_pattern(**c.args)) for c in cases[:number - 1]]
        others += [(c, learner(c)) for c in cases[number:]]
        return search(_pattern_steps, cases[number - 1], got, expected, 0.0, others, SEARCH_SECONDS * session.slowness)

    return searched


def _judge_pattern(session: Session, expected_pattern: Callable[..., object], case: Case, where: str,
                   learned: Tensor | None = None,
                   steps: Callable[[object, object], Found | None] | None = None) -> CheckResult | None:
    """Call ``expected_pattern`` on ``case`` and judge it; rows that are off are listed (with what the layer
    learned, on the trained case). ``steps``: the search over :func:`_pattern_steps`."""
    value, failure = _call(session, expected_pattern, "expected_pattern", where, case)
    if failure is None:
        pattern = _as_tensor(value)
        expected = _reference_pattern(case.info["L"], case.info["shift"]).double()
        failure = judge(session, where, case, pattern, expected, ("the pattern",), PATTERN_MISTAKES, tol=0.0,
                        steps=steps)
        if failure is not None and _well_formed(case, pattern) and bool((pattern.sum(-1) == 1).all()):
            predicted, correct = pattern.argmax(-1).tolist(), expected.argmax(-1).tolist()
            failure.details = []
            for row, (p, c) in enumerate(zip(predicted, correct, strict=True)):
                if p != c and learned is None:
                    failure.details.append(f"row (query) {row}: you predicted key {p}, the right key is {c}")
                elif p != c:
                    j = int(learned[row].argmax())
                    failure.details.append(f"row (query) {row}: you predicted key {p}, the trained layer attends to "
                                           f"key {j} (weight {learned[row, j]:.2f})")
            off = len(failure.details)
            if "query rows" not in failure.summary:
                failure.summary = failure.summary.replace(f" ({where})",
                                                          f" ({off} of {case.info['L']} query rows are off) ({where})")
            failure.details = failure.details[:8]
    if failure is not None:
        _wrap_hint(failure, case.info["shift"], case.info["L"], "this case's shift is outside 0..L-1: take the column "
                   "`(i - shift) % seq_len`, which is always a valid index, so that any integer shift wraps around.")
    return failure


# -- training -----------------------------------------------------------------------------------------


def _train_on(shift_task: Callable[..., object], session: Session) -> Tensor:
    """Train a one-head layer on the learner's task; return its (L, L) attention on a fresh batch.

    Runs on the CPU, on one thread, with a fixed seed (deterministic); the caller's random states
    and thread count are restored. The task's tensors are brought to the CPU, like every result the
    checks judge (``receive``), so a task that makes them on the GPU trains too.
    """

    # Two calls of the learner's task, not one per step: every training batch is a slice of one
    # batch of steps * batch_size sequences (fresh noise throughout), made up front.
    steps, size = TRAIN["steps"], TRAIN["batch_size"]

    def learner_task(batch_size: int, seq_len: int, d_model: int, generator: torch.Generator) -> tuple:
        batch, failure = session.call("training", shift_task, [batch_size, seq_len, d_model],
                                      {"shift": TRAIN_SHIFT, "generator": generator, "device": "cpu"})
        if failure is not None:  # reported by the caller, like any error of the task during training
            raise ValueError(failure.summary)
        return tuple(batch)

    pool = learner_task(steps * size, TRAIN["seq_len"], TRAIN["d_model"], torch.Generator().manual_seed(TRAIN["seed"]))
    served = iter(range(steps))

    def task(batch_size: int, seq_len: int, d_model: int, generator: object = None, device: object = None) -> tuple:
        i = next(served)
        return tuple(t[i * size:(i + 1) * size] for t in pool)

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
              torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
    # One thread: as fast as two for matrices this small, it cannot stall on a busy machine,
    # and it fixes the order of every sum.
    with one_cpu_thread():
        try:
            result = train_attention(lambda: MultiHeadAttention(TRAIN["d_model"], 1), task=task, device="cpu",
                                     progress=False, **TRAIN)
            model = result.model.eval()
            generator = torch.Generator().manual_seed(EVAL_SEED)
            query, key, value, _ = learner_task(EVAL_BATCH, TRAIN["seq_len"], TRAIN["d_model"], generator)
            with torch.no_grad():
                _, weights = model(query, key, value)  # (B, 1, L, L)
        finally:
            random.setstate(states[0])
            np.random.set_state(states[1])
            torch.set_rng_state(states[2])
            if states[3] is not None:
                torch.cuda.set_rng_state_all(states[3])
    return weights.mean(dim=(0, 1))  # (L, L): averaged over the batch and the one head


def check_shift_attention(shift_task: Callable[..., object], expected_pattern: Callable[..., object]) -> CheckResult:
    """Check exercise 5: the learner's shift task, and their prediction of the attention it trains.

    ``shift_task(batch_size, seq_len, d_model, shift, generator=None, device=None)`` must return
    ``(query, key, value, target)`` with key = value = x and query = target = x rolled by
    ``shift`` along L; ``expected_pattern(seq_len, shift)`` the ``(L, L)`` 0/1 matrix with a 1 at
    ``[i, (i - shift) % L]``. The check tests the task on 4 cases, trains a one-head layer on it
    for 150 steps (CPU, seed 0), compares the learned attention with the predicted pattern row by
    row, then tests the pattern on 4 more cases. Chapter "Training attention".
    """
    session = Session(NAME)  # one time budget for all the calls of both functions
    failure = _check_task(shift_task, session)
    if failure is not None:
        return finish(failure)
    seq_len = TRAIN["seq_len"]
    cases = _pattern_cases()
    where = f"expected_pattern case 1/{len(cases)} ({cases[0].description}, the trained case)"
    value, failure = _call(session, expected_pattern, "expected_pattern", where, cases[0])
    if failure is not None:  # a stub, a crash or a hang: said before the training is spent on it
        return finish(failure)

    try:
        learned = _train_on(shift_task, session)  # (L, L)
    except Exception as exc:  # the learner's task runs inside the training loop: report, never raise
        return finish(CheckResult(NAME, False, f"training on your shift_task failed: {learner_error(exc)}",
                                  error_hint(exc, "your task passed its checks on small batches; make sure it works "
                                             "for any batch_size, seq_len and d_model, on the device it is given.")))
    reference = _reference_pattern(seq_len, TRAIN_SHIFT)
    reference_mass = diagonal_mass(learned, -TRAIN_SHIFT)
    if reference_mass < MIN_MASS or not torch.equal(learned.argmax(-1), reference.argmax(-1)):
        # Not expected for a task that passed the checks above (measured: 0.99 on every seed tried).
        return finish(CheckResult(
            NAME, False, f"the layer trained on your shift_task put only {reference_mass:.2f} of its attention on "
            f"the shift's diagonal (expected at least {MIN_MASS})",
            "your task passed its checks, so this is unexpected: make sure x is fresh standard normal noise in "
            "every batch (`torch.randn(..., generator=generator)`), and report it if it persists."))
    for number, case in enumerate(cases, start=1):
        where = f"expected_pattern case {number}/{len(cases)} ({case.description}{', the trained case' if number == 1 else ''})"
        failure = _judge_pattern(session, expected_pattern, case, where, learned if number == 1 else None,
                                 _pattern_searcher(session, expected_pattern, cases, number))
        if failure is not None:
            return finish(failure)

    learned_keys = learned.argmax(-1).tolist()
    mapping = ", ".join(f"{i}→{j}" for i, j in enumerate(learned_keys))
    return finish(CheckResult(
        NAME, True,
        f"your shift_task matches the definition on {len(TASK_CASES)} cases; a one-head layer trained on it for "
        f"{TRAIN['steps']} steps (L={seq_len}, shift={TRAIN_SHIFT}) put {diagonal_mass(learned, -TRAIN_SHIFT):.3f} "
        f"of its attention on your predicted pattern, every query row agreeing; your expected_pattern matches "
        f"on all {len(cases)} cases",
        details=[f"learned query → key: {mapping}"]))


def _pattern_cases() -> list[Case]:
    return [_pattern_case(TRAIN["seq_len"], TRAIN_SHIFT), *(_pattern_case(*c) for c in PATTERN_CASES)]


#: The pattern's reference written as named steps, with the cases it must equal the reference on
#: (tests/test_checks_steps.py). The task has none: its expected batch is built from the learner's own x.
STEPPED = [(_pattern_cases, _reference_pattern, _pattern_steps)]
