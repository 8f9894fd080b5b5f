"""Figures for attention weights and training curves. Used from the chapter "Training attention" on.

Colours: the sequential colormap "viridis" (perceptually uniform, colour-blind safe, readable in
greyscale) on a fixed 0..1 scale, so two heatmaps are comparable at a glance; line plots use
seaborn's "colorblind" palette. Figures have an explicit white face so that they read the same
on the site's light and dark themes. Nothing here calls ``plt.show()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["attention_heatmap", "head_grid", "loss_curve", "CMAP"]

#: Sequential, perceptually uniform, colour-blind safe.
CMAP = "viridis"
_FACE = "white"
#: Annotate cells with their values when the matrix has at most this many cells.
_ANNOTATE_MAX_CELLS = 100


def _as_array(weights: Any, dims: int, where: str) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    array = np.asarray(weights, dtype=float)
    if array.ndim != dims:
        shape = "(Lq, Lk)" if dims == 2 else "(H, Lq, Lk)"
        raise ValueError(f"{where}: weights must be {shape}, got shape {array.shape}")
    return array


def _check_labels(labels: Sequence[str] | None, length: int, name: str, where: str) -> list[str] | str:
    if labels is None:
        return "auto"  # seaborn picks readable position numbers
    labels = [str(label) for label in labels]
    if len(labels) != length:
        raise ValueError(f"{where}: {name} has {len(labels)} entries but the weights have {length} positions")
    return labels


def attention_heatmap(
    weights: Any,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    annotate: bool | None = None,
    title: str | None = None,
    vmax: float = 1.0,
) -> Axes:
    """Heatmap of one attention matrix ``weights (Lq, Lk)``: row = query, column = key.

    ``annotate=None`` writes the values in the cells when there are at most 100 of them. The
    colour scale runs 0..``vmax`` (1 by default: weights are probabilities). With ``ax=None``
    a new pyplot figure is made. Returns the Axes. Chapter "Attention from scratch" on.
    """
    array = _as_array(weights, 2, "attention_heatmap")
    len_q, len_k = array.shape
    y_labels = _check_labels(query_labels, len_q, "query_labels", "attention_heatmap")
    x_labels = _check_labels(key_labels, len_k, "key_labels", "attention_heatmap")
    if annotate is None:
        annotate = array.size <= _ANNOTATE_MAX_CELLS
    if ax is None:
        side = max(3.0, 0.45 * max(len_q, len_k) + 1.5)
        _, ax = plt.subplots(figsize=(side + 1.0, side), facecolor=_FACE)
    sns.heatmap(
        array,
        ax=ax,
        cmap=CMAP,
        vmin=0.0,
        vmax=vmax,
        square=True,
        annot=annotate,
        fmt=".2f",
        annot_kws={"fontsize": 7},
        xticklabels=x_labels,
        yticklabels=y_labels,
        cbar_kws={"label": "attention weight"},
    )
    ax.set_xlabel("key position" if key_labels is None else "key")
    ax.set_ylabel("query position" if query_labels is None else "query")
    ax.tick_params(axis="y", labelrotation=0)
    if title is not None:
        ax.set_title(title)
    return ax


def head_grid(weights: Any, labels: Sequence[str] | None = None, average: bool = True) -> Figure:
    """One heatmap per head of ``weights (H, Lq, Lk)``, plus their average, sharing a colorbar.

    ``labels`` name the positions on both axes (self-attention; needs Lq == Lk). The Figure is
    not registered with pyplot: leave it as a cell's last expression (or ``display`` it) to see
    it, exactly once. Chapter "Multi-head attention" on.
    """
    array = _as_array(weights, 3, "head_grid")
    num_heads, len_q, len_k = array.shape
    if labels is not None and len_q != len_k:
        raise ValueError(
            f"head_grid: labels name both axes, so Lq must equal Lk; got Lq={len_q}, Lk={len_k}. "
            "Use attention_heatmap with query_labels and key_labels instead."
        )
    tick_labels = _check_labels(labels, len_k, "labels", "head_grid")
    panels = [(f"head {h}", array[h]) for h in range(num_heads)]
    if average and num_heads > 1:
        panels.append(("average of heads", array.mean(axis=0)))

    ncols = min(len(panels), 5)
    nrows = math.ceil(len(panels) / ncols)
    side = max(2.2, 0.3 * max(len_q, len_k) + 1.0)
    fig = Figure(figsize=(side * ncols + 1.0, side * nrows + 0.4), facecolor=_FACE, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(panels) :]:
        fig.delaxes(ax)  # unused grid cells: the figure holds exactly one Axes per panel
    for ax, (name, matrix) in zip(axes, panels, strict=False):
        sns.heatmap(
            matrix,
            ax=ax,
            cmap=CMAP,
            vmin=0.0,
            vmax=1.0,
            square=True,
            cbar=False,
            xticklabels=tick_labels,
            yticklabels=tick_labels,
        )
        ax.set_title(name)
        ax.set_xlabel("key position" if labels is None else "key")
        ax.set_ylabel("query position" if labels is None else "query")
        ax.tick_params(axis="y", labelrotation=0)
    fig.colorbar(axes[0].collections[0], ax=list(axes[: len(panels)]), label="attention weight", shrink=0.8)
    return fig


def _loss_values(losses: Any) -> np.ndarray:
    losses = getattr(losses, "losses", losses)  # a TrainResult plots its losses
    if isinstance(losses, torch.Tensor):
        losses = losses.detach().float().cpu().numpy()
    array = np.asarray(losses, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"loss_curve: losses must be a non-empty 1-D sequence, got shape {array.shape}")
    return array


def loss_curve(
    losses: Sequence[float] | Mapping[str, Sequence[float]] | Any,
    ax: Axes | None = None,
    log: bool = True,
    ylabel: str = "MSE loss",
) -> Axes:
    """Loss against step: one curve, or one per name for ``{name: losses}``, log-scaled by default.

    Accepts lists, 1-D tensors or arrays, or ``TrainResult`` objects. With ``ax=None`` a new
    pyplot figure is made. Returns the Axes. Chapter "Training attention".
    """
    curves = dict(losses) if isinstance(losses, Mapping) else {None: losses}
    if not curves:
        raise ValueError("loss_curve: got an empty dict; give at least one {name: losses}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.5), facecolor=_FACE)
    colours = sns.color_palette("colorblind", n_colors=max(len(curves), 1))
    for colour, (name, values) in zip(colours, curves.items(), strict=False):
        array = _loss_values(values)
        ax.plot(np.arange(array.size), array, color=colour, linewidth=1.2, label=name)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if None not in curves:
        ax.legend(title=None, frameon=False)
    return ax
