"""The contract every exercise check keeps, over a registry derived from `lessons_src.checks.__all__`.

For each check, with its reference learner(s) from ``checks_learners.REFERENCES``: the reference
passes; pathological learners (not callable, raising, returning None, a tuple of the wrong length,
NaN, never returning, results on the `meta` device, changing an input in place) each give a
failing result with feedback and no exception; strict mode raises AssertionError. And the devices
contract: in Colab with a GPU, `default_device()` is CUDA and a learner's tensors may land there,
while the checks build their inputs and references on the CPU: results on another device are
judged by value (a right answer passes); results on the `meta` device (no values) fail with device
feedback; results in another dtype are feedback, never an exception; an error from mixing devices
gets the device hint.
"""

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from checks_learners import REFERENCES, load
from test_checks_decoder_and_cross_attention import with_library_masks as decoder_reference
from test_checks_efficient_attention import with_offsets as sliding_window_reference
from test_checks_encoder_block import block_reference_style, encoder_reference_style
from test_checks_grouped_query_and_kv_cache import step_reference, with_repeat_interleave
from test_checks_layer_norm_placement import as_tensor as warmup_lr_as_tensor
from test_checks_masking import causal_tril, combine_index, padding_compare
from test_checks_rotary_embeddings import reference_style as rope_reference
from test_checks_scaling import reference_style as attention_weights_reference
from test_checks_training_attention import pattern_index, task_roll
from torch import Tensor

import lessons_src.checks as checks
from lessons_src import causal_mask
from lessons_src.checks import CheckResult
from lessons_src.checks._framework import time_limits
from lessons_src.checks._result import DEVICE_HINT

#: What `lessons_src.checks` exports besides the checks.
NOT_CHECKS = {"CheckResult", "strict_mode"}
CHECKS = [name for name in checks.__all__ if name not in NOT_CHECKS]


@dataclass(frozen=True)
class Entry:
    """A check's correct learner functions, in the order the check takes them."""

    learners: tuple[Callable[..., object], ...]
    #: For each learner: whether the check accepts its results in float64 (False where it asks for
    #: bool masks, or where its inputs are float32: a float64 activation breaks the next product).
    float64_passes: tuple[bool, ...]


load()  # every test_checks_*.py registers its check's reference in REFERENCES
REGISTRY = {
    "check_scaled_dot_product_attention": Entry(REFERENCES["check_scaled_dot_product_attention"], (False,)),
    "check_masks": Entry((causal_tril, padding_compare, combine_index), (False, False, False)),
    "check_document_causal_mask": Entry(REFERENCES["check_document_causal_mask"], (False,)),
    "check_head_contributions": Entry(REFERENCES["check_head_contributions"], (False,)),
    "check_pre_ln_encoder": Entry((block_reference_style, encoder_reference_style), (False, False)),
    "check_apply_rope": Entry((rope_reference,), (False,)),
    "check_rotary_decode_step": Entry(REFERENCES["check_rotary_decode_step"], (False,)),
    "check_sliding_window_mask": Entry((sliding_window_reference,), (False,)),
    "check_sink_window_mask": Entry(REFERENCES["check_sink_window_mask"], (False,)),
    "check_expand_kv": Entry((with_repeat_interleave,), (False,)),
    "check_attend_with_cache": Entry((step_reference,), (False,)),
    "check_attention_weights": Entry((attention_weights_reference,), (False,)),
    "check_warmup_lr": Entry((warmup_lr_as_tensor,), (True,)),  # the reference that returns a tensor
    "check_decoder_attention": Entry((decoder_reference,), (False,)),
    "check_shift_attention": Entry((task_roll, pattern_index), (False, True)),
    "check_online_softmax_update": Entry(REFERENCES["check_online_softmax_update"], (False,)),
    "check_alibi_bias": Entry(REFERENCES["check_alibi_bias"], (True,)),
    "check_next_token_probs": Entry(REFERENCES["check_next_token_probs"], (False,)),
    "check_prefix_matching_score": Entry(REFERENCES["check_prefix_matching_score"], (True,)),
    "check_rms_norm": Entry(REFERENCES["check_rms_norm"], (False,)),
    "check_swiglu": Entry(REFERENCES["check_swiglu"], (False,)),
    "check_absorbed_scores": Entry(REFERENCES["check_absorbed_scores"], (False,)),
    "check_softmax_with_sink": Entry(REFERENCES["check_softmax_with_sink"], (False,)),
}

