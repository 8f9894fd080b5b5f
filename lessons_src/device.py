"""Device and seeding helpers: CUDA when present, CPU otherwise; nothing hard-codes a device.

Taught in the chapter "Attention from scratch" (its set-up cell, which every chapter repeats).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

__all__ = ["default_device", "seed_everything", "one_cpu_thread"]


def default_device() -> torch.device:
    """``cuda`` when a GPU is available, else ``cpu``. Used from the chapter "Attention from scratch" on."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (CPU and CUDA); return a CPU generator seeded the same.

    Used from the chapter "Attention from scratch" on.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)


@contextmanager
def one_cpu_thread() -> Iterator[None]:
    """Run the block on one CPU thread, then restore the thread count.

    For the course's tiny tensors one thread is as fast as two, and it cannot stall: on a busy
    2-core machine a second intra-op thread made small training loops 10-20x slower (measured by
    the chapter authors). The exercise checks and some chapters use it, first the chapter
    "Why scale by √d_k"; GPU work is unaffected.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
