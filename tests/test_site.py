"""The built website: a real `jupyter-book build -W`, then a real browser (Playwright driving
Debian's Chromium, headless, no network) against every page served from localhost.
Marked `site`: scripts/test.sh runs these last. Screenshots go to tests/artifacts/pages/."""

import functools
import html as html_lib
import http.server
import json
import math
import os
import re
import threading
from pathlib import Path

import nbformat
import pytest
import sync_notebooks  # scripts/, on sys.path (tests/conftest.py)
import yaml
from conftest import ROOT

import book  # scripts/, on sys.path (tests/conftest.py)

pytestmark = pytest.mark.site

HTML = Path(os.environ.get("LESSONS_SITE_HTML") or ROOT / "_build" / "html")  # as the `site` fixture (conftest.py)
SCREENSHOTS = ROOT / "tests" / "artifacts" / "pages"
MAX_PAGE_BYTES = 2 * 1024 * 1024  # a page's HTML plus its images

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
PAGES = book.pages()
NOTEBOOK_PAGES = book.notebook_pages()
CHAPTERS = book.pages("Chapters")
SOLUTIONS = [p for p in NOTEBOOK_PAGES if p.startswith("solutions/")]
EXERCISES = [p for p in NOTEBOOK_PAGES if p.startswith("exercises/")]


def _html(site, page):
    return (site / (page + ".html")).read_text()


@pytest.mark.parametrize("page", PAGES)
def test_page_is_built_and_self_contained(site, page):
    html = _html(site, page)
    external = re.findall(r'<script[^>]*src="(https?://[^"]+)"', html)
    assert external == [], f"scripts loaded from the network: {external}"
    assert "embed-amd.js" not in html and "application/vnd.jupyter.widget-view+json" not in html


@pytest.mark.parametrize("page", PAGES)
def test_page_weight(site, page):
    html_path = site / (page + ".html")
    total = html_path.stat().st_size
    missing = []
    for src in set(re.findall(r'<img[^>]*src="([^"]+)"', html_path.read_text())):
        if not src.startswith("data:"):
            image = (html_path.parent / src).resolve()
            if not image.exists():
                missing.append(src)
                continue
            total += image.stat().st_size
    assert not missing, f"{page}: images referenced but not built: {missing}"
    assert total < MAX_PAGE_BYTES, f"{page}: {total / 1024:.0f} KiB"


RAW_LATEX = re.compile(r".{0,30}(?:\\[a-zA-Z]{2,}|\$[^\s$]).{0,30}")


@pytest.mark.parametrize("page", PAGES)
def test_no_raw_latex_in_the_text(site, page):
    """The page's prose carries no LaTeX that failed to become maths (a `$` or `\\text{...}` a reader would see:
    exercise 16's SwiGLU paragraph rendered as '$ W_\\text{gate} ...' when its display maths lacked blank lines).
    Maths, code, outputs and the interactive figures are left out; MathJax typesets what remains in the browser."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(_html(site, page), "html.parser")
    main = soup.find("main") or soup
    for element in main.find_all(["script", "style", "pre", "code"]):
        element.decompose()
    for element in main.find_all(class_=re.compile(r"\bmath\b|ls-explorer|ls-interactive|cell_output")):
        element.decompose()
    raw = RAW_LATEX.findall(main.get_text(" "))
    assert not raw, f"{page}: LaTeX left as text: {raw[:3]}"


@pytest.mark.parametrize("page", PAGES)
def test_figures_have_alt_text(site, page):
    """A figure from a cell's output needs `mystnb: {image: {alt: ...}}` in that cell's metadata;
    without it the alt text is the image's file name."""
    images = []  # (alt, src) of every img, whichever attribute comes first (a slider figure's src comes first)
    for tag in re.findall(r"<img\b[^>]*>", _html(site, page)):
        alt, src = re.search(r'\balt="([^"]*)"', tag), re.search(r'\bsrc="([^"]+)"', tag)
        images.append((alt.group(1) if alt else "", src.group(1)[:60] if src else "?"))
    missing = [src for alt, src in images if not alt or alt == src or alt.endswith(".png")]
    assert missing == [], f"{page}: figures without alt text: {missing}"


