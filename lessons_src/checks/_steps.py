"""Named steps: a check's reference written as the chapter's formula, and a search over small changes to
each step that names a learner's mistake when no listed mistake does.

A reference declares its steps by routing each one through :func:`step`, in the chapter's words::

    def _reference(query, key, value, mask=None):
        scores = step("scores", torch.matmul, query, key.transpose(-2, -1), axes=("query", "key"))
        scores = step("scale by 1/√d_k", torch.div, scores, math.sqrt(query.size(-1)))
        weights = step("softmax over the keys", torch.softmax, scores, dim=-1, axes=("query", "key"))
        return step("weighted sum of the values", torch.matmul, weights, value), weights

Outside a search, ``step(name, fn, *args, **kwargs)`` is ``fn(*args, **kwargs)``: the reference computes
as before, and the check needs no code of its own for the search. ``axes`` (a reserved keyword) names the
last dims of the step's first tensor operand; give reductions and softmaxes ``dim=`` by keyword.

When a learner's result is wrong and no listed mistake matches, :func:`search` records the reference's
steps on the failing case, then re-runs it with one step changed at a time, from a catalogue of the
changes learners make (:func:`changes`): another ``dim``; a sum for a mean and back; an operand
transposed, or two operands swapped; a term or factor left out; a divisor replaced by a size of the case
(``√d_k``, the number of keys, ...) or squared; the mask inverted or filled with 0; the softmax replaced
by its logarithm, by the unnormalised exponentials or by the raw scores over their sum; an integer
argument one more or one less; the step left out, applied twice, negated, put through exp or log,
shifted by one along an axis. A change whose result equals the learner's names the mistake. Where no
single change does, two changes in different steps are tried together, at most :data:`MAX_PAIRS` of them.
A change that also explains every other case is stated; one that explains at least half of them is
"probably"; fewer, nothing. An error the learner's code raised is matched by a change that raises it too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import operator
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..device import one_cpu_thread

__all__ = ["step", "Change", "Found", "record", "changes", "search", "explain_error", "MAX_PAIRS", "SEARCH_SECONDS"]

#: How many pairs of changes one search tries at most (the simplest first): the bound that keeps a search
#: short and its answer the same on a quiet and on a busy machine (about 2 s on one core of the project's CI).
MAX_PAIRS = 3000
#: A guard on the wall clock, times the machine's slowness; a search on the course's checks ends long before it
#: (``benchmarks/bench_check_feedback.py`` prints the longest), so that it never decides what is found.
SEARCH_SECONDS = 30.0


@dataclass
class _Call:
    """One step as the reference ran it: its name, function, operands and result."""

    name: str
    fn: Callable[..., object]
    args: tuple
    kwargs: dict
    axes: tuple[str, ...] | None
    out: object


@dataclass(frozen=True)
class Change:
    """A small change to one step: what it does (``says``, completing "step 'name': ...") and its fix."""

    step: str
    says: str
    fix: str
    apply: Callable[[Callable[..., object], tuple, dict], object]
    #: A change any step can have (a factor, a shift, exp, ...): tried alone, not in pairs.
    generic: bool = False
    #: Which of two changes that both explain a result is named: the lower (0: something left out; 1: the step's
    #: own alternatives; 2: an integer replaced by another or by a fixed number).
    rank: int = 1


@dataclass
class _Tape:
    changed: Mapping[str, Change] = field(default_factory=dict)
    calls: list[_Call] | None = None  # a list when recording
    info: Mapping[str, object] = field(default_factory=dict)  # the case's, for sizes found again on each case
    numbers: dict[str, float] = field(default_factory=dict)  # the steps' results that are numbers, by step
    named: Mapping[str, object] = field(default_factory=dict)  # the arguments of the case being run, by name


_TAPES: list[_Tape] = []


def step(name: str, fn: Callable[..., object], *args: object, axes: Sequence[str] | None = None,
         **kwargs: object) -> object:
    """``fn(*args, **kwargs)``: one step of a check's reference, named in the chapter's words.

    ``axes`` names the last dims of the first tensor operand (e.g. ``("query", "key")``) for the feedback.
    During a :func:`search` the step may be changed; during :func:`record` it is written down.
    """
    tape = _TAPES[-1] if _TAPES else None
    if tape is None:
        return fn(*args, **kwargs)
    change = tape.changed.get(name)
    out = change.apply(fn, args, kwargs) if change is not None else fn(*args, **kwargs)
    if tape.calls is not None:
        tape.calls.append(_Call(name, fn, args, kwargs, tuple(axes) if axes else None, out))
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        tape.numbers.setdefault(name, float(out))
    return out


@contextlib.contextmanager
def _tape(tape: _Tape) -> Iterator[_Tape]:
    _TAPES.append(tape)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            yield tape
    finally:
        _TAPES.pop()


def _copies(values: Mapping[str, object]) -> dict[str, object]:
    return {k: v.clone() if isinstance(v, Tensor) else v for k, v in values.items()}


def record(reference: Callable[..., object], args: Mapping[str, object],
           kwargs: Mapping[str, object] | None = None) -> tuple[object, list[_Call], dict[str, object]]:
    """``(result, steps, arguments)``: the reference run on copies of the arguments (returned by name),
    each :func:`step` it took written down."""
    tape = _Tape(calls=[])
    given, given_kw = _copies(args), _copies(kwargs or {})
    with _tape(tape):
        result = reference(*given.values(), **given_kw)
    return result, tape.calls, {**given, **given_kw}


def _run(reference: Callable[..., object], args: Mapping[str, object], kwargs: Mapping[str, object],
         changed: Mapping[str, Change], info: Mapping[str, object] | None = None) -> object:
    given, given_kw = _copies(args), _copies(kwargs)
    with _tape(_Tape(changed=changed, info=info or {}, named={**given, **given_kw})):
        return reference(*given.values(), **given_kw)


# -- naming ------------------------------------------------------------------------------------------


def _first_tensor(args: Sequence[object]) -> Tensor | None:
    return next((a for a in args if isinstance(a, Tensor)), None)


def _axis(call: _Call, d: int) -> str:
    """The name of dim ``d`` of the step's first tensor operand: "the keys (dim -1)"."""
    x = _first_tensor(call.args)
    n = x.dim() if x is not None else 0
    d = d - n if d >= 0 else d
    if call.axes and -len(call.axes) <= d:
        return f"the {_plural(call.axes[d])} (dim {d})"
    return f"dim {d}"


