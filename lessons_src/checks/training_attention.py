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
then checks the pattern on edge cases (copy, negative shift, shift >= L, L = 1). Known mistakes
are named with how to fix them; rows (queries) that are off are listed.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from ..device import one_cpu_thread
from ..multihead import MultiHeadAttention
from ..training import diagonal_mass, train_attention
from ._framework import Session
from ._result import CheckResult, error_hint, finish, is_device_error, learner_error, shape_of

__all__ = ["check_shift_attention"]

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


def _case_text(seq_len: int, shift: int) -> str:
    wraps = f", which wraps around to {shift % seq_len}" if not 0 <= shift < seq_len else ""
    kind = " (a copy)" if shift % seq_len == 0 else ""
    return f"seq_len={seq_len}, shift={shift}{wraps}{kind}"


# -- the task ---------------------------------------------------------------------------------------


def _source_positions(target: Tensor, x: Tensor) -> list[int | None]:
    """For each target position i, the position j with ``target[:, i] == x[:, j]`` (None if none)."""
    found: list[int | None] = []
    for i in range(target.size(1)):
        match = [j for j in range(x.size(1)) if torch.equal(target[:, i], x[:, j])]
        found.append(match[0] if match else None)
    return found


def _diagnose_task(query: Tensor, key: Tensor, value: Tensor, target: Tensor, shift: int, where: str
                   ) -> CheckResult | None:
    """Compare one batch with the definition: a failure naming the mistake (not finished yet), or None."""
    seq_len = key.size(1)
    roll = functools.partial(torch.roll, shifts=shift, dims=1)
    if torch.equal(value, key) and torch.equal(query, target) and torch.equal(target, roll(key)):
        return None
    s = shift % seq_len
    # Swapped: the learner's x went into the query and the shifted x into key (and target). Without
    # `target == key`, key == roll(query) would also match a task shifted the wrong way.
    if s != 0 and not torch.equal(query, key) and torch.equal(key, roll(query)) and torch.equal(target, key):
        return CheckResult(
            NAME, False, f"{where}: the query and key roles are swapped: your key is the shifted sequence",
            "key = value = x, the unshifted input (what can be looked up and copied); query = target = "
            "x.roll(shift, dims=1), so that query i is the vector stored at key (i - shift) mod L.")
    if not torch.equal(value, key):
        return CheckResult(
            NAME, False, f"{where}: value differs from key",
            "both must be the input x itself: `return query, x, x, target`. The layer copies values, "
            "so they must hold the unshifted vectors that the queries match.")
    if s != 0 and torch.equal(target, key):
        return CheckResult(
            NAME, False, f"{where}: the target is not shifted: it equals the input x (a copy task)",
            "shift it along the sequence: `target = x.roll(shift, dims=1)`, and use it as the query too.")
    if s != 0 and torch.equal(target, torch.roll(key, -shift, dims=1)):
        return CheckResult(
            NAME, False, f"{where}: the sequence is shifted the wrong way (target[:, i] = x[:, (i + shift) mod L])",
            "the target at position i must be x[:, (i - shift) mod L]; `x.roll(shift, dims=1)` does exactly "
            "that (`x.roll(-shift, dims=1)` shifts the other way).")
    if torch.equal(target, key.flip(1)) and not torch.equal(target, roll(key)):
        return CheckResult(
            NAME, False, f"{where}: the target is the reversed input, not the shifted one",
            "this exercise shifts instead of reversing: `target = x.roll(shift, dims=1)`.")
    for dim in (0, 2):
        if key.size(dim) > 1 and s != 0 and torch.equal(target, torch.roll(key, shift, dims=dim)):
            axis = "batch" if dim == 0 else "feature"
            return CheckResult(
                NAME, False, f"{where}: the target is rolled along dim {dim} (the {axis} dimension), not along L",
                "roll along the sequence dimension, dims=1 of (B, L, D): `x.roll(shift, dims=1)`.")
    if torch.equal(target, roll(key)) and not torch.equal(query, target):
        if torch.equal(query, key):
            return CheckResult(
                NAME, False, f"{where}: the target is right but the query is the unshifted input",
                "the query must equal the target (`query = target`): the query at position i has to be the "
                "vector the output should copy, so that it matches key (i - shift) mod L.")
        return CheckResult(
            NAME, False, f"{where}: the target is right but the query differs from it",
            "return the shifted sequence twice: `return target, x, x, target`.")
    expected = [(i - shift) % seq_len for i in range(seq_len)]
    found = _source_positions(target, key)
    inside = [i for i in range(seq_len) if 0 <= i - shift < seq_len]  # positions that need no wrap-around
    if s != 0 and inside and all(found[i] == expected[i] for i in inside):
        outside = [i for i in range(seq_len) if i not in inside]
        return CheckResult(
            NAME, False, f"{where}: the shift does not wrap around: target positions {outside} do not hold "
            f"x positions {[expected[i] for i in outside]}",
            "the shift is cyclic: what falls off one end comes back at the other. `x.roll(shift, dims=1)` "
            "does that (padding with zeros or dropping vectors does not).")
    details = [f"target position {i} holds x position {'(none)' if j is None else j}, expected {e}"
               for i, (j, e) in enumerate(zip(found, expected, strict=True)) if j != e][:8]
    return CheckResult(
        NAME, False, f"{where}: the target is not x rolled by shift along L",
        "key = value = x; query = target = `x.roll(shift, dims=1)`, so target[:, i] = x[:, (i - shift) mod L].",
        details)