@pytest.mark.parametrize("page", NOTEBOOK_PAGES)
def test_launch_links_open_the_real_notebook(site, page):
    repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    branch = CONFIG["repository"]["branch"]
    html = _html(site, page)
    colab = re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html)
    binder = re.findall(r'href="(https://mybinder\.org/[^"]+)"', html)
    assert colab == [f"https://colab.research.google.com/github/{repo}/blob/{branch}/{page}.ipynb"]
    assert len(binder) == 1 and binder[0].startswith(f"https://mybinder.org/v2/gh/{repo}/{branch}?")
    assert binder[0].endswith(f"{page}.ipynb")
    assert (ROOT / (page + ".ipynb")).is_file()


@pytest.mark.parametrize("page", EXERCISES)
def test_exercise_page_shows_the_stub_and_the_check(site, page):
    html = _html(site, page)
    expected = sync_notebooks.stub_feedback(nbformat.read(ROOT / f"{page}.ipynb", as_version=4))
    if expected == sync_notebooks.STUB_FEEDBACK:
        assert "NotImplementedError" in html
    assert html_lib.escape(expected, quote=False) in html  # the check's feedback, rendered on the page


@pytest.mark.parametrize("page", SOLUTIONS)
def test_solution_page_passes_its_check(site, page):
    assert "PASS" in _html(site, page) or "&#10004;" in _html(site, page)


# -- a real browser -----------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _open(browser, server, page_path):
    """Open a page on a first visit; collect console errors and failed requests."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(f"{server}/{page_path}.html", wait_until="networkidle")
    return context, page, problems


def _typeset(page, page_path):
    """Wait for MathJax on a page with maths; return whether it has any."""
    source = _html(HTML, page_path)
    if "\\(" in source or "\\[" in source:
        page.wait_for_selector("mjx-container", state="attached", timeout=15000)
        return True
    return False


def _check_maths(page, page_path):
    if _typeset(page, page_path):
        raw = page.evaluate("document.querySelector('main').innerText.match(/\\\\\\(|\\\\\\[/g)")
        assert raw is None, f"untypeset maths left on the page: {raw}"


def _check_accessibility(page, page_path):
    """axe-core's WCAG 2 and 2.1 A/AA rules on the whole page as a reader gets it (book/_static/course-a11y.js
    included: it gives the theme's controls names that match what they show)."""
    from axe import audit

    page.wait_for_timeout(300)  # the icons' SVGs and their fixes come after the load event
    violations = audit(page, "html")
    assert violations == [], "\n".join(violations)


def _check_sliders(page, page_path):
    figures = page.locator(".ls-interactive")
    for i in range(figures.count()):
        figure = figures.nth(i)
        sliders = figure.locator('input[type="range"]')
        assert sliders.count() >= 1
        for j in range(sliders.count()):
            slider = sliders.nth(j)
            slider.scroll_into_view_if_needed()
            before = figure.locator("img").get_attribute("src")
            label = figure.locator("output").nth(j).inner_text()
            slider.focus()
            at_end = slider.input_value() == slider.get_attribute("max")
            page.keyboard.press("ArrowLeft" if at_end else "ArrowRight")
            assert figure.locator("img").get_attribute("src") != before, f"figure {i} slider {j}: plot unchanged"
            assert figure.locator("output").nth(j).inner_text() != label
        assert figure.locator("img").get_attribute("alt"), f"figure {i} has no alt text"


def _check_images(page, page_path):
    for img in page.locator("main img").all():
        assert img.evaluate("i => i.complete && i.naturalWidth > 0"), "an image did not load"


def _check_predict_first(page, page_path):
    """Every chapter asks at least two "predict first" questions whose answers stay hidden until the
    reader clicks (a details element: no script, works offline)."""
    questions = page.locator("details.predict")
    assert questions.count() >= 2, f"{page_path} has {questions.count()} predict-first questions, expected 2 or more"
    for i in range(questions.count()):
        question = questions.nth(i)
        answer = question.locator("p").first
        assert not answer.is_visible(), f"{page_path}: answer {i} is visible before the click"
        question.locator("summary").click()
        assert answer.is_visible() and answer.inner_text().strip(), f"{page_path}: answer {i} did not open"


