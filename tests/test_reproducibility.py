"""Every page is seeded: two executions print the same text.

The first execution is the one the site shows, read from the build's execution cache: the launch
stage's run on ipywidgets 8 (scripts/book.py seeds the cache with it), or the build's own. The
second is, when the first came from the launch stage, that stage's run of the same notebook with
the same package on Colab's libraries (ipywidgets 7.7.1, IPython 7.34, numpy 2.1): so what a
learner prints in Colab is what the site shows, and no page is executed a third time. Otherwise
(the site stage run on its own) the second is a fresh execution here.

Compared: stdout and the text/plain of results and displays. Not compared: stderr (progress
bars), widget views (their text carries timings), and cells tagged `timing`, whose outputs are
measurements of time or memory."""

import nbformat
import pytest
from conftest import ROOT
from nbclient import NotebookClient

import book  # scripts/, on sys.path (tests/conftest.py)

pytestmark = pytest.mark.site

NOTEBOOKS = [page + ".ipynb" for page in book.notebook_pages()]
COLAB_ENV = "ipywidgets7.7.1"  # tests/launch_env.py
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

    page = path.removesuffix(".ipynb")
    source = nbformat.read(ROOT / path, as_version=4)
    cache = get_cache(book.CACHE)
    record = cache.match_cache_notebook(source)
    first = cache.get_cache_bundle(record.pk).nb
    colab = book.read_launch_copy(COLAB_ENV, page) if record.data.get("launch_env") else None
    if colab is not None:
        second = book.as_built(page, colab)
    else:
        second = nbformat.read(ROOT / path, as_version=4)
        NotebookClient(second, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str((ROOT / path).parent)}}).execute()
    where = f"{path} ({record.data.get('launch_env', 'the build')} and {COLAB_ENV if colab else 'a fresh run'})"
    skip = timing_cells(source)
    a, b = text_outputs(first, skip), text_outputs(second, skip)
    assert a, f"{where}: no text output to compare"
    for (cell_a, text_a), (cell_b, text_b) in zip(a, b):
        assert (cell_a, text_a) == (cell_b, text_b), f"{where}, code cell {cell_a}: outputs differ between two executions"
    assert len(a) == len(b)
