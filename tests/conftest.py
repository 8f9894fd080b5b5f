import os
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # the tests import the repository's scripts: book, sync_notebooks, ...

from launch_env import locked, pytest_terminal_summary, run_directory  # noqa: E402, F401  (the launch stage's per-venv timings)

import book  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _checks_forget_earlier_tries():
    """A check compares a failure with its last one (lessons_src/checks/_result.py, ``remember``):
    each test starts as a learner's first try, whatever the tests before it ran."""
    from lessons_src.checks import _result

    _result._LAST_FAILURE.clear()


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    """Unit tests inspect check results; strict mode (raise on failure) is tested explicitly."""
    if os.environ.get("LESSONS_SRC_STRICT"):
        monkeypatch.delenv("LESSONS_SRC_STRICT")


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """Build the website once per test run, as scripts/site.sh does (scripts/book.py: -W, and
    the pages the launch stage executed with this code come from its executions); return _build/html.
    With pytest-xdist (the site stage runs two workers) the first worker builds and the other waits.

    With ``LESSONS_SITE_HTML`` set to the html folder of a site already built, that site is tested as
    it is and not built again (to rerun the site tests against one build: the build executes every page).
    """
    if os.environ.get("LESSONS_SITE_HTML"):
        return Path(os.environ["LESSONS_SITE_HTML"])
    shared = run_directory(tmp_path_factory)
    built = shared / "site-built"
    with locked(shared / "site.lock"):
        if not built.exists():
            t0 = time.perf_counter()
            proc = book.build(capture=True)
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]  # -W: any warning fails
            reports = ROOT / "_build" / "test-reports"  # the build's time, for benchmarks/bench_gate.py
            reports.mkdir(parents=True, exist_ok=True)
            (reports / "site-build.txt").write_text(f"{time.perf_counter() - t0:.1f} seconds for the site build\n")
            built.write_text("built\n")
    return ROOT / "_build" / "html"


#: Debian's Chromium, driven by Playwright in the browser tests of test_site.py and test_explorer.py.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing (scripts/test.sh installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()
