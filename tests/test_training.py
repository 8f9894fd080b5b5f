"""train_attention: learns, is reproducible, works with any module of our signature."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from lessons_src.data import shift_batch
from lessons_src.gqa import GroupedQueryAttention
from lessons_src.training import (
    TorchMultiheadAttention,
    TrainResult,
    antidiagonal_mass,
    diagonal_mass,
    train_attention,
    warmup_factor,
)

SMALL = {"steps": 150, "batch_size": 16, "seq_len": 6, "d_model": 16, "step_size": 100, "progress": False}


def _early_late(losses: list[float]) -> tuple[float, float]:
    return sum(losses[:10]) / 10, sum(losses[-10:]) / 10


@pytest.mark.parametrize(
    "factory",
    [lambda: TorchMultiheadAttention(16, 2), lambda: GroupedQueryAttention(16, 4, 2)],
    ids=["torch_mha", "gqa"],
)
def test_short_run_lowers_the_loss(factory):
    result = train_attention(factory, **SMALL)
    assert isinstance(result, TrainResult)
    assert len(result.losses) == 150 and all(isinstance(x, float) for x in result.losses)
    early, late = _early_late(result.losses)
    assert late < 0.5 * early, (early, late)
    assert result.final_loss == result.losses[-1]
    assert result.steps_per_second > 0
    assert result.device == torch.device("cpu")
    assert isinstance(result.model, nn.Module) and result.model.training


def test_same_seed_gives_identical_losses_and_another_seed_does_not():
    factory = functools.partial(GroupedQueryAttention, 16, 2, 2)
    a = train_attention(factory, seed=3, device="cpu", **SMALL)
    b = train_attention(factory, seed=3, device="cpu", **SMALL)
    c = train_attention(factory, seed=4, device="cpu", **SMALL)
    assert a.losses == b.losses
    assert a.losses != c.losses


def test_a_built_module_is_trained_in_place():
    torch.manual_seed(0)
    model = TorchMultiheadAttention(16, 2)
    before = model.attention.in_proj_weight.detach().clone()
    train_attention(model, device="cpu", **{**SMALL, "steps": 5})
    assert not torch.equal(before, model.attention.in_proj_weight)


def test_snapshots_when_asked():
    result = train_attention(lambda: TorchMultiheadAttention(16, 2), snapshot_every=50, **SMALL)
    assert [step for step, _ in result.snapshots] == [0, 50, 100, 149]
    for _, weights in result.snapshots:
        assert weights.shape == (2, 6, 6) and weights.device.type == "cpu" and not weights.requires_grad
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 6), atol=1e-5, rtol=1e-5)
    assert train_attention(lambda: TorchMultiheadAttention(16, 2), **{**SMALL, "steps": 3}).snapshots == []


def test_reversal_is_learned_as_anti_diagonal_attention():
    result = train_attention(lambda: TorchMultiheadAttention(16, 2), snapshot_every=149, **{**SMALL, "step_size": 400})
    first, last = result.snapshots[0][1], result.snapshots[-1][1]
    assert antidiagonal_mass(last) > 0.8 > antidiagonal_mass(first)


def test_shift_task_is_learned_on_its_diagonal():
    task = functools.partial(shift_batch, shift=2)
    result = train_attention(lambda: TorchMultiheadAttention(16, 2), task=task, snapshot_every=149, **{**SMALL, "step_size": 400})
    last = result.snapshots[-1][1]
    assert diagonal_mass(last, offset=-2) > 0.8
    assert antidiagonal_mass(last) < 0.5


@pytest.mark.parametrize("before", [False, True])
def test_denormal_flushing_is_restored_after_training(before):
    def flushing() -> bool:
        return torch.tensor([1e-39]).mul(1.0).item() == 0.0

    if not torch.set_flush_denormal(before):
        pytest.skip("this CPU cannot flush denormals")
    try:
        train_attention(lambda: GroupedQueryAttention(16, 2, 1), device="cpu", **{**SMALL, "steps": 2})
        assert flushing() is before
    finally:
        torch.set_flush_denormal(False)


def test_progress_bar_runs():
    result = train_attention(lambda: GroupedQueryAttention(16, 2, 1), **{**SMALL, "steps": 4, "progress": True})
    assert len(result.losses) == 4


def test_masses_on_known_matrices():
    L = 5
    anti = torch.eye(L).flip(-1)
    assert antidiagonal_mass(anti) == pytest.approx(1.0)
    assert antidiagonal_mass(torch.full((3, 2, L, L), 1 / L)) == pytest.approx(1 / L)
    assert diagonal_mass(torch.eye(L)) == pytest.approx(1.0)
    shifted = torch.eye(L).roll(-1, dims=1)  # row i puts its weight on column (i - 1) mod L
    assert diagonal_mass(shifted, offset=-1) == pytest.approx(1.0)
    assert diagonal_mass(shifted, offset=0) == pytest.approx(0.0)
    half = 0.5 * torch.eye(L) + 0.5 * anti  # the centre row counts fully for both
    assert antidiagonal_mass(half) == pytest.approx((0.5 * (L - 1) + 1.0) / L)


def test_errors_name_the_values():
    with pytest.raises(ValueError, match=r"weights must be \(\.\.\., L, L\) with Lq == Lk, got \(3, 4\)"):
        antidiagonal_mass(torch.rand(3, 4))
    with pytest.raises(ValueError, match=r"steps must be a positive int, got 0"):
        train_attention(lambda: GroupedQueryAttention(16, 2, 1), steps=0, progress=False)
    with pytest.raises(ValueError, match=r"snapshot_every must be a positive int, got 0"):
        train_attention(lambda: GroupedQueryAttention(16, 2, 1), snapshot_every=0, progress=False)

    class NoWeights(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(16, 16)

        def forward(self, query, key, value, mask=None):
            return self.linear(query), None

    with pytest.raises(ValueError, match=r"snapshots need the model to return weights"):
        train_attention(NoWeights, snapshot_every=1, **{**SMALL, "steps": 2})


def test_torch_wrapper_follows_our_mask_convention():
    torch.manual_seed(0)
    model = TorchMultiheadAttention(8, 2)
    x = torch.randn(2, 4, 8)
    allowed = torch.ones(4, 4, dtype=torch.bool).tril()  # True = may attend
    _, weights = model(x, x, x, mask=allowed)
    assert weights.shape == (2, 2, 4, 4)
    assert torch.all(weights[..., ~allowed] == 0)
    keys = torch.tensor([[True, True, True, True], [True, True, False, False]])[:, None, None, :]  # (B, 1, 1, Lk)
    _, weights = model(x, x, x, mask=keys)
    assert torch.all(weights[1, :, :, 2:] == 0) and torch.all(weights[0] > 0)
    per_sequence = torch.ones(2, 4, 4, dtype=torch.bool).tril()  # (B, Lq, Lk): one mask per sequence
    per_sequence[1, :, 2:] = False
    _, weights = model(x, x, x, mask=per_sequence)
    torch.testing.assert_close(weights, model(x, x, x, mask=per_sequence[:, None])[1], atol=0, rtol=0)
    assert torch.all(weights[1, :, :, 2:] == 0) and torch.all(weights[0, :, 3] > 0)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4, 4\), read as .* does not broadcast"):
        model(x, x, x, mask=torch.ones(3, 4, 4, dtype=torch.bool))


@pytest.mark.parametrize("warmup_steps", [2, 5, 50])
def test_warmup_factor_is_pytorchs_linear_lr(warmup_steps):
    """LambdaLR(warmup_factor) and LinearLR(start_factor=1/w, total_iters=w-1) give the same rates."""
    rates = {}
    for name in ("ours", "torch"):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
        if name == "ours":
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_factor(s, warmup_steps))
        else:
            scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1 / warmup_steps, 1.0, total_iters=warmup_steps - 1)
        rates[name] = []
        for _ in range(2 * warmup_steps + 3):
            rates[name].append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
    assert rates["ours"] == pytest.approx(rates["torch"], rel=1e-5, abs=1e-12)
    assert rates["ours"][0] == pytest.approx(0.01 / warmup_steps) and rates["ours"][warmup_steps - 1] == pytest.approx(0.01)


def test_warmup_factor_values_and_errors():
    assert [warmup_factor(s, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert warmup_factor(0, 0) == 1.0 and warmup_factor(0, 1) == 1.0  # no warm-up
    with pytest.raises(ValueError, match=r"warmup_factor: warmup_steps must be an int >= 0, got -1"):
        warmup_factor(0, -1)
    with pytest.raises(ValueError, match=r"warmup_factor: step must be an int >= 0, got 1.5"):
        warmup_factor(1.5, 10)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_training_on_cuda():
    result = train_attention(lambda: GroupedQueryAttention(16, 2, 2), device="cuda", snapshot_every=50, **SMALL)
    assert result.device.type == "cuda"
    early, late = _early_late(result.losses)
    assert late < 0.5 * early
    assert result.snapshots[-1][1].device.type == "cpu"
