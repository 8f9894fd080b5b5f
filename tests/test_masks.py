import pytest
import torch

from lessons_src import causal_mask, padding_mask
from lessons_src.masks import check_mask


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
    with pytest.raises(ValueError, match="seq_len"):
        causal_mask(bad)


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


def test_check_mask_errors():
    with pytest.raises(ValueError, match=r"dtype torch.float32"):
        check_mask(torch.ones(3, 4), (2, 3, 4), "f")
    with pytest.raises(ValueError, match=r"shape \(5, 4\) does not broadcast to the scores' shape \(2, 3, 4\)"):
        check_mask(torch.ones(5, 4, dtype=torch.bool), (2, 3, 4), "f")
    # a mask may not enlarge the scores by broadcasting
    with pytest.raises(ValueError, match="does not broadcast"):
        check_mask(torch.ones(7, 3, 4, dtype=torch.bool), (3, 4), "f")
    check_mask(torch.ones(1, 4, dtype=torch.bool), (2, 3, 4), "f")


def test_public_api_is_exported():
    import lessons_src

    for name in lessons_src.__all__:
        assert hasattr(lessons_src, name), name


@pytest.mark.parametrize(
    "shapes",
    [[(2, 3), (3,)], [(1,), (4, 1, 5)], [(2, 1, 4), (3, 1), (1, 1, 1)], [(), (2, 2)], [(0, 1), (1, 3)], [(5,), (5,)]],
)
def test_broadcast_shape_agrees_with_torch(shapes):
    from lessons_src.masks import broadcast_shape

    assert broadcast_shape(*shapes) == tuple(torch.broadcast_shapes(*shapes))


@pytest.mark.parametrize("shapes", [[(2, 3), (4,)], [(2, 1), (3, 1), (4, 1)], [(0,), (2,)]])
def test_broadcast_shape_refuses_what_torch_refuses(shapes):
    from lessons_src.masks import broadcast_shape

    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(*shapes)
    assert broadcast_shape(*shapes) is None

