"""Check for exercise 4 (chapter "Multi-head attention"): split_heads, merge_heads and the forward pass.

The learner writes three functions:

- ``split_heads(x, num_heads)``: ``(B, L, D) -> (B, H, L, d_k)`` with ``d_k = D // H``;
- ``merge_heads(x)``: ``(B, H, L, d_k) -> (B, L, D)``, the inverse of ``split_heads``;
- ``multi_head_forward(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None)``: multi-head
  attention with the projections ``w_q, w_k, w_v, w_o`` (``nn.Linear(D, D)`` layers), returning
  ``(output (B, Lq, D), weights (B, H, Lq, Lk))``.

Each is compared with :class:`lessons_src.multihead.MultiHeadAttention` (head ``h`` owns features
``h * d_k .. (h + 1) * d_k - 1``, PyTorch's layout) on several cases. A wrong answer is matched
against known mistakes (a reshape without the transpose, an interleaved split, a merge without
the inverse transpose, a forgotten output projection, the wrong head dimension or scale, an
inverted or ignored mask, ...) and the feedback names the mistake and how to fix it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..masks import padding_mask
from ..multihead import MultiHeadAttention
from ._framework import Case, Mistake, Session, passed, run_check, shape_is
from ._result import CheckResult, call_learner, close, finish, same_up_to_nan, shape_of

__all__ = ["check_split_heads", "check_merge_heads", "check_multi_head_forward", "check_multi_head_attention"]

_FIX_NO_TRANSPOSE_SPLIT = (
    "split the *features* of each position, then move the head axis: "
    "`x.view(B, L, num_heads, d_k).transpose(1, 2)`. A direct `x.view(B, num_heads, L, d_k)` has the right "
    "shape but cuts the flat memory in the wrong place: head 0 gets the first positions' full feature "
    "vectors, so positions and heads are mixed."
)
_FIX_INTERLEAVED = (
    "give each head a contiguous block of d_k features: `x.view(B, L, num_heads, d_k)` (heads first, then "
    "d_k), not `x.view(B, L, d_k, num_heads)`. Head h owns features h*d_k .. (h+1)*d_k - 1, which is how "
    "PyTorch's and the library's W_q, W_k, W_v rows are laid out."
)
_FIX_NO_TRANSPOSE_MERGE = (
    "undo the split in reverse order: first `x.transpose(1, 2)` to (B, L, H, d_k), then "
    "`.reshape(B, L, H * d_k)`. Reshaping (B, H, L, d_k) straight to (B, L, D) has the right shape but "
    "puts features of different positions into one row."
)
_FIX_VIEW_AFTER_TRANSPOSE = (
    "after `.transpose(1, 2)` the tensor is not contiguous in memory, so `.view` refuses to flatten it: "
    "use `.reshape(B, L, H * d_k)` (or `.contiguous().view(...)`)."
)


def _hint_for_error(summary: str, d_model: int, num_heads: int) -> str | None:
    """A specific hint for a known exception message, or None."""
    if "view size is not compatible" in summary:
        return _FIX_VIEW_AFTER_TRANSPOSE
    if "is invalid for input of size" in summary:
        return (
            f"wrong head dimension: each head gets d_k = d_model // num_heads features (here "
            f"{d_model} // {num_heads} = {d_model // num_heads}), not d_model; the sizes in a view must "
            f"multiply to the tensor's size: `x.view(B, L, num_heads, d_model // num_heads)`."
        )
    if "float" in summary and ("int" in summary or "size" in summary):
        return "d_model / num_heads is a float in Python 3: use integer division, `d_model // num_heads`."
    if "mat1 and mat2" in summary:
        return (
            "a projection got a tensor of the wrong width: apply w_q, w_k, w_v to the (B, L, D) inputs "
            "before splitting, and w_o to the merged (B, L, D) heads."
        )
    return None


def _refine(failure: CheckResult, function: str, d_model: int, num_heads: int) -> CheckResult:
    """Say which function a stub or an error came from, and give a specific hint where one is known."""
    if failure.summary == "not implemented yet":
        failure.summary = f"{function}: not implemented yet"
        return failure
    hint = _hint_for_error(failure.summary, d_model, num_heads)
    if hint is not None:
        failure.hint = hint
        name = next((name for key, name in _ERROR_NAMES if key in hint), None)
        if name is not None and not failure.summary.startswith(name):
            failure.summary = f"{name}: {failure.summary}"
    return failure


#: The mistake each specific hint above is about: the feedback's first line names it.
_ERROR_NAMES = [
    ("not contiguous", "`.view` after a transpose (the tensor is not contiguous)"),
    ("wrong head dimension", "wrong head dimension: a view's sizes do not multiply to the tensor's size"),
    ("integer division", "d_model / num_heads is a float: integer division `//` is needed"),
    ("wrong width", "a projection got a tensor of the wrong width"),
]


# -- reference and wrong versions of the reshapes ---------------------------------------------------


def _split(x: Tensor, num_heads: int) -> Tensor:
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)  # (B, H, L, d_k)


def _split_no_transpose(x: Tensor, num_heads: int) -> Tensor:
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)  # right shape, positions mixed across heads


def _split_interleaved(x: Tensor, num_heads: int) -> Tensor:
    B, L, D = x.shape
    return x.reshape(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)  # head h: features h, h+H, ...


def _merge(x: Tensor) -> Tensor:
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, D)


def _merge_no_transpose(x: Tensor) -> Tensor:
    B, H, L, d_k = x.shape
    return x.reshape(B, L, H * d_k)


def _merge_interleaved(x: Tensor) -> Tensor:
    B, H, L, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, H * d_k)


# -- split_heads -----------------------------------------------------------------------------------


def _split_cases() -> list[Case]:
    g = torch.Generator().manual_seed(4)
    # L, H and d_k differ within each case, so a swapped axis shows in the shape.
    cases = []
    for shape, num_heads, note in (((2, 5, 12), 3, ""), ((1, 6, 16), 4, ""), ((3, 4, 16), 8, ""),
                                   ((2, 3, 6), 1, ", one head: d_k = d_model")):
        B, L, D = shape
        cases.append(Case(f"split_heads, x of shape {shape}, num_heads={num_heads} (d_k={D // num_heads}{note})",
                          {"x": torch.randn(*shape, generator=g), "num_heads": num_heads},
                          info={"B": B, "L": L, "D": D, "H": num_heads, "d_k": D // num_heads}))
    return cases


def _wrong_values(reference: Callable[..., Tensor]) -> Callable[[Case, object], bool]:
    """A predicate: the right shape, but the values differ (the last resort of the reshapes' tables)."""
    return lambda case, got: (isinstance(got, Tensor) and not got.dtype.is_complex
                              and got.shape == reference(*case.args.values()).shape)


SPLIT_MISTAKES = [
    Mistake("returned shape (B, L, H, d_k) = ({B}, {L}, {H}, {d_k}): the head axis is not moved in front of the "
            "positions", "add `.transpose(1, 2)` after the view, giving (B, H, L, d_k): attention then treats (B, H) "
            "as batch dimensions, one attention per head.",
            looks_like=shape_is(lambda B, L, D, H, d_k: (B, L, H, d_k) if L != H else None)),
    Mistake("returned shape (B, H, L, d_model) = ({B}, {H}, {L}, {D}): each head has all d_model={D} features "
            "(wrong head dimension)", "each head gets a slice of d_k = d_model // num_heads = {d_k} features, not a "
            "copy of all d_model of them.", looks_like=shape_is(lambda B, L, D, H, d_k: (B, H, L, D) if H > 1 else None)),
    Mistake("reshape without transpose (`x.view(B, H, L, d_k)`) mixes positions across heads", _FIX_NO_TRANSPOSE_SPLIT,
            _split_no_transpose),
    Mistake("the heads are interleaved (head h takes features h, h+H, h+2H, ...)", _FIX_INTERLEAVED,
            _split_interleaved),
    Mistake("the right shape but the wrong values", "head h of position l must hold x[b, l, h*d_k:(h+1)*d_k]; "
            "`x.view(B, L, num_heads, d_k).transpose(1, 2)` does exactly that.", looks_like=_wrong_values(_split)),
]

#: The exceptions the reshapes and the forward pass often raise, named (the framework's table comes after).
HINTS = [
    (r"view size is not compatible", _FIX_VIEW_AFTER_TRANSPOSE, "`.view` after a transpose (the tensor is not contiguous)"),
    (r"is invalid for input of size",
     "wrong head dimension: each head gets d_k = d_model // num_heads features, not d_model; the sizes in a view must "
     "multiply to the tensor's size: `x.view(B, L, num_heads, d_model // num_heads)`.",
     "wrong head dimension: a view's sizes do not multiply to the tensor's size"),
    (r"float.*(int|size)|(int|size).*float", "d_model / num_heads is a float in Python 3: use integer division, "
     "`d_model // num_heads`.", "d_model / num_heads is a float: integer division `//` is needed"),
]


def _label(failure: CheckResult, function: str) -> CheckResult:
    if failure.summary == "not implemented yet":
        failure.summary = f"{function}: not implemented yet"
    return failure


def _run_split(fn: object, name: str) -> CheckResult:
    session = Session(name, HINTS)
    cases = _split_cases()
    failure = run_check(session, fn, cases, _split, ("the split tensor",), SPLIT_MISTAKES)
    if failure is not None:
        return _label(failure, "split_heads")
    return passed(session, f"split_heads matches the reference on all {len(cases)} cases")


def check_split_heads(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``split_heads(x, num_heads)``: ``(B, L, D) -> (B, H, L, d_k)`` (exercise 4)."""
    return finish(_run_split(fn, "check_split_heads"))


# -- merge_heads -----------------------------------------------------------------------------------


def _merge_cases() -> list[Case]:
    g = torch.Generator().manual_seed(5)
    cases = []
    for shape, note in (((2, 3, 5, 4), " = (B, H, L, d_k)"), ((1, 4, 6, 2), ""), ((2, 1, 3, 6), " (one head)")):
        B, H, L, d_k = shape
        cases.append(Case(f"merge_heads, x of shape {shape}{note}", {"x": torch.randn(*shape, generator=g)},
                          info={"B": B, "H": H, "L": L, "d_k": d_k}))
    return cases


MERGE_MISTAKES = [
    Mistake("returned shape (B, L, H, d_k): the heads are not flattened back into d_model",
            "finish with `.reshape(B, L, H * d_k)`.", looks_like=shape_is(lambda B, H, L, d_k: (B, L, H, d_k))),
    Mistake("merged without the inverse transpose (a reshape of (B, H, L, d_k) straight to (B, L, D))",
            _FIX_NO_TRANSPOSE_MERGE, _merge_no_transpose),
    Mistake("the heads are interleaved in the output (feature j*H + h comes from head h)",
            "put each head's d_k features side by side: transpose to (B, L, H, d_k), then reshape to (B, L, H * d_k), "
            "so head h fills features h*d_k .. (h+1)*d_k - 1.", _merge_interleaved),
    Mistake("the right shape but the wrong values",
            "the inverse of split_heads: `x.transpose(1, 2).reshape(B, L, H * d_k)`.", looks_like=_wrong_values(_merge)),
]


def _run_merge(fn: object, name: str) -> CheckResult:
    session = Session(name, HINTS)
    cases = _merge_cases()
    failure = run_check(session, fn, cases, _merge, ("the merged tensor",), MERGE_MISTAKES)
    if failure is not None:
        return _label(failure, "merge_heads")
    return passed(session, f"merge_heads matches the reference on all {len(cases)} cases")


def check_merge_heads(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``merge_heads(x)``: ``(B, H, L, d_k) -> (B, L, D)`` (exercise 4)."""
    return finish(_run_merge(fn, "check_merge_heads"))


# -- the forward pass ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Case:
    description: str
    query: Tensor
    key: Tensor
    value: Tensor
    layer: MultiHeadAttention
    mask: Tensor | None = None

    @property
    def num_heads(self) -> int:
        return self.layer.num_heads


def _layer(d_model: int, num_heads: int, seed: int) -> MultiHeadAttention:
    """A MultiHeadAttention with seeded weights of unit-size outputs and non-zero biases."""
    g = torch.Generator().manual_seed(seed)
    layer = MultiHeadAttention(d_model, num_heads)
    with torch.no_grad():
        for p in layer.parameters():
            scale = 1.0 / math.sqrt(d_model) if p.dim() == 2 else 0.1
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return layer.eval()


def _forward_cases() -> list[_Case]:
    g = torch.Generator().manual_seed(6)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    # d_k differs from case to case (6, 10, 5, 8: no number written in the code passes them all) and
    # sqrt(d_k), d_k / 2 (`d_k ** 1/2`), 2 d_k and sqrt(d_model) stay apart, so each scale mistake
    # gives its own weights; Lq != Lk exposes key/query mix-ups.
    x = rand(2, 5, 18)
    return [
        _Case("self-attention, B=2, L=5, d_model=18, num_heads=3 (d_k=6)", x, x, x, _layer(18, 3, 1)),
        _Case("cross-attention, B=2, Lq=3, Lk=6, d_model=20, num_heads=2 (d_k=10), key != value",
              rand(2, 3, 20), rand(2, 6, 20), rand(2, 6, 20), _layer(20, 2, 2)),
        _Case("cross-attention with a padding mask of shape (2, 1, 1, 6) (True = may attend): "
              "the second sequence has 4 real keys; B=2, Lq=4, Lk=6, d_model=15, num_heads=3 (d_k=5)",
              rand(2, 4, 15), rand(2, 6, 15), rand(2, 6, 15), _layer(15, 3, 3),
              padding_mask([6, 4])[:, None, None, :]),
        _Case("one head (num_heads=1), B=1, L=4, d_model=8", *([rand(1, 4, 8)] * 3), _layer(8, 1, 4)),
    ]


def _variant(
    case: _Case,
    *,
    split: Callable[[Tensor, int], Tensor] = _split,
    merge: Callable[[Tensor], Tensor] = _merge,
    scale: float | None = None,
    project_out: bool = True,
    mask: str = "use",
    return_scores: bool = False,
    keys_with_w_q: bool = False,
    log_softmax: bool = False,
) -> tuple[Tensor, Tensor]:
    """Multi-head attention with one thing changed: a known mistake. Returns (output, weights)."""
    layer, H = case.layer, case.num_heads
    q = split(layer.w_q(case.query), H)  # (B, H, Lq, d_k)
    k = split((layer.w_q if keys_with_w_q else layer.w_k)(case.key), H)  # (B, H, Lk, d_k)
    v = split(layer.w_v(case.value), H)  # (B, H, Lk, d_k)
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)  # (B, H, Lq, Lk)
    if case.mask is not None and mask != "ignore":
        allowed = case.mask if mask == "use" else ~case.mask
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.log_softmax(scores, dim=-1) if log_softmax else torch.softmax(scores, dim=-1)
    heads = merge(weights @ v)  # (B, Lq, D)
    output = layer.w_o(heads) if project_out else heads
    return output, scores if return_scores else weights


def _forward_mistakes(case: _Case) -> list[tuple[dict, str, str]]:
    """Known wrong forward passes: (how to build it, what is wrong, how to fix it)."""
    d_model = case.layer.d_model
    d_k = d_model // case.num_heads
    mistakes = [
        (dict(split=_split_no_transpose), "the heads were split by a reshape without transpose "
         "(`.view(B, H, L, d_k)`), which mixes positions across heads", _FIX_NO_TRANSPOSE_SPLIT),
        (dict(split=_split_no_transpose, merge=_merge_no_transpose), "the heads were split by a reshape "
         "without transpose (`.view(B, H, L, d_k)`), which mixes positions across heads", _FIX_NO_TRANSPOSE_SPLIT),
        (dict(merge=_merge_no_transpose), "the heads are merged without the inverse transpose",
         _FIX_NO_TRANSPOSE_MERGE),
        (dict(split=_split_interleaved, merge=_merge_interleaved), "the heads are interleaved "
         "(head h takes features h, h+H, ...)", _FIX_INTERLEAVED),
        (dict(split=_split_interleaved), "the heads are interleaved (head h takes features h, h+H, ...)",
         _FIX_INTERLEAVED),
        (dict(project_out=False), "the output projection w_o is missing",
         "finish with `w_o(merged)`: the merged heads (B, Lq, D) go through w_o, which mixes what the heads found."),
        (dict(scale=math.sqrt(d_model)), "the scores are scaled by sqrt(d_model) instead of sqrt(d_k)",
         f"each head's dot products are over d_k = d_model // num_heads = {d_model // case.num_heads} features: "
         f"divide by math.sqrt(d_k) = {math.sqrt(d_model // case.num_heads):.3g}, not math.sqrt(d_model) = "
         f"{math.sqrt(d_model):.3g}."),
        (dict(scale=1.0), "the scores are not scaled", "divide each head's scores by math.sqrt(d_k) before the softmax."),
        (dict(scale=d_k / 2), "`d_k ** 1/2` is not sqrt(d_k): `**` binds tighter than `/`, so the scores are "
         "divided by d_k / 2", "write `d_k ** 0.5` or `math.sqrt(d_k)`: `d_k ** 1/2` means `(d_k ** 1) / 2`."),
        (dict(scale=2 * d_k), "`scores / d_k ** 1/2` is not scores / sqrt(d_k): the scores are divided by d_k, "
         "then by 2", "write `scores / d_k ** 0.5` or `scores / math.sqrt(d_k)`."),
        (dict(scale=float(d_k)), "the scores are divided by d_k instead of sqrt(d_k)",
         f"divide by math.sqrt(d_k) = {math.sqrt(d_k):.3g}, not d_k = {d_k}."),
        (dict(keys_with_w_q=True), "the keys are projected with w_q instead of w_k",
         "each of query, key and value has its own projection: `q = w_q(query)`, `k = w_k(key)`, `v = w_v(value)`."),
        (dict(log_softmax=True), "the weights are a log-softmax (log-probabilities), not a softmax",
         "use `torch.softmax(scores, dim=-1)`: weights are probabilities in [0, 1] that sum to 1."),
        (dict(return_scores=True), "the weights returned are the scores, before the softmax",
         "return the weights after the softmax (each row sums to 1)."),
    ]
    if case.mask is not None:
        mistakes += [
            (dict(mask="invert"), "the mask is inverted",
             "the course's masks mean True = may attend (PyTorch's key_padding_mask means the opposite): "
             "`scores.masked_fill(~mask, float('-inf'))`."),
            (dict(mask="ignore"), "the mask is ignored",
             "apply the mask to the (B, H, Lq, Lk) scores before the softmax: "
             "`scores.masked_fill(~mask, float('-inf'))`; it broadcasts over the heads."),
        ]
    return mistakes


def _diagnose_forward(case: _Case, output: Tensor, weights: Tensor) -> tuple[str, str] | None:
    for kwargs, what, fix in _forward_mistakes(case):
        with torch.no_grad():
            m_out, m_w = _variant(case, **kwargs)
        if same_up_to_nan(weights, m_w) and same_up_to_nan(output, m_out):
            return what, fix
    return None


def _scale_used(case: _Case, weights: Tensor) -> float | None:
    """The number the scores were divided by, read off the learner's weights (unmasked cases), else None."""
    if case.mask is not None or not (weights > 0).all():
        return None
    with torch.no_grad():
        q = _split(case.layer.w_q(case.query), case.num_heads)
        k = _split(case.layer.w_k(case.key), case.num_heads)
    raw = (q @ k.transpose(-2, -1)).double()  # (B, H, Lq, Lk)
    x = raw - raw.mean(-1, keepdim=True)
    y = weights.detach().double().log()
    y = y - y.mean(-1, keepdim=True)
    slope = float((x * y).sum() / (x * x).sum())
    if slope <= 0 or not torch.allclose(y, x * slope, atol=1e-3):
        return None
    return 1.0 / slope


_FIX_FULL_WIDTH = (
    "split the projected queries, keys and values into num_heads heads of d_k = d_model // num_heads "
    "features (split_heads), attend per head, then merge: each head has its own weights."
)


def _run_forward(fn: object, name: str) -> CheckResult:
    cases = _forward_cases()
    for number, case in enumerate(cases, start=1):
        where = f"multi_head_forward, case {number}/{len(cases)} ({case.description})"
        layer, H = case.layer, case.num_heads
        B, Lq, D = case.query.shape
        Lk = case.key.size(1)
        with torch.no_grad():
            expected_out, expected_w = layer(case.query, case.key, case.value, case.mask)
        learner_layer = copy.deepcopy(layer)  # the learner cannot change the reference's weights
        args = (case.query, case.key, case.value, learner_layer.w_q, learner_layer.w_k, learner_layer.w_v,
                learner_layer.w_o, H)
        if case.mask is None:
            result, failure = call_learner(name, where, fn, *args)
        else:
            result, failure = call_learner(name, where, fn, *args, mask=case.mask)
            if failure is not None and "unexpected keyword argument 'mask'" in failure.summary:
                failure.summary = f"{where}: your function does not accept `mask=`"
                failure.hint = "give multi_head_forward a `mask=None` parameter."
        if failure is not None:
            return _refine(failure, "multi_head_forward", D, H)

        if isinstance(result, Tensor):
            return CheckResult(name, False, f"{where}: returned one tensor of shape {shape_of(result)}",
                               "return both the output and the per-head weights: `return output, weights`.")
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return CheckResult(name, False, f"{where}: returned {type(result).__name__}, expected a tuple "
                               "(output, weights)", "end with `return output, weights`.")
        output, weights = result
        if not isinstance(output, Tensor) or not isinstance(weights, Tensor):
            return CheckResult(name, False, f"{where}: returned ({type(output).__name__}, "
                               f"{type(weights).__name__}), expected two tensors", "`return output, weights`.")
        if output.shape == expected_w.shape and weights.shape == expected_out.shape:
            return CheckResult(name, False, f"{where}: output and weights are swapped",
                               "return `output, weights` in that order.")
        if weights.shape != expected_w.shape:
            got = tuple(weights.shape)
            if got == (B, Lq, Lk):
                summary = f"{where}: weights have shape {got} = (B, Lq, Lk): one map instead of one per head"
                hint = ("return the per-head weights (B, H, Lq, Lk), not their average (PyTorch averages them "
                        "only with average_attn_weights=True); if there was only one map, you attended with "
                        "the full d_model width: " + _FIX_FULL_WIDTH)
            elif got == (B, 1, Lq, Lk) and H > 1:
                summary = f"{where}: weights have shape {got}: one full-width head instead of {H} heads"
                hint = _FIX_FULL_WIDTH
            elif got == (B, H, Lq, Lq) and Lq != Lk:
                summary = (f"{where}: weights have shape {got}, expected {tuple(expected_w.shape)}: "
                           "the keys come from `query`")
                hint = ("in cross-attention the keys and values come from the other sequence: "
                        "`k = w_k(key)`, `v = w_v(value)`; the weights have one column per key.")
            else:
                summary = f"{where}: weights have shape {got}, expected {tuple(expected_w.shape)} = (B, H, Lq, Lk)"
                hint = "the weights are softmax(q kᵀ / sqrt(d_k)) per head: (B, H, Lq, d_k) @ (B, H, d_k, Lk)."
            return CheckResult(name, False, summary, hint)
        if output.shape != expected_out.shape:
            got = tuple(output.shape)
            if got == (B, H, Lq, D // H):
                summary = f"{where}: output has shape {got} = (B, H, Lq, d_k): the heads are not merged"
                hint = "merge the heads back to (B, Lq, D) (merge_heads), then apply w_o."
            else:
                summary = f"{where}: output has shape {got}, expected {tuple(expected_out.shape)} = (B, Lq, D)"
                hint = "merge the heads (B, H, Lq, d_k) -> (B, Lq, D), then apply w_o."
            return CheckResult(name, False, summary, hint)

        weights_ok = close(weights, expected_w)
        output_ok = close(output, expected_out)
        if weights_ok and output_ok:
            continue
        diagnosis = _diagnose_forward(case, output, weights)
        if diagnosis is not None:
            what, fix = diagnosis
            return CheckResult(name, False, f"{where}: {what}", fix)
        if H > 1 and torch.allclose(weights[:, 1:].detach().double(), weights[:, :1].detach().double(), atol=1e-6):
            return CheckResult(name, False, f"{where}: every head has the same weights: the attention ran "
                               "once over the full d_model width (wrong head dimension)", _FIX_FULL_WIDTH)
        if torch.isnan(output).any() or torch.isnan(weights).any():
            return CheckResult(name, False, f"{where}: the result contains NaN",
                               "look for a softmax over a row of -inf, or a division by zero.")
        used = _scale_used(case, weights)
        if used is not None and not math.isclose(used, math.sqrt(D // H), rel_tol=1e-3):
            return CheckResult(name, False, f"{where}: the scores are divided by {used:.4g} instead of sqrt(d_k) = "
                               f"{math.sqrt(D // H):.4g}: a number written in the code, or the wrong dimension",
                               "divide by `math.sqrt(d_k)` with d_k = q.size(-1) = d_model // num_heads; a number "
                               "written in the code is right for one d_k only.")
        if weights_ok:
            return CheckResult(name, False, f"{where}: the weights are right but the output is not",
                               "output = w_o(merge_heads(weights @ v)), with v = split_heads(w_v(value), num_heads).")
        details = [f"largest difference in weights: {(weights.detach().double() - expected_w.double()).abs().max():.3g}"]
        return CheckResult(name, False, f"{where}: the weights differ from the reference",
                           "project (w_q, w_k, w_v), split into heads, scores / sqrt(d_k), softmax over the "
                           "keys, weights @ v, merge, w_o; print the shape after each step.", details)
    return CheckResult(name, True, f"multi_head_forward matches the reference on all {len(cases)} cases "
                       "(self-attention, cross-attention, a padding mask, one head)")


def check_multi_head_forward(fn: Callable[..., object]) -> CheckResult:
    """Check ``multi_head_forward(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None)`` (exercise 4).

    It must return ``(output (B, Lq, D), weights (B, H, Lq, Lk))`` equal to
    :class:`lessons_src.multihead.MultiHeadAttention` with the same projections.
    """
    return finish(_run_forward(fn, "check_multi_head_forward"))


def check_multi_head_attention(
    split_heads: Callable[..., object], merge_heads: Callable[..., object], multi_head_forward: Callable[..., object]
) -> CheckResult:
    """Check the three functions of exercise 4 in order, and report the first problem.

    ``split_heads(x, num_heads)``, ``merge_heads(x)`` and
    ``multi_head_forward(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None)``.
    """
    name = "check_multi_head_attention"
    for run, fn in ((_run_split, split_heads), (_run_merge, merge_heads), (_run_forward, multi_head_forward)):
        result = run(fn, name)
        if not result:
            return finish(result)
    return finish(CheckResult(name, True, "split_heads, merge_heads and multi_head_forward all match the "
                              "reference (4 + 3 + 4 cases: several head counts, self- and cross-attention, "
                              "a padding mask)"))

