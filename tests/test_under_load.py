"""The course on a busy machine: no page, check or test may fail because the computer is slow.

Learners run the course on shared machines (Colab's free VMs, Binder's, a laptop with a browser
open). This stage (``bash scripts/test.sh load``) keeps one busy process per CPU core running
while it

* runs the checks' contract test, the learner table and the timing helpers' tests
  (``tests/test_checks_contract.py``, ``tests/test_checks_learners.py``, ``tests/test_profiling.py``) in a
  pytest of their own: every test must pass;
* in the full tier only (``bash scripts/test.sh full load``), runs every page that measures time (found by
  what its code calls, not listed by hand) as Colab runs it, alone in an empty folder with the package
  installed by its own install cell, on ipywidgets 7.7.1 and 8 (``tests/test_launch.py``'s venvs and
  runner): every cell must run. In the gate, ``tests/test_timing_claims.py`` (unit stage) stands in for it:
  no page asserts on a measured duration (CONTRIBUTING.md, "Two tiers").

What each timing page printed about time (its "shown / not shown" lines) is written to
``tests/artifacts/load/`` and printed with ``-rP``. The busy processes are plain Python loops that
end by themselves after an hour at most, and are killed when the module's tests end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from launch_env import ENVS, ROOT, TIER, sync_notebooks
from test_launch import _execute, _plain, _rel, launched  # noqa: F401  (launched: the session's venvs)

pytestmark = pytest.mark.load

ARTIFACTS = ROOT / "tests" / "artifacts" / "load"

#: What a page's code calls when it measures time (lessons_src.profiling, the clock, a training
#: loop's speed).
TIMING = re.compile(r"\b(time_ms|times_ms|interleaved_times_ms|clearly_less|perf_counter|steps_per_second)\b")


def _code(notebook: Path) -> str:
    return "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code")


TIMING_PAGES = [nb for nb in sync_notebooks.notebooks() if TIMING.search(_code(nb))]


def test_the_timing_pages_are_found():
    """The pages known to time things are among those found (a renamed helper must not empty the list)."""
    found = {nb.stem for nb in TIMING_PAGES if nb.parent.name == "book"}
    for page in ("01_attention_from_scratch", "09_efficient_attention", "10_grouped_query_and_kv_cache",
                 "12_tiled_attention", "16_modern_block"):
        assert page in found, f"book/{page}.ipynb measures time but was not found by {TIMING.pattern}"


@pytest.fixture(scope="module")
def busy_machine():
    """One busy process per core, for the module's tests; each ends by itself within an hour."""
    loop = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(os.cpu_count() or 2)]
    try:
        yield len(procs)
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=30)


def _timing_lines(executed) -> list[str]:
    """The printed lines of the cells that measure time."""
    lines = []
    for cell in executed.cells:
        if cell.cell_type == "code" and TIMING.search(cell.source):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream":
                    lines += out["text"].splitlines()
    return lines


@pytest.mark.skipif(TIER != "full", reason="the full tier runs the timing pages under load (LESSONS_TEST_TIER=full); "
                    "in the gate tests/test_timing_claims.py checks that no page asserts on a measured duration")
@pytest.mark.parametrize("name", ENVS)
@pytest.mark.parametrize("notebook", TIMING_PAGES, ids=[_rel(nb) for nb in TIMING_PAGES])
def test_a_timing_page_runs_on_a_busy_machine(notebook, name, launched, busy_machine, tmp_path):  # noqa: F811
    envs, release = launched
    content = tmp_path / "content"
    content.mkdir()
    copy = content / notebook.name
    copy.write_bytes(notebook.read_bytes())
    executed = tmp_path / "executed.ipynb"
    proc, seconds, _ = _execute(envs[name], release, copy, strict=notebook.parent.name == "solutions",
                                save_to=executed)
    where = f"{_rel(notebook)} on {name} with {busy_machine} busy processes"
    assert proc.returncode == 0, f"{where} failed:\n{_plain(proc.stdout)[-6000:]}\n{_plain(proc.stderr)[-2000:]}"
    lines = _timing_lines(nbformat.read(executed, as_version=4))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = f"{where}: ran in {seconds:.0f} s\n" + "\n".join(lines) + "\n"
    (ARTIFACTS / f"{name}-{notebook.parent.name}-{notebook.stem}.txt").write_text(report)
    print(report)


def test_the_checks_contract_and_learner_table_pass_on_a_busy_machine(busy_machine):
    """Every pathological learner and every row of the learner table, and the timing helpers' tests, with the
    machine busy. The two answer sets of issue 35 (``blind-s35*``, 563 wrong answers that measure what the first
    line says) run in the unit stage only: they take the same code paths as the rest of the table, whose other
    blind answers still go through the step search here, and under load they made this stage 40% longer."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not blind-s35",
                           "tests/test_checks_contract.py", "tests/test_checks_learners.py", "tests/test_profiling.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=3000,
                          env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})  # not the outer run's report
    tail = _plain(proc.stdout)[-4000:]
    print(f"with {busy_machine} busy processes:\n{tail.splitlines()[-1] if tail else ''}")
    assert proc.returncode == 0, tail + _plain(proc.stderr)[-2000:]
