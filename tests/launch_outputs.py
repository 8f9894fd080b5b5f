"""A pytest plugin for the launch venvs' nbval runs (tests/launch_env.py loads it into that pytest
only, not into the kernel): ``--save-executed PATH`` writes the notebook with the outputs nbval
collected from the kernel, cell by cell, once every cell has run without an error.

nbval (0.11) keeps each code cell's outputs in ``IPyNbCell.test_outputs`` (streams coalesced, as
Jupyter shows them) to compare them with the stored ones, and then drops them; this keeps them,
so the site build can show this execution instead of executing the page again (scripts/book.py).
"""

from __future__ import annotations

import nbformat
import pytest

_cells: list[tuple[object, bool, float]] = []  # (nbval's cell item, passed, seconds), in order


def pytest_addoption(parser):
    parser.addoption("--save-executed", default=None, metavar="PATH",
                     help="write the executed notebook to PATH when every cell ran")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call" and hasattr(item, "test_outputs"):
        _cells.append((item, outcome.get_result().passed, call.duration))


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("save_executed")
    if not path or exitstatus != 0 or not _cells or not all(passed for _, passed, _ in _cells):
        return
    notebook = _cells[0][0].parent.nb  # the notebook nbval read; its cells are the items' cells
    for count, (item, _, _) in enumerate(_cells, start=1):
        item.cell.outputs = item.test_outputs or []
        item.cell.execution_count = count
    notebook.metadata["launch_seconds"] = sum(seconds for _, _, seconds in _cells)
    nbformat.write(notebook, path)
