"""The framework every exercise check is built on: call the learner, judge, name the mistake.

A check is a table of :class:`Case` (the inputs, and a description the feedback quotes), a
reference with the learner's signature, and a table of :class:`Mistake` (a wrong implementation
with the same signature, or a predicate on what came back, and its hint). :func:`run_check`
then does the rest, the same way for every check:

1. **call** the learner through :meth:`Session.call`: a time limit per call and for the whole
   check, copies of the inputs (and a look afterwards: changing an argument in place is a
   mistake, named with the argument), exceptions turned into feedback by the table
   :data:`ERROR_HINTS`, quoting the learner's own line (:func:`learner_line`);
2. **judge** with :func:`judge`: type (a tensor, a tuple of n tensors, a number) -> device and
   dtype (``meta``, complex, integer or half precision results are wrong results; a result on a
   GPU is copied back and judged by value) -> shape -> values -> known mistakes -> the first
   difference. A known mistake found at any step after the type wins over the generic verdict
   (``early`` mistakes are tried before the type step); a wrong result no mistake names is
   recomputed once, and a result that changes between calls is named (dropout left on).

``Session(copy_modules=True)`` also hands the learner copies of ``nn.Module`` arguments (and
names one whose weights it changed); a check that reads how its own modules were called keeps
it off. For mask exercises, :func:`mask_pattern`, :func:`mask_mistakes`, :func:`pattern_is`
judge a mask of any dtype by its pattern. The time limits are :data:`LIMITS` (lower them in
tests with :func:`time_limits`); :data:`CALLS` counts every learner call (the benchmark reads it).

Every failing verdict is a :class:`CheckResult` whose first line names the mistake and the case,
whose details say what was expected and what came back, and whose hint is one concrete fix.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import math
import numbers
import os
import re
import signal
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ._diagnosis import diagnose
from ._result import DEVICE_HINT, NOT_IMPLEMENTED, CheckResult, finish, is_device_error, receive
from ._steps import SEARCH_SECONDS, Found, explain_error
from ._steps import search as search_steps

__all__ = ["Case", "Mistake", "Session", "ERROR_HINTS", "LIMITS", "time_limits", "run_check", "judge",
           "learner_line", "describe_error", "CALLS", "call_limited", "TimeLimit", "machine_slowness", "passed", "done", "mask_pattern",
           "mask_mistakes", "pattern_is", "shape_is", "as_number", "attention_variants", "global_max_softmax"]


# -- time limits -----------------------------------------------------------------------------------


@dataclass
class TimeLimit:
    """Seconds a learner's function may take: per call, and for all the calls of one check.

    Generous for a slow Colab CPU and a first CUDA call (the reference takes milliseconds), and
    multiplied by :func:`machine_slowness` when ``follow_machine`` is on (the default), so that a
    busy machine never fails a correct answer. Only the learner's own computing counts: the time
    its ``print`` calls take, and the check's own work between calls, do not. Tests set exact
    limits with :func:`time_limits`.
    """

    per_call: float = 10.0
    per_check: float = 60.0
    follow_machine: bool = True


#: The limits every check uses (change them with :func:`time_limits`).
LIMITS = TimeLimit()

#: What :func:`_reference_work` takes on a quiet 2-core machine of the project's CI (measured:
#: 1.9-2.1 ms; CONTRIBUTING.md, "Time on a busy machine").
QUIET_REFERENCE_SECONDS = 0.002

#: How long one measurement of the machine's slowness is reused (a check takes a second or two).
SLOWNESS_SECONDS = 30.0
_slowness: list[float] = []  # [measured at, slowness], once measured


def _reference_work() -> int:
    """About 2 ms of plain Python on a quiet machine: how much of a core this process gets now.

    No tensors: on a loaded machine PyTorch's intra-op threads can make tiny tensor operations 10-20
    times slower still, which would make the measurement itself slow.
    """
    total = 0
    for i in range(40000):
        total += i * i % 7
    return total


def machine_slowness() -> float:
    """How many times slower than a quiet reference machine this one runs now: 1 to 20.

    The median of three timings of :func:`_reference_work` against :data:`QUIET_REFERENCE_SECONDS`,
    reused for :data:`SLOWNESS_SECONDS`; never below 1 (a fast machine keeps the full limits) and
    at most 20.
    """
    now = time.monotonic()
    if _slowness and now - _slowness[0] < SLOWNESS_SECONDS:
        return _slowness[1]
    times = []
    for _ in range(3):
        start = time.perf_counter()
        _reference_work()
        times.append(time.perf_counter() - start)
    _slowness[:] = [now, min(max(sorted(times)[1] / QUIET_REFERENCE_SECONDS, 1.0), 20.0)]
    return _slowness[1]


@contextlib.contextmanager
def time_limits(per_call: float, per_check: float | None = None,
                follow_machine: bool = False) -> Iterator[TimeLimit]:
    """Set the time limits inside a ``with`` block, e.g. in a test of a learner that hangs.

    Exact seconds by default (``follow_machine=False``), so that a test knows the limit it reads.
    """
    old = (LIMITS.per_call, LIMITS.per_check, LIMITS.follow_machine)
    LIMITS.per_call = per_call
    LIMITS.per_check = per_check if per_check is not None else max(per_call * 4, old[1])
    LIMITS.follow_machine = follow_machine
    try:
        yield LIMITS
    finally:
        LIMITS.per_call, LIMITS.per_check, LIMITS.follow_machine = old


class _TimeUp(BaseException):
    """Raised inside the learner's code by the alarm (a BaseException: ``except Exception`` cannot swallow it)."""


@dataclass
class _Counter:
    """How many times checks have called a learner (the benchmark reads it)."""

    calls: int = 0


#: Every learner call any check makes increments ``CALLS.calls``.
CALLS = _Counter()

#: Lines of the learner's own printing shown per check; the rest are hidden (and the check says so).
ECHO_LINES = 100