def _plural(noun: str) -> str:
    if noun.endswith("s"):
        return noun
    if noun.endswith("y") and not noun.endswith("ey"):
        return noun[:-1] + "ies"
    return noun + "s"


def _how_many(call: _Call, d: int) -> str:
    """What the size of dim ``d`` of the step's first tensor operand counts: "the number of keys", or "the size of dim -1"."""
    what = _axis(call, d)
    return f"the number of {what.removeprefix('the ').split(' (')[0]}" if what.startswith("the ") else f"the size of {what}"


def _count(call: _Call, d: int) -> str:
    return f"{_first_tensor(call.args).shape[d]} = {_how_many(call, d)}"


def _operand(i: int, names: Mapping[int, str]) -> str:
    return names.get(i, f"operand {i + 1}")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "-inf" if value < 0 else "inf"
        return f"{value:.4g}"
    return str(value)


# -- the catalogue -------------------------------------------------------------------------------------


def _fn_name(fn: Callable[..., object]) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


_ADD = {torch.add, operator.add, Tensor.add}
_SUB = {torch.sub, torch.subtract, operator.sub, Tensor.sub}
_MUL = {torch.mul, torch.multiply, operator.mul, Tensor.mul}
_DIV = {torch.div, torch.true_divide, operator.truediv, Tensor.div}
_MATMUL = {torch.matmul, operator.matmul, Tensor.matmul, torch.bmm}
_COMPARE = {torch.lt: "<", torch.le: "<=", torch.gt: ">", torch.ge: ">=", torch.eq: "==", torch.ne: "!=",
            operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=", operator.eq: "==",
            operator.ne: "!="}
_BY_SYMBOL = {"<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge, "==": torch.eq, "!=": torch.ne}
_STRICT = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "<=", "!=": "<"}
_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": ">=", "!=": ">"}
_AND = {torch.logical_and, operator.and_, Tensor.__and__}
_OR = {torch.logical_or, operator.or_, Tensor.__or__}
_UNARY = {torch.square: "square", torch.abs: "abs", torch.sqrt: "sqrt", torch.rsqrt: "rsqrt", torch.exp: "exp",
          torch.log: "log"}
_REDUCTIONS: dict[Callable[..., object], str] = {torch.sum: "a sum", torch.mean: "a mean", torch.amax: "a maximum"}


def _with(fn: Callable[..., object], **changed: object) -> Callable[[Callable[..., object], tuple, dict], object]:
    """A change that calls the step with some keyword arguments replaced."""
    def apply(f: Callable[..., object], args: tuple, kwargs: dict) -> object:
        return fn(*args, **{**kwargs, **changed})
    return apply


def _swap_reduction(new: Callable[..., object]) -> Callable[[Callable[..., object], tuple, dict], object]:
    def apply(f: Callable[..., object], args: tuple, kwargs: dict) -> object:
        return new(*args, **kwargs)
    return apply


@dataclass(frozen=True)
class _Size:
    """A size a wrong scale may be built from, found again on each case by what it is (``resolve``)."""

    value: float
    label: str
    resolve: Callable[[tuple, Mapping[str, object]], float]


def _argument(name: str) -> object:
    """The argument ``name`` of the case the reference is running on (inside a search)."""
    return _TAPES[-1].named[name]


def _integer(name: str) -> int:
    """The integer ``name`` of the case the reference is running on: an argument, else a number of its info."""
    tape = _TAPES[-1]
    return tape.named[name] if name in tape.named else tape.info[name]


def _info() -> Mapping[str, object]:
    """The info of the case the reference is running on (inside a search)."""
    return _TAPES[-1].info if _TAPES else {}


def _named_sizes(call: _Call, info: Mapping[str, object], numbers: Mapping[str, float] | None = None) -> list[_Size]:
    """Sizes a wrong scale may be built from: the case's own (``info``: each, then its square root and its
    square), the numbers earlier steps computed (``numbers``: a group size, a count), the step's first operand's
    dims (and their square roots), then 2 and 1/2; one label per value, the first."""
    keys = [k for k, v in info.items() if k != "dims" and isinstance(v, (int, float)) and not isinstance(v, bool)
               and 1 < v < 1e6]
    found = [_Size(float(info[k]), f"{k} = {info[k]:g}", lambda a, i, k=k: float(i[k])) for k in keys]
    found += [_Size(math.sqrt(info[k]), f"√{k}", lambda a, i, k=k: math.sqrt(i[k])) for k in keys]
    found += [_Size(float(info[k]) ** 2, f"{k}²", lambda a, i, k=k: float(i[k]) ** 2) for k in keys]
    found += [_Size(v, f"{_fmt(v)} (the result of '{k}')", lambda a, i, k=k: _TAPES[-1].numbers[k])
              for k, v in (numbers or {}).items() if v > 1 and k != call.name]
    x = _first_tensor(call.args)
    if x is not None:
        for d in range(-x.dim(), 0):
            if x.shape[d] > 1:
                what = _how_many(call, d)
                found += [_Size(float(x.shape[d]), f"{x.shape[d]} ({what})",
                                lambda a, i, d=d: float(_first_tensor(a).shape[d])),
                          _Size(math.sqrt(x.shape[d]), f"√{x.shape[d]} (√ of {what})",
                                lambda a, i, d=d: math.sqrt(_first_tensor(a).shape[d]))]
    found += [_Size(2.0, "2", lambda a, i: 2.0), _Size(0.5, "1/2", lambda a, i: 0.5)]
    seen, unique = set(), []
    for size in found:  # a factor beyond 10^4 either way turns a step into 0 or into noise: it names nothing
        if round(size.value, 9) not in seen and 1e-4 <= size.value <= 1e4:
            seen.add(round(size.value, 9))
            unique.append(size)
    return unique


