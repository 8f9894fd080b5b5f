"""The result every exercise check returns, the device rules, and small helpers the checks share.

The framework the checks are built on (calling the learner, judging, mistakes) is ``_framework.py``.

A check runs the learner's function on several cases, compares it with the reference, and
returns a :class:`CheckResult`: ``bool(result)`` is pass/fail and ``str(result)`` is the
feedback (shown nicely in a notebook). It never raises because of the learner's code:
exceptions, wrong types, shapes, dtypes and devices, and NaN are all feedback. With the environment
variable ``LESSONS_SRC_STRICT=1`` a failing check raises ``AssertionError`` carrying the same
feedback; CI uses that to prove the solutions pass and the exercise stubs fail.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["CheckResult", "strict_mode", "finish", "remember", "elide_fix", "call_learner", "receive", "error_hint", "is_device_error",
           "DEVICE_HINT", "NOT_IMPLEMENTED", "close", "learner_error", "shape_of",
           "STRICT_ENV"]

STRICT_ENV = "LESSONS_SRC_STRICT"


def strict_mode() -> bool:
    """True when ``LESSONS_SRC_STRICT=1``: failing checks raise ``AssertionError``."""
    return os.environ.get(STRICT_ENV, "") == "1"


#: Code spans, paired from the left: `a`, then `b`, never the text between two spans.
_CODE_SPAN = re.compile(r"`([^`]*)`")


def _is_fix(code: str) -> bool:
    """A code span long enough to be a line of the answer (14+ characters with a call, an assignment or an index)."""
    return len(code) >= 14 and any(c in code for c in "(=[")


def elide_fix(hint: str) -> tuple[str, bool]:
    """``hint`` with every code span that spells out the answer replaced by `…`; and whether any was."""
    elided = False

    def replace(match: re.Match[str]) -> str:
        nonlocal elided
        if _is_fix(match.group(1)):
            elided = True
            return "`…`"
        return match.group(0)

    return _CODE_SPAN.sub(replace, hint), elided


class _Text(str):
    """A string that a notebook shows as text, not as a quoted repr."""

    def __repr__(self) -> str:
        return str(self)


@dataclass
class CheckResult:
    """The outcome of a check: truthy when it passed; ``str()`` is the feedback.

    Feedback reveals in steps (CONTRIBUTING.md, "Feedback that reveals in steps"): the first
    failure names the mistake and where it is, with its hint's lines of code elided (`…`); the
    exact code is shown by ``result.fix``, in the static page's "Show the exact code" section,
    and when the same failure comes back on the next try (``reveal``).
    """

    check: str
    passed: bool
    summary: str
    hint: str = ""
    details: list[str] = field(default_factory=list)
    #: Show the hint's code in full (set on a repeated failure; ``fix`` always shows it).
    reveal: bool = False
    #: A fingerprint of the learner's function that was judged ("" when unknown).
    learner: str = ""

    def __bool__(self) -> bool:
        return self.passed

    def _hint_text(self) -> tuple[str, bool]:
        if self.reveal or self.passed:
            return self.hint, False
        return elide_fix(self.hint)

    @property
    def fix(self) -> str:
        """The hint with its code in full."""
        return _Text(f"How to fix: {self.hint}" if self.hint else "no fix to show: the check passed")

    def __str__(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        lines = [f"{mark} {self.check}: {self.summary}"]
        lines += [f"  - {d}" for d in self.details]
        hint, elided = self._hint_text()
        if hint:
            more = (f" (the exact code: `{self.check.split()[0]}(...).fix`, or run the check again on the same mistake)"
                    if elided else "")
            lines.append(f"How to fix: {hint}{more}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour, icon = ("#1a7f37", "&#10004;") if self.passed else ("#c0392b", "&#10008;")
        details = "".join(f"<li>{html.escape(d)}</li>" for d in self.details)
        shown, elided = self._hint_text()
        hint = f"<p><strong>How to fix:</strong> {html.escape(shown)}</p>" if self.hint else ""
        if elided:
            hint += (f'<details class="ls-fix"><summary>Show the exact code</summary>'
                     f"<p>{html.escape(self.hint)}</p></details>")
        return (
            f'<div class="ls-check" role="status" style="border-left:4px solid {colour};'
            f'padding:.4em .8em;margin:.5em 0">'
            f'<p style="margin:0"><strong style="color:{colour}">{icon} {html.escape(self.check)}</strong>: '
            f"{html.escape(self.summary)}</p>"
            f'{f"<ul>{details}</ul>" if details else ""}{hint}</div>'
        )


#: The last failure per check: its first line, its details and the learner's fingerprint.
_LAST_FAILURE: dict[str, tuple[str, list[str], str]] = {}


def remember(result: CheckResult) -> CheckResult:
    """Compare a failure with the same check's last one, so that a learner can tell progress from none.

    The same failure from the same function reveals the fix's code; from a changed function, it
    says what moved (the first difference, where it was and where it is now); another failure says
    what the last one was.
    """
    previous = _LAST_FAILURE.get(result.check)
    if result.passed:
        _LAST_FAILURE.pop(result.check, None)
        return result
    if previous is not None and previous[0] == result.summary:
        same_function = not result.learner or not previous[2] or previous[2] == result.learner
        moved = [(old, new) for old, new in zip(previous[1], result.details) if old != new]
        if same_function:
            result.reveal = True
            result.details.append("the same failure as your last try, so the exact code of the fix is shown below")
        elif moved:
            old, new = moved[0]
            result.details.append(f"you changed your function and the same mistake remains, but it moved: last "
                                  f"try '{old}', now '{new}'")
        else:
            result.reveal = True
            result.details.append("you changed your function, but the check sees exactly the same result: the "
                                  "change did not touch this mistake (the exact code of the fix is shown below)")
    elif previous is not None:
        result.details.append(f"your last try failed differently: {previous[0]}")
    _LAST_FAILURE[result.check] = (result.summary, list(result.details), result.learner)
    return result


def finish(result: CheckResult) -> CheckResult:
    """Return ``result`` (compared with the check's last failure, :func:`remember`); under
    ``LESSONS_SRC_STRICT=1`` raise ``AssertionError`` if it failed."""
    remember(result)
    if not result.passed and strict_mode():
        raise AssertionError(str(result))
    return result


def shape_of(t: object) -> str:
    """A tensor's shape as a tuple string, or the type name of anything else (for feedback)."""
    return str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__


def close(actual: Tensor, expected: Tensor, tol: float = 1e-5) -> bool:
    """Same shape and equal to ``tol`` in float64 (accepts learners who compute in float64)."""
    if actual.shape != expected.shape:
        return False
    return torch.allclose(actual.detach().to(torch.float64), expected.to(torch.float64), rtol=tol, atol=tol)


def learner_error(exc: BaseException) -> str:
    """The exception and the learner's own line that raised it (not a frame inside torch), as one line."""
    from ._framework import learner_line  # the framework builds on this module

    return f"{type(exc).__name__}: {exc}{learner_line(exc)}"


NOT_IMPLEMENTED = "replace `raise NotImplementedError` with your implementation."

# -- devices -----------------------------------------------------------------------------------
# The checks build their inputs and references on the CPU. In a GPU session (Colab) a learner's
# own tensors may land on CUDA (`default_device()`, `device="cuda"`): a right answer computed there
# passes, a tensor with no data (the `meta` device) is feedback, and so is an error from mixing devices.

DEVICE_HINT = (
    "create every new tensor on the device of the inputs, e.g. `torch.ones(..., device=query.device)`, or move "
    "it there with `.to(query.device)`, rather than on a fixed device ('cuda', 'meta', `default_device()`): the "
    "check passes its inputs on the CPU."
)

# PyTorch's messages ("Expected all tensors to be on the same device", "... is not on the expected
# device meta!", "Expected a 'cuda' device type for generator", "Cannot copy out of meta tensor")
# and lessons_src's ("must be on one device", "mask is on cuda:0 but query is on cpu", "query is
# torch.float32 on meta but the weights are torch.float32 on cpu": two different devices named).
_DEVICE_ERROR = re.compile(r"same device|one device|expected device|device type|meta tensor"
                           r"|\bon (?P<a>[a-z]+(:\d+)?) but\b.*\bon (?!(?P=a)\b)[a-z]", re.IGNORECASE)


def is_device_error(message: str) -> bool:
    """Whether an error message is about tensors on different devices (or without data, on ``meta``)."""
    return _DEVICE_ERROR.search(message) is not None


def error_hint(exc: BaseException, hint: str) -> str:
    """``hint`` for an exception the learner's code raised, or :data:`DEVICE_HINT` when it is about devices."""
    return DEVICE_HINT if is_device_error(str(exc)) else hint


class _Unusable(Exception):
    """A returned tensor the check cannot judge: its (summary, hint)."""


def _to_cpu(value: object) -> object:
    """``value`` with every tensor (also inside tuples and lists) on the CPU; raises :class:`_Unusable`."""
    if isinstance(value, Tensor):
        if value.is_complex():
            raise _Unusable(f"returned a complex tensor (dtype {value.dtype}), expected real numbers",
                            "return real tensors: `torch.view_as_real(z)` gives the real and imaginary parts of a "
                            "complex z, and `z.real` its real part.")
        if value.device.type == "cpu":
            return value
        if value.is_meta:
            raise _Unusable("returned a tensor on the `meta` device, which has a shape but no values", DEVICE_HINT)
        try:
            return value.cpu()
        except Exception as exc:  # a broken device or an exotic tensor: feedback, not a crash
            raise _Unusable(f"returned a tensor on device {value.device} that could not be copied to the CPU "
                            f"({type(exc).__name__}: {exc})",
                            DEVICE_HINT + " A GPU reports some errors (an index out of range, say) only when a result "
                            "is read: if the error above is one, run your function on CPU tensors to find its line."
                            ) from exc
    if isinstance(value, (tuple, list)):
        items = [_to_cpu(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return list(items) if isinstance(value, list) else tuple(items)
    return value


def receive(check: str, where: str, value: object) -> tuple[object, CheckResult | None]:
    """What the learner's function returned, ready to judge: ``(value, None)``, or ``(None, failure)``.

    Every learner call path goes through it. Tensors on another device than the CPU (a GPU), also
    inside tuples and lists, come back copied to the CPU, so a right answer passes wherever it was
    computed. A tensor on the ``meta`` device (no values), one that cannot be copied, or a complex
    one gives the failure (not finished: the caller may refine it, then calls ``finish``).
    """
    try:
        return _to_cpu(value), None
    except _Unusable as unusable:
        summary, hint = unusable.args
        return None, CheckResult(check, False, f"{where}: {summary}", hint)


def call_learner(check: str, where: str, fn: object, *args, **kwargs) -> tuple[object, CheckResult | None]:
    """Call the learner's ``fn(*args, **kwargs)``; return ``(value, None)``, or ``(None, failure)``.

    Goes through the framework's ``Session.call`` (``_framework.py``): a time limit, copies of
    the inputs and a look at whether ``fn`` changed them in place, exceptions named with the
    learner's own line and a hint, and :func:`receive`. The failure is finished (it raises under
    strict mode).
    """
    from ._framework import Session  # the framework builds on this module

    value, failure = Session(check).call(where, fn, list(args), kwargs)
    return value, (None if failure is None else finish(failure))