def _check_home(page, page_path):
    """The home page says where to start and lists the chapters numbered, in the table of contents' order,
    each linked to its page and to its notebook in Colab and in Binder (not the services' front pages);
    no heading follows another with the same words."""
    assert page.locator("main h2", has_text="Start here").count() == 1, "the home page should say where to start"
    items = page.locator("main ol.chapter-list > li")
    assert items.count() == len(CHAPTERS), f"{items.count()} chapters listed, {len(CHAPTERS)} in _toc.yml"
    for number, (chapter, item) in enumerate(zip(CHAPTERS, items.all()), start=1):
        links = item.locator("a")
        hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
        name = chapter.split("/")[-1]
        assert hrefs[0].endswith(f"{name}.html") and links.nth(0).inner_text().strip(), (number, hrefs)
        assert any(h.startswith("https://colab.research.google.com/github/") and h.endswith(f"{chapter}.ipynb")
                   for h in hrefs), f"chapter {number}: no Colab link to its notebook: {hrefs}"
        assert any(h.startswith("https://mybinder.org/v2/gh/") and h.endswith(f"{chapter}.ipynb") for h in hrefs), (
            f"chapter {number}: no Binder link to its notebook: {hrefs}")
    assert page.evaluate("getComputedStyle(document.querySelector('main ol.chapter-list')).listStyleType") == "decimal"
    fronts = page.evaluate("""() => [...document.querySelectorAll('main a')].map(a => a.href)
        .filter(h => /^https:\\/\\/(colab\\.research\\.google\\.com|mybinder\\.org)\\/?$/.test(h))""")
    assert not fronts, f"the home page links to a service's front page, not to a chapter: {fronts}"
    headings = [h.strip().lower() for h in page.locator("main h1, main h2, main h3").all_inner_texts()]
    repeated = [a for a, b in zip(headings, headings[1:]) if a == b]
    assert not repeated, f"the home page repeats a heading: {repeated}"


def _check_exercise_says_how_to_run(page, page_path):
    """An exercise page tells a reader of the website how to work it, and the launch button it names opens
    this exercise's notebook in Colab and in Binder."""
    how = page.locator("main p", has_text="How to work it")
    assert how.count() == 1 and "launch button" in how.first.inner_text(), f"{page_path}: no 'How to work it' note"
    launches = page.evaluate("() => [...document.querySelectorAll('a')].map(a => a.href)")
    for service in ("https://colab.research.google.com/github/", "https://mybinder.org/v2/gh/"):
        assert any(h.startswith(service) and h.endswith(f"{page_path}.ipynb") for h in launches), (
            f"{page_path}: no launch link to {service}...{page_path}.ipynb")


def _check_solution_titled(page, page_path):
    """A solution page says it is one where a reader (and the search results) meet it first: the window
    title, the heading, and a note that sends the reader to the exercise before the answer."""
    exercise = page_path.replace("solutions/", "exercises/")
    heading = page.locator("main h1").first.inner_text()
    assert "(solution)" in page.title() and "(solution)" in heading, (
        f"{page_path}: title {page.title()!r}, heading {heading!r}; both should say '(solution)'")
    note = page.locator("main p", has_text="This is the solution")
    assert note.count() == 1, f"{page_path}: no 'This is the solution. Try the exercise first' note"
    link = note.first.locator("a").first.get_attribute("href") or ""
    assert link.endswith(exercise.split("/")[-1] + ".html"), f"{page_path}: the note links to {link!r}, not the exercise"


def _check_solution_hidden(page, page_path):
    answer = page.locator("details.hide", has_text="def ").first
    code = answer.locator("div.highlight").first
    assert not code.is_visible(), "the answer is visible before the reader asks for it"
    answer.locator("summary").click()
    assert code.is_visible()