def changes(call: _Call, info: Mapping[str, object], operand_names: Mapping[int, str],
            named: Mapping[str, object] | None = None, numbers: Mapping[str, float] | None = None) -> list[Change]:
    """Every small change to ``call`` the search tries, most specific first.

    ``named``: the case's arguments by name (an operand may be replaced by another of the same shape, an
    integer by another integer of the case, or by their sum or difference); ``numbers``: what earlier steps
    computed that is a number (a wrong scale may be one of them).
    """
    name, fn, args, kwargs, out = call.name, call.fn, call.args, call.kwargs, call.out
    named = named or {}
    integers = {k: v for k, v in {**{k: v for k, v in info.items() if k != "dims"}, **named}.items()
                if isinstance(v, int) and not isinstance(v, bool)}
    found: list[Change] = []

    def add(says: str, fix: str, apply: Callable[[Callable[..., object], tuple, dict], object],
            generic: bool = False, rank: int = 1) -> None:
        found.append(Change(name, says, fix, apply, generic, rank))

    tensors = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    first = _first_tensor(args)
    fname = _fn_name(fn)
    # -- the step left out: its first operand used as it is (the commonest slip, tried first)
    if (isinstance(out, Tensor) and first is not None and first is not out
            and (first.dtype == torch.bool) == (out.dtype == torch.bool)):  # another shape: a later step may raise
        add("it is left out (its input is used as it is)", f"apply step '{name}'.", lambda f, a, k: a[0], rank=0)
    # -- the step's own alternatives
    if fname == "softmax" and "dim" in kwargs:
        add("yours are log-probabilities (log_softmax), the step takes the softmax itself",
            "take `torch.softmax(..., dim=...)`, not `log_softmax`: the weights are probabilities.",
            lambda f, a, k: torch.log_softmax(*a, **k))
        add("the exponentials are not divided by their sum (no normalisation)",
            "divide the exponentials by their sum over the same dim (that is what `torch.softmax` does).",
            lambda f, a, k: torch.exp(a[0]))
        add("the raw values are divided by their sum, with no exponential first",
            "take `exp` before normalising: `torch.softmax(x, dim=...)`, not `x / x.sum(...)`.",
            lambda f, a, k: a[0] / a[0].sum(dim=k["dim"], keepdim=True))
        add("a sigmoid of each entry is taken instead of a softmax across them",
            "normalise across the dim with `torch.softmax(..., dim=...)`: a sigmoid looks at one entry alone.",
            lambda f, a, k: torch.sigmoid(a[0]))
        add("the exponentials are taken without subtracting the row's maximum first: large scores overflow to inf "
            "(inf / inf = NaN)", "let `torch.softmax` do it, or subtract each row's maximum before `exp`: "
            "`x - x.amax(dim=..., keepdim=True)`.",
            lambda f, a, k: torch.exp(a[0]) / torch.exp(a[0]).sum(dim=k["dim"], keepdim=True))
        add("the softmax subtracts the largest value of the whole tensor, not each row's own",
            "let `torch.softmax` do it, or subtract `x.amax(dim=..., keepdim=True)`: each row's own maximum.",
            lambda f, a, k: torch.exp(a[0] - a[0].max()) / torch.exp(a[0] - a[0].max()).sum(dim=k["dim"], keepdim=True))
    if fname == "masked_fill" and len(args) >= 3:
        value = args[2]
        if value != 0:
            add(f"the masked entries are filled with 0, not {_fmt(value)}",
                f"fill with {_fmt(value)}: a 0 still counts in a softmax (exp(0) = 1).",
                lambda f, a, k: f(a[0], a[1], 0.0))
        if isinstance(value, float) and math.isinf(value):
            add("the masked entries are filled with a large finite number (e.g. -1e9), not -inf: a query with no key "
                "to attend to then spreads its weight evenly instead of getting 0",
                "fill with `float('-inf')` and handle a row with no allowed key as the exercise says.",
                lambda f, a, k: f(a[0], a[1], -1e9 if value < 0 else 1e9))
        add("the mask is inverted: the entries to keep are filled, the ones to hide are kept",
            "`masked_fill` fills where its mask is True: pass the positions to hide (`~allowed`).",
            lambda f, a, k: f(a[0], ~a[1] if a[1].dtype == torch.bool else 1 - a[1], *a[2:]))
    if fn is torch.where and len(args) == 3:
        add(f"it is left out: {_operand(2, operand_names)} is used everywhere, the condition never applied",
            f"apply step '{name}': `torch.where(condition, ..., ...)` replaces the entries where the condition holds.",
            lambda f, a, k: a[2] + 0 * torch.as_tensor(a[1]) if isinstance(a[2], Tensor) else a[2], rank=0)
        add("the condition is inverted: each branch is taken where the other should be",
            "swap the two branches of `torch.where`, or negate the condition with `~`.",
            lambda f, a, k: torch.where(a[0], a[2], a[1]))
    if fn in _COMPARE and len(args) == 2:
        symbol = _COMPARE[fn]
        for other in (_STRICT.get(symbol), _FLIP.get(symbol)):
            if other is not None:
                add(f"the comparison is `{other}` where the step has `{symbol}`",
                    f"compare with `{symbol}`: " + ("check whether the boundary itself is included." if other ==
                                                    _STRICT.get(symbol) else "the other direction."),
                    lambda f, a, k, other=other: _BY_SYMBOL[other](torch.as_tensor(a[0]), torch.as_tensor(a[1])))
    if fn in _AND or fn in _OR:
        both = "and" if fn in _AND else "or"
        add(f"the two conditions are joined with `{'|' if both == 'and' else '&'}` ({'or' if both == 'and' else 'and'}) "
            f"where the step joins them with `{'&' if both == 'and' else '|'}` ({both})",
            f"join the conditions with `{'&' if both == 'and' else '|'}`: {'both must hold' if both == 'and' else 'either one is enough'}.",
            lambda f, a, k: torch.logical_or(*a) if both == "and" else torch.logical_and(*a))
        for i in range(2):
            add(f"the condition {_operand(i, operand_names)} is left out",
                f"{'and' if both == 'and' else 'or'} the condition {_operand(i, operand_names)}: the step joins both.",
                lambda f, a, k, i=i: a[1 - i] | (a[i] & False) if both == "or" else a[1 - i] & (a[i] | True), rank=0)
            add(f"the condition {_operand(i, operand_names)} is inverted",
                f"use {_operand(i, operand_names)} as it is, not its negation (`~`).",
                lambda f, a, k, i=i: f(*[~x if j == i else x for j, x in enumerate(a)], **k))
    if fn in (torch.minimum, torch.maximum):
        other_fn = torch.maximum if fn is torch.minimum else torch.minimum
        add(f"the {'larger' if fn is torch.minimum else 'smaller'} of the two is taken where the step takes the "
            f"{'smaller' if fn is torch.minimum else 'larger'}",
            f"`torch.{_fn_name(fn)}`: the {'smaller' if fn is torch.minimum else 'larger'} one.",
            lambda f, a, k: other_fn(*a, **k))
    if fn in (torch.any, torch.all):
        other_fn = torch.all if fn is torch.any else torch.any
        add(f"`{'all' if fn is torch.any else 'any'}` where the step takes `{_fn_name(fn)}`",
            f"the step asks whether {'any' if fn is torch.any else 'every'} entry is True: "
            f"`.{_fn_name(fn)}(dim=...)`.", lambda f, a, k: other_fn(*a, **k))
    if kwargs.get("keepdim") is True:
        add("the reduced dim is dropped (no `keepdim=True`), so the result lines up with the wrong axis",
            "keep the reduced dim, `keepdim=True`, so that the result broadcasts against the axis it came from.",
            _with(fn, keepdim=False))
    if fn in _REDUCTIONS and "dim" in kwargs:
        d = kwargs["dim"]
        dims = d if isinstance(d, (tuple, list)) else (d,)
        if fn is torch.mean and first is not None:
            count = " × ".join(_count(call, x) for x in dims)
            add(f"yours is a sum where the step takes a mean ({count} it adds up)",
                "divide the sum by how many entries it adds (or use `.mean(dim=...)`).",
                _swap_reduction(torch.sum))
        if fn is torch.sum and first is not None:
            count = " × ".join(_count(call, x) for x in dims)
            add(f"yours is a mean where the step takes a sum (divided by {count})",
                "add the entries up (`.sum(dim=...)`); do not divide by their number.", _swap_reduction(torch.mean))
        if first is not None and first.dim() > 1:
            add(f"it is taken over every entry of the tensor instead of over {', '.join(_axis(call, x) for x in dims)}",
                f"reduce over {', '.join(_axis(call, x) for x in dims)} only: `dim=...`, `keepdim=True`.",
                lambda f, a, k: f(a[0], dim=tuple(range(a[0].dim())), keepdim=k.get("keepdim", False)))
        if fn in (torch.sum, torch.mean):
            add("yours takes the largest entry where the step adds them up",
                "add the entries (`.sum`/`.mean`), not `.max`/`.amax`.",
                lambda f, a, k: torch.amax(*a, **k))
    if fn in _MATMUL and len(tensors) == 2:
        for i in tensors:
            if args[i].dim() >= 2 and args[i].shape[-1] != 1:
                operand = _operand(i, operand_names)
                add(f"{operand[:-1]} is used without its transpose" if operand.endswith("ᵀ")
                    else f"{operand} is transposed in its last two dims",
                    f"check which of {_operand(i, operand_names)}'s last two dims the product runs over: print its "
                    "shape (`.transpose(-2, -1)` turns it).",
                    lambda f, a, k, i=i: f(*[x.transpose(-2, -1) if j == i else x for j, x in enumerate(a)], **k))
        for i in tensors:
            base = getattr(args[i], "_base", None)
            if base is not None and not args[i].is_contiguous() and args[i].numel() == base.numel():
                add(f"{_operand(i, operand_names).removesuffix('ᵀ')} is reshaped to the transposed shape instead of "
                    "transposed (a reshape keeps the order of the entries: it does not turn rows into columns)",
                    "swap the two dims with `.transpose(-2, -1)`; `reshape`/`view` to the swapped shape only "
                    "relabels the same sequence of numbers.",
                    lambda f, a, k, i=i: f(*[x._base.reshape(x.shape) if j == i and x._base is not None else x
                                             for j, x in enumerate(a)], **k))
        for i in tensors:
            base = getattr(args[i], "_base", None)
            if base is not None and _operand(i, operand_names).endswith("ᵀ"):
                for d0, d1 in itertools.combinations(range(max(base.dim(), 4)), 2):
                    if (d0, d1) != (base.dim() - 2, base.dim() - 1):
                        add(f"{_operand(i, operand_names)[:-1]} is transposed on dims ({d0}, {d1}), not on its last two "
                            "(written for one number of dims)",
                            "transpose the last two dims, `.transpose(-2, -1)`: it works with or without batch and "
                            "head dims in front.",
                            lambda f, a, k, i=i, d0=d0, d1=d1: f(*[x._base.transpose(d0, d1) if j == i else x
                                                                  for j, x in enumerate(a)], **k))
        add(f"the two operands are multiplied in the other order ({_operand(1, operand_names)} @ "
            f"{_operand(0, operand_names)})",
            "a matrix product does not commute: write the operands in the chapter's order.",
            lambda f, a, k: f(a[1], a[0], **k))
    if fn in _ADD or fn in _SUB:
        sign = "+" if fn in _ADD else "-"
        for i in range(2):
            add(f"the term {_operand(i, operand_names)} is left out",
                f"add the term {_operand(i, operand_names)}: the step is "
                f"{_operand(0, operand_names)} {sign} {_operand(1, operand_names)}.",
                lambda f, a, k, i=i: (a[1 - i] + 0 * a[i]) if isinstance(a[i], Tensor) else a[1 - i], rank=0)
        if fn in _ADD:
            add(f"{_operand(1, operand_names)} is subtracted where the step adds it",
                "add the two terms.", lambda f, a, k: a[0] - a[1])
        else:
            add(f"{_operand(1, operand_names)} is added where the step subtracts it",
                "subtract it.", lambda f, a, k: a[0] + a[1])
            add("the subtraction is the other way round (the second minus the first)",
                f"the step is {_operand(0, operand_names)} - {_operand(1, operand_names)}.", lambda f, a, k: a[1] - a[0])
    if fn is torch.pow and isinstance(args[0], (int, float)) and not isinstance(args[0], bool):
        for base, label in ((math.e, "e (`exp`)"), (10.0, "10"), (2.0, "2")):
            if not math.isclose(base, float(args[0])):
                add(f"the base is {label}, not {_fmt(float(args[0]))}", f"raise {_fmt(float(args[0]))} to the power.",
                    lambda f, a, k, base=base: f(base, *a[1:], **k))
    if fn in _UNARY:
        for other_fn, other_name in _UNARY.items():
            if other_fn is not fn:
                add(f"`{other_name}` where the step takes `{_UNARY[fn]}`", f"step '{name}' takes `{_UNARY[fn]}`.",
                    lambda f, a, k, other_fn=other_fn: other_fn(*a, **k))
    if (fn in _ADD or fn in _SUB) and isinstance(args[1], (int, float)) and not isinstance(args[1], bool) and args[1]:
        c, verb = float(args[1]), "adds" if fn in _ADD else "subtracts"
        for v, label in ((c * c, f"{_fmt(c)}²"), (math.sqrt(abs(c)), f"√{_fmt(c)}"),
                         *((z.value, z.label) for z in _named_sizes(call, info, numbers) if not math.isclose(z.value, c))):
            add(f"it {verb} {label} instead of {_fmt(c)}", f"the step {verb} {_fmt(c)}.",
                lambda f, a, k, v=v: f(a[0], v, **k))
    if fn in _MUL or fn in _DIV:
        verb, other = ("multiplies by", "divided by") if fn in _MUL else ("divides by", "multiplied by")
        factor = _operand(1, operand_names)
        add(f"{factor} is {'added' if fn in _MUL else 'subtracted'} where the step {verb} it",
            f"the step {verb} {factor}.", lambda f, a, k: a[0] + a[1] if fn in _MUL else a[0] - a[1])
        add(f"the {'factor' if fn in _MUL else 'divisor'} {factor} is left out",
            f"the step {verb} {factor}: put it back.",
            lambda f, a, k: a[0] * (1 + 0 * a[1]) if isinstance(a[1], Tensor) else a[0], rank=0)
        if fn in _DIV:
            add(f"the division is the other way round ({factor} over {_operand(0, operand_names)})",
                f"the step divides {_operand(0, operand_names)} by {factor}.", lambda f, a, k: f(a[1], a[0], **k))
            add("an integer (floor) division where the step divides exactly", "divide with `/` (true division), "
                "not `//`, and compute in floating point.", lambda f, a, k: torch.div(
                    torch.as_tensor(a[0]), torch.as_tensor(a[1]), rounding_mode="floor"))
        add(f"{other} {factor} where the step {verb} it",
            f"the step {verb} {factor}, not the other way round.",
            lambda f, a, k: a[0] / a[1] if fn in _MUL else a[0] * a[1])
        if isinstance(args[1], (int, float)) and not isinstance(args[1], bool):
            c = float(args[1])
            right = next((z.label for z in _named_sizes(call, info, numbers) if math.isclose(z.value, c, rel_tol=1e-6)), _fmt(c))
            for size in _named_sizes(call, info, numbers):
                if not math.isclose(size.value, c, rel_tol=1e-6):
                    add(f"it {verb} {size.label} instead of {right}", f"the step {verb} {right}.",
                        lambda f, a, k, size=size: f(a[0], size.resolve(a, _info()), **k))
            for v, label in ((c * c, f"{right}²"), (math.sqrt(abs(c)), f"√({right})")):
                add(f"it {verb} {label} instead of {right}", f"the step {verb} {right}.",
                    lambda f, a, k, v=v: f(a[0], v, **k))
    if fname in ("tril", "triu"):
        other_fn = torch.triu if fname == "tril" else torch.tril
        add(f"{'triu' if fname == 'tril' else 'tril'} where the step takes {fname} (the other triangle)",
            f"keep the {'lower' if fname == 'tril' else 'upper'} triangle: `torch.{fname}`.",
            lambda f, a, k: other_fn(*a, **k))
    # -- integer arguments: one more or one less (positions, offsets, diagonals, windows), another integer of
    # the case, the sum or difference of two, a number written in the code
    for where, value in [*((key, v) for key, v in kwargs.items() if key != "dim"),
                         *((i, v) for i, v in enumerate(args) if i > 0 and fn not in _MUL | _DIV)]:
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        known = [k for k, v in integers.items() if v == value]
        label = f"`{where}`" if isinstance(where, str) else f"`{known[0]}`" if known else f"the number {value}"

        def put(new: Callable[[int], int], where: object = where) -> Callable[[Callable[..., object], tuple, dict], object]:
            """A change setting the integer at ``where`` to ``new(its value on the case being run)``."""
            if isinstance(where, str):
                return lambda f, a, kw: f(*a, **{**kw, where: new(kw[where])})
            return lambda f, a, kw: f(*[new(x) if j == where else x for j, x in enumerate(a)], **kw)

        for delta in (1, -1):
            add(f"{label} is {value + delta} where the step uses {value} (one {'more' if delta > 0 else 'less'})",
                f"check the off-by-one: {label} = {value} here.", put(lambda x, delta=delta: x + delta))
        for other, v in integers.items():
            if other in known:
                continue
            if v != value:
                add(f"{label} is replaced by `{other}` ({v})", f"use {label} ({value}) here, not `{other}`.",
                    put(lambda x, other=other: _integer(other)), rank=2)
            for total, sign in ((value + v, 1), (value - v, -1)):
                add(f"{label} {'+' if sign > 0 else '-'} `{other}` ({total}) is used where the step uses {label} "
                    f"({value})", f"use {label} alone here: {value}.",
                    put(lambda x, other=other, sign=sign: x + sign * _integer(other)), rank=2)
        for constant in range(0, 9):
            if constant != value and constant not in integers.values():
                add(f"{label} is {constant} here, where this case has {value} (a fixed number, or the size of another "
                    "tensor?)",
                    f"use {label}, not a fixed number: the cases vary it.", put(lambda x, constant=constant: constant),
                    rank=2)
    # -- an operand replaced by another argument of the same shape (a copy-paste slip), also inside a list
    if args and isinstance(args[0], (tuple, list)):
        by_id = {id(v): k for k, v in named.items() if isinstance(v, Tensor)}
        for i, a in enumerate(args[0]):
            if isinstance(a, Tensor) and id(a) in by_id:
                for other, value in named.items():
                    if (isinstance(value, Tensor) and other != by_id[id(a)] and value.shape == a.shape
                            and value.dtype == a.dtype):
                        add(f"`{other}` is used where the step uses `{by_id[id(a)]}`",
                            f"step '{name}' takes `{by_id[id(a)]}`, not `{other}`: a copy-paste slip?",
                            lambda f, a_, k, i=i, other=other: f(type(a_[0])(_argument(other) if j == i else x
                                                                            for j, x in enumerate(a_[0])), *a_[1:], **k))
    for i, a in enumerate(args):
        this = operand_names.get(i, "")
        if isinstance(a, Tensor) and this.startswith("`") and not this.endswith("ᵀ"):
            for other, value in named.items():
                if (isinstance(value, Tensor) and f"`{other}`" != this and value.shape == a.shape
                        and value.dtype == a.dtype):
                    add(f"`{other}` is used where the step uses {this}",
                        f"step '{name}' takes {this}, not `{other}`: a copy-paste slip?",
                        lambda f, a_, k, i=i, other=other: f(*[_argument(other) if j == i else x
                                                               for j, x in enumerate(a_)], **k))
    # -- another dim (of the first tensor operand; of the stacked result for torch.stack)
    if first is None and args and isinstance(args[0], (tuple, list)) and args[0] and isinstance(args[0][0], Tensor):
        first = args[0][0] if fn is not torch.stack else out
    if isinstance(kwargs.get("dim"), int) and first is not None:
        d = kwargs["dim"]
        n = first.dim()
        for other in range(-n, 0):
            if other != (d - n if d >= 0 else d) and first.shape[other] > 1:
                add(f"it is taken over {_axis(call, other)} instead of {_axis(call, d)}",
                    f"take step '{name}' over {_axis(call, d)}: `dim={d if d < 0 else d - n}`.", _with(fn, dim=other))
    if isinstance(kwargs.get("dim"), int):
        add("no `dim=`: it runs over the whole tensor, flattened", f"give step '{name}' its dim: `dim={kwargs['dim']}`.",
            lambda f, a, k: f(*a, **{key: v for key, v in k.items() if key != "dim"}))
    # -- an operand of an element-wise step that lost a dim of size 1 (no keepdim, no unsqueeze): it lines up with
    # the wrong axis, or does not broadcast
    if fn in _ADD | _SUB | _MUL | _DIV or fn in _COMPARE or fname in ("masked_fill", "where"):
        for i in tensors:
            x = args[i]
            for d in range(-x.dim() + 1, 0):  # a leading 1 changes nothing
                if x.shape[d] == 1:
                    add(f"{_operand(i, operand_names)} has lost its dim of size 1 (dim {d}): a `keepdim=True` or an "
                        f"`unsqueeze({d})` is missing, so it lines up with the wrong axis",
                        f"keep that dim: `keepdim=True` where it was reduced, or `.unsqueeze({d})`, so that it broadcasts "
                        "along the axis it belongs to.",
                        lambda f, a, k, i=i, d=d: f(*[x.squeeze(d) if j == i else x for j, x in enumerate(a)], **k))
    # -- any step
    if isinstance(out, Tensor) and out.dtype == torch.bool:
        add("its result is inverted (True where it should be False)", f"negate step '{name}' (`~`).",
            lambda f, a, k: ~f(*a, **k), generic=True)
        if out.dim() >= 2 and out.shape[-1] == out.shape[-2]:
            add("its result is transposed in its last two dims (rows and columns swapped)",
                "do not transpose it: rows are queries, columns keys.", lambda f, a, k: f(*a, **k).transpose(-2, -1),
                generic=True)
        for d in range(-out.dim(), 0):
            if out.shape[d] > 2:
                for k_ in (1, -1):
                    add(f"its result is shifted by one along dim {d}: entry t holds the step's entry "
                        f"t {'-' if k_ > 0 else '+'} 1",
                        "check the indices of this step: one off.",
                        lambda f, a, k, d=d, k_=k_: _shift(f(*a, **k), k_, d), generic=True)
    if isinstance(out, Tensor) and out.is_floating_point():
        add("it is applied twice", f"apply step '{name}' once.",
            lambda f, a, k: f(f(*a, **k), *a[1:], **k), generic=True)
        add("its result has the opposite sign", "check the sign of this step.", lambda f, a, k: -f(*a, **k), generic=True)
        add("its result is put through exp()", "leave out the exp.", lambda f, a, k: torch.exp(f(*a, **k)), generic=True)
        add("its result is put through log()", "leave out the log.", lambda f, a, k: torch.log(f(*a, **k)), generic=True)
        for d in range(-out.dim(), 0):
            if out.dim() >= 2 and out.shape[d] > 1:
                add(f"it is computed for the first entry along dim {d} only and used for all of them",
                    f"compute step '{name}' for every entry along dim {d} (no `[0]`).",
                    lambda f, a, k, d=d: f(*a, **k).narrow(d, 0, 1).expand_as(f(*a, **k)).clone(), generic=True)
        if out.dim() >= 2 and out.shape[-1] == out.shape[-2]:
            add("its result is transposed in its last two dims", "do not transpose the result.",
                lambda f, a, k: f(*a, **k).transpose(-2, -1), generic=True)
        for d in range(-out.dim(), 0):
            if out.shape[d] > 2:
                for k_ in (1, -1):
                    add(f"its result is shifted by one along dim {d}: entry t holds the step's entry "
                        f"t {'-' if k_ > 0 else '+'} 1",
                        "check the indices of this step: one off.", lambda f, a, k, d=d, k_=k_: _shift(f(*a, **k), k_, d), generic=True)
        if fn not in _MUL | _DIV:
            for size in _named_sizes(call, info, numbers):
                if size.value != 1.0:
                    add(f"its result is multiplied by {size.label}", f"leave out that factor in step '{name}'.",
                        lambda f, a, k, size=size: f(*a, **k) * size.resolve(a, _info()), generic=True)
                    add(f"its result is divided by {size.label}", f"leave out that division in step '{name}'.",
                        lambda f, a, k, size=size: f(*a, **k) / size.resolve(a, _info()), generic=True)
    return found


