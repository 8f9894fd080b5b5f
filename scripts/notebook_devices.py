"""Print the device each notebook computes on (for the GPU CI job, after nbval has run them).

Every notebook takes its device from `lessons_src.default_device()` in its set-up cell and
nothing hard-codes one, so executing each notebook's set-up cells (the first two code cells)
shows the device the whole notebook used. Usage: python scripts/notebook_devices.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
PROBE = "import lessons_src; print(lessons_src.default_device())"


def main() -> int:
    paths = sorted(p for d in ("book", "exercises", "solutions") for p in (ROOT / d).glob("*.ipynb"))
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"][:2]
        uses_device = any("default_device" in c.source for c in code)
        probe = nbformat.v4.new_notebook(cells=[*code, nbformat.v4.new_code_cell(PROBE)], metadata=nb.metadata)
        NotebookClient(probe, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        device = "".join(o.get("text", "") for o in probe.cells[-1].outputs).strip()
        note = "" if uses_device else "  (no tensors on a device in its set-up)"
        print(f"{str(path.relative_to(ROOT)):55s} {device}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
