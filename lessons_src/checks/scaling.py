"""Check for exercise 2 (chapter "Why scale by √d_k"): attention weights with a temperature.

The learner writes ``attention_weights(query, key, temperature=None)``, returning
``softmax(Q Kᵀ / temperature)`` over the keys, where ``temperature=None`` means the standard
``√d_k`` (``d_k = query.size(-1)``). :func:`check_attention_weights` compares it with the
reference on several shapes and temperatures and names the mistake it recognises: no scaling,
dividing by d_k instead of √d_k, multiplying instead of dividing, the square root of the wrong
dimension (the number of queries or keys, the batch or the heads), scaling after the softmax,
the softmax over the wrong axis, returning the scores, a log-softmax, `d_k ** 1/2` (precedence),
any other number in place of √d_k, a temperature that is ignored, multiplied or square-rooted,
and a hand-written softmax whose exponentials overflow. Built on ``_framework.py``: the cases
(:func:`_cases`) and the mistakes (:data:`MISTAKES`) are tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ._framework import Case, Mistake, Session, done, global_max_softmax, passed, run_check
from ._result import CheckResult
from ._steps import step

__all__ = ["check_attention_weights"]

CHECK = "check_attention_weights"

#: What each axis name means, for feedback.
_AXIS_MEANING = {
    "B": "the batch size",
    "H": "the number of heads",
    "Lq": "the number of queries",
    "Lk": "the number of keys",
    "d_k": "the query/key width",
}


def _reference_weights(query: Tensor, key: Tensor, temperature: float | None = None) -> Tensor:
    """The reference: ``softmax(Q Kᵀ / temperature)`` over the keys; None means ``√d_k``.

    query ``(..., Lq, d_k)``, key ``(..., Lk, d_k)`` -> weights ``(..., Lq, Lk)``. With the
    default temperature it equals the weights of ``lessons_src.scaled_dot_product_attention``
    (tested).
    """
    if temperature is None:
        temperature = math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1) / temperature  # (..., Lq, Lk)
    return torch.softmax(scores, dim=-1)  # (..., Lq, Lk)


def _steps(query: Tensor, key: Tensor, temperature: float | None = None) -> Tensor:
    """The exercise's formula step by step (``_steps.py`` searches small changes to each); equal to
    :func:`_reference_weights`. The temperature is a plain number, so a search may replace it by a size; the
    softmax is the stable one (each query's largest score subtracted), so that its own steps can be named."""
    qk = ("query", "key")
    scores = step("scores = query · keyᵀ", torch.matmul, query, key.transpose(-2, -1), axes=qk)
    tau = math.sqrt(query.size(-1)) if temperature is None else temperature
    scores = step("divide the scores by the temperature τ (√d_k when None)", torch.div, scores, tau, axes=qk)
    # The softmax over the keys, written as the exercise asks for it: finite at any temperature.
    largest = step("each query's largest score: max over the keys", torch.amax, scores, dim=-1, keepdim=True,
                   axes=qk)
    shifted = step("subtract each query's largest score", torch.sub, scores, largest, axes=qk)
    exps = step("exponentials exp(score - largest)", torch.exp, shifted, axes=qk)
    total = step("their sum over the keys", torch.sum, exps, dim=-1, keepdim=True, axes=qk)
    return step("softmax: divide by the sum", torch.div, exps, total, axes=qk)


def _scores_of(case: Case) -> Tensor:
    q, k, t = case.args["query"], case.args["key"], case.kwargs.get("temperature")
    return q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if t is None else t)  # (..., Lq, Lk)


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(2)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    def case(description: str, q: Tensor, k: Tensor, q_axes: tuple[str, ...], k_axes: tuple[str, ...],
             temperature: float | None = None, overflows: bool = False) -> Case:
        d_k = q.size(-1)
        kwargs = {} if temperature is None else {"temperature": temperature}
        return Case(f"{description}, d_k={d_k}", {"query": q, "key": k}, kwargs,
                    {"d_k": d_k, "sqrt_d_k": f"{math.sqrt(d_k):.3g}", "query_axes": q_axes, "key_axes": k_axes,
                     "t": temperature, "overflows": overflows})

    # Every case has its own d_k (12, 20, 64, 10, 16: no number written in the code passes them all),
    # and the sizes keep every candidate scale apart: sqrt(d_k) differs from d_k, d_k / 2, 2 d_k
    # and the square root of every other axis, so each mistake gives its own weights.
    return [
        case("one sequence, Lq=3, Lk=5, default temperature", rand(3, 12), rand(5, 12), ("Lq", "d_k"), ("Lk", "d_k")),
        case("batch of 2 x 4 heads, (B, H, Lq, d_k) = (2, 4, 3, 20), Lk=5, default temperature",
             rand(2, 4, 3, 20), rand(2, 4, 5, 20), ("B", "H", "Lq", "d_k"), ("B", "H", "Lk", "d_k")),
        case("batch of 2, Lq=6, Lk=7, wide d_k, default temperature",
             rand(2, 6, 64), rand(2, 7, 64), ("B", "Lq", "d_k"), ("B", "Lk", "d_k")),
        case("one sequence, Lq=3, Lk=5, temperature=2.0", rand(3, 10), rand(5, 10), ("Lq", "d_k"), ("Lk", "d_k"),
             temperature=2.0),
        case("one sequence, Lq=4, Lk=6, temperature=0.05 (a very sharp softmax)", rand(4, 16), rand(6, 16),
             ("Lq", "d_k"), ("Lk", "d_k"), temperature=0.05, overflows=True),
        # Rows whose largest scores are hundreds apart: a softmax stabilised with the maximum of the
        # whole tensor (not of each row) gives 0 / 0 in the rows far below it.
        case("one sequence, Lq=3, Lk=5, rows whose largest scores are hundreds apart (query 2's near 300)",
             rand(3, 14) * torch.tensor([[1.0], [1.0], [150.0]]), rand(5, 14), ("Lq", "d_k"), ("Lk", "d_k")),
    ]


