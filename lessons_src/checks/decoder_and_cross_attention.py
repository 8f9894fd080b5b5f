"""Check for exercise 8 (chapter "Decoder blocks and cross-attention"): the two attentions of a decoder layer.

The learner writes ``decoder_attention(x, memory, source_lengths, self_attn, cross_attn)``, which
returns ``(self_out, cross_out)``: causal self-attention over the decoder's vectors ``x`` and
cross-attention from ``x`` to the encoder's ``memory``, with source padding hidden. Both are
compared with the course's ``MultiHeadAttention`` called the right way. The modules handed to the
learner record how they were called, so when the answer is wrong the check names the mistake from
the calls themselves: queries taken from the memory, keys and values from the decoder, a causal mask
on cross-attention, the padding mask on the wrong axis or inverted or missing, no causal mask in
self-attention, ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .._validate import broadcast_shape
from ..device import one_cpu_thread
from ..masks import causal_mask, padding_mask
from ..multihead import MultiHeadAttention
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult, close, is_device_error, learner_error, shape_of
from ._steps import step

__all__ = ["check_decoder_attention"]

NAME = "check_decoder_attention"
D_MODEL, NUM_HEADS = 8, 2
FIX_SELF = "self-attention reads only the decoder and is causal: `self_attn(x, x, x, causal_mask(Lt))`."
FIX_CROSS = ("cross-attention takes its queries from the decoder and its keys and values from the memory, and "
             "hides only the source padding: `cross_attn(x, memory, memory, padding_mask(source_lengths, Ls)"
             "[:, None, None, :])`.")


@dataclass(frozen=True)
class _Case:
    batch: int
    target_len: int
    source_len: int
    source_lengths: tuple[int, ...]
    seed: int

    @property
    def description(self) -> str:
        return (f"B={self.batch}, Lt={self.target_len}, Ls={self.source_len}, "
                f"source_lengths={list(self.source_lengths)}")


def _cases() -> list[_Case]:
    # Lt == Ls first, so that a mask on the wrong axis still broadcasts and can be named from its values.
    # In case 2 the longest source (5) is shorter than Ls = 6: a padding mask built without max_len
    # has 5 columns and is caught; B and the heads' count differ from case to case.
    return [
        _Case(2, 5, 5, (5, 3), seed=1),
        _Case(3, 4, 6, (5, 2, 4), seed=2),
        _Case(1, 6, 3, (3,), seed=3),
    ]


class _Recording(MultiHeadAttention):
    """A MultiHeadAttention that remembers the arguments of every call (for the diagnosis)."""

    def __init__(self, label: str) -> None:
        super().__init__(D_MODEL, NUM_HEADS)
        self.label = label
        self.calls: list[dict[str, object]] = []

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        self.calls.append({"query": query, "key": key, "value": value, "mask": mask})
        return super().forward(query, key, value, mask)


@dataclass
class _Setup:
    case: _Case
    x: Tensor
    memory: Tensor
    self_attn: _Recording
    cross_attn: _Recording
    self_mask: Tensor = field(init=False)
    memory_mask: Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.self_mask = causal_mask(self.case.target_len)  # (Lt, Lt)
        lengths = list(self.case.source_lengths)
        self.memory_mask = padding_mask(lengths, max_len=self.case.source_len)[:, None, None, :]  # (B, 1, 1, Ls)


def _setup(case: _Case) -> _Setup:
    g = torch.Generator().manual_seed(100 + case.seed)
    x = torch.randn(case.batch, case.target_len, D_MODEL, generator=g)  # (B, Lt, D)
    memory = torch.randn(case.batch, case.source_len, D_MODEL, generator=g)  # (B, Ls, D)
    with torch.random.fork_rng(devices=[]):  # the modules' init must not move the learner's RNG
        torch.manual_seed(case.seed)
        self_attn, cross_attn = _Recording("self_attn").eval(), _Recording("cross_attn").eval()
    return _Setup(case, x, memory, self_attn, cross_attn)


def _effective(mask: object, shape: tuple[int, ...]) -> Tensor | None:
    """The boolean mask broadcast to ``shape``; None where it is not a bool tensor that broadcasts."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        return None
    if broadcast_shape(tuple(mask.shape), shape) != shape:
        return None
    return mask.expand(shape)


