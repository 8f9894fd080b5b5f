import math

import pytest
import torch
from torch.testing import assert_close

from lessons_src import causal_mask, padding_mask, scaled_dot_product_attention
from lessons_src.masks import sliding_window_mask


@pytest.mark.parametrize("seq_len", [1, 2, 5, 9])
def test_causal_mask_is_lower_triangle(seq_len):
    mask = causal_mask(seq_len)
    assert mask.dtype == torch.bool and mask.shape == (seq_len, seq_len)
    for i in range(seq_len):
        for j in range(seq_len):
            assert bool(mask[i, j]) == (j <= i)


def test_causal_mask_matches_pytorch_convention():
    # torch.nn.Transformer.generate_square_subsequent_mask: 0 where allowed, -inf where not.
    reference = torch.nn.Transformer.generate_square_subsequent_mask(6) == 0
    assert torch.equal(causal_mask(6), reference)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_causal_mask_rejects_bad_lengths(bad):
    with pytest.raises(ValueError, match=r"causal_mask: len_q must be a positive int"):
        causal_mask(bad)
    with pytest.raises(ValueError, match=r"causal_mask: len_k must be a positive int"):
        causal_mask(3, bad)


@pytest.mark.parametrize("Lq,Lk", [(1, 1), (3, 3), (1, 6), (2, 5), (4, 7), (5, 2), (6, 1)])
def test_causal_mask_is_bottom_right_like_causal_lower_right(Lq, Lk):
    """PyTorch's bottom-right causal bias, materialised (its True = may attend, like ours)."""
    import warnings

    from torch.nn.attention.bias import causal_lower_right

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lq > Lk: PyTorch warns that the first rows see nothing
        reference = causal_lower_right(Lq, Lk)._materialize()
    mask = causal_mask(Lq, Lk)
    assert mask.dtype == torch.bool and mask.shape == (Lq, Lk)
    assert torch.equal(mask, reference)
    assert bool(mask[-1].all())  # the last query sees every key
    if Lq != Lk:  # is_causal=True's top-left mask is another one
        assert not torch.equal(mask, torch.ones(Lq, Lk, dtype=torch.bool).tril())


def test_causal_mask_of_the_new_tokens_gives_the_last_rows_of_the_full_pass():
    """Decoding with a cache: the Lq new queries attend to all Lk keys so far, through causal_mask(Lq, Lk)."""
    g = torch.Generator().manual_seed(0)
    L, new = 7, 3
    q, k, v = (torch.randn(2, 4, L, 8, generator=g) for _ in range(3))  # (B, H, L, d_k)
    full, full_weights = scaled_dot_product_attention(q, k, v, causal_mask(L))
    last, last_weights = scaled_dot_product_attention(q[:, :, -new:], k, v, causal_mask(new, L))
    assert_close(last, full[:, :, -new:], atol=1e-6, rtol=1e-6)
    assert_close(last_weights, full_weights[:, :, -new:], atol=1e-6, rtol=1e-6)
    top_left, _ = scaled_dot_product_attention(q[:, :, -new:], k, v, torch.ones(new, L, dtype=torch.bool).tril())
    assert not torch.allclose(top_left, full[:, :, -new:], atol=1e-3)  # the wrong alignment


def test_causal_mask_device_is_keyword_only():
    assert causal_mask(3, device="meta").device.type == "meta"
    with pytest.raises(TypeError):
        causal_mask(3, 3, "cpu")


def test_padding_mask_values():
    mask = padding_mask([3, 1, 4])
    expected = torch.tensor(
        [[True, True, True, False], [True, False, False, False], [True, True, True, True]]
    )
    assert torch.equal(mask, expected)


def test_padding_mask_max_len_and_tensor_lengths():
    mask = padding_mask(torch.tensor([2, 0]), max_len=5)
    assert mask.shape == (2, 5)
    assert mask.sum(-1).tolist() == [2, 0]


def test_padding_mask_errors_name_values():
    with pytest.raises(ValueError, match=r"lengths \[7\] are longer than max_len=5"):
        padding_mask([3, 7], max_len=5)
    with pytest.raises(ValueError, match=r">= 0"):
        padding_mask([2, -1])
    with pytest.raises(ValueError, match="integer"):
        padding_mask(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="empty"):
        padding_mask([])


def test_public_api_is_exported():
    import lessons_src

    for name in lessons_src.__all__:
        assert hasattr(lessons_src, name), name


@pytest.mark.parametrize("seq_len", [1, 5, 9])
@pytest.mark.parametrize("window", [1, 2, 3, 12])
@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_mask_matches_brute_force(seq_len, window, causal):
    expected = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        for j in range(seq_len):
            expected[i, j] = (i - window < j <= i) if causal else abs(i - j) < window
    got = sliding_window_mask(seq_len, window, causal=causal)
    assert got.dtype == torch.bool and got.shape == (seq_len, seq_len)
    assert torch.equal(got, expected)


def test_sliding_window_mask_edge_cases():
    assert torch.equal(sliding_window_mask(6, 6), causal_mask(6))  # window covers the prefix
    assert torch.equal(sliding_window_mask(6, 1), torch.eye(6, dtype=torch.bool))  # only itself
    assert sliding_window_mask(6, 2).sum(dim=-1).tolist() == [1, 2, 2, 2, 2, 2]
    assert sliding_window_mask(6, 2, causal=False).sum(dim=-1).tolist() == [2, 3, 3, 3, 3, 2]


def test_sliding_window_mask_errors():
    with pytest.raises(ValueError, match=r"window must be a positive int, got 0"):
        sliding_window_mask(5, 0)
    with pytest.raises(ValueError, match=r"seq_len must be a positive int, got -1"):
        sliding_window_mask(-1, 2)


def test_sliding_window_mask_in_attention_limits_what_each_query_sees():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 7, 4) for _ in range(3))
    _, weights = scaled_dot_product_attention(q, k, v, mask=sliding_window_mask(7, 3))
    band = sliding_window_mask(7, 3)
    assert torch.all(weights[:, ~band] == 0)
    assert_close(weights.sum(-1), torch.ones(2, 7), atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sliding_window_mask_on_cuda():
    device = torch.device("cuda")
    assert math.isclose(float(sliding_window_mask(8, 3, device=device).sum()), 3 * 8 - 3)
