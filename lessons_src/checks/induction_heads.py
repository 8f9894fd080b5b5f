"""Check for exercise 15 (chapter "Induction heads"): the prefix-matching score of every head, on any tokens.

The learner writes ``prefix_matching_score(weights, tokens) -> (H,)``: for each query ``i`` the weight
its head puts on the *induction keys* ``k`` (``1 <= k <= i`` with ``tokens[k - 1] == tokens[i]``: the
token after each earlier occurrence of the query's token), summed over those keys, then averaged
over every query of the batch that has at least one. On a repeated sequence of distinct tokens it
equals ``lessons_src.induction_score``; on other text there is no half-length, and a token may have
occurred several times. The cases use small vocabularies (many repeats, some back to back), planted
heads, and a sequence without any repeat. The mistakes are the table :data:`MISTAKES`, built on the
framework (``_framework.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..language_model import induction_score
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_prefix_matching_score"]

NAME = "check_prefix_matching_score"


def _same_token(tokens: Tensor) -> Tensor:
    """``same[b, i, j]``: token ``j`` equals token ``i``, (B, L, L)."""
    return tokens[:, :, None] == tokens[:, None, :]


def _induction_keys(tokens: Tensor) -> Tensor:
    """``keys[b, i, k]``: ``1 <= k <= i`` and ``tokens[b, k - 1] == tokens[b, i]``, (B, L, L)."""
    length = tokens.size(1)
    keys = torch.zeros(tokens.size(0), length, length, dtype=torch.bool)
    keys[:, :, 1:] = _same_token(tokens)[:, :, :-1]  # key k looks at the token before it, k - 1
    return keys & torch.ones(length, length, dtype=torch.bool).tril()  # an earlier occurrence: k - 1 < i


def _score(weights: Tensor, keys: Tensor, counted: Tensor | None = None, reduce: str = "sum",
           pool: str = "queries") -> Tensor:
    """Sum (or mean) of ``weights`` over ``keys`` per query, averaged over the ``counted`` queries -> (H,)."""
    keys = keys.to(weights.dtype)[:, None]  # (B, 1, L, L)
    per_query = (weights * keys).sum(dim=-1)  # (B, H, L)
    if reduce == "mean":
        per_query = per_query / keys.sum(dim=-1).clamp(min=1)
    counted = (keys.sum(dim=-1) > 0)[:, 0] if counted is None else counted  # (B, L)
    if pool == "sequences":  # each sequence's mean first, then the mean of those
        per_sequence = (per_query * counted[:, None]).sum(dim=-1) / counted.sum(dim=-1)[:, None]  # (B, H)
        return per_sequence.nanmean(dim=0)
    return per_query.permute(1, 0, 2)[:, counted].mean(dim=-1)  # (H, number of counted queries) -> (H,)


def _reference(weights: Tensor, tokens: Tensor) -> Tensor:
    return _score(weights, _induction_keys(tokens))


def _token_before(tokens: Tensor, shift: int = 1) -> Tensor:
    """``before[b, k] = tokens[b, k - shift]``, -1 (no token) where ``k - shift`` is outside the sequence."""
    before = torch.full_like(tokens, -1)
    length = tokens.size(-1)
    if shift >= 0:
        before[:, shift:] = tokens[:, :max(length - shift, 0)]
    else:
        before[:, :shift] = tokens[:, -shift:]
    return before


def _steps(weights: Tensor, tokens: Tensor) -> Tensor:
    """The chapter's score step by step (``_steps.py`` searches small changes to each); equal to :func:`_reference`."""
    qk = ("query", "key")
    position = torch.arange(tokens.size(1))
    before = step("the token before each key, tokens[k - 1]", _token_before, tokens, shift=1, axes=("key",))
    same = step("the token before key k equals the query's: tokens[k - 1] == tokens[i]", torch.eq,
                tokens[:, :, None], before[:, None, :], axes=qk)
    causal = step("keys up to the query: k <= i", torch.le, position[None, :], position[:, None], axes=qk)
    keys = step("the induction keys: both conditions", torch.logical_and, same, causal, axes=qk)
    on_keys = step("the weights on the induction keys", torch.mul, weights, keys[:, None], axes=qk)
    per_query = step("each query's weight on its induction keys: a sum over the keys", torch.sum, on_keys, dim=-1,
                     axes=qk)
    counted = step("the queries with an induction key: any over the keys", torch.any, keys, dim=-1, axes=qk)
    total = step("the sum over the queries of the batch", torch.sum, per_query, dim=(0, 2),
                 axes=("sequence", "head", "query"))
    return step("the mean: divided by the number of queries with an induction key", torch.div, total,
                int(counted.sum()), axes=("head",))


