"""Every docstring of lessons_src names chapters that exist, by title, and every public name has one.

A chapter is named by its title, the first heading of its notebook in _toc.yml, or by the part of
that title before a colon ("Training attention" for "Training attention: learning to reverse a
sequence"), in the form ``chapter "<title>"`` (or ``chapters "<title>" and "<title>"``). A chapter
renamed in its notebook, or a module naming a chapter that does not exist, fails here.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
from types import ModuleType

import pytest
from conftest import ROOT

import book  # scripts/, on sys.path (tests/conftest.py)
import lessons_src

# `chapter "A"`, `chapters "A" and "B"`, `chapters "A", "B" and "C"`: every quoted title after it.
REFERENCE = re.compile(r'\bchapters?\s+("[^"]+"(?:\s*(?:,|and|, and)\s*"[^"]+")*)', re.I)
QUOTED = re.compile(r'"([^"]+)"')
# The old forms, which named chapters that did not exist: `"The encoder block" chapter`, `chapter 1`.
TITLE_THEN_CHAPTER = re.compile(r'"([^"]+)"\s+chapter\b', re.I)
NUMBERED = re.compile(r"\bchapter\s+\d+", re.I)
TAUGHT = re.compile(r'Taught in the chapters?\s+"')

# Modules that are not a concept of a chapter: sliders and figures (each module of
# lessons_src.figures names its chapter), and the validation helpers.
NOT_TAUGHT = {"lessons_src.plotting", "lessons_src.widgets", "lessons_src.figures", "lessons_src._validate",
              "lessons_src.checks"}


def chapter_titles() -> dict[str, str]:
    """``{title: notebook}`` for every chapter in _toc.yml: the first heading, and its part before a colon."""
    titles = {}
    for file in book.pages("Chapters"):
        cells = json.loads((ROOT / f"{file}.ipynb").read_text())["cells"]
        heading = next(
            line[2:].strip()
            for cell in cells
            if cell["cell_type"] == "markdown"
            for line in "".join(cell["source"]).splitlines()
            if line.startswith("# ")
        )
        titles[heading] = file
        if ":" in heading:
            titles[heading.split(":")[0].strip()] = file
    return titles


TITLES = chapter_titles()


def problems_in(text: str | None, where: str) -> list[str]:
    """What is wrong with the chapter references of one docstring."""
    if not text:
        return []
    text = " ".join(text.split())  # a reference may be wrapped over lines
    found = []
    for match in REFERENCE.finditer(text):
        for title in QUOTED.findall(match.group(1)):
            if title not in TITLES:
                found.append(f'{where}: names the chapter "{title}", which is not a chapter title in _toc.yml')
    for title in TITLE_THEN_CHAPTER.findall(text):
        found.append(f'{where}: writes "{title}" chapter; write chapter "<title>"')
    for match in NUMBERED.findall(text):
        found.append(f'{where}: "{match}" names a chapter by number; name it by title')
    return found


def modules() -> list[ModuleType]:
    names = [lessons_src.__name__] + [
        info.name for info in pkgutil.walk_packages(lessons_src.__path__, prefix=f"{lessons_src.__name__}.")
    ]
    return [importlib.import_module(name) for name in names]


def documented(module: ModuleType):
    """``(qualified name, docstring)`` for the module, its classes and functions, and their methods."""
    yield module.__name__, module.__doc__
    for name, obj in vars(module).items():
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == module.__name__:
            yield f"{module.__name__}.{name}", obj.__doc__
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                    if inspect.isfunction(function) or isinstance(member, property):
                        yield f"{module.__name__}.{name}.{attr}", getattr(member, "__doc__", None)


def test_the_titles_are_read():
    assert len({file for file in TITLES.values()}) == len(list((ROOT / "book").glob("[0-9][0-9]_*.ipynb")))
    assert TITLES["Masking"] == "book/03_masking"
    assert "Training attention" in TITLES and "Training attention: learning to reverse a sequence" in TITLES


def test_problems_are_found():
    """The checker itself: each wrong form is reported, the right ones are not."""
    assert problems_in('Taught in the chapter "Masking".', "m") == []
    assert problems_in('Taught in the chapters "Masking" and\n    "Efficient attention".', "m") == []
    assert problems_in('In the chapter "Training attention".', "m") == []
    assert len(problems_in('Taught in the chapter "Variants".', "m")) == 1
    assert len(problems_in('Chapters "Masking", "Variants" and "Plots".', "m")) == 2
    assert len(problems_in('Taught in "The encoder block" chapter.', "m")) == 1
    assert len(problems_in("Chapter 1 builds this.", "m")) == 1


@pytest.mark.parametrize("module", modules(), ids=lambda m: m.__name__)
def test_chapter_references_name_existing_chapters(module):
    found = [p for name, doc in documented(module) for p in problems_in(doc, name)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "module",
    [m for m in modules() if m.__name__.count(".") == 1 and m.__name__ not in NOT_TAUGHT],
    ids=lambda m: m.__name__,
)
def test_each_module_says_which_chapter_teaches_it(module):
    taught = TAUGHT.search(" ".join((module.__doc__ or "").split()))
    assert taught, f'{module.__name__}: the module docstring should say: Taught in the chapter "<title>"'


@pytest.mark.parametrize("name", [n for n in lessons_src.__all__ if n != "__version__"])
def test_public_names_have_a_docstring_a_chapter_and_type_hints(name):
    obj = getattr(lessons_src, name)
    doc = inspect.getdoc(obj)
    assert doc, f"{name} has no docstring"
    names_a_chapter = REFERENCE.search(" ".join(doc.split()))
    assert names_a_chapter, f"{name}'s docstring names no chapter"
    function = obj.__init__ if inspect.isclass(obj) else obj
    if inspect.isfunction(function):
        signature = inspect.signature(function)
        missing = [p for p in signature.parameters if p != "self" and signature.parameters[p].annotation is inspect._empty]
        assert not missing, f"{name}: parameters without a type hint: {missing}"
        assert signature.return_annotation is not inspect._empty, f"{name}: no return type hint"
