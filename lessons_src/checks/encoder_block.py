"""Check for exercise 6 (chapter "The transformer encoder block"): a pre-LN encoder block and a pre-LN stack.

The learner writes ``pre_ln_block(x, attention, ff, norm1, norm2, mask=None)``, one pre-LN block
from its parts, and ``pre_ln_encoder(x, layers, norm, mask=None)``, a stack of such blocks
followed by the final LayerNorm. Both are compared with the course's ``EncoderBlock`` and
``Encoder`` built with ``norm_first=True``, sharing the same weights. When the answer is wrong,
the check rebuilds the usual mistakes (norms in the wrong place, a missing residual, a
feed-forward without its activation, a missing final LayerNorm, ...) and names the one that
matches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..device import one_cpu_thread
from ..encoder import Encoder, EncoderBlock
from ..masks import padding_mask
from ._framework import Case, Mistake, Session, done, passed, run_check
from ._result import CheckResult, close
from ._steps import step

__all__ = ["check_pre_ln_encoder"]

_NAME = "check_pre_ln_encoder"
_TOL = 1e-4  # float32 through a dozen matrix products; wrong answers differ by far more


@dataclass(frozen=True)
class _Case:
    description: str
    x: Tensor
    mask: Tensor | None
    num_layers: int  # 0: one block (pre_ln_block); otherwise a stack (pre_ln_encoder)
    d_model: int
    num_heads: int
    d_ff: int
    seed: int


def _cases() -> list[_Case]:
    g = torch.Generator().manual_seed(6)

    def inputs(*shape: int) -> Tensor:
        # Far from normalised (mean 0.5, std 2), so "norm(x)" and "x" differ clearly.
        return 2.0 * torch.randn(*shape, generator=g) + 0.5

    lengths = padding_mask([6, 4])[:, None, None, :]  # (B, 1, 1, L): True = may attend
    return [
        _Case("pre_ln_block, B=2, L=5, D=16, 4 heads, d_ff=32, no mask", inputs(2, 5, 16), None, 0, 16, 4, 32, 1),
        _Case("pre_ln_block, B=1, L=3, D=8, 2 heads, d_ff=24, no mask", inputs(1, 3, 8), None, 0, 8, 2, 24, 2),
        _Case(
            "pre_ln_block, B=2, L=6, D=16, 4 heads, d_ff=32, padding mask (2, 1, 1, 6): the second "
            "sequence has 4 real tokens",
            inputs(2, 6, 16), lengths, 0, 16, 4, 32, 3,
        ),
        _Case("pre_ln_encoder, 3 layers, B=2, L=5, D=16, 4 heads, d_ff=32, no mask", inputs(2, 5, 16), None, 3,
              16, 4, 32, 4),
        _Case(
            "pre_ln_encoder, 2 layers, B=2, L=6, D=16, 4 heads, d_ff=32, padding mask (2, 1, 1, 6)",
            inputs(2, 6, 16), lengths, 2, 16, 4, 32, 5,
        ),
    ]


def _randomise_norms(module: nn.Module, g: torch.Generator) -> None:
    """Gains and biases away from 1 and 0, so that norm1, norm2 and the final norm differ."""
    with torch.no_grad():
        for norm in (m for m in module.modules() if isinstance(m, nn.LayerNorm)):
            norm.weight.copy_(1.0 + 0.5 * torch.randn(norm.weight.shape, generator=g))
            norm.bias.copy_(0.5 * torch.randn(norm.bias.shape, generator=g))


def _reference(case: _Case) -> EncoderBlock | Encoder:
    """The pre-LN reference, with seeded weights, in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seed)
        if case.num_layers == 0:
            module: nn.Module = EncoderBlock(case.d_model, case.num_heads, case.d_ff, norm_first=True)
        else:
            module = Encoder(case.num_layers, case.d_model, case.num_heads, case.d_ff, norm_first=True)
    _randomise_norms(module, torch.Generator().manual_seed(100 + case.seed))
    return module.eval()


# -- known mistakes ------------------------------------------------------------------------------

