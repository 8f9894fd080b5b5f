"""The test suite's budgets, measured: the gate's time per stage, the marginal cost of one chapter, and the
whole run as a multiple of the reference notebook timed in the same run. Exits 1 when a budget is missed.

Budgets (CONTRIBUTING.md, "Two tiers"): the gate (`bash scripts/test.sh`, what CI's `.ci/run` runs) within
30 minutes on the project's 2-core machine; one more chapter (its page, exercise and solution) adds at most
60 s to it; the full tier (`bash scripts/test.sh full`) within 90 minutes.

By default it clones this repository's HEAD into a scratch folder and runs `CI=true bash .ci/run` there, as CI
does on a fresh clone (installs included), timing bench_pages.py's reference notebook before and after. With
``--reports DIR`` it reads the reports of a run already made (``_build/test-reports/`` of that checkout:
``stages.txt``, written by scripts/test.sh, and one JUnit XML per pytest stage) and runs nothing.

How a chapter's marginal cost is counted, from the run's own records: the notebooks stage's executions of its
three pages (each notebook's own run, without the venvs' set-up, divided by the stage's two workers), the site
stage's tests of its three pages (divided by its two workers) plus their share of the site build, the larger of the unit tests named after its pages or
its check module (tests/test_checks_<topic>.py) and an even share of the unit stage, its figures' share of the
widget probe (frontend), and an even share of the load stage. Printed per chapter, with the median and
the largest; the budget applies to the largest.

Usage: python benchmarks/bench_gate.py [--tier gate|full] [--reports DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import book  # noqa: E402  (scripts/book.py: the pages)

BUDGET_S = {"gate": 30 * 60, "full": 90 * 60}
CHAPTER_BUDGET_S = 60.0
NOTEBOOK_WORKERS = 2  # scripts/test.sh: pytest -m launch -n 2
SITE_WORKERS = 2  # scripts/test.sh: pytest -m site -n 2


def read_stages(reports: Path) -> dict[str, tuple[float, str]]:
    """{stage: (seconds, 'ok' or 'FAILED')} from scripts/test.sh's stages.txt, in order (setup first)."""
    stages = {}
    for line in (reports / "stages.txt").read_text().splitlines():
        name, seconds, outcome, *_ = line.split()
        stages[name] = (float(seconds), outcome)
    return stages


def read_testcases(reports: Path) -> dict[str, list[tuple[str, float]]]:
    """{stage: [(classname::name, seconds)]} from each stage's JUnit XML."""
    cases = {}
    for xml in sorted(reports.glob("*.xml")):
        rows = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            # A launch test records the notebook's own run (launch_seconds): without the wait for the venv's
            # first notebook to install the package, which is paid once per venv, not per chapter.
            own = {p.get("name"): p.get("value") for p in case.iter("property")}.get("launch_seconds")
            seconds = float(own) if own is not None else float(case.get("time") or 0.0)
            rows.append((f"{case.get('classname')}::{case.get('name')}", seconds))
        cases[xml.stem] = rows
    return cases


def chapter_costs(stages: dict, cases: dict, site_build_s: float | None) -> dict[str, dict[str, float]]:
    """Seconds each chapter adds to each stage (see the module's docstring)."""
    chapters = [page.split("/", 1)[1] for page in book.pages("Chapters")]  # "01_attention_from_scratch", ...
    pages = book.pages()
    figures = _figures_per_chapter(chapters)
    costs = {}
    for stem in chapters:
        topic = stem[3:]
        own = re.compile(rf"(^|[^0-9A-Za-z_]){re.escape(stem)}([^0-9A-Za-z_]|$)")
        row = {}
        row["notebooks"] = sum(t for name, t in cases.get("notebooks", []) if own.search(name)) / NOTEBOOK_WORKERS
        site = sum(t for name, t in cases.get("site", []) if own.search(name)) / SITE_WORKERS
        if site_build_s is not None:
            site += site_build_s * sum(1 for p in pages if p.endswith("/" + stem)) / len(pages)
        row["site"] = site
        # Unit: the larger of the tests named after the chapter and an even share of the stage (a chapter
        # brings its module's, its check's, its figure's tests and its learner rows, not all named after it).
        named = sum(t for name, t in cases.get("unit", []) if own.search(name) or name.startswith(f"tests.test_checks_{topic}::"))
        row["unit"] = max(named, stages.get("unit", (0.0, ""))[0] / len(chapters))
        share = figures.get(stem, 1) / max(1, sum(figures.values()))
        row["frontend"] = sum(t for _, t in cases.get("frontend", [])) * share
        row["load"] = stages.get("load", (0.0, ""))[0] / len(chapters)
        costs[stem] = row
    return costs


