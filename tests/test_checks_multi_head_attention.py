"""Exercise 4's check (what each head adds to the output): its learners for the table
(``checks_learners.py``), right ones written differently and the usual slips, each of which the
check must name, and tests beyond the table."""

import math

import pytest
import torch
import torch.nn.functional as F
from checks_learners import REFERENCES, add

from lessons_src import MultiHeadAttention, padding_mask, scaled_dot_product_attention, split_heads
from lessons_src.checks import check_head_contributions
from lessons_src.checks.multi_head_attention import _cases

CHECK = "check_head_contributions"


def contributions_reference(x, attention, mask=None):
    """Per head: its attention output times its block of W_O's columns."""
    H = attention.num_heads
    q, k, v = (split_heads(w(x), H) for w in (attention.w_q, attention.w_k, attention.w_v))  # (B, H, L, d_k)
    heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, H, L, d_k)
    d_k = q.size(-1)
    blocks = attention.w_o.weight.split(d_k, dim=1)  # H x (D, d_k): the columns that read head h
    return torch.stack([heads[:, h] @ blocks[h].T for h in range(H)], dim=1)  # (B, H, L, D)


REFERENCES[CHECK] = (contributions_reference,)


def _heads(x, attention, mask=None, split=None, project=None, keys="w_k", scale=None, mask_mode="use", dim=-1,
           swap=False):
    """The heads' attention outputs (B, H, L, d_k), written out by hand, with one switch per slip."""
    B, L, D = x.shape
    H = attention.num_heads
    d_k = D // H
    split = split or (lambda t: t.view(B, L, H, d_k).transpose(1, 2))
    project = project or (lambda layer: layer(x))
    q, k, v = split(project(attention.w_q)), split(project(getattr(attention, keys))), split(project(attention.w_v))
    if swap:
        q, k = k, q
    scores = q @ k.transpose(-2, -1) / (scale or math.sqrt(d_k))
    if mask is not None and mask_mode != "ignore":
        scores = scores.masked_fill(mask if mask_mode == "invert" else ~mask, float("-inf"))
    return torch.softmax(scores, dim=dim) @ v


def _per_head(heads, attention):
    """Head h's output times its columns of W_O: (B, H, L, D)."""
    H, d_k = heads.size(1), heads.size(-1)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * d_k:(h + 1) * d_k].T for h in range(H)], dim=1)


# -- right, written differently ----------------------------------------------------------------------


@add(CHECK)
def zero_the_other_heads(x, attention, mask=None):
    """Keep one head's block of the concatenation, zero the rest, apply W_O without its bias: right."""
    H = attention.num_heads
    heads = _heads(x, attention, mask)  # (B, H, L, d_k)
    concat = heads.transpose(1, 2).reshape(x.shape)  # (B, L, D)
    d_k = x.size(-1) // H
    out = []
    for h in range(H):
        only_h = torch.zeros_like(concat)
        only_h[..., h * d_k:(h + 1) * d_k] = concat[..., h * d_k:(h + 1) * d_k]
        out.append(F.linear(only_h, attention.w_o.weight))  # no bias: it belongs to no head
    return torch.stack(out, dim=1)


@add(CHECK)
def weights_from_the_module_einsum_float64(x, attention, mask=None):
    """The per-head weights the module itself returns, then one einsum, in float64: right."""
    _, weights = attention(x, x, x, mask)  # (B, H, L, L)
    H = attention.num_heads
    v = split_heads(attention.w_v(x), H).double()  # (B, H, L, d_k)
    W = attention.w_o.weight.double().unflatten(1, (H, -1))  # (out, H, d_k)
    return torch.einsum("bhqk,bhkd,ohd->bhqo", weights.double(), v, W).to(x.dtype)


@add(CHECK)
def block_diagonal(x, attention, mask=None):
    """Each head laid out alone in its block of a (B, H, L, D) concatenation, then W_O without bias: right."""
    heads = _heads(x, attention, mask)  # (B, H, L, d_k)
    B, H, L, d_k = heads.shape
    eye = torch.eye(H, dtype=heads.dtype)  # (H, H)
    spread = torch.einsum("bhld,hg->bhlgd", heads, eye).reshape(B, H, L, H * d_k)  # head h in block h only
    return spread @ attention.w_o.weight.T


# -- wrong --------------------------------------------------------------------------------------------


@add(CHECK, "w_o's bias is added to every head")
def bias_in_every_head(x, attention, mask=None):
    return contributions_reference(x, attention, mask) + attention.w_o.bias


@add(CHECK, "w_o's bias is added to every head", "w_o_on_zero_padded_heads")
def w_o_on_zero_padded_heads(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    B, H, L, d_k = heads.shape
    out = []
    for h in range(H):
        only_h = torch.zeros(B, L, H * d_k)
        only_h[..., h * d_k:(h + 1) * d_k] = heads[:, h]
        out.append(attention.w_o(only_h))  # calling the layer adds its bias to every head
    return torch.stack(out, dim=1)


@add(CHECK, "rows are used instead of its columns")
def w_o_rows(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    d_k = heads.size(-1)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[h * d_k:(h + 1) * d_k, :] for h in range(heads.size(1))], dim=1)


@add(CHECK, "before W_O")
def heads_before_w_o(x, attention, mask=None):
    return _heads(x, attention, mask)