# How one sublayer can be wired: (residual, where the norm goes). "ok" is x + S(norm(x)).
_WIRINGS: dict[str, tuple[Callable, str, str]] = {
    "ok": (lambda x, s, n: x + s(n(x)), "", ""),
    "post": (
        lambda x, s, n: n(x + s(x)),
        "the norm comes after the residual sum, `norm(x + sublayer(x))`: that is post-LN, not pre-LN",
        "in pre-LN the norm goes on the sublayer's input and the sum is left alone: `x = x + sublayer(norm(x))`.",
    ),
    "norm_sum": (
        lambda x, s, n: n(x + s(n(x))),
        "the residual sum is normalised as well, `norm(x + sublayer(norm(x)))`",
        "normalise only the sublayer's input; the residual sum stays un-normalised: `x = x + sublayer(norm(x))`.",
    ),
    "norm_output": (
        lambda x, s, n: x + n(s(x)),
        "the norm is applied to the sublayer's output, `x + norm(sublayer(x))`, instead of its input",
        "normalise what goes *into* the sublayer: `x = x + sublayer(norm(x))`.",
    ),
    "no_norm": (
        lambda x, s, n: x + s(x),
        "the LayerNorm is missing: the sublayer reads the raw x",
        "normalise the sublayer's input: `x = x + sublayer(norm(x))`.",
    ),
    "no_residual": (
        lambda x, s, n: s(n(x)),
        "the residual connection is missing: the sublayer's output replaces x instead of being added to it",
        "add the input back: `x = x + sublayer(norm(x))`, not `x = sublayer(norm(x))`.",
    ),
    "normed_residual": (
        lambda x, s, n: n(x) + s(n(x)),
        "the residual adds the normalised input, `norm(x) + sublayer(norm(x))`, instead of x itself",
        "keep the un-normalised x for the residual: `h = norm(x)`, then `x = x + sublayer(h)`.",
    ),
    "skipped": (
        lambda x, s, n: x,
        "nothing is computed: x passes through unchanged",
        "a pre-LN block has two sublayers, each `x = x + sublayer(norm(x))`: attention first, then the feed-forward.",
    ),
}


def _sublayers(case: _Case, block: EncoderBlock) -> dict[str, Callable[[Tensor], Tensor]]:
    """The attention and feed-forward sublayers, right and wrong, as functions of their input."""
    attn, ff = block.self_attn, block.ff
    mask = case.mask
    return {
        "attention": lambda h: attn(h, h, h, mask)[0],
        "ff": lambda h: ff.linear2(F.relu(ff.linear1(h))),
        # Wrong sublayers, wired correctly.
        "attention, mask ignored": lambda h: attn(h, h, h)[0],
        "attention, mask inverted": lambda h: attn(h, h, h, None if mask is None else ~mask)[0],
        "ff, no activation": lambda h: ff.linear2(ff.linear1(h)),
        "ff, GELU": lambda h: ff.linear2(F.gelu(ff.linear1(h))),
        "ff, ReLU after linear2": lambda h: F.relu(ff.linear2(ff.linear1(h))),
        "ff, ReLU after both": lambda h: F.relu(ff.linear2(F.relu(ff.linear1(h)))),
    }


_SUBLAYER_MISTAKES = {
    "attention, mask ignored": (
        "the mask is not passed to the attention",
        "call `attention(h, h, h, mask)`, so padded keys stay hidden.",
    ),
    "attention, mask inverted": (
        "the mask is inverted",
        "the course's masks mean True = may attend: pass `mask` as it is, not `~mask`.",
    ),
    "ff, no activation": (
        "the feed-forward has no activation: two linear layers in a row are just one linear map",
        "put a ReLU between them: `ff.linear2(torch.relu(ff.linear1(h)))`.",
    ),
    "ff, GELU": (
        "the feed-forward uses GELU, but this block's activation is ReLU",
        "use `torch.relu` (or simply call `ff(h)`), as `EncoderBlock(..., activation='relu')` does.",
    ),
    "ff, ReLU after linear2": (
        "the feed-forward's ReLU comes after linear2 instead of between the two linear layers",
        "the order is linear1, ReLU, linear2: `ff.linear2(torch.relu(ff.linear1(h)))`; a ReLU at the end would make "
        "every update of x non-negative.",
    ),
    "ff, ReLU after both": (
        "the feed-forward has a second ReLU after linear2",
        "only one ReLU, between the linear layers: `ff.linear2(torch.relu(ff.linear1(h)))`.",
    ),
}


