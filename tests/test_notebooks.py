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
