"""Colab-like environments for the launch test (tests/test_launch.py), and the local "GitHub" that
the notebooks' install cell clones from.

* ``build_env(name, where)``: a fresh venv with what Colab preinstalls (no ``lessons_src``), one
  ipywidgets major each (``ENVS``), plus nbval and pytest to execute notebooks.
* ``release_repository(where)``: the working tree committed and tagged as the release the
  notebooks install, and the git setting that makes the notebooks' own repository URL clone it.
* ``prepare(...)``: both of those once per test session, for every pytest-xdist worker.
* ``installed_lessons_src(env)``: how ``lessons_src`` is installed in a venv (None when it is not).
* ``run_notebook(...)``: nbval over one notebook with the venv's pytest and kernel.
* ``pytest_terminal_summary``: prints each environment's build time and notebook times at the end
  of a run (tests/conftest.py imports it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

import sync_notebooks  # noqa: E402  scripts/, on sys.path (tests/conftest.py)


def torch_pin() -> str:
    """The project's torch requirement (``torch==...``): the CPU wheel here, the CUDA build on a GPU machine."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if d.replace(" ", "").startswith("torch==")]
    return pin


# Colab's versions of what the notebooks touch, from googlecolab/backend-info's pip-freeze.txt
# (2026-08; ipywidgets 7.7.1 since 2022, IPython 7.34.0 since 2023), including the pip that runs
# the install cell. notebook 6.5.7 is Colab's too: ipywidgets 7's widgetsnbextension needs a
# notebook package, and 6.5 is lighter than 7.
COLAB = (
    "pip==24.1.2",
    "ipywidgets==7.7.1", "widgetsnbextension==3.6.10", "jupyterlab_widgets==3.0.16",
    "ipykernel==6.17.1", "ipython==7.34.0", "jupyter_client==7.4.9", "traitlets==5.7.1",
    "pyzmq==26.2.1", "tornado==6.5.7", "notebook==6.5.7", "nbformat==5.11.1",
    "numpy==2.1.3", "matplotlib==3.10.0", "seaborn==0.13.2", "pillow==11.3.0", "tqdm==4.67.3",
    "safetensors==0.6.2",  # transformers' dependency, preinstalled on Colab
    "tokenizers==0.22.1", "huggingface-hub==0.35.3",  # transformers' too: lessons_src.from_pretrained reads with them
    "pytest==8.4.2",
)
# The newest of everything, ipywidgets 8 (JupyterLab, Binder, a learner's own Jupyter).
NEWEST = (
    "pip", "ipywidgets>=8,<9", "ipykernel", "numpy", "matplotlib", "seaborn", "pillow", "tqdm", "safetensors", "pytest",
    "tokenizers", "huggingface_hub",
)
#: name -> requirements (besides the torch pin and nbval, which every environment gets).
ENVS = {"ipywidgets7.7.1": COLAB, "ipywidgets8": NEWEST}
COLAB_ENV = "ipywidgets7.7.1"

#: The test tier (scripts/test.sh sets it; CONTRIBUTING.md, "Two tiers"): ``gate`` executes each page once,
#: as Colab runs it; ``full`` executes each page in both environments.
TIER = os.environ.get("LESSONS_TEST_TIER", "gate")
if TIER not in ("gate", "full"):
    raise ValueError(f"LESSONS_TEST_TIER is {TIER!r}; expected 'gate' or 'full'")
#: The environments whose pages the tier executes: Colab's alone in the gate (ipywidgets 8 is probed by the
#: widget probe in JupyterLab, tests/test_frontend.py), both in the full tier.
TIER_ENVS = tuple(ENVS) if TIER == "full" else (COLAB_ENV,)


def requirements(name: str) -> list[str]:
    return [torch_pin(), *ENVS[name], "nbval"]


@dataclass
class Env:
    name: str
    path: Path
    build_seconds: float
    reused: bool = False
    versions: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {**asdict(self), "path": str(self.path)}

    @classmethod
    def from_json(cls, data: dict) -> Env:
        return cls(**{**data, "path": Path(data["path"])})

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        (site,) = self.path.glob("lib/python3.*/site-packages")
        return site

    def describe(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.versions.items())


def _run(cmd: list, **kwargs) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        # pip's notices about this machine's local package mirrors would hide the error
        stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("WARNING: Location"))
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{stderr[-4000:]}")
    return proc.stdout


PROBE = """
import importlib.metadata as m, json, torch
names = ["ipywidgets", "ipykernel", "ipython", "traitlets", "numpy", "matplotlib", "pip"]
versions = {"torch": torch.__version__, "cuda": str(torch.cuda.is_available()).lower()}
versions.update({n: m.version(n) for n in names})
print(json.dumps(versions))
"""


