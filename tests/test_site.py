"""The built website: a real `jupyter-book build -W`, then a real browser (Playwright driving
Debian's Chromium, headless, no network) against every page served from localhost.
Marked `site`: scripts/test.sh runs these last. Screenshots go to tests/artifacts/pages/."""

import functools
import html as html_lib
import http.server
import os
import re
import threading

import nbformat
import pytest
import sync_notebooks  # scripts/, on sys.path (tests/conftest.py)
import yaml
from conftest import ROOT

import book  # scripts/, on sys.path (tests/conftest.py)

pytestmark = pytest.mark.site

HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "tests" / "artifacts" / "pages"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
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
    for src in set(re.findall(r'<img[^>]*src="([^"]+)"', html_path.read_text())):
        if not src.startswith("data:"):
            total += (html_path.parent / src).resolve().stat().st_size
    assert total < MAX_PAGE_BYTES, f"{page}: {total / 1024:.0f} KiB"


@pytest.mark.parametrize("page", PAGES)
def test_figures_have_alt_text(site, page):
    """A figure from a cell's output needs `mystnb: {image: {alt: ...}}` in that cell's metadata;
    without it the alt text is the image's file name."""
    images = re.findall(r'<img alt="([^"]*)" src="([^"]+)"', _html(site, page))
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


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing (scripts/test.sh installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


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


@pytest.mark.parametrize("page_path", PAGES)
def test_page_in_a_browser(server, browser, page_path):
    context, page, problems = _open(browser, server, page_path)
    try:
        source = _html(HTML, page_path)
        if "\\(" in source or "\\[" in source:
            page.wait_for_selector("mjx-container", state="attached", timeout=15000)
            raw = page.evaluate("document.querySelector('main').innerText.match(/\\\\\\(|\\\\\\[/g)")
            assert raw is None, f"untypeset maths left on the page: {raw}"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # before any focus moves the sticky header
        page.screenshot(path=str(SCREENSHOTS / (page_path.replace("/", "__") + ".png")), full_page=True)
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
        for img in page.locator("main img").all():
            assert img.evaluate("i => i.complete && i.naturalWidth > 0"), "an image did not load"
        assert problems == [], problems
    finally:
        context.close()


@pytest.mark.parametrize("page_path", PAGES)
def test_a_phone_never_scrolls_the_page_sideways(server, browser, page_path):
    """At 390 px, the width of a phone, the page fits: long inline code wraps, while code cells,
    outputs, tables and display maths scroll inside their own box."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    try:
        page = context.new_page()
        page.goto(f"{server}/{page_path}.html", wait_until="networkidle")
        if "\\(" in _html(HTML, page_path) or "\\[" in _html(HTML, page_path):
            page.wait_for_selector("mjx-container", state="attached", timeout=15000)
        # Against the layout viewport (clientWidth, 390 px): a phone's window.innerWidth grows to the page's
        # width when the page overflows (it zooms out), so measured against it an overflow reads as 0.
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        culprits = page.evaluate("""() => [...document.querySelectorAll('main *')]
            .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
            .filter(e => !e.closest('div.highlight, div.cell_output, div.output, mjx-container, table, .ls-interactive'))
            .slice(0, 5).map(e => e.tagName + '.' + e.className + ': ' + (e.innerText || '').slice(0, 60))""")
        assert overflow <= 0, f"{page_path}: the page is {overflow} px wider than a 390 px phone: {culprits}"
    finally:
        context.close()


@pytest.mark.parametrize("page_path", CHAPTERS)
def test_predict_first_answers_open_on_a_click(server, browser, page_path):
    """Every chapter asks at least two "predict first" questions whose answers stay hidden until the
    reader clicks (a details element: no script, works offline)."""
    context, page, _ = _open(browser, server, page_path)
    try:
        questions = page.locator("details.predict")
        assert questions.count() >= 2, f"{page_path} has {questions.count()} predict-first questions, expected 2 or more"
        for i in range(questions.count()):
            question = questions.nth(i)
            answer = question.locator("p").first
            assert not answer.is_visible(), f"{page_path}: answer {i} is visible before the click"
            question.locator("summary").click()
            assert answer.is_visible() and answer.inner_text().strip(), f"{page_path}: answer {i} did not open"
    finally:
        context.close()


@pytest.mark.parametrize("page_path", SOLUTIONS)
def test_solutions_are_hidden_until_asked(server, browser, page_path):
    context, page, _ = _open(browser, server, page_path)
    try:
        answer = page.locator("details.hide", has_text="def ").first
        code = answer.locator("div.highlight").first
        assert not code.is_visible(), "the answer is visible before the reader asks for it"
        answer.locator("summary").click()
        assert code.is_visible()
    finally:
        context.close()
