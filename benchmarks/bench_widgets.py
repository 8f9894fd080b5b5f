"""Slider redraw time for every InteractiveFigure in the course's chapters, against a reference.

Runs each notebook's code in an in-process IPython shell and records every InteractiveFigure it
builds (the chapters build theirs through ``lessons_src.figures``; a figure is named after the
function that built it). Each is first displayed as a front end displays it (its MIME bundle: the
static fallback, every frame drawn once, and the live ipywidgets view); then one update (slider
value set -> figure redrawn and re-encoded into the Image widget) is timed for every value of every
slider. Also reported: the static fallback's frame count and HTML size.

Machines of the same kind differ 2-3x in speed, and a shared one from minute to minute, so the
same run also times a reference redraw: ``imshow(...).set_data()`` plus a PNG encode
(``savefig``) of a 5x4-inch figure with a colorbar at 100 dpi, before and after the figures. Each
figure's median is reported in ms and as a ratio to the reference's median. The budget is a
ratio of 1.3 (30 ms on a quiet machine where the reference takes about 23 ms); the script exits 1
when a figure's median is above it.
Usage: python benchmarks/bench_widgets.py [notebook ...]
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
warnings.filterwarnings("ignore")

import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from lessons_src.widgets import InteractiveFigure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: A figure's median redraw may take at most this many times the reference redraw.
RATIO_BUDGET = 1.3
THREADS = torch.get_num_threads()


def reference_redraws(repeats: int = 30) -> list[float]:
    """Times (ms) of the reference redraw: new data into an imshow, then a PNG of the figure."""
    rng = np.random.default_rng(0)
    fig = Figure(figsize=(5, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    image = ax.imshow(rng.random((10, 10)), cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax)
    data = [rng.random((10, 10)) for _ in range(8)]
    fig.savefig(io.BytesIO(), format="png")  # warm-up: fonts and caches
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        image.set_data(data[i % len(data)])
        fig.savefig(io.BytesIO(), format="png")
        times.append((time.perf_counter() - start) * 1000)
    return times


def _builder_name() -> str | None:
    """``module.function`` of the lessons_src.figures function on the call stack, if any."""
    for frame_info in inspect.stack()[2:]:
        module = frame_info.frame.f_globals.get("__name__", "")
        if module.startswith("lessons_src.figures."):
            return f"{module.rsplit('.', 1)[1]}.{frame_info.function}"
    return None


def figures_in(path: Path) -> list[tuple[str, InteractiveFigure]]:
    path = path.resolve()
    shell = InteractiveShell.instance()
    shell.reset(new_session=True)
    # Notebooks share this process: undo the global torch state an earlier one may have set
    # (chapter 4 turns gradients off, chapters 7 and 8 use one thread), as a fresh kernel would.
    torch.set_grad_enabled(True)
    torch.set_num_threads(THREADS)
    made: list[tuple[str | None, InteractiveFigure]] = []  # every figure the notebook builds
    original_init = InteractiveFigure.__init__

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        made.append((_builder_name(), self))

    InteractiveFigure.__init__ = recording_init
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                with contextlib.redirect_stdout(io.StringIO()):  # the notebook's own prints
                    result = shell.run_cell(cell.source, silent=True)
                if not result.success:
                    raise RuntimeError(f"{path.name}: a cell failed: {result.error_in_exec or result.error_before_exec}")
    finally:
        os.chdir(cwd)
        InteractiveFigure.__init__ = original_init
        torch.set_grad_enabled(True)
        torch.set_num_threads(THREADS)
    names = {id(obj): name for name, obj in shell.user_ns.items() if isinstance(obj, InteractiveFigure)}
    return [(builder or names.get(id(figure), f"figure {i + 1}"), figure) for i, (builder, figure) in enumerate(made)]


def time_updates(figure: InteractiveFigure) -> list[float]:
    box = figure.widget()
    times = []
    for control, slider in zip(box.controls, figure.sliders):
        for value in list(slider.values) + list(reversed(slider.values)):
            if control.value == value:
                continue
            t0 = time.perf_counter()
            control.value = value  # observer: update(...) + PNG encode + Image.value
            times.append((time.perf_counter() - t0) * 1000)
    return times


def measure(figure: InteractiveFigure) -> tuple[list[float], int, float]:
    """Display the figure as a front end does, then time its updates: (ms per update, frames, HTML KB)."""
    bundle = figure._repr_mimebundle_()  # what displaying it computes: every static frame, the widget
    html_kb = len(bundle["text/html"].encode()) / 1024
    n_frames = 1
    for s in figure.sliders:
        n_frames *= len(s.values)
    return time_updates(figure), n_frames, html_kb


def main() -> int:
    paths = [Path(p) for p in sys.argv[1:]] or sorted((ROOT / "book").glob("*.ipynb"))
    reference = reference_redraws()
    rows = []
    for path in paths:
        for name, figure in figures_in(path):
            rows.append((path.name, name, *measure(figure)))
    reference += reference_redraws()  # before and after: the machine's speed drifts
    reference_ms = statistics.median(reference)
    print(f"reference redraw (imshow set_data + savefig PNG, 5x4 in, 100 dpi): median {reference_ms:.1f} ms "
          f"of {len(reference)}, range {min(reference):.1f}-{max(reference):.1f} ms")
    print(f"{'notebook':40s} {'figure':40s} {'updates':>7s} {'median ms':>9s} {'ratio':>6s} {'worst ms':>8s} "
          f"{'frames':>6s} {'html KB':>7s}")
    worst_ratio = 0.0
    for notebook, name, times, n_frames, html_kb in rows:
        median = statistics.median(times)
        ratio = median / reference_ms
        worst_ratio = max(worst_ratio, ratio)
        print(f"{notebook:40s} {name:40s} {len(times):7d} {median:9.1f} {ratio:6.2f} {max(times):8.1f} "
              f"{n_frames:6d} {html_kb:7.0f}")
    verdict = "within" if worst_ratio <= RATIO_BUDGET else "OVER"
    print(f"\nslowest median update: {worst_ratio:.2f}x the reference ({verdict} the {RATIO_BUDGET}x budget, "
          f"about 30 ms on a quiet machine)")
    return 0 if worst_ratio <= RATIO_BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())
