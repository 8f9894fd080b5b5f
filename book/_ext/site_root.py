"""Local Sphinx extension for the course website: the site's root page.

Jupyter Book 1 (through sphinx-external-toc) writes the root ``index.html`` as one bare line,
``<meta http-equiv="Refresh" ...>``: no language, no title, no icon, so a browser that opens the site's
address asks for ``/favicon.ico``, which the site does not have, and logs a 404 in the console before it
moves on. This extension writes that page first (sphinx-external-toc leaves an existing one alone): the same
redirect to the first page, with a title, the course's icon and a link for a browser that does not follow it.
Checked in a browser by ``tests/test_site.py`` (``test_the_site_root_leads_to_the_course_without_errors``).
"""

from __future__ import annotations

import html
from pathlib import Path

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<link rel="icon" href="_static/{icon}">
<meta http-equiv="Refresh" content="0; url={first}">
</head>
<body><p><a href="{first}">{title}: start here</a></p></body>
</html>
"""


def write_root_page(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    icon = Path(app.config.html_favicon or "favicon.svg").name
    page = PAGE.format(title=html.escape(app.config.html_title or app.config.project),
                       icon=html.escape(icon), first=f"{app.config.root_doc}.html")
    Path(app.outdir, "index.html").write_text(page, encoding="utf-8")


def setup(app):
    app.connect("build-finished", write_root_page, priority=100)  # before sphinx-external-toc's (500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
