"""Device and seeding helpers: CUDA when present, CPU otherwise; nothing hard-codes a device.

Taught in the chapter "Attention from scratch" (its set-up cell, which every chapter repeats).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["default_device", "seed_everything", "one_cpu_thread", "run_in_parallel"]


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


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use (a container's share, not the host's)
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _one_run(fn: Callable[..., Any], kwargs: dict) -> tuple[Any, Tensor]:
    with one_cpu_thread():
        return fn(**kwargs), torch.get_rng_state()


def _one_thread_worker() -> None:
    # A forked worker stays on one thread for good, also while the pool sends its result back: that send
    # copies large tensors into shared memory, and a copy run on OpenMP threads in a child forked from a
    # parent whose OpenMP threads have run waits for them forever (libgomp is not fork-safe).
    torch.set_num_threads(1)


def run_in_parallel(fn: Callable[..., Any], runs: Iterable[dict], *, processes: int | None = None) -> list[Any]:
    """``[fn(**run) for run in runs]``, each run in its own process, one per CPU core, on one thread each.

    For independent runs that seed their own generators, such as :func:`lessons_src.train_trigger`'s
    seeds: each run computes exactly what the loop would, so the results are the loop's to the last bit
    (tested), and the global generator is left as the loop's last run leaves it. On a 2-core machine a
    page's sweep takes about half as long. Processes are forked, so this runs them in parallel on Linux
    (Colab, Binder, CI); elsewhere, or with ``processes=1``, or for a single run, it is the loop.
    Taught in the chapter "Attention in today's open models".
    """
    if not callable(fn):
        raise TypeError(f"run_in_parallel: fn must be callable, got {type(fn).__name__}")
    runs = list(runs)
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise TypeError(f"run_in_parallel: run {i} must be a dict of keyword arguments, got {type(run).__name__}")
    if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int) or processes < 1):
        raise ValueError(f"run_in_parallel: processes must be an int >= 1, got {processes!r}")
    processes = min(processes or _cores(), len(runs))
    if processes <= 1 or not sys.platform.startswith("linux"):  # fork is safe for torch on Linux only
        outcomes = [_one_run(fn, run) for run in runs]
    else:
        with multiprocessing.get_context("fork").Pool(processes, initializer=_one_thread_worker) as pool:
            outcomes = pool.starmap(_one_run, [(fn, run) for run in runs], chunksize=1)
    if outcomes:
        torch.set_rng_state(outcomes[-1][1])
    return [result for result, _ in outcomes]
