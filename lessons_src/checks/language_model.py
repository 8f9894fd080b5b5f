"""Check for exercise 14 (chapter "A language model and its heads"): the next-token distribution
with a temperature and top-k.

The learner writes ``next_token_probs(logits, temperature=1.0, top_k=None) -> probs``. The cases vary
the vocabulary, the batch axes, the temperature (below and above 1), top-k (none, small, with ties
at the k-th logit, larger than the vocabulary), and include logits in the hundreds, where a plain
``exp`` overflows. The mistakes are the table :data:`MISTAKES`, built on the framework (``_framework.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..language_model import next_token_probs
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_next_token_probs"]

NAME = "check_next_token_probs"


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(14)

    def rand(*shape: int, scale: float = 2.0) -> Tensor:
        return scale * torch.randn(*shape, generator=g)

    def case(description: str, logits: Tensor, temperature: float, top_k: int | None) -> Case:
        return Case(f"{description}, τ={temperature}, top_k={top_k}", {"logits": logits},
                    {"temperature": temperature, "top_k": top_k}, {"temperature": temperature, "top_k": top_k})

    ties = torch.tensor([[3.0, 1.0, 3.0, 0.5, 3.0, -1.0], [0.0, 2.0, 1.0, 2.0, -2.0, 0.5]])
    return [
        case("one distribution over 6 tokens", rand(6), 1.0, None),
        case("2 distributions over 7 tokens", rand(2, 7), 0.5, None),
        case("3 distributions over 9 tokens", rand(3, 9), 2.0, 3),
        case("a batch (2, 4) of distributions over 11 tokens", rand(2, 4, 11), 0.7, 4),
        case("ties at the k-th largest logit (all tied logits are kept)", ties, 1.0, 2),
        case("top_k larger than the vocabulary of 5 (keeps everything)", rand(2, 5), 1.5, 8),
        case("logits in the hundreds, where exp() overflows unless the maximum is subtracted",
             400.0 + rand(2, 6, scale=5.0), 0.5, None),
        # Rows whose largest logits are hundreds apart: subtracting the largest logit of the whole
        # tensor instead of each row's own underflows row 0 to 0 / 0.
        case("rows whose largest logits are hundreds apart (row 1's near 300)",
             rand(2, 6) + torch.tensor([[0.0], [300.0]]), 1.0, None),
    ]


def _log_sum_exp_form(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
    """A sound formulation whose float32 rounding differs from the softmax's: ``exp(x - logsumexp(x))``."""
    scaled = logits / temperature
    if top_k is not None:
        kth = torch.topk(scaled, min(top_k, scaled.size(-1)), dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.exp(scaled - torch.logsumexp(scaled, dim=-1, keepdim=True))


def _kth_largest(x: Tensor, k: int, dim: int = -1) -> Tensor:
    """The ``k``-th largest entry of ``x`` along ``dim``, that dim kept (size 1) so that it broadcasts."""
    return torch.topk(x, k, dim=dim).values.narrow(dim, k - 1, 1)


def _steps(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
    """The chapter's formula step by step (``_steps.py`` searches small changes to each); equal to
    :func:`lessons_src.next_token_probs`: scale, select, normalise."""
    rows = ("distribution", "token")
    scaled = step("scale: the logits divided by the temperature τ", torch.div, logits, temperature, axes=rows)
    if top_k is not None:
        kth = step("select: the k-th largest logit of each row", _kth_largest, scaled, k=min(top_k, scaled.size(-1)),
                   dim=-1, axes=rows)
        below = step("select: the logits below the k-th largest", torch.lt, scaled, kth, axes=rows)
        scaled = step("select: those logits set to -inf", Tensor.masked_fill, scaled, below, float("-inf"), axes=rows)
    return step("normalise: softmax over the vocabulary", torch.softmax, scaled, dim=-1, axes=rows)


def _probs(times: bool = False, renormalise: bool = True, fill_zero: bool = False, extra: int = 0,
           ignore_temperature: bool = False, ignore_top_k: bool = False, after_softmax: bool = False,
           dim: int = -1) -> Callable[..., Tensor]:
    """A wrong next_token_probs, one switch per mistake."""

    def probs(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
        t = 1.0 if ignore_temperature else temperature
        scaled = logits * t if times else logits / t
        if top_k is not None and not ignore_top_k:
            k = max(1, min(top_k + extra, scaled.size(-1)))
            kth = torch.topk(scaled, k, dim=-1).values[..., -1:]
            if after_softmax:
                p = torch.softmax(scaled, dim=dim).masked_fill(scaled < kth, 0.0)
                return p / p.sum(dim=-1, keepdim=True) if renormalise else p
            scaled = scaled.masked_fill(scaled < kth, 0.0 if fill_zero else float("-inf"))
        return torch.softmax(scaled, dim=dim)

    return probs


def _has_top_k(case: Case) -> bool:
    top_k = case.kwargs["top_k"]
    return top_k is not None and top_k < case.args["logits"].size(-1)


def _not_one(case: Case) -> bool:
    return case.kwargs["temperature"] != 1.0


def _exactly_k_with_ties(case: Case, got: object) -> bool:
    """Exactly k tokens kept per row where the reference keeps more (logits tied with the k-th)."""
    top_k = case.kwargs["top_k"]
    if top_k is None or not isinstance(got, Tensor):
        return False
    expected = next_token_probs(case.args["logits"], case.kwargs["temperature"], top_k)
    if got.shape != expected.shape or got.dtype.is_complex:
        return False
    kept = (got.detach() > 0).sum(dim=-1)
    return bool((kept == top_k).all() and ((expected > 0).sum(dim=-1) > top_k).any())


MISTAKES = [
    Mistake("the logits are multiplied by the temperature instead of divided by it",
            "divide: `logits / temperature`. A temperature above 1 must flatten the distribution, below 1 sharpen it.",
            _probs(times=True), when=_not_one),
    Mistake("the temperature is ignored", "divide the logits by `temperature` before the softmax ({temperature} here).",
            _probs(ignore_temperature=True), when=_not_one),
    Mistake("top_k is ignored", "keep only the top_k={top_k} largest logits: the others must get probability 0.",
            _probs(ignore_top_k=True), when=_has_top_k),
    Mistake("top-k zeroes probabilities after the softmax but does not renormalise: they no longer sum to 1",
            "mask the logits before the softmax (`masked_fill(..., float('-inf'))`), or divide the kept "
            "probabilities by their sum.", _probs(after_softmax=True, renormalise=False), when=_has_top_k),
    Mistake("top-k sets the other logits to 0, not -inf: they keep a probability",
            "a logit of 0 still gets weight exp(0); use `float('-inf')` for the logits outside the top k.",
            _probs(fill_zero=True), when=_has_top_k),
    Mistake("top-k keeps one token too many", "keep the logits >= the k-th largest: `torch.topk(scaled, top_k)"
            ".values[..., -1:]` is the k-th (not k+1-th) largest.", _probs(extra=1), when=_has_top_k),
    Mistake("top-k keeps one token too few", "keep the logits >= the k-th largest, the k-th included: compare with "
            "`>=` (or mask with `<`), not `>`.", _probs(extra=-1), when=_has_top_k),
    Mistake("top-k keeps exactly k tokens, dropping logits tied with the k-th",
            "keep every logit >= the k-th largest (`scaled.masked_fill(scaled < kth, float('-inf'))` with "
            "`kth = torch.topk(scaled, top_k).values[..., -1:]`), not just the k indices `topk` returns: tied "
            "tokens are equally likely and all stay.", looks_like=_exactly_k_with_ties),
    Mistake("the softmax runs over the wrong dim", "normalise over the vocabulary, the last dim: "
            "`torch.softmax(scaled, dim=-1)`.", _probs(dim=0),
            when=lambda case: case.args["logits"].dim() > 1),
]

HINTS = [(r"topk|selected index k out of range",
          "`torch.topk(x, k)` needs k <= the size of the last dim: use `min(top_k, logits.size(-1))`.")]


def check_next_token_probs(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(logits, temperature=1.0, top_k=None) -> probs`` (exercise 14).

    ``logits (..., |V|)`` -> ``softmax(logits / temperature)`` over the last dim, where only the logits
    >= the ``top_k``-th largest are kept (ties kept; all when ``top_k`` is None or >= |V|). Eight cases;
    the first failing one is reported, naming the mistake. Never raises because of the learner's
    code (under ``LESSONS_SRC_STRICT=1`` a failure raises AssertionError).
    """
    session = Session(NAME, HINTS)
    cases = _cases()
    failure = run_check(session, fn, cases, next_token_probs, ("probs",), MISTAKES, sound=(_log_sum_exp_form,),
                        steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match the reference (temperatures 0.5 to 2, top-k with "
                                "ties and larger than the vocabulary, a batch, logits in the hundreds, rows hundreds apart)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_cases, next_token_probs, _steps)]
