"""The widget probe: one small notebook that builds every chapter's slider figure and a model explorer of
each kind, shows them, and moves every slider, so that what differs between the places a learner runs the
course (the ipywidgets major, the front end's comms) is checked without executing the chapters again.

The notebook is written by :func:`notebook`: the install cell every page has (``scripts/sync_notebooks.py``),
then the source of ``tests/figure_builders.py`` inlined (the probe runs alone in an empty folder, with only
the installed package importable, as Colab runs a page), then one cell per figure that shows it, then a cell
that moves every slider of every figure from the kernel and requires a new image each time.

Run by:

* the ``notebooks`` stage (tests/test_launch.py, ``test_every_slider_figure_lives``) in each Colab-like venv
  of the tier: Colab's ipywidgets 7.7.1 in the gate, and ipywidgets 8 too in the full tier. A figure that
  loses its live view warns, and the stage turns that warning into an error (``launch_env.DEAD_SLIDERS_FAIL``);
* the ``frontend`` stage (tests/test_frontend.py) in real JupyterLab with Binder's environment (ipywidgets 8),
  where Chromium also moves every slider with the keyboard and requires the image in the page to change.

CONTRIBUTING.md ("Two tiers") says which regression each probe stands in for.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import sync_notebooks  # scripts/, on sys.path (tests/conftest.py)

HERE = Path(__file__).resolve().parent
BUILDERS = HERE / "figure_builders.py"

#: The kernel-side probe's last line starts with this; the tests read the counts from it.
MOVED = "probe: moved"

_MOVE_EVERY_SLIDER = f'''\
# Every slider of every figure above moved from the kernel, one step at a time: each move must redraw the
# figure's image with a different picture (the same observers the front end's slider triggers).
moved = 0
for name, shown in SHOWN.items():
    box = shown.widget()
    if hasattr(box.controls, "items"):  # a ModelExplorer: its text box and temperature slider
        image, before = box.controls["image"], box.controls["image"].value
        for control, value in ((box.controls["temperature"], 2.5), (box.controls["text"], "the cat sat on")):
            control.value = value
            assert image.value != before, f"{{name}}: changing {{control.description}} left the image unchanged"
            before, moved = image.value, moved + 1
        continue
    image = box.children[-1]
    for control in box.controls:
        before, start = image.value, control.index
        control.index = (start + 1) % len(control.options)  # one step right (from the last: to the first)
        assert image.value != before, f"{{name}}: moving {{control.description!r}} left the image unchanged"
        control.index = start
        moved += 1
print(f"{MOVED} {{moved}} sliders and text boxes in {{len(SHOWN)}} figures")
'''


def figure_names() -> list[str]:
    """The figures the probe shows, in order: every slider figure, then the explorers."""
    import figure_builders

    return [*figure_builders.FIGURES, *figure_builders.EXPLORERS]


def notebook() -> nbformat.NotebookNode:
    """The probe notebook (see the module's docstring)."""
    import figure_builders

    cells = [
        nbformat.v4.new_markdown_cell("# Widget probe\n\nEvery chapter's slider figure and a model explorer of each "
                                      "kind, built from small inputs and moved (tests/probe_notebook.py)."),
        nbformat.v4.new_code_cell(sync_notebooks.install_cell_source()),
        nbformat.v4.new_code_cell(BUILDERS.read_text() + "\n\nSHOWN = {}\n"),
    ]
    for name in figure_builders.FIGURES:
        cells.append(nbformat.v4.new_code_cell(f'SHOWN["{name}"] = FIGURES["{name}"][0]()\nSHOWN["{name}"]'))
    for name in figure_builders.EXPLORERS:
        cells.append(nbformat.v4.new_code_cell(f'SHOWN["{name}"] = EXPLORERS["{name}"]()\nSHOWN["{name}"]'))
    cells.append(nbformat.v4.new_code_cell(_MOVE_EVERY_SLIDER))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def write(folder: Path, name: str = "widget_probe.ipynb") -> Path:
    """Write the probe notebook into ``folder``; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    nbformat.write(notebook(), path)
    return path
