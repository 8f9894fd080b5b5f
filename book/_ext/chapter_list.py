"""Local Sphinx extension: the ``{chapter-list}`` directive of the home page (book/intro.md).

It writes the chapters of ``_toc.yml``'s "Chapters" part as a numbered list, in the table of contents'
order, each title (the page's own heading) linked to its page, with links that open that chapter's
notebook in Colab and in Binder (the same addresses as the launch button on the page, built from
``_config.yml``'s ``repository``). The numbers are those the pages use ("chapter 7"), and a chapter added
to ``_toc.yml`` joins the list without an edit here. ``tests/test_site.py`` reads the list in Chromium.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

BINDER = "https://mybinder.org/v2/gh/{repo}/{branch}?urlpath=lab/tree/{path}"
COLAB = "https://colab.research.google.com/github/{repo}/blob/{branch}/{path}"


class chapter_list(nodes.General, nodes.Element):
    """Stands in for the list until every page's title is known (``doctree-resolved``)."""


class ChapterList(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [chapter_list()]


def _chapters(srcdir: str) -> list[str]:
    toc = yaml.safe_load((Path(srcdir) / "_toc.yml").read_text(encoding="utf-8"))
    return [chapter["file"] for part in toc["parts"] if part["caption"] == "Chapters" for chapter in part["chapters"]]


def _link(text: str, uri: str) -> nodes.reference:
    return nodes.reference(text, text, refuri=uri)


def fill_chapter_lists(app, doctree, docname) -> None:
    options = app.config.html_theme_options
    repo = options.get("repository_url", "").removeprefix("https://github.com/").strip("/")
    branch = options.get("repository_branch", "main")
    for placeholder in doctree.findall(chapter_list):
        listing = nodes.enumerated_list(enumtype="arabic", classes=["chapter-list"])
        for chapter in _chapters(app.srcdir):
            notebook = f"{chapter}.ipynb"
            item = nodes.paragraph()
            item += _link(app.env.titles[chapter].astext(), app.builder.get_relative_uri(docname, chapter))
            if repo:
                item += nodes.Text(" (run it in ")
                item += _link("Colab", COLAB.format(repo=repo, branch=branch, path=notebook))
                item += nodes.Text(" or ")
                item += _link("Binder", BINDER.format(repo=repo, branch=branch, path=notebook))
                item += nodes.Text(")")
            listing += nodes.list_item("", item)
        placeholder.replace_self(listing)


def setup(app):
    app.add_node(chapter_list)
    app.add_directive("chapter-list", ChapterList)
    app.connect("doctree-resolved", fill_chapter_lists)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
