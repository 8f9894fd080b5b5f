"""The table of plausible learners for the exercise checks: right ones written unusually, and wrong ones.

Each :class:`Learner` is what a learner might hand to one check (``fns``, in the order the check
takes them) and what the check must say: ``mistake=None`` for a right answer (it must pass), else
words the *first line* of the feedback must contain (it names the mistake). Each check's rows
live in its own test file (``tests/test_checks_<module>.py``), which registers them with
:func:`add` and its reference learner(s) in :data:`REFERENCES`; :func:`load` imports them all.
The pathological learners (not callable, raising, None, wrong tuple, NaN, hanging, wrong device,
changing an input in place) are built for every check from its reference in
``test_checks_contract.py``. ``tests/test_checks_learners.py`` runs the table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Learner:
    check: str
    name: str
    fns: tuple[Callable[..., object], ...]
    mistake: str | None = None  # None: right, must pass; else the first line of the feedback names it


LEARNERS: list[Learner] = []

#: Each check's reference learner(s), in the order the check takes them.
REFERENCES: dict[str, tuple[Callable[..., object], ...]] = {}


def add(check: str, mistake: str | None = None, name: str | None = None, position: int = 0
        ) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """Register the decorated function as a learner of ``check``, at ``position`` among the reference's."""

    def register(fn: Callable[..., object]) -> Callable[..., object]:
        fns = list(REFERENCES[check])
        fns[position] = fn
        LEARNERS.append(Learner(check, name or fn.__name__, tuple(fns), mistake))
        return fn

    return register


def add_fns(check: str, fns: tuple[Callable[..., object], ...], mistake: str | None = None, name: str = "") -> None:
    """Register a whole set of functions (a check that takes several) as one learner."""
    LEARNERS.append(Learner(check, name or "+".join(getattr(f, "__name__", "x") for f in fns), tuple(fns), mistake))


def load() -> list[Learner]:
    """Import every ``tests/test_checks_*.py`` (they register their rows) and return the table."""
    for path in sorted(Path(__file__).parent.glob("test_checks_*.py")):
        importlib.import_module(path.stem)
    return LEARNERS
