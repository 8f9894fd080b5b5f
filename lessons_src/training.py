"""Train one attention layer on a toy task and watch what it learns.

Taught in the chapter "Training attention" (``warmup_factor`` in the chapter "Layer norm
placement"). ``train_attention`` works with any module whose
``forward(query, key, value, mask=None)`` returns ``(output (B, Lq, D), weights (B, H, Lq, Lk))``:
``lessons_src.multihead.MultiHeadAttention``, ``GroupedQueryAttention``, or PyTorch's own
attention through ``TorchMultiheadAttention``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from . import _validate as check
from .data import reversal_batch
from .device import default_device, seed_everything

__all__ = [
    "TrainResult",
    "train_attention",
    "antidiagonal_mass",
    "diagonal_mass",
    "TorchMultiheadAttention",
    "warmup_factor",
]

#: A task makes one batch: ``task(batch_size, seq_len, d_model, generator=, device=)`` returns
#: ``(query, key, value, target)``; see ``lessons_src.data``.
Task = Callable[..., tuple[Tensor, Tensor, Tensor, Tensor]]


@dataclass
class TrainResult:
    """What ``train_attention`` measured.

    ``losses`` has one entry per step: the MSE of that step's fresh batch, before its update.
    ``snapshots`` holds ``(step, weights)`` with weights ``(H, L, L)`` on the CPU: the attention
    of the batch seen at that step, averaged over the batch. ``final_loss`` is the last step's
    loss (one batch: noisy, see the chapter "Training attention"). ``model`` is the trained module.
    """

    losses: list[float]
    snapshots: list[tuple[int, Tensor]] = field(default_factory=list)
    steps_per_second: float = 0.0
    final_loss: float = float("nan")
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    model: nn.Module | None = field(default=None, repr=False)


def train_attention(
    model: nn.Module | Callable[[], nn.Module],
    steps: int = 2000,
    batch_size: int = 32,
    seq_len: int = 10,
    d_model: int = 64,
    lr: float = 1e-2,
    step_size: int = 400,
    gamma: float = 0.1,
    seed: int = 0,
    device: torch.device | str | None = None,
    task: Task = reversal_batch,
    snapshot_every: int | None = None,
    progress: bool = True,
) -> TrainResult:
    """Fit ``model(query, key, value)[0]`` to the task's target with MSE, Adam and StepLR.

    Each step draws a fresh ``(B, L, D)`` batch from ``task`` (default: sequence reversal).
    ``model`` is a module, or a zero-argument function that builds one: it is then built after
    seeding, so one seed fixes initial weights and data and the same seed gives identical
    losses (on one device). The model is moved to ``device`` (``default_device()`` if None).
    ``snapshot_every=k`` keeps the weights at steps 0, k, 2k, ... and the last step.
    Taught in the chapter "Training attention".
    """
    for name, n in (("steps", steps), ("batch_size", batch_size), ("seq_len", seq_len), ("d_model", d_model)):
        check.positive_int(n, name, "train_attention")
    if snapshot_every is not None:
        check.positive_int(snapshot_every, "snapshot_every", "train_attention")
    device = torch.device(device) if device is not None else default_device()

    seed_everything(seed)
    if not isinstance(model, nn.Module):
        model = model()
    model = model.to(device).train()
    generator = torch.Generator(device=device).manual_seed(seed)
    # The fused Adam kernel updates every parameter in one call: ~8% more steps/s on a 2-core
    # CPU than the per-parameter loop, for the same algorithm.
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=device.type in ("cpu", "cuda") or None)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=step_size, gamma=gamma)

    losses: list[Tensor] = []
    snapshots: list[tuple[int, Tensor]] = []
    # The bar refreshes about 20 times in a run; reading the loss then is the only sync.
    report_every = max(1, steps // 20)
    bar = tqdm(total=steps, disable=not progress, desc="training", leave=False)
    with _flush_denormals(device):
        start = time.perf_counter()
        for step in range(steps):
            query, key, value, target = task(batch_size, seq_len, d_model, generator=generator, device=device)
            output, weights = model(query, key, value)
            loss = F.mse_loss(output, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.detach())  # no .item(): it would wait for the GPU every step
            if snapshot_every is not None and (step % snapshot_every == 0 or step == steps - 1):
                snapshots.append((step, _per_head(weights).mean(dim=0).cpu()))  # (H, L, L)
            if (step + 1) % report_every == 0 or step == steps - 1:
                bar.update(step + 1 - bar.n)
                if progress:
                    bar.set_postfix(loss=f"{loss.item():.4g}", refresh=False)
        loss_values = torch.stack(losses).tolist()  # one transfer; waits for the device to finish
        elapsed = time.perf_counter() - start
    bar.close()
    return TrainResult(
        losses=loss_values,
        snapshots=snapshots,
        steps_per_second=steps / elapsed,
        final_loss=loss_values[-1],
        device=device,
        model=model,
    )


@contextmanager
def _flush_denormals(device: torch.device) -> Iterator[None]:
    """Treat subnormal floats as zero on the CPU while training; restore the previous setting.

    Once attention is sharp, softmax gives weights like 1e-40: subnormal floats, which x86 CPUs
    process on a slow path. Flushing them to zero changes no result that matters here and
    measured +3-9% steps/s on the reversal task (2-core CPU).
    """
    if device.type != "cpu":
        yield
        return
    # No getter exists: a subnormal survives a multiplication only while flushing is off.
    was_on = torch.tensor([1e-39]).mul(1.0).item() == 0.0
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was_on)


def _per_head(weights: Tensor | None) -> Tensor:
    """Detached weights as ``(B, H, Lq, Lk)``; a module that averages heads gives H = 1."""
    if not isinstance(weights, Tensor) or weights.dim() not in (3, 4):
        shape = tuple(weights.shape) if isinstance(weights, Tensor) else weights
        raise ValueError(
            "train_attention: snapshots need the model to return weights (B, H, Lq, Lk) as its "
            f"second output, got {shape!r}"
        )
    weights = weights.detach()
    return weights if weights.dim() == 4 else weights.unsqueeze(1)  # (B, H, Lq, Lk)


def _check_square(weights: Tensor, where: str) -> Tensor:
    weights = torch.as_tensor(weights)
    if weights.dim() < 2 or weights.size(-1) != weights.size(-2):
        raise ValueError(f"{where}: weights must be (..., L, L) with Lq == Lk, got {tuple(weights.shape)}")
    return weights.detach().float()


def diagonal_mass(weights: Tensor, offset: int = 0) -> float:
    """Mean weight on the cyclic diagonal ``j = (i + offset) mod L`` of ``weights (..., L, L)``.

    Averaged over queries i and every leading (batch, head) dim; 1.0 means every query puts all
    its weight there. The shift task's ideal is ``offset = -shift``. Taught in the chapter
    "Training attention".
    """
    weights = _check_square(weights, "diagonal_mass")
    seq_len = weights.size(-1)
    columns = (torch.arange(seq_len, device=weights.device) + offset) % seq_len  # (L,)
    index = columns.view(seq_len, 1).expand(*weights.shape[:-1], 1)  # (..., L, 1)
    return weights.gather(-1, index).mean().item()


def antidiagonal_mass(weights: Tensor) -> float:
    """Mean weight on the anti-diagonal ``j = L-1-i`` of ``weights (..., L, L)``.

    Averaged over queries and every leading (batch, head) dim; the reversal task's ideal is 1.0.
    Taught in the chapter "Training attention".
    """
    weights = _check_square(weights, "antidiagonal_mass")
    return weights.flip(-1).diagonal(dim1=-2, dim2=-1).mean().item()


class TorchMultiheadAttention(nn.Module):
    """``torch.nn.MultiheadAttention`` with our signature, mask convention and per-head weights.

    ``forward(query, key, value, mask=None)`` -> output ``(B, Lq, D)``, weights ``(B, H, Lq, Lk)``.
    Our mask says True = may attend; PyTorch's ``attn_mask`` says True = ignore, so it is
    inverted here. Taught in the chapter "Training attention", which uses it as the reference.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.attention = nn.MultiheadAttention(d_model, num_heads, dropout=dropout, bias=bias, batch_first=True)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attend; ``mask`` is bool, True = may attend, read as by ``MultiHeadAttention``.

        ``(Lq, Lk)``, ``(B, Lq, Lk)`` (one per sequence) or anything broadcastable to
        ``(B, H, Lq, Lk)``; PyTorch takes ``(Lq, Lk)`` or ``(B * H, Lq, Lk)``, so it is expanded.
        """
        attn_mask = None
        if mask is not None:
            B, Lq, Lk = query.size(0), query.size(1), key.size(1)
            check.mask(mask, (B, self.num_heads, Lq, Lk), query.device, "TorchMultiheadAttention", per_sequence=True)
            if mask.dim() != 2:
                mask = mask.view(check.head_mask_shape(mask.shape))  # (B, 1, Lq, Lk) for a 3-D mask
                mask = mask.expand(B, self.num_heads, Lq, Lk).reshape(B * self.num_heads, Lq, Lk)  # (B*H, Lq, Lk)
            attn_mask = ~mask  # PyTorch: True = ignore
        return self.attention(
            query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False
        )  # (B, Lq, D), (B, H, Lq, Lk)


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Learning-rate multiplier of a linear warm-up: ``min(1, (step + 1) / warmup_steps)``.

    ``step`` counts optimizer steps from 0, as ``LambdaLR`` does, so the first step already uses
    ``lr / warmup_steps`` (not 0) and step ``warmup_steps - 1`` the full rate; ``warmup_steps=0``
    means no warm-up. Use it as ``LambdaLR(optimizer, lambda s: warmup_factor(s, w))``; PyTorch's
    ``LinearLR(optimizer, start_factor=1 / w, total_iters=w - 1)`` is the same schedule.
    Taught in the chapter "Layer norm placement".
    """
    for name, n in (("step", step), ("warmup_steps", warmup_steps)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"warmup_factor: {name} must be an int >= 0, got {n!r}")
    if warmup_steps == 0:
        return 1.0
    return min(1.0, (step + 1) / warmup_steps)
