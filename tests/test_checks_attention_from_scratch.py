"""Exercise 1's check, beyond its table of learners (``checks_learners.py``) and the contract."""

import math

import nbformat
import pytest
import torch
from checks_learners import REFERENCES, add, add_fns
from conftest import ROOT

from lessons_src import scaled_dot_product_attention
from lessons_src.checks import check_scaled_dot_product_attention

# == check_scaled_dot_product_attention (exercise 1) ==================================================

ATT = "check_scaled_dot_product_attention"


def _masked_softmax(scores, mask, fill=float("-inf"), dim=-1):
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    return torch.softmax(scores, dim=dim)


def attention_reference(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = _masked_softmax(scores, mask)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ value, weights


REFERENCES[ATT] = (attention_reference,)


def _attention_with(scale):
    def attention(query, key, value, mask=None):
        weights = _masked_softmax(scale(query @ key.transpose(-2, -1), query.size(-1)), mask).nan_to_num(0.0)
        return weights @ value, weights

    return attention


@add(ATT)
def einsum_float64_finfo_min(query, key, value, mask=None):
    q, k = query.double(), key.double()
    scores = torch.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(torch.float64).min)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    if mask is not None:
        weights = weights * mask.any(-1, keepdim=True)
    return (weights @ value.double()).to(query.dtype), weights.to(query.dtype)  # float64 inside, float32 out: right


@add(ATT, mistake="has dtype torch.float64, expected torch.float32")
def einsum_float64_not_cast_back(query, key, value, mask=None):
    out, weights = einsum_float64_finfo_min(query, key, value, mask)
    return out.double(), weights.double()  # the next `weights @ value` in float32 raises


@add(ATT)
def returns_a_list_with_torch_where(query, key, value, mask=None):
    scores = torch.matmul(query, key.mT) / query.size(-1) ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = scores.softmax(dim=-1).nan_to_num(0.0)
    return [weights @ value, weights]


add(ATT, "not scaled", "no_scale")(_attention_with(lambda s, d: s))
add(ATT, "divided by d_k / 2", "scale_d_k_pow_1_over_2")(_attention_with(lambda s, d: s / (d ** 1 / 2)))
add(ATT, "divided by 2 d_k", "scores_over_d_k_pow_1_over_2")(_attention_with(lambda s, d: s / d ** 1 / 2))
add(ATT, "divided by d_k instead of sqrt(d_k)", "divides_by_d_k")(_attention_with(lambda s, d: s / d))
add(ATT, "multiplied by sqrt(d_k)", "multiplies_by_sqrt_d_k")(_attention_with(lambda s, d: s * math.sqrt(d)))
add(ATT, "wrong number", "hard_coded_4")(_attention_with(lambda s, d: s / 4.0))  # sqrt(16), a common d_k
add(ATT, "wrong number", "sqrt_of_lk")(_attention_with(lambda s, d: s / math.sqrt(s.size(-1))))


@add(ATT, "log-softmax")
def log_softmax(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.log_softmax(scores, dim=-1)
    return weights @ value, weights


@add(ATT, "softmax runs over the queries")
def softmax_over_queries(query, key, value, mask=None):
    weights = _masked_softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask, dim=-2)
    return weights @ value, weights


@add(ATT, "mask is inverted")
def inverted_mask(query, key, value, mask=None):
    weights = _masked_softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)),
                              None if mask is None else ~mask).nan_to_num(0.0)
    return weights @ value, weights


@add(ATT, "mask is ignored")
def ignores_mask(query, key, value, mask=None):
    return attention_reference(query, key, value)


@add(ATT, "set to 0, not -inf")
def zero_fill(query, key, value, mask=None):
    weights = _masked_softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask, fill=0.0)
    return weights @ value, weights


@add(ATT, "applied after the softmax")
def mask_after_softmax(query, key, value, mask=None):
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), -1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


@add(ATT, "at step 'zero the rows with no allowed key': it is left out")
def nan_on_empty_rows(query, key, value, mask=None):
    weights = _masked_softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask)
    return weights @ value, weights


@add(ATT, "the masked entries are filled with a large finite number")
def uniform_on_empty_rows(query, key, value, mask=None):
    weights = _masked_softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), mask, fill=-1e9)
    return weights @ value, weights


@add(ATT, "returned one tensor")
def output_only(query, key, value, mask=None):
    return attention_reference(query, key, value, mask)[0]


@add(ATT, "swapped")
def swapped(query, key, value, mask=None):
    output, weights = attention_reference(query, key, value, mask)
    return weights, output


@add(ATT, "scores, before the softmax")
def scores_not_weights(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return attention_reference(query, key, value, mask)[0], scores


@add(ATT, "output is not weights @ value")
def weights_times_key(query, key, value, mask=None):
    _, weights = attention_reference(query, key, value, mask)
    return weights @ key, weights


@add(ATT, "your function raised RuntimeError")
def key_not_transposed(query, key, value, mask=None):
    weights = torch.softmax(query @ key / math.sqrt(query.size(-1)), -1)
    return weights @ value, weights


@add(ATT, "unexpected keyword argument 'mask'")
def no_mask_parameter(query, key, value):
    return attention_reference(query, key, value)


@add(ATT, "changed its argument `query` in place")
def divides_query_in_place(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))
    weights = _masked_softmax(query @ key.transpose(-2, -1), mask).nan_to_num(0.0)
    return weights @ value, weights


