"""Time and peak memory of one call, on a CPU or a GPU, and which attention kernel it ran.

Taught in the chapter "Efficient attention", which measures with these, as does
``benchmarks/bench_attention.py``:

- **time**: calls after a warm-up, timed with ``time.perf_counter`` and, on a GPU, a synchronize
  before and after (GPU calls return before the work is done); the fastest (least disturbed by
  the rest of the machine) or the median of them;
- **comparing times** on a machine that may be busy: :func:`interleaved_times_ms` times several
  calls in turn, round after round, so that a busy moment slows all of them alike, and
  :func:`clearly_less` says whether one set of repeats is below another beyond their spread
  (a page then prints "not shown on this machine now" instead of failing);
- **peak memory** beyond what existed before the call, its output included: on CUDA,
  ``torch.cuda.max_memory_allocated``; on a CPU, which has no such counter, PyTorch's profiler
  records every allocation (+bytes) and free (-bytes) its CPU allocator sees, and the running
  total's maximum is the peak;
- **which operations** a call runs: :func:`operation_names` lists the ``aten::`` operations PyTorch's
  profiler records (one fused kernel, or several passes over a tensor), and :func:`kernel_name` the
  attention kernel among them;
- **sequential operations and path length**, read off the autograd graph of a result:
  :func:`longest_product_chain`, the most matrix products on one path, which must run one after the
  other, and :func:`shortest_product_path`, the fewest products between an input and the result. The
  chapter "Attention from scratch" counts both for self-attention and for a recurrent layer.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import TypeVar

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["synchronize", "times_ms", "time_ms", "interleaved_times_ms", "clearly_less", "peak_memory_bytes",
           "peak_memory_mib", "operation_names", "full_size_operations", "kernel_name", "longest_product_chain", "shortest_product_path"]

MiB = 2**20
K = TypeVar("K", bound=Hashable)


def synchronize(device: torch.device | str = "cpu") -> None:
    """Wait for the GPU to finish its queued work (no-op on a CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def times_ms(fn: Callable[[], object], runs: int = 3, warmup: int = 1, device: torch.device | str = "cpu") -> list[float]:
    """Milliseconds of each of ``runs`` calls of ``fn()``, after ``warmup`` untimed calls."""
    if runs < 1 or warmup < 0:
        raise ValueError(f"times_ms: runs must be >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(1e3 * (time.perf_counter() - start))
    return times


def time_ms(
    fn: Callable[[], object],
    runs: int = 3,
    warmup: int = 1,
    device: torch.device | str = "cpu",
    statistic: Callable[[list[float]], float] = min,
) -> float:
    """``statistic`` (the fastest, by default; or e.g. ``statistics.median``) of ``times_ms``."""
    return statistic(times_ms(fn, runs, warmup, device))


def interleaved_times_ms(calls: Mapping[K, Callable[[], object]], rounds: int = 5, warmup: int = 1,
                         device: torch.device | str = "cpu") -> dict[K, list[float]]:
    """Milliseconds of ``rounds`` calls of each ``calls[key]()``, taken in turn: one of each per round.

    Back-to-back timings of one call, then the next, compare badly on a shared machine: a busy
    moment slows whichever call runs then. Interleaved, it slows one repeat of each, and the
    median of each list (or :func:`clearly_less`) compares them fairly. Taught in the chapter
    "Efficient attention".
    """
    if rounds < 1 or warmup < 0:
        raise ValueError(f"interleaved_times_ms: rounds must be >= 1 and warmup >= 0, got rounds={rounds}, "
                         f"warmup={warmup}")
    for fn in calls.values():
        for _ in range(warmup):
            fn()
    times: dict[K, list[float]] = {key: [] for key in calls}
    for _ in range(rounds):
        for key, fn in calls.items():
            times[key] += times_ms(fn, runs=1, warmup=0, device=device)
    return times


def clearly_less(smaller: Sequence[float], larger: Sequence[float], factor: float = 1.0) -> bool:
    """True when the repeats in ``smaller`` times ``factor`` all lie below those in ``larger``, leaving
    out the single most disturbed repeat on each side (the slowest of ``smaller``, the fastest of
    ``larger``) when a side has three or more.

    A claim about time ("fused is faster", "doubling L more than doubles the time": ``factor=2``)
    that holds beyond the spread of the repeats; one repeat slowed by a burst of other work does not
    decide it. On a busy machine the spread widens and the answer becomes False: "not shown now",
    never a wrong "shown". Taught in the chapter "Efficient attention".
    """
    if not smaller or not larger:
        raise ValueError(f"clearly_less: needs at least one repeat on each side, got {len(smaller)} and {len(larger)}")
    high = sorted(smaller)[-2] if len(smaller) >= 3 else max(smaller)
    low = sorted(larger)[1] if len(larger) >= 3 else min(larger)
    return high * factor < low


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for a moment: some PyTorch builds' profilers log
    start/stop lines there on every run, noise on a page."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _profiled(fn: Callable[[], object], device: torch.device | str, memory: bool, shapes: bool = False) -> profile:
    """Run fn() once under PyTorch's profiler (CPU-side events; ``shapes``: the inputs' shapes too) and return it."""
    with _stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=memory,
                                     record_shapes=shapes) as prof:
        fn()
        synchronize(device)
    return prof


def peak_memory_bytes(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes allocated by tensors on ``device`` while ``fn()`` runs, beyond what existed before."""
    device = torch.device(device)
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    if device.type != "cpu":
        raise ValueError(f"peak_memory_bytes: measures cpu and cuda, not {device.type}")
    with _stderr_silenced():
        events = _profiled(fn, device, memory=True).events()
        # Each op's own net allocation (+) or free (-); frees outside any op are "[memory]"
        # events. Allocations count from the op's start, frees from its end.
        changes = sorted((e.time_range.start if e.self_cpu_memory_usage > 0 else e.time_range.end,
                          e.self_cpu_memory_usage) for e in events if e.self_cpu_memory_usage)
    held = peak = 0
    for _, change in changes:
        held += change
        peak = max(peak, held)
    return peak


def peak_memory_mib(fn: Callable[[], object], device: torch.device | str = "cpu") -> float:
    """``peak_memory_bytes`` in MiB."""
    return peak_memory_bytes(fn, device) / MiB


def operation_names(fn: Callable[[], object], device: torch.device | str = "cpu") -> list[str]:
    """The PyTorch operations (``aten::...``) that fn() runs, nested ones included, in the order the
    profiler records them."""
    with _stderr_silenced():
        events = _profiled(fn, device, memory=False).events()
    return [e.name for e in events if e.name.startswith("aten::")]


#: Operations that allocate, view or cast rather than compute (left out of :func:`full_size_operations`).
BOOKKEEPING = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::reshape",
                         "aten::as_strided", "aten::resize_", "aten::result_type", "aten::to", "aten::_to_copy",
                         "aten::copy_", "aten::fill_", "aten::type_as", "aten::expand", "aten::unsqueeze",
                         "aten::squeeze", "aten::detach", "aten::lift_fresh"})


def full_size_operations(fn: Callable[[], object], shape: tuple[int, ...],
                         device: torch.device | str = "cpu") -> list[str]:
    """The innermost PyTorch operations fn() runs whose first input has ``shape``: each one pass over a tensor
    of that size. An operation that only calls others (``aten::layer_norm`` calls ``aten::native_layer_norm``,
    ``aten::mean`` calls ``aten::sum``) is not counted again, nor one on a smaller tensor (the per-vector
    statistics of a norm). Taught in the chapter "From the original block to a modern LLM block"."""
    with _stderr_silenced():
        events = _profiled(fn, device, memory=False, shapes=True).events()

    def computes(e: object) -> bool:
        return e.name.startswith("aten::") and e.name not in BOOKKEEPING

    leaves = [e for e in events if computes(e) and not any(computes(c) for c in e.cpu_children)]
    return [e.name for e in leaves if e.input_shapes and list(e.input_shapes[0]) == list(shape)]


def kernel_name(fn: Callable[[], object], device: torch.device | str = "cpu") -> str:
    """The attention kernel PyTorch ran inside fn(), e.g. ``aten::_scaled_dot_product_...``."""
    names = [name for name in operation_names(fn, device) if name.startswith("aten::_scaled_dot_product")]
    return names[0] if names else "none (no fused kernel ran)"


def _is_product(node: object) -> bool:
    """An autograd node that multiplies matrices (``MmBackward0``, ``AddmmBackward0``, ``BmmBackward0``...)."""
    return "mm" in type(node).__name__.lower()


def _graph_of(output: torch.Tensor) -> object:
    """The autograd node that made ``output``; a ValueError for a tensor with no graph."""
    if output.grad_fn is None:
        raise ValueError("output has no autograd graph: compute it from tensors with requires_grad=True")
    return output.grad_fn


def longest_product_chain(output: torch.Tensor) -> int:
    """Sequential operations: the most matrix products on one path of the autograd graph that made ``output``.

    Products on one path wait for each other; products on different paths could run at the same time.
    Other operations (softmax, tanh, additions) count 0. The chapter "Attention from scratch" reads it
    for self-attention (3, whatever the length) and for an RNN (one per token).
    """
    most: dict[object, int] = {}  # node -> the most products on a path from a leaf up to it
    stack = [(_graph_of(output), False)]
    while stack:  # depth first, children before their node; no recursion, so long graphs are fine
        node, children_done = stack.pop()
        children = [n for n, _ in node.next_functions if n is not None]
        if children_done:
            most[node] = _is_product(node) + max((most[n] for n in children), default=0)
        elif node not in most:
            stack.append((node, True))
            stack.extend((n, False) for n in children if n not in most)
    return most[output.grad_fn]


def shortest_product_path(output: torch.Tensor, source: torch.Tensor) -> int:
    """Path length: the fewest matrix products between the leaf tensor ``source`` and ``output``.

    ``source`` must be a leaf with ``requires_grad=True`` (an input the graph starts from). Other
    operations count 0. The chapter "Attention from scratch" reads it from token 0 to the last token's
    output: 2 for self-attention at every length, one per token for an RNN.
    """
    best: dict[object, int] = {}
    queue = deque([(_graph_of(output), 0)])
    while queue:  # breadth first, a product costing 1 and anything else 0 (a 0-1 BFS)
        node, cost = queue.popleft()
        if node in best and best[node] <= cost:
            continue
        best[node] = cost
        if getattr(node, "variable", None) is source:
            return cost
        step = cost + _is_product(node)
        for n, _ in node.next_functions:
            if n is not None:
                (queue.appendleft if step == cost else queue.append)((n, step))
    raise ValueError("output does not depend on source (is source a leaf with requires_grad=True?)")
