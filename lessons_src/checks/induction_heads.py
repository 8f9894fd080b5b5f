"""Check for exercise 15 (chapter "Induction heads"): the induction score of every head.

The learner writes ``induction_score(weights, half_len) -> (H,)``: each head's mean weight, over the
second half of a repeated sequence, on the token after the previous occurrence of the current one.
The cases vary the batch, the heads and the half-length, with random causal weights and planted
heads (a perfect induction head, a head on the previous occurrence itself, a previous-token head).
The mistakes are the table :data:`MISTAKES`, built on the framework (``_framework.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..language_model import induction_score
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult

__all__ = ["check_induction_score"]

NAME = "check_induction_score"


def _weights(batch: int, heads: int, half_len: int, g: torch.Generator, planted: bool = False) -> Tensor:
    """Random causal weights (rows sum to 1); with ``planted``, heads 0-2 are an induction head, a
    head on the previous occurrence, and a previous-token head."""
    length = 2 * half_len
    scores = 3 * torch.randn(batch, heads, length, length, generator=g)
    scores = scores.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if planted:
        for i in range(length):
            for h, j in enumerate((i - half_len + 1, i - half_len, i - 1)):
                weights[:, h, i] = 0.0
                weights[:, h, i, j if i >= half_len else max(i - 1, 0)] = 1.0
    return weights


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(15)

    def case(description: str, batch: int, heads: int, half_len: int, planted: bool = False) -> Case:
        return Case(f"{description}: B={batch}, H={heads}, T={half_len}",
                    {"weights": _weights(batch, heads, half_len, g, planted), "half_len": half_len},
                    info={"half_len": half_len})

    return [
        case("planted heads (0: induction, 1: the previous occurrence, 2: the previous token)", 2, 4, 5, True),
        case("random causal weights", 3, 2, 7),
        case("one sequence, one head", 1, 1, 4),
        case("random causal weights, a longer sequence", 2, 3, 12),
    ]


def _stripe(offset: int, first_query: int | None = None, reduce: str = "mean") -> Callable[[Tensor, int], Tensor]:
    """A wrong score: weights[b, h, i, i - offset] over queries from ``first_query`` (default T)."""

    def score(weights: Tensor, half_len: int) -> Tensor:
        start = half_len if first_query is None else first_query
        queries = torch.arange(start, weights.size(-1))
        keys = queries - offset
        ok = keys >= 0
        picked = weights[..., queries[ok], keys[ok]]  # (B, H, n)
        return picked.sum(dim=(0, -1)) if reduce == "sum" else picked.mean(dim=(0, -1))

    return score


MISTAKES = [
    Mistake("the score reads the previous occurrence itself (i - T), not the token after it (i - T + 1)",
            "an induction head copies what came *next* last time: the key at i - T + 1 = i - {half_len} + 1.",
            lambda weights, half_len: _stripe(half_len)(weights, half_len)),
    Mistake("the score reads one token too far: i - T + 2",
            "token i last appeared at i - T; the token after it sits at i - T + 1.",
            lambda weights, half_len: _stripe(half_len - 2)(weights, half_len)),
    Mistake("queries from the first half are counted: they have nothing to copy yet",
            "average over the second half only, queries i = T .. 2T - 1 ({half_len} .. 2T - 1 here).",
            lambda weights, half_len: _stripe(half_len - 1, first_query=half_len - 1)(weights, half_len)),
    Mistake("the weights are summed, not averaged",
            "take the mean over the batch and over the T queries of the second half, so a perfect head scores 1.",
            lambda weights, half_len: _stripe(half_len - 1, reduce="sum")(weights, half_len)),
]


def check_induction_score(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(weights (B, H, 2T, 2T), half_len) -> (H,)`` (exercise 15).

    The mean over the batch and the queries ``i = T .. 2T-1`` of ``weights[b, h, i, i - T + 1]``.
    Four cases; the first failing one is reported, naming the mistake. Never raises because of the
    learner's code (under ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(NAME)
    cases = _cases()
    failure = run_check(session, fn, cases, induction_score, ("scores",), MISTAKES)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match the reference (planted induction, "
                                "previous-occurrence and previous-token heads; random weights; T = 4 to 12)"))