def _same(a: object, b: Tensor) -> bool:
    return isinstance(a, Tensor) and a.shape == b.shape and torch.equal(a.detach().to(b.dtype), b)


def _describe_source(t: object, s: _Setup, self_out: Tensor) -> str:
    if _same(t, s.x):
        return "x"
    if _same(t, s.memory):
        return "memory"
    if isinstance(t, Tensor) and t.shape == self_out.shape and torch.allclose(t.detach().float(), self_out, atol=1e-5):
        return "self_out"
    return "other"


def _self_mask_mistake(mask: object, s: _Setup) -> tuple[str, str] | None:
    B, Lt = s.case.batch, s.case.target_len
    shape = (B, NUM_HEADS, Lt, Lt)
    causal = s.self_mask
    if mask is None:
        return ("self-attention has no causal mask: each decoder position can read the positions after it, "
                "which at generation time do not exist yet",
                "pass the causal mask to self-attention: `self_attn(x, x, x, causal_mask(Lt))`, True on and "
                "below the diagonal.")
    if isinstance(mask, Tensor) and mask.dtype != torch.bool:
        return (f"self-attention's mask has dtype {mask.dtype}, expected torch.bool (True = may attend)",
                "use the bool mask itself: `causal_mask(Lt)`; convert a 0/1 mask with `.bool()`, an additive "
                "0/-inf mask with `mask == 0`.")
    effective = _effective(mask, shape)
    if effective is None:
        return (f"self-attention's mask of shape {shape_of(mask)} does not fit its scores (B, H, Lt, Lt) = {shape}",
                "self-attention needs the causal mask `causal_mask(Lt)`, shape (Lt, Lt); the memory's padding mask "
                "belongs to cross-attention.")
    candidates = [
        (causal.expand(shape), None),
        (torch.ones(shape, dtype=torch.bool), (
            "self-attention's mask allows everything: there is no causal mask",
            "use `causal_mask(Lt)` (True on and below the diagonal) as self-attention's mask.")),
        (causal.T.expand(shape), (
            "self-attention's causal mask is transposed: position t sees positions t..Lt-1, the future, "
            "instead of 0..t",
            "keep the lower triangle: `torch.ones(Lt, Lt, dtype=torch.bool).tril()` or `causal_mask(Lt)`.")),
        ((~causal).expand(shape), (
            "self-attention's causal mask is inverted (True where attending is forbidden, PyTorch's convention)",
            "the course's masks mean True = may attend: use `causal_mask(Lt)` itself, not its negation.")),
        (causal.tril(diagonal=-1).expand(shape), (
            "self-attention's causal mask hides the diagonal: position t cannot see itself (and position 0 "
            "sees nothing)",
            "keep the diagonal: `.tril()` (diagonal=0), so position t sees 0..t.")),
    ]
    for candidate, mistake in candidates:
        if torch.equal(effective, candidate):
            return mistake
    return ("self-attention's mask hides the wrong positions",
            "self-attention's mask is just the causal mask `causal_mask(Lt)`: every decoder position is a real "
            "token here, so there is no padding to hide.")


