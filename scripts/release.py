"""The release procedure's checks (RELEASING.md): the release a notebook installs must exist and match.

Every notebook's first cell installs tag ``v<version>`` of this repository, the version being
``lessons_src.__version__`` (set there only). So:

    python scripts/release.py bump 0.2.0      # set the version; rewrite every notebook's install cell
    python scripts/release.py check-tag v0.2.0  # release.yml: the pushed tag is v + the version
    python scripts/release.py check-pinned    # pages.yml: tag v<version> exists and lessons_src/ is
                                              # unchanged since it, so the site's notebooks install
                                              # the very code the site was built with

Each exits 0 when all is well and 1 with a sentence saying what to do otherwise.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.M)
VERSION = re.compile(r"^\d+\.\d+\.\d+$")  # plain X.Y.Z: what the tags and the install cell use
PACKAGE = "lessons_src"


class ReleaseError(Exception):
    """A release check failed; the message says what to do."""


def version(root: Path = ROOT) -> str:
    """``lessons_src.__version__`` as written in the source."""
    found = VERSION_LINE.findall((root / PACKAGE / "__init__.py").read_text())
    if len(found) != 1:
        raise ReleaseError(f"{PACKAGE}/__init__.py must set __version__ exactly once, found {len(found)}")
    return found[0]


def tag(root: Path = ROOT) -> str:
    """The release tag that notebooks install."""
    return f"v{version(root)}"


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def check_tag(name: str, root: Path = ROOT) -> None:
    """The tag being released is ``v`` + the package version."""
    if name != tag(root):
        raise ReleaseError(
            f"tag {name!r} does not match lessons_src.__version__ {version(root)!r}: the notebooks install "
            f"{tag(root)!r}. Run `python scripts/release.py bump X.Y.Z`, commit, then tag vX.Y.Z."
        )


def check_pinned(root: Path = ROOT) -> None:
    """The pinned tag exists and the package is unchanged since it."""
    pinned = tag(root)
    if _git(root, "rev-parse", "--verify", "--quiet", f"refs/tags/{pinned}").returncode != 0:
        raise ReleaseError(
            f"the notebooks install {pinned}, which is not a tag here (fetch tags, or cut the release: RELEASING.md)"
        )
    diff = _git(root, "diff", "--name-only", pinned, "HEAD", "--", PACKAGE)
    if diff.returncode != 0:
        raise ReleaseError(f"git diff against {pinned} failed: {diff.stderr.strip()}")
    changed = diff.stdout.split()
    if changed:
        raise ReleaseError(
            f"{PACKAGE}/ changed since {pinned} ({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}): "
            "learners in Colab would install older code than the site shows. Release a new version first "
            "(RELEASING.md)."
        )


def bump(new: str, root: Path = ROOT) -> None:
    """Set ``lessons_src.__version__`` to ``new`` (X.Y.Z, greater than the current one)."""
    if not VERSION.match(new):
        raise ReleaseError(f"version must look like X.Y.Z (digits), got {new!r}")
    old = version(root)
    if tuple(map(int, new.split("."))) <= tuple(map(int, old.split("."))):
        raise ReleaseError(f"new version {new} must be greater than the current {old}")
    init = root / PACKAGE / "__init__.py"
    init.write_text(VERSION_LINE.sub(f'__version__ = "{new}"', init.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check-tag", help="the tag equals v + lessons_src.__version__").add_argument("tag")
    commands.add_parser("check-pinned", help="the pinned tag exists and lessons_src/ is unchanged since it")
    commands.add_parser("bump", help="set the version and rewrite the notebooks' install cells").add_argument(
        "version"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "check-tag":
            check_tag(args.tag)
            print(f"ok: {args.tag} is the version the notebooks install")
        elif args.command == "check-pinned":
            check_pinned()
            print(f"ok: {tag()} exists and {PACKAGE}/ is unchanged since it")
        else:
            bump(args.version)
            sync = subprocess.run([sys.executable, str(ROOT / "scripts" / "sync_notebooks.py")], cwd=ROOT)
            if sync.returncode != 0:
                raise ReleaseError("scripts/sync_notebooks.py failed (see above)")
            print(f"version {args.version}: commit, then run both tiers (`bash scripts/test.sh` and `bash scripts/test.sh full`) on that commit before tagging: RELEASING.md")
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
