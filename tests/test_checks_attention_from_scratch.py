"""Exercise 1's check, beyond its table of learners (``checks_learners.py``) and the contract."""

import math

import pytest
import torch
from checks_learners import attention_reference

from lessons_src import scaled_dot_product_attention
from lessons_src.checks import check_scaled_dot_product_attention


def test_the_library_function_passes():
    result = check_scaled_dot_product_attention(scaled_dot_product_attention)
    assert result and "5 cases" in str(result), str(result)


def test_no_fixed_number_passes_for_sqrt_d_k():
    """Every case has its own d_k, so no number written in the code passes them all."""
    for constant in (2.0, 4.0, 8.0, math.sqrt(6), math.sqrt(24)):
        def attention(query, key, value, mask=None, c=constant):
            scores = query @ key.transpose(-2, -1) / c
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, -1).nan_to_num(0.0)
            return weights @ value, weights

        assert not check_scaled_dot_product_attention(attention), constant


def test_a_transpose_error_gets_the_transpose_hint():
    def no_transpose(query, key, value, mask=None):
        weights = torch.softmax(query @ key / math.sqrt(query.size(-1)), -1)
        return weights @ value, weights

    result = check_scaled_dot_product_attention(no_transpose)
    assert "transpose" in result.hint and "line" in result.summary and "query @ key" in result.summary, str(result)


def test_feedback_says_what_was_expected_and_what_came_back():
    def off(query, key, value, mask=None):
        output, weights = attention_reference(query, key, value, mask)
        return output, weights * 1.1

    text = str(check_scaled_dot_product_attention(off))
    assert "first difference at weights[" in text and "expected output tensor float32" in text, text


def test_html_display_and_strict_mode(monkeypatch):
    def no_scale(query, key, value, mask=None):
        weights = torch.softmax(query @ key.transpose(-2, -1), -1)
        return weights @ value, weights

    html = check_scaled_dot_product_attention(no_scale)._repr_html_()
    assert "not scaled" in html and "How to fix" in html
    monkeypatch.setenv("LESSONS_SRC_STRICT", "1")
    with pytest.raises(AssertionError, match="not scaled"):
        check_scaled_dot_product_attention(no_scale)
