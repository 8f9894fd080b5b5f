"""Binder as a learner meets it: the environment repo2docker builds from binder/, real JupyterLab 4,
and Chromium (Playwright, headless) working through every chapter.

repo2docker installs binder/requirements.txt into an environment whose base image brings JupyterLab,
then runs binder/postBuild from the repository root. Here: the repository copied into a temporary
folder as a clone has it, a fresh virtual environment, the same two steps, and `jupyter lab` on
127.0.0.1. For each chapter in book/ the browser opens the notebook, runs Run > Run All Cells, saves
it and requires every code cell executed with no error output; then it moves every slider with the
keyboard and requires the slider's plot to be redrawn with a different image. The time from key press
to new image is printed per chapter (a report, not a check: the machines are shared).

In the gate (CONTRIBUTING.md, "Two tiers") the notebook run is the widget probe (tests/probe_notebook.py):
every chapter's slider figure and a model explorer of each kind in one notebook; the full tier
(`bash scripts/test.sh full frontend`) runs every chapter as well.

Marked `frontend` (`bash scripts/test.sh frontend`). Screenshots, the timings and JupyterLab's log go
to tests/artifacts/frontend/.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import probe_notebook
import pytest
from conftest import ROOT
from launch_env import TIER

pytestmark = pytest.mark.frontend

CHAPTERS = sorted(p.name for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
ARTIFACTS = ROOT / "tests" / "artifacts" / "frontend"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# --no-compile: pip would byte-compile all of torch (about 40 s of an 80 s install here); the kernels
# compile what they import instead, once (the server runs without PYTHONDONTWRITEBYTECODE).
PIP_INSTALL = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
# JupyterLab user settings: no "get Jupyter news?" prompt, no update check, a missing kernel name
# starts the default kernel instead of asking, every cell stays in the page (no windowing), and each
# cell's execution is timed in its metadata (the kernel's share of a chapter's run).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none", "autoStartDefaultKernel": True,
                                               "recordTiming": True},
}
RUN_TIMEOUT_MS = 300_000  # one chapter's Run All (10-20 s on a quiet machine, several times that on a busy one)
REDRAW_TIMEOUT_MS = 30_000  # one slider's new image (well under a second on a quiet machine)
# A live slider: ipywidgets 8 draws a SelectionSlider as a noUiSlider whose handle takes keyboard
# focus and arrow keys; InteractiveFigure puts its sliders and its Image in one VBox.
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
FIGURE = ".widget-vbox:has(> img.widget-image):has(.noUi-handle)"


def _run(cmd, **kwargs):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, **kwargs)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def report(pytestconfig):
    """Timings collected by the tests; printed as a table (and saved) when the module is done."""
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # no screenshot left from an earlier run
    data = {"setup": {}, "chapters": {}}
    yield data
    lines = _format_report(data)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.txt").write_text("\n".join(lines) + "\n")
    pytestconfig.pluginmanager.register(_Summary(lines))  # printed after the test results


class _Summary:
    """A plugin that prints lines in pytest's terminal summary (shown even when tests pass)."""

    def __init__(self, lines):
        self.lines = lines

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_sep("-", "frontend timings")
        for line in self.lines:
            terminalreporter.write_line(line)


