"""Where and how a wrong tensor differs from the right one, for mistakes no check listed.

A check names the mistakes its authors foresaw (``Mistake``); a learner makes others. For those,
:func:`diagnose` compares the learner's tensor with the reference's and says something the learner
did not know: a simple relation that holds (scaled by a constant, and which constant it is close to
among the case's sizes; shifted by a constant; negated; transposed; shifted or reversed along an
axis; rows that sum to 1 along another axis; a different normaliser per row) or where the two
agree and differ (which heads, batch items, rows or columns; from which position on). Used by the
framework's judge when no known mistake matches; the first line of the feedback then carries it.

Axes are named by the course's conventions ((B, H, L_q, L_k) for weights, (B, L, D) for outputs),
or by ``case.info["dims"]`` when a check gives them: ``{"output": ("batch item", "position", "feature")}``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

__all__ = ["diagnose", "dim_names", "constants"]

#: The last dims' names by what the tensor is (its name in the check's outputs).
_LAST_DIMS = {
    "weights": ("query", "key"), "scores": ("query", "key"), "mask": ("query", "key"), "bias": ("query", "key"),
    "probs": ("position", "token"), "logits": ("position", "token"),
}


#: Whole shapes by name, where the course's convention differs from (B, H, L, L) / (B, L, D).
_SHAPES = {("bias", 3): ("head", "query", "key"), ("mask", 3): ("batch item", "query", "key")}


def dim_names(name: str, ndim: int, info: Mapping[str, object] | None = None) -> list[str]:
    """A name for each dim of the tensor ``name``: the check's own (``info["dims"][name]``) or the course's."""
    given = (info or {}).get("dims", {})
    if isinstance(given, Mapping) and name in given and len(given[name]) == ndim:
        return list(given[name])
    if (name, ndim) in _SHAPES:
        return list(_SHAPES[name, ndim])
    last = _LAST_DIMS.get(name.split()[-1].strip("`"), ("position", "feature"))
    lead = {0: [], 1: ["batch item"], 2: ["batch item", "head"]}.get(ndim - 2, [f"dim {d}" for d in range(ndim - 2)])
    names = [*lead, *last][-ndim:] if ndim <= 4 else [f"dim {d}" for d in range(ndim)]
    if ndim == 1:
        names = ["entry"]
    return names


def constants(info: Mapping[str, object]) -> list[tuple[float, str]]:
    """Candidate factors a wrong scale may be close to, each with its name, from the case's sizes."""
    found: list[tuple[float, str]] = [(2.0, "2"), (0.5, "1/2"), (-1.0, "-1")]
    for key, value in info.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 < value < 1e6:
            continue
        v, k = float(value), key
        found += [(v, f"{k} = {value:g}"), (1 / v, f"1/{k}"), (math.sqrt(v), f"√{k}"), (1 / math.sqrt(v), f"1/√{k}"),
                  (math.sqrt(v + 1), f"√({k}+1)"), (1 / math.sqrt(v + 1), f"1/√({k}+1)"),
                  (math.sqrt(v - 1), f"√({k}-1)"), (1 / math.sqrt(v - 1), f"1/√({k}-1)"), (v * v, f"{k}²")]
    return found


def _close(a: Tensor, b: Tensor, tol: float) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))


def _name_of(value: float, info: Mapping[str, object]) -> str:
    for candidate, label in constants(info):
        if math.isclose(value, candidate, rel_tol=2e-3):
            return f" ≈ {label}" if "=" not in label else f" = {label.split(' = ')[0]}"
    return ""


def _plural(noun: str) -> str:
    if noun.startswith("dim "):
        return f"indices along {noun}"
    if noun.endswith("y") and not noun.endswith("ey"):
        return noun[:-1] + "ies"
    return noun + "s"


def _indices(idx: Sequence[int]) -> str:
    idx = list(idx)
    if len(idx) > 2 and idx == list(range(idx[0], idx[-1] + 1)):
        return f"{idx[0]}..{idx[-1]}"
    return ", ".join(map(str, idx[:6])) + (", ..." if len(idx) > 6 else "")


