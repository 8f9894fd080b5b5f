"""Checks for exercise 18 (chapter "Attention in today's open models"): a softmax with a learned sink.

:func:`check_softmax_with_sink`: the learner writes ``softmax_with_sink(scores, sinks) -> weights``,
``scores (B, H, L_q, L_k)`` (masked entries ``-inf``), ``sinks (H,)`` one logit per head, and
``weights[b, h, i, j] = exp(s_ij) / (exp(sink_h) + Σ_j' exp(s_ij'))``: the sink sits in the
denominator only, as gpt-oss computes it. The cases vary B, H, L_q, L_k (H never equal to L_q or L_k,
so a sink broadcast along the wrong axis raises or shows), mask keys with ``-inf``, mask a whole row
(the sink then takes everything: zeros, not NaN), and use scores in the hundreds (an exponential
without a maximum subtracted overflows). The mistakes are the table :data:`MISTAKES`; built on the
framework (``_framework.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..llm import softmax_with_sink
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_softmax_with_sink"]

NAME = "check_softmax_with_sink"


def _reference(scores: Tensor, sinks: Tensor) -> Tensor:
    return softmax_with_sink(scores, sinks)


def _steps(scores: Tensor, sinks: Tensor) -> Tensor:
    """The chapter's formula ``e^{s_ij} / (e^{z_h} + Σ_j' e^{s_ij'})`` step by step, stabilised by the row's
    maximum over the scores and the sink (``_steps.py`` searches small changes to each); equal to :func:`_reference`."""
    qk = ("query", "key")
    sink = step("one sink per head, lined up with the scores' heads: (1, H, 1, 1)", torch.reshape,
                sinks.to(scores.dtype), (1, -1, 1, 1))
    row_max = step("the row's largest score", torch.amax, scores, dim=-1, keepdim=True, axes=qk)
    m = step("the shift m: the larger of the row's largest score and the sink", torch.maximum, row_max, sink)
    exps = step("the scores' exponentials e^(s_ij - m)", torch.exp, step("the scores shifted by m", torch.sub, scores, m,
                                                                          axes=qk), axes=qk)
    sink_exp = step("the sink's exponential e^(z_h - m)", torch.exp, step("the sink shifted by m", torch.sub, sink, m))
    total = step("the sum of the exponentials over the keys", torch.sum, exps, dim=-1, keepdim=True, axes=qk)
    denominator = step("the denominator: the sink's exponential plus that sum", torch.add, total, sink_exp)
    return step("the weights: each exponential over the denominator", torch.div, exps, denominator, axes=qk)


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(18)

    def case(description: str, B: int, H: int, L_q: int, L_k: int, scale: float = 2.0, causal: bool = False,
             empty_row: bool = False, sink_offset: float = 0.0) -> Case:
        scores = scale * torch.randn(B, H, L_q, L_k, generator=g)
        if causal:  # the queries are the last L_q of the L_k positions
            allowed = torch.ones(L_q, L_k, dtype=torch.bool).tril(diagonal=L_k - L_q)
            scores = scores.masked_fill(~allowed, float("-inf"))
        if empty_row:
            scores[:, :, 0] = float("-inf")  # a query that may attend to nothing: a padded row
        sinks = sink_offset + 1.5 * torch.randn(H, generator=g)
        return Case(f"{description}: scores {tuple(scores.shape)}", {"scores": scores, "sinks": sinks},
                    info={"dims": ("B", "H", "L_q", "L_k")})

    return [
        case("one batch, 3 heads, 4 queries and 5 keys", 1, 3, 4, 5),
        case("2 sequences, 2 heads, causal (masked keys -inf)", 2, 2, 6, 6, causal=True),
        case("a decoding step: one query, 7 keys, 5 heads", 3, 5, 1, 7, sink_offset=1.0),
        case("causal, the first query row fully masked (a padded query)", 2, 3, 5, 5, causal=True, empty_row=True),
        case("scores in the hundreds, a sink near them", 1, 2, 3, 4, scale=300.0, sink_offset=250.0),
    ]


def _row_max(scores: Tensor) -> Tensor:
    return scores.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).min)  # finite for an empty row


def _sink(sinks: Tensor, scores: Tensor) -> Tensor:
    return sinks.view(1, -1, 1, 1).to(scores.dtype)  # (1, H, 1, 1)


def _plain(scores: Tensor, sinks: Tensor) -> Tensor:
    return torch.softmax(scores, dim=-1)


def _sink_not_shifted(scores: Tensor, sinks: Tensor) -> Tensor:
    m = _row_max(scores)
    e = (scores - m).exp()
    return e / (_sink(sinks, scores).exp() + e.sum(-1, keepdim=True))


def _raw_sink(scores: Tensor, sinks: Tensor) -> Tensor:
    m = _row_max(scores)
    e = (scores - m).exp()
    return e / (_sink(sinks, scores) + e.sum(-1, keepdim=True))


def _raw_sink_unshifted(scores: Tensor, sinks: Tensor) -> Tensor:
    e = scores.exp()  # no maximum subtracted, from the sink or the scores
    return e / (_sink(sinks, scores) + e.sum(-1, keepdim=True))


def _overflowed(case: Case, got: object) -> bool:
    """NaN or inf where the reference is finite, on a case whose scores are in the hundreds."""
    scores = case.args["scores"]
    return (isinstance(got, Tensor) and got.is_floating_point() and got.shape == scores.shape
            and float(scores[torch.isfinite(scores)].abs().max()) > 88 and not bool(torch.isfinite(got).all()))


def _over_queries(scores: Tensor, sinks: Tensor) -> Tensor:
    sink = _sink(sinks, scores).expand(*scores.shape[:2], 1, scores.size(3))  # (B, H, 1, L_k): a sink row
    return torch.softmax(torch.cat([scores, sink], dim=-2), dim=-2)[..., :-1, :]


def _sink_first_drop_last(scores: Tensor, sinks: Tensor) -> Tensor:
    sink = _sink(sinks, scores).expand(*scores.shape[:3], 1)
    return torch.softmax(torch.cat([sink, scores], dim=-1), dim=-1)[..., :-1]


def _sink_column_kept(case: Case, got: object) -> bool:
    scores = case.args["scores"]
    return isinstance(got, Tensor) and tuple(got.shape) == (*scores.shape[:3], scores.size(-1) + 1)


_FORMULA = "`exp(s_ij) / (exp(sink_h) + sum over j of exp(s_ij))`"

MISTAKES = [
    Mistake("every row sums to 1, a plain softmax: the sink takes no weight (it is ignored, or the rows are "
            "renormalised after it)",
            f"add the sink's exponential to each row's denominator: {_FORMULA}, one sink per head "
            "(`sinks.view(1, -1, 1, 1)`). Adding the sink to every score cancels out, and dividing the weights by "
            "their sum again puts the sink's share back on the keys: both give this plain softmax.", _plain),
    Mistake("the sink's column is returned: the weights have L_k + 1 columns",
            "the sink attends to nothing (it has no value): after the softmax over the scores and the sink, drop the "
            "sink's column, e.g. `weights[..., :-1]` when it was appended last.", looks_like=_sink_column_kept),
    Mistake("the sink was put first and the last column dropped: the weights are shifted by one key",
            "drop the sink's own column: with `torch.cat([sink, scores], -1)` keep `[..., 1:]`; with "
            "`torch.cat([scores, sink], -1)` keep `[..., :-1]`.", _sink_first_drop_last),
    Mistake("the exponentials overflow: scores in the hundreds give inf / inf = NaN",
            "subtract each row's maximum (over the scores and the sink) before `exp`; concatenating the sink as a "
            "column and calling `torch.softmax` does it for you.", looks_like=lambda case, got: _overflowed(case, got)),
    Mistake("the softmax runs over the queries (dim -2), not over the keys",
            "normalise each query's row over its keys, the last dim: `softmax(..., dim=-1)` on the scores with the "
            "sink appended as a last column.", _over_queries),
    Mistake("the row maximum is subtracted from the scores but not from the sink",
            "shift the sink by the same maximum as the scores: `exp(sink - m)` next to `exp(s - m)`, or concatenate "
            "the sink as a column and take one softmax over the row.", _sink_not_shifted),
    Mistake("the raw sink logit is added to the denominator, not its exponential",
            f"the sink is a logit like the scores: add `exp(sink_h)` next to their exponentials: {_FORMULA}.",
            _raw_sink_unshifted),
    Mistake("the raw sink logit is added to the denominator, not its exponential",
            f"the sink is a logit like the scores: add `exp(sink_h)` (shifted by the row's maximum): {_FORMULA}.",
            _raw_sink),
]


def check_softmax_with_sink(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(scores, sinks) -> weights (B, H, L_q, L_k)`` (exercise 18): a softmax over the
    keys with one learned logit per head in the denominator only. Five cases (masked keys, a fully masked
    row, a decoding step, scores in the hundreds); the first failing one is reported, naming the mistake.
    Never raises because of the learner's code (under ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(NAME)
    cases = _cases()
    failure = run_check(session, fn, cases, _reference, ("weights",), MISTAKES, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match gpt-oss's softmax with a sink (masked keys, a fully "
                                "masked row, a decoding step, scores in the hundreds)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_cases, _reference, _steps)]