# -- known mistakes --------------------------------------------------------------------------------


def _weights(scale: Callable[[Tensor, int, float | None], Tensor], dim: int = -1, log: bool = False,
             after: Callable[[Tensor, int], Tensor] | None = None) -> Callable[..., Tensor]:
    """A wrong ``attention_weights``: ``scale(raw_scores, d_k, temperature)`` replaces the division."""

    def attention_weights(query: Tensor, key: Tensor, temperature: float | None = None) -> Tensor:
        raw = query @ key.transpose(-2, -1)  # (..., Lq, Lk)
        scores = scale(raw, query.size(-1), temperature)
        weights = torch.log_softmax(scores, dim=dim) if log else torch.softmax(scores, dim=dim)
        return after(weights, query.size(-1)) if after is not None else weights

    return attention_weights


def _right(raw: Tensor, d_k: int, t: float | None) -> Tensor:
    return raw / (math.sqrt(d_k) if t is None else t)


def _default(case: Case) -> bool:
    return case.info["t"] is None


def _given(case: Case) -> bool:
    return case.info["t"] is not None


def _wrong_axis_root(case: Case, got: object) -> dict[str, object] | None:
    """The scores divided by the square root of another axis than d_k: that axis, for the feedback."""
    q, k = case.args["query"], case.args["key"]
    raw = q @ k.transpose(-2, -1)
    for tensor, axes, name in ((q, case.info["query_axes"], "query"), (k, case.info["key_axes"], "key")):
        for i, axis in enumerate(axes[:-1]):
            n = tensor.size(i)
            if n != q.size(-1) and isinstance(got, Tensor) and got.shape == raw.shape and torch.allclose(
                    got.double(), torch.softmax(raw / math.sqrt(n), -1).double(), atol=1e-4):
                return {"n": n, "axis": axis, "tensor": name, "i": i, "meaning": _AXIS_MEANING[axis]}
    return None