class _Printing:
    """Stands in for ``sys.stdout`` and ``sys.stderr`` while the learner's function runs.

    Passes the first :data:`ECHO_LINES` lines of one check through (learners debug with ``print``),
    says that the rest is hidden, and adds up the seconds spent writing, which the time limit does
    not count: printing is slow in a notebook on a busy machine, and it is not the learner's
    computation.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.lines = 0

    def stream(self, real: object) -> object:
        printing = self

        class _Stream:
            def write(self, text: str) -> int:
                start = time.perf_counter()
                try:
                    if printing.lines < ECHO_LINES:
                        real.write(text)
                        printing.lines += text.count("\n")
                        if printing.lines >= ECHO_LINES:
                            real.write(f"\n[the check hides the rest of what your function prints: {ECHO_LINES} "
                                       "lines are shown]\n")
                    return len(text)
                finally:
                    printing.seconds += time.perf_counter() - start

            def flush(self) -> None:
                start = time.perf_counter()
                try:
                    real.flush()
                finally:
                    printing.seconds += time.perf_counter() - start

            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

        return _Stream()

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        old = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.stream(old[0]), self.stream(old[1])
        try:
            yield
        finally:
            sys.stdout, sys.stderr = old


def call_limited(fn: Callable[..., object], args: Sequence[object], kwargs: dict[str, object],
                 limit: float, printing: _Printing | None = None) -> tuple[str, object, float]:
    """Run ``fn(*args, **kwargs)`` for at most ``limit`` seconds, without ever killing the kernel.

    Returns ``("ok", value, seconds)``, ``("raised", exception, seconds)`` or ``("timeout", None, seconds)``;
    ``seconds`` leave out the time spent printing when ``printing`` (a :class:`_Printing`) is given:
    its ``print`` output passes through it, and the limit is extended by the time printing took.

    Why two ways: in the main thread (a notebook cell, pytest) a ``SIGALRM`` timer
    (``signal.setitimer``) raises :class:`_TimeUp` inside the learner's code, so a ``while True``
    loop really stops and leaves no work running behind the learner's back; the previous handler
    and timer are restored afterwards. A signal cannot interrupt a single long C call (one huge
    matmul): the limit then acts when it returns. Signals can only be set from the main thread and
    do not exist on Windows; there the call runs in a daemon thread and the check stops waiting
    after ``limit`` (the thread may go on computing in the background, but the kernel stays usable
    and exits normally). PyTorch's grad mode is per thread, so the thread inherits the caller's.
    """
    CALLS.calls += 1
    printing = printing if printing is not None else _Printing()
    printed_before = printing.seconds
    start = time.perf_counter()

    def computing() -> float:  # seconds of this call, printing left out
        return time.perf_counter() - start - (printing.seconds - printed_before)

    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        def alarm(signum, frame):
            left = limit - computing()
            if left > 1e-3:  # the learner printed meanwhile: the limit moves by that much
                signal.setitimer(signal.ITIMER_REAL, left)
                return
            raise _TimeUp

        old_handler = signal.signal(signal.SIGALRM, alarm)
        old_timer = signal.setitimer(signal.ITIMER_REAL, max(limit, 1e-3))
        done, outcome = False, None
        try:
            try:
                with printing.capturing():
                    value = fn(*args, **kwargs)
                done, outcome = True, ("ok", value)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _TimeUp:
            if not done:
                return "timeout", None, max(computing(), limit)
        except Exception as exc:  # the learner's code may raise anything: it is feedback
            outcome = ("raised", exc)
        finally:
            signal.signal(signal.SIGALRM, old_handler)
            if old_timer[0] > 0:  # someone else's timer: give it back what is left
                signal.setitimer(signal.ITIMER_REAL, max(old_timer[0] - (time.perf_counter() - start), 1e-3),
                                 old_timer[1])
        return outcome[0], outcome[1], computing()

    box: dict[str, object] = {}
    grad = torch.is_grad_enabled()

    def target() -> None:
        try:
            with torch.set_grad_enabled(grad):
                box["ok"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001  (reported to the waiting check)
            box["raised"] = exc

    thread = threading.Thread(target=target, daemon=True, name="learner-call")
    with printing.capturing():  # sys.stdout is process-wide: the thread's printing passes through it too
        thread.start()
        thread.join(limit)
        while thread.is_alive() and limit - computing() > 1e-3:
            thread.join(limit - computing())
    if thread.is_alive():
        return "timeout", None, max(computing(), limit)
    kind = "ok" if "ok" in box else "raised"
    return kind, box.get(kind), computing()


# -- exceptions -> feedback ------------------------------------------------------------------------

_LIBRARY_DIRS = tuple(
    os.path.realpath(d) + os.sep
    for d in {
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # lessons_src
        os.path.dirname(os.path.abspath(torch.__file__)),
        sysconfig.get_paths().get("stdlib", ""),
        sysconfig.get_paths().get("purelib", ""),
        sysconfig.get_paths().get("platlib", ""),
    }
    if d
)


def _is_library(filename: str) -> bool:
    if filename.startswith("<frozen") or "site-packages" in filename or "dist-packages" in filename:
        return True
    return os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def learner_line(exc: BaseException) -> str:
    """Where the learner's code raised: `` (line 7: `scores = q @ k.T`)`` or ``""``.

    Walks the traceback from the innermost frame out and quotes the first frame that is not
    library code (lessons_src, torch, the standard library, site-packages): the learner's
    notebook cell (``/tmp/ipykernel_*/…py``) or file. The innermost frame is often inside torch.
    """
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not _is_library(frame.filename):
            return f" (line {frame.lineno}: `{frame.line}`)" if frame.line else f" (line {frame.lineno})"
    return ""


#: From a learner's exception (matched against ``"TypeName: message"``) to the hint, and
#: optionally the mistake's name (the feedback's first line then starts with it); the first match
#: wins, after the check's own table. ``\\g<name>`` inserts a group of the match; a hint may also be a
#: function of the match (the fix for an ``expand`` depends on the sizes).
ERROR_HINTS: list[tuple[str, str | Callable[[re.Match[str]], str], *tuple[str, ...]]] = [
    (r"^NotImplementedError", NOT_IMPLEMENTED),
    (r"unexpected keyword argument '(?P<kw>\w+)'",
     "give your function a `\\g<kw>=` parameter, with the default the exercise names: the check calls it by that name.",
     "your function has no `\\g<kw>` parameter"),
    (r"positional-only arguments passed as keyword arguments: '(?P<kw>\w+)'",
     "make `\\g<kw>` an ordinary parameter (no `/` before it): the check passes it by name, `\\g<kw>=...`."),
    (r"takes (?P<n>\d+) positional arguments? but (?P<m>\d+) (were|was) given|missing \d+ required positional",
     "give your function exactly the parameters of the exercise's stub, in the same order.",
     "your function does not take the exercise's parameters"),
    (r"mat1 and mat2 shapes cannot be multiplied \((?P<a>\S+) and (?P<b>\S+)\)",
     "in `A @ B` the last dim of A must equal the second-to-last dim of B; here they are (\\g<a>) and "
     "(\\g<b>). Print the shapes of both operands: the one that needs turning is transposed in its last two dims "
     "(`.transpose(-2, -1)`, not `.T`, which reverses every dim).",
     "a matrix product of incompatible shapes (\\g<a>) @ (\\g<b>)"),
    (r"Expected size for first two dimensions of batch2 tensor to be: \[(?P<a>[^\]]*)\] but got: \[(?P<b>[^\]]*)\]"
     r"|Expected (?P<c>.*) to have the same (?P<what>size|shape) as",
     "in a batched `A @ B`, the leading (batch) dims must agree and the last dim of A must equal the "
     "second-to-last of B: print the shapes of both operands and line up their dims.",
     "a batched matrix product whose operands' shapes do not line up"),
    (r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b \((?P<b>\d+)\) at non-singleton "
     r"dimension (?P<d>\d+)",
     "in an element-wise step (`+`, `*`, `/`, `masked_fill`, `torch.where`) two shapes must be equal or 1 in each dim, "
     "counting from the right; here sizes \\g<a> and \\g<b> meet in dim \\g<d>. Print both shapes: keep a reduced dim "
     "with `keepdim=True`, or add a missing one with `[..., None]` / `.unsqueeze(...)`.",
     "an element-wise operation on shapes that do not broadcast (sizes \\g<a> and \\g<b> in dim \\g<d>)"),
    (r"The expanded size of the tensor \((?P<a>-?\d+)\) must match the existing size \((?P<b>\d+)\) at "
     r"non-singleton dimension (?P<d>\d+)",
     lambda m: _expand_hint(int(m["a"]), int(m["b"]), m["d"]),
     "`expand` of a dim whose size is not 1 (size \\g<b> in dim \\g<d>)"),
    (r"shape '\[(?P<shape>[^\]]*)\]' is invalid for input of size (?P<n>\d+)",
     "a `view`/`reshape` to [\\g<shape>] must keep the number of entries (\\g<n>): multiply out the sizes you ask for and "
     "compare; use -1 for the one size you want computed.",
     "a reshape to [\\g<shape>] that does not keep the \\g<n> entries"),
    (r"Dimension out of range \(expected to be in range of \[(?P<lo>-?\d+), (?P<hi>-?\d+)\], but got (?P<got>-?\d+)\)",
     "the tensor's dims are numbered \\g<lo> .. \\g<hi>, so dim \\g<got> does not exist: print its shape; count dims from the end "
     "(`dim=-1` is the last) so the code works with or without a batch dim.",
     "a dim that does not exist (dim \\g<got> of a tensor with dims \\g<lo>..\\g<hi>)"),
    (r"index (?P<i>-?\d+) is out of bounds for dimension (?P<d>\d+) with size (?P<n>\d+)",
     "dim \\g<d> has size \\g<n>: its indices run from 0 to one less than \\g<n> (or from -\\g<n> to -1): print the index you compute "
     "and the size; a position one past the end is a classic off-by-one.",
     "an index out of range (\\g<i> in dim \\g<d> of size \\g<n>)"),
    (r"too many indices for tensor of dimension (?P<n>\d+)",
     "the tensor has only \\g<n> dims: print its shape before indexing it.",
     "more indices than the tensor has dims (\\g<n>)"),
    (r"expected scalar type (?P<a>\w+) but found (?P<b>\w+)|expected (?P<c>m1 and m2|both|mat1 and mat2) to have the same dtype"
     r"|(?P<d>\w+) but found (?P<e>\w+)",
     "two tensors of different dtypes meet in one step: make new tensors with `dtype=x.dtype` (and masks with "
     "`dtype=torch.bool`); print `.dtype` of each operand.",
     "tensors of two different dtypes in one operation"),
    (r"dtype",
     "two tensors of different dtypes meet in one step: make new tensors with `dtype=x.dtype` (and masks with "
     "`dtype=torch.bool`)."),
    (r"'NoneType' object|NoneType",
     "a value is None where a tensor was expected: a helper without `return`, or a default argument (None) "
     "used before it is replaced."),
    (r"out of (range|bounds)|index \d+ is out",
     "an index goes past the end of a dim: print the sizes and the indices you use."),
    (r"number of dimensions in the tensor input does not match the length of the desired ordering|"
     r"number of dims don't match in permute",
     "`permute` names every dim of the tensor, so it works for one number of dims only: swap the two you mean "
     "with `.transpose(-2, -1)`, which works whatever the leading (batch, head) dims.",
     "a `permute` written for another number of dims"),
    (r"The shape of the mask \[(?P<m>[^\]]*)\] at index (?P<i>\d+) does not match the shape of the indexed tensor "
     r"\[(?P<t>[^\]]*)\]",
     "indexing with a bool mask (`x[mask] = ...`) needs the mask's exact shape, [\\g<t>] here, not [\\g<m>]; "
     "`masked_fill`, which broadcasts the mask, does not.",
     "a bool mask of shape [\\g<m>] used as an index into a tensor of shape [\\g<t>]"),
    (r"mask of shape \((?P<m>[^)]*)\) does not broadcast to the scores' shape \((?P<s>[^)]*)\)",
     "the attention broadcasts the mask to the scores' (B, H, Lq, Lk) = (\\g<s>): a padding mask is (B, 1, 1, Lk), "
     "a causal one (Lq, Lk). Pass the mask as you received it: a dim was added (`unsqueeze`) or dropped "
     "(`squeeze`) on the way.",
     "the mask passed to the attention has shape (\\g<m>), which does not line up with the scores' (\\g<s>)"),
    (r"^RecursionError", "your function calls itself without end: call the library function, not your own name."),
    (r"^ZeroDivisionError", "a division by zero: check the value you divide by."),
    (r"out of memory|^MemoryError", "your function asks for too much memory: look for a tensor far larger than the inputs."),
    (r"view size is not compatible|is not contiguous",
     "`.view` needs a contiguous tensor: use `.reshape`, or `.contiguous().view(...)` after a transpose.",
     "`.view` on a tensor that is not contiguous (it came from a transpose)"),
    (r"unsupported operand type\(s\) for [^:]*: 'Tensor' and 'tuple'|'tuple' object has no attribute",
     "a module like `MultiHeadAttention` returns a tuple `(output, weights)`: take the output with `[0]` "
     "(or `output, _ = attention(...)`).", "a tuple (output, weights) is used as a tensor"),
]

def _expand_hint(target: int, size: int, dim: str) -> str:
    """The fix for an ``expand`` of a dim whose size is not 1: copies only where the target is a multiple of it."""
    if target > size and target % size == 0:
        return (f"`expand` can only stretch dims of size 1: dim {dim} has size {size}, not 1. To make {target // size} "
                f"copies of each of its {size} entries use `repeat_interleave({target // size}, dim={dim})` (or add a dim "
                "of size 1 next to it, expand that, and reshape).")
    return (f"`expand` can only stretch dims of size 1, and a dim of size {size} cannot become {target} by copying: "
            f"the tensor's dims do not line up with the shape you expand to; its size {size} belongs to another dim. Print "
            "both shapes and put dims of size 1 where the target's other sizes go (e.g. `x.view(1, -1, 1, 1)` for one "
            "value per head of a (B, H, L_q, L_k) tensor).")


_GENERIC_ERROR_HINT = "read the error line quoted above; print the shape of each intermediate tensor."


def describe_error(exc: BaseException, hints: Sequence[tuple[str, ...]] = ()) -> tuple[str, str]:
    """``(what happened, hint)`` for an exception the learner's code raised; ``hints`` come first."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NotImplementedError):
        return "not implemented yet", NOT_IMPLEMENTED
    if is_device_error(str(exc)):
        return f"your function raised {text}{learner_line(exc)}", DEVICE_HINT
    for pattern, hint, *name in (*hints, *ERROR_HINTS):
        match = re.search(pattern, text)
        if match:
            named = f"{match.expand(name[0])}: " if name else ""
            return f"{named}your function raised {text}{learner_line(exc)}", hint(match) if callable(hint) else match.expand(hint)
    return f"your function raised {text}{learner_line(exc)}", _GENERIC_ERROR_HINT


