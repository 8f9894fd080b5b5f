"""Binder: build the environment the way repo2docker reads binder/ (a fresh virtual environment,
binder/requirements.txt, then binder/postBuild run from the repository root) and execute a chapter
in it. repo2docker's base image brings Jupyter itself; here that is ipykernel and nbclient."""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.site

CHAPTER = "book/01_attention_from_scratch.ipynb"
EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
import lessons_src
print("executed with lessons_src from", lessons_src.__file__)
"""


def _run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_binder_environment_executes_a_chapter(tmp_path):
    repo = tmp_path / "repo"
    files = _run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT).split()
    for name in files:  # the repository as a clone would have it
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "-r", "binder/requirements.txt"], cwd=repo)
    _run([python, "-m", "pip", "install", "--quiet", "ipykernel", "nbclient", "nbformat"], cwd=repo)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    _run(["bash", "binder/postBuild"], cwd=repo, env=env)
    out = _run([python, "-c", EXECUTE, CHAPTER, str(repo / "book")], cwd=repo, env=env)
    assert "site-packages" in out and str(repo) not in out, out  # the wheel, not the checkout