def _softmax_axis(case: Case, got: object) -> dict[str, object] | None:
    """The softmax taken over another axis than the keys: that axis."""
    q, k = case.args["query"], case.args["key"]
    scores = _right(q @ k.transpose(-2, -1), q.size(-1), case.info["t"])
    for dim, axis in enumerate(case.info["query_axes"][:-1]):
        if isinstance(got, Tensor) and got.shape == scores.shape and torch.allclose(
                got.double(), torch.softmax(scores, dim=dim).double(), atol=1e-4):
            meaning = "the queries" if axis == "Lq" else _AXIS_MEANING[axis]
            return {"axis": axis, "dim": dim, "meaning": meaning}
    return None


def _scale_used(case: Case, got: object) -> float | None:
    """The number the learner divided the scores by, read off its weights; None if there is none."""
    raw = (case.args["query"] @ case.args["key"].transpose(-2, -1)).double()
    if not isinstance(got, Tensor) or got.shape != raw.shape or got.dtype.is_complex or not (got > 0).all():
        return None
    x = raw - raw.mean(-1, keepdim=True)
    y = got.double().log()
    y = y - y.mean(-1, keepdim=True)
    slope = float((x * y).sum() / (x * x).sum())  # y = x / c
    if slope <= 0 or not torch.allclose(y, x * slope, atol=1e-3):
        return None
    return 1.0 / slope


def _other_number(case: Case, got: object) -> dict[str, object] | None:
    c = _scale_used(case, got)
    right = math.sqrt(case.info["d_k"]) if case.info["t"] is None else case.info["t"]
    if c is None or math.isclose(c, right, rel_tol=1e-3):
        return None
    return {"c": f"{c:.4g}", "right": f"{right:.4g}"}


def _overflowed(case: Case, got: object) -> bool:
    return case.info["overflows"] and isinstance(got, Tensor) and not torch.isfinite(got).all()


_WHICH_D = ("d_k is the *last* dimension of the query and the key: `d_k = query.size(-1)`, whatever leading "
            "(batch, head) dimensions there are.")

