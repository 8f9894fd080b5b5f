"""Check for exercise 2 (chapter "Why scale by √d_k"): attention weights with a temperature.

The learner writes ``attention_weights(query, key, temperature=None)``, returning
``softmax(Q Kᵀ / temperature)`` over the keys, where ``temperature=None`` means the standard
``√d_k`` (``d_k = query.size(-1)``). :func:`check_attention_weights` compares it with the
reference on several shapes and temperatures and names the mistake it recognises: no scaling,
dividing by d_k instead of √d_k, multiplying instead of dividing, the square root of the wrong
dimension (the number of queries or keys, the batch or the heads), scaling after the softmax,
the softmax over the wrong axis, returning the scores, a temperature that is ignored, multiplied
or square-rooted, and a hand-written softmax whose exponentials overflow.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ._result import CheckResult, call_learner, close, finish, shape_of

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


@dataclass(frozen=True)
class _Case:
    description: str
    query: Tensor
    key: Tensor
    query_axes: tuple[str, ...]  # the name of each axis of query, e.g. ("B", "H", "Lq", "d_k")
    key_axes: tuple[str, ...]
    temperature: float | None = None  # None: call without the keyword, to test its default
    overflows: bool = False  # exp(scores) overflows float32 here: a hand-written softmax gives NaN


def _cases() -> list[_Case]:
    g = torch.Generator().manual_seed(2)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    # The sizes keep every candidate scale apart: sqrt(d_k) = 4 but d_k = 16, sqrt(Lq) = 1.7,
    # sqrt(Lk) = 2.2, sqrt(B) = 1.4, sqrt(H) = 2 (tested), so each mistake gives its own weights.
    return [
        _Case("one sequence, Lq=3, Lk=5, d_k=16, default temperature",
              rand(3, 16), rand(5, 16), ("Lq", "d_k"), ("Lk", "d_k")),
        _Case("batch of 2 x 4 heads, (B, H, Lq, d_k) = (2, 4, 3, 16), Lk=5, default temperature",
              rand(2, 4, 3, 16), rand(2, 4, 5, 16), ("B", "H", "Lq", "d_k"), ("B", "H", "Lk", "d_k")),
        _Case("batch of 2, Lq=6, Lk=7, wide d_k=64, default temperature",
              rand(2, 6, 64), rand(2, 7, 64), ("B", "Lq", "d_k"), ("B", "Lk", "d_k")),
        _Case("one sequence, Lq=3, Lk=5, d_k=16, temperature=2.0",
              rand(3, 16), rand(5, 16), ("Lq", "d_k"), ("Lk", "d_k"), temperature=2.0),
        _Case("one sequence, Lq=4, Lk=6, d_k=16, temperature=0.05 (a very sharp softmax)",
              rand(4, 16), rand(6, 16), ("Lq", "d_k"), ("Lk", "d_k"), temperature=0.05, overflows=True),
    ]


# -- known mistakes --------------------------------------------------------------------------------


def _mistakes(case: _Case) -> list[tuple[Tensor, str, str]]:
    """Known wrong answers for one case: (weights, what is wrong, how to fix it)."""
    q, k = case.query, case.key
    d_k = q.size(-1)
    raw = q @ k.transpose(-2, -1)  # (..., Lq, Lk): the unscaled scores
    temperature = math.sqrt(d_k) if case.temperature is None else case.temperature
    scores = raw / temperature
    out: list[tuple[Tensor, str, str]] = []

    def add(weights: Tensor, what: str, fix: str) -> None:
        out.append((weights, what, fix))

    def softmax(s: Tensor, dim: int = -1) -> Tensor:
        return torch.softmax(s, dim=dim)

    if case.temperature is None:
        add(softmax(raw), "the scores are not scaled",
            f"divide the scores Q Kᵀ by sqrt(d_k) (here sqrt({d_k}) = {math.sqrt(d_k):g}) before the softmax: "
            "their variance grows like d_k, so their spread like sqrt(d_k).")
        add(softmax(raw / d_k), "the scores are divided by d_k instead of sqrt(d_k)",
            f"divide by math.sqrt(d_k) = {math.sqrt(d_k):g}, not d_k = {d_k}: dividing by d_k shrinks the "
            "scores' variance to 1/d_k, and wide heads would attend almost uniformly.")
        add(softmax(raw * math.sqrt(d_k)), "the scores are multiplied by sqrt(d_k) instead of divided",
            "scale with `/ math.sqrt(d_k)`, not `* math.sqrt(d_k)`.")
        # sqrt of the wrong dimension: any axis of query or key other than the last (d_k).
        seen = {d_k}
        for tensor, axes, name in ((q, case.query_axes, "query"), (k, case.key_axes, "key")):
            for i, axis in enumerate(axes[:-1]):
                n = tensor.size(i)
                if n in seen:
                    continue
                seen.add(n)
                add(softmax(raw / math.sqrt(n)),
                    f"the scores are divided by sqrt({n}), the square root of {axis} = {name}.size({i}) "
                    f"({_AXIS_MEANING[axis]}), instead of sqrt(d_k) = sqrt({d_k})",
                    "d_k is the *last* dimension of the query and the key: `d_k = query.size(-1)`, "
                    "whatever leading (batch, head) dimensions there are.")
        add(softmax(raw) / math.sqrt(d_k), "the weights are divided by sqrt(d_k) after the softmax",
            "scale the scores *before* the softmax: "
            "`torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k), dim=-1)`; "
            "divided afterwards, the weights no longer sum to 1.")
    else:
        t = case.temperature
        add(softmax(raw / math.sqrt(d_k)), f"temperature={t:g} is ignored: the scores are divided by sqrt(d_k)",
            "divide by `temperature` when it is given; use math.sqrt(d_k) only when it is None.")
        add(softmax(raw * t), f"the scores are multiplied by temperature={t:g} instead of divided",
            "a temperature divides the scores: `scores = query @ key.transpose(-2, -1) / temperature`.")
        add(softmax(raw / math.sqrt(t)), f"the scores are divided by sqrt(temperature) = sqrt({t:g})",
            "the temperature replaces sqrt(d_k) as a whole: divide by `temperature` itself, with no square root.")
    add(scores, "the function returns the scores, before the softmax",
        "return the weights: `torch.softmax(scores, dim=-1)`, each row summing to 1.")
    for dim, axis in enumerate(case.query_axes[:-1]):
        # Softmax over any axis but the last (the keys): the queries, the heads or the batch.
        meaning = "the queries" if axis == "Lq" else _AXIS_MEANING[axis]
        add(softmax(scores, dim=dim), f"the softmax runs over {axis} ({meaning}; dim={dim} here), not over the keys",
            "take the softmax over the last dim, the keys: `torch.softmax(scores, dim=-1)`, "
            "so each query's weights sum to 1.")
    return out


def _diagnose(case: _Case, weights: Tensor) -> tuple[str, str] | None:
    for candidate, what, fix in _mistakes(case):
        if close(weights, candidate, tol=1e-4):
            return what, fix
    return None


# -- the check -------------------------------------------------------------------------------------


def _failure(summary: str, hint: str, details: list[str] | None = None) -> CheckResult:
    """A failed result, not yet finished (the caller may add details, then calls ``finish``)."""
    return CheckResult(CHECK, False, summary, hint, details or [])


def _takes_temperature(fn: Callable[..., object]) -> bool:
    """False only when the signature provably has no ``temperature`` keyword."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature: just call them
        return True
    try:
        signature.bind(torch.zeros(1, 1), torch.zeros(1, 1), temperature=1.0)
    except TypeError:
        return False
    return True