def build_env(name: str, where: Path, cache: Path | None = None) -> Env:
    """A fresh venv for ENVS[name], without lessons_src.

    With ``cache``, the venv is kept there under a name keyed by its requirements and reused
    (after uninstalling lessons_src), for quicker local runs. ``pip --no-compile``: the install is
    about a third faster, and Python compiles what it imports on first use.
    """
    # --upgrade: the newest pip too, not the venv's bundled one (Colab's pip is pinned)
    install = ["install", "--quiet", "--no-compile", "--upgrade", "--disable-pip-version-check", *requirements(name)]
    key = hashlib.sha256("\n".join([sys.version, *install]).encode()).hexdigest()[:12]
    path = (cache / f"{name}-{key}") if cache else (where / name)
    stamp = path / ".launch-complete"
    t0 = time.perf_counter()
    reused = stamp.exists()
    if reused:
        _run([path / "bin" / "python", "-m", "pip", "uninstall", "--yes", "--quiet", "lessons-src"], timeout=300)
    else:
        shutil.rmtree(path, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        _run([base, "-m", "venv", path], timeout=300)
        _run([path / "bin" / "python", "-m", "pip", *install], timeout=1200)
        stamp.write_text(" ".join(install) + "\n")
    env = Env(name, path, time.perf_counter() - t0, reused)
    env.versions = json.loads(_run([env.python, "-c", PROBE], timeout=300))
    return env


@dataclass(frozen=True)
class Release:
    """A local git repository holding the working tree, tagged as the release the notebooks pin."""

    path: Path
    tag: str
    commit: str

    def git_environment(self) -> dict[str, str]:
        """Environment variables that make git fetch the repository URL from this repository."""
        return {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"url.{self.path.as_uri()}.insteadOf",
            "GIT_CONFIG_VALUE_0": sync_notebooks.repository_url(),
        }


def release_repository(where: Path) -> Release:
    """Copy the working tree (tracked and untracked, not ignored) to ``where``, commit, and tag it."""
    where.mkdir(parents=True)
    files = _run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, timeout=60).split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree is left out
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, where / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    git = ["git", "-c", "user.name=launch test", "-c", "user.email=launch@localhost", "-c", "commit.gpgsign=false",
           "-c", "tag.gpgsign=false"]
    _run([*git, "init", "--quiet"], cwd=where, env=env, timeout=60)
    _run([*git, "add", "--all"], cwd=where, env=env, timeout=60)
    _run([*git, "commit", "--quiet", "--no-verify", "-m", "the working tree"], cwd=where, env=env, timeout=60)
    tag = sync_notebooks.release()
    _run([*git, "tag", tag], cwd=where, env=env, timeout=60)
    commit = _run(["git", "rev-parse", "HEAD"], cwd=where, env=env, timeout=60).strip()
    return Release(where, tag, commit)


def run_directory(tmp_path_factory) -> Path:
    """The test run's temporary directory, shared by its pytest-xdist workers (each has its own below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (pytest-xdist workers are separate processes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare(session_dir: Path, names: list[str], cache: Path | None) -> tuple[dict[str, Env], Release]:
    """Once per test session, whichever process comes first: the release repository and the venvs
    ``names`` (built concurrently); the others wait for them and read what was prepared."""
    done = session_dir / "launch.json"
    with locked(session_dir / "launch.lock"):
        if not done.exists():
            release = release_repository(session_dir / "release")
            with ThreadPoolExecutor(len(names)) as pool:
                envs = list(pool.map(lambda n: build_env(n, session_dir / "venvs", cache), names))
            for env in envs:
                if installed_lessons_src(env) is not None:
                    raise RuntimeError(f"{env.name}: lessons_src is installed before any notebook ran")
            done.write_text(json.dumps({"release": {**asdict(release), "path": str(release.path)},
                                        "envs": [env.to_json() for env in envs]}))
    data = json.loads(done.read_text())
    release = Release(**{**data["release"], "path": Path(data["release"]["path"])})
    return {e["name"]: Env.from_json(e) for e in data["envs"]}, release


@dataclass(frozen=True)
class Installed:
    """What pip recorded when it installed lessons_src (its dist-info directory)."""

    dist_info: Path
    direct_url: dict
    files: list[str]

    @property
    def editable(self) -> bool:
        return bool(self.direct_url.get("dir_info", {}).get("editable"))


def installed_lessons_src(env: Env) -> Installed | None:
    found = list(env.site_packages.glob("lessons_src-*.dist-info"))
    if not found:
        return None
    (dist_info,) = found
    direct_url = json.loads((dist_info / "direct_url.json").read_text())
    files = [line.split(",")[0] for line in (dist_info / "RECORD").read_text().splitlines()]
    return Installed(dist_info, direct_url, files)


#: InteractiveFigure falls back to its static frames, with a warning, when the live ipywidgets view
#: fails (lessons_src/widgets.py). A learner would still see a figure, so nbval would pass; here
#: that warning is an error: IPython shows the exception as an error output, and nbval fails the cell.
DEAD_SLIDERS_FAIL = "error:live sliders unavailable"


def kernel_threads() -> int:
    """CPU threads per kernel: the cores shared among the pytest-xdist workers.

    Two kernels with two torch threads each on two cores ran a training chapter 12x slower than
    with one thread each (370 s against 30 s, measured on a shared 2-core machine): threads that
    outnumber the cores wait on one another. No effect on the GPU.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // workers)


