import random

import numpy as np
import pytest
import torch

from lessons_src import default_device, one_cpu_thread, seed_everything


def test_default_device_follows_cuda_availability():
    assert default_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_seed_everything_makes_every_generator_repeat():
    draws = []
    for _ in range(2):
        generator = seed_everything(123)
        draws.append((random.random(), np.random.rand(), torch.rand(3).tolist(),
                      torch.rand(2, generator=generator).tolist()))
    assert draws[0] == draws[1]
    assert seed_everything(1).initial_seed() == 1


def test_one_cpu_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    with one_cpu_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), one_cpu_thread():
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before