def _with_hint(failure: CheckResult) -> CheckResult:
    """``call_learner``'s failure, with a sharper hint for the errors this exercise often raises.

    (Under ``LESSONS_SRC_STRICT=1`` call_learner has already raised, with its generic hint.)
    """
    if "NoneType" in failure.summary:
        failure.hint = ("`temperature=None` means sqrt(d_k): start with `if temperature is None: "
                        "temperature = math.sqrt(query.size(-1))`.")
    elif any(s in failure.summary for s in ("mat1 and mat2", "size of tensor", "shapes cannot")):
        failure.hint = ("transpose the last two dims of key: `query @ key.transpose(-2, -1)` has shape "
                        "(..., Lq, Lk). (`.T` reverses *all* the dims of a batched tensor.)")
    return failure


def _judge(case: _Case, where: str, result: object, expected: Tensor) -> CheckResult | None:
    """None when ``result`` matches ``expected``; otherwise the failure, naming the mistake."""
    if isinstance(result, (tuple, list)):
        return _failure(f"{where}: returned a {type(result).__name__} of {len(result)} items, expected one tensor",
                        "return only the weights, shape (..., Lq, Lk): this function has no values, so no output.")
    if not isinstance(result, Tensor):
        return _failure(f"{where}: returned {type(result).__name__}, expected a torch.Tensor of weights",
                        "end your function with `return weights`.")
    shape = tuple(result.shape)
    expected_shape = tuple(expected.shape)
    if shape != expected_shape:
        swapped = (*expected_shape[:-2], expected_shape[-1], expected_shape[-2])
        if shape == swapped:
            return _failure(f"{where}: the weights have shape {shape} = (..., Lk, Lq), expected {expected_shape} "
                            "= (..., Lq, Lk)",
                            "rows are queries and columns keys: compute `query @ key.transpose(-2, -1)`, "
                            "not `key @ query.transpose(-2, -1)`.")
        return _failure(f"{where}: the weights have shape {shape}, expected {expected_shape} = (..., Lq, Lk)",
                        "the scores are `query @ key.transpose(-2, -1)`: transpose only the last two dims of key "
                        "(`.T` reverses all of them when there are batch dimensions).")
    if close(result, expected):
        return None
    if not torch.isfinite(result).all():
        if case.overflows:
            return _failure(f"{where}: the weights contain NaN or inf",
                            "with a small temperature the scores are large, and exp() of a score above about 88 "
                            "overflows float32 to inf (inf / inf = NaN). Use `torch.softmax(scores, dim=-1)`, or "
                            "subtract each row's max before exp(): `scores - scores.amax(-1, keepdim=True)`.")
        return _failure(f"{where}: the weights contain NaN or inf",
                        "look for a division by zero, or a hand-written exp() that overflows; "
                        "`torch.softmax(scores, dim=-1)` is numerically safe.")
    diagnosis = _diagnose(case, result)
    if diagnosis is not None:
        what, fix = diagnosis
        return _failure(f"{where}: {what}", fix)
    difference = (result.detach().double() - expected.double()).abs().max().item()
    details = [f"largest difference from the reference: {difference:.3g}"]
    sums = result.detach().double().sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        return _failure(f"{where}: the weights differ from the reference, and their rows do not sum to 1",
                        "apply the softmax over the last dim (the keys) as the last step.", details)
    return _failure(f"{where}: the weights differ from the reference",
                 "weights = torch.softmax(query @ key.transpose(-2, -1) / temperature, dim=-1), with "
                 "temperature = math.sqrt(query.size(-1)) when it is None.", details)