def _call(session: Session, fn: Callable[..., object], label: str, where: str, *args: object, **kwargs: object
          ) -> tuple[object, CheckResult | None]:
    """``fn(*args, **kwargs)`` through the check's ``session`` (one time budget for the whole check),
    or ``(None, failure)`` for a stub, an exception, a time-out.

    Like ``_result.call_learner``, but the failure is not finished yet: the caller names the
    function (this check takes two) and adds case-specific hints before ``finish`` decides
    whether to raise under strict mode, so strict mode raises with the same feedback.
    """
    value, failure = session.call(where, fn, list(args), kwargs)
    if failure is not None and failure.summary == "not implemented yet":
        failure.summary = f"{label}: not implemented yet"
    return value, failure


def _call_task(session: Session, shift_task: Callable[..., object], batch_size: int, seq_len: int, d_model: int, shift: int,
               where: str, seed: int) -> tuple[object, CheckResult | None]:
    """The learner's batch for one case, drawn with a CPU generator seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return _call(session, shift_task, "shift_task", where, batch_size, seq_len, d_model, shift=shift,
                 generator=generator, device="cpu")


def _same_batch(batch: object, reference: tuple[Tensor, ...]) -> bool:
    return (isinstance(batch, (tuple, list)) and len(batch) == len(reference)
            and all(isinstance(a, Tensor) and a.shape == b.shape and torch.equal(a.detach(), b)
                    for a, b in zip(batch, reference, strict=True)))


def _check_task(shift_task: Callable[..., object], session: Session) -> CheckResult | None:
    if not callable(shift_task):
        return finish(CheckResult(NAME, False, f"expected a function for shift_task, got {type(shift_task).__name__}",
                                  "pass the function itself, without calling it: "
                                  "`check_shift_attention(shift_task, expected_pattern)`."))
    try:
        inspect.signature(shift_task).bind(1, 2, 3, shift=0, generator=None, device="cpu")
    except TypeError as exc:
        return finish(CheckResult(NAME, False, f"shift_task cannot be called as {SIGNATURE}: {exc}",
                                  f"define it as `def {SIGNATURE}:` (the check and train_attention pass "
                                  "shift, generator and device by name)."))
    except ValueError:  # no signature to inspect (a builtin): just call it
        pass
    for number, (batch_size, seq_len, d_model, shift) in enumerate(TASK_CASES, start=1):
        where = (f"shift_task case {number}/{len(TASK_CASES)} (B={batch_size}, "
                 f"{_case_text(seq_len, shift)}, d_model={d_model})")

        args = (session, shift_task, batch_size, seq_len, d_model, shift, where)
        batch, failure = _call_task(*args, seed=0)
        if failure is not None:
            if (number > 1 and not 0 <= shift < seq_len and "raised" in failure.summary
                    and not is_device_error(failure.summary)):
                failure.hint = ("this case's shift is outside 0..L-1: `x.roll(shift, dims=1)` wraps around for any "
                                "integer shift (or reduce it first: `shift % seq_len`).")
            return finish(failure)
        if not isinstance(batch, (tuple, list)) or len(batch) != 4:
            got = f"{type(batch).__name__} of length {len(batch)}" if isinstance(batch, (tuple, list)) else shape_of(batch)
            return finish(CheckResult(NAME, False, f"{where}: returned {got}, expected (query, key, value, target)",
                                      "end with `return query, key, value, target` (four tensors)."))
        names = ("query", "key", "value", "target")
        expected_shape = (batch_size, seq_len, d_model)
        for name, t in zip(names, batch, strict=True):
            if not isinstance(t, Tensor):
                return finish(CheckResult(NAME, False, f"{where}: {name} is {type(t).__name__}, not a tensor",
                                          "return torch tensors made from `torch.randn(..., generator=generator)`."))
            if tuple(t.shape) != expected_shape:
                return finish(CheckResult(NAME, False, f"{where}: {name} has shape {shape_of(t)}, "
                                          f"expected (B, L, D) = {expected_shape}",
                                          "draw x with `torch.randn(batch_size, seq_len, d_model, ...)` and keep "
                                          "that shape: roll along L, do not slice it away."))
            if t.dtype != torch.float32:
                return finish(CheckResult(NAME, False, f"{where}: {name} has dtype {t.dtype}, expected torch.float32",
                                          "use torch.randn's default dtype (float32), like the layer's weights."))
            if not torch.isfinite(t).all():
                return finish(CheckResult(NAME, False, f"{where}: {name} contains NaN or inf",
                                          "x should be plain standard normal numbers: `torch.randn(...)`."))
        query, key, value, target = (t.detach() for t in batch)
        again, failure = _call_task(*args, seed=0)
        if failure is not None:
            return finish(failure)
        other, failure = _call_task(*args, seed=1)
        if failure is not None:
            return finish(failure)
        if not _same_batch(again, batch) or _same_batch(other, batch):
            return finish(CheckResult(NAME, False, f"{where}: the batch does not come from the `generator` argument",
                                      "draw x with `torch.randn(batch_size, seq_len, d_model, generator=generator, "
                                      "device=device)`, so one seed gives one batch (training needs that to be "
                                      "reproducible)."))
        if number == 1:
            mean, std = key.mean().item(), key.std().item()
            if abs(mean) > 0.1 or abs(std - 1.0) > 0.1:
                return finish(CheckResult(NAME, False, f"{where}: x has mean {mean:.3f} and standard deviation "
                                          f"{std:.3f}, expected standard normal (0 and 1)",
                                          "draw x with `torch.randn` (standard normal), not `torch.rand` (uniform)."))
        failure = _diagnose_task(query, key, value, target, shift, where)
        if failure is not None:
            if number > 1 and not 0 <= shift < seq_len:
                failure.hint += (" Your function works for 0 <= shift < L but not here: the shift is cyclic, "
                                 "so use `x.roll(shift, dims=1)` (or indices `(i - shift) % seq_len`), which "
                                 "wrap around for any integer shift.")
            return finish(failure)
    return None


# -- the predicted pattern --------------------------------------------------------------------------


def _pattern_candidates(seq_len: int, shift: int) -> list[tuple[Tensor, str, str]]:
    """Known wrong patterns: (pattern, what is wrong, how to fix)."""
    s = shift % seq_len
    right = "row i (query i) needs its 1 in column (i - shift) % seq_len, the key that holds the vector query i carries"
    out = []
    if (-shift) % seq_len != s:
        out.append((_reference_pattern(seq_len, -shift),
                    "the diagonal is shifted the wrong way (the sign of shift): your 1 is at column (i + shift) mod L",
                    f"{right}; (i + shift) is the other direction (also what you get by transposing: rows are "
                    "queries, columns are keys)."))
    if seq_len > 1:
        anti = torch.eye(seq_len).flip(-1)
        if not torch.equal(anti, _reference_pattern(seq_len, shift)):
            out.append((anti, "this is the reversal pattern (the anti-diagonal, column L-1-i), not the shift's",
                        f"the shift task moves every vector by the same amount: {right}."))
    if s != 0:
        out.append((torch.eye(seq_len), "this is the copy pattern (the main diagonal), as if shift were 0",
                    f"move each row's 1 by the shift: {right}."))
    for delta in (1, -1):
        candidate = _reference_pattern(seq_len, shift + delta)
        if seq_len > 2 and not any(torch.equal(candidate, c) for c, _, _ in out):
            side = "left" if delta == 1 else "right"
            out.append((candidate, f"off by one: every 1 is one column to the {side} of the right key",
                        f"{right}; check it by hand on row 0: with shift={shift} and L={seq_len} the 1 belongs in "
                        f"column {(0 - shift) % seq_len}."))
    rows = torch.arange(seq_len)
    no_wrap = _reference_pattern(seq_len, shift) * ((rows - shift >= 0) & (rows - shift < seq_len)).float()[:, None]
    if not torch.equal(no_wrap, _reference_pattern(seq_len, shift)):
        out.append((no_wrap, "the diagonal does not wrap around: some rows have no 1",
                    "the shift is cyclic (torch.roll), so the vectors pushed off one end come back at the other: "
                    "use `(i - shift) % seq_len` for the column (or `torch.eye(L).roll(shift, dims=0)`)."))
    return out


def _as_pattern(value: object, seq_len: int, shift: int, where: str) -> tuple[Tensor | None, CheckResult | None]:
    """The learner's pattern as a float (L, L) tensor, or a finished failure for a malformed one."""
    try:
        pattern = value.detach().cpu() if isinstance(value, Tensor) else torch.as_tensor(np.asarray(value))
    except Exception:  # lists of odd things, None, strings: all feedback
        return None, finish(CheckResult(NAME, False, f"{where}: expected_pattern returned {type(value).__name__}, "
                                        "expected an (L, L) tensor",
                                        "return a torch tensor of shape (seq_len, seq_len)."))
    if pattern.dtype.is_complex:
        return None, finish(CheckResult(NAME, False, f"{where}: expected_pattern returned dtype {pattern.dtype}",
                                        "return 0/1 numbers (float, int or bool)."))
    expected_shape = (seq_len, seq_len)
    if tuple(pattern.shape) != expected_shape:
        hint = "return the whole (L, L) matrix: one row per query, one column per key."
        what = f"the pattern has shape {shape_of(pattern)}, expected (L, L) = {expected_shape}"
        if tuple(pattern.shape) == (seq_len,):
            hint = ("you returned one number per row (the columns?); return the whole (L, L) 0/1 matrix, e.g. "
                    "`pattern = torch.zeros(L, L); pattern[rows, columns] = 1`.")
            what = f"one number per row is returned, not the matrix: {what}"
        return None, finish(CheckResult(NAME, False, f"{where}: {what}", hint))
    pattern = pattern.to(torch.float64)
    if not torch.isfinite(pattern).all():
        return None, finish(CheckResult(NAME, False, f"{where}: the pattern contains NaN or inf",
                                        "fill it with 0s and 1s only."))
    if not ((pattern == 0) | (pattern == 1)).all():
        bad = sorted({int(i) for i in torch.nonzero((pattern != 0) & (pattern != 1))[:, 0]})
        return None, finish(CheckResult(NAME, False, f"{where}: the pattern has entries other than 0 and 1 "
                                        f"(in rows {bad})",
                                        "predict the ideal pattern, not soft weights: a 1 at the key each query "
                                        "should attend to, 0 elsewhere."))
    counts = pattern.sum(-1)
    if not (counts == 1).all():
        details = [f"row (query) {i}: {int(c)} ones" for i, c in enumerate(counts.tolist()) if c != 1][:8]
        failure = CheckResult(NAME, False, f"{where}: not one 1 per query row, so the rows do not sum to 1",
                              "each query attends to exactly one key: every row needs exactly one 1 (and each row "
                              "of attention weights sums to 1).", details)
        for candidate, what, fix in _pattern_candidates(seq_len, shift):
            if torch.equal(pattern, candidate.to(torch.float64)):
                failure.summary, failure.hint = f"{where}: {what}", fix
                break
        return None, finish(failure)
    return pattern, None