def _cross_mask_mistake(mask: object, s: _Setup) -> tuple[str, str] | None:
    B, Lt, Ls = s.case.batch, s.case.target_len, s.case.source_len
    shape = (B, NUM_HEADS, Lt, Ls)
    padding = s.memory_mask.expand(shape)
    if mask is None:
        return ("the memory's padding is not masked: decoder positions attend to padding tokens of the source",
                "pass the padding mask to cross-attention: `padding_mask(source_lengths, Ls)[:, None, None, :]`, "
                "shape (B, 1, 1, Ls).")
    if isinstance(mask, Tensor) and mask.dtype != torch.bool:
        return (f"the memory's padding mask has dtype {mask.dtype}, expected torch.bool (True = may attend)",
                "use the bool mask itself: `padding_mask(source_lengths, Ls)[:, None, None, :]`; convert a 0/1 mask "
                "with `.bool()`, an additive 0/-inf mask with `mask == 0`.")
    effective = _effective(mask, shape)
    longest = max(s.case.source_lengths)
    if effective is None and isinstance(mask, Tensor) and mask.dim() >= 1 and mask.size(-1) == longest < Ls:
        return (f"the memory's padding mask has {longest} columns, max(source_lengths), not Ls = {Ls}: "
                "`padding_mask(source_lengths)` without `max_len`",
                "the mask must cover every source position, padding included: "
                "`padding_mask(source_lengths, max_len=memory.size(1))[:, None, None, :]`.")
    if effective is None:
        got = tuple(mask.shape) if isinstance(mask, Tensor) else None
        if got in {(Lt, Lt), (B, 1, Lt, Lt), (1, 1, Lt, Lt)}:
            return (f"a causal mask of shape {got} is applied to cross-attention, whose scores are (B, H, Lt, Ls) "
                    f"= {shape}",
                    "cross-attention needs no causal mask: the whole source is known before decoding starts. "
                    "Give it only the padding mask, shape (B, 1, 1, Ls).")
        if got == (B, Ls):
            return (f"the memory's padding mask has shape (B, Ls) = {got}, without the head and query axes",
                    "insert them: `padding_mask(source_lengths, Ls)[:, None, None, :]`, shape (B, 1, 1, Ls), "
                    "which broadcasts over heads and decoder positions.")
        if got in {(B, 1, Ls, 1), (B, Ls, 1)}:
            return (f"the memory's padding is applied on the wrong axis: shape {got} masks rows (queries), not "
                    "columns (keys)",
                    "padding hides source positions, which are the keys, the last axis: "
                    "`padding_mask(source_lengths, Ls)[:, None, None, :]`.")
        return (f"cross-attention's mask of shape {shape_of(mask)} does not fit its scores (B, H, Lt, Ls) = {shape}",
                "the memory mask has shape (B, 1, 1, Ls): `padding_mask(source_lengths, Ls)[:, None, None, :]`.")
    triangle = torch.ones(Lt, Ls, dtype=torch.bool).tril().expand(shape)  # a "causal" mask over the source
    rows = None
    if Lt == Ls:
        rows = s.memory_mask[:, :, 0, :, None].expand(shape)  # padding on the query axis
    candidates = [
        (padding, None),
        (padding & triangle, (
            "a causal mask is applied to cross-attention: decoder position t cannot see source positions after t",
            "cross-attention needs no causal mask: the whole source is known before decoding starts. Give it "
            "only the padding mask, (B, 1, 1, Ls).")),
        (triangle, (
            "cross-attention gets a causal mask instead of the padding mask: it hides source positions after t "
            "and shows the padding",
            "cross-attention's only mask is the source padding, (B, 1, 1, Ls); the causal mask belongs to "
            "self-attention.")),
        (torch.ones(shape, dtype=torch.bool), (
            "the memory's padding is not masked: decoder positions attend to padding tokens of the source",
            "pass `padding_mask(source_lengths, Ls)[:, None, None, :]` to cross-attention.")),
        (~padding, (
            "the memory's padding mask is inverted (True at padding, PyTorch's key_padding_mask convention)",
            "the course's masks mean True = may attend: True at the real source tokens, "
            "`padding_mask(source_lengths, Ls)`, not its negation.")),
    ]
    if rows is not None:
        candidates.append((rows, (
            "the memory's padding is applied on the wrong axis: it hides decoder positions (rows, queries) "
            "instead of source positions (columns, keys)",
            "padding hides keys, the last axis: `padding_mask(source_lengths, Ls)[:, None, None, :]`, shape "
            "(B, 1, 1, Ls), not (B, 1, Ls, 1).")))
    for candidate, mistake in candidates:
        if torch.equal(effective, candidate):
            return mistake
    return ("cross-attention's mask hides the wrong positions",
            "hide exactly the source padding: True at the first source_lengths[b] positions of row b, shape "
            "(B, 1, 1, Ls): `padding_mask(source_lengths, Ls)[:, None, None, :]`.")


