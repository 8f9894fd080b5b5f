"""Answers written by people who had read no check: rows of the learner table, after they were measured.

``blind_learners/answers_01_08.py`` and ``answers_09_16.py`` (319 wrong and 52 right answers) and
``answers_heldout.py`` (105 wrong, 21 right, written later and kept away from the checks while they
changed) were written from the exercise text alone, without the checks, the tests or the solutions
(CONTRIBUTING.md, "Feedback for mistakes nobody listed"). Each answer file's ``ANSWERS`` lists the
functions handed to one check, what the writer meant (``intent``) and whether it is right.
``answers_s35a_*.py`` (309 wrong, 49 right) and ``answers_s35b_*.py`` (254 wrong, 46 right) were written
the same way for issue 35 (feedback that names the step): the first set while the step search was built
(it was read while tuning it), the second after, kept away until it was measured once (CONTRIBUTING.md,
"Feedback that names the step").
``blind_learners/expected.json`` holds, for each, the words its first line of feedback had when
it was last read and rated (None: it must pass). ``tests/test_checks_learners.py`` runs them with
the rest of the table.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from checks_learners import add_fns

HERE = Path(__file__).parent / "blind_learners"
EXPECTED: dict[str, str | None] = json.loads((HERE / "expected.json").read_text(encoding="utf-8"))


def _answers(stem: str) -> list[dict]:
    spec = importlib.util.spec_from_file_location(f"blind_learners_{stem}", HERE / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ANSWERS


STEMS = ("answers_01_08", "answers_09_16", "answers_heldout", *(f"answers_s35{s}_{p}" for s in "ab"
                                                                 for p in ("01_06", "07_12", "13_18")))

for _stem in STEMS:
    for _answer in _answers(_stem):
        _key = f"{_stem}:{_answer['check']}/{_answer['name']}"
        add_fns(_answer["check"], tuple(_answer["fns"]), EXPECTED[_key], name=f"blind-{_stem[8:]}-{_answer['name']}")


def test_every_answer_has_its_expected_first_line():
    keys = {f"{stem}:{a['check']}/{a['name']}" for stem in STEMS for a in _answers(stem)}
    assert keys == set(EXPECTED), sorted(keys ^ set(EXPECTED))[:5]
    assert all((EXPECTED[k] is None) == a["right"] for stem in STEMS
               for a in _answers(stem) for k in [f"{stem}:{a['check']}/{a['name']}"])
