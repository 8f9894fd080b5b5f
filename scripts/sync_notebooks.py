"""Keep every notebook's first cell (the Colab install cell) in sync, and strip outputs.

The release that notebooks install is `v` + `lessons_src.__version__` (RELEASING.md) and the
repository URL is _config.yml's `repository.url`; this script writes both into the first
code cell of every notebook in book/, exercises/ and solutions/. Run it after changing either,
and before committing a notebook: `python scripts/sync_notebooks.py`. The test suite checks
that nothing is out of sync (`python scripts/sync_notebooks.py --check`).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIRS = ("book", "exercises", "solutions")
INSTALL_TAGS = ["hide-cell"]
ANSWER_TAG = "exercise"  # the cells a learner completes
HIDDEN = "hide-input"  # on the site, a solution's answer cells start collapsed
#: What an exercise's check says of the answer cell as handed out (a stub raising NotImplementedError).
STUB_FEEDBACK = "not implemented yet"


def notebooks() -> list[Path]:
    return sorted(p for d in NOTEBOOK_DIRS for p in (ROOT / d).glob("*.ipynb"))


def version() -> str:
    """``lessons_src.__version__``, read from the source (the package need not be importable)."""
    tree = ast.parse((ROOT / "lessons_src" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError("lessons_src/__init__.py sets no __version__")


def release() -> str:
    """The git tag of the release a fresh Colab installs: ``v`` + the package version."""
    return f"v{version()}"


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")


def stub_feedback(nb: nbformat.NotebookNode) -> str:
    """Words the FAIL line of an exercise as handed out must contain: :data:`STUB_FEEDBACK`, unless the
    notebook's metadata declares others, ``"lessons_src": {"stub_feedback": "..."}`` (an exercise that
    hands out working code with bugs to find, whose check names the first bug)."""
    return nb.metadata.get("lessons_src", {}).get("stub_feedback", STUB_FEEDBACK)


def install_cell_source() -> str:
    # --no-deps: Colab already has torch (a CUDA build), numpy, matplotlib, seaborn, ipywidgets
    # and tqdm; installing our torch pin there would replace its GPU build with a large download.
    return (
        "# Set-up: installs the course package where it is missing (as in a fresh Colab).\n"
        "try:\n"
        "    import lessons_src\n"
        "except ImportError:\n"
        f'    %pip install --quiet --no-deps "lessons-src @ git+{repository_url()}@{release()}"'
    )


def problems(path: Path) -> list[str]:
    """What is out of sync in one notebook (empty when it is clean)."""
    nb = nbformat.read(path, as_version=4)
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code or code[0].source != install_cell_source():
        found.append("first code cell is not the install cell")
    elif nb.cells.index(code[0]) > 2:
        found.append("the install cell must come right after the title")
    for i, cell in enumerate(code):
        if cell.get("outputs") or cell.get("execution_count") is not None:
            found.append(f"code cell {i} has outputs or an execution count")
        tags = cell.metadata.get("tags", [])
        if path.parent.name == "solutions" and ANSWER_TAG in tags and HIDDEN not in tags:
            found.append(f"code cell {i} is an answer but not tagged {HIDDEN} (solutions start hidden)")
    return found


def sync(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if code and code[0].source.startswith("# Set-up: installs the course package"):
        code[0].source = install_cell_source()
    else:
        cell = nbformat.v4.new_code_cell(install_cell_source())
        nb.cells.insert(1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0, cell)
        code = [cell]
    code[0].metadata["tags"] = INSTALL_TAGS
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            tags = cell.metadata.get("tags", [])
            if path.parent.name == "solutions" and ANSWER_TAG in tags and HIDDEN not in tags:
                cell.metadata["tags"] = [*tags, HIDDEN]
        cell.metadata.pop("execution", None)
    after = nbformat.writes(nb)
    if after != before:
        path.write_text(after + ("" if after.endswith("\n") else "\n"))
        return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report problems, change nothing")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: all of them)")
    args = parser.parse_args()
    bad = 0
    for path in [p.resolve() for p in args.paths] or notebooks():
        rel = path.relative_to(ROOT)
        if args.check:
            for problem in problems(path):
                print(f"{rel}: {problem}")
                bad += 1
        elif sync(path):
            print(f"synced {rel}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
