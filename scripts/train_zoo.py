"""Train zoo models by name and write their weights and cards into the package (lessons_src/data/zoo/).

    python scripts/train_zoo.py code-lm          # one model
    python scripts/train_zoo.py --all            # every recipe in lessons_src.zoo.RECIPES
    python scripts/train_zoo.py --list           # the recipes, and which are trained
    python scripts/train_zoo.py --rebaseline     # recompute the table and every card's margin (no training)
    python scripts/train_zoo.py --table-from-cards NAME...  # take the table from a shipped card (same corpus
                                                            # and grid) instead of searching it again (minutes)

Each model follows its recipe (lessons_src.zoo.Recipe) on one CPU thread; the card records the machine
and the time it took. The best count-based table on the same text (lessons_src.best_ngram_loss over
lessons_src.zoo.NGRAM_SEARCH: orders 1 to 64, six discounts) is computed once per run and written into every card with the model's margin over it. A model
that does not beat the table is still written, and the script exits 1 naming it: the zoo's promise is
that every model beats it (tests/test_zoo.py checks the shipped cards).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lessons_src import zoo  # noqa: E402
from lessons_src.device import one_cpu_thread  # noqa: E402
from lessons_src.language_model import _ngram_losses  # noqa: E402  (best_ngram_loss's pass, kept whole)

FOLDER = ROOT / "lessons_src" / zoo.ZOO_DIR


def baseline() -> dict:
    """The best table over zoo.NGRAM_SEARCH, and its loss at a few orders (at its discount): how flat the
    search has become where it stops."""
    tokenizer, train_tokens, held = zoo._corpus_tokens()
    t0 = time.perf_counter()
    search = zoo.NGRAM_SEARCH
    with one_cpu_thread():  # every order and discount in one pass (what best_ngram_loss minimises over)
        losses = _ngram_losses(train_tokens, held, tokenizer.vocab_size, search["max_n"], search["discounts"])
    loss, n, discount = min((value, order, d) for (order, d), value in losses.items())
    by_order = {order: round(losses[(order, discount)], 4) for order in (8, 16, 32, 48, 64) if order <= search["max_n"]}
    print(f"best n-gram table: {loss:.4f} nats per character (n={n}, D={discount}; by order {by_order}; "
          f"{time.perf_counter() - t0:.0f} s)", flush=True)
    return {"loss": round(loss, 4), "n": n, "discount": discount, "max_n": search["max_n"],
            "discounts": list(search["discounts"]), "by_order": by_order}


def shipped_table() -> dict:
    """The best table as a shipped card states it, from a card trained on today's corpus (its SHA-256) with
    today's search grid: the same numbers baseline() computes, without the minutes."""
    sha = zoo.corpus_sha256()
    for card_file in sorted(FOLDER.glob("*.json")):
        info = json.loads(card_file.read_text(encoding="utf-8"))
        grid = (info["ngram"]["max_n"], tuple(info["ngram"]["discounts"]))
        if info["corpus"]["sha256"] == sha and grid == (zoo.NGRAM_SEARCH["max_n"], zoo.NGRAM_SEARCH["discounts"]):
            print(f"best n-gram table from {card_file.name}: {info['ngram']['loss']:.4f} nats per character", flush=True)
            return info["ngram"]
    sys.exit("--table-from-cards: no shipped card was trained on this corpus with this grid; run without it")


def rebaseline(ngram: dict) -> list[str]:
    """Write the table's loss and each model's margin over it into every shipped card (weights unchanged);
    return the models that do not beat it."""
    failed = []
    for card_file in sorted(FOLDER.glob("*.json")):
        info = json.loads(card_file.read_text(encoding="utf-8"))
        info["ngram"], info["margin"] = ngram, round(ngram["loss"] - info["held_out_loss"], 4)
        card_file.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        print(f"{info['name']}: held-out {info['held_out_loss']:.4f}, margin {info['margin']:+.4f}")
        if info["margin"] <= 0:
            failed.append(info["name"])
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--rebaseline", action="store_true")
    parser.add_argument("--table-from-cards", action="store_true")
    args = parser.parse_args()
    if args.rebaseline:
        failed = rebaseline(baseline())
        if failed:
            print(f"does not beat the best n-gram table: {failed}", file=sys.stderr)
        return 1 if failed else 0
    if args.list:
        for name, recipe in zoo.RECIPES.items():
            print(f"{name:>16}  {'trained' if zoo.trained(name) else 'not trained':>11}  {recipe.chapter}: {recipe.purpose}")
        return 0
    names = list(zoo.RECIPES) if args.all else args.names
    unknown = [n for n in names if n not in zoo.RECIPES]
    if not names or unknown:
        parser.error(f"name zoo models to train ({sorted(zoo.RECIPES)}) or --all; unknown: {unknown}")
    ngram = shipped_table() if args.table_from_cards else baseline()
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
