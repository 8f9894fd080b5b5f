"""The built website: a real `jupyter-book build -W`, then a real browser (Playwright + Debian's
Chromium) against the pages served from localhost. Marked `site`: scripts/test.sh runs these last."""

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

pytestmark = pytest.mark.site

HTML = ROOT / "_build" / "html"
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def _toc_pages():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return pages


def _notebook_pages():
    return [p for p in _toc_pages() if (ROOT / (p + ".ipynb")).exists()]


@pytest.fixture(scope="module")
def site():
    """Build the site once (execution cache: unchanged pages are not re-run)."""
    jb = Path(sys.executable).parent / "jupyter-book"
    proc = subprocess.run([str(jb), "build", ".", "--warningiserror", "--keep-going"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]  # -W: any Sphinx warning fails the build
    return HTML


@pytest.mark.parametrize("page", _toc_pages())
def test_every_page_is_built(site, page):
    assert (site / (page + ".html")).is_file()


@pytest.mark.parametrize("page", _notebook_pages())
def test_launch_links_open_the_real_notebook(site, page):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    branch = config["repository"]["branch"]
    html = (site / (page + ".html")).read_text()
    colab = re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html)
    binder = re.findall(r'href="(https://mybinder\.org/[^"]+)"', html)
    assert colab == [f"https://colab.research.google.com/github/{repo}/blob/{branch}/{page}.ipynb"]
    assert len(binder) == 1 and binder[0].startswith(f"https://mybinder.org/v2/gh/{repo}/{branch}?")
    assert binder[0].endswith(f"{page}.ipynb")
    assert (ROOT / (page + ".ipynb")).is_file()


@pytest.mark.parametrize("page", _notebook_pages())
def test_no_widget_javascript_from_a_cdn(site, page):
    html = (site / (page + ".html")).read_text()
    assert "embed-amd.js" not in html and "require.min.js" not in html
    assert "application/vnd.jupyter.widget-view+json" not in html


def test_chapter_has_a_kernel_free_slider(site):
    html = (site / "book" / "01_attention_from_scratch.html").read_text()
    assert html.count('class="ls-interactive"') >= 1
    assert "NotImplementedError" not in html or "Traceback" not in html


def test_exercise_page_shows_the_check_feedback(site):
    exercise = (site / "exercises" / "01_attention_from_scratch.html").read_text()
    solution = (site / "solutions" / "01_attention_from_scratch.html").read_text()
    assert "not implemented yet" in exercise
    assert "all 5 cases match the reference" in solution


# -- a real browser -----------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
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


def test_slider_changes_the_plot_without_a_kernel(server, browser):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    failed = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.goto(f"{server}/book/01_attention_from_scratch.html", wait_until="load")
    figures = page.locator(".ls-interactive")
    assert figures.count() >= 1
    for i in range(figures.count()):
        figure = figures.nth(i)
        figure.scroll_into_view_if_needed()
        sliders = figure.locator('input[type="range"]')
        assert sliders.count() >= 1
        for j in range(sliders.count()):
            slider = sliders.nth(j)
            before = figure.locator("img").get_attribute("src")
            label_before = figure.locator("output").nth(j).inner_text()
            slider.focus()
            key = "ArrowLeft" if slider.input_value() == slider.get_attribute("max") else "ArrowRight"
            page.keyboard.press(key)
            assert figure.locator("img").get_attribute("src") != before, f"slider {j} did not change the plot"
            assert figure.locator("output").nth(j).inner_text() != label_before
        figure.screenshot(path=str(ARTIFACTS / f"ch01_interactive_{i}.png"))
    page.screenshot(path=str(ARTIFACTS / "ch01_page.png"), full_page=False)
    local_failures = [u for u in failed if u.startswith(server)]
    assert local_failures == []
    page.close()