MISTAKES = [
    Mistake("the weights have shape (..., Lk, Lq): the scores are key @ queryᵀ",
            "rows are queries and columns keys: compute `query @ key.transpose(-2, -1)`.",
            _weights(lambda raw, d, t: raw.transpose(-2, -1) / math.sqrt(d))),
    Mistake("the scores are not scaled", "divide the scores Q Kᵀ by sqrt(d_k) (here sqrt({d_k}) = {sqrt_d_k}) "
            "before the softmax: their variance grows like d_k, so their spread like sqrt(d_k).",
            _weights(lambda raw, d, t: raw), when=_default),
    Mistake("`d_k ** 1/2` is not sqrt(d_k): `**` binds tighter than `/`, so the scores are divided by d_k / 2",
            "write `d_k ** 0.5` or `math.sqrt(d_k)`: `d_k ** 1/2` means `(d_k ** 1) / 2`.",
            _weights(lambda raw, d, t: raw / (d ** 1 / 2)), when=_default),
    Mistake("`scores / d_k ** 1/2` is not scores / sqrt(d_k): the scores are divided by d_k, then by 2",
            "write `scores / d_k ** 0.5` or `scores / math.sqrt(d_k)`.",
            _weights(lambda raw, d, t: raw / d ** 1 / 2), when=_default),
    Mistake("the scores are divided by d_k instead of sqrt(d_k)",
            "divide by math.sqrt(d_k) = {sqrt_d_k}, not d_k = {d_k}: dividing by d_k shrinks the scores' variance to "
            "1/d_k, and wide heads would attend almost uniformly.", _weights(lambda raw, d, t: raw / d), when=_default),
    Mistake("the scores are multiplied by sqrt(d_k) instead of divided",
            "scale with `/ math.sqrt(d_k)`, not `* math.sqrt(d_k)`.",
            _weights(lambda raw, d, t: raw * math.sqrt(d)), when=_default),
    Mistake("the scores are divided by sqrt({n}), the square root of {axis} = {tensor}.size({i}) ({meaning}), "
            "instead of sqrt(d_k) = sqrt({d_k})", _WHICH_D, looks_like=_wrong_axis_root, when=_default),
    Mistake("the weights are divided by sqrt(d_k) after the softmax",
            "scale the scores *before* the softmax: `torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k), "
            "dim=-1)`; divided afterwards, the weights no longer sum to 1.",
            _weights(lambda raw, d, t: raw, after=lambda w, d: w / math.sqrt(d)), when=_default),
    Mistake("temperature={t:g} is ignored: the scores are divided by sqrt(d_k)",
            "divide by `temperature` when it is given; use math.sqrt(d_k) only when it is None.",
            _weights(lambda raw, d, t: raw / math.sqrt(d)), when=_given),
    Mistake("the scores are multiplied by temperature={t:g} instead of divided",
            "a temperature divides the scores: `scores = query @ key.transpose(-2, -1) / temperature`.",
            _weights(lambda raw, d, t: raw * t), when=_given),
    Mistake("the scores are divided by sqrt(temperature) = sqrt({t:g})",
            "the temperature replaces sqrt(d_k) as a whole: divide by `temperature` itself, with no square root.",
            _weights(lambda raw, d, t: raw / math.sqrt(t)), when=_given),
    Mistake("the function returns the scores, before the softmax",
            "return the weights: `torch.softmax(scores, dim=-1)`, each row summing to 1.",
            lambda query, key, temperature=None: _right(query @ key.transpose(-2, -1), query.size(-1), temperature)),
    Mistake("the weights are a log-softmax (log-probabilities), not a softmax",
            "use `torch.softmax(scores, dim=-1)`: weights are probabilities in [0, 1] that sum to 1.",
            _weights(_right, log=True)),
    Mistake("the softmax runs over {axis} ({meaning}; dim={dim} here), not over the keys",
            "take the softmax over the last dim, the keys: `torch.softmax(scores, dim=-1)`, "
            "so each query's weights sum to 1.", looks_like=_softmax_axis),
    global_max_softmax(lambda case: _scores_of(case)),
    Mistake("the weights contain NaN or inf: a hand-written softmax overflows",
            "with a small temperature the scores are large, and exp() of a score above about 88 overflows float32 "
            "to inf (inf / inf = NaN). Use `torch.softmax(scores, dim=-1)`, or subtract each row's max before exp(): "
            "`scores - scores.amax(-1, keepdim=True)`.", looks_like=_overflowed),
    Mistake("the weights' rows do not sum to 1", "apply the softmax over the last dim (the keys) as the last step.",
            looks_like=lambda case, got: not torch.allclose(got.double().sum(-1), torch.ones(()).double(), atol=1e-4)
            and bool(torch.isfinite(got).all()) and _other_number(case, got) is None),
    Mistake("the scores are divided by {c} instead of {right}: a number written in the code, or the wrong dimension",
            "divide by `temperature`, or by `math.sqrt(query.size(-1))` when it is None; a number written in the "
            "code is right for one d_k only.", looks_like=_other_number),
]

#: Errors this exercise often raises, and their fix (before the framework's general table).
HINTS = [
    (r"NoneType", "`temperature=None` means sqrt(d_k): start with `if temperature is None: "
                  "temperature = math.sqrt(query.size(-1))`."),
    (r"mat1 and mat2|shapes cannot|Expected size for first two dimensions of batch2",
     "transpose the last two dims of key: `query @ key.transpose(-2, -1)` has shape (..., Lq, Lk). (`.T` reverses "
     "*all* the dims of a batched tensor.)"),
]


def check_attention_weights(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``attention_weights(query, key, temperature=None)`` (exercise 2).

    The function must return ``softmax(Q Kᵀ / temperature)`` over the keys, shape
    ``(..., Lq, Lk)``, with ``temperature=None`` meaning ``√d_k``. Five cases: one sequence,
    batched heads, a wide d_k, a given temperature, and a tiny temperature that overflows a
    hand-written softmax. Names the mistake when it recognises one; never raises because of
    the learner's code (except under ``LESSONS_SRC_STRICT=1``: a failure raises AssertionError).
    """
    session = Session(CHECK, HINTS)
    cases = _cases()
    failure = run_check(session, fn, cases, _reference_weights, ("weights",), MISTAKES, steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match the reference (d_k = 12, 20, 64, 10, 16, 14; "
                                "temperatures sqrt(d_k), 2.0 and 0.05; rows whose scores are hundreds apart)"))


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_cases, _reference_weights, _steps)]
