"""Check for exercise 12 (chapter "Tiled attention and the online softmax"): the online-softmax update.

The learner writes ``online_softmax_update(running_max, running_sum, output, scores, value) ->
(running_max, running_sum, output)``, which folds one block of keys into the running state of
some queries. ``value`` is ``(..., Bc, d_v)``, with the same leading (batch) axes as ``scores``,
as the chapter passes it. The cases vary the number of queries, the block's size, ``d_v`` and the
batch axes (one case carries them on ``value`` too); they include a block that raises the maximum of some rows and not others, masked keys (-inf), a
row that has seen only masked keys, and scores large enough that ``exp`` without the maximum
overflows. The mistakes are the table :data:`MISTAKES`, built on the framework (``_framework.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..tiled import online_softmax_update
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_online_softmax_update"]

NAME = "check_online_softmax_update"
ARGS = ("running_max", "running_sum", "output", "scores", "value")


def _state(scores: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The running state after one earlier block (computed with the reference)."""
    start = (torch.full(scores.shape[:-1], -math.inf), torch.zeros(scores.shape[:-1]),
             torch.zeros(*scores.shape[:-1], value.size(-1)))
    return online_softmax_update(*start, scores, value)


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(12)

    def rand(*shape: int, scale: float = 2.0) -> Tensor:
        return scale * torch.randn(*shape, generator=g)

    def case(description: str, state: tuple[Tensor, Tensor, Tensor], scores: Tensor, value: Tensor) -> Case:
        return Case(description, dict(zip(ARGS, (*state, scores, value), strict=True)))

    # 1. The first block: the state is (-inf, 0, 0).
    first = (torch.full((1,), -math.inf), torch.zeros(1), torch.zeros(1, 3))
    # 2. Three queries, a block that raises the maximum of rows 0 and 2 but not row 1.
    old_scores, old_value = torch.tensor([[0.5, 1.0], [3.0, -1.0], [-2.0, 0.0]]), rand(2, 2)
    raised = torch.tensor([[2.5, -0.5, 0.0, 1.0, 0.2], [0.1, 0.2, 2.0, -3.0, 1.0], [1.5, 0.3, -0.7, 0.9, 0.0]])
    # 3. A batch (2, 4 queries), every row's maximum raised by a block of 3 keys, d_v = 6; the values carry
    #    the batch axis too, (2, Bc, d_v), as the chapter passes them.
    old3, value3_old = rand(2, 4, 4), rand(2, 4, 6)
    # 4. Masked keys: row 0 sees some, row 1 has seen only masked keys and sees only masked ones again,
    #    row 2 saw nothing before and sees keys now.
    old4 = torch.tensor([[0.2, -math.inf], [-math.inf, -math.inf], [-math.inf, -math.inf]])
    new4 = torch.tensor([[1.0, -math.inf, 0.5, -1.0], [-math.inf] * 4, [-math.inf, 0.7, -0.2, -math.inf]])
    # 5. Scores around 90: exp(90) overflows float32 (its largest number is about 3.4e38).
    big_old, big_new = 85.0 + rand(2, 3, scale=1.0), 90.0 + rand(2, 5, scale=1.0)
    return [
        case("3 queries, a block of 5 keys that raises the maximum of rows 0 and 2 but not row 1, d_v=2",
             _state(old_scores, old_value), raised, rand(5, 2)),
        case("the first block: 1 query, 4 keys, d_v=3, state (-inf, 0, 0)", first, rand(1, 4), rand(4, 3)),
        case("a batch of 2 x 4 queries, 3 keys whose scores raise every row's maximum, d_v=6, value batched "
             "(2, 3, 6) as in the chapter", _state(old3, value3_old),
             old3.amax(-1, keepdim=True) + 1.0 + rand(2, 4, 3, scale=0.5).abs(), rand(2, 3, 6)),
        case("masked keys (-inf): row 1 has seen only masked keys and gets only masked keys again, "
             "row 2 saw nothing before this block", _state(old4, rand(2, 4)), new4, rand(4, 4)),
        case("scores near 90, where exp() overflows float32 unless the maximum is subtracted, d_v=5",
             _state(big_old, rand(3, 5)), big_new, rand(5, 5)),
    ]


