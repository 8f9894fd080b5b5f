"""Local Sphinx extension for the course website: one patch for one upstream bug.

sphinx-thebe (0.3.1; Jupyter Book 1 loads it whatever ``thebe`` says) adds its inline configuration
script, ``const THEBE_JS_URL = ...``, from an ``env-before-read-docs`` handler, and every page ends
up with that script twice: the second ``const`` is a page error ("Identifier 'THEBE_JS_URL' has
already been declared"). It happens in a plain Sphinx 7.4 project with only ``sphinx_thebe`` too.

This extension drops the second copy of that one script, and nothing else. When sphinx-thebe stops
duplicating it, ``tests/test_course_site.py`` fails and so does every ``-W`` build (a page without
the duplicate logs a warning): then delete this file and its entry in ``_config.yml``
(CONTRIBUTING.md, "Thebe").
"""

from __future__ import annotations

from sphinx.util import logging

logger = logging.getLogger(__name__)

THEBE_CONFIG = "const THEBE_JS_URL"


def _is_thebe_config(script) -> bool:
    body = getattr(script, "attributes", {}).get("body", "")
    return not getattr(script, "filename", None) and body.startswith(THEBE_CONFIG)


def drop_duplicate_thebe_config(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if scripts is None:
        return
    copies = [s for s in scripts if _is_thebe_config(s)]
    if len(copies) == 2 and copies[0].attributes == copies[1].attributes:
        context["script_files"] = [s for s in scripts if s is not copies[1]]
    else:
        logger.warning(f"course_site: expected sphinx-thebe's inline configuration script twice on {pagename}, "
                       f"found it {len(copies)} times: the upstream duplicate this patch removes has changed; "
                       "see book/_ext/course_site.py", type="course_site")


def setup(app):
    app.connect("html-page-context", drop_duplicate_thebe_config, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