def notebook_environment(env: Env, release: Release, strict: bool) -> dict[str, str]:
    """The launch venv first on PATH, git pointed at the local release; nothing from the checkout."""
    # PYTEST_ADDOPTS is the outer run's (scripts/test.sh's JUnit report, a -k filter): not for the notebook's nbval.
    drop = ("PYTHON", "VIRTUAL_ENV", "GIT_", "LESSONS_SRC_", "MPLBACKEND", "JUPYTER_PATH", "PIP_REQUIRE", "PYTEST_ADDOPTS")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    checkout_bins = {str(ROOT / ".venv" / "bin"), str(Path(sys.executable).parent)}
    path = [p for p in environ.get("PATH", "").split(os.pathsep) if p and p not in checkout_bins]
    environ.update(PATH=os.pathsep.join([str(env.path / "bin"), *path]), VIRTUAL_ENV=str(env.path),
                   PYDEVD_DISABLE_FILE_VALIDATION="1",  # a debugger notice on stderr, not ours
                   OMP_NUM_THREADS=str(kernel_threads()), PYTHONWARNINGS=DEAD_SLIDERS_FAIL,
                   **release.git_environment())
    if strict:
        environ["LESSONS_SRC_STRICT"] = "1"
    return environ


#: Loads tests/launch_outputs.py into the launch venv's pytest, and only there: on PYTHONPATH it
#: would be importable in the kernel too, which must see nothing from the checkout.
_PYTEST_WITH_PLUGIN = (
    "import importlib.util, sys, pytest; "
    "spec = importlib.util.spec_from_file_location('launch_outputs', sys.argv[1]); "
    "plugin = importlib.util.module_from_spec(spec); spec.loader.exec_module(plugin); "
    "sys.exit(pytest.main(sys.argv[2:], plugins=[plugin]))"
)


def run_notebook(env: Env, release: Release, notebook: Path, strict: bool, cell_timeout: int = 900,
                 save_to: Path | None = None):
    """nbval over one notebook, in its folder, with the launch venv's pytest and kernel; with
    ``save_to``, the executed notebook is written there when every cell ran (tests/launch_outputs.py)."""
    # Only nbval among pytest's plugins: the venv's others (anyio's, ...) are not ours to load.
    cmd = [env.python, "-c", _PYTEST_WITH_PLUGIN, ROOT / "tests" / "launch_outputs.py",
           "-q", "-p", "nbval", "-p", "no:cacheprovider", "-c", os.devnull,
           "--rootdir", notebook.parent, "--nbval-lax", "--nbval-current-env",
           "--nbval-cell-timeout", str(cell_timeout), notebook.name]
    if save_to is not None:
        cmd += ["--save-executed", save_to]
    environ = {**notebook_environment(env, release, strict), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([str(c) for c in cmd], cwd=notebook.parent, capture_output=True, text=True,
                          env=environ, timeout=3600)


# -- the per-environment breakdown printed at the end of a run ------------------------------------
def pytest_terminal_summary(terminalreporter):
    rows: dict[str, dict] = {}
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        props = dict(getattr(report, "user_properties", []))
        if report.when != "call" or "launch_env" not in props:
            continue
        row = rows.setdefault(props["launch_env"], {"passed": 0, "failed": 0, "seconds": 0.0, "times": []})
        row["passed" if report.passed else "failed"] += 1
        seconds = props.get("launch_seconds", 0.0)  # absent when the test failed before running the notebook
        row["seconds"] += seconds
        row["times"].append((seconds, props["launch_notebook"]))
        for key in ("launch_build_seconds", "launch_versions", "launch_installed_by"):
            if key in props:
                row[key] = props[key]
    if not rows:
        return
    terminalreporter.section("launch: notebooks as Colab runs them")
    for name, row in sorted(rows.items()):
        build = row.get("launch_build_seconds")
        terminalreporter.write_line(
            f"{name}: {row['passed']} passed, {row['failed']} failed; notebooks {row['seconds']:.0f} s in all"
            + (f", venv {build:.0f} s" if build is not None else "")
            + (f"; the install cell ran in {row['launch_installed_by']}" if "launch_installed_by" in row else "")
        )
        if "launch_versions" in row:
            terminalreporter.write_line(f"    {row['launch_versions']}")
        slowest = ", ".join(f"{nb} {t:.0f} s" for t, nb in sorted(row["times"], reverse=True)[:4])
        terminalreporter.write_line(f"    slowest: {slowest}")