def _diagnose_calls(s: _Setup, expected_self: Tensor, partial: bool = False) -> tuple[str, str] | None:
    """Name the mistake from the recorded calls of the two modules, or None if they look right.

    ``partial``: the learner's function raised part-way, so a module may not have been called yet.
    """
    self_calls, cross_calls = s.self_attn.calls, s.cross_attn.calls
    if not self_calls and not cross_calls:
        return None  # the learner did not use the modules: nothing to read
    if not partial and (len(self_calls) != 1 or len(cross_calls) != 1):
        if len(self_calls) == 2 and not cross_calls:
            return ("self_attn is called twice and cross_attn never: the cross-attention uses the self-attention's "
                    "weights", "call `cross_attn` for the cross-attention; the two sublayers have their own weights.")
        if len(cross_calls) == 2 and not self_calls:
            return ("cross_attn is called twice and self_attn never",
                    "call `self_attn` for the self-attention and `cross_attn` for the cross-attention.")
        return (f"self_attn was called {len(self_calls)} times and cross_attn {len(cross_calls)} times",
                "call each module once: self_attn for the causal self-attention, cross_attn for the cross-attention.")
    roles = ("query", "key", "value")
    self_call = self_calls[0] if self_calls else None
    cross_call = cross_calls[0] if cross_calls else None
    sources = {r: _describe_source(self_call[r], s, expected_self) for r in roles} if self_call else None
    cross_sources = {r: _describe_source(cross_call[r], s, expected_self) for r in roles} if cross_call else None

    if sources == {"query": "x", "key": "memory", "value": "memory"} and cross_sources is not None and all(
        cross_sources[r] == "x" for r in roles
    ):
        return ("the two modules are swapped: self_attn does the cross-attention and cross_attn the self-attention",
                "use `self_attn` for the causal self-attention and `cross_attn` for the attention over the memory.")
    if sources is not None and any(sources[r] != "x" for r in roles):
        if sources["key"] == "memory" or sources["value"] == "memory":
            return ("self-attention attends over the memory: its keys and values must come from the decoder (x)",
                    FIX_SELF)
        return (f"self-attention is called with query={sources['query']}, key={sources['key']}, "
                f"value={sources['value']}; all three are x", FIX_SELF)
    if cross_sources is not None:
        if cross_sources["query"] == "memory":
            return ("cross-attention's queries are taken from the encoder's memory instead of the decoder: "
                    "the output then has one row per source position",
                    "the decoder asks, the encoder answers: queries from x, keys and values from memory, "
                    "`cross_attn(x, memory, memory, mask)`.")
        if cross_sources["query"] == "self_out":
            return ("cross-attention's queries are self-attention's output; in this exercise both attentions read x",
                    "call `cross_attn(x, memory, memory, mask)`. (In a full decoder layer, cross-attention does "
                    "read the self-attention sublayer's output, after its residual and LayerNorm; here each "
                    "attention is checked on its own.)")
        if cross_sources["key"] == "x" and cross_sources["value"] == "x":
            return ("cross-attention's keys and values come from the decoder (x), not the memory: it is a second "
                    "self-attention and never reads the source", FIX_CROSS)
        if cross_sources["key"] != "memory" or cross_sources["value"] != "memory":
            return (f"cross-attention is called with key={cross_sources['key']} and value={cross_sources['value']}; "
                    "both must be the memory", FIX_CROSS)
    if self_call is not None:
        self_mistake = _self_mask_mistake(self_call["mask"], s)
        if self_mistake is not None:
            return self_mistake
    if cross_call is not None:
        return _cross_mask_mistake(cross_call["mask"], s)
    return None



@dataclass(frozen=True)
class _Raised:
    """What the guarded learner function returns when one of our modules raised inside it."""

    text: str


