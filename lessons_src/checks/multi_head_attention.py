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

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..masks import padding_mask
from ..multihead import MultiHeadAttention
from ._framework import Case, Mistake, Session, passed, run_check, shape_is
from ._result import CheckResult, close, finish

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


def _layer(d_model: int, num_heads: int, seed: int) -> MultiHeadAttention:
    """A MultiHeadAttention with seeded weights of unit-size outputs and non-zero biases."""
    g = torch.Generator().manual_seed(seed)
    layer = MultiHeadAttention(d_model, num_heads)
    with torch.no_grad():
        for p in layer.parameters():
            scale = 1.0 / math.sqrt(d_model) if p.dim() == 2 else 0.1
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return layer.eval()


def _forward_cases() -> list[Case]:
    g = torch.Generator().manual_seed(6)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    def case(description: str, query: Tensor, key: Tensor, value: Tensor, layer: MultiHeadAttention,
             mask: Tensor | None = None) -> Case:
        B, Lq, D = query.shape
        H = layer.num_heads
        args = {"query": query, "key": key, "value": value, "w_q": layer.w_q, "w_k": layer.w_k, "w_v": layer.w_v,
                "w_o": layer.w_o, "num_heads": H}
        return Case(f"multi_head_forward, {description}", args, {} if mask is None else {"mask": mask},
                    {"B": B, "Lq": Lq, "Lk": key.size(1), "D": D, "H": H, "d_k": D // H})

    # d_k differs from case to case (6, 10, 5, 8: no number written in the code passes them all) and
    # sqrt(d_k), d_k / 2 (`d_k ** 1/2`), 2 d_k and sqrt(d_model) stay apart, so each scale mistake
    # gives its own weights; Lq != Lk exposes key/query mix-ups.
    x = rand(2, 5, 18)
    return [
        case("self-attention, B=2, L=5, d_model=18, num_heads=3 (d_k=6)", x, x, x, _layer(18, 3, 1)),
        case("cross-attention, B=2, Lq=3, Lk=6, d_model=20, num_heads=2 (d_k=10), key != value",
             rand(2, 3, 20), rand(2, 6, 20), rand(2, 6, 20), _layer(20, 2, 2)),
        case("cross-attention with a padding mask of shape (2, 1, 1, 6) (True = may attend): the second sequence "
             "has 4 real keys; B=2, Lq=4, Lk=6, d_model=15, num_heads=3 (d_k=5)",
             rand(2, 4, 15), rand(2, 6, 15), rand(2, 6, 15), _layer(15, 3, 3), padding_mask([6, 4])[:, None, None, :]),
        case("one head (num_heads=1), B=1, L=4, d_model=8", *([rand(1, 4, 8)] * 3), _layer(8, 1, 4)),
    ]


def _forward_reference(query: Tensor, key: Tensor, value: Tensor, w_q: nn.Module, w_k: nn.Module, w_v: nn.Module,
                       w_o: nn.Module, num_heads: int, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    return _variant()(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask)


def _variant(split: Callable[[Tensor, int], Tensor] = _split, merge: Callable[[Tensor], Tensor] = _merge,
             scale: Callable[[int, int], float] | None = None, project_out: bool = True, mask_mode: str = "use",
             return_scores: bool = False, keys_with_w_q: bool = False,
             log_softmax: bool = False) -> Callable[..., tuple[Tensor, Tensor]]:
    """Multi-head attention with one thing changed (a known mistake), with the learner's signature.

    ``scale(d_k, d_model)`` replaces ``sqrt(d_k)``.
    """

    def forward(query: Tensor, key: Tensor, value: Tensor, w_q: nn.Module, w_k: nn.Module, w_v: nn.Module,
                w_o: nn.Module, num_heads: int, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            q = split(w_q(query), num_heads)  # (B, H, Lq, d_k)
            k = split((w_q if keys_with_w_q else w_k)(key), num_heads)  # (B, H, Lk, d_k)
            v = split(w_v(value), num_heads)  # (B, H, Lk, d_k)
            d_k = q.size(-1)
            divisor = math.sqrt(d_k) if scale is None else scale(d_k, query.size(-1))
            scores = q @ k.transpose(-2, -1) / divisor  # (B, H, Lq, Lk)
            if mask is not None and mask_mode != "ignore":
                allowed = mask if mask_mode == "use" else ~mask
                scores = scores.masked_fill(~allowed, float("-inf"))
            weights = torch.log_softmax(scores, dim=-1) if log_softmax else torch.softmax(scores, dim=-1)
            heads = merge(weights @ v)  # (B, Lq, D)
            output = w_o(heads) if project_out else heads
        return output, scores if return_scores else weights

    return forward


def _weights_shape(shape: Callable[..., tuple[int, ...] | None]) -> Callable[[Case, object], bool]:
    """A predicate: the learner returned two tensors and the weights have ``shape(**case.info)``."""

    def predicate(case: Case, got: object) -> bool:
        return (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], Tensor)
                and tuple(got[1].shape) == shape(**case.info))

    return predicate


def _swapped(case: Case, got: object) -> bool:
    out, w = _forward_reference(*case.args.values(), **case.kwargs)
    return (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, Tensor) for t in got)
            and got[0].shape == w.shape and got[1].shape == out.shape)