#: (check, which learner) for every learner of every registered check.
LEARNERS = [(name, i) for name in CHECKS if name in REGISTRY for i in range(len(REGISTRY[name].learners))]
LEARNER_IDS = [f"{name}[{i}]" for name, i in LEARNERS]
MISMATCH = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"


def _map_tensors(value: object, convert: Callable[[Tensor], Tensor]) -> object:
    if isinstance(value, Tensor):
        return convert(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, convert) for v in value)
    return value


def returning(fn: Callable[..., object], convert: Callable[[Tensor], Tensor]) -> Callable[..., object]:
    """``fn`` with ``convert`` applied to each tensor it returns; the signature stays (checks read it)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        return _map_tensors(fn(*args, **kwargs), convert)

    return wrapped


def raising_a_device_mismatch(fn: Callable[..., object]) -> Callable[..., object]:
    """A learner with ``fn``'s signature that raises PyTorch's error for tensors on two devices."""

    @functools.wraps(fn)
    def learner(*args, **kwargs):
        raise RuntimeError(MISMATCH)

    return learner


def run(name: str, replace: dict[int, Callable[..., object]] | None = None,
        convert: Callable[[Tensor], Tensor] | None = None) -> CheckResult:
    """Run the check on its reference learners, ``replace[i]`` instead of learner i, ``convert`` on every result."""
    learners = list(REGISTRY[name].learners)
    for i, fn in (replace or {}).items():
        learners[i] = fn
    if convert is not None:
        learners = [returning(fn, convert) for fn in learners]
    result = getattr(checks, name)(*learners)
    assert isinstance(result, CheckResult)
    assert str(result) and result._repr_html_()
    return result


def test_every_exported_check_has_a_registry_entry():
    assert len(CHECKS) >= 12, CHECKS  # the 11 exercises, exercise 10 with two checks
    missing = [name for name in CHECKS if name not in REGISTRY]
    assert not missing, f"add these checks to REGISTRY, with their reference learners: {missing}"
    assert set(REGISTRY) == set(CHECKS), f"not exported: {set(REGISTRY) - set(CHECKS)}"
    for name, entry in REGISTRY.items():
        assert len(entry.float64_passes) == len(entry.learners), name


# -- pathological learners: each a failing result with feedback, never an exception or a hang ----------


def _first_tensor_argument(args: tuple) -> Tensor | None:
    return next((a for a in args if isinstance(a, Tensor) and a.is_floating_point()), None)


def not_callable(fn):
    return 42


def raising(fn):
    @functools.wraps(fn)
    def learner(*args, **kwargs):
        raise ValueError("a bug in the learner's code")

    return learner


def returning_none(fn):
    @functools.wraps(fn)
    def learner(*args, **kwargs):
        fn(*args, **kwargs)

    return learner


def wrong_length_tuple(fn):
    @functools.wraps(fn)
    def learner(*args, **kwargs):
        value = fn(*args, **kwargs)
        return (*value, value[0]) if isinstance(value, (tuple, list)) else (value, value, value)

    return learner


def _nan(value: object) -> object:
    if isinstance(value, Tensor):
        return torch.full(value.shape, float("nan"))
    if isinstance(value, (tuple, list)):
        return type(value)(_nan(v) for v in value)
    return float("nan") if isinstance(value, (int, float)) else value


def returning_nan(fn):
    @functools.wraps(fn)
    def learner(*args, **kwargs):
        return _nan(fn(*args, **kwargs))

    return learner


def never_returning(fn):
    @functools.wraps(fn)
    def learner(*args, **kwargs):
        while True:
            pass

    return learner


def on_the_meta_device(fn):
    return returning(fn, lambda t: t.to("meta"))


PATHOLOGICAL = {
    not_callable: "expected a function",
    raising: "ValueError: a bug in the learner's code",
    returning_none: "None",
    wrong_length_tuple: "",
    returning_nan: "",
    never_returning: "did not return within",
    on_the_meta_device: "`meta` device",
}


@pytest.mark.parametrize("make", PATHOLOGICAL, ids=[f.__name__ for f in PATHOLOGICAL])
@pytest.mark.parametrize("name, i", LEARNERS, ids=LEARNER_IDS)
def test_pathological_learners_fail_with_feedback(name, i, make):
    # Only the learner that never returns gets a short limit (exact, so the test stays short); the
    # others run under the checks' own limits, which follow the machine's speed: a busy machine
    # must not turn a feedback test into a time-out.
    limits = time_limits(0.3, 30.0) if make is never_returning else contextlib.nullcontext()
    with limits:
        result = run(name, {i: make(REGISTRY[name].learners[i])})
    assert not result, str(result)
    first = str(result).splitlines()[0]
    assert first.startswith("FAIL") and PATHOLOGICAL[make] in first and result.hint, str(result)


@pytest.mark.parametrize("name, i", LEARNERS, ids=LEARNER_IDS)
def test_a_learner_changing_its_input_in_place_is_named(name, i):
    reference = REGISTRY[name].learners[i]
    changed = []

    @functools.wraps(reference)
    def learner(*args, **kwargs):
        value = reference(*args, **kwargs)
        tensor = _first_tensor_argument(args)
        if tensor is not None:
            tensor.add_(1.0)
            changed.append(True)
        return value

    result = run(name, {i: learner})
    if changed:
        assert not result and "in place" in str(result).splitlines()[0], str(result)
    else:  # a function of sizes only (a mask from seq_len): nothing to change
        assert result, str(result)


@pytest.mark.parametrize("name", CHECKS)
def test_strict_mode_raises_on_a_failure_only(name, monkeypatch):
    monkeypatch.setenv("LESSONS_SRC_STRICT", "1")
    assert run(name)
    with pytest.raises(AssertionError, match="ValueError"):
        run(name, {0: raising(REGISTRY[name].learners[0])})


@pytest.mark.parametrize("name", CHECKS)
def test_the_reference_passes(name):
    result = run(name)
    assert result, str(result)


@pytest.mark.parametrize("name, i", LEARNERS, ids=LEARNER_IDS)
def test_results_on_the_meta_device_fail_with_device_feedback(name, i):
    learner = REGISTRY[name].learners[i]
    result = run(name, {i: returning(learner, lambda t: t.to("meta"))})
    assert not result, str(result)
    assert "`meta` device" in result.summary and "no values" in result.summary, str(result)
    assert result.hint == DEVICE_HINT and "device=query.device" in result.hint


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64], ids=str)
@pytest.mark.parametrize("name, i", LEARNERS, ids=LEARNER_IDS)
def test_results_in_another_dtype_are_feedback_never_an_exception(name, i, dtype):
    learner = REGISTRY[name].learners[i]
    result = run(name, {i: returning(learner, lambda t: t.to(dtype))})
    if dtype == torch.complex64:
        assert not result and "complex" in result.summary, str(result)
    elif dtype == torch.float64 and REGISTRY[name].float64_passes[i]:
        assert result, str(result)
    elif dtype == torch.float64:
        assert not result and "float64" in str(result), str(result)


@pytest.mark.parametrize("name, i", LEARNERS, ids=LEARNER_IDS)
def test_a_device_mismatch_error_gets_the_device_hint(name, i):
    result = run(name, {i: raising_a_device_mismatch(REGISTRY[name].learners[i])})
    assert not result, str(result)
    assert MISMATCH in result.summary and result.hint == DEVICE_HINT, str(result)


@functools.cache
def _lazy_backend() -> str | None:
    """Start PyTorch's lazy-tensor backend once; None when it works, else why not."""
    try:
        import torch._lazy.ts_backend

        torch._lazy.ts_backend.init()
        torch.ones(2, device="lazy").cpu()
    except Exception as exc:  # a private backend: absent from some builds
        return f"{type(exc).__name__}: {exc}"
    return None


