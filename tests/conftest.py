import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launch_env import pytest_terminal_summary  # noqa: F401  (the launch stage's per-venv timings)

ROOT = Path(__file__).resolve().parent.parent

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    """Unit tests inspect check results; strict mode (raise on failure) is tested explicitly."""
    if os.environ.get("LESSONS_SRC_STRICT"):
        monkeypatch.delenv("LESSONS_SRC_STRICT")


@pytest.fixture(scope="session")
def site():
    """Build the website once per test session (`jupyter-book build . -W`); return _build/html.

    Pages come from the execution cache when their code is unchanged, as in scripts/site.sh.
    """
    jb = Path(sys.executable).parent / "jupyter-book"
    proc = subprocess.run([str(jb), "build", ".", "--warningiserror", "--keep-going"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]  # -W: any warning fails
    return ROOT / "_build" / "html"