@add(ATT, "complex")
def complex_weights(query, key, value, mask=None):
    output, weights = attention_reference(query, key, value, mask)
    return output.to(torch.complex64), weights.to(torch.complex64)


@add(ATT, "weights has dtype torch.int64")
def integer_weights(query, key, value, mask=None):
    output, weights = attention_reference(query, key, value, mask)
    return output, (weights > 0.5).long()


@add(ATT, "output and weights differ from the reference")
def off_by_a_bit(query, key, value, mask=None):
    output, weights = attention_reference(query, key, value, mask)
    return output + 0.01, (weights + 0.01) / (weights + 0.01).sum(-1, keepdim=True)


# == tests beyond the table =============================================================================


def test_the_library_function_passes():
    result = check_scaled_dot_product_attention(scaled_dot_product_attention)
    assert result and "7 cases" in str(result), str(result)


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
    assert "first difference at weights[" in text and ": expected " in text and ", got " in text, text
    # the types and shapes line only when they differ from the reference's (here they are the same)
    assert "expected output tensor float32" not in text, text


def test_html_display_and_strict_mode(monkeypatch):
    def no_scale(query, key, value, mask=None):
        weights = torch.softmax(query @ key.transpose(-2, -1), -1)
        return weights @ value, weights

    html = check_scaled_dot_product_attention(no_scale)._repr_html_()
    assert "not scaled" in html and "How to fix" in html
    monkeypatch.setenv("LESSONS_SRC_STRICT", "1")
    with pytest.raises(AssertionError, match="not scaled"):
        check_scaled_dot_product_attention(no_scale)


# == the bug hunt: the function the exercise hands out, and each step of fixing it ========================

EXERCISE = ROOT / "exercises" / "01_attention_from_scratch.ipynb"

#: The four bugs in the order the check names them, each as (the buggy text, its fix, what the check says).
BUGS = [
    ("torch.softmax(scores, dim=-2)", "torch.softmax(scores, dim=-1)", "the softmax runs over the queries (dim=-2)"),
    ("key.transpose(0, 1)", "key.transpose(-2, -1)", "the key is transposed on its first two dims"),
    ("scores.masked_fill(mask, ", "scores.masked_fill(~mask, ", "the mask is inverted"),
    ("~mask.any(dim=-2, keepdim=True)", "~mask.any(dim=-1, keepdim=True)",
     "at step 'zero the rows with no allowed key': it is left out"),
]


def handed_out_source():
    """The source of the exercise's answer cell: the buggy `attention` the learner starts from."""
    nb = nbformat.read(EXERCISE, as_version=4)
    [cell] = [c for c in nb.cells if c.cell_type == "code" and "exercise" in c.metadata.get("tags", [])]
    return cell.source


def bug_hunt_step(fixed):
    """The handed-out function with the first ``fixed`` bugs fixed."""
    source = handed_out_source()
    for bug, fix, _ in BUGS[:fixed]:
        assert source.count(bug) == 1, bug
        source = source.replace(bug, fix)
    namespace = {"math": math, "torch": torch}
    exec(compile(source, f"<exercise 1, {fixed} bugs fixed>", "exec"), namespace)
    fn = namespace["attention"]
    fn.__name__ = f"bug_hunt_{fixed}_fixed"
    return fn


for _fixed, (_, _, _named) in enumerate(BUGS):
    add_fns(ATT, (bug_hunt_step(_fixed),), _named, f"bug_hunt_{_fixed}_of_4_fixed")
add_fns(ATT, (bug_hunt_step(len(BUGS)),), None, "bug_hunt_all_4_fixed")


@pytest.mark.parametrize("fixed", range(len(BUGS)))
def test_the_bug_hunt_names_one_bug_at_a_time_on_its_own_case(fixed):
    """Each bug first shows on a later case than the one before, so fixing it reveals the next."""
    result = check_scaled_dot_product_attention(bug_hunt_step(fixed))
    first = str(result).splitlines()[0]
    assert not result and BUGS[fixed][2] in first, str(result)
    assert f"case {[1, 2, 4, 6][fixed]}/7" in first, first


def test_the_handed_out_function_has_exactly_the_four_bugs():
    source = handed_out_source()
    assert "NotImplementedError" not in source and all(source.count(bug) == 1 for bug, _, _ in BUGS)
    solution = ROOT / "solutions" / "01_attention_from_scratch.ipynb"
    nb = nbformat.read(solution, as_version=4)
    [answer] = [c.source for c in nb.cells if c.cell_type == "code" and "exercise" in c.metadata.get("tags", [])]
    assert all(fix in answer and bug not in answer for bug, fix, _ in BUGS)


def test_the_exercise_declares_the_feedback_its_handed_out_function_gets():
    import sync_notebooks  # scripts/, on sys.path (tests/conftest.py)

    declared = sync_notebooks.stub_feedback(nbformat.read(EXERCISE, as_version=4))
    assert declared != sync_notebooks.STUB_FEEDBACK
    first = str(check_scaled_dot_product_attention(bug_hunt_step(0))).splitlines()[0]
    assert first.startswith("FAIL") and declared in first, first


@add(ATT, "`key.T` reverses *all* the dims")
def key_dot_T(query, key, value, mask=None):
    scores = query @ key.permute(*reversed(range(key.dim()))) / math.sqrt(query.size(-1))  # what `key.T` does
    weights = _masked_softmax(scores, mask).nan_to_num(0.0)
    return weights @ value, weights
