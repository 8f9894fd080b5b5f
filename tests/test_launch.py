"""Every notebook as a learner launches it in Colab: alone, with Colab's libraries, the course
package installed by the notebook's own first cell, on ipywidgets 7.7.1 (Colab's) and 8.

How Colab runs a notebook, and how this test does the same:

* Colab opens one ``.ipynb`` with no repository around it. Each notebook of book/ (status.ipynb
  included), exercises/ and solutions/ is copied, byte for byte, alone into an empty folder and
  executed there with nbval (``--nbval-lax``: every cell must run without an exception; outputs
  are not compared), the launch venv's own pytest and kernel (``--nbval-current-env``), 15 minutes
  per cell at most. Solutions run with ``LESSONS_SRC_STRICT=1`` (a failing check raises);
  exercises do not (their stubs fail their checks by design: feedback, not an error).
* Colab has its own libraries and no ``lessons_src``. Two fresh venvs, built concurrently (pip
  reuses its cache), hold what Colab preinstalls, torch at the project's pin (``torch==2.13.0``
  from pyproject.toml: the CPU wheel here, the CUDA build of the same version on a GPU machine;
  nothing here assumes CPU), plus nbval and pytest:

  - ``ipywidgets7.7.1``: Colab's own versions (tests/launch_env.py ``COLAB``, from
    googlecolab/backend-info's pip-freeze.txt): ipywidgets 7.7.1, ipykernel 6.17.1, IPython 7.34.0,
    jupyter_client 7.4.9, traitlets 5.7.1, numpy 2.1.3, matplotlib 3.10.0, pytest 8.4.2, and
    pip 24.1.2, which runs the install cell. All of them install and run on Python 3.11 (Colab
    itself is on 3.13 now; this project's CI Python is 3.11). notebook 6.5.7 (Colab's) because
    ipywidgets 7 pulls in a notebook package anyway, and 6.5 is the lighter one.
  - ``ipywidgets8``: the newest of everything with ipywidgets 8 (JupyterLab, Binder, a learner's
    own Jupyter), so a release of a dependency that breaks a notebook shows up here first.
* The install cell runs ``%pip install --no-deps "lessons-src @ git+<repository.url>@v<version>"``,
  unchanged. That URL cannot be reached from CI, so git is told, through environment variables
  only (``GIT_CONFIG_COUNT``/``KEY_0``/``VALUE_0``: ``url.<file URL>.insteadOf <repository.url>``),
  to fetch it from a local repository holding the working tree (``git ls-files -co
  --exclude-standard``), committed and tagged ``v<version>``. pip clones it, builds a wheel and
  installs it, as in Colab.
* The first notebook to run in each venv finds no ``lessons_src`` (asserted when the venv is
  built), and its install cell must install it: as a wheel into that venv's site-packages,
  recorded by pip as the release tag of the repository URL at the local commit, not editable,
  with every subpackage. Installing it afresh for each of the 68 runs would cost a pip build each,
  so later notebooks in the same venv find it installed (the cell's ``import`` succeeds, as in a
  second notebook of one Colab runtime) and re-check only that it is that same wheel.
* A slider that loses its live ipywidgets view still shows its precomputed frames, with a warning;
  here that warning is an error (``PYTHONWARNINGS``), so every slider is live on both majors.
* Tiers (CONTRIBUTING.md, "Two tiers"): the gate runs each notebook once, in Colab's venv, and the widget
  probe (tests/probe_notebook.py: every chapter's slider figure in one small notebook) there; the full tier
  (``LESSONS_TEST_TIER=full``) runs every notebook and the probe in both venvs.

Speed: ``bash scripts/test.sh notebooks`` runs ``pytest -m launch -n 2`` (pytest-xdist). The first
worker to arrive builds both venvs at once while the other waits; then both run notebooks from
either venv (a file lock lets the first notebook in a venv finish its install before the next
starts there). Each kernel gets the CPU cores divided among the workers (``OMP_NUM_THREADS``):
two kernels with two threads each on two cores ran a chapter 12 times slower. Without xdist the
same runs in one process. Set ``LESSONS_SRC_LAUNCH_CACHE`` to a directory (e.g. ``.venv/launch``,
ignored by git) to keep the venvs between local runs: they are reused after uninstalling
``lessons_src``; delete the directory to pick up new releases of the newest venv's packages. CI
starts from a fresh clone without it. Each venv's build time, notebook times, and slowest notebooks
are printed at the end of the run.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import nbformat
import probe_notebook
import pytest
from launch_env import (
    ROOT,
    TIER_ENVS,
    installed_lessons_src,
    locked,
    prepare,
    release_repository,
    run_directory,
    run_notebook,
    sync_notebooks,
)

import book  # scripts/, on sys.path (tests/conftest.py)

pytestmark = pytest.mark.launch

NOTEBOOKS = sync_notebooks.notebooks()  # book/ (status.ipynb included), exercises/, solutions/


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# Notebook by notebook, each in the tier's venvs: Colab's alone in the gate (each page executed once), both
# in the full tier (two workers start on different venvs).
PARAMS = [pytest.param(name, notebook, id=f"{name}-{_rel(notebook)}") for notebook in NOTEBOOKS for name in TIER_ENVS]


@pytest.fixture(scope="session")
def launched(request, tmp_path_factory):
    """The venvs this run needs and the release repository, prepared once for all xdist workers."""
    names = sorted({item.callspec.params["name"] for item in request.session.items
                    if (item.get_closest_marker("launch") or item.get_closest_marker("load"))
                    and "name" in getattr(getattr(item, "callspec", None), "params", {})})
    cache = os.environ.get("LESSONS_SRC_LAUNCH_CACHE")
    return prepare(run_directory(tmp_path_factory), names, (ROOT / cache).resolve() if cache else None)


def test_the_repository_url_resolves_to_the_local_release(tmp_path):
    """The git setting alone turns the notebooks' repository URL into the local repository."""
    release = release_repository(tmp_path / "release")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | release.git_environment()
    out = subprocess.run(["git", "ls-remote", "--tags", sync_notebooks.repository_url(), release.tag], env=environ,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split() == [release.commit, f"refs/tags/{release.tag}"]
    for name in ("lessons_src/__init__.py", "pyproject.toml", "book/01_attention_from_scratch.ipynb"):
        assert (release.path / name).read_bytes() == (ROOT / name).read_bytes()


def _plain(text: str) -> str:
    """Without the terminal colours of IPython's tracebacks."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _execute(env, release, notebook: Path, strict: bool, save_to: Path | None = None):
    """Run one notebook; return nbval's process, its seconds, and whether its install cell
    installed lessons_src (the first notebook in each venv does; the others wait until it has)."""
    with locked(env.path / ".first-notebook.lock"):
        first = installed_lessons_src(env) is None
        if first:
            t0 = time.perf_counter()
            proc = run_notebook(env, release, notebook, strict, save_to=save_to)
            seconds = time.perf_counter() - t0
    if not first:
        t0 = time.perf_counter()
        proc = run_notebook(env, release, notebook, strict, save_to=save_to)
        seconds = time.perf_counter() - t0
    return proc, seconds, first and installed_lessons_src(env) is not None


@pytest.mark.parametrize("name, notebook", PARAMS)
def test_notebook_runs_alone_as_in_colab(name, notebook, launched, tmp_path, record_property):
    envs, release = launched
    env = envs[name]
    where = f"{_rel(notebook)} on {name} ({env.describe()})"
    record_property("launch_env", name)
    record_property("launch_notebook", _rel(notebook))
    record_property("launch_build_seconds", env.build_seconds)
    record_property("launch_versions", env.describe() + (" (venv reused)" if env.reused else ""))

    content = tmp_path / "content"  # Colab's working directory: nothing but this notebook
    content.mkdir()
    copy = Path(shutil.copy(notebook, content))
    assert hashlib.sha256(copy.read_bytes()).digest() == hashlib.sha256(notebook.read_bytes()).digest()

    executed = tmp_path / "executed.ipynb"
    proc, seconds, installed_here = _execute(env, release, copy, strict=notebook.parent.name == "solutions",
                                             save_to=executed)
    record_property("launch_seconds", seconds)
    if installed_here:
        record_property("launch_installed_by", _rel(notebook))
    installed = installed_lessons_src(env)
    assert proc.returncode == 0, f"{where} failed:\n{_plain(proc.stdout)[-6000:]}\n{_plain(proc.stderr)[-2000:]}"
    assert sorted(p.name for p in content.iterdir()) == [notebook.name], f"{where} left files in its folder"
    assert installed is not None, f"{where}: the install cell did not install lessons_src"
    # What pip recorded: the release tag of the notebook's repository URL, cloned by git from the
    # local repository (its commit), built as a wheel into this venv; not editable, not the checkout.
    assert installed.direct_url["url"] == sync_notebooks.repository_url(), where
    assert installed.direct_url["vcs_info"] == {"vcs": "git", "requested_revision": release.tag,
                                                "commit_id": release.commit}, where
    assert not installed.editable and "dir_info" not in installed.direct_url, where
    assert installed.dist_info.parent == env.site_packages, where
    assert (installed.dist_info / "WHEEL").is_file(), where
    modules = {f for f in installed.files if f.startswith("lessons_src/") and f.endswith(".py")}
    assert "lessons_src/__init__.py" in modules and "lessons_src/checks/__init__.py" in modules, where
    assert all((env.site_packages / m).is_file() for m in modules), where
    pth = "".join(p.read_text() for p in env.site_packages.glob("*.pth"))
    assert str(ROOT) not in pth, f"{where}: a .pth file points at the checkout"

    # Kept for the site build and the determinism check, so neither executes the page again.
    page = _rel(notebook).removesuffix(".ipynb")
    result = nbformat.read(executed, as_version=4)
    book.save_launch_copy(name, page, result, result.metadata.pop("launch_seconds"),
                          notebook_sha256=book.file_hash(copy), package_sha256=book.package_hash(release.path))
    if notebook.parent.name == "exercises":
        assert_the_stub_fails_its_check(result, where)


def assert_the_stub_fails_its_check(executed, where: str) -> None:
    """An exercise as handed out: its last cell runs the check, which must fail and say the answer is
    missing (the solutions, run strict above, pass the same check). An exercise that hands out code to
    fix declares in its notebook metadata the words its FAIL line says instead (``sync_notebooks.stub_feedback``)."""
    last = [cell for cell in executed.cells if cell.cell_type == "code"][-1]
    assert "lessons_src.checks" in last.source, f"{where}: the last code cell does not run the check"
    shown = "\n".join(o.get("data", {}).get("text/plain", "") for o in last.outputs)
    expected = sync_notebooks.stub_feedback(executed)
    assert shown.startswith("FAIL") and expected in shown, \
        f"{where}: the exercise as handed out should fail its check with {expected!r}; it showed:\n{shown}"


@pytest.mark.parametrize("name", TIER_ENVS)
def test_every_slider_figure_lives(name, launched, tmp_path):
    """The widget probe (tests/probe_notebook.py): every chapter's slider figure and a model explorer of each
    kind, built from small inputs in one notebook run as Colab runs a page, each shown as a live ipywidgets view
    (a dead one fails the run: DEAD_SLIDERS_FAIL) and every slider moved from the kernel to a new image. In the
    gate this is what runs the figures on ipywidgets 7.7.1 besides the pages; JupyterLab runs it on ipywidgets 8."""
    envs, release = launched
    path = probe_notebook.write(tmp_path / "content")
    executed = tmp_path / "executed.ipynb"
    proc, seconds, _ = _execute(envs[name], release, path, strict=False, save_to=executed)
    where = f"the widget probe on {name} ({envs[name].describe()})"
    # The figure and slider at fault first (the probe's assertion, or the dead view's warning), then the log.
    said = re.findall(r"(?:AssertionError|UserWarning|Error): .*", _plain(proc.stdout))
    assert proc.returncode == 0, (f"{where} failed: {said[0] if said else 'see below'}\n"
                                  f"{_plain(proc.stdout)[-6000:]}\n{_plain(proc.stderr)[-2000:]}")
    result = nbformat.read(executed, as_version=4)
    views = sum(1 for cell in result.cells for output in cell.get("outputs", [])
                if "application/vnd.jupyter.widget-view+json" in output.get("data", {}))
    shown = probe_notebook.figure_names()
    assert views == len(shown), f"{where}: {views} live views for {len(shown)} figures"
    printed = "".join(o.get("text", "") for o in result.cells[-1].outputs)
    assert printed.startswith(f"{probe_notebook.MOVED} ") and f"in {len(shown)} figures" in printed, (where, printed)
    print(f"{where}: {printed.strip()} in {seconds:.0f} s")


@pytest.mark.parametrize("name", TIER_ENVS)
def test_a_dead_slider_fails_the_run(name, launched, tmp_path):
    """Without live ipywidgets an InteractiveFigure shows its static frames and warns; in this
    stage that fails the notebook (DEAD_SLIDERS_FAIL), so the sliders above were live on both majors."""
    envs, release = launched
    cells = [
        sync_notebooks.install_cell_source(),
        "import sys\nsys.modules['ipywidgets'] = None  # what a kernel without usable ipywidgets amounts to",
        "import matplotlib.pyplot as plt\nfrom lessons_src.widgets import InteractiveFigure, Slider\n"
        "fig, ax = plt.subplots()\n(line,) = ax.plot([0, 1], [0, 1])\n"
        "InteractiveFigure(fig, lambda slope: line.set_ydata([0, slope]), [Slider('slope', [1, 2])], alt='a line')",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "content").mkdir()
    path = tmp_path / "content" / "dead_slider.ipynb"
    nbformat.write(nb, path)
    proc, _, _ = _execute(envs[name], release, path, strict=False)
    assert proc.returncode != 0 and "live sliders unavailable (ModuleNotFoundError" in _plain(proc.stdout), \
        _plain(proc.stdout)[-3000:]
