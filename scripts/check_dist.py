"""Check a built sdist and wheel as a learner's pip would get them.

    python scripts/check_dist.py DIST_DIR [--reuse-deps]

DIST_DIR holds exactly one ``lessons_src-<version>.tar.gz`` and one ``lessons_src-<version>-*.whl``
(``python -m build --outdir DIST_DIR``). Checked:

* both carry ``lessons_src.__version__`` of this checkout;
* both hold every module of ``lessons_src/`` (subpackages too: a plain ``packages = [...]`` once
  dropped ``lessons_src.checks``), and nothing else but metadata: no tests, notebooks, bytecode or
  build debris;
* the wheel, installed **not editable** into a fresh virtual environment and imported from outside
  the repository, imports every module and exports every name of ``lessons_src.__all__`` and
  ``lessons_src.checks.__all__``.

With ``--reuse-deps`` the fresh environment gets the wheel alone (``--no-deps``) and sees the
dependencies (torch, ...) of the interpreter running this script, behind its own site-packages:
seconds instead of a minute of installing torch. The release workflow installs them for real.
Exits 1 with the problems listed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "lessons_src"
SDIST_EXTRA = {"PKG-INFO", "pyproject.toml", "setup.cfg", "README.md", "LICENSE", "MANIFEST.in"}
DEBRIS = ("__pycache__", ".pyc", ".pyo", ".ipynb", ".egg-info/", "tests/", ".git", ".venv", "_build")

IMPORT_ALL = """
import importlib, sys
names = sys.argv[1:]
for name in names:
    importlib.import_module(name)
import lessons_src, lessons_src.checks
missing = [n for m in (lessons_src, lessons_src.checks) for n in m.__all__ if not hasattr(m, n)]
assert not missing, f"__all__ names missing: {missing}"
print(lessons_src.__version__, lessons_src.__file__)
"""


def version() -> str:
    sys.path.insert(0, str(ROOT / "scripts"))
    from release import version as release_version

    return release_version(ROOT)


def source_modules(root: Path = ROOT) -> set[str]:
    """Every module file of the package, as paths relative to the repository root."""
    return {p.relative_to(root).as_posix() for p in (root / PACKAGE).rglob("*.py") if "__pycache__" not in p.parts}


def package_data(root: Path = ROOT) -> set[str]:
    """The package's data files (``lessons_src/data/``: the course text), relative to the repository root."""
    return {p.relative_to(root).as_posix() for p in (root / PACKAGE / "data").rglob("*") if p.is_file()}


def module_names(paths: set[str]) -> list[str]:
    """``lessons_src/checks/_result.py`` -> ``lessons_src.checks._result``."""
    names = []
    for path in sorted(paths):
        parts = PurePosixPath(path).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def wheel_problems(wheel: Path, expected: set[str], want_version: str) -> list[str]:
    problems = []
    dist_info = f"{PACKAGE}-{want_version}.dist-info/"
    names = {n for n in zipfile.ZipFile(wheel).namelist() if not n.endswith("/")}
    package = {n for n in names if n.startswith(f"{PACKAGE}/")}
    if missing := sorted(expected - package):
        problems.append(f"{wheel.name}: missing modules {missing}")
    if extra := sorted(n for n in names - expected if not n.startswith(dist_info)):
        problems.append(f"{wheel.name}: unexpected files {extra}")
    if not any(n == dist_info + "METADATA" for n in names):
        problems.append(f"{wheel.name}: no {dist_info}METADATA (is the version {want_version}?)")
    return problems


def sdist_problems(sdist: Path, expected: set[str], want_version: str) -> list[str]:
    problems = []
    top = f"{PACKAGE}-{want_version}/"
    with tarfile.open(sdist) as archive:
        members = [m.name for m in archive.getmembers() if m.isfile()]
    outside = [n for n in members if not n.startswith(top)]
    if outside:
        problems.append(f"{sdist.name}: files outside {top}: {outside[:5]}")
    inside = {n[len(top):] for n in members if n.startswith(top)}
    if missing := sorted(expected - inside):
        problems.append(f"{sdist.name}: missing modules {missing}")
    egg_info = f"{PACKAGE}.egg-info/"
    extra = sorted(n for n in inside - expected - SDIST_EXTRA if not n.startswith(egg_info))
    debris = sorted(n for n in inside if n.startswith(f"{PACKAGE}/") and any(d in n for d in DEBRIS))
    if extra or debris:
        problems.append(f"{sdist.name}: unexpected files {extra + debris}")
    return problems


def install_problems(wheel: Path, reuse_deps: bool, modules: list[str]) -> list[str]:
    """Install the wheel (not editable) into a fresh venv and import every module from outside the repo."""
    with tempfile.TemporaryDirectory(prefix="check-dist-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        if reuse_deps:
            site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            # Paths in a .pth come after the venv's own site-packages, so the wheel wins over
            # anything of ours there; .pth files inside them (an editable install's finder) are
            # not run, so the checkout cannot leak in.
            ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
            (Path(site) / "_check_dist_deps.pth").write_text("\n".join(sorted(ours)) + "\n")
            pip.append("--no-deps")
        install = subprocess.run([*pip, str(wheel)], capture_output=True, text=True)
        if install.returncode != 0:
            return [f"pip install {wheel.name} failed:\n{install.stdout[-2000:]}{install.stderr[-2000:]}"]
        run = subprocess.run([str(python), "-I", "-c", IMPORT_ALL, *modules], cwd=tmp, capture_output=True,
                             text=True)
        if run.returncode != 0:
            return [f"importing from the installed wheel failed:\n{run.stderr[-3000:]}"]
        where = run.stdout.split(maxsplit=1)[1].strip()
        if not where.startswith(str(venv)):
            return [f"lessons_src was imported from {where}, not from the fresh venv {venv}"]
    return []


def check(dist: Path, reuse_deps: bool = False) -> list[str]:
    want = version()
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"{dist}: expected one wheel and one sdist, found {[p.name for p in wheels + sdists]}"]
    problems = []
    for archive in (wheels[0], sdists[0]):
        if f"-{want}" not in archive.name:
            problems.append(f"{archive.name}: version is not lessons_src.__version__ {want}")
    expected = source_modules() | package_data()
    problems += wheel_problems(wheels[0], expected, want)
    problems += sdist_problems(sdists[0], expected, want)
    if not problems:
        problems += install_problems(wheels[0], reuse_deps, module_names(source_modules()))
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path, help="folder with the sdist and the wheel")
    parser.add_argument("--reuse-deps", action="store_true",
                        help="install the wheel with --no-deps and reuse this interpreter's dependencies")
    args = parser.parse_args()
    problems = check(args.dist, args.reuse_deps)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(f"ok: {args.dist} holds lessons_src {version()} with all {len(source_modules())} modules; "
              "the wheel installs and imports in a fresh venv")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