def _format_report(data):
    lines = ["(on a shared 2-core machine these are noisy: compare within one run only)"]
    lines += [f"  {name}: {seconds:.1f} s" for name, seconds in data["setup"].items()]
    lines.append("  open: until the kernel is idle; run all: Run All Cells until every cell ran; kernel: the")
    lines.append("  cells' own execution time (JupyterLab's recordTiming); rest: save, checks, sliders, screenshot")
    lines.append(f"  {'chapter':<36} {'open (s)':>8} {'run all (s)':>11} {'kernel (s)':>10} {'rest (s)':>8} "
                 f"{'sliders':>7} {'median ms':>9} {'max ms':>6}")
    for chapter, row in data["chapters"].items():
        ms = row.get("latencies_ms", [])
        median = f"{statistics.median(ms):.0f}" if ms else "-"
        worst = f"{max(ms):.0f}" if ms else "-"
        seconds = [f"{row[k]:.1f}" if k in row else "-" for k in ("open_s", "run_s", "kernel_s", "rest_s")]
        lines.append(f"  {chapter:<36} {seconds[0]:>8} {seconds[1]:>11} {seconds[2]:>10} {seconds[3]:>8} "
                     f"{len(ms):>7} {median:>9} {worst:>6}")
    totals = {name: sum(row.get(key, 0) for row in data["chapters"].values())
              for key, name in (("open_s", "open"), ("run_s", "run all"), ("kernel_s", "kernel"), ("rest_s", "rest"))}
    lines.append("  totals: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in totals.items()))
    every = [v for row in data["chapters"].values() for v in row.get("latencies_ms", [])]
    if every:
        lines.append(f"  all sliders: {len(every)}, median {statistics.median(every):.0f} ms, "
                     f"max {max(every):.0f} ms (key press to new image src)")
    return lines


def _require_chromium():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing (scripts/test.sh installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")


@pytest.fixture(scope="module")
def binder(tmp_path_factory, report):
    """The repository copy and the virtual environment Binder builds from it: (repo, venv, env)."""
    _require_chromium()  # before a minute of installing
    t0 = time.perf_counter()
    tmp = tmp_path_factory.mktemp("binder")
    repo = tmp / "repo"
    for name in _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT).split("\0"):
        if name and (ROOT / name).is_file():  # the repository as a clone would have it
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    venv = tmp / "venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", venv])
    # JupyterLab 4 comes with repo2docker's base image; one pip run resolves it with the requirements.
    _run([venv / "bin" / "python", *PIP_INSTALL, "-r", "binder/requirements.txt", "jupyterlab>=4,<5"], cwd=repo)
    report["setup"]["venv + binder/requirements.txt + JupyterLab"] = time.perf_counter() - t0
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    for name in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHOME"):
        env.pop(name, None)
    t0 = time.perf_counter()
    _run(["bash", "binder/postBuild"], cwd=repo, env=env)
    report["setup"]["binder/postBuild"] = time.perf_counter() - t0
    return repo, venv, env


class Lab:
    """A running `jupyter lab`: its URL, token, the repository copy it serves and its log."""

    def __init__(self, url, token, repo, venv, log):
        self.url, self.token, self.repo, self.venv, self.log = url, token, repo, venv, log

    def api(self, path, method="GET"):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, chars=4000):
        return self.log.read_text(errors="replace")[-chars:]


@pytest.fixture(scope="module")
def lab(binder, tmp_path_factory, report):
    """`jupyter lab` from Binder's environment, serving the repository copy; always shut down."""
    repo, venv, env = binder
    home = tmp_path_factory.mktemp("jupyter")
    for name, values in LAB_SETTINGS.items():
        path = home / "user-settings" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {**env, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_DATA_DIR": str(home / "data"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "IPYTHONDIR": str(home / "ipython")}
    port, token = _free_port(), secrets.token_hex(16)
    log = home / "jupyterlab.log"
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [venv / "bin" / "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             "--allow-root",  # CI containers run as root; harmless otherwise
             "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={repo}",
             f"--LabApp.user_settings_dir={home / 'user-settings'}", f"--LabApp.workspaces_dir={home / 'workspaces'}",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             "--LabApp.expose_app_in_browser=True"],  # window.jupyterapp: open, save, close, ask the kernel
            cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = Lab(f"http://127.0.0.1:{port}", token, repo, venv, log)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"jupyter lab exited with {proc.returncode}:\n{server.log_tail()}"
            try:
                server.api("/api/status")
                break
            except OSError:
                assert time.monotonic() < deadline, f"jupyter lab did not answer in 120 s:\n{server.log_tail()}"
                time.sleep(0.2)
        report["setup"]["jupyter lab answering"] = time.perf_counter() - t0
        yield server
    finally:
        try:
            for kernel in server.api("/api/kernels") if proc.poll() is None else []:
                server.api(f"/api/kernels/{kernel['id']}", method="DELETE")
        except OSError:
            pass
        t0 = time.perf_counter()
        proc.terminate()  # the server stops its kernels on SIGTERM
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        report["setup"]["jupyter lab stopped"] = time.perf_counter() - t0
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, ARTIFACTS / "jupyterlab.log")


