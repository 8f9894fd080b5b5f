import os
from pathlib import Path

import pytest
import torch

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
