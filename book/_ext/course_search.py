"""Local Sphinx extension for the course website: the search's ranking and snippets.

Sphinx 7.4's search ranked the rotary chapter fifth for "rotary" and quoted every result as "...Binder" or
"...Repository"; ``course_search.js``, next to this file, says why and what it changes. This extension makes
that file Sphinx's ``html_search_scorer`` (Sphinx inlines it into ``_static/language_data.js``, loaded on
every page right after ``searchtools.js``). Sphinx opens that setting relative to the working directory,
so it is set here, with the file's full path, rather than in ``_config.yml``.
Checked in a browser by ``tests/test_site.py`` (``test_search_ranks_the_chapter_first_and_quotes_its_text``).
"""

from __future__ import annotations

from pathlib import Path

SCRIPT = Path(__file__).with_name("course_search.js")


def use_course_search(app, config) -> None:
    config.html_search_scorer = str(SCRIPT)


def setup(app):
    app.connect("config-inited", use_course_search)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