@pytest.mark.parametrize("page_path", PAGES)
def test_page_in_a_browser(server, browser, page_path):
    """One visit per page at desktop width, the checks in the order a reader meets the page: maths typeset,
    a screenshot, the accessibility audit (before anything is moved), every slider moves its plot, every
    image loaded, the predict-first answers open on a click (chapters), the page is titled as a solution and
    the solution stays hidden until asked (solutions), the model explorer (the pages in EXPLORER_PAGES: _check_explorer),
    and no console error, failed request or HTTP error all along. Every check runs; all failures are listed."""
    context, page, problems = _open(browser, server, page_path)
    failures = []

    def check(name, fn):
        try:
            fn(page, page_path)
        except Exception as error:  # noqa: BLE001  (every check runs; each failure is reported by name)
            failures.append(f"{name}: {type(error).__name__}: {error}")

    try:
        check("maths", _check_maths)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # before any focus moves the sticky header
        page.screenshot(path=str(SCREENSHOTS / (page_path.replace("/", "__") + ".png")), full_page=True)
        check("accessibility (axe-core)", _check_accessibility)
        check("sliders", _check_sliders)
        check("images", _check_images)
        if page_path == PAGES[0]:
            check("home page", _check_home)
        if page_path in CHAPTERS:
            check("predict-first questions", _check_predict_first)
        if page_path in EXERCISES:
            check("exercise says how to run it", _check_exercise_says_how_to_run)
        if page_path in SOLUTIONS:
            check("solution titled as one", _check_solution_titled)
            check("solution hidden until asked", _check_solution_hidden)
        if page_path in EXPLORER_PAGES:
            check("model explorer", _check_explorer)
        if problems:
            failures.append(f"console and network: {problems}")
        assert not failures, f"{page_path}:\n" + "\n".join(failures)
    finally:
        context.close()