def _block_candidates(case: _Case, block: EncoderBlock) -> list[tuple[Tensor, str, str]]:
    """Wrong blocks: (output, what is wrong, how to fix)."""
    x, s = case.x, _sublayers(case, block)
    n1, n2 = block.norm1, block.norm2
    out: list[tuple[Tensor, str, str]] = []

    # 1. Wiring mistakes, in one sublayer or both.
    for attn_key, (attn_wire, attn_what, attn_fix) in _WIRINGS.items():
        for ff_key, (ff_wire, ff_what, ff_fix) in _WIRINGS.items():
            if attn_key == ff_key == "ok":
                continue
            h = attn_wire(x, s["attention"], n1)
            y = ff_wire(h, s["ff"], n2)
            if attn_key == ff_key:
                what, fix = f"in both sublayers, {attn_what}", attn_fix
            elif ff_key == "ok":
                what, fix = f"in the attention sublayer, {attn_what}", attn_fix
            elif attn_key == "ok":
                what, fix = f"in the feed-forward sublayer, {ff_what}", ff_fix
            else:
                what = f"in the attention sublayer, {attn_what}; in the feed-forward sublayer, {ff_what}"
                fix = f"attention: {attn_fix} Feed-forward: {ff_fix}"
            out.append((y, what, fix))

    # 2. A wrong sublayer, wired correctly.
    for key, (what, fix) in _SUBLAYER_MISTAKES.items():
        attn_s = s[key] if key.startswith("attention") else s["attention"]
        ff_s = s[key] if key.startswith("ff") else s["ff"]
        h = x + attn_s(n1(x))
        out.append((h + ff_s(n2(h)), what, fix))

    # 3. Other slips.
    h = x + s["attention"](n2(x))
    out.append((h + s["ff"](n1(h)), "norm1 and norm2 are swapped",
                "norm1 goes before the attention, norm2 before the feed-forward."))
    h = x + s["attention"](n1(x))
    out.append((h + s["ff"](n1(h)), "norm1 is used before both sublayers",
                "each sublayer has its own LayerNorm: norm2 goes before the feed-forward."))
    h = x + block.self_attn(n1(x), x, x, case.mask)[0]
    out.append((h + s["ff"](n2(h)), "only the queries are normalised: keys and values come from the raw x",
                "self-attention takes the same normalised tensor three times: `attention(h, h, h, mask)` with `h = norm1(x)`."))
    h = x + s["ff"](n2(x))
    out.append((h + s["attention"](n1(h)), "the feed-forward sublayer runs before the attention sublayer",
                "attention first, then the feed-forward: `x = x + attention(h, h, h, mask)[0]` with `h = norm1(x)`, "
                "then `x = x + ff(norm2(x))`."))
    h = x + s["attention"](n1(x))
    out.append((h + s["ff"](n2(x)), "the feed-forward reads norm2 of the block's input, not of the sum after attention",
                "update x after the attention sublayer, then normalise *that*: `x = x + attention(...)`, "
                "then `x = x + ff(norm2(x))`."))
    return out


def _encoder_candidates(case: _Case, encoder: Encoder) -> list[tuple[Tensor, str, str]]:
    """Wrong stacks (built from correct blocks): (output, what is wrong, how to fix)."""
    x, mask, norm, layers = case.x, case.mask, encoder.norm, list(encoder.layers)
    out: list[tuple[Tensor, str, str]] = []

    def run(h: Tensor, blocks: list[EncoderBlock], m: Tensor | None = mask, between: bool = False) -> Tensor:
        for block in blocks:
            h = block(h, m)
            if between:
                h = norm(h)
        return h

    final = "apply `norm` once, after the last layer: `return norm(x)`."
    out.append((run(x, layers), "the final LayerNorm is missing (the last step of a pre-LN encoder)",
                "pre-LN blocks leave their output un-normalised, so a pre-LN stack ends with one more LayerNorm: "
                + final))
    out.append((run(x, layers, between=True), "the final norm is applied after every layer",
                "the blocks normalise their own inputs; " + final))
    out.append((run(norm(x), layers), "the final norm is applied to the input, before the layers", final))
    out.append((norm(norm(run(x, layers))), "the final norm is applied twice", final))
    out.append((norm(layers[-1](x, mask)), "every layer reads the original x, so only the last layer counts",
                "feed each layer's output to the next: `x = pre_ln_block(x, ...)` inside the loop."))
    out.append((norm(layers[0](x, mask)), "only the first layer runs (is the `return` inside the loop?)",
                "loop over all the layers, then apply the final norm after the loop."))
    out.append((layers[0](x, mask), "only the first layer runs, and the final LayerNorm is missing",
                "loop over all the layers, then apply the final norm after the loop: `return norm(x)`."))
    if len(layers) > 1:
        out.append((norm(run(x, [layers[0]] * len(layers))), "the first layer's parts are used for every layer",
                    "each layer has its own weights: call `pre_ln_block` with the parts of `layers[i]` inside the "
                    "loop (`for layer in layers:` ... `layer.attention`, `layer.ff`, ...), not `layers[0]`'s."))
        out.append((norm(run(x, layers[1:])), f"the first layer is skipped: only {len(layers) - 1} of the "
                    f"{len(layers)} layers run (`layers[1:]`, or a loop from 1)",
                    "run every layer, from the first: `for layer in layers:`, or `range(len(layers))`."))
        out.append((norm(run(x, layers[:-1])), f"the last layer is skipped: only {len(layers) - 1} of the "
                    f"{len(layers)} layers run (`range(len(layers) - 1)`?)",
                    "run every layer, to the last: `for layer in layers:`."))
    out.append((norm(run(x, layers[::-1])), "the layers run in reverse order", "run them in order: `for layer in layers:`."))
    if mask is not None:
        out.append((norm(run(x, layers, m=None)), "the mask is not passed to the layers",
                    "pass it on: `pre_ln_block(x, ..., mask=mask)`."))
        out.append((norm(run(x, layers, m=~mask)), "the mask is inverted",
                    "the course's masks mean True = may attend: pass `mask` as it is, not `~mask`."))
    return out


