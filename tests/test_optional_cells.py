"""The chapters' optional cells that compare the course's models with `transformers` (preinstalled in Colab),
run here where it is installed (the dev venv), so that the branch a Colab reader gets is tested too.

The notebooks stage runs every page in Colab's launch environment, which does not install `transformers`:
there these cells take their other branch and name the test that makes the comparison. This test runs
the chapter's import cell and then each optional cell, in one namespace, and checks what the cell prints.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the optional cells compare with transformers (the dev extra)")

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = "try:\n    import transformers\n"


def _code_cells(path: Path) -> list[tuple[str, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(c.get("id", ""), "".join(c["source"])) for c in cells if c["cell_type"] == "code"]


PAGES = sorted(p for p in (ROOT / "book").glob("*.ipynb") if any(src.startswith(OPTIONAL) for _, src in _code_cells(p)))


def test_the_chapters_that_promise_a_transformers_cell_have_one():
    assert {p.stem for p in PAGES} >= {"16_modern_block", "17_latent_attention", "18_todays_attention"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_each_optional_transformers_cell_runs_and_compares(page):
    cells = _code_cells(page)
    imports = next(src for _, src in cells if src.lstrip().startswith("import ") and "import lessons_src" in src)
    namespace: dict = {"__name__": "__main__"}
    optional_names: set[str] = set()  # what the optional cells import from transformers
    exec(compile(imports, f"{page.name}: imports", "exec"), namespace)
    for cell_id, src in cells:
        follow_up = re.match(r"if (\w+) is not None:", src)  # a later cell that runs only where the optional one did
        if not src.startswith(OPTIONAL) and not (follow_up and follow_up.group(1) in optional_names):
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(src, f"{page.name}: cell {cell_id}", "exec"), namespace)
        if follow_up:  # its own asserts check it; it must have run, not skipped
            assert printed.getvalue(), f"{page.name}, cell {cell_id}: with transformers installed it should run"
            continue
        optional_names.update(re.findall(r"^\s+from transformers import ([\w, ]+)", src, re.M)[0].replace(" ", "").split(","))
        assert "largest difference of the logits" in printed.getvalue(), (
            f"{page.name}, cell {cell_id}: with transformers installed the cell should compare, and printed "
            f"{printed.getvalue()!r}")
