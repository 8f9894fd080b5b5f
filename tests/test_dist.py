"""The distribution a learner's pip gets: the sdist and wheel built as a release builds them, their
contents checked, and the wheel installed (not editable) in a fresh venv, every module imported
from outside the repository (scripts/check_dist.py)."""

import io
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile

import check_dist  # scripts/, on sys.path (tests/conftest.py)
import pytest
from conftest import ROOT

pytestmark = pytest.mark.dist


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _archives(dist):
    return next(dist.glob("*.whl")), next(dist.glob("*.tar.gz"))


def test_built_distribution_passes_every_check(dist):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_dist.py"), str(dist), "--reuse-deps"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    modules = check_dist.source_modules()
    assert "lessons_src/checks/_result.py" in modules and len(modules) >= 20
    assert f"lessons_src {check_dist.version()} with all {len(modules)} modules" in proc.stdout


def test_every_module_is_in_the_wheel(dist):
    wheel, _ = _archives(dist)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert check_dist.source_modules() | check_dist.package_data() <= names
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n or n.endswith(".ipynb")]


def test_a_wheel_without_a_subpackage_is_caught(dist, tmp_path):
    """What `packages = ["lessons_src"]` produced: a wheel without lessons_src/checks/."""
    wheel, _ = _archives(dist)
    broken = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            if not item.filename.startswith("lessons_src/checks/"):
                dst.writestr(item, src.read(item))
    problems = check_dist.wheel_problems(broken, check_dist.source_modules() | check_dist.package_data(), check_dist.version())
    assert len(problems) == 1 and "missing modules" in problems[0] and "lessons_src/checks/_result.py" in problems[0]


def test_debris_in_the_sdist_is_caught(dist, tmp_path):
    _, sdist = _archives(dist)
    top = f"lessons_src-{check_dist.version()}/"
    broken = tmp_path / sdist.name
    with tarfile.open(sdist) as src, tarfile.open(broken, "w:gz") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name in ("tests/test_attention.py", "lessons_src/__pycache__/attention.cpython-311.pyc"):
            data = b"debris"
            info = tarfile.TarInfo(top + name)
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    problems = check_dist.sdist_problems(broken, check_dist.source_modules() | check_dist.package_data(), check_dist.version())
    assert len(problems) == 1 and "tests/test_attention.py" in problems[0] and ".pyc" in problems[0]


def test_a_wrong_version_is_caught(dist, tmp_path):
    wheel, sdist = _archives(dist)
    for archive in (wheel, sdist):
        shutil.copy(archive, tmp_path / archive.name.replace(check_dist.version(), "9.9.9"))
    problems = check_dist.check(tmp_path)
    assert any("version is not lessons_src.__version__" in p for p in problems), problems


def test_the_website_extra_installs_what_the_pages_run(dist, tmp_path):
    """``scripts/site.sh`` installs ``lessons_src[book]`` and executes every page, chapter 18's offline stand-in
    too, which writes and reads a checkpoint with ``tokenizers``. pip resolves the built wheel's ``[book]`` extra
    from scratch (``--ignore-installed``, nothing installed) and must bring what the pages import."""
    wheel, _ = _archives(dist)
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--disable-pip-version-check", "--report", str(report), f"{wheel}[book]"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    resolved = {item["metadata"]["name"].lower().replace("_", "-") for item in json.loads(report.read_text())["install"]}
    for needed in ("jupyter-book", "ipykernel", "tokenizers", "huggingface-hub", "safetensors", "torch", "ipywidgets"):
        assert needed in resolved, f"lessons_src[book] does not bring {needed}: the website build would fail without it"