def _matching(candidates: Callable[[_Case, nn.Module], list[tuple[Tensor, str, str]]]) -> Callable[[Case, object], object]:
    """A predicate: the learner's output is one of ``candidates(case, module)``; gives ``what`` and ``fix``."""

    def predicate(case: Case, got: object) -> dict[str, str] | None:
        if not isinstance(got, Tensor) or got.dtype.is_complex:
            return None
        with torch.no_grad():
            for output, what, fix in candidates(case.info["case"], case.info["module"]):
                if got.shape == output.shape and close(got, output, tol=_TOL):
                    return {"what": what, "fix": fix}
        return None

    return predicate


BLOCK_MISTAKES = [Mistake("{what}", "{fix}", looks_like=_matching(_block_candidates))]
ENCODER_MISTAKES = [Mistake("{what}", "{fix}", looks_like=_matching(_encoder_candidates))]


def _framework_case(case: _Case) -> Case:
    """The framework's case: the learner's arguments are the parts of a seeded reference module."""
    module = _reference(case)
    if isinstance(module, EncoderBlock):
        args = {"x": case.x, "attention": module.self_attn, "ff": module.ff, "norm1": module.norm1,
                "norm2": module.norm2}
    else:
        args = {"x": case.x, "layers": module.layers, "norm": module.norm}
    return Case(case.description, args, {} if case.mask is None else {"mask": case.mask},
                {"case": case, "module": module})


def _expected(case: Case) -> Tensor:
    with torch.no_grad():
        return case.info["module"](case.args["x"], case.kwargs.get("mask"))


def _block_cases() -> list[Case]:
    return [c for c in map(_framework_case, _cases()) if isinstance(c.info["module"], EncoderBlock)]


def _stack_cases() -> list[Case]:
    return [c for c in map(_framework_case, _cases()) if not isinstance(c.info["module"], EncoderBlock)]


def _block_reference(x: Tensor, attention: nn.Module, ff: nn.Module, norm1: nn.Module, norm2: nn.Module,
                     mask: Tensor | None = None) -> Tensor:
    """The library's ``EncoderBlock(norm_first=True)`` made of these parts, on ``x``."""
    with torch.random.fork_rng(devices=[]):
        block = EncoderBlock(x.size(-1), attention.num_heads, ff.linear1.out_features, norm_first=True)
    block.self_attn, block.ff, block.norm1, block.norm2 = attention, ff, norm1, norm2
    with torch.no_grad():
        return block.eval()(x, mask)


def _stack_reference(x: Tensor, layers: nn.ModuleList, norm: nn.Module, mask: Tensor | None = None) -> Tensor:
    """The library's ``Encoder(norm_first=True)`` made of these layers and final norm, on ``x``."""
    block = layers[0]
    with torch.random.fork_rng(devices=[]):
        encoder = Encoder(len(layers), x.size(-1), block.self_attn.num_heads, block.ff.linear1.out_features,
                          norm_first=True)
    encoder.layers, encoder.norm = layers, norm
    with torch.no_grad():
        return encoder.eval()(x, mask)


def _self_attention(h: Tensor, attention: nn.Module, mask: Tensor | None) -> Tensor:
    return attention(h, h, h, mask)[0]


