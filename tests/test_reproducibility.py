"""Every page is seeded: two executions on the same machine print the same text.

The first execution is the site build's (kept in the jupyter-cache under _build/); the second is
a fresh one here. Compared: stdout and the text/plain of results and displays. Not compared:
stderr (progress bars), widget views (their text carries timings), and cells tagged `timing`,
whose outputs are measurements of time or memory."""

import nbformat
import pytest
from conftest import ROOT
from nbclient import NotebookClient

pytestmark = pytest.mark.site

import yaml  # noqa: E402

TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
NOTEBOOKS = [c["file"] + ".ipynb" for part in TOC["parts"] for c in part["chapters"]
             if (ROOT / (c["file"] + ".ipynb")).exists()]
WIDGET = "application/vnd.jupyter.widget-view+json"


def timing_cells(nb) -> set[int]:
    """Indices (among code cells) of the cells tagged `timing`."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    return {i for i, c in enumerate(code) if "timing" in c.metadata.get("tags", [])}


def text_outputs(nb, skip: set[int]) -> list[tuple[int, str]]:
    """Per code cell (jupyter-cache keeps only code cells): its stdout joined into one text (the
    kernel splits a stream into a varying number of pieces), then each result's text/plain."""
    found = []
    for index, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        if index in skip:
            continue
        stdout = "".join(o.text for o in cell.get("outputs", []) if o.output_type == "stream" and o.name == "stdout")
        if stdout:
            found.append((index, stdout))
        for output in cell.get("outputs", []):
            if output.output_type in ("execute_result", "display_data") and WIDGET not in output.data:
                found.append((index, output.data.get("text/plain", "")))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_two_executions_print_the_same(site, path):
    from jupyter_cache import get_cache

    source = nbformat.read(ROOT / path, as_version=4)
    record = get_cache(ROOT / "_build" / ".jupyter_cache").match_cache_notebook(source)
    first = get_cache(ROOT / "_build" / ".jupyter_cache").get_cache_bundle(record.pk).nb
    second = nbformat.read(ROOT / path, as_version=4)
    NotebookClient(second, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str((ROOT / path).parent)}}).execute()
    skip = timing_cells(source)
    a, b = text_outputs(first, skip), text_outputs(second, skip)
    assert a, f"{path}: no text output to compare"
    for (cell_a, text_a), (cell_b, text_b) in zip(a, b):
        assert (cell_a, text_a) == (cell_b, text_b), f"{path}, code cell {cell_a}: outputs differ between two executions"
    assert len(a) == len(b)