def _relations(g: Tensor, e: Tensor, info: Mapping[str, object], names: list[str], tol: float) -> str | None:
    """A simple relation between the learner's ``g`` and the reference's ``e`` (float64, same shape)."""
    finite = torch.isfinite(g) & torch.isfinite(e)
    if not finite.all() or e.numel() < 2:
        return None
    for d in range(g.dim()):  # whole slices of zeros where the reference has values
        if g.shape[d] < 2:
            continue
        zero = [i for i in range(g.shape[d]) if float(g.select(d, i).abs().max()) <= tol
                and float(e.select(d, i).abs().max()) > tol]
        if zero and len(zero) < g.shape[d]:
            which = f"{names[d]} {zero[0]}" if len(zero) == 1 else f"{_plural(names[d])} {_indices(zero)}"
            return f"{which} of {g.shape[d]} {'is' if len(zero) == 1 else 'are'} all zero in yours (dim {d - g.dim()})"
    big = e.abs() > 1e-6
    if big.sum() >= 2:
        ratio = g[big] / e[big]
        r = float(ratio.median())
        if r != 0 and _close(g, e * r, tol * 10):
            if math.isclose(r, -1.0, rel_tol=1e-3):
                return "it is the reference with the opposite sign"
            return f"every entry is the reference's times {r:.4g}{_name_of(r, info)}"
    diff = g - e
    c = float(diff.median())
    if abs(c) > tol and _close(diff, torch.full_like(diff, c), tol * 10):
        return f"every entry is the reference's plus {c:.4g}{_name_of(abs(c), info)} (a constant shift)"
    if g.dim() >= 2 and g.shape[-1] == g.shape[-2] and _close(g, e.transpose(-2, -1), tol):
        return f"it is the reference transposed ({_plural(names[-2])} and {_plural(names[-1])} swapped)"
    for d in range(g.dim()):
        n = g.shape[d]
        if n < 2:
            continue
        slices_g, slices_e = g.movedim(d, 0), e.movedim(d, 0)
        for t in range(n):  # one slice copied everywhere: computed once, broadcast
            if all(_close(slices_g[i], slices_e[t], tol) for i in range(n)):
                return (f"every {names[d]} of yours equals the reference's {names[d]} {t} (dim {d - g.dim()}): one "
                        f"{names[d]} computed and copied to all")
        if n < 3:
            continue
        if _close(g, e.flip(d), tol):
            return f"it is the reference reversed along the {names[d]} axis (dim {d - g.dim()})"
        for k in (1, -1, 2, -2):
            if abs(k) >= n:
                continue
            shifted = e.roll(k, d)
            keep = [slice(None)] * g.dim()
            keep[d] = slice(k, None) if k > 0 else slice(None, k)
            if _close(g[tuple(keep)], shifted[tuple(keep)], tol):
                later = "later" if k > 0 else "earlier"
                return (f"it is the reference shifted by {abs(k)} along the {names[d]} axis (dim {d - g.dim()}): "
                        f"entry {names[d]} t holds the reference's {names[d]} t {'-' if k > 0 else '+'} {abs(k)} "
                        f"(one {names[d]} {later})")
        if n <= 8:  # a permutation of the slices along d
            match = [next((j for j in range(n) if _close(slices_g[i], slices_e[j], tol)), None) for i in range(n)]
            if None not in match and match != list(range(n)) and sorted(match) == list(range(n)):
                return (f"its {_plural(names[d])} are the reference's in another order along dim {d - g.dim()}: "
                        f"yours {list(range(n))} are the reference's {match}")
    if g.dim() >= 2:  # the difference does not depend on some axes: a term added or left out
        same = [d for d in range(g.dim()) if g.shape[d] > 1 and _close(diff, diff.mean(d, keepdim=True).expand_as(diff), tol)]
        if same and len(same) < g.dim():
            axes = " and ".join(_plural(names[d]) for d in same)
            size = float(diff.abs().max())
            return (f"yours minus the reference is the same for every {' and every '.join(names[d] for d in same)} "
                    f"(up to {size:.3g}): a term that does not depend on the {axes} is added or missing (a bias?)")
    for d in range(g.dim()):  # right in sum over one axis, wrong in how it is split
        sums = e.sum(d)
        if sums.numel() > 1 and _close(sums, sums.flatten()[0].expand_as(sums), 1e-4):
            continue  # every sum the same (rows of weights sum to 1): a right sum says nothing
        if g.shape[d] > 1 and _close(g.sum(d), sums, tol * 10):
            return (f"summed over the {_plural(names[d])} (dim {d - g.dim()}) yours equal the reference's: the "
                    f"total is right, its split between the {_plural(names[d])} is not")
    for d in range(g.dim()):  # normalised along another dim
        if g.shape[d] < 2:
            continue
        sums_g, sums_e = g.sum(d), e.sum(d)
        if _close(sums_g, torch.ones_like(sums_g), 1e-4) and not _close(sums_e, torch.ones_like(sums_e), 1e-4):
            right = [x for x in range(e.dim()) if e.shape[x] > 1
                     and _close(e.sum(x), torch.ones_like(e.sum(x)), 1e-4)]
            where = f"; the reference's sum to 1 over the {_plural(names[right[0]])} (dim {right[0] - e.dim()})" if right else ""
            return f"yours sum to 1 over the {_plural(names[d])} (dim {d - g.dim()}){where}"
    if (e > 0).all() and _close(g, e.log(), tol * 10):
        return "yours are the logarithm of the reference's values (log-probabilities where probabilities are wanted?)"
    if _close(g, e.exp(), tol * 10):
        return "yours are exp() of the reference's values (the reference is the logarithm of yours)"
    if g.dim() >= 2 and big.all() and (g.abs() > 1e-6).all():  # a factor per feature, the same at every position
        ratio = g / e
        flat = ratio.reshape(-1, ratio.shape[-1])
        per_feature = flat.median(dim=0).values
        if (_close(flat, per_feature.expand_as(flat), tol * 10)
                and not _close(per_feature, per_feature[0].expand_as(per_feature), 1e-3)):
            return (f"each {names[-1]} is the reference's times a factor of its own, the same at every "
                    f"{names[-2]} (from {float(per_feature.min()):.3g} to {float(per_feature.max()):.3g}): "
                    f"a per-{names[-1]} weight or scale is applied differently")
    if g.dim() >= 1 and big.all() and (g.abs() > 1e-6).all():
        row = (g / e)
        per_row = row.median(dim=-1, keepdim=True).values
        if _close(row, per_row.expand_as(row), tol * 10) and not _close(per_row, per_row.flatten()[0].expand_as(per_row), 1e-3):
            return (f"each {names[-2] if g.dim() >= 2 else 'row'} is the reference's times a factor of its own "
                    f"(from {float(per_row.min()):.3g} to {float(per_row.max()):.3g}): a different normaliser")
    return None


