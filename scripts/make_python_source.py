"""Write lessons_src/data/python_stdlib.txt.gz: source files of Python's standard library, the corpus the
course's trained models (lessons_src.zoo) learn from.

Why this text: the zoo's models must be trained on text that is licence-clean and present wherever the
course runs (Colab, Binder, CI, offline), on which a small model trained on a laptop's CPU beats the best
count-based table (lessons_src.best_ngram_loss) by a clear margin. The course's own prose (120 KiB) is too
small for that, and so is English prose of a few megabytes (Python's 1.2 MB of docstrings: after 900 steps
the model stood at 1.405 nats per character against the table's 1.294, still far). Program text has what
a table of the last few characters cannot see and attention can: names defined lines earlier and used
again, brackets opened far back, the indentation of the block. Python's source is under the Python
Software Foundation licence (lessons_src/data/PSF-LICENSE.txt, shipped beside it as that licence asks). It
differs between Python versions, so the package ships one snapshot (this script's output, gzip-compressed)
rather than reading the running Python: every installation trains and evaluates on the same bytes.

Kept: the standard library's .py files of at most MAX_BYTES (tests, idlelib, lib2to3, turtledemo,
pydoc_data, the codec tables of encodings and site-packages left out), in a seeded random order, until TOTAL characters; each mapped to
ASCII (NFKD, the rest removed). Files are separated by the ASCII record separator (0x1E), which none
contains; lessons_src.zoo.python_source() holds out every tenth.

Usage: python scripts/make_python_source.py   (the zoo's cards record the corpus's hash: re-train after)
"""

from __future__ import annotations

import gzip
import random
import sys
import sysconfig
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "lessons_src" / "data" / "python_stdlib.txt.gz"
LEFT_OUT = {"test", "tests", "idlelib", "lib2to3", "turtledemo", "pydoc_data", "encodings", "site-packages",
            "dist-packages"}  # encodings: codec tables
MAX_BYTES = 100_000  # larger files are mostly tables (unicode data, _pydecimal's copies of decimal)
TOTAL = 3_300_000
SEPARATOR = "\x1e"


def files() -> list[tuple[str, str]]:
    library = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in library.rglob("*.py")
                   if not LEFT_OUT & set(p.relative_to(library).parts) and p.stat().st_size <= MAX_BYTES)
    random.Random(0).shuffle(paths)
    chosen, total = [], 0
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="ignore")
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
        if SEPARATOR in text or not text.strip():
            continue
        chosen.append((str(path.relative_to(library)), text))
        total += len(text)
        if total >= TOTAL:
            break
    return chosen


def main() -> None:
    chosen = files()
    data = SEPARATOR.join(text for _, text in chosen).encode("ascii")
    TARGET.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))  # mtime=0: the same bytes every run
    print(f"wrote {TARGET.relative_to(ROOT)}: {len(chosen)} files, {len(data):,} characters, "
          f"{TARGET.stat().st_size / 1024:.0f} KiB compressed, from Python {sys.version.split()[0]}")
    print("first files:", ", ".join(name for name, _ in chosen[:8]), "...")


if __name__ == "__main__":
    main()
