"""Check for exercise 13 (chapter "ALiBi and length extrapolation"): ALiBi's biases.

The learner writes ``alibi_bias(num_heads, len_q, len_k) -> (num_heads, len_q, len_k)``. The cases
vary the number of heads (powers of 2 and not), and the lengths, including a decoding step
(``len_q = 1``) where the queries are the last positions of the keys. Only the entries a causal
mask keeps are compared (key at or before its query): what a learner puts above the diagonal is
hidden in use. The mistakes are the table :data:`MISTAKES`, built on the framework (``_framework.py``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
from torch import Tensor

from ..alibi import alibi_bias, alibi_slopes
from ..masks import causal_mask
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_alibi_bias"]

NAME = "check_alibi_bias"


def _case(num_heads: int, len_q: int, len_k: int, what: str) -> Case:
    return Case(f"num_heads={num_heads}, len_q={len_q}, len_k={len_k}: {what}",
                {"num_heads": num_heads, "len_q": len_q, "len_k": len_k},
                info={"num_heads": num_heads, "first": f"1/{2 ** (8 / num_heads):.4g}"})


CASES = [
    _case(8, 5, 5, "8 heads, slopes 1/2 ... 1/256"),
    _case(4, 6, 6, "4 heads, slopes 1/4, 1/16, 1/64, 1/256"),
    _case(16, 3, 3, "16 heads, slopes from 1/sqrt(2)"),
    _case(4, 1, 7, "a decoding step: one query, the last of 7 positions"),
    _case(2, 3, 8, "3 queries, the last 3 of 8 positions"),
    _case(6, 4, 4, "6 heads, not a power of 2"),
    _case(12, 2, 5, "12 heads, not a power of 2, the last 2 of 5 positions"),
]


def _visible(result: object, len_q: int, len_k: int) -> object:
    """The result with the entries a causal mask hides set to 0, when it has the expected shape."""
    if (isinstance(result, Tensor) and not result.is_meta and result.dim() == 3
            and result.shape[-2:] == (len_q, len_k)):  # a meta result has no values: the judge names it
        keep = causal_mask(len_q, len_k, device=result.device)
        return result.masked_fill(~keep, 0) if result.dtype != torch.bool else result
    return result


def _reference(num_heads: int, len_q: int, len_k: int) -> Tensor:
    return _visible(alibi_bias(num_heads, len_q, len_k), len_q, len_k)


def _step_slopes(num_heads: int) -> Tensor:
    """β_h = 2^(-8h/H) for heads h = 1 .. H (H a power of 2), float64 ``(H,)``, as named steps."""
    h = step("head numbers h = 1 .. H", torch.add, torch.arange(num_heads, dtype=torch.float64), 1)
    eight_h = step("the exponent's 8h", torch.mul, h, 8.0, axes=("head",))
    exponent = step("the exponent 8h / H", torch.div, eight_h, float(num_heads), axes=("head",))
    return step("the slopes β_h = 2^(-8h/H)", torch.pow, 2.0, torch.neg(exponent))


def _step_all_slopes(num_heads: int) -> Tensor:
    """The paper's slopes for any H: a power of 2's, or those of H' (the power of 2 below) then every other
    slope of 2H' (the 1st, 3rd, ...), until there are H."""
    if num_heads & (num_heads - 1) == 0:
        return _step_slopes(num_heads)
    below = 2 ** (num_heads.bit_length() - 1)
    extra = step("every other slope of 2H' heads (the 1st, 3rd, ...)", _every_other, _step_slopes(2 * below),
                 start=0, axes=("head",))
    return step("the slopes of H' heads, then the extra ones", torch.cat,
                (_step_slopes(below), extra[: num_heads - below]))


def _every_other(slopes: Tensor, start: int = 0) -> Tensor:
    return slopes[start::2]


def _steps(num_heads: int, len_q: int, len_k: int) -> Tensor:
    """The chapter's formula step by step (``_steps.py`` searches small changes to each); equal to :func:`_reference`."""
    slopes = _step_all_slopes(num_heads).float()
    offset = step("the queries' offset L_k - L_q", operator.sub, len_k, len_q)
    query = step("the query positions p_i = L_k - L_q + i", torch.add, torch.arange(len_q)[:, None], offset)
    key = step("the key positions j = 0 .. L_k - 1", torch.arange, len_k)
    distance = step("the distance p_i - j", torch.sub, query, key, axes=("query", "key")).float()
    scaled = step("each head's slope times the distance", torch.mul, slopes[:, None, None], distance,
                  axes=("head", "query", "key"))
    return _visible(step("the bias: minus that", torch.neg, scaled, axes=("head", "query", "key")), len_q, len_k)