def _output_shape(shape: Callable[..., tuple[int, ...]]) -> Callable[[Case, object], bool]:
    def predicate(case: Case, got: object) -> bool:
        return (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], Tensor)
                and tuple(got[0].shape) == shape(**case.info))

    return predicate


def _same_heads(case: Case, got: object) -> bool:
    weights = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
    return (case.info["H"] > 1 and isinstance(weights, Tensor) and weights.dim() == 4 and weights.size(1) > 1
            and not weights.dtype.is_complex
            and torch.allclose(weights[:, 1:].detach().double(), weights[:, :1].detach().double(), atol=1e-6))


def _weights_right(case: Case, got: object) -> bool:
    _, w = _forward_reference(*case.args.values(), **case.kwargs)
    weights = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
    return isinstance(weights, Tensor) and weights.shape == w.shape and close(weights, w)


def _scale_used(case: Case, got: object) -> dict[str, object] | None:
    """The number the scores were divided by, read off the learner's weights (unmasked cases)."""
    weights = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
    if "mask" in case.kwargs or not isinstance(weights, Tensor) or weights.dtype.is_complex:
        return None
    with torch.no_grad():
        q = _split(case.args["w_q"](case.args["query"]), case.info["H"])
        k = _split(case.args["w_k"](case.args["key"]), case.info["H"])
    raw = (q @ k.transpose(-2, -1)).double()  # (B, H, Lq, Lk)
    if weights.shape != raw.shape or not (weights > 0).all():
        return None
    x = raw - raw.mean(-1, keepdim=True)
    y = weights.detach().double().log()
    y = y - y.mean(-1, keepdim=True)
    slope = float((x * y).sum() / (x * x).sum())
    if slope <= 0 or not torch.allclose(y, x * slope, atol=1e-3):
        return None
    used, right = 1.0 / slope, math.sqrt(case.info["d_k"])
    return None if math.isclose(used, right, rel_tol=1e-3) else {"c": f"{used:.4g}", "right": f"{right:.4g}"}


_FIX_FULL_WIDTH = (
    "split the projected queries, keys and values into num_heads heads of d_k = d_model // num_heads "
    "features (split_heads), attend per head, then merge: each head has its own weights."
)

