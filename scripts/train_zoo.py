"""Train zoo models by name and write their weights and cards into the package (lessons_src/data/zoo/).

    python scripts/train_zoo.py code-lm          # one model
    python scripts/train_zoo.py --all            # every recipe in lessons_src.zoo.RECIPES
    python scripts/train_zoo.py --list           # the recipes, and which are trained

Each model follows its recipe (lessons_src.zoo.Recipe) on one CPU thread; the card records the machine
and the time it took. The best count-based table on the same text (lessons_src.best_ngram_loss, orders 1
to 10) is computed once per run and written into every card with the model's margin over it. A model
that does not beat the table is still written, and the script exits 1 naming it: the zoo's promise is
that every model beats it (tests/test_zoo.py checks the shipped cards).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lessons_src import best_ngram_loss, zoo  # noqa: E402
from lessons_src.device import one_cpu_thread  # noqa: E402

FOLDER = ROOT / "lessons_src" / zoo.ZOO_DIR


def baseline() -> dict:
    tokenizer, train_tokens, held = zoo._corpus_tokens()
    t0 = time.perf_counter()
    with one_cpu_thread():
        loss, n, discount = best_ngram_loss(train_tokens, held, tokenizer.vocab_size, max_n=10)
    print(f"best n-gram table: {loss:.4f} nats per character (n={n}, D={discount}; "
          f"{time.perf_counter() - t0:.0f} s)", flush=True)
    return {"loss": round(loss, 4), "n": n, "discount": discount, "max_n": 10}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        for name, recipe in zoo.RECIPES.items():
            trained = (FOLDER / f"{name}.json").is_file()
            print(f"{name:>16}  {'trained' if trained else 'not trained':>11}  {recipe.chapter}: {recipe.purpose}")
        return 0
    names = list(zoo.RECIPES) if args.all else args.names
    unknown = [n for n in names if n not in zoo.RECIPES]
    if not names or unknown:
        parser.error(f"name zoo models to train ({sorted(zoo.RECIPES)}) or --all; unknown: {unknown}")
    ngram = baseline()
    failed = []
    for name in names:
        t0 = time.perf_counter()
        model, log = zoo.train(name, progress=lambda e, name=name: print(name, e, flush=True))
        info = zoo.save(name, model, log, ngram, time.perf_counter() - t0, FOLDER)
        print(f"{name}: held-out {info['held_out_loss']:.4f}, table {ngram['loss']:.4f}, margin {info['margin']:+.4f}; "
              f"{info['trained_with']['seconds']} s", flush=True)
        if info["margin"] <= 0:
            failed.append(name)
    total = zoo.zoo_bytes()
    print(f"zoo: {total / 2**20:.1f} MiB of {zoo.ZOO_BUDGET_BYTES / 2**20:.0f} MiB")
    if failed:
        print(f"does not beat the best n-gram table: {failed}", file=sys.stderr)
    return 1 if failed or total > zoo.ZOO_BUDGET_BYTES else 0


if __name__ == "__main__":
    sys.exit(main())
