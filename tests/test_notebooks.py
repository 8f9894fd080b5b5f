"""Hygiene of the course notebooks: stripped, listed, installable, exercises paired with solutions.

That every exercise as handed out fails its check, and every solution passes it, is shown where
they run as learners run them: tests/test_launch.py."""

import nbformat
import pytest
import sync_notebooks  # scripts/, on sys.path (tests/conftest.py)
import yaml
from conftest import ROOT

import book  # scripts/, on sys.path (tests/conftest.py)

NOTEBOOKS = sync_notebooks.notebooks()
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


def test_there_are_notebooks():
    assert NOTEBOOKS and EXERCISES


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_stripped_and_has_the_install_cell(path):
    assert sync_notebooks.problems(path) == [], "run `python scripts/sync_notebooks.py`"


def test_install_cell_pins_the_release_from_pyproject():
    source = sync_notebooks.install_cell_source()
    assert f"@{sync_notebooks.release()}" in source
    assert sync_notebooks.repository_url() in source
    assert "import lessons_src" in source


@pytest.mark.parametrize("entry", book.pages())
def test_toc_entries_exist(entry):
    matches = [p for p in ROOT.glob(entry + ".*") if p.suffix in (".ipynb", ".md")]
    assert len(matches) == 1, f"_toc.yml lists {entry}, found {matches}"


def test_every_notebook_is_in_the_toc():
    listed = set(book.pages())
    missing = [str(p.relative_to(ROOT)) for p in NOTEBOOKS if str(p.relative_to(ROOT).with_suffix("")) not in listed]
    assert missing == []


def test_config_builds_only_toc_files_and_prefers_static_html():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["only_build_toc_files"] is True
    assert config["execute"]["raise_on_error"] is True
    assert config["execute"]["execute_notebooks"] == "cache"
    assert ["html", "text/html", 0] in config["sphinx"]["config"]["nb_mime_priority_overrides"]
    assert config["sphinx"]["config"]["nb_ipywidgets_js"] == {}


@pytest.mark.parametrize("exercise", EXERCISES, ids=_ids(EXERCISES))
def test_exercise_has_a_solution_that_differs_only_in_the_answer(exercise):
    solution = ROOT / "solutions" / exercise.name
    assert solution.exists(), f"no solution for {exercise.name}"
    ex, sol = (nbformat.read(p, as_version=4) for p in (exercise, solution))

    def code(nb):
        # A solution may add cells tagged "solution-only" after its check (reading what the answer computes).
        return [(c.source, "exercise" in c.metadata.get("tags", [])) for c in nb.cells
                if c.cell_type == "code" and "solution-only" not in c.metadata.get("tags", [])]

    ex_code, sol_code = code(ex), code(sol)
    sol_cells = [c for c in sol.cells if c.cell_type == "code"]
    extra = [i for i, c in enumerate(sol_cells) if "solution-only" in c.metadata.get("tags", [])]
    check = max(i for i, c in enumerate(sol_cells) if "lessons_src.checks" in c.source)
    assert all(i > check for i in extra), "a solution-only cell comes after the check"
    assert not [i for i, c in enumerate(ex.cells) if "solution-only" in c.metadata.get("tags", [])]
    assert len(ex_code) == len(sol_code)
    answers = [i for i, (_, tagged) in enumerate(ex_code) if tagged]
    assert answers, "tag the cell the learner completes with 'exercise'"
    for i, ((ex_src, _), (sol_src, _)) in enumerate(zip(ex_code, sol_code)):
        if i in answers and sync_notebooks.stub_feedback(ex) == sync_notebooks.STUB_FEEDBACK:
            assert "NotImplementedError" in ex_src and "NotImplementedError" not in sol_src
        elif i in answers:  # handed out with bugs to fix (its metadata says what the check names first)
            assert ex_src != sol_src and "NotImplementedError" not in ex_src + sol_src
        else:
            assert ex_src == sol_src, f"code cell {i} differs between exercise and solution"
    assert "lessons_src.checks" in ex_code[-1][0], "the last code cell runs the check"


def bare_asserts(path) -> list[str]:
    """The ``assert`` statements of a notebook's code cells that carry no message (IPython's
    ``%``/``!`` lines left out)."""
    import ast

    found = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        code = "\n".join(line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!"))
                         else line for line in cell.source.splitlines())
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Assert) and node.msg is None:
                found.append(ast.get_source_segment(code, node) or f"line {node.lineno}")
    return found


def test_bare_asserts_are_found():
    import tempfile
    from pathlib import Path

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%pip install x\nassert 1 == 1\nassert 2, 'two'")])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.ipynb"
        nbformat.write(nb, path)
        assert bare_asserts(path) == ["assert 1 == 1"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_every_assert_on_a_page_says_what_it_checks(path):
    """A learner who meets a failing assert must read what it checks, not a bare AssertionError
    (issue 27; CONTRIBUTING.md, "Time on a busy machine")."""
    bare = bare_asserts(path)
    assert not bare, f"{len(bare)} asserts without a message:\n" + "\n".join(bare[:20])


PREDICT = '<details class="predict">'


def predict_first_questions(path) -> int:
    """How many "predict first" questions a notebook's markdown asks: each a ``<details class="predict">``
    whose answer stays hidden until the reader clicks."""
    return sum(c.source.count(PREDICT) for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")


CHAPTERS = [ROOT / f"{page}.ipynb" for page in book.pages("Chapters")]


@pytest.mark.parametrize("path", CHAPTERS, ids=_ids(CHAPTERS))
def test_every_chapter_asks_two_predict_first_questions(path):
    """Read from the source here; the site stage then clicks each one open in a browser
    (tests/test_site.py, test_page_in_a_browser: its predict-first check). CONTRIBUTING.md, "Add a chapter"."""
    found = predict_first_questions(path)
    assert found >= 2, (f"{path.relative_to(ROOT)} asks {found} predict-first questions, expected 2 or more: a markdown "
                        f'cell with the question, then {PREDICT}<summary>Show the answer</summary> ... </details>')


MAX_CELL_LINES = 30  # about a screen


@pytest.mark.parametrize("path", CHAPTERS, ids=_ids(CHAPTERS))
def test_no_chapter_code_cell_is_over_30_lines(path):
    """Experiments read as steps: each code cell a learner reads is at most a screen, with a sentence before it
    saying what it computes or what to read in its output; machinery a reader need not read lives in lessons_src.
    Lines are counted as ``len(source.splitlines())``, blank lines included. CONTRIBUTING.md, "Add a chapter"."""
    cells = nbformat.read(path, as_version=4).cells
    long = [(index, len(cell.source.splitlines()), cell.source.splitlines()[0])
            for index, cell in enumerate(cells)
            if cell.cell_type == "code" and len(cell.source.splitlines()) > MAX_CELL_LINES]
    assert not long, (f"{path.relative_to(ROOT)} has code cells over {MAX_CELL_LINES} lines; split each into steps, "
                      "a short markdown cell before each, or move machinery into lessons_src:\n"
                      + "\n".join(f"  cell {index}: {count} lines, starting {first!r}" for index, count, first in long))