def _pattern_failure(pattern: Tensor, seq_len: int, shift: int, where: str, learned: Tensor | None = None
                     ) -> CheckResult:
    """A named failure (not finished yet) for a well-formed but wrong (L, L) pattern, listing the rows off."""
    reference = _reference_pattern(seq_len, shift)
    predicted, correct = pattern.argmax(-1).tolist(), reference.argmax(-1).tolist()
    details = []
    for row, (p, c) in enumerate(zip(predicted, correct, strict=True)):
        if p == c:
            continue
        if learned is None:
            details.append(f"row (query) {row}: you predicted key {p}, the right key is {c}")
        else:
            j = int(learned[row].argmax())
            details.append(f"row (query) {row}: you predicted key {p}, the trained layer attends to key {j} "
                           f"(weight {learned[row, j]:.2f})")
    off = len(details)
    summary = f"{where}: {off} of {seq_len} query rows are off"
    hint = ("row i (query i) needs its 1 in column (i - shift) % seq_len: query i carries the vector stored at "
            "key (i - shift) mod L.")
    for candidate, what, fix in _pattern_candidates(seq_len, shift):
        if torch.equal(pattern, candidate.to(torch.float64)):
            summary, hint = f"{where}: {what} ({off} of {seq_len} query rows are off)", fix
            break
    return CheckResult(NAME, False, summary, hint, details[:8])


