"""Explicit attention (``lessons_src.scaled_dot_product_attention``) against ``fused_attention``.

Forward pass only (no autograd), batch 1, 8 heads, head_dim 64, at sequence lengths 256, 1024 and
4096 (change with ``--lengths``), on the current device, measured with ``lessons_src.profiling``
(as chapter "Efficient attention" measures):

* time: the median of ``--runs`` calls after one warm-up (synchronized on a GPU);
* peak memory beyond what existed before the call, the output included: on CUDA
  ``torch.cuda.max_memory_allocated``; on a CPU the peak of the allocations minus frees that
  PyTorch's profiler records from its CPU allocator. These are tensor bytes: allocator overhead
  and pages the process already held are not counted.

The "weights size" column is B·H·L²·4 bytes: what the explicit method must materialise.
Usage: python benchmarks/bench_attention.py [--lengths 256 1024 4096] [--runs 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial

import torch

from lessons_src import fused_attention, scaled_dot_product_attention
from lessons_src.device import default_device
from lessons_src.profiling import peak_memory_mib, time_ms

BATCH, NUM_HEADS, HEAD_DIM = 1, 8, 64
MIB = 2**20


def explicit(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return scaled_dot_product_attention(query, key, value)[0]


METHODS = {"explicit": explicit, "fused": fused_attention}


def make_inputs(seq_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(0)
    shape = (BATCH, NUM_HEADS, seq_len, HEAD_DIM)  # (B, H, L, d_k)
    return tuple(torch.randn(shape, generator=generator, device=device) for _ in range(3))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    args = parser.parse_args()
    device = torch.device(args.device) if args.device else default_device()

    memory_method = {
        "cuda": "torch.cuda.max_memory_allocated - allocated before",
        "cpu": "peak of the allocations minus frees in PyTorch's profiler, during one call",
    }.get(device.type, f"not measured on {device.type}")
    print(
        f"B={BATCH}, H={NUM_HEADS}, head_dim={HEAD_DIM}, float32, forward only; device {device}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"time: median of {args.runs} calls after a warm-up; peak memory: {memory_method}")
    header = (
        f"{'L':>6} {'weights size':>13} {'explicit ms':>12} {'fused ms':>10} {'speed-up':>9} "
        f"{'explicit MiB':>13} {'fused MiB':>10}"
    )
    print(header)
    print("-" * len(header))
    measures_memory = device.type in ("cpu", "cuda")
    for seq_len in args.lengths:
        times, peaks = {}, {}
        with torch.no_grad():
            inputs = make_inputs(seq_len, device)
            for name, method in METHODS.items():
                call = partial(method, *inputs)  # method(query, key, value)
                times[name] = time_ms(call, runs=args.runs, device=device, statistic=statistics.median)
                peaks[name] = peak_memory_mib(call, device) if measures_memory else float("nan")
        weights_mib = BATCH * NUM_HEADS * seq_len**2 * 4 / MIB
        print(
            f"{seq_len:>6} {weights_mib:>9.1f} MiB {times['explicit']:>12.2f} {times['fused']:>10.2f} "
            f"{times['explicit'] / times['fused']:>8.1f}x {peaks['explicit']:>13.1f} {peaks['fused']:>10.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