def _causal_weights(batch: int, heads: int, length: int, g: torch.Generator) -> Tensor:
    scores = 3 * torch.randn(batch, heads, length, length, generator=g)
    scores = scores.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores, dim=-1)  # (B, H, L, L), each row sums to 1 over the keys j <= i


def _planted(weights: Tensor, tokens: Tensor) -> Tensor:
    """Heads 0-2 of ``weights`` replaced: a perfect prefix-matching head (even over the induction keys), a
    head on the earlier occurrences themselves, a previous-token head."""
    weights = weights.clone()
    length = tokens.size(1)
    earlier = _same_token(tokens) & torch.ones(length, length, dtype=torch.bool).tril(diagonal=-1)
    previous = torch.zeros(length, length, dtype=torch.bool)
    previous[torch.arange(1, length), torch.arange(length - 1)] = True
    previous[0, 0] = True
    for h, keys in enumerate((_induction_keys(tokens), earlier, previous.expand_as(earlier))):
        keys = keys.clone()
        keys[:, :, 0] |= ~keys.any(dim=-1)  # a query with no such key looks at the first token
        weights[:, h] = keys / keys.sum(dim=-1, keepdim=True)
    return weights


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(15)

    def case(description: str, tokens: Tensor, heads: int, planted: bool = False) -> Case:
        weights = _causal_weights(tokens.size(0), heads, tokens.size(1), g)
        if planted:
            weights = _planted(weights, tokens)
        return Case(f"{description}: B={tokens.size(0)}, H={heads}, L={tokens.size(1)}",
                    {"weights": weights, "tokens": tokens}, info={"length": tokens.size(1)})

    def tokens(length: int, *vocab_sizes: int) -> Tensor:
        """One sequence per vocabulary size (a small one repeats often), (B, L)."""
        return torch.stack([torch.randint(0, v, (length,), generator=g) for v in vocab_sizes])

    first = torch.randperm(9, generator=g)[:7]  # distinct tokens, repeated
    no_repeat = torch.randperm(12, generator=g)[:9]
    last_is_new = torch.cat([tokens(11, 4, 4), torch.full((2, 1), 4)], dim=1)  # the last token occurs only once
    return [
        case("planted heads (0: prefix matching, 1: the earlier occurrences, 2: the previous token) on tokens "
             "from a vocabulary of 4, the last one new", last_is_new, 4, planted=True),
        case("the first sequence has no repeated token, the others many",
             torch.cat([no_repeat[None], tokens(9, 2, 5)]), 2),
        case("a repeated sequence of 7 distinct tokens (here your score equals the chapter's induction_score)",
             torch.cat([first, first])[None].repeat(2, 1), 3),
        case("random causal weights, tokens from vocabularies of 3, 5 and 8", tokens(10, 3, 5, 8), 2),
        case("random causal weights, a longer sequence", tokens(20, 5, 12), 3),
    ]


def _shifted_keys(offset: int, strict: bool = False, causal: bool = True, wrap: bool = False
                  ) -> Callable[[Tensor], Tensor]:
    """Keys ``k`` whose token at ``k - offset`` equals the query's (a wrong ``offset`` or bound)."""

    def keys(tokens: Tensor) -> Tensor:
        length = tokens.size(1)
        shifted = torch.roll(tokens, offset, dims=1)  # shifted[b, k] = tokens[b, k - offset], wrapping
        keys = tokens[:, :, None] == shifted[:, None, :]  # (B, L, L)
        if not wrap:  # no token before the first (or after the last)
            k = torch.arange(length)
            keys &= ((k - offset >= 0) & (k - offset < length))[None, None, :]
        if causal:
            keys &= torch.ones(length, length, dtype=torch.bool).tril(diagonal=-1 if strict else 0)
        return keys

    return keys


def _wrong(keys: Callable[[Tensor], Tensor], **kwargs: object) -> Callable[[Tensor, Tensor], Tensor]:
    return lambda weights, tokens: _score(weights, keys(tokens), **kwargs)


def _all_queries(weights: Tensor, tokens: Tensor) -> Tensor:
    return _score(weights, _induction_keys(tokens), counted=torch.ones_like(tokens, dtype=torch.bool))


def _later_counted(weights: Tensor, tokens: Tensor) -> Tensor:
    return _score(weights, _induction_keys(tokens), counted=_shifted_keys(1, causal=False)(tokens).any(dim=-1))