# -- known mistakes: wrong biases with the learner's signature ---------------------------------------


def _powers(n: int) -> list[float]:
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def _paper(n: int) -> list[float]:
    return alibi_slopes(n).tolist()


def _composed(n: int, powers: Callable[[int], list[float]], extra: slice = slice(0, None, 2)) -> list[float]:
    """The paper's rule for any H, from a rule ``powers`` for a power of 2 (right or mistaken) and the
    slice of twice that power's slopes that fills up a non-power of 2 (right: every other, from the 1st)."""
    if n & (n - 1) == 0:
        return powers(n)
    below = 2 ** (n.bit_length() - 1)
    return powers(below) + powers(2 * below)[extra][: n - below]


def _bias(slopes: Callable[[int], list[float]] = _paper, sign: float = -1.0, top_left: bool = False,
          shift: int = 0) -> Callable[[int, int, int], Tensor]:
    def bias(num_heads: int, len_q: int, len_k: int) -> Tensor:
        start = (0 if top_left else len_k - len_q) + shift
        distance = (torch.arange(start, start + len_q)[:, None] - torch.arange(len_k)[None, :]).float()
        m = torch.tensor(slopes(num_heads), dtype=torch.float32)
        return _visible(sign * m[:, None, None] * distance, len_q, len_k)

    return bias


def _visible_equal(case: Case, got: object, wrong: Callable[[int, int, int], Tensor]) -> bool:
    expected = wrong(**case.args)
    return (isinstance(got, Tensor) and got.shape == expected.shape and not got.dtype.is_complex
            and bool(torch.allclose(got.detach().cpu().double(), expected.double(), rtol=1e-4, atol=1e-6)))


def _slopes_of(case: Case, got: object) -> dict[str, object] | None:
    """The learner's slopes read back from its bias, when each head's bias is a slope times the distance."""
    n, len_q, len_k = case.args["num_heads"], case.args["len_q"], case.args["len_k"]
    if not isinstance(got, Tensor) or tuple(got.shape) != (n, len_q, len_k) or len_k < 2 or not got.dtype.is_floating_point:
        return None
    distance = (torch.arange(len_k - len_q, len_k)[:, None] - torch.arange(len_k)[None, :]).double()  # p_i - j
    g = got.detach().cpu().double()
    seen = causal_mask(len_q, len_k) & (distance > 0)
    if not seen.any():
        return None
    slopes = -(g[:, seen] / distance[seen]).median(dim=-1).values  # (H,)
    if not torch.allclose(g.masked_fill(~causal_mask(len_q, len_k), 0),
                          (-slopes[:, None, None] * distance).masked_fill(~causal_mask(len_q, len_k), 0), atol=1e-5):
        return None
    show = lambda values: ", ".join(f"{v:.4g}" for v in values[:6]) + (", ..." if len(values) > 6 else "")  # noqa: E731
    return {"yours": show(slopes.tolist()), "paper": show(_paper(n))}


def _not_power_of_2(case: Case) -> bool:
    n = case.args["num_heads"]
    return n & (n - 1) != 0