def _block_steps(x: Tensor, attention: nn.Module, ff: nn.Module, norm1: nn.Module, norm2: nn.Module,
                 mask: Tensor | None = None) -> Tensor:
    """The pre-LN block step by step, ``x = x + sublayer(norm(x))`` twice (``_steps.py`` searches small changes
    to each); equal to :func:`_block_reference`."""
    with torch.no_grad():
        axes = ("position", "feature")
        h = step("norm1: normalise the attention's input", norm1, x, axes=axes)
        a = step("self-attention of norm1(x)", _self_attention, h, attention, mask, axes=axes)
        x = step("residual: x + attention", torch.add, x, a, axes=axes)
        h = step("norm2: normalise the feed-forward's input", norm2, x, axes=axes)
        f = step("feed-forward: linear1", ff.linear1, h, axes=axes)
        f = step("feed-forward: ReLU", F.relu, f, axes=axes)
        f = step("feed-forward: linear2", ff.linear2, f, axes=axes)
        return step("residual: x + feed-forward", torch.add, x, f, axes=axes)


def _stack_steps(x: Tensor, layers: nn.ModuleList, norm: nn.Module, mask: Tensor | None = None) -> Tensor:
    """The pre-LN stack step by step: each layer a pre-LN block (its steps named as in :func:`_block_steps`),
    then the final LayerNorm; equal to :func:`_stack_reference`."""
    for layer in layers:
        x = _block_steps(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    with torch.no_grad():
        return step("the final LayerNorm, after the last layer", norm, x, axes=("position", "feature"))


def _hints(label: str) -> list[tuple[str, ...]]:
    return [(r"unexpected keyword argument 'mask'", f"give {label} a `mask=None` parameter and pass it on (to the "
             "attention, or to each block).", f"{label} has no `mask` parameter"),
            (r"unsupported operand type\(s\) for [^:]*: 'Tensor' and 'tuple'|'tuple' object has no attribute",
             "`attention(h, h, h, mask)` returns a tuple `(output, weights)`: take the output with `[0]` "
             "(or `output, _ = attention(...)`).", "the attention's (output, weights) tuple is used as a tensor")]


# -- the check -----------------------------------------------------------------------------------


def check_pre_ln_encoder(pre_ln_block: Callable[..., object], pre_ln_encoder: Callable[..., object]) -> CheckResult:
    """Check exercise 6: ``pre_ln_block(x, attention, ff, norm1, norm2, mask=None)`` and
    ``pre_ln_encoder(x, layers, norm, mask=None)`` against ``EncoderBlock``/``Encoder`` with
    ``norm_first=True`` and shared weights, on three block cases and two stack cases. The learner
    gets copies of the modules. Built on ``_framework.py``: the mistakes are the candidates above
    (the wirings, sublayer and stack slips), rebuilt from the case's reference module.
    """
    cases = [_framework_case(case) for case in _cases()]
    blocks = [c for c in cases if isinstance(c.info["module"], EncoderBlock)]
    stacks = [c for c in cases if not isinstance(c.info["module"], EncoderBlock)]
    with one_cpu_thread():
        for label, fn, mine, mistakes, stepped in (
                ("pre_ln_block", pre_ln_block, blocks, BLOCK_MISTAKES, _block_steps),
                ("pre_ln_encoder", pre_ln_encoder, stacks, ENCODER_MISTAKES, _stack_steps)):
            session = Session(f"{_NAME} [{label}]", _hints(label), copy_modules=True)
            if not callable(fn):
                return done(session.fail(f"{label}: expected a function, got {type(fn).__name__}",
                                         "pass the two functions themselves, without calling them: "
                                         "`check_pre_ln_encoder(pre_ln_block, pre_ln_encoder)`."))
            with torch.no_grad():
                failure = run_check(session, fn, mine, _expected, ("the output",), mistakes, tol=_TOL,
                                    expected_of=_expected, steps=stepped)
            if failure is not None:
                if failure.summary == "not implemented yet":
                    failure.summary = f"{label}: not implemented yet"
                return done(failure)
    return done(passed(Session(_NAME), f"all {len(cases)} cases match EncoderBlock/Encoder(..., norm_first=True) "
                                       "(3 blocks, one with a padding mask; 2 stacks)"))


#: The references written as named steps, with the cases each must equal its reference on (tests/test_checks_steps.py).
STEPPED = [(_block_cases, _block_reference, _block_steps), (_stack_cases, _stack_reference, _stack_steps)]