def _fixed_period(weights: Tensor, tokens: Tensor) -> Tensor:
    return induction_score(weights, tokens.size(1) // 2)


def _nan_for_an_empty_sequence(case: Case, got: object) -> bool:
    """NaN where a sequence without any repeated token was averaged on its own (0 / 0)."""
    tokens = case.args["tokens"]
    empty = not bool(_induction_keys(tokens).any(dim=-1).any(dim=-1).all())
    return empty and isinstance(got, Tensor) and got.is_floating_point() and bool(got.isnan().any())


MISTAKES = [
    Mistake("the score reads the earlier occurrences themselves (tokens[k] == tokens[i]), not the tokens right "
            "after them",
            "an induction head attends to what came *next* last time: key k counts when the token *before* it, "
            "tokens[k - 1], equals tokens[i].",
            _wrong(_shifted_keys(0, strict=True))),
    Mistake("the score reads the token two after each earlier occurrence (tokens[k - 2] == tokens[i])",
            "the token to copy sits right after the earlier occurrence: key k counts when tokens[k - 1] == "
            "tokens[i].",
            _wrong(_shifted_keys(2))),
    Mistake("the score reads the token just before each earlier occurrence (tokens[k + 1] == tokens[i])",
            "shift the other way: key k counts when the token before it, tokens[k - 1], equals tokens[i].",
            _wrong(_shifted_keys(-1))),
    Mistake("the query's own position is left out: when tokens[i - 1] == tokens[i], key i is the token after "
            "that earlier occurrence",
            "let k run up to i itself (`tril()`, not `tril(diagonal=-1)`, on the (L, L) key mask); only the "
            "occurrence k - 1 must come before i.",
            _wrong(_shifted_keys(1, strict=True))),
    Mistake("key 0 is counted as if it followed the last token: torch.roll wrapped the sequence around",
            "key 0 has no token before it: after shifting with torch.roll, set column 0 of your key mask to "
            "False (or shift with slicing: `tokens[:, :-1]` against keys 1 .. L-1).",
            _wrong(_shifted_keys(1, wrap=True))),
    Mistake("queries whose token never occurred before are averaged in (as 0): they have nothing to copy",
            "average only over the queries that have at least one induction key: `mask.any(dim=-1)` marks them.",
            _all_queries),
    Mistake("keys after the query are in the mask (no k <= i bound): every query then seems to have an "
            "induction key, and queries with nothing to copy are averaged in",
            "keep only keys k <= i (a lower-triangular (L, L) mask) before deciding which queries count: key "
            "i + 1 always follows the query's own token.",
            _later_counted),
    Mistake("the weights on a query's induction keys are averaged, not summed",
            "a head that splits its weight between two earlier copies is still a perfect induction head: add "
            "the weights of all the induction keys of a query, then average over the queries.",
            _wrong(_induction_keys, reduce="mean")),
    Mistake("each sequence is averaged first, then the sequences: every query should count the same",
            "pool the queries of the whole batch that have an induction key, and take one mean over them "
            "(`per_query[:, counted]` with a (B, L) boolean `counted`).",
            _wrong(_induction_keys, pool="sequences")),
    Mistake("a sequence without any repeated token gives 0 / 0 = NaN: it was averaged on its own",
            "pool the queries of the whole batch that have an induction key, and take one mean over them; a "
            "sequence without repeats then simply adds no query.",
            looks_like=_nan_for_an_empty_sequence),
    Mistake("only the stripe i - T + 1 is read, as if the sequence repeated after T = L / 2 (the chapter's "
            "induction_score): on other text every earlier occurrence counts",
            "find the induction keys from the tokens: key k counts for query i when k <= i and tokens[k - 1] == "
            "tokens[i].",
            _fixed_period, when=lambda case: case.info["length"] % 2 == 0),
]


def check_prefix_matching_score(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(weights (B, H, L, L), tokens (B, L)) -> (H,)`` (exercise 15).

    For each head, the mean over every query ``i`` (of every sequence) that has an induction key of
    the summed weight on its induction keys ``k`` (``1 <= k <= i``, ``tokens[k - 1] == tokens[i]``).
    Five cases; the first failing one is reported, naming the mistake. Never raises because of the
    learner's code (under ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(NAME)
    cases = _cases()
    # A score per head is a statistic: float64 is as good as float32 here.
    failure = run_check(session, fn, cases, _reference, ("scores",), MISTAKES, same_dtype=False, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match the reference (planted prefix-matching, "
                                "earlier-occurrence and previous-token heads; repeats back to back; a sequence "
                                "without repeats; L = 9 to 20)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_cases, _reference, _steps)]