FORWARD_MISTAKES = [
    Mistake("output and weights are swapped", "return `output, weights` in that order.", looks_like=_swapped),
    Mistake("weights have shape (B, Lq, Lk) = ({B}, {Lq}, {Lk}): one map instead of one per head",
            "return the per-head weights (B, H, Lq, Lk), not their average (PyTorch averages them only with "
            "average_attn_weights=True); if there was only one map, you attended with the full d_model width: "
            + _FIX_FULL_WIDTH, looks_like=_weights_shape(lambda B, Lq, Lk, D, H, d_k: (B, Lq, Lk))),
    Mistake("weights have shape (B, 1, Lq, Lk): one full-width head instead of {H} heads", _FIX_FULL_WIDTH,
            looks_like=_weights_shape(lambda B, Lq, Lk, D, H, d_k: (B, 1, Lq, Lk) if H > 1 else None)),
    Mistake("weights have shape (B, H, Lq, Lq): the keys come from `query`",
            "in cross-attention the keys and values come from the other sequence: `k = w_k(key)`, `v = w_v(value)`; "
            "the weights have one column per key.",
            looks_like=_weights_shape(lambda B, Lq, Lk, D, H, d_k: (B, H, Lq, Lq) if Lq != Lk else None)),
    Mistake("output has shape (B, H, Lq, d_k): the heads are not merged",
            "merge the heads back to (B, Lq, D) (merge_heads), then apply w_o.",
            looks_like=_output_shape(lambda B, Lq, Lk, D, H, d_k: (B, H, Lq, d_k))),
    Mistake("the heads were split by a reshape without transpose (`.view(B, H, L, d_k)`), which mixes positions "
            "across heads", _FIX_NO_TRANSPOSE_SPLIT, _variant(split=_split_no_transpose)),
    Mistake("the heads were split by a reshape without transpose (`.view(B, H, L, d_k)`), which mixes positions "
            "across heads", _FIX_NO_TRANSPOSE_SPLIT, _variant(split=_split_no_transpose, merge=_merge_no_transpose)),
    Mistake("the heads are merged without the inverse transpose", _FIX_NO_TRANSPOSE_MERGE,
            _variant(merge=_merge_no_transpose)),
    Mistake("the heads are interleaved (head h takes features h, h+H, ...)", _FIX_INTERLEAVED,
            _variant(split=_split_interleaved, merge=_merge_interleaved)),
    Mistake("the heads are interleaved (head h takes features h, h+H, ...)", _FIX_INTERLEAVED,
            _variant(split=_split_interleaved)),
    Mistake("the output projection w_o is missing",
            "finish with `w_o(merged)`: the merged heads (B, Lq, D) go through w_o, which mixes what the heads found.",
            _variant(project_out=False)),
    Mistake("the scores are scaled by sqrt(d_model) instead of sqrt(d_k)",
            "each head's dot products are over d_k = d_model // num_heads = {d_k} features: divide by "
            "math.sqrt(d_k), not math.sqrt(d_model).", _variant(scale=lambda d_k, d_model: math.sqrt(d_model))),
    Mistake("the scores are not scaled", "divide each head's scores by math.sqrt(d_k) before the softmax.",
            _variant(scale=lambda d_k, d_model: 1.0)),
    Mistake("`d_k ** 1/2` is not sqrt(d_k): `**` binds tighter than `/`, so the scores are divided by d_k / 2",
            "write `d_k ** 0.5` or `math.sqrt(d_k)`: `d_k ** 1/2` means `(d_k ** 1) / 2`.",
            _variant(scale=lambda d_k, d_model: d_k / 2)),
    Mistake("`scores / d_k ** 1/2` is not scores / sqrt(d_k): the scores are divided by d_k, then by 2",
            "write `scores / d_k ** 0.5` or `scores / math.sqrt(d_k)`.", _variant(scale=lambda d_k, d_model: 2 * d_k)),
    Mistake("the scores are divided by d_k instead of sqrt(d_k)", "divide by math.sqrt(d_k), not d_k = {d_k}.",
            _variant(scale=lambda d_k, d_model: float(d_k))),
    Mistake("the keys are projected with w_q instead of w_k", "each of query, key and value has its own projection: "
            "`q = w_q(query)`, `k = w_k(key)`, `v = w_v(value)`.", _variant(keys_with_w_q=True)),
    Mistake("the weights are a log-softmax (log-probabilities), not a softmax",
            "use `torch.softmax(scores, dim=-1)`: weights are probabilities in [0, 1] that sum to 1.",
            _variant(log_softmax=True)),
    Mistake("the weights returned are the scores, before the softmax",
            "return the weights after the softmax (each row sums to 1).", _variant(return_scores=True)),
    Mistake("the mask is inverted", "the course's masks mean True = may attend (PyTorch's key_padding_mask means the "
            "opposite): `scores.masked_fill(~mask, float('-inf'))`.", _variant(mask_mode="invert"),
            when=lambda case: "mask" in case.kwargs),
    Mistake("the mask is ignored", "apply the mask to the (B, H, Lq, Lk) scores before the softmax: "
            "`scores.masked_fill(~mask, float('-inf'))`; it broadcasts over the heads.", _variant(mask_mode="ignore"),
            when=lambda case: "mask" in case.kwargs),
    Mistake("every head has the same weights: the attention ran once over the full d_model width (wrong head "
            "dimension)", _FIX_FULL_WIDTH, looks_like=_same_heads),
    Mistake("the scores are divided by {c} instead of sqrt(d_k) = {right}: a number written in the code, or the "
            "wrong dimension", "divide by `math.sqrt(d_k)` with d_k = q.size(-1) = d_model // num_heads; a number "
            "written in the code is right for one d_k only.", looks_like=_scale_used),
    Mistake("the weights are right but the output is not",
            "output = w_o(merge_heads(weights @ v)), with v = split_heads(w_v(value), num_heads).",
            looks_like=_weights_right),
]

_FORWARD_HINTS = [
    *HINTS,
    (r"mat1 and mat2", "a projection got a tensor of the wrong width: apply w_q, w_k, w_v to the (B, L, D) inputs "
     "before splitting, and w_o to the merged (B, L, D) heads.", "a projection got a tensor of the wrong width"),
    (r"unexpected keyword argument 'mask'", "give multi_head_forward a `mask=None` parameter.",
     "your function does not accept `mask=`"),
]


def _run_forward(fn: object, name: str) -> CheckResult:
    session = Session(name, _FORWARD_HINTS, copy_modules=True)  # the learner gets copies of the projections
    cases = _forward_cases()
    failure = run_check(session, fn, cases, _forward_reference, ("output", "weights"), FORWARD_MISTAKES)
    if failure is not None:
        return _label(failure, "multi_head_forward")
    return passed(session, f"multi_head_forward matches the reference on all {len(cases)} cases (self-attention, "
                           "cross-attention, a padding mask, one head)")


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

