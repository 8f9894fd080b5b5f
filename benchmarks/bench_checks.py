"""Each exercise check's time on its reference solution, and how many times it calls the learner.

The figures the checks' tests used to assert as wall-clock limits (timings on a shared machine
make flaky tests): every check should take about 1 s or less on the reference. The references
are the ones the contract test uses (``tests/checks_learners.py``). Each check runs once to warm
up, then ``--repeat`` times; the median is printed.
Usage: python benchmarks/bench_checks.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import torch  # noqa: E402
from checks_learners import REFERENCES  # noqa: E402
from test_checks_contract import CHECKS, REGISTRY  # noqa: E402

import lessons_src.checks as checks  # noqa: E402
from lessons_src.checks._framework import CALLS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'check':40s} {'median s':>9s} {'calls':>6s}  passed")
    for name in CHECKS:
        learners = REGISTRY[name].learners if name in REGISTRY else REFERENCES[name]
        check = getattr(checks, name)
        check(*learners)  # warm-up
        times = []
        for _ in range(args.repeat):
            before = CALLS.calls
            start = time.perf_counter()
            result = check(*learners)
            times.append(time.perf_counter() - start)
            calls = CALLS.calls - before
        print(f"{name:40s} {statistics.median(times):9.3f} {calls:6d}  {bool(result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