def _where(g: Tensor, e: Tensor, names: list[str], tol: float) -> str | None:
    """Which slices along one axis agree and which differ: the most informative split."""
    bad = ~torch.isclose(g, e, rtol=tol, atol=tol, equal_nan=True)
    best = None
    for d in range(g.dim()):
        n = g.shape[d]
        if n < 2:
            continue
        wrong = [i for i in range(n) if bool(bad.select(d, i).any())]
        if 0 < len(wrong) < n:
            key = (len(wrong) / n, d)
            if best is None or key < best[0]:
                best = (key, d, wrong)
    if best is None:
        return None
    _, d, wrong = best
    n = g.shape[d]
    right = [i for i in range(n) if i not in wrong]
    axis, one = _plural(names[d]), names[d]
    if len(wrong) == 1:
        return f"only {one} {wrong[0]} of {n} differs; the others are right (dim {d - g.dim()})"
    if wrong == list(range(wrong[0], n)):
        good = f"{one} 0 is right" if len(right) == 1 else f"{axis} {_indices(right)} are right"
        return f"{good}, from {one} {wrong[0]} on they differ (dim {d - g.dim()} of size {n})"
    if wrong == list(range(0, wrong[-1] + 1)):
        good = f"{one} {right[0]} is right" if len(right) == 1 else f"{_indices(right)} are right"
        return f"the first {axis} {_indices(wrong)} differ; {good} (dim {d - g.dim()})"
    return f"only {axis} {_indices(wrong)} of {n} differ; the others are right (dim {d - g.dim()})"


def diagnose(name: str, got: Tensor, expected: Tensor, info: Mapping[str, object] | None = None,
             tol: float = 1e-5) -> tuple[str, list[str]] | None:
    """``(how, details)``: how ``got`` differs from ``expected`` (same shape, real dtype), or None.

    ``how`` completes "``name`` differs from the reference: ...", e.g. "every entry is the
    reference's times 0.3536 ≈ 1/√d_k"; ``details`` say where (which slices differ, which agree).
    """
    info = info or {}
    if got.shape != expected.shape or got.dtype.is_complex or expected.dtype.is_complex:
        return None
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    names = dim_names(name, g.dim(), info)
    details = []
    nan_g, nan_e = ~torch.isfinite(g), ~torch.isfinite(e)
    if expected.dtype == torch.bool or got.dtype == torch.bool:
        gb, eb = got.detach().cpu().bool(), expected.detach().cpu().bool()
        extra, missing = int((gb & ~eb).sum()), int((~gb & eb).sum())
        how = None
        if g.dim() >= 2 and g.shape[-1] == g.shape[-2] and torch.equal(gb, eb.transpose(-2, -1)):
            how = f"it is the reference transposed ({_plural(names[-2])} and {_plural(names[-1])} swapped)"
        elif torch.equal(gb, ~eb):
            how = "it is the reference inverted (True where it should be False)"
        else:
            for d, k in itertools.product(range(g.dim()), (1, -1)):
                if g.shape[d] > 2 and torch.equal(_trim(gb, d, k), _trim(eb.roll(k, d), d, k)):
                    how = (f"it is the reference shifted by one along the {names[d]} axis (dim {d - g.dim()}): "
                           f"{names[d]} t holds the reference's {names[d]} t {'-' if k > 0 else '+'} 1")
                    break
        parts = []
        if extra:
            parts.append(f"{extra} entries True that should be False")
        if missing:
            parts.append(f"{missing} False that should be True")
        where = _where(g, e, names, 0.0)
        if how is None and g.dim() >= 2 and names[-2:] == ["query", "key"]:
            how = _mask_offsets(gb, eb)
        how = how or (where if where else " and ".join(parts))
        details = [" and ".join(parts)] if where and how == where else ([where] if where else [])
        return how, details
    if (nan_g & ~nan_e).any():
        first = tuple(int(i) for i in (nan_g & ~nan_e).nonzero()[0])
        where = _where(nan_g.double(), nan_e.double(), names, 0.0)
        return (f"NaN or inf in {int((nan_g & ~nan_e).sum())} of {g.numel()} entries where the reference is "
                f"finite, first at [{', '.join(map(str, first))}]" + (f"; {where}" if where else ""), [])
    how = _relations(g, e, info, names, tol)
    where = _where(g, e, names, tol)
    if how is None and where is None:
        return _sizes(g, e), []
    if how is None:
        return where, []
    return how, [where] if where else []


