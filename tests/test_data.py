"""The toy tasks: targets are what they claim to be, and a seed fixes the batch."""

from __future__ import annotations

import pytest
import torch

from lessons_src.data import reversal_batch, shift_batch


@pytest.mark.parametrize("shape", [(4, 10, 64), (1, 1, 3), (3, 7, 5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_reversal_target_is_the_reversed_input(shape, seed):
    B, L, D = shape
    query, key, value, target = reversal_batch(B, L, D, generator=torch.Generator().manual_seed(seed))
    for t in (query, key, value, target):
        assert t.shape == (B, L, D) and t.dtype == torch.float32
    assert torch.equal(key, value)
    assert torch.equal(query, target)
    for i in range(L):
        assert torch.equal(target[:, i], key[:, L - 1 - i])


@pytest.mark.parametrize("shift", [0, 1, 3, -2, 11])
def test_shift_target_is_the_rolled_input(shift):
    B, L, D = 2, 6, 4
    query, key, value, target = shift_batch(B, L, D, shift=shift, generator=torch.Generator().manual_seed(0))
    assert torch.equal(key, value) and torch.equal(query, target)
    for i in range(L):
        assert torch.equal(target[:, i], key[:, (i - shift) % L])


def test_shift_zero_copies():
    query, key, _, target = shift_batch(2, 5, 3, shift=0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(target, key) and torch.equal(query, key)


def test_seed_fixes_the_batch_and_different_seeds_differ():
    a = reversal_batch(8, 10, 16, generator=torch.Generator().manual_seed(7))
    b = reversal_batch(8, 10, 16, generator=torch.Generator().manual_seed(7))
    c = reversal_batch(8, 10, 16, generator=torch.Generator().manual_seed(8))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    assert not torch.equal(a[1], c[1])
    # One generator, successive calls: fresh data each step.
    g = torch.Generator().manual_seed(7)
    first, second = reversal_batch(8, 10, 16, generator=g)[1], reversal_batch(8, 10, 16, generator=g)[1]
    assert torch.equal(first, a[1]) and not torch.equal(first, second)


def test_inputs_are_standard_normal():
    _, x, _, _ = reversal_batch(256, 32, 64, generator=torch.Generator().manual_seed(0))
    assert abs(x.mean().item()) < 0.01
    assert abs(x.std().item() - 1.0) < 0.01


def test_device_follows_the_generator_or_the_argument():
    assert reversal_batch(2, 3, 4)[0].device.type == "cpu"
    assert reversal_batch(2, 3, 4, device="cpu")[0].device.type == "cpu"
    assert shift_batch(2, 3, 4, generator=torch.Generator())[0].device.type == "cpu"


def test_errors_name_the_values():
    with pytest.raises(ValueError, match=r"batch_size must be a positive int, got 0"):
        reversal_batch(0, 10, 4)
    with pytest.raises(ValueError, match=r"seq_len must be a positive int, got 2.5"):
        shift_batch(2, 2.5, 4)
    with pytest.raises(ValueError, match=r"shift must be an int, got 1.0"):
        shift_batch(2, 5, 4, shift=1.0)
    with pytest.raises(ValueError, match=r"the generator lives on cpu but device is meta"):
        reversal_batch(2, 5, 4, generator=torch.Generator(), device="meta")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_batches_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(0)
    query, key, _, target = reversal_batch(4, 6, 8, generator=g)
    assert query.device.type == "cuda"
    assert torch.equal(target, key.flip(1))
