"""Slider redraw time for every InteractiveFigure in the course's notebooks (budget: 50 ms median).

Runs each notebook's code in an in-process IPython shell, finds the InteractiveFigure objects it
made, builds their live ipywidgets view and times one update (slider value set -> figure redrawn
and re-encoded into the Image widget) for every value of every slider. Also reports the static
fallback: frame count and HTML size. Usage: python benchmarks/bench_widgets.py [notebook ...]
"""

from __future__ import annotations

import contextlib
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
import torch  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

from lessons_src.widgets import InteractiveFigure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BUDGET_MS = 50.0
THREADS = torch.get_num_threads()


def figures_in(path: Path) -> list[tuple[str, InteractiveFigure]]:
    path = path.resolve()
    shell = InteractiveShell.instance()
    shell.reset(new_session=True)
    # Notebooks share this process: undo the global torch state an earlier one may have set
    # (chapter 4 turns gradients off, chapters 7 and 8 use one thread), as a fresh kernel would.
    torch.set_grad_enabled(True)
    torch.set_num_threads(THREADS)
    made: list[InteractiveFigure] = []  # every figure the notebook builds, named or not
    original_init = InteractiveFigure.__init__

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        made.append(self)

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
    return [(names.get(id(figure), f"figure {i + 1}"), figure) for i, figure in enumerate(made)]


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


def main() -> int:
    paths = [Path(p) for p in sys.argv[1:]] or sorted((ROOT / "book").glob("*.ipynb"))
    print(f"{'notebook':40s} {'figure':18s} {'updates':>7s} {'median ms':>9s} {'worst ms':>8s} "
          f"{'frames':>6s} {'html KB':>7s}")
    worst_median = 0.0
    for path in paths:
        for name, figure in figures_in(path):
            times = time_updates(figure)
            html_kb = len(figure.to_html().encode()) / 1024
            n_frames = 1
            for s in figure.sliders:
                n_frames *= len(s.values)
            median = statistics.median(times)
            worst_median = max(worst_median, median)
            print(f"{path.name:40s} {name:18s} {len(times):7d} {median:9.1f} {max(times):8.1f} "
                  f"{n_frames:6d} {html_kb:7.0f}")
    verdict = "within" if worst_median <= BUDGET_MS else "OVER"
    print(f"\nslowest median update: {worst_median:.1f} ms ({verdict} the {BUDGET_MS:.0f} ms budget)")
    return 0 if worst_median <= BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
