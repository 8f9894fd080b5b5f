"""The course's speed budgets, measured: prints tables, exits 1 when a budget is missed.

- every notebook in the table of contents executed with nbclient (kernel start included), one
  at a time: each page at most 45 s, the whole course (pages, exercises, solutions) at most 300 s;
  each also as a ratio to a reference notebook timed in the same run (machines of this kind differ
  2-3x in speed from one day to the next: compare ratios across machines, seconds within one run);
- the site: a cold build (empty execution cache, every page executed) and a warm rebuild of every
  page with the cache unchanged (at most 30 s), into a scratch folder; the heaviest pages
  (HTML plus images, at most 2 MiB);
- every live slider's redraw time (benchmarks/bench_widgets.py; a median of at most 1.3 times a
  reference redraw timed in the same run, about 30 ms on a quiet machine).

Usage: python benchmarks/bench_pages.py [--no-site] [--no-widgets] [--only book/02_scaling ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import book  # noqa: E402  (scripts/book.py: the pages and the build command)

PAGE_BUDGET_S, COURSE_BUDGET_S, WARM_BUDGET_S = 45.0, 300.0, 30.0
PAGE_WEIGHT_BUDGET = 2 * 1024 * 1024


def execute(page: str) -> float:
    return _execute(nbformat.read(ROOT / (page + ".ipynb"), as_version=4), (ROOT / page).parent)


def _execute(nb: nbformat.NotebookNode, folder: Path) -> float:
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    return time.perf_counter() - start


# The reference: what a page costs on this machine, timed in the same run, so that totals from machines
# of different speeds compare as ratios. It does what the pages do: start a kernel, import torch and
# lessons_src, and train a small model on one CPU thread.
REFERENCE_NOTEBOOK = nbformat.v4.new_notebook(cells=[
    nbformat.v4.new_code_cell("import torch\n\nimport lessons_src"),
    nbformat.v4.new_code_cell(
        "torch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))\n"
        "optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
        "x = torch.randn(64, 64)\n"
        "with lessons_src.one_cpu_thread():\n"
        "    for _ in range(1000):\n"
        "        loss = (model(x) - x).pow(2).mean()\n"
        "        optimizer.zero_grad()\n"
        "        loss.backward()\n"
        "        optimizer.step()"),
])


def reference_seconds() -> float:
    return _execute(REFERENCE_NOTEBOOK, ROOT)


def page_weights(html_root: Path) -> list[tuple[int, str]]:
    weights = []
    for html in html_root.rglob("*.html"):
        if "_static" in html.parts or "reports" in html.parts:
            continue
        total = html.stat().st_size
        for src in set(re.findall(r'<img[^>]*src="([^"]+)"', html.read_text())):
            if not src.startswith("data:"):
                image = (html.parent / src).resolve()
                if image.exists():
                    total += image.stat().st_size
        weights.append((total, str(html.relative_to(html_root))))
    return sorted(weights, reverse=True)


def build(out: Path, *extra: str) -> float:
    """A build into ``out`` that executes what its own cache lacks (not seeded from the launch stage)."""
    start = time.perf_counter()
    proc = book.build(out, *extra, capture=True, seed=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        print((proc.stdout + proc.stderr)[-3000:])
        raise SystemExit("site build failed")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-site", action="store_true", help="skip the cold and warm site builds")
    parser.add_argument("--no-widgets", action="store_true", help="skip the slider redraw timings")
    parser.add_argument("--only", nargs="*", default=None, help="pages to execute (default: all)")
    args = parser.parse_args()
    failures = []

    import torch

    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"device {'cuda: ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}")
    pages = args.only or book.notebook_pages()
    references = [reference_seconds()]
    print(f"\n{'notebook':52s} {'seconds':>8s} {'references':>11s}")
    times = {}
    for page in pages:
        times[page] = execute(page)
        if page == pages[len(pages) // 2]:
            references.append(reference_seconds())  # mid-run too: the machine's speed drifts
        flag = "  OVER 45 s" if times[page] > PAGE_BUDGET_S else ""
        print(f"{page:52s} {times[page]:8.1f} {times[page] / references[0]:11.2f}{flag}")
        if times[page] > PAGE_BUDGET_S:
            failures.append(f"{page} took {times[page]:.1f} s > {PAGE_BUDGET_S:.0f} s")
    references.append(reference_seconds())
    reference = statistics.median(references)
    for group in ("book", "exercises", "solutions"):
        part = [t for p, t in times.items() if p.startswith(group + "/")]
        if part:
            print(f"{'  total ' + group + f' ({len(part)})':52s} {sum(part):8.1f} {sum(part) / reference:11.1f}")
    total = sum(times.values())
    print(f"{'the whole course':52s} {total:8.1f} {total / reference:11.1f}  (budget {COURSE_BUDGET_S:.0f} s)")
    print(f"reference notebook (kernel start, imports, 1000 one-thread training steps): median "
          f"{reference:.2f} s of {', '.join(f'{r:.2f}' for r in references)}; the references column is the "
          "page's time in those units (per page: against the first reference timing)")
    if args.only is None and total > COURSE_BUDGET_S:
        failures.append(f"the course took {total:.0f} s > {COURSE_BUDGET_S:.0f} s")

    if not args.no_site:
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch)
            cold = build(out)
            warm = build(out, "--all")  # every page re-rendered, the execution cache unchanged
            print(f"\nsite: cold build {cold:.1f} s (every page executed), warm rebuild {warm:.1f} s "
                  f"(budget {WARM_BUDGET_S:.0f} s)")
            if warm > WARM_BUDGET_S:
                failures.append(f"warm rebuild {warm:.1f} s > {WARM_BUDGET_S:.0f} s")
            weights = page_weights(out / "_build" / "html")
            print("heaviest pages (HTML + images):")
            for size, name in weights[:5]:
                print(f"  {name:50s} {size / 1024:8.0f} KiB")
            if weights and weights[0][0] > PAGE_WEIGHT_BUDGET:
                failures.append(f"{weights[0][1]} weighs {weights[0][0] / 1024:.0f} KiB > 2048 KiB")
            shutil.rmtree(out / "_build", ignore_errors=True)

    if not args.no_widgets:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import bench_widgets

        print("\nsliders (live redraw: slider moved -> figure redrawn -> PNG into the Image widget):")
        reference = bench_widgets.reference_redraws()
        rows = []
        for page in [p for p in pages if p.startswith("book/")]:
            for name, figure in bench_widgets.figures_in(ROOT / (page + ".ipynb")):
                rows.append((page + " " + name, bench_widgets.measure(figure)[0]))
        reference_ms = statistics.median(reference + bench_widgets.reference_redraws())
        print(f"  reference redraw (bench_widgets.reference_redraws): median {reference_ms:.1f} ms")
        worst = 0.0
        for name, redraws in rows:
            median = statistics.median(redraws)
            worst = max(worst, median / reference_ms)
            print(f"  {name:70s} median {median:6.1f} ms ({median / reference_ms:4.2f}x), "
                  f"worst {max(redraws):6.1f} ms")
        if worst > bench_widgets.RATIO_BUDGET:
            failures.append(f"a slider's median redraw is {worst:.2f}x the reference > {bench_widgets.RATIO_BUDGET}x")

    print()
    for failure in failures:
        print("OVER BUDGET:", failure)
    print("all budgets met" if not failures else f"{len(failures)} budget(s) missed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