def _guard(fn: Callable[..., object]) -> Callable[..., object]:
    """``fn``, with a ValueError or RuntimeError raised inside one of our modules turned into a value,
    so the recorded calls can explain it (a wrong mask shape, usually). An error about devices (a mask
    made on the GPU for the modules on the CPU), or one raised before any module was called, is left
    to the framework, which names it."""

    def decoder_attention(x: Tensor, memory: Tensor, source_lengths: list[int], self_attn: _Recording,
                          cross_attn: _Recording) -> object:
        calls_before = len(self_attn.calls) + len(cross_attn.calls)
        try:
            return fn(x, memory, source_lengths, self_attn, cross_attn)
        except (ValueError, RuntimeError) as exc:
            if len(self_attn.calls) + len(cross_attn.calls) > calls_before and not is_device_error(str(exc)):
                return _Raised(learner_error(exc))
            raise

    return decoder_attention


def _from_calls(partial: bool) -> Callable[[Case, object], dict[str, str] | None]:
    """A predicate: the mistake read off how the learner called the two modules (what, fix)."""

    def predicate(case: Case, got: object) -> dict[str, str] | None:
        if partial != isinstance(got, _Raised):
            return None
        diagnosis = _diagnose_calls(case.info["setup"], case.info["expected_self"], partial=partial)
        if diagnosis is None:
            return None
        raised = f"; your function raised {got.text}" if isinstance(got, _Raised) else ""
        return {"what": diagnosis[0] + raised, "fix": diagnosis[1]}

    return predicate


def _named_only(predicate: Callable[[Case, object], object]) -> Callable[[Case, object], object]:
    """``predicate`` where it names the mask's mistake; its "hides the wrong positions" waits for the step search."""

    def named(case: Case, got: object) -> object:
        found = predicate(case, got)
        return found if found and "hides the wrong positions" not in found.get("what", "") else None

    return named


def _swapped(case: Case, got: object) -> bool:
    self_out, cross_out = case.info["expected_self"], case.info["expected_cross"]
    return (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, Tensor) for t in got)
            and got[0].shape == cross_out.shape and got[1].shape == self_out.shape
            and close(got[0], cross_out) and close(got[1], self_out))


MISTAKES = [
    Mistake("{what}", "{fix}", looks_like=_from_calls(partial=True), early=True),
    Mistake("your function raised {text}", "self-attention's mask must fit (B, H, Lt, Lt) and cross-attention's "
            "(B, H, Lt, Ls): the causal mask is (Lt, Lt), the memory's padding mask (B, 1, 1, Ls).",
            looks_like=lambda case, got: isinstance(got, _Raised) and {"text": got.text}, early=True),
    Mistake("an item of the result is a tuple", "the modules return (output, weights): keep the output, "
            "`self_out, _ = self_attn(...)`.", looks_like=lambda case, got: isinstance(got, (tuple, list))
            and any(isinstance(t, tuple) for t in got)),
    Mistake("self_out and cross_out are swapped", "return them in the order `self_out, cross_out`.",
            looks_like=_swapped),
    Mistake("{what}", "{fix}", looks_like=_named_only(_from_calls(partial=False))),
    Mistake("{what}", "{fix}", looks_like=_from_calls(partial=False), fallback=True),
    Mistake("self_out differs from the reference", FIX_SELF, looks_like=lambda case, got: isinstance(got, (tuple, list))
            and len(got) == 2 and isinstance(got[0], Tensor) and got[0].shape == case.info["expected_self"].shape
            and not close(got[0], case.info["expected_self"]), fallback=True),
    Mistake("cross_out differs from the reference", FIX_CROSS, looks_like=lambda case, got: isinstance(got, (tuple, list))
            and len(got) == 2 and isinstance(got[1], Tensor) and got[1].shape == case.info["expected_cross"].shape
            and not close(got[1], case.info["expected_cross"]), fallback=True),
]


def _attend(module: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor, mask: Tensor) -> Tensor:
    """The module's output, called without recording the call (the learner's modules record theirs)."""
    return MultiHeadAttention.forward(module, query, key, value, mask)[0]


