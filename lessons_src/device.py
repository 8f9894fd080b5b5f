"""Device and seeding helpers: CUDA when present, CPU otherwise; nothing hard-codes a device."""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["default_device", "seed_everything"]


def default_device() -> torch.device:
    """``cuda`` when a GPU is available, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (CPU and CUDA); return a CPU generator seeded the same."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)