@pytest.fixture(scope="module")
def lab_page(lab, report):
    """One Chromium page with JupyterLab loaded, for every chapter; `opened` maps the notebooks
    opened ahead of their turn to their panel ids."""
    from playwright.sync_api import sync_playwright

    t0 = time.perf_counter()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"{lab.url}/lab?token={lab.token}")
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
        page.evaluate("async () => { await window.jupyterapp.restored; window.jupyterapp.shell.collapseLeft(); }")
        report["setup"]["JupyterLab loaded in Chromium"] = time.perf_counter() - t0
        page.opened = {}
        yield page
        browser.close()


# Open a notebook (its kernel starts); `activate: false` opens it in a background tab.
OPEN = """async ([path, activate]) => {
  const panel = await window.jupyterapp.commands.execute(
    'docmanager:open', {path, factory: 'Notebook', options: {activate}});
  await panel.context.ready;
  await panel.sessionContext.ready;
  return panel.id;
}"""

# The notebook is the active tab, and its kernel is idle.
ACTIVE_AND_IDLE = """(id) => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel?.id === id && panel.sessionContext.session?.kernel?.status === 'idle';
}"""

# Run All has finished: the first code cell has an execution count and no cell shows [*] (a failed
# cell stops the run; the cells after it go back to [ ]).
RUN_FINISHED = """(id) => {
  const prompts = [...document.getElementById(id).querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
    .map(p => p.textContent.trim());
  return prompts.length > 0 && /^\\[\\d+\\]:$/.test(prompts[0]) && !prompts.includes('[*]:');
}"""