# -- one run of a check ----------------------------------------------------------------------------


def _copy(value: object, modules: bool = False) -> object:
    if isinstance(value, Tensor):
        return value.clone()
    if modules and isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    return value


def _module_unchanged(before: torch.nn.Module, after: torch.nn.Module) -> bool:
    a, b = before.state_dict(), after.state_dict()
    return a.keys() == b.keys() and all(_unchanged(a[k], b[k]) for k in a)


def _unchanged(before: Tensor, after: Tensor) -> bool:
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    if before.is_floating_point():
        return bool(((before == after) | (before.isnan() & after.isnan())).all())
    return torch.equal(before, after)


def _parameter_names(fn: Callable[..., object], n: int) -> list[str]:
    """The names of ``fn``'s first ``n`` positional parameters (``argument i`` where unknown)."""
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    names = names[:n]
    return names + [f"argument {i + 1}" for i in range(len(names), n)]


def fingerprint(fn: object) -> str:
    """A short hash of a function's code and constants: the same after re-running its cell unchanged,
    different after an edit (so feedback can tell "you changed it" from "the same again")."""
    method = next((vars(k)["__call__"] for k in type(fn).__mro__ if "__call__" in vars(k)), None)
    code = getattr(fn, "__code__", None) or getattr(method, "__code__", None)
    if code is None:
        return repr(type(fn))
    parts = [code.co_code, repr(code.co_consts).encode(), repr(code.co_names).encode()]
    for const in code.co_consts:  # nested functions and lambdas
        if hasattr(const, "co_code"):
            parts += [const.co_code, repr(const.co_consts).encode()]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


