"""The result every exercise check returns, and helpers the checks share.

A check runs the learner's function on several cases, compares it with the reference, and
returns a :class:`CheckResult`: ``bool(result)`` is pass/fail and ``str(result)`` is the
feedback (shown nicely in a notebook). It never raises because of the learner's code:
exceptions, wrong types, wrong shapes and NaN are all feedback. With the environment
variable ``LESSONS_SRC_STRICT=1`` a failing check raises ``AssertionError`` carrying the same
feedback; CI uses that to prove the solutions pass and the exercise stubs fail.
"""

from __future__ import annotations

import html
import os
import traceback
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["CheckResult", "strict_mode", "finish", "call_learner", "not_one_tensor", "NOT_IMPLEMENTED", "close", "same_up_to_nan", "learner_error", "shape_of", "STRICT_ENV"]

STRICT_ENV = "LESSONS_SRC_STRICT"


def strict_mode() -> bool:
    """True when ``LESSONS_SRC_STRICT=1``: failing checks raise ``AssertionError``."""
    return os.environ.get(STRICT_ENV, "") == "1"


@dataclass
class CheckResult:
    """The outcome of a check: truthy when it passed; ``str()`` is the feedback."""

    check: str
    passed: bool
    summary: str
    hint: str = ""
    details: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        lines = [f"{mark} {self.check}: {self.summary}"]
        lines += [f"  - {d}" for d in self.details]
        if self.hint:
            lines.append(f"How to fix: {self.hint}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour, icon = ("#1a7f37", "&#10004;") if self.passed else ("#c0392b", "&#10008;")
        details = "".join(f"<li>{html.escape(d)}</li>" for d in self.details)
        hint = f"<p><strong>How to fix:</strong> {html.escape(self.hint)}</p>" if self.hint else ""
        return (
            f'<div class="ls-check" role="status" style="border-left:4px solid {colour};'
            f'padding:.4em .8em;margin:.5em 0">'
            f'<p style="margin:0"><strong style="color:{colour}">{icon} {html.escape(self.check)}</strong>: '
            f"{html.escape(self.summary)}</p>"
            f'{f"<ul>{details}</ul>" if details else ""}{hint}</div>'
        )


def finish(result: CheckResult) -> CheckResult:
    """Return ``result``; under ``LESSONS_SRC_STRICT=1`` raise ``AssertionError`` if it failed."""
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


def same_up_to_nan(actual: Tensor, candidate: Tensor) -> bool:
    """Equal up to how NaN rows were handled (kept as NaN, or zeroed)."""
    if actual.shape != candidate.shape:
        return False
    a, c = actual.detach().to(torch.float64), candidate.to(torch.float64)
    return torch.allclose(a, c, rtol=1e-4, atol=1e-4, equal_nan=True) or torch.allclose(
        a.nan_to_num(0.0), c.nan_to_num(0.0), rtol=1e-4, atol=1e-4
    )


def learner_error(exc: BaseException) -> str:
    """The last frame of the learner's traceback, as one line."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (line {frames[-1].lineno}: `{frames[-1].line}`)" if frames and frames[-1].line else ""
    return f"{type(exc).__name__}: {exc}{where}"




NOT_IMPLEMENTED = "replace `raise NotImplementedError` with your implementation."


def call_learner(check: str, where: str, fn: object, *args, **kwargs) -> tuple[object, CheckResult | None]:
    """Call the learner's ``fn(*args, **kwargs)``; return ``(value, None)``, or ``(None, failure)``.

    The failure is a finished :class:`CheckResult` (it raises under strict mode) for: ``fn`` not
    callable, a stub's ``NotImplementedError``, and any other exception, named with the line
    of the learner's code that raised it. Tensor arguments are cloned so the learner cannot
    change the check's reference inputs.
    """
    if not callable(fn):
        return None, finish(CheckResult(check, False, f"expected a function, got {type(fn).__name__}",
                                        "pass the function itself, without calling it: `check(my_function)`."))
    args = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
    kwargs = {k: (v.clone() if isinstance(v, Tensor) else v) for k, v in kwargs.items()}
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError:
        return None, finish(CheckResult(check, False, "not implemented yet", NOT_IMPLEMENTED))
    except Exception as exc:  # the learner's code may raise anything: it is feedback
        return None, finish(CheckResult(check, False, f"{where}: your function raised {learner_error(exc)}",
                                        "read the error line above; print the shape of each intermediate tensor."))


def not_one_tensor(check: str, where: str, result: object, fix: str, tuple_fix: str | None = None) -> CheckResult | None:
    """Feedback (not yet finished) when the learner returned something other than one tensor, else None.

    ``tuple_fix``, when given, is the hint for a tuple or list (e.g. output and weights returned
    together); otherwise a tuple gets the general ``fix``.
    """
    if tuple_fix is not None and isinstance(result, (tuple, list)):
        return CheckResult(check, False, f"{where}: returned a {type(result).__name__}, expected one tensor", tuple_fix)
    if not isinstance(result, Tensor):
        return CheckResult(check, False, f"{where}: returned {type(result).__name__}, expected a tensor", fix)
    return None
