"""The exercise checks: correct answers written differently pass; each known mistake is named."""

import math

import pytest
import torch

from lessons_src.checks import CheckResult, check_scaled_dot_product_attention


def _masked_softmax(scores, mask, fill=float("-inf"), dim=-1):
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    return torch.softmax(scores, dim=dim)


# -- correct implementations, written differently --------------------------------------------------


def reference_style(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = _masked_softmax(scores, mask)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ value, weights


def einsum_style(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) * query.shape[-1] ** -0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = scores.softmax(dim=-1).nan_to_num(0.0)
    return torch.einsum("...qk,...kd->...qd", weights, value), weights


def float64_style(query, key, value, mask=None):
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(torch.float64).min)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    if mask is not None:
        weights = weights * mask.any(-1, keepdim=True)
    return weights @ v, weights  # float64 results: accepted


def returns_list(query, key, value, mask=None):
    return list(reference_style(query, key, value, mask))


@pytest.mark.parametrize("fn", [reference_style, einsum_style, float64_style, returns_list])
def test_correct_implementations_pass(fn):
    result = check_scaled_dot_product_attention(fn)
    assert isinstance(result, CheckResult)
    assert result, str(result)
    assert bool(result) is True and str(result).startswith("PASS")
    assert "5 cases" in str(result)


def test_lessons_src_reference_passes():
    from lessons_src import scaled_dot_product_attention

    assert check_scaled_dot_product_attention(scaled_dot_product_attention)


# -- known mistakes, each named ----------------------------------------------------------------------


def no_scale(query, key, value, mask=None):
    weights = _masked_softmax(query @ key.transpose(-2, -1), mask).nan_to_num(0.0)
    return weights @ value, weights


def scale_by_d_k(query, key, value, mask=None):
    weights = _masked_softmax(query @ key.transpose(-2, -1) / query.size(-1), mask).nan_to_num(0.0)
    return weights @ value, weights


def multiply_by_sqrt(query, key, value, mask=None):
    weights = _masked_softmax(query @ key.transpose(-2, -1) * math.sqrt(query.size(-1)), mask).nan_to_num(0.0)
    return weights @ value, weights


def softmax_wrong_axis(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = _masked_softmax(scores, mask, dim=-2).nan_to_num(0.0)
    return weights @ value, weights


def inverted_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = _masked_softmax(scores, None if mask is None else ~mask).nan_to_num(0.0)
    return weights @ value, weights


def ignores_mask(query, key, value, mask=None):
    return reference_style(query, key, value, None)


def zero_fill(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = _masked_softmax(scores, mask, fill=0.0)
    return weights @ value, weights


def mask_after_softmax(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.softmax(scores, -1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


def nan_on_empty_rows(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = _masked_softmax(scores, mask)
    return weights @ value, weights


def uniform_on_empty_rows(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = _masked_softmax(scores, mask, fill=-1e9)
    return weights @ value, weights


def output_only(query, key, value, mask=None):
    return reference_style(query, key, value, mask)[0]


def swapped(query, key, value, mask=None):
    output, weights = reference_style(query, key, value, mask)
    return weights, output


def scores_not_weights(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    output, _ = reference_style(query, key, value, mask)
    return output, scores


def forgets_value(query, key, value, mask=None):
    _, weights = reference_style(query, key, value, mask)
    return weights @ key[..., : value.size(-1)] if key.size(-1) >= value.size(-1) else weights, weights


def no_transpose(query, key, value, mask=None):
    scores = query @ key / math.sqrt(query.size(-1))
    weights = torch.softmax(scores, -1)
    return weights @ value, weights


def stub(query, key, value, mask=None):
    raise NotImplementedError


def no_mask_parameter(query, key, value):
    return reference_style(query, key, value)


def returns_string(query, key, value, mask=None):
    return "attention"


def returns_none_weights(query, key, value, mask=None):
    return reference_style(query, key, value, mask)[0], None


def raises_runtime_error(query, key, value, mask=None):
    raise RuntimeError("boom")


MISTAKES = [
    (no_scale, "not scaled"),
    (scale_by_d_k, "divided by d_k instead of sqrt(d_k)"),
    (multiply_by_sqrt, "multiplied by sqrt(d_k)"),
    (softmax_wrong_axis, "softmax runs over the queries"),
    (inverted_mask, "mask is inverted"),
    (ignores_mask, "mask is ignored"),
    (zero_fill, "set to 0, not -inf"),
    (mask_after_softmax, "applied after the softmax"),
    (nan_on_empty_rows, "NaN in the result for the query that may attend to nothing"),
    (uniform_on_empty_rows, "does not get zero weights"),
    (output_only, "returned one tensor"),
    (swapped, "swapped"),
    (scores_not_weights, "scores, before the softmax"),
    (forgets_value, "weights are right but the output is not"),
    (no_transpose, "raised"),
    (stub, "not implemented yet"),
    (no_mask_parameter, "`mask=None` parameter"),
    (returns_string, "expected a tuple (output, weights)"),
    (returns_none_weights, "weights are None"),
    (raises_runtime_error, "RuntimeError: boom"),
]


@pytest.mark.parametrize("fn, named", MISTAKES, ids=[fn.__name__ for fn, _ in MISTAKES])
def test_mistakes_are_named(fn, named):
    result = check_scaled_dot_product_attention(fn)
    assert not result
    assert str(result).startswith("FAIL")
    assert named in str(result), str(result)
    assert "How to fix:" in str(result), str(result)


def test_unrecognised_mistake_still_gets_feedback():
    def off_by_a_bit(query, key, value, mask=None):
        output, weights = reference_style(query, key, value, mask)
        return output + 0.01, (weights + 0.01) / (weights + 0.01).sum(-1, keepdim=True)

    result = check_scaled_dot_product_attention(off_by_a_bit)
    assert not result and "weights differ" in str(result) and "largest difference" in str(result)


def test_no_transpose_hint_says_transpose():
    assert "transpose" in check_scaled_dot_product_attention(no_transpose).hint


def test_not_callable_is_feedback():
    result = check_scaled_dot_product_attention(42)
    assert not result and "expected a function" in str(result)




def test_html_display():
    html = check_scaled_dot_product_attention(no_scale)._repr_html_()
    assert "not scaled" in html and "How to fix" in html


def test_strict_mode_raises_with_the_same_feedback(monkeypatch):
    monkeypatch.setenv("LESSONS_SRC_STRICT", "1")
    with pytest.raises(AssertionError, match="not scaled"):
        check_scaled_dot_product_attention(no_scale)
    assert check_scaled_dot_product_attention(reference_style)  # a pass does not raise
