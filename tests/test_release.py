"""The release procedure's checks (scripts/release.py, RELEASING.md) on a throw-away git repository."""

import subprocess

import pytest
import release  # scripts/, on sys.path (tests/conftest.py)


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "lessons_src").mkdir()
    (tmp_path / "lessons_src" / "__init__.py").write_text('"""x"""\n\n__version__ = "1.2.3"\n')
    (tmp_path / "lessons_src" / "attention.py").write_text("A = 1\n")
    (tmp_path / "README.md").write_text("readme\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def test_this_repository_has_one_version():
    import lessons_src

    assert release.version() == lessons_src.__version__
    assert release.tag() == f"v{lessons_src.__version__}"


def test_check_tag(repo):
    release.check_tag("v1.2.3", repo)
    for wrong in ("v1.2.4", "1.2.3", "v1.2.3-rc1"):
        with pytest.raises(release.ReleaseError, match=f"tag '{wrong}' does not match .*'1.2.3'"):
            release.check_tag(wrong, repo)


def test_check_pinned_needs_the_tag(repo):
    with pytest.raises(release.ReleaseError, match="install v1.2.3, which is not a tag here"):
        release.check_pinned(repo)
    _git(repo, "tag", "v1.2.3")
    release.check_pinned(repo)


def test_check_pinned_ignores_pages_but_not_the_package(repo):
    _git(repo, "tag", "v1.2.3")
    (repo / "README.md").write_text("a better page\n")
    _git(repo, "commit", "-qam", "prose")
    release.check_pinned(repo)  # the site may change between releases
    (repo / "lessons_src" / "attention.py").write_text("A = 2\n")
    _git(repo, "commit", "-qam", "code")
    with pytest.raises(release.ReleaseError, match=r"lessons_src/ changed since v1.2.3 \(lessons_src/attention.py\)"):
        release.check_pinned(repo)


def test_bump(repo):
    release.bump("1.3.0", repo)
    assert release.version(repo) == "1.3.0"
    assert '"""x"""' in (repo / "lessons_src" / "__init__.py").read_text()
    for bad, message in (("1.3", "X.Y.Z"), ("v1.4.0", "X.Y.Z"), ("1.2.9", "greater than the current 1.3.0"),
                         ("1.3.0", "greater")):
        with pytest.raises(release.ReleaseError, match=message):
            release.bump(bad, repo)


def test_cli_exit_codes(repo):
    assert release.main(["check-tag", release.tag()]) == 0
    assert release.main(["check-tag", "v0.0.0-not-it"]) == 1