def _lazy_device() -> str:
    """PyTorch's lazy-tensor device: not the CPU, but computed there, so every machine can test a move."""
    why_not = _lazy_backend()
    if why_not is not None:
        pytest.skip(f"no lazy-tensor backend in this PyTorch build ({why_not})")
    return "lazy"


@pytest.fixture(params=["lazy", pytest.param("cuda", marks=pytest.mark.cuda)])
def other_device(request):
    """A device with data other than the CPU: `lazy` everywhere it is built in, `cuda` on a GPU."""
    return _lazy_device() if request.param == "lazy" else "cuda"


@pytest.mark.parametrize("name", CHECKS)
def test_results_on_another_device_are_judged_by_value(name, other_device):
    result = run(name, convert=lambda t: t.to(other_device))
    assert result, str(result)


def test_a_result_that_cannot_be_copied_to_the_cpu_is_feedback():
    """Like a GPU's, the lazy device reports some errors (here an index out of range) only when the result is read."""
    device = _lazy_device()

    def expand_kv(kv, num_heads):
        kv = kv.to(device)
        return kv.index_select(1, torch.arange(num_heads, device=device) + 10)  # out of range, found late

    result = checks.check_expand_kv(expand_kv)
    assert not result and result.hint.startswith(DEVICE_HINT) and "index out of range" in result.hint, str(result)
    assert "returned a tensor on device lazy:0 that could not be copied to the CPU (RuntimeError" in result.summary


