"""Local Sphinx extension for the course website.

- Drops duplicate <script> entries: sphinx-thebe (always loaded by Jupyter Book 1) registers its
  inline configuration twice, and the second `const THEBE_JS_URL` is a page error on every page.
"""

from __future__ import annotations


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        # Inline scripts are registered with filename None by one extension and '' by another.
        key = (getattr(script, "filename", None) or "", tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