@add(CHECK, "split with a direct view")
def direct_view_split(x, attention, mask=None):
    B, L, D = x.shape
    H = attention.num_heads
    heads = _heads(x, attention, mask, split=lambda t: t.view(B, H, L, D // H))
    return _per_head(heads, attention)


@add(CHECK, "divided by sqrt(d_model)")
def scaled_by_sqrt_d_model(x, attention, mask=None):
    return _per_head(_heads(x, attention, mask, scale=math.sqrt(x.size(-1))), attention)


@add(CHECK, "x @ W instead of x @ W.T")
def weight_not_transposed(x, attention, mask=None):
    def project(layer):
        return x @ layer.weight + (0 if layer.bias is None else layer.bias)

    return _per_head(_heads(x, attention, mask, project=project), attention)


@add(CHECK, "keys are projected with w_q")
def keys_with_w_q(x, attention, mask=None):
    return _per_head(_heads(x, attention, mask, keys="w_q"), attention)


@add(CHECK, "queries and keys are swapped")
def queries_and_keys_swapped(x, attention, mask=None):
    return _per_head(_heads(x, attention, mask, swap=True), attention)


@add(CHECK, "mask is ignored")
def mask_ignored(x, attention, mask=None):
    return _per_head(_heads(x, attention, mask, mask_mode="ignore"), attention)


@add(CHECK, "mask is inverted")
def mask_inverted(x, attention, mask=None):
    return _per_head(_heads(x, attention, mask, mask_mode="invert"), attention)


@add(CHECK, "softmax runs over the queries")
def softmax_over_queries(x, attention, mask=None):
    return _per_head(_heads(x, attention, mask, dim=-2), attention)


@add(CHECK, "summed over the heads")
def summed_over_heads(x, attention, mask=None):
    return contributions_reference(x, attention, mask).sum(dim=1)


@add(CHECK, "summed over the heads", "the_layer_output")
def the_layer_output(x, attention, mask=None):
    return attention(x, x, x, mask)[0]


@add(CHECK, "interleaved columns")
def interleaved_columns(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    H = heads.size(1)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h::H].T for h in range(H)], dim=1)


@add(CHECK, "head axis must come right after the batch")
def heads_last_but_one(x, attention, mask=None):
    return contributions_reference(x, attention, mask).transpose(1, 2)


@add(CHECK, "`w_o.bias` is None")
def subtracts_the_bias_from_w_o(x, attention, mask=None):
    heads = _heads(x, attention, mask)
    B, H, L, d_k = heads.shape
    out = []
    for h in range(H):
        only_h = torch.zeros(B, L, H * d_k)
        only_h[..., h * d_k:(h + 1) * d_k] = heads[:, h]
        out.append(attention.w_o(only_h) - attention.w_o.bias)  # right, until a module has no bias
    return torch.stack(out, dim=1)


@add(CHECK, "shape", "hard_coded_d_k_4")
def hard_coded_d_k(x, attention, mask=None):
    B, L, D = x.shape
    H = D // 4  # d_k = 4 as in the first case: wrong elsewhere
    heads = _heads(x, attention, mask)
    W = attention.w_o.weight
    return torch.stack([heads[:, h] @ W[:, h * 4:(h + 1) * 4].T for h in range(min(H, heads.size(1)))], dim=1)


@add(CHECK, "changed the weights of `attention` in place")
def folds_the_scale_into_w_q(x, attention, mask=None):
    with torch.no_grad():
        attention.w_q.weight /= math.sqrt(x.size(-1) // attention.num_heads)
        attention.w_q.bias /= math.sqrt(x.size(-1) // attention.num_heads)
    heads = _heads(x, attention, mask, scale=1.0)
    return _per_head(heads, attention)


# == tests beyond the table =============================================================================


def test_the_contributions_add_up_to_the_layer_output():
    """On every case: the sum over heads plus w_o's bias is the module's output (the exercise's promise)."""
    for case in _cases():
        x, attention, mask = case.args["x"], case.args["attention"], case.kwargs.get("mask")
        got = contributions_reference(x, attention, mask)
        bias = attention.w_o.bias if attention.w_o.bias is not None else 0
        torch.testing.assert_close(got.sum(1) + bias, attention(x, x, x, mask)[0], atol=1e-5, rtol=1e-5)


def test_one_head_contributes_the_output_minus_the_bias():
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 1).eval()
    x = torch.randn(2, 3, 8)
    got = contributions_reference(x, attention)
    torch.testing.assert_close(got[:, 0], attention(x, x, x)[0] - attention.w_o.bias)


def test_the_cases_vary_sizes_and_cover_masks_and_bias_free_modules():
    cases = _cases()
    assert len({(c.info["D"], c.info["H"], c.info["d_k"]) for c in cases}) == len(cases)
    assert 1 in {c.info["H"] for c in cases} and len({c.info["B"] for c in cases}) > 1
    assert any(c.args["attention"].w_o.bias is None for c in cases)
    assert any(c.kwargs.get("mask") is not None and c.kwargs["mask"].dim() == 4 for c in cases)


def test_the_feedback_names_the_bias_with_the_number_of_extra_biases():
    result = check_head_contributions(bias_in_every_head)
    assert "H - 1 = 2 biases" in str(result).splitlines()[0] and "case 1/5" in result.summary, str(result)


def test_a_padding_mask_of_the_library_is_what_the_cases_use():
    mask = _cases()[2].kwargs["mask"]
    assert torch.equal(mask, padding_mask([4, 2, 3])[:, None, None, :])


def test_html_display_and_strict_mode(monkeypatch):
    html = check_head_contributions(w_o_rows)._repr_html_()
    assert "rows" in html and "How to fix" in html
    monkeypatch.setenv("LESSONS_SRC_STRICT", "1")
    with pytest.raises(AssertionError, match="rows are used"):
        check_head_contributions(w_o_rows)