class Session:
    """One run of a check: its name, its time budget, and the learner calls it made."""

    def __init__(self, name: str, hints: Sequence[tuple[str, ...]] = (), copy_modules: bool = False) -> None:
        self.name = name
        self.hints = list(hints)
        #: Hand the learner copies of ``nn.Module`` arguments too (and name one whose weights it changed);
        #: off for checks that read how their own modules were called.
        self.copy_modules = copy_modules
        self.calls = 0
        #: Seconds the learner's function has computed so far (its printing and the check's own work left out).
        self.seconds = 0.0
        #: How many times slower than a quiet machine this one runs (1 with ``follow_machine`` off).
        self.slowness = machine_slowness() if LIMITS.follow_machine else 1.0
        self.printing = _Printing()
        #: Which version of the learner's function this run judged (:func:`fingerprint`), for "what changed".
        self.learner = ""
        #: The exception the learner's function last raised (read against the reference's steps).
        self.error: BaseException | None = None

    def _limit_text(self, base: float) -> str:
        if self.slowness == 1.0:
            return f"{base:g} s"
        return (f"{base:g} s x {self.slowness:.1f} = {base * self.slowness:.3g} s (this machine runs "
                f"{self.slowness:.1f} times slower than a quiet one right now)")

    def fail(self, summary: str, hint: str, details: Sequence[str] = ()) -> CheckResult:
        """A failing result (not finished yet)."""
        return CheckResult(self.name, False, summary, hint, list(details), learner=self.learner)

    def call(self, where: str, fn: Callable[..., object], args: dict[str, object] | Sequence[object],
             kwargs: dict[str, object] | None = None) -> tuple[object, CheckResult | None]:
        """Call ``fn`` with ``args`` (by position, named for feedback) and ``kwargs`` (by name).

        ``args`` may be a plain sequence: its names are then read from ``fn``'s signature.

        Returns ``(value, None)``, or ``(None, failure)`` (not finished) for: ``fn`` not callable,
        an exception (named with the learner's line and a hint from :data:`ERROR_HINTS`), the
        time limit, an argument changed in place (the learner gets copies; named), and a value
        :func:`receive` refuses (``meta``, complex, not copyable to the CPU).
        """
        kwargs = kwargs or {}
        if not callable(fn):
            return None, self.fail(f"expected a function, got {type(fn).__name__}",
                                   "pass the function itself, without calling it: `check(my_function)`, "
                                   "not `check(my_function(...))`.")
        if not isinstance(args, dict):
            args = dict(zip(_parameter_names(fn, len(args)), args, strict=True))
        per_call, per_check = LIMITS.per_call * self.slowness, LIMITS.per_check * self.slowness
        left = per_check - self.seconds
        if left <= 0:
            return None, self.fail(f"the check's time limit ran out after {self.calls} calls of your function "
                                   f"({where}): {self.seconds:.1f} s of computing, the limit is "
                                   f"{self._limit_text(LIMITS.per_check)}",
                                   "your function is far slower than it should be: look for a Python loop over "
                                   "every element, or a computation repeated inside a loop.")
        limit = min(per_call, left)
        given = {name: _copy(v, self.copy_modules) for name, v in args.items()}
        given_kw = {name: _copy(v, self.copy_modules) for name, v in kwargs.items()}
        self.calls += 1
        if not self.learner:
            self.learner = fingerprint(fn)
        kind, value, seconds = call_limited(fn, list(given.values()), given_kw, limit, self.printing)
        self.seconds += seconds
        if kind == "timeout":
            which = ("the time limit per call" if limit == per_call
                     else "what was left of the time limit for the whole check")
            base = LIMITS.per_call if limit == per_call else LIMITS.per_check
            return None, self.fail(f"your function did not return within {limit:.3g} s, {which} ({where})",
                                   "look for a loop that never ends (a `while` whose condition never changes) or "
                                   "a loop over far more items than the inputs have; interrupt the kernel if it "
                                   "is still busy.",
                                   [f"stopped after {seconds:.1f} s of computing; the limit is "
                                    f"{self._limit_text(base)}; time spent printing is not counted"])
        if kind == "raised":
            self.error = value
            what, hint = describe_error(value, self.hints)
            return None, self.fail(what if what == "not implemented yet" else f"{what} ({where})", hint)
        for name in [*args, *kwargs]:
            before = args[name] if name in args else kwargs[name]
            after = given[name] if name in given else given_kw[name]
            if (isinstance(before, torch.nn.Module) and before is not after
                    and not _module_unchanged(before, after)):
                return None, self.fail(f"your function changed the weights of `{name}` in place ({where})",
                                       f"use `{name}` as it is: call it, `{name}(x)`, without assigning to or "
                                       "modifying its parameters.")
            if isinstance(before, Tensor) and not _unchanged(before, after):
                return None, self.fail(f"your function changed its argument `{name}` in place ({where})",
                                       f"do not modify `{name}`: in-place operations (`{name}.div_(...)`, "
                                       f"`{name} /= ...`, `{name}[...] = ...`) change the caller's tensor. Write "
                                       f"`{name} = {name} / ...` (a new tensor) or work on `{name}.clone()`.")
        value, failure = receive(self.name, where, value)
        if failure is not None:  # receive says "where: what"; the first line names the mistake first
            failure.summary = f"{failure.summary.removeprefix(where + ': ')} ({where})"
        return value, failure


# -- judging ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: ``fn(*args.values(), **kwargs)``.

    ``args`` and ``kwargs`` map parameter names to values (the names appear in feedback);
    ``info`` holds anything the mistakes need (e.g. ``{"d_k": 24}``).
    """

    description: str
    args: dict[str, object]
    kwargs: dict[str, object] = field(default_factory=dict)
    info: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer: what it looks like, how to detect it, and the fix.

    ``name``: the first line of the feedback, e.g. ``"the scores are divided by d_k instead of
    sqrt(d_k)"``. Detect it with ``mistaken`` (a function with the learner's signature producing
    the mistaken output: the learner's result matches it) or ``looks_like(case, got)`` (a
    predicate on what the learner returned, already on the CPU). ``when(case)`` limits the cases
    it applies to. ``name`` and ``hint`` may use ``{info_key}`` fields of the case.
    """

    name: str
    hint: str
    mistaken: Callable[..., object] | None = None
    looks_like: Callable[[Case, object], bool] | None = None
    when: Callable[[Case], bool] | None = None
    #: Tried before the type step too: for a value the check's own wrapper of the learner returned.
    early: bool = False
    #: A catch-all ("the angles are wrong"): tried after the search over the reference's steps, which
    #: names the step when one change explains every case.
    fallback: bool = False

    def matches(self, case: Case, got: object, tol: float, expected: object = None) -> dict[str, object] | None:
        """The fields to fill in ``name`` and ``hint`` when ``got`` is this mistake on ``case``, else None.

        A ``looks_like`` predicate may return a dict (truthy) of fields of its own, e.g. the axis it found.
        A mistake whose reproduction equals ``expected`` (the right answer) on this case cannot be told
        apart from it here, so it names nothing: a right value in the wrong dtype is not "positions
        ignored" on a case whose positions are 0 .. L-1.
        """
        if self.when is not None and not self.when(case):
            return None
        try:
            if self.looks_like is not None:
                found = self.looks_like(case, got)
                if found:
                    return {**case.info, **(found if isinstance(found, dict) else {})}
            if self.mistaken is not None:
                wrong = self.mistaken(*[_copy(v) for v in case.args.values()],
                                      **{k: _copy(v) for k, v in case.kwargs.items()})
                if expected is not None and _same(expected, wrong, tol):
                    return None
                return dict(case.info) if _same(got, wrong, tol) else None
        except Exception:  # a mistake that does not apply to this case (shapes, None mask...)
            return None
        return None

    def text(self, fields: dict[str, object]) -> tuple[str, str]:
        return self.name.format(**fields), self.hint.format(**fields)


