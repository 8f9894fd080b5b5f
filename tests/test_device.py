import random

import numpy as np
import pytest
import torch

from lessons_src import default_device, one_cpu_thread, run_in_parallel, seed_everything, train_trigger


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


def _seeded_draw(seed: int, size: int) -> list[float]:
    torch.manual_seed(seed)
    return torch.rand(size).tolist()


def _fails(value: int) -> int:
    if value == 1:
        raise ValueError(f"run {value} failed")
    return value


def test_run_in_parallel_gives_the_loops_numbers_to_the_last_bit():
    runs = [dict(variants={"plain": {}, "QK-norm": dict(qk_norm=True)}, seed=seed, lr=1.0, steps=5)
            for seed in range(3)]
    loop = [train_trigger(**run) for run in runs]
    after_loop = torch.get_rng_state()
    torch.manual_seed(99)  # another state, which run_in_parallel must leave as the loop's last run does
    parallel = run_in_parallel(train_trigger, runs, processes=2)
    assert torch.equal(torch.get_rng_state(), after_loop), "the global generator should be left as after the loop"
    for (models, losses, curves), (their_models, their_losses, their_curves) in zip(loop, parallel, strict=True):
        assert losses == their_losses and curves == their_curves, "each run's losses should be the loop's, bit for bit"
        for name, model in models.items():
            for ours, theirs in zip(model.parameters(), their_models[name].parameters(), strict=True):
                assert torch.equal(ours, theirs), f"{name}: a trained weight differs from the loop's"


def test_run_in_parallel_keeps_the_order_of_the_runs_and_runs_serially_on_request():
    runs = [dict(seed=seed, size=2) for seed in range(5)]
    expected = [_seeded_draw(**run) for run in runs]
    assert run_in_parallel(_seeded_draw, runs, processes=2) == expected
    assert run_in_parallel(_seeded_draw, runs, processes=1) == expected
    assert run_in_parallel(_seeded_draw, []) == []


def test_run_in_parallel_passes_on_a_runs_error_and_refuses_bad_input_by_name():
    with pytest.raises(ValueError, match="run 1 failed"):
        run_in_parallel(_fails, [dict(value=0), dict(value=1)], processes=2)
    with pytest.raises(TypeError, match="run 1 must be a dict"):
        run_in_parallel(_seeded_draw, [dict(seed=0, size=1), (1, 2)])
    with pytest.raises(TypeError, match="fn must be callable"):
        run_in_parallel("train_trigger", [])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="processes must be an int >= 1"):
            run_in_parallel(_seeded_draw, [], processes=bad)


_LARGE_RESULTS_AFTER_THE_PARENTS_THREADS = """
import torch
from lessons_src import run_in_parallel

def weights(seed):
    torch.manual_seed(seed)
    return torch.randn(300, 300)  # large enough that sending it back copies it on several threads

torch.set_num_threads(2)
x = torch.randn(1000, 1000)
(x @ x).clone()  # the parent's OpenMP threads run before the fork, as after a page's earlier cells
results = run_in_parallel(weights, [dict(seed=seed) for seed in range(4)], processes=2)
assert all(torch.equal(r, weights(seed)) for seed, r in enumerate(results))
print("done")
"""


def test_run_in_parallel_returns_large_tensors_after_the_parent_ran_on_threads():
    # It hung for good before each worker stayed on one thread (the copy into shared memory waited on
    # OpenMP threads a forked child does not have); a fresh interpreter, so the hang cannot stall the suite.
    import subprocess
    import sys

    finished = subprocess.run([sys.executable, "-c", _LARGE_RESULTS_AFTER_THE_PARENTS_THREADS],
                              capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0 and finished.stdout.strip() == "done", finished.stderr[-2000:]
