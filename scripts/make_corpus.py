"""Write lessons_src/data/course_text.txt: the prose of the course's chapters, a small text corpus
that the chapter "A language model and its heads" trains a character-level model on.

Source and licence: the markdown cells of book/01-11, written by this project (MIT licence,
LICENSE). The shipped file is a snapshot: the chapter must run in Colab, where only the installed
package is there, so the text travels inside the package (package data) and is never downloaded.
Re-run this script to refresh it; the chapter's numbers will change with it.

Kept: paragraphs of prose and list items. Dropped: headings' '#' marks, code blocks, display maths,
MyST directives and citations, link targets, non-ASCII characters (mapped or removed), so that the
model learns English sentences rather than markup.

Usage: python scripts/make_corpus.py
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "lessons_src" / "data" / "course_text.txt"
CHAPTERS = [f"book/{n:02d}_" for n in range(1, 12)]
REPLACE = {"−": "-", "×": "x", "√": "sqrt", "Δ": "delta", "°": " degrees", "§": "section ", "’": "'", "“": '"',
           "”": '"', "–": "-", "—": "-", "…": "..."}


def prose(markdown: str) -> str:
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)  # code blocks
    text = re.sub(r":::.*?:::", "", text, flags=re.S)  # MyST directives
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)  # display maths
    text = re.sub(r"\{cite:[pt]\}`[^`]*`", "", text)  # citations
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"\$([^$]*)\$", r"\1", text)  # inline maths: its letters
    text = re.sub(r"\\(mathrm|text|operatorname)\{([^}]*)\}", r"\2", text)
    text = re.sub(r"[\\{}]", "", text)
    text = re.sub(r"^#+\s*", "", text, flags=re.M)  # heading marks
    text = re.sub(r"\*\*|__|`", "", text)  # emphasis and code marks
    for a, b in REPLACE.items():
        text = text.replace(a, b)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[ \t]+", " ", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def corpus() -> str:
    cells = []
    for prefix in CHAPTERS:
        (path,) = ROOT.glob(f"{prefix}*.ipynb")
        notebook = nbformat.read(path, as_version=4)
        cells += [prose(c.source) for c in notebook.cells if c.cell_type == "markdown"]
    return "\n\n".join(c for c in cells if c) + "\n"


def main() -> None:
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(corpus())
    print(f"wrote {TARGET.relative_to(ROOT)}: {TARGET.stat().st_size / 1024:.0f} KiB, "
          f"{len(set(TARGET.read_text()))} distinct characters")


if __name__ == "__main__":
    main()