def _same(got: object, wrong: object, tol: float) -> bool:
    """``got`` equals ``wrong`` item by item, NaN matching NaN or 0 (how an empty row was handled)."""
    if isinstance(wrong, (tuple, list)):
        return (isinstance(got, (tuple, list)) and len(got) == len(wrong)
                and all(_same(g, w, tol) for g, w in zip(got, wrong, strict=True)))
    if isinstance(wrong, Tensor):
        if not isinstance(got, Tensor) or got.shape != wrong.shape or got.dtype.is_complex:
            return False
        if wrong.dtype == torch.bool or got.dtype == torch.bool:
            return got.dtype == wrong.dtype and torch.equal(got, wrong.to(got.device))
        g, w = got.detach().double(), wrong.detach().double().to(got.device)
        return bool(torch.allclose(g, w, rtol=tol, atol=tol, equal_nan=True)
                    or torch.allclose(g.nan_to_num(0.0), w.nan_to_num(0.0), rtol=tol, atol=tol))
    if isinstance(wrong, (int, float)):
        return as_number(got) is not None and math.isclose(as_number(got), float(wrong), rel_tol=tol, abs_tol=tol)
    try:
        return bool(got == wrong)
    except Exception:  # an array's == is elementwise: not a verdict
        return False


def _tensors(value: object) -> bool:
    """Whether ``value`` is a tensor, or a tuple or list of tensors."""
    if isinstance(value, (tuple, list)):
        return bool(value) and all(isinstance(v, Tensor) for v in value)
    return isinstance(value, Tensor)


