"""The website in one place: its pages (read from _toc.yml), its build command, and the reuse of
the launch stage's executions by the build.

    python scripts/book.py build [--path-output DIR]    # what `bash scripts/site.sh` runs
    python scripts/book.py pages                         # the pages, in table-of-contents order

Everything else that needs the pages or the build (tests/, benchmarks/) imports this file.

Execute once (CONTRIBUTING.md, "Executing each page once"): the `notebooks` stage runs every
notebook as a learner would (tests/test_launch.py) and saves each executed copy under
``_build/launch/<environment>/``, with the hash of the notebook and of the package it ran with.
Before building, :func:`seed_execution_cache` copies the outputs of the copies that still match
the notebook and the package into the build's execution cache (jupyter-cache, the same store that
``execute_notebooks: cache`` fills), so the build executes only pages without a matching copy.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
CACHE = BUILD / ".jupyter_cache"  # Jupyter Book's default execution cache, next to the HTML
LAUNCH = BUILD / "launch"  # executed copies saved by tests/test_launch.py, one folder per environment
#: Whose executions the site shows, by preference: the newest libraries (as in JupyterLab), which the full
#: test tier executes, else Colab's, the one execution of each page in the gate (CONTRIBUTING.md, "Two tiers").
SITE_ENVS = ("ipywidgets8", "ipywidgets7.7.1")
#: Pages about the machine that built the site: always executed by the build itself.
EXECUTED_BY_THE_BUILD = ("book/status",)


def pages(caption: str | None = None) -> list[str]:
    """Every page of the site, without its extension, in table-of-contents order (root first), or
    only those of the part with this caption ("Chapters", "Exercises", ...)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = [chapter["file"] for part in toc["parts"] if caption in (None, part["caption"])
              for chapter in part["chapters"]]
    return listed if caption else [toc["root"], *listed]


def notebook_pages() -> list[str]:
    """The pages that are notebooks (``book/01_attention_from_scratch``, ...)."""
    return [page for page in pages() if (ROOT / f"{page}.ipynb").exists()]


def build_command(path_output: Path | None = None, *extra: str) -> list[str]:
    """Jupyter Book 1 over the repository; ``-W``: any warning, a failing cell included, fails it."""
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    command = [str(jupyter_book), "build", str(ROOT), "--warningiserror", "--keep-going", *extra]
    return command + (["--path-output", str(path_output)] if path_output else [])


def build(path_output: Path | None = None, *extra: str, capture: bool = False,
          seed: bool = True) -> subprocess.CompletedProcess:
    """Seed the execution cache from the launch stage (unless ``seed`` is false), then build into
    ``path_output/_build/html`` (default: this repository's ``_build/html``)."""
    if seed:
        seed_execution_cache((path_output or ROOT) / "_build" / ".jupyter_cache")
    return subprocess.run(build_command(path_output, *extra), cwd=ROOT, capture_output=capture, text=True,
                          timeout=1800)


# -- reuse of the launch stage's executions ---------------------------------------------------------
def package_hash(root: Path = ROOT) -> str:
    """A hash of every file of the package in ``root`` (its data too: the explorer's JavaScript, the zoo, the
    corpus; not the bytecode): an execution is reused only with the same package."""
    digest = hashlib.sha256()
    for path in sorted(p for p in (root / "lessons_src").rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def launch_copy(env: str, page: str) -> Path:
    return LAUNCH / env / f"{page}.ipynb"


def save_launch_copy(env: str, page: str, executed: nbformat.NotebookNode, seconds: float, *,
                     notebook_sha256: str, package_sha256: str) -> Path:
    """Keep a launch execution of ``page`` (called by tests/test_launch.py) with the hashes of the
    notebook file and of the package that ran (:func:`file_hash`, :func:`package_hash`)."""
    executed.metadata["launch"] = {"env": env, "notebook_sha256": notebook_sha256,
                                   "package_sha256": package_sha256, "seconds": seconds}
    target = launch_copy(env, page)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(executed, target)
    return target


def read_launch_copy(env: str, page: str, package: str | None = None) -> nbformat.NotebookNode | None:
    """The saved execution of ``page`` in ``env`` if it ran this notebook with this package, else None."""
    path = launch_copy(env, page)
    if not path.exists():
        return None
    executed = nbformat.read(path, as_version=4)
    meta = executed.metadata.get("launch", {})
    if (meta.get("notebook_sha256") != file_hash(ROOT / f"{page}.ipynb")
            or meta.get("package_sha256") != (package or package_hash())):
        return None
    return executed


def as_built(page: str, executed: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook as the build would have executed it: the source with the launch copy's outputs.

    The install cell's outputs are dropped: the build's kernel already has the package, so there
    the cell prints nothing, while the launch copy may show pip installing it.
    """
    source = nbformat.read(ROOT / f"{page}.ipynb", as_version=4)
    code = [cell for cell in source.cells if cell.cell_type == "code"]
    ran = [cell for cell in executed.cells if cell.cell_type == "code"]
    if [c.source for c in code] != [c.source for c in ran]:
        raise ValueError(f"{page}: the launch copy's code differs from the notebook's")
    for count, (cell, result) in enumerate(zip(code, ran), start=1):
        cell.outputs = [] if count == 1 else result.outputs
        cell.execution_count = count
    return source


def seed_execution_cache(cache_path: Path = CACHE, envs: tuple[str, ...] = SITE_ENVS) -> list[str]:
    """Put the matching launch execution of each page into the build's execution cache, from the first of
    ``envs`` that has one; return the pages seeded."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    if not any((LAUNCH / env).exists() for env in envs):
        return []
    cache, package, seeded = get_cache(cache_path), package_hash(), []
    for page in notebook_pages():
        if page in EXECUTED_BY_THE_BUILD:
            continue
        found = ((env, read_launch_copy(env, page, package)) for env in envs)
        env, executed = next(((e, x) for e, x in found if x is not None), (None, None))
        if executed is None:  # the build executes the page, unless its cache holds an execution with this package
            _drop_stale_execution(cache, page, package)
            continue
        bundle = CacheBundleIn(as_built(page, executed), str(ROOT / f"{page}.ipynb"),
                               data={"execution_seconds": executed.metadata["launch"]["seconds"],
                                     "launch_env": env, "package_sha256": package})
        cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
        seeded.append(page)
    return seeded


def _drop_stale_execution(cache, page: str, package: str) -> None:
    """Remove the cached execution of ``page`` if it was seeded from a launch copy that ran another package: the
    cache matches notebooks by their code alone, so a change to the package (explorer.js included) would
    otherwise leave the page's old outputs on the site. (An execution by the build itself carries no package
    hash and is kept, as Jupyter Book keeps it.)"""
    try:
        record = cache.match_cache_notebook(nbformat.read(ROOT / f"{page}.ipynb", as_version=4))
    except KeyError:
        return
    seeded_with = (record.data or {}).get("package_sha256")
    if seeded_with is not None and seeded_with != package:
        cache.remove_cache(record.pk)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build_parser = sub.add_parser("build", help="build the website (-W) into _build/html")
    build_parser.add_argument("--path-output", type=Path, default=None, help="build into DIR/_build instead")
    sub.add_parser("pages", help="list the pages in table-of-contents order")
    args = parser.parse_args()
    if args.command == "pages":
        print("\n".join(pages()))
        return 0
    return build(args.path_output).returncode


if __name__ == "__main__":
    sys.exit(main())
