"""lessons_src.profiling: calls counted, peak memory of known allocations, the kernel's name.

No wall-clock thresholds: the machine is shared. The timings are printed, not asserted."""

import statistics

import pytest
import torch

from lessons_src import fused_attention, scaled_dot_product_attention
from lessons_src.profiling import (
    MiB,
    clearly_less,
    full_size_operations,
    interleaved_times_ms,
    kernel_name,
    longest_product_chain,
    operation_names,
    peak_memory_bytes,
    peak_memory_mib,
    shortest_product_path,
    time_ms,
    times_ms,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FLOAT = 4  # bytes per float32


def test_times_ms_warms_up_then_times_each_run():
    calls = []
    times = times_ms(lambda: calls.append(1), runs=5, warmup=2)
    assert len(calls) == 7 and len(times) == 5
    assert all(t >= 0 for t in times)
    print("times of an empty call, ms:", [round(t, 4) for t in times])


def test_time_ms_takes_the_statistic_of_the_runs():
    seen = []

    def statistic(times):
        seen.append(list(times))
        return statistics.median(times)

    result = time_ms(lambda: sum(range(1000)), runs=4, statistic=statistic)
    assert len(seen) == 1 and len(seen[0]) == 4
    assert result == statistics.median(seen[0])
    assert time_ms(lambda: None, runs=3) >= 0  # the fastest, by default


def test_bad_runs():
    with pytest.raises(ValueError, match="runs must be >= 1"):
        times_ms(lambda: None, runs=0)
    with pytest.raises(ValueError, match="measures cpu and cuda, not meta"):
        peak_memory_bytes(lambda: None, "meta")


@pytest.mark.parametrize("device", DEVICES)
def test_peak_memory_of_one_tensor_is_its_size(device):
    size = 1000 * 1000 * FLOAT
    peak = peak_memory_bytes(lambda: torch.ones(1000, 1000, device=device), device)
    assert size <= peak <= size + 64 * 1024  # the tensor, and at most an allocator's rounding


@pytest.mark.parametrize("device", DEVICES)
def test_peak_is_what_is_alive_at_once_not_the_total(device):
    size = 256 * 1024 * FLOAT

    def two_at_once():
        a = torch.ones(256, 1024, device=device)
        b = torch.ones(256, 1024, device=device)
        return a, b

    def one_after_the_other():
        for _ in range(4):
            a = torch.ones(256, 1024, device=device)
            del a

    assert 2 * size <= peak_memory_bytes(two_at_once, device) < 2.5 * size
    assert size <= peak_memory_bytes(one_after_the_other, device) < 1.5 * size


@pytest.mark.parametrize("device", DEVICES)
def test_explicit_attention_holds_scores_and_weights(device):
    # As chapter "Efficient attention" predicts: (B, H, L, L) scores and weights alive together,
    # plus the (B, H, L, d_k) output.
    query = torch.randn(1, 4, 256, 32, device=device)
    predicted = 2 * 1 * 4 * 256 * 256 * FLOAT + query.nbytes
    with torch.no_grad():
        measured = peak_memory_bytes(lambda: scaled_dot_product_attention(query, query, query), device)
        fused = peak_memory_bytes(lambda: fused_attention(query, query, query), device)
    assert abs(measured - predicted) <= 0.1 * predicted
    assert fused < 0.5 * measured  # no (L, L) matrix
    assert peak_memory_mib(lambda: torch.ones(MiB // FLOAT, device=device), device) == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("device", DEVICES)
def test_operation_names_lists_what_a_call_runs(device):
    x = torch.randn(4, 8, device=device)
    names = operation_names(lambda: torch.exp(x).sum(), device)
    assert "aten::exp" in names and "aten::sum" in names
    assert names.index("aten::exp") < names.index("aten::sum")
    assert all(name.startswith("aten::") for name in names)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_name(device):
    query = torch.randn(1, 2, 16, 8, device=device)
    name = kernel_name(lambda: fused_attention(query, query, query), device)
    assert name.startswith("aten::_scaled_dot_product_") and "math" not in name
    assert kernel_name(lambda: scaled_dot_product_attention(query, query, query), device) == "none (no fused kernel ran)"


def test_interleaved_times_take_one_of_each_per_round():
    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in ("a", "b", "c")}
    times = interleaved_times_ms(calls, rounds=3, warmup=1)
    assert order == ["a", "b", "c"] + ["a", "b", "c"] * 3  # the warm-ups, then round after round
    assert list(times) == ["a", "b", "c"] and all(len(t) == 3 and min(t) >= 0 for t in times.values())
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        interleaved_times_ms(calls, rounds=0)


def test_clearly_less_needs_the_repeats_apart_but_one():
    assert clearly_less([1.0, 1.2], [2.5, 3.0], factor=2)  # 1.2 x 2 < 2.5
    assert not clearly_less([1.0, 1.3], [2.5, 3.0], factor=2)  # 1.3 x 2 > 2.5: the spreads overlap
    assert not clearly_less([1.0, 5.0], [2.0, 3.0])  # with two repeats, each one counts
    assert clearly_less([1.0, 1.1, 9.0], [0.5, 2.0, 2.2])  # one burst on each side is left out
    assert not clearly_less([1.0, 9.0, 9.0], [0.5, 2.0, 2.2])  # two are not
    with pytest.raises(ValueError, match="at least one repeat"):
        clearly_less([], [1.0])


def _rnn(xs, w, u):
    """h_t = tanh(x_t w + h_(t-1) u), from h_0 = 0: L tensors (1, D) in, the last state out."""
    h = torch.zeros_like(xs[0])
    for x in xs:
        h = torch.tanh(x @ w + h @ u)
    return h


def test_product_chain_and_path_count_matrix_products():
    a, b, c = (torch.randn(4, 4, requires_grad=True) for _ in range(3))
    x = torch.randn(1, 4, requires_grad=True)
    chained = x @ a @ b @ c  # three products, one after the other
    assert longest_product_chain(chained) == 3
    assert shortest_product_path(chained, x) == 3
    assert shortest_product_path(chained, c) == 1  # c enters at the last product
    branches = torch.tanh(x @ a) + x @ b @ c  # two paths: one product and two
    assert longest_product_chain(branches) == 2
    assert shortest_product_path(branches, x) == 1
    skip = torch.tanh(x @ a @ b) + x  # the residual path has no product at all
    assert longest_product_chain(skip) == 2
    assert shortest_product_path(skip, x) == 0


@pytest.mark.parametrize("length", [1, 4, 16])
def test_an_rnn_chains_one_product_per_token_and_attention_a_constant(length):
    """The counts of the chapter "Attention from scratch": an RNN needs L of each, attention 3 and 2."""
    d_model = 8
    w, u, w_q, w_k, w_v = (torch.randn(d_model, d_model) / d_model**0.5 for _ in range(5))
    u.requires_grad_()  # as nn.RNNCell's weights do, so that even h_0 @ u is in the graph
    xs = [torch.randn(1, d_model, requires_grad=True) for _ in range(length)]
    last = _rnn(xs, w, u)
    assert longest_product_chain(last) == length
    assert shortest_product_path(last, xs[0]) == length
    x = torch.stack(xs, dim=1)  # (1, L, D)
    attended = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)[0][:, -1]  # (1, D)
    assert longest_product_chain(attended) == 3  # x W_Q, then Q Kᵀ, then A V
    assert shortest_product_path(attended, xs[0]) == 2  # x_0 W_V, then the weighted sum


def test_a_long_graph_does_not_recurse_too_deep():
    x = torch.randn(1, 2, requires_grad=True)
    u = torch.eye(2)
    h = x
    for _ in range(5000):
        h = h @ u
    assert longest_product_chain(h) == 5000
    assert shortest_product_path(h, x) == 5000


def test_product_counts_say_what_is_wrong():
    x, other = torch.randn(2, 2, requires_grad=True), torch.randn(2, 2, requires_grad=True)
    with pytest.raises(ValueError, match="no autograd graph"):
        longest_product_chain(torch.randn(2, 2))
    with pytest.raises(ValueError, match="does not depend on source"):
        shortest_product_path(x @ x, other)


def test_full_size_operations_counts_each_pass_over_the_tensor_once():
    x = torch.randn(2, 8, 16)

    def normalise():
        s = (x * 2).sum(dim=-1, keepdim=True)  # two passes over x's size: the product and the sum
        s = torch.sqrt(s.abs() + 1)  # on one number per vector: not counted
        return x / s  # a third pass

    assert full_size_operations(normalise, tuple(x.shape)) == ["aten::mul", "aten::sum", "aten::div"]
    with torch.no_grad():  # a module whose operation wraps another (layer_norm -> native_layer_norm): counted once
        assert full_size_operations(lambda: torch.nn.LayerNorm(16)(x), tuple(x.shape)) == \
            ["aten::native_layer_norm"]