def as_number(value: object) -> float | None:
    """A real number from an int, float, NumPy real scalar or one-element real tensor; None otherwise.

    An int too large for a float reads as ``inf``; a complex number is not a real number.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):  # int, float, NumPy's real scalars
        try:
            return float(value)
        except OverflowError:
            return math.inf
    if isinstance(value, Tensor) and value.numel() == 1 and not value.dtype.is_complex and value.dtype != torch.bool:
        return float(value.detach().cpu().reshape(()).double())
    return None


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "float"
    return "integer"


def _wanted_dtype(expected: Tensor) -> str:
    kind = _kind(expected.dtype)
    return {"bool": "a bool tensor (torch.bool)", "float": "a float tensor (float32, or float64)",
            "integer": f"an integer tensor ({expected.dtype})"}.get(kind, str(expected.dtype))


def _first_difference(name: str, got: Tensor, expected: Tensor, tol: float) -> list[str]:
    g, e = got.detach().double(), expected.detach().double()
    bad = ~torch.isclose(g, e, rtol=tol, atol=tol, equal_nan=True)
    if expected.dtype == torch.bool:
        bad = got != expected
    index = tuple(int(i) for i in bad.nonzero()[0]) if bad.any() else ()
    where = f"{name}[{', '.join(map(str, index))}]" if index else name
    fmt = (lambda t: str(bool(t))) if expected.dtype == torch.bool else (lambda t: f"{float(t):.4g}")
    lines = [f"first difference at {where}: expected {fmt(e[index])}, got {fmt(g[index])}",
             f"{int(bad.sum())} of {bad.numel()} entries differ"]
    if expected.dtype != torch.bool:
        lines.append(f"largest difference: {float((g - e).abs().nan_to_num(math.inf).max()):.3g}")
    return lines


def _verdict_one(name: str, got: object, expected: object, tol: float,
                 same_dtype: bool | str = False) -> tuple[str, str, list[str]] | None:
    """None when ``got`` is right; otherwise (what is wrong, hint, details) for one returned item."""
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        number = as_number(got)
        if number is None:
            return (f"{name} is a {type(got).__name__}, expected a number",
                    f"return a Python float (or a one-element tensor) for {name}.", [])
        if not math.isclose(number, float(expected), rel_tol=tol, abs_tol=tol):
            return (f"{name} is {number:.6g}, expected {float(expected):.6g}",
                    "compare your formula with the exercise's, term by term.", [])
        return None
    if not isinstance(got, Tensor):
        if got is None:
            return (f"{name} is None, expected a tensor", "end your function with `return ...`; a function "
                    "without `return` gives None.", [])
        return (f"{name} is a {type(got).__name__}, expected a tensor", f"return {name} as a torch.Tensor.", [])
    if _kind(got.dtype) != _kind(expected.dtype):
        return (f"{name} has dtype {got.dtype}, expected {_wanted_dtype(expected)}",
                {"bool": f"build {name} from comparisons (`<`, `>=`, `&`, `~`) or with `dtype=torch.bool`; 0/1 "
                         "numbers and floats are not masks.",
                 "float": "compute in floating point: a complex number (`torch.fft`, `torch.polar`, `** 0.5` of a "
                          "negative) or an integer tensor (`torch.arange` without `dtype`, `//`) is not a real "
                          "result. Take `.real` / use `dtype=torch.float32`.",
                 "integer": f"return integer indices: `.long()`, or `dtype={expected.dtype}`."}.get(
                    _kind(expected.dtype), f"return dtype {expected.dtype}."), [])
    if _kind(expected.dtype) == "float" and got.dtype in (torch.float16, torch.bfloat16):
        return (f"{name} has dtype {got.dtype}, too imprecise to compare, expected float32",
                "compute in the dtype of the inputs (float32): do not call `.half()`.", [])
    if got.dtype != expected.dtype and (same_dtype is True or (same_dtype == "float32" and (
            got.dtype, expected.dtype) == (torch.float64, torch.float32))):
        return (f"{name} has dtype {got.dtype}, expected {expected.dtype}, the dtype of the input",
                "compute in the input's dtype, or cast at the end: `.to(x.dtype)` (computing in float64 inside is "
                "fine). A float64 result makes the next product with a float32 tensor raise a dtype error.", [])
    if got.shape != expected.shape:
        return (f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}",
                "print the shape after each step and compare with the exercise's docstring.", [])
    if expected.dtype == torch.bool:
        if torch.equal(got, expected):
            return None
        return (f"{name} differs from the reference", "compare your comparisons with the exercise's definition.",
                _first_difference(name, got, expected, tol))
    g = got.detach().double()
    e = expected.detach().double()
    if torch.allclose(g, e, rtol=tol, atol=tol, equal_nan=True):
        return None
    if not torch.isfinite(g).all() and torch.isfinite(e).all():
        return (f"{name} contains NaN or inf", "look for a division by zero, a softmax over a row of only -inf, a "
                "hand-written exp() that overflows (`torch.softmax` is safe), or a softmax stabilised with the largest "
                "value of the whole tensor instead of each row's own (`keepdim=True`): rows far below it become 0 / 0.",
                _first_difference(name, got, expected, tol))
    return (f"{name} differs from the reference", "compare each step with the chapter's formula.",
            _first_difference(name, got, expected, tol))


def judge(session: Session, where: str, case: Case, got: object, expected: object,
          outputs: Sequence[str], mistakes: Sequence[Mistake] = (), tol: float = 1e-5,
          same_dtype: bool | None = None,
          steps: Callable[[object, object], Found | None] | None = None) -> CheckResult | None:
    """None when ``got`` is right; otherwise the failure (not finished), naming the mistake first.

    ``expected`` is the reference's result: one tensor or number (``outputs`` has one name) or a
    tuple (one name per item). Order: type -> device/dtype -> shape -> values -> known mistakes
    -> the first difference; a known mistake matched after the type step replaces the generic verdict.
    ``same_dtype``: None (the default) names a float64 result when every float tensor among the
    case's inputs is float32 (it breaks the next product with a float32 tensor); True makes every
    dtype exact; False accepts float32 or float64 (a statistic, not an activation).
    ``steps(got, expected)``: the search over the reference's named steps (``_steps.py``), tried when
    values differ and no listed mistake matches; what it finds is the first line (how the values
    differ moves to the details).
    """
    for mistake in (m for m in mistakes if m.early):
        fields = mistake.matches(case, got, tol=max(tol, 1e-4), expected=expected)
        if fields is not None:
            name, hint = mistake.text(fields)
            return session.fail(f"{name} ({where})", hint)
    many = len(outputs) > 1
    names = ", ".join(outputs)
    code = f"`return {names}`" if all(o.isidentifier() for o in outputs) else f"a `return` of {names}"
    if got is None:
        return session.fail(f"your function returned None ({where})",
                            f"end your function with {code}: a function without `return` gives None.")
    if many:
        if not isinstance(got, (tuple, list)):
            return session.fail(f"returned one {_describe(got)}, expected a tuple ({', '.join(outputs)}) ({where})",
                                f"return all {len(outputs)} results: {code}.")
        if len(got) != len(outputs):
            return session.fail(f"returned a {type(got).__name__} of {len(got)} items, expected {len(outputs)} "
                                f"({', '.join(outputs)}) ({where})", f"end with {code}.")
        items, wanted = list(got), list(expected)
    else:
        if isinstance(got, (tuple, list)):
            return session.fail(f"returned a {type(got).__name__} of {len(got)} items, expected one "
                                f"{'number' if isinstance(expected, (int, float)) else 'tensor'} ({outputs[0]}) "
                                f"({where})",
                                f"return only {outputs[0]}, one {'number' if isinstance(expected, (int, float)) else 'tensor'}, "
                                "not a tuple or a list.")
        items, wanted = [got], [expected]
    floats = [v.dtype for v in (*case.args.values(), *case.kwargs.values())
              if isinstance(v, Tensor) and v.dtype.is_floating_point]
    strict: bool | str = (same_dtype if same_dtype is not None
                          else "float32" if floats and set(floats) == {torch.float32} else False)
    problems = [(n, _verdict_one(n, g, e, tol, strict)) for n, g, e in zip(outputs, items, wanted, strict=True)]
    problems = [(n, p) for n, p in problems if p is not None]
    if not problems:
        return None
    found_step = None
    values_differ = all(p[0].endswith(("differs from the reference", "contains NaN or inf")) or " has shape (" in p[0]
                        for _, p in problems)
    for mistake in (*(m for m in mistakes if not m.fallback), None, *(m for m in mistakes if m.fallback)):
        if mistake is None:  # the listed mistakes did not match: search the steps before the catch-alls
            found_step = steps(got, expected) if steps is not None and values_differ else None
            if found_step is not None and found_step.sure:
                break
            continue
        fields = mistake.matches(case, got, tol=max(tol, 1e-4), expected=expected)
        if fields is not None:
            name, hint = mistake.text(fields)
            what, _, details = problems[0][1]
            also = [] if details or what.split(" ")[0] in name else [f"also: {what}"]
            return session.fail(f"{name} ({where})", hint, [*details[:1], *also, *_expected_got(outputs, items, wanted)])
    what, hint, details = problems[0][1]
    if len(problems) > 1 and all(p[2] and p[0].endswith("differs from the reference") for _, p in problems):
        what = f"{' and '.join(n for n, _ in problems)} differ from the reference"
        details = [line for _, p in problems for line in p[2][:1]]
    if what.endswith("differs from the reference") or what.endswith("differ from the reference"):
        # No listed mistake: say how and where each wrong item differs (_diagnosis.py).
        found = [(name, diagnose(name, items[outputs.index(name)], wanted[outputs.index(name)], case.info, tol))
                 for name, problem in problems if problem[0].endswith("differs from the reference")]
        found = [(name, f) for name, f in found if f is not None]
        if len(found) == 1:
            what = f"{what}: {found[0][1][0]}"
            details = [*found[0][1][1], *details]
        elif found:
            what = f"{what}: " + "; ".join(f"{name}: {how}" for name, (how, _) in found)
            details = [*(line for _, (_, lines) in found for line in lines), *details]
    if found_step is not None:
        how = what.split(": ", 1)[1] if ": " in what else ""
        what = f"{what.split(': ', 1)[0]} {found_step.says()}"
        hint = found_step.fix()
        details = [*([f"how the values differ: {how}"] if how else []), *details]
    return session.fail(f"{what} ({where})", hint, [*details, *_expected_got(outputs, items, wanted)])


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"tensor {str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
    if isinstance(value, (int, float)):
        return f"{value:.6g}" if isinstance(value, float) else str(value)
    return type(value).__name__


def _expected_got(outputs: Sequence[str], items: Sequence[object], wanted: Sequence[object]) -> list[str]:
    """The line "expected <types and shapes>; got <...>", or nothing when the two read the same."""
    if all(_describe(g) == _describe(w) for g, w in zip(items, wanted, strict=True)):
        return []
    return [f"expected {', '.join(f'{n} {_describe(w)}' for n, w in zip(outputs, wanted, strict=True))}; "
            f"got {', '.join(f'{n} {_describe(g)}' for n, g in zip(outputs, items, strict=True))}"]


def _relative_change(base: object, moved: object) -> float:
    """The largest ``|moved - base| / (1 + |base|)`` over the tensors of two results (what allclose's rtol = atol reads)."""
    if isinstance(base, (tuple, list)):
        return max((_relative_change(b, m) for b, m in zip(base, moved, strict=True)), default=0.0)
    if isinstance(base, Tensor) and base.dtype.is_floating_point and isinstance(moved, Tensor):
        change = ((moved.double() - base.double()).abs() / (1 + base.double().abs())).nan_to_num(0.0, 0.0, 0.0)
        return float(change.max()) if change.numel() else 0.0
    return 0.0


#: A measured tolerance above this is not rounding but a jump of the reference (ties, comparisons).
MAX_MEASURED_TOL = 1e-3


def float32_tolerance(reference: Callable[..., object], case: Case, tol: float,
                      sound: Sequence[Callable[..., object]] = ()) -> float:
    """The tolerance every numerically sound float32 answer meets on ``case``: measured, not guessed.

    Run in float64, the reference's result moves when its float32 inputs move by a few of float32's
    roundings (a relative 2^-22, four units in the last place, as a few float32 operations lose):
    that much any correct float32 formulation may differ from it (e.g. ``exp(x - logsumexp(x))`` on
    logits in the hundreds). ``sound`` are other correct formulations the check knows: each is run
    in float32 and its distance from the float64 reference counts too (twice). The tolerance is the
    largest of ``tol``, four times the largest move over two nudges, and twice the sound ones' error,
    at most :data:`MAX_MEASURED_TOL`; a nudge that moves the result more than that found a jump (a
    tie broken at top-k, a comparison flipped), not rounding, and is not counted. Cases with module arguments, or whose
    reference refuses float64, keep ``tol``.
    """
    values = list(case.args.values()) + list(case.kwargs.values())
    if any(isinstance(v, torch.nn.Module) for v in values) or not any(
            isinstance(v, Tensor) and v.dtype == torch.float32 for v in values):
        return tol
    g = torch.Generator().manual_seed(0)

    def nudged(v: object, amount: float) -> object:
        if isinstance(v, Tensor) and v.dtype == torch.float32:
            noise = 2 * torch.rand(v.shape, generator=g, dtype=torch.float64) - 1
            return v.detach().cpu().double() * (1 + amount * noise)
        return _copy(v)

    try:
        with torch.no_grad():
            def run(amount: float) -> object:
                return reference(*[nudged(v, amount) for v in case.args.values()],
                                 **{k: nudged(v, amount) for k, v in case.kwargs.items()})

            base = run(0.0)
            worst = 4 * max(_relative_change(base, run(2.0**-22)) for _ in range(2))
            if worst > MAX_MEASURED_TOL:  # a jump (ties at top-k, a comparison): the reference is not smooth here
                worst = 0.0
            for other in sound:
                worst = max(worst, 2 * _relative_change(base, other(*[_copy(v) for v in case.args.values()],
                                                                    **{k: _copy(v) for k, v in case.kwargs.items()})))
    except Exception:  # a reference that wants float32 inputs: keep the check's tolerance
        return tol
    return max(tol, min(worst, MAX_MEASURED_TOL))


def run_check(session: Session, fn: Callable[..., object], cases: Sequence[Case], reference: Callable[..., object],
              outputs: Sequence[str], mistakes: Sequence[Mistake] = (), tol: float = 1e-5,
              before: Sequence[Mistake] = (), same_dtype: bool | None = None,
              expected_of: Callable[[Case], object] | None = None,
              sound: Sequence[Callable[..., object]] = (),
              steps: Callable[..., object] | None = None) -> CheckResult | None:
    """Run ``fn`` on every case and judge it against ``reference``: None when all pass, else the failure.

    ``before``: mistakes recognised by a predicate on the function itself or its signature
    (``looks_like(case, fn)``), tried once before the first call (e.g. a missing keyword).
    ``expected_of(case)``, when given, replaces ``reference(*args)`` (a reference module kept in
    ``case.info``). A wrong result that no mistake names is recomputed once: when the second
    call gives another result, the feedback says the function is random (dropout left on).
    Each case's tolerance is measured (:func:`float32_tolerance`; ``sound``: other correct
    formulations whose float32 error it must admit). The failure is not finished, so a check made
    of several functions can go on to the next. A wrong result no listed mistake names is searched
    for among small changes to the named steps (``_steps.py``) of ``steps``, a version of the reference
    written with ``step`` (by default ``reference`` itself, when it is written so).
    """
    for mistake in before:
        if cases and mistake.looks_like is not None and mistake.looks_like(cases[0], fn):
            name, hint = mistake.text(dict(cases[0].info))
            return session.fail(name, hint)
    for number, case in enumerate(cases, start=1):
        where = f"case {number}/{len(cases)}: {case.description}"
        session.error = None
        got, failure = session.call(where, fn, case.args, case.kwargs)
        stepped = steps if steps is not None else reference if expected_of is None else None
        if failure is not None:
            if (isinstance(session.error, (RuntimeError, IndexError, ValueError)) and stepped is not None
                    and not isinstance(session.error, NotImplementedError)):
                # a computing error (not "not implemented yet", not a signature): read against the steps
                error = session.error
                found = _searcher(session, fn, cases, number, stepped, reference, expected_of, tol)(error, None)
                read = found.says() if found is not None else explain_error(stepped, case, error)
                if read is not None:
                    failure.summary = f"{read}: {failure.summary}"
            return failure
        if expected_of is not None:
            expected = expected_of(case)
        else:
            expected = reference(*[_copy(v) for v in case.args.values()],
                                 **{k: _copy(v) for k, v in case.kwargs.items()})
        case_tol = tol if expected_of is not None else float32_tolerance(reference, case, tol, sound)
        searcher = None if stepped is None else _searcher(session, fn, cases, number, stepped, reference,
                                                           expected_of, case_tol)
        failure = judge(session, where, case, got, expected, outputs, mistakes, case_tol, same_dtype, searcher)
        if (failure is not None and _tensors(got)
                and not any(m.matches(case, got, max(tol, 1e-4), expected) is not None for m in mistakes)):
            again, second_failure = session.call(where, fn, case.args, case.kwargs)
            if second_failure is None and not _same(again, got, max(tol, 1e-4)):
                failure = session.fail(f"the result changes from one call to the next on the same inputs: dropout "
                                       f"is on, or something else is random ({where})",
                                       "a function of its inputs gives the same result every time: remove "
                                       "`F.dropout(...)`/`nn.Dropout` (or pass `training=False`; a model evaluates "
                                       "with `model.eval()`), and any `torch.rand*` call.")
        if failure is not None:
            if number > 1:
                failure.details.append("case 1 passed" if number == 2 else f"cases 1-{number - 1} passed")
            return failure
    return None


def _searcher(session: Session, fn: Callable[..., object], cases: Sequence[Case], number: int,
              stepped: Callable[..., object], reference: Callable[..., object],
              expected_of: Callable[[Case], object] | None, tol: float) -> Callable[[object, object], Found | None]:
    """The step search for case ``number`` (1-based): the cases before it passed (the learner's result there
    is the reference's); the ones after it are called only when a change needs comparing with them."""

    def expected(case: Case) -> object:
        if expected_of is not None:
            return expected_of(case)
        return reference(*[_copy(v) for v in case.args.values()], **{k: _copy(v) for k, v in case.kwargs.items()})

    def learner(case: Case) -> Callable[[], object]:
        def result() -> object:
            got, failure = session.call(f"the step search on {case.description}", fn, case.args, case.kwargs)
            return None if failure is not None else got
        return result

    def search(got: object, wanted: object) -> Found | None:
        """``got``: the learner's result, or the exception its code raised (``wanted`` then None)."""
        if wanted is None:
            wanted = expected(cases[number - 1])
        others = [(c, (lambda c=c: expected(c))) for c in cases[:number - 1]]
        others += [(c, learner(c)) for c in cases[number:]]
        return search_steps(stepped, cases[number - 1], got, wanted, tol, others, SEARCH_SECONDS * session.slowness)

    return search


def passed(session: Session, summary: str) -> CheckResult:
    """The passing result."""
    return CheckResult(session.name, True, summary)


def done(result: CheckResult) -> CheckResult:
    """Finish ``result`` (raises under ``LESSONS_SRC_STRICT=1`` if it failed)."""
    return finish(result)


def global_max_softmax(scores_of: Callable[[Case], Tensor], item: int | None = None) -> Mistake:
    """The softmax stabilised with the largest score of the whole tensor instead of each row's own.

    ``scores_of(case)``: the case's scores before the softmax (masked entries -inf). Recognised when
    every row that came back with NaN or inf has a finite maximum more than 80 below the tensor's
    largest score: there exp(score - global max) underflows to 0 on the whole row, and 0 / 0 = NaN.
    ``item``: which returned item holds the weights, when the function returns several.
    """

    def looks_like(case: Case, got: object) -> dict[str, object] | None:
        weights = got[item] if item is not None and isinstance(got, (tuple, list)) else got
        if not isinstance(weights, Tensor) or not weights.dtype.is_floating_point:
            return None
        scores = scores_of(case).detach().double()
        if weights.shape != scores.shape:
            return None
        bad = (~torch.isfinite(weights.detach().double())).any(-1)
        row_max = scores.amax(-1)
        far = torch.isfinite(row_max) & (row_max < float(scores.max()) - 80)
        if not bad.any() or not bool((far | ~bad).all()):
            return None
        rows = [i for i in range(bad.shape[-1]) if bool(bad.select(-1, i).any())]
        return {"rows": ", ".join(map(str, rows)), "gap": f"{float(scores.max() - row_max[bad].max()):.0f}"}

    return Mistake("the softmax subtracts the largest score of the whole tensor, not each row's own: the scores of "
                   "query {rows} lie {gap} or more below it, so their exponentials underflow to 0 and 0 / 0 = NaN",
                   "stabilise each row with its own maximum: `scores - scores.amax(dim=-1, keepdim=True)` (the "
                   "`keepdim` keeps it a column), or use `torch.softmax`, which does it for you.",
                   looks_like=looks_like)


def attention_variants(qkv_of: Callable[[Case], tuple[Tensor, Tensor, Tensor]], item: int = 0) -> list[Mistake]:
    """Mistakes of any attention step, recognised from the case's own q, K and V.

    ``qkv_of(case)``: the query ``(..., L_q, d_k)`` and the keys and values ``(..., L_k, d)`` the
    step must attend over (rotated, appended and expanded to every query head as the reference does).
    ``item``: which returned item is the attention's output. Each mistake recomputes the attention
    with one thing changed: the scale (√L_k, the number of keys, instead of √d_k; multiplied; d_k),
    the softmax's axis (the queries, the heads), the keys attended to (only the newest, only the first).
    """

    def output(case: Case, got: object) -> Tensor | None:
        out = got[item] if isinstance(got, (tuple, list)) and len(got) > item else got
        return out.detach().double() if isinstance(out, Tensor) and out.dtype.is_floating_point else None

    def variant(attend: Callable[[Tensor, Tensor, Tensor], Tensor | None]) -> Callable[[Case, object], bool]:
        def looks_like(case: Case, got: object) -> bool:
            out = output(case, got)
            q, k, v = (t.detach().double() for t in qkv_of(case))
            wrong = attend(q, k, v)
            return (out is not None and wrong is not None and wrong.shape == out.shape
                    and bool(torch.allclose(out, wrong, rtol=1e-4, atol=1e-4)))

        return looks_like

    def softmax_attend(scale: Callable[[Tensor, Tensor], float], dim: int = -1,
                       keys: slice = slice(None)) -> Callable[[Tensor, Tensor, Tensor], Tensor | None]:
        def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor | None:
            k, v = k[..., keys, :], v[..., keys, :]
            if k.size(-2) == 0 or (dim != -1 and q.dim() + dim < 0):
                return None
            return torch.softmax(q @ k.transpose(-2, -1) * scale(q, k), dim=dim) @ v

        return attend

    right = lambda q, k: q.size(-1) ** -0.5  # noqa: E731
    return [
        Mistake("the scores are divided by sqrt({L_k}), the square root of the number of keys (n + 1), not by "
                "sqrt(d_k)", "scale by the width of a query and key, d_k = `q.size(-1)`: `/ math.sqrt(q.size(-1))`; "
                "the number of keys grows with every step, the width does not.",
                looks_like=lambda c, g: variant(softmax_attend(lambda q, k: k.size(-2) ** -0.5))(c, g)
                and {"L_k": qkv_of(c)[1].size(-2)}, when=lambda c: qkv_of(c)[1].size(-2) not in (1, qkv_of(c)[0].size(-1))),
        Mistake("the scores are multiplied by sqrt(d_k) instead of divided", "scale with `/ math.sqrt(d_k)`.",
                looks_like=variant(softmax_attend(lambda q, k: q.size(-1) ** 0.5))),
        Mistake("the scores are divided by d_k instead of sqrt(d_k)", "scale with `/ math.sqrt(d_k)`, not `/ d_k`.",
                looks_like=variant(softmax_attend(lambda q, k: 1 / q.size(-1)))),
        Mistake("the softmax runs over the queries (dim=-2), not over the keys: with one query every weight is 1, so "
                "the output is the sum of the values", "take the softmax over the keys, the last dim: "
                "`torch.softmax(scores, dim=-1)`.", looks_like=variant(softmax_attend(right, dim=-2))),
        Mistake("the softmax runs over the heads (dim=1), not over the keys",
                "take the softmax over the keys, the last dim: `torch.softmax(scores, dim=-1)`; each head "
                "normalises its own weights.", looks_like=variant(softmax_attend(right, dim=-3))),
        Mistake("the new token attends only to its own key and value, not to the cached ones",
                "attend over the whole cache with the new key and value appended (n + 1 keys): the cache is the "
                "token's past.", looks_like=variant(softmax_attend(right, keys=slice(-1, None))),
                when=lambda c: qkv_of(c)[1].size(-2) > 1),
        Mistake("the new token attends only to the first key: a causal mask with one query (e.g. `is_causal=True`, "
                "which PyTorch aligns top-left) hides every other key",
                "use no mask: every cached key is in the new token's past, so it may attend to all of them.",
                looks_like=variant(softmax_attend(right, keys=slice(0, 1))), when=lambda c: qkv_of(c)[1].size(-2) > 1),
    ]


# -- masks: a pattern whatever the dtype -------------------------------------------------------------


def mask_pattern(got: object) -> Tensor | None:
    """The bool pattern of a learner's mask of any real dtype (True = may attend), or None.

    A bool mask is itself; an additive float mask (0 where allowed, -inf or a large negative
    number where blocked) reads as ``== 0``; any other number as ``!= 0``. The mistakes of a mask
    exercise are judged on this pattern, so a float mask that is also off by one is named for
    both (the dtype comes as an "also:" line).
    """
    if not isinstance(got, Tensor) or got.dtype.is_complex:
        return None
    if got.dtype == torch.bool:
        return got
    if got.is_floating_point() and bool((got <= 0).all()) and bool((got < 0).any()):
        return got == 0
    return got != 0


def _additive(got: Tensor) -> bool:
    return got.is_floating_point() and bool((got <= 0).all()) and bool((got < 0).any())


def mask_mistakes(reference: Callable[..., Tensor], what_right: str = "the values are right") -> list[Mistake]:
    """The two dtype mistakes of any mask exercise: a right pattern as an additive float mask, or as numbers."""

    def right(additive: bool) -> Callable[[Case, object], object]:
        def predicate(case: Case, got: object) -> object:
            if not isinstance(got, Tensor) or got.dtype in (torch.bool,) or got.dtype.is_complex:
                return None
            expected = reference(*case.args.values(), **case.kwargs)
            if _additive(got) != additive or got.shape != expected.shape:
                return None
            return {"dtype": got.dtype} if torch.equal(mask_pattern(got), expected) else None

        return predicate

    return [
        Mistake(f"an additive float mask (0 / -inf, dtype {{dtype}}), not a boolean one; {what_right}",
                "return the boolean mask itself, True = may attend (what masked_fill and "
                "F.scaled_dot_product_attention take as a mask); convert with `mask == 0`, or build it with "
                "comparisons. A float mask is *added* to the scores.", looks_like=right(True)),
        Mistake(f"dtype {{dtype}}, expected torch.bool; {what_right}",
                "return a boolean mask: comparisons (`<`, `>=`) and `&` give bools directly, "
                "`torch.ones(..., dtype=torch.bool)` makes a boolean tensor, `.bool()` converts a 0/1 one. "
                "`~mask` and `masked_fill(~mask, ...)` only work on booleans.", looks_like=right(False)),
    ]


def pattern_is(wrong: Callable[..., Tensor]) -> Callable[[Case, object], bool]:
    """A predicate: the learner's mask pattern (:func:`mask_pattern`) equals ``wrong(*case.args.values())``."""

    def predicate(case: Case, got: object) -> bool:
        pattern = mask_pattern(got)
        expected = wrong(*case.args.values(), **case.kwargs)
        return pattern is not None and pattern.shape == expected.shape and torch.equal(pattern, expected)

    return predicate


def shape_is(shape: Callable[..., tuple[int, ...] | None]) -> Callable[[Case, object], bool]:
    """A predicate: the learner's tensor has ``shape(**case.info)`` (``info["dims"]``, the axes' names, left out)."""

    def predicate(case: Case, got: object) -> bool:
        info = {k: v for k, v in case.info.items() if k != "dims"}
        return isinstance(got, Tensor) and tuple(got.shape) == shape(**info)

    return predicate