def _shift(x: Tensor, k: int, d: int) -> Tensor:
    """``x`` shifted by ``k`` along ``d``, the entries that come in set to 0."""
    rolled = x.roll(k, d)
    index = [slice(None)] * x.dim()
    index[d] = slice(0, k) if k > 0 else slice(k, None)
    rolled[tuple(index)] = False if x.dtype == torch.bool else 0
    return rolled


# -- the search ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """The change(s) that turn the reference into the learner's result, and on how many cases they do."""

    changes: tuple[Change, ...]
    explained: int  # cases whose learner result the change reproduces (the failing one included)
    cases: int  # cases compared
    #: Another change, in other steps, that explains the same cases: both are named (the cases cannot tell them apart).
    alternative: Found | None = None

    @property
    def sure(self) -> bool:
        return self.explained == self.cases

    def says(self) -> str:
        """The first line's words: "at step 'softmax over the keys': it is taken over ..."."""
        steps = " and ".join(f"'{c.step}'" for c in self.changes)
        what = "; and ".join(c.says if len(self.changes) == 1 else f"'{c.step}': {c.says}" for c in self.changes)
        head = f"at step{'s' if len(self.changes) > 1 else ''} {steps}: {what}"
        if self.alternative is not None:
            head += f" (or, with the same result on these cases, {self.alternative.says()})"
        if self.sure:
            return head
        return f"probably {head} (this explains {self.explained} of the {self.cases} cases compared)"

    def fix(self) -> str:
        return " ".join(f"Step '{c.step}': {c.fix}" for c in self.changes)