@pytest.mark.parametrize("page_path", PAGES)
def test_a_phone_never_scrolls_the_page_sideways(server, browser, page_path):
    """At 390 px, the width of a phone, the page fits: long inline code wraps, while code cells,
    outputs, tables and display maths scroll inside their own box. On a page with a model explorer, the
    explorer is filled too (the widest heatmap) and the page must still fit."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    try:
        page = context.new_page()
        page.goto(f"{server}/{page_path}.html", wait_until="networkidle")
        _typeset(page, page_path)
        # Against the layout viewport (clientWidth, 390 px): a phone's window.innerWidth grows to the page's
        # width when the page overflows (it zooms out), so measured against it an overflow reads as 0.
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        culprits = page.evaluate("""() => [...document.querySelectorAll('main *')]
            .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
            .filter(e => !e.closest('div.highlight, div.cell_output, div.output, mjx-container, table, .ls-interactive'))
            .slice(0, 5).map(e => e.tagName + '.' + e.className + ': ' + (e.innerText || '').slice(0, 60))""")
        assert overflow <= 0, f"{page_path}: the page is {overflow} px wider than a 390 px phone: {culprits}"
        unopenable = [f for f in _figures_on_a_phone(page) if f["scale"] < LEGIBLE_SCALE and not f["button"]]
        assert not unopenable, f"{page_path}: figures shrunk below {LEGIBLE_SCALE} that nothing opens: {unopenable}"
        if page_path in EXPLORER_PAGES:
            explorers = page.locator(".ls-explorer")
            for n in range(explorers.count()):
                model = explorers.nth(n)
                model_id = model.get_attribute("data-model-id")
                longest = page.evaluate(f"window.lessonsModels[{model_id!r}].max_len")
                text = "".join(c for c in page.evaluate(f"window.lessonsModels[{model_id!r}].chars") if c != "\n")
                model.locator("textarea").fill((text * longest)[:longest])
                overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
                assert overflow <= 0, f"{page_path}: with explorer {model_id} full, the page is {overflow} px too wide"
                assert _newest_column_shown(model), f"{page_path}: explorer {model_id} hides its newest column"
    finally:
        context.close()


#: A figure shown at under this share of its natural width (labels of about 7 px and less) must open full size.
LEGIBLE_SCALE = 0.75
FIGURE_IMAGES = "div.cell_output img, .ls-interactive img"  # what book/_static/course-figures.js looks after
FIGURES_ON_A_PHONE = """selector => [...document.querySelectorAll(selector)].map((img, i) => {
    const button = img.nextElementSibling && img.nextElementSibling.matches('button.ls-enlarge')
        ? img.nextElementSibling : null;
    return {index: i, natural: img.naturalWidth, scale: img.getBoundingClientRect().width / img.naturalWidth,
            button: !!button && button.offsetParent !== null, src: img.getAttribute('src').slice(0, 60)};
})"""


def _figures_on_a_phone(page):
    """Each figure (a cell's output image, a slider figure's frame): its natural width, the share of it shown,
    and whether the button that opens it full size (book/_static/course-figures.js) is shown under it."""
    return page.evaluate(FIGURES_ON_A_PHONE, FIGURE_IMAGES)


def test_a_phone_opens_each_figure_full_size(server, browser):
    """At 390 px a figure scaled below LEGIBLE_SCALE of its width has a button under it; Enter on it opens the
    figure at its natural width (or wider) in a dialog that scrolls inside itself, Escape closes it and gives the
    focus back, and the page never scrolls sideways. The page, dialog open and closed, passes the axe audit.
    On a chapter with both kinds of figure: cell output images and a slider figure."""
    from axe import audit

    page_path = "book/11_rotary_embeddings"
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    try:
        page = context.new_page()
        page.goto(f"{server}/{page_path}.html", wait_until="networkidle")
        figures = _figures_on_a_phone(page)
        kinds = page.evaluate("() => [document.querySelectorAll('div.cell_output img').length, "
                              "document.querySelectorAll('.ls-interactive img').length]")
        assert kinds[0] >= 1 and kinds[1] >= 1, f"{page_path}: expected output images and a slider figure, {kinds}"
        opened = []
        for figure in figures:
            if figure["scale"] >= LEGIBLE_SCALE:
                continue
            assert figure["button"], (f"{page_path}: figure {figure['index']} ({figure['src']}) is shown at "
                                      f"{figure['scale']:.2f} of its width with nothing that opens it full size")
            img, name = page.locator(FIGURE_IMAGES).nth(figure["index"]), f"{page_path}: figure {figure['index']}"
            button = img.locator("xpath=following-sibling::button[1]")
            button.focus()
            page.keyboard.press("Enter")
            dialog = page.locator("dialog.ls-figure-dialog[open]")
            dialog.wait_for(state="visible", timeout=5000)
            full = dialog.locator("img")
            shown = full.evaluate("i => ({width: i.getBoundingClientRect().width, src: i.src})")
            assert shown["src"] == img.evaluate("i => i.src"), f"{name}: another image opened"
            assert shown["width"] >= figure["natural"], (
                f"{name} opened at {shown['width']:.0f} px, under its natural {figure['natural']} px")
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{name}: open, the page scrolls sideways by {overflow} px"
            if not opened:  # the audit once with a figure open
                violations = audit(page, "html")
                assert violations == [], f"{name} open at full size:\n" + "\n".join(violations)
            opened.append(figure["index"])
            page.keyboard.press("Escape")
            assert page.locator("dialog.ls-figure-dialog[open]").count() == 0, f"{name}: Escape did not close it"
            assert button.evaluate("b => b === document.activeElement"), f"{name}: the focus did not come back"
        assert opened, f"{page_path}: no figure is shrunk at 390 px, nothing was opened: {figures}"
        violations = audit(page, "html")
        assert violations == [], f"{page_path} at 390 px:\n" + "\n".join(violations)
    finally:
        context.close()


# -- search ----------------------------------------------------------------------------------------------------

SEARCH_RESULTS = """() => [...document.querySelectorAll('#search-results ul.search > li')].map(li => ({
    href: li.querySelector('a').getAttribute('href'), score: li.querySelector('a').dataset.score,
    snippet: li.querySelector('p.context') ? li.querySelector('p.context').textContent : null}))"""
ARTICLE_TEXT = """async href => {
    const page = new DOMParser().parseFromString(await (await fetch(href)).text(), 'text/html');
    page.querySelectorAll('.headerlink, script, style').forEach(e => e.remove());
    return page.querySelector('main article').textContent.replace(/\\s+/g, ' ');
}"""


def test_the_site_root_leads_to_the_course_without_errors(server, browser):
    """The site's address (its root index.html, book/_ext/site_root.py) moves on to the first page, asks for
    nothing the site lacks (a bare redirect made the browser ask for /favicon.ico: a 404 in the console) and
    is titled."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        problems = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.goto(f"{server}/", wait_until="networkidle")
        first = yaml.safe_load((ROOT / "_toc.yml").read_text())["root"]
        page.wait_for_url(f"{server}/{first}.html", timeout=10000)
        assert not problems, problems
        root = (HTML / "index.html").read_text()
        assert "<title>" in root and 'lang="en"' in root and 'rel="icon"' in root, root
    finally:
        context.close()


