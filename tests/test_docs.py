"""Hygiene of the documents: the repository explains itself with files it holds.

- Every relative link and every repository path written in backticks (inline or in a fenced block)
  in README.md, CONTRIBUTING.md and RELEASING.md names a file or folder that exists; a link's
  `#anchor` names a heading of its target.
- Every citation of a section of CONTRIBUTING.md in a tracked file, written as in
  `(CONTRIBUTING.md, "Sliders")`, names a heading of CONTRIBUTING.md.
- No tracked file cites the briefing files that lived outside the repository.

A backticked word counts as a repository path when it contains a `/` or ends in a known file
extension; left out are URLs, absolute paths, command-line options, MIME types, templates
(`<...>`) and paths that .gitignore covers (outputs such as `_build/html` or `.venv/bin/python`).
A bare file name (`weekly.yml`) must be the name of a tracked file.
"""

import re
import subprocess

import pytest
from conftest import ROOT

DOCUMENTS = ["README.md", "CONTRIBUTING.md", "RELEASING.md"]
REQUIRED = ["README.md", "CONTRIBUTING.md"]
EXTENSIONS = (".md", ".py", ".yml", ".yaml", ".toml", ".ipynb", ".sh", ".txt", ".bib", ".json", ".cfg", ".in",
              ".svg", ".js", ".css")
MIME_TYPES = ("text/", "image/", "application/", "audio/", "video/")
# Split so that this file does not mention them itself.
FORBIDDEN = ["shared/" + "DESIGN.md", "shared/" + "STYLE.md", "/work/" + "shared"]
CITATION = re.compile(r'CONTRIBUTING\.md, "([^"]+)"')