def _operand_names(calls: Sequence[_Call], args: Mapping[str, object]) -> dict[str, dict[int, str]]:
    """For each step, names of its operands: the check's argument names, or the step that produced them."""
    by_id = {id(v): f"`{k}`" for k, v in args.items() if isinstance(v, Tensor)}
    names: dict[str, dict[int, str]] = {}
    for call in calls:
        if call.name not in names:
            known = {}
            for i, a in enumerate(call.args):
                base = getattr(a, "_base", None) if isinstance(a, Tensor) else None
                if id(a) in by_id:
                    known[i] = by_id[id(a)]
                elif base is not None and id(base) in by_id and a.dim() >= 2 and base.dim() >= 2 and a.shape == (
                        *base.shape[:-2], base.shape[-1], base.shape[-2]):
                    known[i] = f"{by_id[id(base)]}ᵀ"
                elif isinstance(a, (int, float)) and not isinstance(a, bool):
                    known[i] = _fmt(float(a))
            names[call.name] = known
        if isinstance(call.out, Tensor):
            by_id.setdefault(id(call.out), f"'{call.name}'")
    return names


def _same(got: object, wrong: object, tol: float) -> bool:
    """``got`` equals ``wrong`` item by item, NaN only where the other has NaN (stricter than the judge's
    comparison, where an empty row's NaN may stand for 0: a change that turns everything into NaN names nothing)."""
    if isinstance(wrong, (tuple, list)):
        return (isinstance(got, (tuple, list)) and len(got) == len(wrong)
                and all(_same(g, w, tol) for g, w in zip(got, wrong, strict=True)))
    if isinstance(wrong, Tensor):
        if not isinstance(got, Tensor) or got.shape != wrong.shape or got.dtype.is_complex or wrong.dtype.is_complex:
            return False
        if wrong.dtype == torch.bool or got.dtype == torch.bool:
            return got.dtype == wrong.dtype and torch.equal(got.cpu(), wrong.cpu())
        g, w = got.detach().double().cpu(), wrong.detach().double().cpu()
        return bool(torch.allclose(g, w, rtol=tol, atol=tol, equal_nan=True))
    if isinstance(wrong, (int, float)) and not isinstance(wrong, bool):
        return (isinstance(got, (int, float, Tensor)) and not isinstance(got, bool)
                and math.isclose(float(got), float(wrong), rel_tol=tol, abs_tol=tol))
    return False