def _search(page, server, query):
    page.goto(f"{server}/search.html?q={query}", wait_until="networkidle")
    page.wait_for_function("() => /found \\d+ page/.test(document.querySelector('#search-results').innerText)",
                           timeout=15000)
    page.wait_for_function("() => [...document.querySelectorAll('#search-results ul.search > li')]"
                           ".every(li => li.querySelector('p.context'))", timeout=15000)
    return page.evaluate(SEARCH_RESULTS)


def test_search_ranks_the_chapter_first_and_quotes_its_text(server, browser):
    """Searching "rotary" lists the rotary chapter first, and every result's snippet quotes its page's article
    around the word, not the launch and repository buttons above it ("...Binder", "...Repository"); "sink"
    lists chapters before exercises and solutions, "latent" its chapter before the glossary:
    book/_ext/course_search.js."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        problems = []
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        sink = [r["href"] for r in _search(page, server, "sink")]
        first_exercise = next(i for i, href in enumerate(sink) if href.startswith(("exercises/", "solutions/")))
        assert all(href.startswith("book/") for href in sink[:first_exercise]) and first_exercise >= 2, (
            f"the chapters about sinks should come before the exercises: {sink}")
        latent = [r["href"] for r in _search(page, server, "latent")]
        assert latent[0] == "book/17_latent_attention.html", f"'latent' should list chapter 17 first: {latent}"
        results = _search(page, server, "rotary")
        ranking = [(r["href"], r["score"]) for r in results]
        assert results and results[0]["href"] == "book/11_rotary_embeddings.html", (
            f"the rotary chapter is not the first result for 'rotary': {ranking}")
        for result in results:
            snippet = result["snippet"]
            assert "rotar" in snippet.lower(), f"{result['href']}: the snippet does not quote the word: {snippet!r}"
            quoted = snippet.strip().removeprefix("...").removesuffix("...")
            article = page.evaluate(ARTICLE_TEXT, result["href"])
            assert quoted in article, f"{result['href']}: the snippet is not the page's text: {snippet!r}"
        assert not problems, problems
    finally:
        context.close()


# -- the model explorer: the trained model, in the reader's browser ---------------------------------------------

EXPLORER_PAGES = ["book/14_language_model", "book/15_induction_heads", "book/16_modern_block",
                  "book/17_latent_attention", "book/18_todays_attention"]
JS_FORWARD = """([id, text]) => {
    const r = window.lessonsModels[id].forward(text);
    return {tokens: Array.from(r.tokens), text: r.text,
            logits: r.logits.map(row => Array.from(row)),
            attention: r.attention.map(layer => layer.map(head => head.map(row => Array.from(row)))),
            sinks: r.sinks || null};
}"""
EXPLORER_STATE = """root => ({big: root.querySelector('canvas.lsx-big').toDataURL(),
    small: [...root.querySelectorAll('.lsx-grid canvas')].map(c => c.toDataURL()).join('|'),
    bars: root.querySelector('.lsx-bar-list').innerText, redraws: Number(root.dataset.redraws)})"""


def _largest_differences(ours, theirs):
    """Largest absolute difference of the logits, and of any head's weights, between two forwards."""
    logits = max((abs(a - b) for row_a, row_b in zip(ours["logits"], theirs["logits"]) for a, b in zip(row_a, row_b)),
                 default=0.0)
    attention = max((abs(a - b) for layer_a, layer_b in zip(ours["attention"], theirs["attention"])
                     for head_a, head_b in zip(layer_a, layer_b) for row_a, row_b in zip(head_a, head_b)
                     for a, b in zip(row_a, row_b)), default=0.0)
    return logits, attention


