"""The check for exercise 2 (`attention_weights` with a temperature): correct answers written
differently pass, and each known mistake is named."""

import math

import torch
import torch.nn.functional as F
from checks_learners import REFERENCES, add

from lessons_src import scaled_dot_product_attention
from lessons_src.checks.scaling import MISTAKES, _cases, _reference_weights, check_attention_weights

CHECK = "check_attention_weights"


def _scores(query, key, temperature):
    if temperature is None:
        temperature = math.sqrt(query.size(-1))
    return query @ key.transpose(-2, -1) / temperature


# -- correct implementations, written differently --------------------------------------------------


def reference_style(query, key, temperature=None):
    return torch.softmax(_scores(query, key, temperature), dim=-1)


def einsum_style(query, key, temperature=None):
    scale = query.shape[-1] ** -0.5 if temperature is None else 1.0 / temperature
    return torch.einsum("...qd,...kd->...qk", query, key).mul(scale).softmax(dim=-1)


def stable_by_hand_float64(query, key, temperature=None):
    temperature = temperature or math.sqrt(query.size(-1))
    scores = query.double() @ key.double().mT / temperature
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # no overflow however sharp
    return (exps / exps.sum(dim=-1, keepdim=True)).to(query.dtype)  # float64 inside, cast back: right



def via_the_library(query, key, temperature=None):
    # The library always divides by sqrt(d_k); rescaling the query turns that into / temperature.
    d_k = query.size(-1)
    factor = 1.0 if temperature is None else math.sqrt(d_k) / temperature
    return scaled_dot_product_attention(query * factor, key, key)[1]


def positional_temperature(query, key, temperature=None, /):
    return F.softmax(_scores(query, key, temperature), -1)


REFERENCES[CHECK] = (reference_style,)
for _fn in (einsum_style, stable_by_hand_float64, via_the_library):
    add(CHECK)(_fn)

@add(CHECK, mistake="has dtype torch.float64, expected torch.float32")
def stable_by_hand_float64_not_cast_back(query, key, temperature=None):
    return stable_by_hand_float64(query, key, temperature).double()


def test_reference_is_the_library_with_the_default_temperature():
    for case in _cases():
        ours = _reference_weights(**case.args)
        library = scaled_dot_product_attention(case.args["query"], case.args["key"], case.args["key"])[1]
        torch.testing.assert_close(ours, library, atol=1e-6, rtol=1e-6)


def test_every_known_mistake_differs_from_the_reference_and_from_the_others():
    # Otherwise a mistake could pass a case unnoticed, or be reported under another one's name.
    for case in _cases():
        reference = _reference_weights(**case.args, **case.kwargs)
        candidates = [(m.mistaken(**case.args, **case.kwargs), m.name) for m in MISTAKES
                      if m.mistaken is not None and (m.when is None or m.when(case))]
        for i, (weights, what) in enumerate(candidates):
            assert weights.shape != reference.shape or not torch.allclose(weights, reference, atol=1e-3), what
            for other, other_what in candidates[i + 1:]:
                assert weights.shape != other.shape or not torch.allclose(weights, other, atol=1e-3), (
                    f"{what} == {other_what}")


# -- known mistakes, each named ----------------------------------------------------------------------


def no_scale(query, key, temperature=None):
    return torch.softmax(query @ key.transpose(-2, -1), dim=-1)


def scale_by_d_k(query, key, temperature=None):
    t = query.size(-1) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / t, dim=-1)


def multiply_by_sqrt(query, key, temperature=None):
    return torch.softmax(query @ key.transpose(-2, -1) * math.sqrt(query.size(-1)), dim=-1)


def sqrt_of_num_queries(query, key, temperature=None):
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-2)), dim=-1)


def sqrt_of_num_keys(query, key, temperature=None):
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(key.size(-2)), dim=-1)


def sqrt_of_size_0(query, key, temperature=None):  # the number of queries for one sequence
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(0)), dim=-1)


def sqrt_of_size_1(query, key, temperature=None):  # right for (L, d_k); the heads for (B, H, L, d_k)
    t = math.sqrt(query.size(1)) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / t, dim=-1)


def scaled_after_softmax(query, key, temperature=None):
    return torch.softmax(query @ key.transpose(-2, -1), dim=-1) / math.sqrt(query.size(-1))


def softmax_over_queries(query, key, temperature=None):
    return torch.softmax(_scores(query, key, temperature), dim=-2)


def softmax_over_dim_1(query, key, temperature=None):  # right for (L, d_k); the heads for (B, H, L, d_k)
    return torch.softmax(_scores(query, key, temperature), dim=1)


def returns_scores(query, key, temperature=None):
    return _scores(query, key, temperature)


