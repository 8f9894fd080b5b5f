"""How often a check's first line says something specific about a wrong answer nobody listed.

    python benchmarks/bench_check_feedback.py [--only SUBSTRING ...] [--show]

Runs every answer of ``tests/blind_learners/answers_*.py`` (written from the exercise text alone by
people who had read no check, test or solution) through its check, each in a fresh forked process
(a check remembers its last failure), and reads each first line against ``ratings.json``: how an
independent rater classified that exact line (SPECIFIC, weak or not; GENERIC; MISLEADING). A first
line that changed since it was rated counts as UNRATED and is printed: have it rated before you
quote the figure. Prints, per answer set and in total, the share of wrong answers whose first line
is SPECIFIC, and every wrong answer that passes, right answer that fails, crash or time-out; exits 1
on any of those or when the share is below 90%.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import multiprocessing
import re
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "tests" / "blind_learners"
SETS = ("answers_01_08", "answers_09_16", "answers_heldout",
        *(f"answers_s35{s}_{p}" for s in "ab" for p in ("01_06", "07_12", "13_18")))
#: The least share of wrong answers whose first line is SPECIFIC (an UNRATED line counts as not).
BUDGET = 0.90


def _normalise(line: str) -> str:
    return re.sub(r"\(case \d+/\d+", "(case", line or "")


def _answers(stem: str) -> list[dict]:
    spec = importlib.util.spec_from_file_location(f"blind_{stem}", HERE / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ANSWERS


def _run(answer: dict, queue: multiprocessing.Queue) -> None:
    import lessons_src.checks as checks

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            result = getattr(checks, answer["check"])(*answer["fns"])
        queue.put(("PASS" if result else "FAIL", str(result).splitlines()[0]))
    except BaseException as exc:  # a check must never raise: that is a finding
        queue.put(("CRASH", f"{type(exc).__name__}: {exc}"))


def first_line(answer: dict, timeout: float) -> tuple[str, str]:
    queue: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_run, args=(answer, queue))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        return "TIMEOUT", ""
    return queue.get() if not queue.empty() else ("CRASH", f"exit code {child.exitcode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="answer sets or checks whose name contains one of these")
    parser.add_argument("--show", action="store_true", help="print every wrong answer's first line and rating")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per answer")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    import lessons_src.checks  # noqa: F401  (imported once, before the forks)

    ratings = json.loads((HERE / "ratings.json").read_text(encoding="utf-8"))
    totals: Counter = Counter()
    problems = []
    slowest: list[tuple[float, str]] = []  # seconds per answer (the check and its step search), in a fresh fork
    for stem in SETS:
        counts: Counter = Counter()
        for answer in _answers(stem):
            if args.only and not any(s in stem or s in answer["check"] for s in args.only):
                continue
            start = time.perf_counter()
            status, line = first_line(answer, args.timeout)
            slowest.append((time.perf_counter() - start, f"{stem}:{answer['check']}/{answer['name']}"))
            key = f"{stem}:{answer['check']}/{answer['name']}"
            if answer["right"]:
                counts["right"] += 1
                if status != "PASS":
                    problems.append(f"RIGHT ANSWER {status}: {key}: {line}")
                continue
            counts["wrong"] += 1
            if status != "FAIL":
                counts[status] += 1
                problems.append(f"WRONG ANSWER {status}: {key}: {line}")
                continue
            rated = [r for r in ratings.get(key, []) if _normalise(r["first_line"]) == _normalise(line)]
            verdict = rated[0]["verdict"] if rated else "UNRATED"
            weak = bool(rated and rated[0].get("weak"))
            counts[verdict] += 1
            counts["weak"] += verdict == "SPECIFIC" and weak
            if verdict == "UNRATED":
                problems.append(f"UNRATED: {key} ({answer['intent']}): {line}")
            if args.show:
                print(f"{verdict + ('(weak)' if weak else ''):<16} {key}: {line[:160]}")
        if counts["wrong"]:
            share = 100 * counts["SPECIFIC"] / counts["wrong"]
            strong = 100 * (counts["SPECIFIC"] - counts["weak"]) / counts["wrong"]
            print(f"{stem}: {counts['wrong']} wrong, {counts['right']} right answers; first line SPECIFIC "
                  f"{counts['SPECIFIC']} ({share:.0f}%, of them weak {counts['weak']}; {strong:.0f}% naming the "
                  f"cause), GENERIC {counts['GENERIC']}, MISLEADING {counts['MISLEADING']}, UNRATED "
                  f"{counts['UNRATED']}, passes/crashes/time-outs {counts['PASS'] + counts['CRASH'] + counts['TIMEOUT']}")
        totals.update(counts)
    if totals["wrong"]:
        print(f"all: {totals['wrong']} wrong answers, SPECIFIC {100 * totals['SPECIFIC'] / totals['wrong']:.1f}%")
    print("slowest answers (s, the check with its step search, in a fork): "
          + ", ".join(f"{t:.2f} {k}" for t, k in sorted(slowest, reverse=True)[:3]))
    for line in problems:
        print(line)
    share = totals["SPECIFIC"] / max(totals["wrong"], 1)
    if share < BUDGET:
        print(f"below the budget: {100 * share:.1f}% SPECIFIC, the budget is {100 * BUDGET:.0f}% (issue 24)")
    sys.exit(1 if share < BUDGET or any(not p.startswith("UNRATED") for p in problems) else 0)


if __name__ == "__main__":
    main()
