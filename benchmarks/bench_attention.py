"""Explicit attention (``lessons_src.scaled_dot_product_attention``) against ``fused_attention``.

Forward pass only (no autograd), batch 1, 8 heads, head_dim 64, at sequence lengths 256, 1024 and
4096 (change with ``--lengths``), on the current device. Time: median of ``--runs`` calls after
one warm-up. Peak memory:

* CUDA: ``torch.cuda.max_memory_allocated`` during one call, minus what was allocated before it.
* CPU: each (method, length) runs once in a fresh subprocess, after a small warm-up call and
  with the inputs already made: the peak
  resident set (Linux ``VmHWM``, reset just before the call) minus the resident set before it.
  This counts every page the call touched, allocator overhead included, so small numbers are
  noisy at the MiB level. (``ru_maxrss`` would be wrong here: Linux carries it over from the
  parent process.)

The "weights size" column is B·H·L²·4 bytes: what the explicit method must materialise.
Usage: python benchmarks/bench_attention.py [--lengths 256 1024 4096] [--runs 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

from lessons_src.attention import scaled_dot_product_attention
from lessons_src.device import default_device
from lessons_src.efficient import fused_attention

BATCH, NUM_HEADS, HEAD_DIM = 1, 8, 64
MIB = 2**20


def explicit(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return scaled_dot_product_attention(query, key, value)[0]


METHODS = {"explicit": explicit, "fused": fused_attention}


def make_inputs(seq_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(0)
    shape = (BATCH, NUM_HEADS, seq_len, HEAD_DIM)  # (B, H, L, d_k)
    return tuple(torch.randn(shape, generator=generator, device=device) for _ in range(3))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def time_ms(method: str, seq_len: int, device: torch.device, runs: int) -> float:
    inputs = make_inputs(seq_len, device)
    METHODS[method](*inputs)  # warm-up
    times = []
    for _ in range(runs):
        _sync(device)
        start = time.perf_counter()
        METHODS[method](*inputs)
        _sync(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


@torch.no_grad()
def peak_cuda_mib(method: str, seq_len: int, device: torch.device) -> float:
    inputs = make_inputs(seq_len, device)
    METHODS[method](*inputs)  # warm-up: kernels chosen, workspaces made
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    METHODS[method](*inputs)
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / MIB


def _status_bytes(field: str) -> int | None:
    """``VmHWM`` (peak) or ``VmRSS`` (now) of this process from /proc, in bytes; None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@torch.no_grad()
def _child_peak_cpu(method: str, seq_len: int) -> None:
    """Run in the subprocess: print the peak resident-memory growth of one call, in bytes.

    Not ``ru_maxrss``: Linux carries it over from the parent across fork + exec, so a child of
    a big parent starts with the parent's peak and would report 0.
    """
    METHODS[method](*make_inputs(64, torch.device("cpu")))  # load code pages and thread pools first
    inputs = make_inputs(seq_len, torch.device("cpu"))
    if _status_bytes("VmHWM") is not None and _reset_peak():
        before = _status_bytes("VmRSS")
        METHODS[method](*inputs)
        grown = _status_bytes("VmHWM") - before
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        METHODS[method](*inputs)
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * (1 if sys.platform == "darwin" else 1024)
    print(json.dumps({"bytes": grown}))


def peak_cpu_mib(method: str, seq_len: int) -> float:
    cmd = [sys.executable, __file__, "--child", method, str(seq_len)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["bytes"] / MIB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "SEQ_LEN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child_peak_cpu(args.child[0], int(args.child[1]))
        return 0
    device = torch.device(args.device) if args.device else default_device()

    memory_method = {
        "cuda": "torch.cuda.max_memory_allocated - allocated before",
        "cpu": "peak RSS (VmHWM; ru_maxrss off Linux) growth of one call in a fresh subprocess",
    }.get(device.type, f"not measured on {device.type}")
    print(
        f"B={BATCH}, H={NUM_HEADS}, head_dim={HEAD_DIM}, float32, forward only; device {device}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"time: median of {args.runs} calls; peak memory: {memory_method}")
    header = (
        f"{'L':>6} {'weights size':>13} {'explicit ms':>12} {'fused ms':>10} {'speed-up':>9} "
        f"{'explicit MiB':>13} {'fused MiB':>10}"
    )
    print(header)
    print("-" * len(header))
    for seq_len in args.lengths:
        times = {m: time_ms(m, seq_len, device, args.runs) for m in METHODS}
        if device.type == "cuda":
            peaks = {m: peak_cuda_mib(m, seq_len, device) for m in METHODS}
        elif device.type == "cpu":
            peaks = {m: peak_cpu_mib(m, seq_len) for m in METHODS}
        else:
            peaks = {m: float("nan") for m in METHODS}
        weights_mib = BATCH * NUM_HEADS * seq_len**2 * 4 / MIB
        print(
            f"{seq_len:>6} {weights_mib:>9.1f} MiB {times['explicit']:>12.2f} {times['fused']:>10.2f} "
            f"{times['explicit'] / times['fused']:>8.1f}x {peaks['explicit']:>13.1f} {peaks['fused']:>10.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
