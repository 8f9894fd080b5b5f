"""Every check against its table of plausible learners (``checks_learners.py``).

A right answer passes; a wrong one fails, with feedback whose first line names its mistake, a
hint, and no exception; nothing hangs (the framework's time limit is lowered here).
"""

import pytest
from checks_learners import load

import lessons_src.checks as checks
from lessons_src.checks import CheckResult
from lessons_src.checks._framework import time_limits

LEARNERS = load()


@pytest.mark.parametrize("learner", LEARNERS, ids=[f"{x.check}-{x.name}" for x in LEARNERS])
def test_learner(learner):
    # Generous, and times the machine's slowness: this table is about what a check says, not about time (a busy 2-core runner trains the
    # shift-attention check's model slowly); the contract test tries a learner that never returns.
    with time_limits(10.0, 120.0, follow_machine=True):
        result = getattr(checks, learner.check)(*learner.fns)
    assert isinstance(result, CheckResult)
    first = str(result).splitlines()[0]
    if learner.mistake is None:
        assert result, str(result)
        assert first.startswith("PASS")
    else:
        assert not result, f"a wrong answer passed: {learner.name}\n{result}"
        assert learner.mistake in first, str(result)
        assert result.hint, str(result)


def test_the_table_counts():
    """At least 6 wrong and 2 right-but-unusual learners for every check in the table."""
    for check in {x.check for x in LEARNERS}:
        right = sum(x.mistake is None for x in LEARNERS if x.check == check)
        wrong = sum(x.mistake is not None for x in LEARNERS if x.check == check)
        assert right >= 2 and wrong >= 6, (check, right, wrong)