def _figures_per_chapter(chapters: list[str]) -> dict[str, int]:
    """How many of the widget probe's figures each chapter brings (tests/figure_builders.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import figure_builders
    except Exception:  # noqa: BLE001  (no lessons_src here: count one figure per chapter)
        return {stem: 1 for stem in chapters}
    counts = {stem: 0 for stem in chapters}
    for name in figure_builders.FIGURES:
        for stem in chapters:
            if stem[3:] == name.split(".")[0]:
                counts[stem] += 1
    return counts


def report(reports: Path, tier: str, references: list[float]) -> int:
    stages, cases = read_stages(reports), read_testcases(reports)
    build_file = reports / "site-build.txt"
    site_build_s = float(build_file.read_text().split()[0]) if build_file.exists() else None
    reference = statistics.median(references) if references else None
    failures = []
    total = sum(seconds for seconds, _ in stages.values())
    print(f"\n{tier} tier, stage by stage ({os.cpu_count()} CPUs)")
    print(f"  {'stage':<11} {'seconds':>8} {'references':>11}  outcome")
    for name, (seconds, outcome) in stages.items():
        ref = f"{seconds / reference:11.1f}" if reference else f"{'-':>11}"
        print(f"  {name:<11} {seconds:8.0f} {ref}  {outcome}")
        if outcome != "ok":
            failures.append(f"stage {name} {outcome}")
    ref = f"{total / reference:11.1f}" if reference else f"{'-':>11}"
    print(f"  {'total':<11} {total:8.0f} {ref}  (budget {BUDGET_S[tier]} s = {BUDGET_S[tier] / 60:.0f} min)")
    if site_build_s is not None:
        print(f"  (of the site stage: the build {site_build_s:.0f} s)")
    if reference:
        print(f"  reference notebook (benchmarks/bench_pages.py): {', '.join(f'{r:.2f}' for r in references)} s; "
              f"median {reference:.2f} s: the gate took {total / reference:.0f} reference notebooks")
    if total > BUDGET_S[tier]:
        failures.append(f"the {tier} tier took {total:.0f} s > {BUDGET_S[tier]} s")

    if tier == "gate" and cases:
        costs = chapter_costs(stages, cases, site_build_s)
        columns = ["notebooks", "site", "unit", "frontend", "load"]
        print("\nwhat each chapter adds to the gate (its page, exercise and solution), seconds")
        print(f"  {'chapter':<36}" + "".join(f"{c:>10}" for c in columns) + f"{'total':>9}")
        totals = {}
        for stem, row in costs.items():
            totals[stem] = sum(row.values())
            print(f"  {stem:<36}" + "".join(f"{row[c]:10.1f}" for c in columns) + f"{totals[stem]:9.1f}")
        worst = max(totals, key=totals.get)
        print(f"  median {statistics.median(totals.values()):.1f} s, largest {totals[worst]:.1f} s ({worst}); "
              f"budget {CHAPTER_BUDGET_S:.0f} s per chapter")
        if totals[worst] > CHAPTER_BUDGET_S:
            failures.append(f"{worst} adds {totals[worst]:.0f} s > {CHAPTER_BUDGET_S:.0f} s to the gate")
    for failure in failures:
        print(f"OVER BUDGET: {failure}")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=["gate", "full"], default="gate")
    parser.add_argument("--reports", type=Path, default=None,
                        help="read this _build/test-reports/ folder of a run already made; run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the scratch clone (its path is printed)")
    args = parser.parse_args()
    if args.reports:
        return report(args.reports, args.tier, [])

    from bench_pages import reference_seconds

    references = [reference_seconds()]
    scratch = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    clone = scratch / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    command = ["bash", ".ci/run"] if args.tier == "gate" else ["bash", "scripts/test.sh", "full"]
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTEST_ADDOPTS")} | {"CI": "true"}
    log = scratch / "run.log"
    print(f"running `{' '.join(command)}` in a fresh clone of HEAD: {clone} (log: {log})", flush=True)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.run(command, cwd=clone, env=environ, stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    references.append(reference_seconds())
    print(f"exit {proc.returncode} after {wall:.0f} s wall; the log's last lines:")
    print("\n".join(log.read_text().splitlines()[-6:]))
    status = report(clone / "_build" / "test-reports", args.tier, references)
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return status or (1 if proc.returncode else 0)


if __name__ == "__main__":
    sys.exit(main())
