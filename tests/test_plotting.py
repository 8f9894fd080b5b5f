"""Figures: the right panels, labels, colour scale and data; never shown."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from lessons_src.plotting import CMAP, attention_heatmap, head_grid, loss_curve  # noqa: E402
from lessons_src.training import TrainResult  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _weights(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1)


def test_attention_heatmap_draws_the_weights_with_labels():
    weights = _weights(4, 5)
    ax = attention_heatmap(weights, query_labels=list("abcd"), key_labels=list("vwxyz"), title="one head")
    assert isinstance(ax, Axes)
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query" and ax.get_title() == "one head"
    assert [t.get_text() for t in ax.get_xticklabels()] == list("vwxyz")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("abcd")
    mesh = ax.collections[0]
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(4, 5), weights.numpy(), rtol=1e-6)
    assert mesh.get_cmap().name == CMAP and mesh.get_clim() == (0.0, 1.0)
    colorbar_axes = [a for a in ax.figure.axes if a is not ax]
    assert len(colorbar_axes) == 1 and colorbar_axes[0].get_ylabel() == "attention weight"
    assert len(ax.texts) == 20  # small matrix: values written in the cells
    assert ax.figure.get_facecolor()[:3] == (1.0, 1.0, 1.0)


def test_attention_heatmap_defaults_and_big_matrices():
    ax = attention_heatmap(_weights(12, 12).numpy())
    assert ax.get_xlabel() == "key position" and ax.get_ylabel() == "query position"
    assert len(ax.texts) == 0  # 144 cells: no annotations by default
    ax = attention_heatmap(_weights(12, 12), annotate=True)
    assert len(ax.texts) == 144


def test_attention_heatmap_draws_into_a_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    ax = attention_heatmap(_weights(3, 3), ax=right)
    assert ax is right and not left.collections


def test_attention_heatmap_errors():
    with pytest.raises(ValueError, match=r"weights must be \(Lq, Lk\), got shape \(2, 3, 3\)"):
        attention_heatmap(_weights(2, 3, 3))
    with pytest.raises(ValueError, match=r"key_labels has 2 entries but the weights have 3 positions"):
        attention_heatmap(_weights(3, 3), key_labels=["a", "b"])


@pytest.mark.parametrize("num_heads", [1, 3, 4, 6])
def test_head_grid_has_one_panel_per_head_plus_the_average(num_heads):
    weights = _weights(num_heads, 5, 5, seed=num_heads)
    fig = head_grid(weights, labels=list("hello"))
    assert isinstance(fig, Figure)
    panels = [a for a in fig.axes if a.get_title()]
    expected = [f"head {h}" for h in range(num_heads)] + (["average of heads"] if num_heads > 1 else [])
    assert [a.get_title() for a in panels] == expected
    assert len(fig.axes) == len(expected) + 1  # plus one shared colorbar, no empty grid cells
    colorbar = [a for a in fig.axes if not a.get_title()][0]
    assert colorbar.get_ylabel() == "attention weight"
    for ax in panels:
        assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
        assert [t.get_text() for t in ax.get_xticklabels()] == list("hello")
    if num_heads > 1:
        average = np.asarray(panels[-1].collections[0].get_array()).reshape(5, 5)
        np.testing.assert_allclose(average, weights.mean(0).numpy(), rtol=1e-6)
    fig.savefig(io.BytesIO(), format="png")  # it renders


def test_head_grid_without_average_and_errors():
    fig = head_grid(_weights(2, 3, 4), average=False)
    assert [a.get_title() for a in fig.axes if a.get_title()] == ["head 0", "head 1"]
    with pytest.raises(ValueError, match=r"Lq must equal Lk; got Lq=3, Lk=4"):
        head_grid(_weights(2, 3, 4), labels=list("abc"))
    with pytest.raises(ValueError, match=r"weights must be \(H, Lq, Lk\), got shape \(3, 4\)"):
        head_grid(_weights(3, 4))


def test_head_grid_is_not_registered_with_pyplot():
    before = plt.get_fignums()
    head_grid(_weights(2, 3, 3))
    assert plt.get_fignums() == before  # shown once, as a cell's value, never twice


def test_loss_curve_one_and_many():
    ax = loss_curve([1.0, 0.5, 0.25, 0.1])
    assert isinstance(ax, Axes)
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "training step" and ax.get_ylabel() == "MSE loss"
    (line,) = ax.get_lines()
    np.testing.assert_allclose(line.get_ydata(), [1.0, 0.5, 0.25, 0.1])
    assert ax.get_legend() is None

    result = TrainResult(losses=[0.9, 0.3, 0.2])
    ax = loss_curve({"ours": torch.tensor([1.0, 0.4, 0.3]), "torch": result}, log=False)
    assert ax.get_yscale() == "linear"
    assert [line.get_label() for line in ax.get_lines()] == ["ours", "torch"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ours", "torch"]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), [0.9, 0.3, 0.2])
    assert ax.get_lines()[0].get_color() != ax.get_lines()[1].get_color()


def test_loss_curve_errors():
    with pytest.raises(ValueError, match=r"non-empty 1-D sequence, got shape \(2, 2\)"):
        loss_curve([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match=r"empty dict"):
        loss_curve({})
