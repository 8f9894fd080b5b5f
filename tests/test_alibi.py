"""ALiBi's slopes against the paper's values and code, its biases against the definition, and
attention with them against PyTorch's scaled_dot_product_attention with an additive mask."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES
from torch.testing import assert_close

from lessons_src import alibi_bias, alibi_slopes, causal_mask


def paper_slopes(n):
    """The function in the ALiBi paper's code (github.com/ofirpress/attention_with_linear_biases)."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + paper_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]


def test_eight_heads_are_the_papers_halves():
    assert alibi_slopes(8).tolist() == [1 / 2**h for h in range(1, 9)]


def test_sixteen_heads_start_at_one_over_sqrt_two():
    slopes = alibi_slopes(16)
    assert_close(slopes, torch.tensor([2 ** (-h / 2) for h in range(1, 17)]))


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 32, 40, 64, 96])
def test_slopes_equal_the_papers_code(num_heads):
    assert_close(alibi_slopes(num_heads), torch.tensor(paper_slopes(num_heads), dtype=torch.float32))
    assert alibi_slopes(num_heads).dtype == torch.float32
    assert (alibi_slopes(num_heads) > 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_heads, len_q, len_k", [(1, 1, 1), (4, 5, 5), (3, 2, 7), (8, 1, 9)])
def test_bias_is_minus_slope_times_distance(device, num_heads, len_q, len_k):
    bias = alibi_bias(num_heads, len_q, len_k, device=device)
    assert bias.shape == (num_heads, len_q, len_k) and bias.device.type == device and bias.dtype == torch.float32
    slopes = alibi_slopes(num_heads)
    for h in range(num_heads):
        for i in range(len_q):
            for j in range(len_k):
                position = len_k - len_q + i  # the queries are the last positions
                assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * (position - j))


def test_the_diagonal_is_zero_and_the_past_is_penalised_linearly():
    bias = alibi_bias(2, 6)
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    assert_close(bias[:, 5, :5], -alibi_slopes(2)[:, None] * torch.arange(5, 0, -1).float())


@pytest.mark.parametrize("len_q, len_k", [(6, 6), (3, 10), (1, 8)])
def test_attention_with_alibi_equals_pytorch_with_an_additive_mask(len_q, len_k):
    g = torch.Generator().manual_seed(len_k)
    q, k, v = (torch.randn(2, 4, n, 16, generator=g) for n in (len_q, len_k, len_k))
    bias = alibi_bias(4, len_q, len_k)  # (H, Lq, Lk)
    allowed = causal_mask(len_q, len_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(16) + bias
    expected = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v
    additive = bias.masked_fill(~allowed, float("-inf"))
    assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=additive), expected, atol=1e-5, rtol=1e-5)


def test_a_decoding_step_sees_the_last_row_of_the_full_bias():
    full = alibi_bias(4, 9)
    assert torch.equal(alibi_bias(4, 1, 9), full[:, -1:, :])
    assert torch.equal(alibi_bias(4, 3, 9), full[:, -3:, :])


def test_per_row_the_bias_is_the_keys_position_up_to_a_constant():
    """The paper's code adds m·j (key position only): the same softmax, since a row's constant cancels."""
    bias = alibi_bias(4, 7)
    key_only = alibi_slopes(4)[:, None, None] * torch.arange(7).float()  # (H, 1, Lk)
    mask = causal_mask(7)
    a = torch.softmax(bias.masked_fill(~mask, float("-inf")), dim=-1)
    b = torch.softmax(key_only.expand(4, 7, 7).masked_fill(~mask, float("-inf")), dim=-1)
    assert_close(a, b)


@pytest.mark.parametrize("args, message", [
    ((0, 4), "num_heads must be a positive int, got 0"),
    ((2, 0), "len_q must be a positive int, got 0"),
    ((2, 4, 3), "len_q=4 is larger than len_k=3"),
    ((2.0, 4), "num_heads must be a positive int, got 2.0"),
])
def test_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        alibi_bias(*args)
    with pytest.raises(ValueError, match="num_heads must be a positive int"):
        alibi_slopes(-1)
