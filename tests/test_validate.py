"""The shared input checks: each accepts what it should and names the values at fault otherwise."""

import pytest
import torch

from lessons_src import _validate as check


@pytest.mark.parametrize(
    "shapes",
    [[(2, 3), (3,)], [(1,), (4, 1, 5)], [(2, 1, 4), (3, 1), (1, 1, 1)], [(), (2, 2)], [(0, 1), (1, 3)], [(5,), (5,)]],
)
def test_broadcast_shape_agrees_with_torch(shapes):
    assert check.broadcast_shape(*shapes) == tuple(torch.broadcast_shapes(*shapes))


@pytest.mark.parametrize("shapes", [[(2, 3), (4,)], [(2, 1), (3, 1), (4, 1)], [(0,), (2,)]])
def test_broadcast_shape_refuses_what_torch_refuses(shapes):
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(*shapes)
    assert check.broadcast_shape(*shapes) is None


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4", None])
def test_positive_int_refuses(bad):
    with pytest.raises(ValueError, match=rf"^f: n must be a positive int, got {bad!r}$".replace("(", r"\(")):
        check.positive_int(bad, "n", "f")


def test_positive_int_accepts():
    check.positive_int(1, "n", "f")
    check.positive_int(10**6, "n", "f")


def test_divisible():
    check.divisible(12, "d_model", 4, "num_heads", "f")
    with pytest.raises(ValueError, match=r"^f: d_model=10 is not divisible by num_heads=3; pick a num_heads that divides 10$"):
        check.divisible(10, "d_model", 3, "num_heads", "f")


def test_mask_errors():
    cpu = torch.device("cpu")
    with pytest.raises(ValueError, match=r"must be boolean .* got dtype torch.float32"):
        check.mask(torch.ones(3, 4), (2, 3, 4), cpu, "f")
    with pytest.raises(ValueError, match=r"shape \(5, 4\) does not broadcast to the scores' shape \(2, 3, 4\) = \(\.\.\., Lq, Lk\)"):
        check.mask(torch.ones(5, 4, dtype=torch.bool), (2, 3, 4), cpu, "f")
    with pytest.raises(ValueError, match="does not broadcast"):  # a mask may not enlarge the scores
        check.mask(torch.ones(7, 3, 4, dtype=torch.bool), (3, 4), cpu, "f")
    with pytest.raises(ValueError, match=r"f: self_mask must be a torch.Tensor, got list"):
        check.mask([[True]], (3, 4), cpu, "f", name="self_mask")
    with pytest.raises(ValueError, match=r"f: mask is on meta but the inputs are on cpu"):
        check.mask(torch.ones(3, 4, dtype=torch.bool, device="meta"), (3, 4), cpu, "f")
    check.mask(torch.ones(1, 4, dtype=torch.bool), (2, 3, 4), cpu, "f")


def test_a_3d_mask_is_per_sequence_for_modules_only():
    cpu = torch.device("cpu")
    per_sequence = torch.ones(2, 3, 5, dtype=torch.bool)  # (B, Lq, Lk)
    check.mask(per_sequence, (2, 4, 3, 5), cpu, "f", per_sequence=True)  # read as (B, 1, Lq, Lk)
    with pytest.raises(ValueError, match=r"\(2, 3, 5\) does not broadcast .* \(2, 4, 3, 5\) = \(\.\.\., Lq, Lk\)"):
        check.mask(per_sequence, (2, 4, 3, 5), cpu, "f")  # lined up from the right: (H, Lq, Lk), H=4 != 2
    assert check.head_mask_shape((2, 3, 5)) == (2, 1, 3, 5)
    assert check.head_mask_shape((3, 5)) == (3, 5)
    assert check.head_mask_shape((2, 1, 1, 5)) == (2, 1, 1, 5)


def test_sequence_errors():
    weight = torch.zeros(8, 8)
    check.sequence(torch.randn(2, 3, 8), "x", 8, "f", weight=weight)
    with pytest.raises(ValueError, match=r"f: x must be a 3-D tensor \(B, L, d_model\), got shape \(3, 8\)"):
        check.sequence(torch.randn(3, 8), "x", 8, "f")
    with pytest.raises(ValueError, match=r"f: memory's last dim is 6 but d_model=8 \(memory shape \(2, 3, 6\)\)"):
        check.sequence(torch.randn(2, 3, 6), "memory", 8, "f")
    with pytest.raises(ValueError, match=r"f: x must be floating point, got dtype torch.int64"):
        check.sequence(torch.ones(2, 3, 8, dtype=torch.long), "x", 8, "f")
    with pytest.raises(ValueError, match=r"f: x is torch.float64 on cpu but the weights are torch.float32 on cpu"):
        check.sequence(torch.randn(2, 3, 8, dtype=torch.float64), "x", 8, "f", weight=weight)


def test_same_batch_and_length():
    a, b = torch.zeros(2, 3, 4), torch.zeros(3, 5, 4)
    with pytest.raises(ValueError, match=r"f: batch sizes differ: query B=2, key B=3"):
        check.same_batch("f", query=a, key=b)
    with pytest.raises(ValueError, match=r"f: key has Lk=3 positions but value has 5"):
        check.same_length(a, b, "f")


def test_attention_inputs_returns_the_scores_shape():
    q, k, v = torch.randn(2, 1, 3, 8), torch.randn(4, 5, 8), torch.randn(1, 5, 6)
    assert check.attention_inputs(q, k, v, "f") == (2, 4, 3, 5)
