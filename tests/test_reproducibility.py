"""Every page is seeded: two executions print the same text (the full tier), and the site shows the very
execution the notebooks stage ran (both tiers).

The first execution is the one the site shows, read from the build's execution cache: the launch
stage's run on ipywidgets 8 (scripts/book.py seeds the cache with it), or the build's own. The
second is, when the first came from the launch stage, that stage's run of the same notebook with
the same package on Colab's libraries (ipywidgets 7.7.1, IPython 7.34, numpy 2.1): so what a
learner prints in Colab is what the site shows, and no page is executed a third time. Otherwise
(the site stage run on its own) the second is a fresh execution here.

Compared: stdout and the text/plain of results and displays. Not compared: stderr (progress
bars), widget views (their text carries timings), and cells tagged `timing`, whose outputs are
measurements of time or memory.

In the gate (CONTRIBUTING.md, "Two tiers") each page is executed once, on Colab's libraries, and the site
shows that execution: what a learner prints in Colab is what the site shows by construction, and
``test_the_site_shows_the_notebooks_stage_execution`` checks that the build took it (executed no page a
second time, lost no output). The comparison of two executions runs in the full tier."""

import os

import nbformat
import pytest
from conftest import ROOT
from launch_env import COLAB_ENV, TIER
from nbclient import NotebookClient

import book  # scripts/, on sys.path (tests/conftest.py)

pytestmark = pytest.mark.site

NOTEBOOKS = [page + ".ipynb" for page in book.notebook_pages()]
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


def _cache_record(path: str):
    """The build's execution of ``path``: its cache record and the executed notebook."""
    from jupyter_cache import get_cache

    cache = get_cache(book.CACHE)
    record = cache.match_cache_notebook(nbformat.read(ROOT / path, as_version=4))
    return record, cache.get_cache_bundle(record.pk).nb


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_the_site_shows_the_notebooks_stage_execution(site, path):
    """The page on the site is the notebooks stage's execution (read from _build/launch/), not a second one:
    same code, same package, every printed text the same. Pages about the build machine are executed by the
    build itself (``book.EXECUTED_BY_THE_BUILD``)."""
    page = path.removesuffix(".ipynb")
    if page in book.EXECUTED_BY_THE_BUILD:
        pytest.skip("executed by the build itself: it reports on the machine that built the site")
    copies = {env: book.read_launch_copy(env, page) for env in book.SITE_ENVS}
    if not any(copies.values()):
        if os.environ.get("CI"):
            pytest.fail(f"{path}: no execution from the notebooks stage matches this notebook and package; the site "
                        "stage in CI runs after it (or downloads its _build/launch/)")
        pytest.skip("the notebooks stage has not run on this code (run `bash scripts/test.sh notebooks site`)")
    record, shown = _cache_record(path)
    env = record.data.get("launch_env")
    assert env in book.SITE_ENVS, f"{path}: the build executed the page again instead of showing the notebooks stage's"
    launched = book.as_built(page, copies[env])
    skip = timing_cells(nbformat.read(ROOT / path, as_version=4))
    assert text_outputs(shown, skip) == text_outputs(launched, skip), f"{path}: the site's outputs are not {env}'s"


@pytest.mark.skipif(TIER != "full", reason="the full tier executes each page twice (LESSONS_TEST_TIER=full)")
@pytest.mark.parametrize("path", NOTEBOOKS)
def test_two_executions_print_the_same(site, path):
    page = path.removesuffix(".ipynb")
    source = nbformat.read(ROOT / path, as_version=4)
    record, first = _cache_record(path)
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