def search(reference: Callable[..., object], case: object, got: object, expected: object, tol: float,
           others: Sequence[tuple[object, Callable[[], object]]] = (), seconds: float = SEARCH_SECONDS) -> Found | None:
    """The change(s) to the reference's steps that give the learner's ``got`` on ``case``, or None.

    ``case`` has ``args``, ``kwargs`` and ``info`` (a framework ``Case``); ``expected`` is the right result
    there. ``got`` may be the exception the learner's code raised: a change matches it when the changed
    reference raises the same error, word for word (single changes only: an error stops at its first cause). ``others``: ``(other case, its learner result or a
    function computing it)``, against which a matching change is tried too (a case the change leaves
    unchanged counts as explained when the learner got it right). Returns None when the reference has no
    steps, or no change matches in ``seconds``.
    """
    with one_cpu_thread():  # tiny tensors: one thread is as fast, and does not stall on a busy machine
        return _search(reference, case, got, expected, tol, others, time.perf_counter() + seconds)


def _search(reference: Callable[..., object], case: object, got: object, expected: object, tol: float,
            others: Sequence[tuple[object, Callable[[], object]]], deadline: float) -> Found | None:
    try:
        result, calls, args = record(reference, case.args, case.kwargs)
    except Exception:
        return None
    if not calls or not _same(result, expected, max(tol, 1e-4)):
        return None  # no steps, or the stepped reference is not the check's reference on this case
    names = _operand_names(calls, args)
    firsts: dict[str, _Call] = {}
    for call in calls:
        firsts.setdefault(call.name, call)
    numbers = {c.name: float(c.out) for c in calls if isinstance(c.out, (int, float)) and not isinstance(c.out, bool)}
    catalogue = [c for call in firsts.values() for c in changes(call, case.info, names[call.name], args, numbers)]

    def reproduces(changed: Mapping[str, Change]) -> bool:
        try:
            wrong = _run(reference, case.args, case.kwargs, changed, case.info)
        except Exception as error:  # the same error as the learner's, word for word (sizes included)
            return isinstance(got, BaseException) and type(error) is type(got) and str(error) == str(got)
        return _same(got, wrong, tol) and not _same(expected, wrong, tol)

    matched: list[tuple[Change, ...]] = []
    for change in catalogue:
        if time.perf_counter() > deadline:
            break
        if reproduces({change.step: change}):
            matched.append((change,))
    if not matched and not isinstance(got, BaseException):  # two changes in two steps, the simplest pairs first
        specific = [c for c in catalogue if not c.generic]
        pairs = sorted(((ca, cb) for i, ca in enumerate(specific) for cb in specific[i + 1:] if ca.step != cb.step),
                       key=lambda pair: pair[0].rank + pair[1].rank)
        for ca, cb in pairs[:MAX_PAIRS]:
            if time.perf_counter() > deadline:
                break
            if reproduces({ca.step: ca, cb.step: cb}):
                matched.append((ca, cb))
                if len(matched) == 3:
                    break
    if not matched:
        return None
    # A step's own change before a factor or a shift; something left out before a replacement.
    matched.sort(key=lambda combo: (sum(c.generic for c in combo), sum(c.rank for c in combo)))
    founds: list[Found] = []
    for combo in matched[:12]:
        explained, compared = 1, 1
        for other, learner in others:
            try:
                right = learner() if callable(learner) else learner  # None: the learner's code raised there
            except Exception:
                right = None
            try:
                wrong = _run(reference, other.args, other.kwargs, {c.step: c for c in combo}, other.info)
            except Exception:  # the change cannot run there: it explains the case when the learner's code raised too
                wrong = None
            compared += 1
            explained += (right is None and wrong is None) or (
                right is not None and wrong is not None and _same(right, wrong, max(tol, 1e-4)))
        founds.append(Found(combo, explained, compared))
    best = max(founds, key=lambda f: f.explained)  # the first of the most explaining
    if not best.sure and best.explained < max(2, (best.cases + 1) // 2):
        return None  # a change that explains one case of many is a coincidence, not a diagnosis
    steps = {c.step for c in best.changes}
    other = next((f for f in founds if not isinstance(got, BaseException)  # an error: its first cause is named
                  and f.explained == best.explained and not steps & {c.step for c in f.changes}
                  and sum(c.generic for c in f.changes) == sum(c.generic for c in best.changes)), None)
    return dataclasses.replace(best, alternative=other) if other is not None else best


# -- a learner's error read against the steps ---------------------------------------------------------------

_PRODUCT = (r"mat1 and mat2 shapes cannot be multiplied \((?P<a>\d+)x(?P<b>\d+) and (?P<c>\d+)x(?P<d>\d+)\)",
            r"Expected size for first two dimensions of batch2 tensor to be: \[(?P<e>\d+), (?P<b>\d+)\] but got: "
            r"\[(?P<e2>\d+), (?P<c>\d+)\]")


def explain_error(reference: Callable[..., object], case: object, error: BaseException) -> str | None:
    """What a learner's shape error in a matrix product, read against the reference's steps.

    The product's operands as the error reports them are compared with each product step of the reference on
    the same case: an operand whose last two dims are the step's operand's swapped is named ("`key` is used
    without its transpose"), with the step. None when no product step explains the shapes.
    """
    import re

    text = str(error)
    match = next((m for m in (re.search(p, text) for p in _PRODUCT) if m), None)
    if match is None:
        return None
    try:
        _, calls, args = record(reference, case.args, case.kwargs)
    except Exception:
        return None
    names = _operand_names(calls, args)
    inner_a, inner_b = int(match.group("b")), int(match.group("c"))  # A's columns, B's rows as the learner had them
    for call in calls:
        if call.fn not in _MATMUL or len(call.args) != 2 or not all(isinstance(a, Tensor) for a in call.args):
            continue
        a, b = call.args
        if a.dim() < 2 or b.dim() < 2:
            continue
        k = a.shape[-1]  # the dim the step's product runs over
        for i, operand, inner in ((1, b, inner_b), (0, a, inner_a)):
            other = a.shape[-1] if i == 1 else b.shape[-2]
            if inner != other and inner == (operand.shape[-1] if i == 1 else operand.shape[-2]) and inner != k:
                name = _operand(i, names[call.name])
                says = (f"{name[:-1]} is used without its transpose" if name.endswith("ᵀ")
                        else f"{name} is transposed in its last two dims")
                shape = tuple(operand.shape[-2:])
                return (f"at step '{call.name}': {says}: the product runs over {k} entries, so that operand must be "
                        f"{shape} in its last two dims")
    return None
