"""book/_ext/course_site.py patches one upstream bug: sphinx-thebe's inline configuration script
appears twice on every page. These tests build a two-line Sphinx project (a few seconds each) to
show that the bug is still there and that the patch removes exactly that one duplicate. When the
first test fails, sphinx-thebe was fixed: delete the patch (CONTRIBUTING.md, "Thebe")."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

EXT = ROOT / "book" / "_ext"


def build(tmp_path: Path, extensions: list[str]) -> tuple[subprocess.CompletedProcess, str]:
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(EXT)!r})\nextensions = {extensions!r}\n")
    (src / "index.rst").write_text("A page\n======\n\nSome text.\n")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    page = tmp_path / "out" / "index.html"
    return proc, page.read_text() if page.exists() else ""


def thebe_config_scripts(page: str) -> list[str]:
    return re.findall(r"<script>const THEBE_JS_URL = [^<]*</script>", page)


def test_sphinx_thebe_still_duplicates_its_configuration_script(tmp_path):
    proc, page = build(tmp_path, ["sphinx_thebe"])
    assert proc.returncode == 0, proc.stderr
    scripts = thebe_config_scripts(page)
    assert len(scripts) == 2 and scripts[0] == scripts[1], (
        f"sphinx-thebe now writes its configuration script {len(scripts)} time(s): the upstream bug is gone, "
        "delete book/_ext/course_site.py and its entry under local_extensions in _config.yml")


def test_the_patch_keeps_one_copy_and_every_other_script(tmp_path):
    proc, patched = build(tmp_path, ["sphinx_thebe", "course_site"])
    assert proc.returncode == 0, proc.stderr
    assert len(thebe_config_scripts(patched)) == 1
    _, plain = build(tmp_path / "plain", ["sphinx_thebe"])
    others = [s for s in re.findall(r"<script[^>]*>[^<]*</script>", plain) if "THEBE_JS_URL" not in s]
    assert others and others == [s for s in re.findall(r"<script[^>]*>[^<]*</script>", patched)
                                 if "THEBE_JS_URL" not in s]


class Script:
    def __init__(self, filename=None, **attributes):
        self.filename, self.attributes = filename, attributes


@pytest.mark.parametrize("count", [1, 3])
def test_a_changed_duplicate_is_a_warning_not_a_silent_fix(count, monkeypatch):
    """With -W (the site build) the warning fails the build, so the patch cannot outlive the bug."""
    sys.path.insert(0, str(EXT))
    import course_site

    warnings = []
    monkeypatch.setattr(course_site.logger, "warning", lambda message, **kw: warnings.append(message))
    scripts = [Script(body="const THEBE_JS_URL = 'x'") for _ in range(count)] + [Script("other.js")] * 2
    context = {"script_files": list(scripts)}
    course_site.drop_duplicate_thebe_config(None, "index", None, context, None)
    assert context["script_files"] == scripts  # nothing dropped: not the duplicate the patch knows
    assert len(warnings) == 1 and f"found it {count} times" in warnings[0]