def ignores_temperature(query, key, temperature=None):
    return reference_style(query, key)


def multiplies_by_temperature(query, key, temperature=None):
    if temperature is None:
        return reference_style(query, key)
    return torch.softmax(query @ key.transpose(-2, -1) * temperature, dim=-1)


def sqrt_of_temperature(query, key, temperature=None):
    t = query.size(-1) if temperature is None else temperature
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(t), dim=-1)


def naive_exp(query, key, temperature=None):
    exps = torch.exp(_scores(query, key, temperature))  # overflows for large scores
    return exps / exps.sum(dim=-1, keepdim=True)


def no_temperature_parameter(query, key):
    return reference_style(query, key)


def none_not_handled(query, key, temperature=None):
    return torch.softmax(query @ key.transpose(-2, -1) / temperature, dim=-1)


def key_times_query(query, key, temperature=None):
    return torch.softmax(key @ query.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)


def no_transpose(query, key, temperature=None):
    return torch.softmax(query @ key / math.sqrt(query.size(-1)), dim=-1)


def returns_output_and_weights(query, key, temperature=None):
    weights = reference_style(query, key, temperature)
    return weights @ key, weights


def returns_none(query, key, temperature=None):
    weights = reference_style(query, key, temperature)  # noqa: F841 (forgot to return it)


def stub(query, key, temperature=None):
    raise NotImplementedError


def raises_runtime_error(query, key, temperature=None):
    raise RuntimeError("boom")


def nan_weights(query, key, temperature=None):
    weights = reference_style(query, key, temperature)
    weights[..., 0] = float("nan")
    return weights


def unnormalised(query, key, temperature=None):
    return torch.exp(_scores(query, key, temperature))


add(CHECK, "not scaled")(no_scale)
add(CHECK, "divided by d_k instead of sqrt(d_k)")(scale_by_d_k)
add(CHECK, "multiplied by sqrt(d_k) instead of divided")(multiply_by_sqrt)
add(CHECK, "square root of Lq")(sqrt_of_num_queries)
add(CHECK, "square root of Lk")(sqrt_of_num_keys)
add(CHECK, "square root of Lq = query.size(0)")(sqrt_of_size_0)
add(CHECK, "square root of H = query.size(1) (the number of heads)")(sqrt_of_size_1)
add(CHECK, "after the softmax")(scaled_after_softmax)
add(CHECK, "softmax runs over Lq (the queries")(softmax_over_queries)
add(CHECK, "softmax runs over H (the number of heads")(softmax_over_dim_1)
add(CHECK, "returns the scores, before the softmax")(returns_scores)
add(CHECK, "temperature=2 is ignored")(ignores_temperature)
add(CHECK, "multiplied by temperature=2 instead of divided")(multiplies_by_temperature)
add(CHECK, "divided by sqrt(temperature)")(sqrt_of_temperature)
add(CHECK, "NaN or inf")(naive_exp)
add(CHECK, "unexpected keyword argument 'temperature'")(no_temperature_parameter)
add(CHECK, "NoneType")(none_not_handled)
add(CHECK, "(..., Lk, Lq)")(key_times_query)
add(CHECK, "raised RuntimeError")(no_transpose)
add(CHECK, "returned a tuple of 2 items, expected one tensor")(returns_output_and_weights)
add(CHECK, "returned None")(returns_none)
add(CHECK, "not implemented yet")(stub)
add(CHECK, "RuntimeError: boom")(raises_runtime_error)
add(CHECK, "NaN or inf")(nan_weights)
add(CHECK, "do not sum to 1")(unnormalised)
add(CHECK, "`d_k ** 1/2` is not sqrt(d_k)")(lambda query, key, temperature=None: torch.softmax(
    query @ key.transpose(-2, -1) / (temperature or query.size(-1) ** 1 / 2), -1))
add(CHECK, "divided by 4 instead of 3.464")(lambda query, key, temperature=None: torch.softmax(
    query @ key.transpose(-2, -1) / (temperature or 4.0), -1))  # sqrt(16), hard-coded
add(CHECK, "log-softmax")(lambda query, key, temperature=None: torch.log_softmax(_scores(query, key, temperature), -1))
add(CHECK, "temperature")(positional_temperature)


def test_unrecognised_mistake_still_gets_feedback():
    def off_by_a_bit(query, key, temperature=None):
        weights = reference_style(query, key, temperature) + 0.01
        return weights / weights.sum(dim=-1, keepdim=True)

    result = check_attention_weights(off_by_a_bit)
    assert not result and "differs from the reference" in result.summary
    assert any("first difference at weights[" in d for d in result.details)