FENCE = re.compile(r"^ *(```+|~~~+)[^\n]*\n(.*?)^ *\1 *$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
PATH_CHARS = re.compile(r"^[A-Za-z0-9_.\-/]+$")


def _git(*args: str, ok=(0,)) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode in ok, f"git {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout


def tracked_files() -> list[str]:
    return [f for f in _git("ls-files", "-z").split("\0") if f]


def ignored(paths: list[str]) -> set[str]:
    """The paths that .gitignore covers (generated outputs, not repository files)."""
    if not paths:
        return set()
    return set(_git("check-ignore", "--", *paths, ok=(0, 1)).splitlines())


def split_code(text: str) -> tuple[str, list[str]]:
    """``(prose, code)``: the text with code removed, and the content of every code block and span."""
    code = [m.group(2) for m in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    code += [m.group(2) for m in INLINE_CODE.finditer(prose)]
    return INLINE_CODE.sub("", prose), code


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces as hyphens."""
    text = heading.strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(text: str) -> list[str]:
    """The text of every heading outside fenced code blocks."""
    return [h.strip() for h in HEADING.findall(FENCE.sub("", text))]


def path_candidates(code: str) -> list[tuple[str, str | None]]:
    """The words of a code block or span that name repository paths: ``(path, test name or None)``."""
    found = []
    for word in code.split():
        word = word.strip("\"'(),;:`")
        if word.endswith(".") and not word.endswith(".."):  # the end of a sentence
            word = word[:-1]
        path, _, test = word.partition("::")
        if not path or not PATH_CHARS.match(path) or path.startswith(("/", "-")) or path in (".", ".."):
            continue
        if "/" in path and not path.startswith(MIME_TYPES):
            found.append((path, test or None))
        elif "/" not in path and path.endswith(EXTENSIONS) and path not in EXTENSIONS:  # not `.ipynb` alone
            found.append((path, test or None))
    return found


def problems(doc: str, text: str | None = None) -> list[str]:
    """What in one document names something that does not exist (empty when all is well)."""
    path = ROOT / doc
    text = path.read_text() if text is None else text
    prose, code = split_code(text)
    found = []

    # Links, written in the prose (a link inside code is code).
    for target in LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        if file_part:
            target_path = (path.parent / file_part).resolve()
            if not target_path.exists():
                found.append(f"{doc}: link to {target!r}: no such file")
                continue
            target_text = target_path.read_text() if target_path.suffix == ".md" else None
        else:  # an anchor in this document
            target_text = text
        if anchor and target_text is not None and anchor not in {slug(h) for h in headings(target_text)}:
            found.append(f"{doc}: link to {target!r}: no heading with that anchor")

    # Paths in backticks.
    candidates = [c for block in code for c in path_candidates(block)]
    skip = ignored(sorted({p for p, _ in candidates}))
    names = {f.rsplit("/", 1)[-1] for f in tracked_files()}
    for name, test in candidates:
        if name in skip:
            continue
        target = ROOT / name
        if "/" not in name and not target.exists():
            if name not in names:
                found.append(f"{doc}: `{name}` is not the name of any file in the repository")
            continue
        if not target.exists():
            found.append(f"{doc}: `{name}` does not exist")
        elif test and not re.search(rf"^\s*def {re.escape(test)}\(", target.read_text(), re.M):
            found.append(f"{doc}: `{name}::{test}`: no such test")
    return found


@pytest.mark.parametrize("doc", REQUIRED)
def test_the_documents_exist(doc):
    assert (ROOT / doc).is_file()


@pytest.mark.parametrize("doc", [d for d in DOCUMENTS if (ROOT / d).exists()])
def test_every_link_and_path_exists(doc):
    assert problems(doc) == []


def test_every_cited_section_of_contributing_exists():
    sections = set(headings((ROOT / "CONTRIBUTING.md").read_text()))
    missing = []
    for name in tracked_files():
        try:
            text = (ROOT / name).read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        missing += [f"{name}: {section!r}" for section in CITATION.findall(text) if section not in sections]
    assert missing == [], f"citations of CONTRIBUTING.md sections that do not exist: {missing}"


def test_no_file_cites_a_briefing_outside_the_repository():
    citing = []
    for name in tracked_files():
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        data = path.read_bytes()
        citing += [f"{name}: {word}" for word in FORBIDDEN if word.encode() in data]
    assert citing == [], f"files citing what is not in the repository: {citing}"


# -- the checker itself: it must catch what it is for ---------------------------------------------


def test_checker_accepts_real_paths_links_and_anchors():
    text = (
        "See [the README](README.md#two-commands), [budget](CONTRIBUTING.md#redraw-budget), [here](#a-b_c-d)\n"
        "and `scripts/test.sh`, `lessons_src/checks/`,\n"
        "`tests/test_attention.py::test_fully_masked_rows_give_zeros_not_nan`, `pyproject.toml`,\n"
        "`ci.yml`, `text/html`, `_build/html`, `book/<NN>_<topic>.ipynb`, `-W`, `/usr/bin/chromium`.\n\n"
        "```bash\n.venv/bin/python benchmarks/bench_training.py --steps 10\n```\n"
        "## A `b_c` (d)\n"
    )
    assert problems("SELFTEST.md", text) == []


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("[x](DOES_NOT_EXIST.md)", "link to 'DOES_NOT_EXIST.md': no such file"),
        ("[x](README.md#no-such-heading)", "no heading with that anchor"),
        ("[x](#no-such-heading)", "no heading with that anchor"),
        ("[x](CONTRIBUTING.md#sliders-)", "no heading with that anchor"),
        ("run `scripts/does_not_exist.sh`", "`scripts/does_not_exist.sh` does not exist"),
        ("```bash\npython scripts/nope.py\n```", "`scripts/nope.py` does not exist"),
        ("see `nowhere.yml`", "`nowhere.yml` is not the name of any file"),
        ("`tests/test_attention.py::test_no_such_test`", "no such test"),
        ("a path split over\nlines: `lessons_src/no_such_module.py`", "does not exist"),
    ],
)
def test_checker_catches_what_is_missing(text, complaint):
    found = problems("SELFTEST.md", text)
    assert len(found) == 1 and complaint in found[0], found


def test_citation_pattern_finds_sections():
    sample = 'see (CONTRIBUTING' + '.md, "No such section") and CONTRIBUTING' + '.md, "Thebe".'  # split: not a citation here
    assert CITATION.findall(sample) == ["No such section", "Thebe"]


def test_the_bibliography_parses_and_has_every_cited_key():
    """references.bib as Sphinx reads it (pybtex, strict): a broken entry fails the whole site build."""
    from pybtex.database import parse_file

    keys = set(parse_file(ROOT / "references.bib").entries)
    cited = set()
    for path in [*ROOT.glob("book/*.ipynb"), *ROOT.glob("book/*.md"), *ROOT.glob("exercises/*.ipynb"),
                 *ROOT.glob("solutions/*.ipynb")]:
        for match in re.finditer(r"\{cite(?::\w+)?\}`([^`]+)`", path.read_text()):
            cited.update(key.strip() for key in match.group(1).split(","))
    assert cited and cited <= keys, sorted(cited - keys)


def test_every_glossary_term_is_preceded_by_an_empty_line():
    """Sphinx warns (and the site build fails) on a term glued to the previous definition, as a merge leaves it."""
    lines = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("```{glossary}")
    end = lines.index("```", start + 1)
    glued = [f"line {i + 1}: {line}" for i, line in enumerate(lines[start + 2:end], start=start + 2)
             if line and not line.startswith(" ") and lines[i - 1].strip()]
    assert glued == [], glued