def _reference(x: Tensor, memory: Tensor, source_lengths: list[int], self_attn: MultiHeadAttention,
               cross_attn: MultiHeadAttention) -> tuple[Tensor, Tensor]:
    """The two attentions called the right way, with the library's masks (what ``expected_of`` holds)."""
    memory_mask = padding_mask(list(source_lengths), max_len=memory.size(1))[:, None, None, :]  # (B, 1, 1, Ls)
    return _attend(self_attn, x, x, x, causal_mask(x.size(1))), _attend(cross_attn, x, memory, memory, memory_mask)


def _steps(x: Tensor, memory: Tensor, source_lengths: list[int], self_attn: MultiHeadAttention,
           cross_attn: MultiHeadAttention) -> tuple[Tensor, Tensor]:
    """:func:`_reference` in the chapter's words (``_steps.py`` searches small changes to each step)."""
    qk = ("query", "key")
    target = torch.ones(x.size(1), x.size(1), dtype=torch.bool)
    causal = step("causal mask: position t sees 0..t (the lower triangle)", torch.tril, target, diagonal=0, axes=qk)
    self_out = step("self-attention: queries, keys and values from x, causal mask", _attend, self_attn, x, x, x,
                    causal)
    positions = torch.arange(memory.size(1))[None, :]  # (1, Ls): the source positions, the keys
    real = step("the source's real tokens: position < source length", torch.lt, positions,
                torch.tensor(list(source_lengths))[:, None], axes=("batch", "key"))
    memory_mask = real[:, None, None, :]  # (B, 1, 1, Ls): the same keys for every head and decoder position
    cross_out = step("cross-attention: queries from x, keys and values from the memory, padding mask", _attend,
                     cross_attn, x, memory, memory, memory_mask)
    return self_out, cross_out


def _framework_case(case: _Case) -> Case:
    s = _setup(case)
    reference = _setup(case)  # untouched copies of the same modules for the expected outputs
    expected_self = reference.self_attn(s.x, s.x, s.x, s.self_mask)[0]  # (B, Lt, D)
    expected_cross = reference.cross_attn(s.x, s.memory, s.memory, s.memory_mask)[0]  # (B, Lt, D)
    args = {"x": s.x, "memory": s.memory, "source_lengths": list(case.source_lengths), "self_attn": s.self_attn,
            "cross_attn": s.cross_attn}
    return Case(case.description, args, info={"setup": s, "expected_self": expected_self,
                                              "expected_cross": expected_cross})


def check_decoder_attention(fn: Callable[..., object]) -> CheckResult:
    """Check a learner's ``decoder_attention(x, memory, source_lengths, self_attn, cross_attn)`` (exercise 8).

    It must return ``(self_out, cross_out)``, each ``(B, Lt, D)``: causal self-attention over ``x``,
    and cross-attention from ``x`` to ``memory`` with the source padding hidden. Three cases
    (Lt = Ls, Lt < Ls with the longest source shorter than Ls, Lt > Ls; each with padding) are
    compared with the reference calls of ``MultiHeadAttention``; a wrong answer is diagnosed from how
    the two modules were called. Built on ``_framework.py`` (the modules are handed over as they are,
    not copied, so that they can record their calls).
    """
    session = Session(NAME)
    if not callable(fn):
        return done(session.fail(f"expected a function, got {type(fn).__name__}",
                                 "pass the function itself, without calling it: "
                                 "`check_decoder_attention(decoder_attention)`."))
    with one_cpu_thread(), torch.no_grad():
        cases = [_framework_case(case) for case in _cases()]
        failure = run_check(session, _guard(fn), cases, None, ("self_out", "cross_out"), MISTAKES,
                            expected_of=lambda case: (case.info["expected_self"], case.info["expected_cross"]),
                            steps=_steps)
    if failure is not None:
        return done(failure)
    return done(passed(session, f"all {len(cases)} cases match (Lt = Ls, Lt < Ls, Lt > Ls, with source padding): "
                                "causal self-attention and padded cross-attention are wired right"))


def _stepped_cases() -> list[Case]:
    with torch.no_grad():
        return [_framework_case(case) for case in _cases()]


#: The reference written as named steps, with the cases it must equal the reference on (tests/test_checks_steps.py).
STEPPED = [(_stepped_cases, _reference, _steps)]
