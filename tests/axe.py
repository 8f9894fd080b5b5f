"""axe-core, the accessibility engine, for the browser tests: a pinned version fetched once with npm.

``axe_source()`` returns the text of ``axe.min.js`` (installed under ``tests/artifacts/axe/``, which
git ignores); ``audit(page, selector)`` runs it in a Playwright page on the elements ``selector``
matches and returns the WCAG 2 A/AA violations as readable lines. Without npm the tests skip, except
under ``CI=true``, where ``scripts/test.sh`` installs npm and a missing engine is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from launch_env import locked

VERSION = "4.14.1"
HOME = Path(__file__).parent / "artifacts" / "axe"
SCRIPT = HOME / "node_modules" / "axe-core" / "axe.min.js"


def axe_source() -> str:
    HOME.mkdir(parents=True, exist_ok=True)
    with locked(HOME / ".install.lock"):  # one npm install, whichever pytest-xdist worker comes first
        if not SCRIPT.exists():
            npm = shutil.which("npm")
            if npm is None:
                message = "npm is missing (scripts/test.sh installs it): the accessibility audit needs axe-core"
                pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
            subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(HOME),
                            f"axe-core@{VERSION}"], check=True, timeout=600)
    return SCRIPT.read_text(encoding="utf-8")


def audit(page, selector: str) -> list[str]:
    """WCAG 2 A and AA violations inside ``selector`` on ``page``: one line per rule and element."""
    page.add_script_tag(content=axe_source())
    result = page.evaluate("""selector => axe.run(selector === "html" ? document : {include: [[selector]]},
        {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})""", selector)
    return [f"{v['id']} ({v['impact']}): {v['help']}: {node['target']}"
            for v in result["violations"] for node in v["nodes"]]