def check_attention_weights(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``attention_weights(query, key, temperature=None)`` (exercise 2).

    The function must return ``softmax(Q Kᵀ / temperature)`` over the keys, shape
    ``(..., Lq, Lk)``, with ``temperature=None`` meaning ``√d_k``. Five cases: one sequence,
    batched heads, a wide d_k, a given temperature, and a tiny temperature that overflows a
    hand-written softmax. Names the mistake when it recognises one; never raises because of
    the learner's code (except under ``LESSONS_SRC_STRICT=1``: a failure raises AssertionError).
    """
    if not callable(fn):
        return finish(_failure(f"expected a function, got {type(fn).__name__}",
                               "pass the function itself, without calling it: "
                               "`check_attention_weights(attention_weights)`."))
    cases = _cases()
    for number, case in enumerate(cases, start=1):
        where = f"case {number}/{len(cases)} ({case.description})"
        if case.temperature is None:
            result, failure = call_learner(CHECK, where, fn, case.query, case.key)
        else:
            if not _takes_temperature(fn):
                return finish(_failure(f"{where}: your function has no `temperature` parameter",
                                       "define it as `def attention_weights(query, key, temperature=None):`.",
                                       [f"cases 1-{number - 1} (the default temperature) passed"]))
            result, failure = call_learner(CHECK, where, fn, case.query, case.key, temperature=case.temperature)
        if failure is not None:
            return _with_hint(failure)
        expected = _reference_weights(case.query, case.key, case.temperature)
        failed = _judge(case, where, result, expected)
        if failed is not None:
            if number > 1:
                failed.details.insert(0, "case 1 passed" if number == 2 else f"cases 1-{number - 1} passed")
            return finish(failed)
    shapes = ", ".join(shape_of(c.query) for c in cases[:3])
    return finish(CheckResult(CHECK, True, f"all {len(cases)} cases match the reference (queries of shape {shapes}; "
                                           "temperatures sqrt(d_k), 2.0 and 0.05)"))
