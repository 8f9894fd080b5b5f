"""Check for exercise 1 (chapter "Attention from scratch"): scaled dot-product attention."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask, padding_mask
from ._result import CheckResult, close, error_hint, finish, learner_error, receive, same_up_to_nan, shape_of

__all__ = ["check_scaled_dot_product_attention"]


# -- scaled dot-product attention (exercise 1) -------------------------------------------------


@dataclass(frozen=True)
class _Case:
    description: str
    query: Tensor
    key: Tensor
    value: Tensor
    mask: Tensor | None = None


def _attention_cases() -> list[_Case]:
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    # d_k = 16 keeps the scales apart: sqrt(d_k) = 4 vs d_k = 16. Lq != Lk exposes axis mix-ups.
    lengths_mask = padding_mask([5, 3])[:, None, :]  # (B, 1, Lk)
    row_mask = torch.ones(3, 5, dtype=torch.bool)
    row_mask[0, 4] = row_mask[2, 0] = False
    row_mask[1] = False  # query 1 may attend to nothing
    return [
        _Case("one sequence, Lq=3, Lk=5, d_k=16, d_v=6, no mask", rand(3, 16), rand(5, 16), rand(5, 6)),
        _Case(
            "batch of 2 x 4 heads, Lq=Lk=5, d_k=16, d_v=16, no mask",
            rand(2, 4, 5, 16),
            rand(2, 4, 5, 16),
            rand(2, 4, 5, 16),
        ),
        _Case(
            "Lq=Lk=4 with a causal mask (True = may attend)",
            rand(4, 16),
            rand(4, 16),
            rand(4, 8),
            causal_mask(4),
        ),
        _Case(
            "batch of 2, Lq=4, Lk=5, padding mask of shape (2, 1, 5): second sequence has 3 real keys",
            rand(2, 4, 16),
            rand(2, 5, 16),
            rand(2, 5, 8),
            lengths_mask,
        ),
        _Case(
            "Lq=3, Lk=5, query 1 may attend to nothing (its weights and output must be 0)",
            rand(3, 16),
            rand(5, 16),
            rand(5, 6),
            row_mask,
        ),
    ]


def _softmax_masked(scores: Tensor, mask: Tensor | None, dim: int = -1) -> Tensor:
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=dim)


def _attention_mistakes(case: _Case) -> list[tuple[Tensor, Tensor, str, str]]:
    """Known wrong implementations: (output, weights, what is wrong, how to fix)."""
    q, k, v, mask = case.query, case.key, case.value, case.mask
    d_k = q.size(-1)
    raw = q @ k.transpose(-2, -1)
    scaled = raw / math.sqrt(d_k)
    out: list[tuple[Tensor, Tensor, str, str]] = []

    def add(weights: Tensor, what: str, fix: str) -> None:
        out.append((weights @ v, weights, what, fix))

    add(_softmax_masked(raw, mask), "the scores are not scaled",
        "divide the scores Q Kᵀ by sqrt(d_k) (here sqrt(16) = 4) before the softmax.")
    add(_softmax_masked(raw / d_k, mask), "the scores are divided by d_k instead of sqrt(d_k)",
        "divide by math.sqrt(d_k), not d_k: the variance of q·k grows like d_k, so its spread like sqrt(d_k).")
    add(_softmax_masked(raw * math.sqrt(d_k), mask), "the scores are multiplied by sqrt(d_k) instead of divided",
        "scale with `/ math.sqrt(d_k)`.")
    correct = _softmax_masked(scaled, mask).nan_to_num(0.0)
    out.append((correct @ v, scaled, "the weights returned are the scores, before the softmax",
                "return the weights after the softmax (each row sums to 1), not the scores."))
    add(_softmax_masked(scaled, mask, dim=-2), "the softmax runs over the queries (dim=-2)",
        "take the softmax over the keys, the last dim: `torch.softmax(scores, dim=-1)`, "
        "so each query's weights sum to 1.")
    if mask is not None:
        add(_softmax_masked(scaled, ~mask), "the mask is inverted",
            "our masks mean True = may attend: hide the positions where the mask is False, "
            "e.g. `scores.masked_fill(~mask, float('-inf'))`.")
        add(torch.softmax(scaled, dim=-1), "the mask is ignored",
            "apply the mask to the scores before the softmax: `scores.masked_fill(~mask, float('-inf'))`.")
        add(torch.softmax(scaled.masked_fill(~mask, 0.0), dim=-1), "masked scores are set to 0, not -inf",
            "a score of 0 still gets weight exp(0); fill masked scores with float('-inf') "
            "(or the dtype's most negative value) so they get weight 0.")
        add(torch.softmax(scaled, dim=-1).masked_fill(~mask, 0.0), "the mask is applied after the softmax",
            "mask the scores before the softmax, so the remaining weights still sum to 1.")
    return out


def _diagnose_attention(case: _Case, output: Tensor, weights: Tensor) -> tuple[str, str] | None:
    for m_out, m_w, what, fix in _attention_mistakes(case):
        if same_up_to_nan(weights, m_w) and same_up_to_nan(output, m_out):
            return what, fix
    return None


def check_scaled_dot_product_attention(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``fn(query, key, value, mask=None) -> (output, weights)`` (exercise 1)."""
    name = "check_scaled_dot_product_attention"
    if not callable(fn):
        return finish(CheckResult(name, False, f"expected a function, got {type(fn).__name__}",
                                   "pass the function itself, without calling it: `check(my_attention)`."))
    cases = _attention_cases()
    for number, case in enumerate(cases, start=1):
        where = f"case {number}/{len(cases)} ({case.description})"
        expected_out, expected_w = scaled_dot_product_attention(case.query, case.key, case.value, case.mask)
        inputs = [case.query.clone(), case.key.clone(), case.value.clone()]
        try:
            if case.mask is None:
                result = fn(*inputs)
            else:
                result = fn(*inputs, mask=case.mask.clone())
        except NotImplementedError:
            return finish(CheckResult(name, False, "not implemented yet",
                                       "replace `raise NotImplementedError` with your implementation."))
        except TypeError as exc:
            if case.mask is not None and "mask" in str(exc):
                return finish(CheckResult(name, False, f"{where}: calling with `mask=` failed: {learner_error(exc)}",
                                           "give your function a `mask=None` parameter."))
            return finish(CheckResult(name, False, f"{where}: your function raised {learner_error(exc)}",
                                       "read the error line above; check the shapes of each step "
                                       f"(query {shape_of(case.query)}, key {shape_of(case.key)}, value {shape_of(case.value)})."))
        except Exception as exc:  # the learner's code may raise anything: report it
            hint = ("transpose the last two dims of key: `key.transpose(-2, -1)`, so Q Kᵀ has shape (..., Lq, Lk)."
                    if "mat1 and mat2" in str(exc) or "size of tensor" in str(exc) or "shapes cannot" in str(exc)
                    else "read the error line above; print the shape of each intermediate tensor.")
            return finish(CheckResult(name, False, f"{where}: your function raised {learner_error(exc)}",
                                      error_hint(exc, hint)))
        result, failure = receive(name, where, result)
        if failure is not None:
            return finish(failure)

        if isinstance(result, Tensor):
            return finish(CheckResult(name, False, f"{where}: returned one tensor of shape {shape_of(result)}",
                                       "return both the output and the attention weights: `return output, weights`."))
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return finish(CheckResult(name, False, f"{where}: returned {type(result).__name__}, "
                                       "expected a tuple (output, weights)",
                                       "end your function with `return output, weights`."))
        output, weights = result
        if weights is None:
            return finish(CheckResult(name, False, f"{where}: the weights are None",
                                       "return the attention weights (after the softmax) as the second item."))
        if not isinstance(output, Tensor) or not isinstance(weights, Tensor):
            return finish(CheckResult(name, False, f"{where}: returned ({type(output).__name__}, "
                                       f"{type(weights).__name__}), expected two tensors",
                                       "return torch tensors: `return output, weights`."))
        if output.shape == expected_w.shape and weights.shape == expected_out.shape and output.shape != weights.shape:
            return finish(CheckResult(name, False, f"{where}: output and weights are swapped",
                                       "return `output, weights` in that order."))
        if weights.shape != expected_w.shape:
            return finish(CheckResult(name, False, f"{where}: weights have shape {shape_of(weights)}, "
                                       f"expected {tuple(expected_w.shape)} = (..., Lq, Lk)",
                                       "the weights are softmax(Q Kᵀ / sqrt(d_k)) with shape (..., Lq, Lk): "
                                       "one row per query, one column per key."))
        if output.shape != expected_out.shape:
            return finish(CheckResult(name, False, f"{where}: output has shape {shape_of(output)}, "
                                       f"expected {tuple(expected_out.shape)} = (..., Lq, d_v)",
                                       "the output is `weights @ value`."))
        weights_ok = close(weights, expected_w)
        output_ok = close(output, expected_out)
        if weights_ok and output_ok:
            continue
        has_empty_rows = case.mask is not None and not case.mask.any(-1).all()
        if has_empty_rows and case.mask.dim() == 2 and not weights.isnan().any():
            alive = case.mask.any(-1)  # (Lq,): queries with at least one key
            if close(weights[..., alive, :], expected_w[..., alive, :]):
                return finish(CheckResult(
                    name, False, f"{where}: the query that may attend to nothing does not get zero weights",
                    "when a row of the mask is all False, its weights (and so its output) must be 0, not "
                    "uniform: e.g. `weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)`."))
        diagnosis = _diagnose_attention(case, output, weights)
        if diagnosis is not None:
            what, fix = diagnosis
            return finish(CheckResult(name, False, f"{where}: {what}", fix))
        if torch.isnan(output).any() or torch.isnan(weights).any():
            if has_empty_rows:
                return finish(CheckResult(
                    name, False, f"{where}: NaN in the result for the query that may attend to nothing",
                    "a row of all -inf gives softmax 0/0 = NaN. Fill masked scores with "
                    "`torch.finfo(scores.dtype).min` instead of -inf, or set the weights of rows with no "
                    "allowed key to 0 (e.g. `weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)`)."))
            return finish(CheckResult(name, False, f"{where}: the result contains NaN",
                                       "look for a division by zero or a softmax over a row of -inf."))
        if weights_ok and not output_ok:
            return finish(CheckResult(name, False, f"{where}: the weights are right but the output is not",
                                       "the output is the weighted sum of the values: `weights @ value`."))
        sums = weights.detach().sum(-1)
        details = [f"largest difference in weights: {(weights.detach().double() - expected_w.double()).abs().max():.3g}"]
        hint = "compare each step with chapter 1: scores = Q Kᵀ / sqrt(d_k), mask, softmax over the last dim, weights @ V."
        if case.mask is None and not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            hint = "each query's weights must sum to 1: take the softmax over the last dim (the keys)."
        return finish(CheckResult(name, False, f"{where}: the weights differ from the reference", hint, details))

    return finish(CheckResult(name, True, f"all {len(cases)} cases match the reference "
                               "(unmasked, batched heads, causal, padding, a fully masked row)"))