def _learner_pattern(session: Session, expected_pattern: Callable[..., object], seq_len: int, shift: int, where: str
                     ) -> tuple[Tensor | None, CheckResult | None]:
    value, failure = _call(session, expected_pattern, "expected_pattern", where, seq_len, shift)
    if failure is not None:
        if not 0 <= shift < seq_len and "raised" in failure.summary and not is_device_error(failure.summary):
            failure.hint = ("this case's shift is outside 0..L-1: take the column `(i - shift) % seq_len`, which is "
                            "always a valid index, so that any integer shift wraps around.")
        return None, finish(failure)
    return _as_pattern(value, seq_len, shift, where)


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
        return failure
    if not callable(expected_pattern):
        return finish(CheckResult(NAME, False, f"expected a function for expected_pattern, got "
                                  f"{type(expected_pattern).__name__}",
                                  "pass the function itself, without calling it: "
                                  "`check_shift_attention(shift_task, expected_pattern)`."))
    seq_len = TRAIN["seq_len"]
    n_cases = 1 + len(PATTERN_CASES)
    where = f"expected_pattern case 1/{n_cases} ({_case_text(seq_len, TRAIN_SHIFT)}, the trained case)"
    pattern, failure = _learner_pattern(session, expected_pattern, seq_len, TRAIN_SHIFT, where)
    if failure is not None:
        return failure

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
    if not torch.equal(pattern, reference.to(torch.float64)):
        return finish(_pattern_failure(pattern, seq_len, TRAIN_SHIFT, where, learned))

    for number, (length, shift) in enumerate(PATTERN_CASES, start=2):
        where = f"expected_pattern case {number}/{n_cases} ({_case_text(length, shift)})"
        pattern_case, failure = _learner_pattern(session, expected_pattern, length, shift, where)
        if failure is not None:
            return failure
        if not torch.equal(pattern_case, _reference_pattern(length, shift).to(torch.float64)):
            failure = _pattern_failure(pattern_case, length, shift, where)
            if not 0 <= shift < length and "wrong way" not in failure.summary:
                failure.hint += " Use `% seq_len` so that any integer shift wraps around."
            return finish(failure)

    learned_keys = learned.argmax(-1).tolist()
    mapping = ", ".join(f"{i}→{j}" for i, j in enumerate(learned_keys))
    return finish(CheckResult(
        NAME, True,
        f"your shift_task matches the definition on {len(TASK_CASES)} cases; a one-head layer trained on it for "
        f"{TRAIN['steps']} steps (L={seq_len}, shift={TRAIN_SHIFT}) put {diagonal_mass(learned, -TRAIN_SHIFT):.3f} "
        f"of its attention on your predicted pattern, every query row agreeing; your expected_pattern matches "
        f"on all {n_cases} cases",
        details=[f"learned query → key: {mapping}"]))