# Run code in the active notebook's kernel, outside the notebook; return what it printed.
ASK_KERNEL = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({code, store_history: false});
  let text = '';
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === 'stream') text += msg.content.text;
    if (msg.header.msg_type === 'error') text += msg.content.traceback.join('\\n');
  };
  await future.done;
  return text;
}"""

# Arm one slider move: remember the image and a digest of its bytes, time the key press (on the
# handle) and the image's new src (a MutationObserver on the img) with performance.now(), and give
# the handle keyboard focus.
ARM_MOVE = """async ([id, selector, figure, slider]) => {
  const box = document.getElementById(id).querySelectorAll(selector)[figure];
  const img = box.querySelector('img.widget-image');
  const handle = box.querySelectorAll('.noUi-handle')[slider];
  const digest = async (src) => {
    const bytes = await (await fetch(src)).arrayBuffer();
    return [...new Uint8Array(await crypto.subtle.digest('SHA-256', bytes))].map(b => b.toString(16)).join('');
  };
  const move = {src: img.src, before: await digest(img.src), keydown: null, changed: null,
                value: handle.getAttribute('aria-valuenow'), max: handle.getAttribute('aria-valuemax')};
  handle.addEventListener('keydown', () => { move.keydown = performance.now(); }, {once: true, capture: true});
  new MutationObserver((mutations, observer) => {
    if (img.src !== move.src) { move.changed = performance.now(); observer.disconnect(); }
  }).observe(img, {attributes: true, attributeFilter: ['src']});
  Object.assign(move, {digest, img, handle});
  window.__sliderMove = move;
  handle.scrollIntoView({block: 'center'});
  handle.focus();
  return {value: move.value, max: move.max, focused: document.activeElement === handle};
}"""

MOVE_RESULT = """async () => {
  const move = window.__sliderMove;
  return {latency: move.changed - move.keydown, value: move.handle.getAttribute('aria-valuenow'),
          changed: (await move.digest(move.img.src)) !== move.before};
}"""

# Close a notebook and shut its kernel down (no "save changes?" dialog).
CLOSE = """async (id) => {
  for (const panel of window.jupyterapp.shell.widgets('main')) {
    if (panel.id === id) {
      await panel.sessionContext.shutdown();
      panel.dispose();
    }
  }
}"""


def _problems(notebook):
    """Code cells that did not run, and error outputs (warnings on stderr are not errors)."""
    problems = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]).strip()
        first_line = source.splitlines()[0] if source else ""
        if cell.get("execution_count") is None:
            problems.append(f"cell {index} did not run: {first_line}")
        for output in cell.get("outputs", []):
            if output["output_type"] == "error":
                traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(output["traceback"]))
                problems.append(f"cell {index} raised {output['ename']}: {output['evalue']}\n{traceback}")
    return problems


def _kernel_seconds(notebook):
    """The time the kernel spent executing the code cells, from their recorded timing."""
    total = 0.0
    for cell in notebook["cells"]:
        timing = cell.get("metadata", {}).get("execution", {})
        if "iopub.status.busy" in timing and "shell.execute_reply" in timing:
            start, end = (datetime.fromisoformat(timing[k]) for k in ("iopub.status.busy", "shell.execute_reply"))
            total += (end - start).total_seconds()
    return total


def _next_chapter(request):
    """The chapter of the next test to run, if it is one of these."""
    items = request.session.items
    following = items[items.index(request.node) + 1:]
    if following and following[0].originalname == request.node.originalname:
        return following[0].callspec.params["chapter"]
    return None


def _run_and_move_every_slider(page, lab, report, path, row, following=None):
    """Open ``path`` in JupyterLab, Run All Cells as a learner clicks it, require every cell to run without an
    error in the installed wheel's kernel, then move every slider of every slider figure with the keyboard and
    require a new picture each time. ``following``: a notebook to open in a background tab meanwhile.
    Returns the number of figures found."""
    name = Path(path).stem
    panel = None
    try:
        t0 = time.perf_counter()
        panel = page.opened.pop(path, None) or page.evaluate(OPEN, [path, True])
        page.evaluate("(id) => window.jupyterapp.shell.activateById(id)", panel)
        page.wait_for_function(ACTIVE_AND_IDLE, arg=panel, timeout=120_000)
        row["open_s"] = time.perf_counter() - t0

        # Run > Run All Cells, as a learner clicks it. While it runs, the next chapter opens in a
        # background tab, so that its kernel is ready when its turn comes.
        t0 = time.perf_counter()
        page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        if following:
            page.opened[following] = page.evaluate(OPEN, [following, False])
        page.wait_for_function(RUN_FINISHED, arg=panel, timeout=RUN_TIMEOUT_MS, polling=100)
        page.wait_for_function(ACTIVE_AND_IDLE, arg=panel, timeout=RUN_TIMEOUT_MS)
        row["run_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()

        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        notebook = json.loads((lab.repo / path).read_text())
        row["kernel_s"] = _kernel_seconds(notebook)
        problems = _problems(notebook)
        assert not problems, "\n".join(problems)

        # The kernel JupyterLab started for this notebook runs in its folder and imports the installed
        # wheel from the virtual environment, not lessons_src/ from the checkout.
        where = json.loads(page.evaluate(ASK_KERNEL, "import json, os, sys, lessons_src\n"
                                         "print(json.dumps([lessons_src.__file__, os.getcwd(), sys.prefix]))"))
        module, cwd, prefix = (Path(os.path.realpath(p)) for p in where)
        venv, repo = Path(os.path.realpath(lab.venv)), Path(os.path.realpath(lab.repo))
        assert cwd == (repo / path).parent and prefix == venv, where
        assert module.is_relative_to(venv) and "site-packages" in module.parts, where
        assert not module.is_relative_to(repo), where

        # Every InteractiveFigure output (a widget view plus its static text/html frames) and every
        # ModelExplorer (a text box, a temperature slider and its redrawn image) is a live widget here,
        # with its sliders and its image. (tqdm's progress bars are widgets too.)
        figures = sum(1 for cell in notebook["cells"] for output in cell.get("outputs", [])
                      if WIDGET_VIEW in output.get("data", {})
                      and re.search(r'class="ls-(interactive|explorer)"', str(output["data"].get("text/html"))))
        assert figures > 0, f"{path} shows no slider figure"
        page.wait_for_function(
            "([id, selector, n]) => document.getElementById(id).querySelectorAll(selector).length === n",
            arg=[panel, FIGURE, figures], timeout=REDRAW_TIMEOUT_MS)
        sliders = page.evaluate(
            "([id, selector]) => [...document.getElementById(id).querySelectorAll(selector)]"
            ".map(box => box.querySelectorAll('.noUi-handle').length)", [panel, FIGURE])

        # Move every slider one step with the keyboard; its figure must show a new picture.
        latencies = row.setdefault("latencies_ms", [])
        for f, count in enumerate(sliders):
            for s in range(count):
                before = page.evaluate(ARM_MOVE, [panel, FIGURE, f, s])
                assert before["focused"], f"figure {f}, slider {s}: its handle did not take keyboard focus"
                key = "ArrowRight" if float(before["value"]) < float(before["max"]) else "ArrowLeft"
                page.keyboard.press(key)
                page.wait_for_function("() => window.__sliderMove.changed !== null", timeout=REDRAW_TIMEOUT_MS)
                moved = page.evaluate(MOVE_RESULT)
                assert moved["value"] != before["value"], f"figure {f}, slider {s}: {key} did not move it"
                assert moved["changed"], f"figure {f}, slider {s}: the new image is the same picture"
                latencies.append(moved["latency"])
        page.evaluate("([id, selector]) => document.getElementById(id).querySelector(selector).scrollIntoView()",
                      [panel, FIGURE])
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
        row["rest_s"] = time.perf_counter() - t0
        return figures
    except Exception:
        print(f"JupyterLab's log (tail):\n{lab.log_tail()}")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(Exception):
            page.screenshot(path=str(ARTIFACTS / f"{name}-failed.png"))
        raise
    finally:
        if panel:
            page.evaluate(CLOSE, panel)


def test_the_widget_probe_runs_in_jupyterlab_and_every_slider_redraws(lab, lab_page, report):
    """The widget probe (tests/probe_notebook.py: every chapter's slider figure and a model explorer of each
    kind, in one notebook) run in JupyterLab with Binder's ipywidgets 8: every figure is a live view in the
    page, and every slider moved with the keyboard redraws its image through the kernel. In the gate this stands
    in for running every chapter here (CONTRIBUTING.md, "Two tiers"); the full tier does both."""
    path = "probe/widget_probe.ipynb"  # in a folder of its own: from the repository's root the kernel would
    probe_notebook.write(lab.repo / "probe")  # import lessons_src/ from the checkout, not the installed wheel
    figures = _run_and_move_every_slider(lab_page, lab, report, path, report["chapters"].setdefault(path, {}))
    assert figures == len(probe_notebook.figure_names()), f"{figures} live figures, expected every one of the probe's"


@pytest.mark.skipif(TIER != "full", reason="the full tier runs every chapter in JupyterLab (LESSONS_TEST_TIER=full)")
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_runs_in_jupyterlab_and_its_sliders_redraw(lab, lab_page, report, request, chapter):
    following = _next_chapter(request)
    _run_and_move_every_slider(lab_page, lab, report, f"book/{chapter}", report["chapters"].setdefault(chapter, {}),
                               following=f"book/{following}" if following else None)