def _span(values: Sequence[int]) -> str:
    values = sorted(values)
    if len(values) == 1:
        return str(values[0])
    if values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]} to {values[-1]}"
    return ", ".join(map(str, values[:6])) + (", ..." if len(values) > 6 else "")


def _mask_offsets(got: Tensor, expected: Tensor) -> str:
    """A (..., L_q, L_k) mask's wrong entries by where their keys lie from the query: i − j, or key columns.

    Queries are aligned to the end of the keys (query i sits at position i + L_k − L_q), as in decoding.
    """
    Lq, Lk = got.shape[-2:]
    i = torch.arange(Lq)[:, None] + (Lk - Lq)
    j = torch.arange(Lk)[None, :]
    offset, column = (i - j).expand(got.shape), j.expand(got.shape)
    parts = []
    for verb, wrong in (("allows", got & ~expected), ("forbids", ~got & expected)):
        if not wrong.any():
            continue
        d = sorted(set(offset[wrong].tolist()))
        cols = sorted(set(column[wrong].tolist()))
        n = int(wrong.sum())
        if len(cols) <= 2 < Lk and len(d) > len(cols):
            where = f"all in key column{'s' if len(cols) > 1 else ''} {_span(cols)}"
        elif max(d) < 0:
            where = f"later keys (j > i), {_span([-x for x in d])} position{'s' if d != [-1] else ''} ahead"
        elif min(d) > 0:
            where = f"keys {_span(d)} position{'s' if d != [1] else ''} back (i − j = {_span(d)})"
        elif d == [0]:
            where = "each query's own key (j = i)"
        else:
            ahead, back = [x for x in d if x < 0], [x for x in d if x >= 0]
            if ahead and back:
                where = (f"{int((wrong & (offset < 0)).sum())} with later keys (j > i) and "
                         f"{int((wrong & (offset >= 0)).sum())} with keys at or before the query")
            else:
                where = f"keys at i − j = {_span(d)}"
        parts.append(f"{verb} {n} pair{'s' if n > 1 else ''} (query, key) the reference "
                     f"{'forbids' if verb == 'allows' else 'allows'}: {where}")
    return "yours " + "; and ".join(parts)


def _sizes(g: Tensor, e: Tensor) -> str:
    """The last resort, still something the learner did not know: size and direction against the reference's."""
    rms_g, rms_e = float(g.pow(2).mean().sqrt()), float(e.pow(2).mean().sqrt())
    cosine = float((g * e).sum() / (g.norm() * e.norm())) if rms_g > 0 and rms_e > 0 else 0.0
    if rms_g == 0:
        return "every entry of yours is zero"
    size = f"{rms_g / rms_e:.3g} times the reference's typical size" if rms_e > 0 else "nonzero where the reference is zero"
    closeness = ("close to the reference in direction: a small term is missing, extra or slightly off"
                 if cosine > 0.95 else "unlike the reference in direction: a step of the computation is different, "
                 "not just a scale" if cosine < 0.5 else "partly like the reference")
    return f"every entry differs; yours are {size}, cosine similarity {cosine:.2f}: {closeness}"


def _trim(t: Tensor, d: int, k: int) -> Tensor:
    keep = [slice(None)] * t.dim()
    keep[d] = slice(k, None) if k > 0 else slice(None, k)
    return t[tuple(keep)]