def _check_explorer(page, page_path):
    """The built page holds the model its notebook trained: the reader types, the figure follows, and the
    page's JavaScript forward equals PyTorch's numbers, computed by the notebook on a fixed text and embedded
    by ``ModelExplorer(reference_text=...)``, to 1e-4 in the logits and every head's weights. Printed: the
    largest differences (``-s``). (At 390 px, with the box full: test_a_phone_never_scrolls_the_page_sideways.)"""
    explorers = page.locator(".ls-explorer")
    assert explorers.count() >= 1, f"{page_path}: expected a model explorer, found none"
    for n in range(explorers.count()):
        _check_one_explorer(page, page_path, explorers.nth(n))


def _newest_column_shown(explorer):
    """Whether the large map's box shows its right edge: the newest key, where the last query's weights are."""
    return explorer.evaluate("""root => { const s = root.querySelector('.lsx-big').parentNode;
        return s.scrollLeft + s.clientWidth >= s.scrollWidth - 1; }""")


def _check_one_explorer(page, page_path, explorer):
    model_id = explorer.get_attribute("data-model-id")
    assert explorer.locator("script.lsx-reference").count() == 1, (
        f"{page_path}: the explorer embeds no PyTorch reference (ModelExplorer(..., reference_text=...))")
    reference = json.loads(explorer.locator("script.lsx-reference").text_content())
    ours = page.evaluate(JS_FORWARD, [model_id, reference["text"]])
    assert ours["tokens"] == reference["tokens"] and ours["text"] == reference["text"]
    logits, attention = _largest_differences(ours, reference)
    if ours["sinks"] is not None:  # a learned sink's share is what each row of weights lacks
        sinks = max(abs(s + sum(row) - 1) for layer_s, layer_w in zip(ours["sinks"], reference["attention"])
                    for head_s, head_w in zip(layer_s, layer_w) for s, row in zip(head_s, head_w))
        assert sinks < 1e-4, f"{page_path}: the sinks' shares and PyTorch's rows differ by {sinks:.2e}"
    heads = sum(len(layer) for layer in reference["attention"])
    print(f"{page_path}: JavaScript on the built page vs the notebook's PyTorch, {len(reference['tokens'])} "
          f"characters, {heads} heads: logits {logits:.1e}, attention {attention:.1e}")
    assert logits < 1e-4 and attention < 1e-4, f"{page_path}: logits {logits:.2e}, attention {attention:.2e}"

    box = explorer.locator("textarea")
    box.scroll_into_view_if_needed()
    box.click()
    page.keyboard.press("Control+End")
    before = explorer.evaluate(EXPLORER_STATE)
    typed = next(c for c in "eaAt" if c in page.evaluate(f"window.lessonsModels[{model_id!r}].chars"))
    page.keyboard.type(typed * 3)  # three keystrokes, each a forward pass and a redraw
    after = explorer.evaluate(EXPLORER_STATE)
    assert after["redraws"] == before["redraws"] + 3, f"{page_path}: {after['redraws'] - before['redraws']} redraws"
    answers = page.evaluate(f"window.lessonsModels[{model_id!r}].answers")
    for part in ("big", "small") if answers else ("big", "small", "bars"):
        assert after[part] != before[part], f"{page_path}: typing left the {part} figure unchanged"
    if answers:  # a model that answers: its bars are its answers at the last position, in order (they may not move)
        last = page.evaluate(f"window.lessonsModels[{model_id!r}].forward({box.input_value()!r}).logits.at(-1)")
        top = max(last[: len(answers)])
        p = [math.exp(v - top) for v in last[: len(answers)]]
        expected = [f"{name} {100 * q / sum(p):.1f}%" for name, q in zip(answers, p)]
        shown = explorer.evaluate("root => [...root.querySelectorAll('.lsx-bar-list li')].map(li => li.ariaLabel)")
        assert shown == expected, f"{page_path}: the answer bars read {shown}, the model gives {expected}"
    assert _newest_column_shown(explorer), f"{page_path}: explorer {model_id} hides its newest column"


def test_the_explorer_pages_are_the_pages_with_an_explorer(site):
    """EXPLORER_PAGES lists every built page that shows a model explorer (the browser checks run on those)."""
    shown = [page for page in PAGES if 'class="ls-explorer"' in _html(site, page)]
    assert shown == EXPLORER_PAGES, shown