MISTAKES = [
    Mistake("the bias rewards distant keys instead of penalising them: its sign is reversed, or the distance is "
            "taken as j - p_i (key minus query, as a transposed (len_k, len_q) bias gives)",
            "the bias is -β_h * (p_i - j), with p_i = len_k - len_q + i the position of query i: zero for the "
            "query's own position, more negative further back.", _bias(sign=1.0)),
    Mistake("the slope exponent is off by one: 2^(-8h/H) with h the index from 0 gives the first head a slope of 1",
            "head h = 1 .. H gets β_h = 2^(-8h/H), at index h - 1: for H={num_heads} index 0 holds {first}, "
            "and the last is 2^-8.", _bias(slopes=lambda n: _composed(n, lambda p: [2.0 ** (-8.0 * h / p)
                                                                                for h in range(p)]))),
    Mistake("the 8 is missing from the exponent: the slopes are 2^(-h/H)",
            "the paper's slopes for a power of 2 are β_h = 2^(-8h/H), h = 1 .. H: the first is {first} for "
            "H={num_heads}, and the last is always 2^-8 = 1/256.",
            _bias(slopes=lambda n: _composed(n, lambda p: [2.0 ** (-(h + 1) / p) for h in range(p)]))),
    Mistake("the queries are one position too late: query i is placed at len_k - len_q + i + 1",
            "query i sits at position p_i = len_k - len_q + i (with len_q = len_k, at i): its own key gets bias 0.",
            _bias(shift=1)),
    Mistake("the queries are one position too early: query i is placed at len_k - len_q + i - 1",
            "query i sits at position p_i = len_k - len_q + i (with len_q = len_k, at i): its own key gets bias 0.",
            _bias(shift=-1)),
    Mistake("the queries are placed at the first positions, not the last (len_q < len_k)",
            "with a KV cache the new queries are the *last* len_q of the len_k positions: query i sits at position "
            "len_k - len_q + i, so its distance to key j is len_k - len_q + i - j (as `causal_mask(len_q, len_k)`).",
            _bias(top_left=True)),
    Mistake("the slopes are in reverse order (the last head's slope first)",
            "the first head (index 0) gets the steepest slope, 2^(-8/H) = {first} here, and each next head's "
            "slope is that much smaller.",
            _bias(slopes=lambda n: _paper(n)[::-1])),
    Mistake("for H={num_heads}, not a power of 2, the slopes are the first H of the next power of 2 ({next} heads), "
            "not the paper's rule",
            "for H={num_heads}: take the slopes of the largest power of 2 below H ({below} heads), then every other "
            "slope of twice that power (the 1st, 3rd, ...) until there are H.",
            looks_like=lambda case, got: _visible_equal(case, got, _bias(slopes=lambda n: _powers(
                2 ** n.bit_length())[:n])) and {"next": 2 ** case.args["num_heads"].bit_length(),
                                                 "below": 2 ** (case.args["num_heads"].bit_length() - 1)},
            when=_not_power_of_2),
    Mistake("the slopes are 1/2, 1/4, ... whatever the number of heads: they must depend on H",
            "the paper's slopes for H heads (H a power of 2) are β_h = 2^(-8h/H) for heads h = 1 .. H: "
            "for H={num_heads} the first is {first}, and the last is always 2^-8.",
            _bias(slopes=lambda n: [2.0 ** -(h + 1) for h in range(n)])),
    Mistake("for H not a power of 2, the extra slopes are the 2nd, 4th, ... of twice the power, not the 1st, 3rd, ...",
            "counting from the 1st: for H={num_heads} take the slopes of the largest power of 2 below H, then "
            "`slopes_of_twice_that[0::2]` (the 1st, 3rd, 5th, ...), not `[1::2]`, until there are H.",
            _bias(slopes=lambda n: _composed(n, _powers, slice(1, None, 2))), when=_not_power_of_2),
    Mistake("for H not a power of 2, the slopes are 2^(-8h/H) for every head h = 1 .. H instead of the paper's rule",
            "for H={num_heads}: take the slopes of the largest power of 2 below H, then every other slope of twice "
            "that power (the 1st, 3rd, ...) until there are H.", _bias(slopes=_powers), when=_not_power_of_2),
    Mistake("for H not a power of 2, the right slopes come out in another order (sorted)",
            "keep the paper's order: first all the slopes of the power of 2 below H, then the extra ones from "
            "twice that power; pretrained ALiBi models were trained with that order.",
            _bias(slopes=lambda n: sorted(_paper(n), reverse=True)), when=_not_power_of_2),
    Mistake("the slopes differ from the paper's: yours are {yours}; for H={num_heads} the paper's are {paper}",
            "the paper's slopes for H heads (a power of 2) are β_h = 2^(-8h/H), h = 1 .. H, computed in floating "
            "point (`8 / H`, not `8 // H`); for other H, those of the power of 2 below, then every other slope of "
            "twice that power.", looks_like=_slopes_of, fallback=True),
]

HINTS = [(r"arange|expected.*Long|Float but found",
          "build the distances as floats: `(query_pos[:, None] - key_pos[None, :]).float()`.")]


def check_alibi_bias(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(num_heads, len_q, len_k) -> bias (num_heads, len_q, len_k)`` (exercise 13).

    ``bias[h, i, j] = -β_h * (len_k - len_q + i - j)`` with the paper's slopes ``β_h``; entries for
    keys after their query are not compared. Seven cases; the first failing one is reported,
    naming the mistake. Never raises because of the learner's code (under
    ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(NAME, HINTS)

    def visible(num_heads: int, len_q: int, len_k: int) -> object:
        return _visible(fn(num_heads, len_q, len_k), len_q, len_k)

    learner = visible if callable(fn) else fn
    if callable(fn):
        visible.__wrapped__ = fn  # the learner's own signature, for feedback
    failure = run_check(session, learner, CASES, _reference, ("bias",), MISTAKES, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(CASES)} cases match the paper's biases (8, 4, 16, 2, 6 and 12 heads; "
                                "a decoding step and queries at the end of longer keys)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(lambda: list(CASES), _reference, _steps)]