def _steps(running_max: Tensor, running_sum: Tensor, output: Tensor, scores: Tensor,
           value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The chapter's update step by step (``_steps.py`` searches small changes to each); equal to
    :func:`lessons_src.online_softmax_update`."""
    qk = ("query", "key")
    # The (..., Lq) quantities as (..., Lq, 1) columns are copies, not views (the search reads a view as its base).
    block_max = step("the block's maximum over its keys", torch.amax, scores, dim=-1, axes=qk)
    new_max = step("m_new = the larger of m_old and the block's maximum", torch.maximum, running_max, block_max,
                   axes=("query",))
    nothing_seen = step("the rows that have seen nothing yet (m_new = -inf)", torch.isinf, new_max, axes=("query",))
    shift = step("subtract 0 instead of -inf on those rows", torch.where, nothing_seen, 0.0, new_max)
    exponent = step("m_old - m_new", torch.sub, running_max, shift, axes=("query",))
    rescale = step("the factor for the old terms, exp(m_old - m_new)", torch.exp, exponent, axes=("query",))
    shifted = step("the block's scores minus m_new", torch.sub, scores, shift.unsqueeze(-1).clone(), axes=qk)
    p = step("the block's terms exp(s - m_new)", torch.exp, shifted, axes=qk)
    old_sum = step("rescale the old sum", torch.mul, running_sum, rescale, axes=("query",))
    new_sum = step("new sum = rescaled old sum + the block's terms summed over its keys", torch.add, old_sum,
                   step("the block's terms summed over its keys", torch.sum, p, dim=-1, axes=qk), axes=("query",))
    old_output = step("rescale the old output", torch.mul, output, rescale.unsqueeze(-1).clone(),
                      axes=("query", "feature"))
    block_output = step("the block's terms times its values", torch.matmul, p, value, axes=qk)
    new_output = step("new output = rescaled old output + the block's", torch.add, old_output, block_output,
                      axes=("query", "feature"))
    return new_max, new_sum, new_output


# -- known mistakes: wrong updates with the learner's signature --------------------------------------


def _update(rescale_sum: bool = True, rescale_output: bool = True, sign: float = 1.0, old_max_for_new: bool = False,
            no_shift: bool = False, normalise: bool = False, block_max_only: bool = False, guard: bool = True,
            whole_block_max: bool = False) -> Callable[..., tuple[Tensor, Tensor, Tensor]]:
    """A wrong update, one switch per mistake."""

    def update(running_max, running_sum, output, scores, value):
        block_max = scores.amax().expand(running_max.shape) if whole_block_max else scores.amax(dim=-1)
        new_max = block_max if block_max_only else torch.maximum(running_max, block_max)
        shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max) if guard else new_max
        if no_shift:
            shift = torch.zeros_like(new_max)
        rescale = torch.exp(sign * (running_max - shift))
        if no_shift:
            rescale = torch.ones_like(new_max)
        base = running_max if old_max_for_new else shift
        p = torch.exp(scores - base.unsqueeze(-1))
        new_sum = (running_sum * rescale if rescale_sum else running_sum) + p.sum(dim=-1)
        new_output = (output * rescale.unsqueeze(-1) if rescale_output else output) + p @ value
        if normalise:
            new_output = new_output / new_sum.unsqueeze(-1)
        return new_max, new_sum, new_output

    return update


def _some_row_rises(case: Case) -> bool:
    """The case has a row whose maximum rises, from a finite one (where the old maximum matters)."""
    old, block = case.args["running_max"], case.args["scores"].amax(dim=-1)
    return bool((torch.isfinite(old) & (block > old)).any())


def _some_row_falls(case: Case) -> bool:
    """The case has a row whose block maximum is below its running maximum."""
    return bool((case.args["scores"].amax(dim=-1) < case.args["running_max"]).any())


def _nan_only_where_nothing_seen(case: Case, got: object) -> bool:
    """Right everywhere except NaN in the rows whose maximum is still -inf."""
    expected = online_softmax_update(*case.args.values())
    empty = torch.isinf(expected[0]) & (expected[0] < 0)
    if not empty.any() or not isinstance(got, (tuple, list)) or len(got) != 3:
        return False
    if not all(isinstance(t, Tensor) and t.shape == e.shape for t, e in zip(got, expected, strict=True)):
        return False
    nan_there = any(bool(t[empty].isnan().any()) for t in got)
    fine_elsewhere = all(torch.allclose(t[~empty].double(), e[~empty].double(), atol=1e-4, equal_nan=False)
                         for t, e in zip(got, expected, strict=True))
    return nan_there and fine_elsewhere


MISTAKES = [
    Mistake("NaN for a row that has seen only masked keys",
            "while a row's maximum is -inf, exp(-inf - (-inf)) is NaN: subtract 0 instead of the maximum on those "
            "rows (`torch.where(torch.isinf(new_max), 0, new_max)`), so their sum and output stay 0.",
            looks_like=_nan_only_where_nothing_seen, fallback=True),
    Mistake("the old sum is not rescaled when the maximum rises",
            "the old terms of the sum were exponentials against the old maximum: multiply the old `running_sum` "
            "by exp(old max - new max) before adding the block's exponentials.", _update(rescale_sum=False)),
    Mistake("the old output is not rescaled when the maximum rises",
            "`output` is a sum of exp(s - old max) v, like the sum: it needs the same factor, "
            "exp(old max - new max), on every row (`rescale.unsqueeze(-1)` to reach the d_v axis).",
            _update(rescale_output=False)),
    Mistake("neither the old sum nor the old output is rescaled when the maximum rises",
            "when the maximum rises from m_old to m_new, every old term exp(s - m_old) must become exp(s - m_new): "
            "multiply the old sum and the old output by exp(m_old - m_new).",
            _update(rescale_sum=False, rescale_output=False)),
    Mistake("the old terms are rescaled by exp(new max - old max): the sign is reversed",
            "the factor re-bases exp(s - m_old) on m_new: exp(s - m_new) = exp(s - m_old) * exp(m_old - m_new), "
            "a factor of at most 1.", _update(sign=-1.0)),
    Mistake("the block's exponentials are taken against the old maximum, not the new one",
            "first compute the new maximum (old one and the block's), then take every exponential of this block "
            "against it: exp(scores - new_max).", _update(old_max_for_new=True), when=_some_row_rises),
    Mistake("the running maximum is the block's maximum only",
            "the running maximum is the largest score seen so far: the larger of the old running maximum and "
            "the block's maximum (`torch.maximum`).", _update(block_max_only=True), when=_some_row_falls),
    Mistake("running_max is not each query's largest score so far: the block's maximum is taken over the whole "
            "block, not over the keys of each query",
            "take the maximum over the last dim only, `scores.amax(dim=-1)` (one per query), then the larger of "
            "it and the old running maximum. Any shift works for one softmax, but the update keeps the "
            "running maximum of each query.", _update(whole_block_max=True)),
    Mistake("the exponentials are not taken relative to the running maximum",
            "keep the sum and output as exp(s - m) terms with m the running maximum; exp(s) alone overflows for "
            "large scores (float32 ends near exp(88)).", _update(no_shift=True)),
    Mistake("the output is divided by the sum: the running output must stay unnormalised",
            "keep `output` as the plain sum of exp(s - m) v; the division by the sum happens once, after the "
            "last block.", _update(normalise=True)),
]

HINTS = [(r"amax|max\(\): Expected reduction dim|dimension specified as",
          "take the block's maximum over the keys, the last dim: `scores.amax(dim=-1)` (or "
          "`scores.max(dim=-1).values`)."),
         (r"einsum\(\).*(subscripts|ellipsis)|mat2 must be a matrix|self must be a matrix",
          "`value` is (..., Bc, d_v), with the same batch axes as `scores` (the chapter passes batched values): "
          "`p @ value` broadcasts over them; in einsum write '...qk,...kd->...qd'.")]


def check_online_softmax_update(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(running_max, running_sum, output, scores, value)`` (exercise 12).

    ``running_max``, ``running_sum`` ``(..., Lq)``, ``output`` ``(..., Lq, d_v)`` (unnormalised),
    ``scores`` ``(..., Lq, Bc)`` (``-inf`` where masked), ``value`` ``(..., Bc, d_v)`` -> the new
    ``(running_max, running_sum, output)``, as :func:`lessons_src.online_softmax_update`. Five cases (a rising maximum on
    some rows first, then a first block); the first failing one is reported, naming the mistake. Never raises because of the learner's
    code (under ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(NAME, HINTS)
    cases = _cases()
    failure = run_check(session, fn, cases, online_softmax_update, ("running_max", "running_sum", "output"), MISTAKES,
                        steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match the reference (a first block, a rising maximum on "
                                "some rows, a batch with batched values, masked keys and a row that has seen none, scores near 90)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_cases, online_softmax_update, _steps)]