# -- learners that put tensors of their own on another device, while the inputs are on the CPU ----------


def attention_moving_the_mask(device):
    def attention(query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask.to(device), float("-inf"))  # the mask on `device`, scores on the CPU
        reference = REFERENCES["check_scaled_dot_product_attention"][0]
        return reference(query, key, value, mask)[0], torch.softmax(scores, dim=-1)

    return attention


def decoder_with_causal_mask_on(device):
    def decoder_attention(x, memory, source_lengths, self_attn, cross_attn):
        self_out, _ = self_attn(x, x, x, causal_mask(x.size(1), device=device))  # our module raises inside
        return self_out, decoder_reference(x, memory, source_lengths, self_attn, cross_attn)[1]

    return decoder_attention


def decoder_moving_x_to(device):
    def decoder_attention(x, memory, source_lengths, self_attn, cross_attn):
        return decoder_reference(x.to(device), memory.to(device), source_lengths, self_attn, cross_attn)

    return decoder_attention


def causal_mask_on(device):
    return lambda seq_len: torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def sliding_window_mask_on(device):
    return lambda seq_len, window: sliding_window_reference(seq_len, window).to(device)


#: (check, which learner, the learner on a device): "hint" when it mixes devices (a failure with the
#: device hint); "values" when it only returns tensors from there (judged by their values).
MADE_ELSEWHERE = [
    ("check_scaled_dot_product_attention", 0, attention_moving_the_mask, "hint"),
    ("check_decoder_attention", 0, decoder_with_causal_mask_on, "hint"),
    ("check_decoder_attention", 0, decoder_moving_x_to, "hint"),
    ("check_masks", 0, causal_mask_on, "values"),
    ("check_sliding_window_mask", 0, sliding_window_mask_on, "values"),
]


@pytest.mark.parametrize("device", ["meta", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("name, i, make, expect", MADE_ELSEWHERE, ids=[m[2].__name__ for m in MADE_ELSEWHERE])
def test_tensors_made_on_another_device_are_feedback(name, i, make, expect, device):
    result = run(name, {i: make(device)})
    if expect == "values" and device != "meta":
        assert result, str(result)
    elif expect == "values":
        assert not result and "`meta` device" in result.summary and result.hint == DEVICE_HINT, str(result)
    else:
        assert not result and result.hint == DEVICE_HINT, str(result)
