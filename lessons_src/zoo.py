"""The course's trained models, the zoo: a recipe for each, the corpus they learn from, their cards.

A page-sized training run (a few hundred steps, seconds on a CPU) shows training itself; it cannot show
what a *trained* model does. The zoo's models are trained for longer by :func:`train` (re-run any of
them by name with ``python scripts/train_zoo.py NAME``), shipped in the package under ``data/zoo/``
(the weights as ``safetensors``, float16, and a card: the recipe, the training log, the held-out loss
next to the best count-based table on the same text, the corpus's SHA-256, the package and torch
versions, the machine), and loaded by :func:`load` in a fraction of a second, offline.

- :func:`python_source`: the corpus, 187 source files of Python's standard library (PSF licence,
  ``data/PSF-LICENSE.txt``), one snapshot shipped with the package; every tenth file held out.
- :data:`RECIPES`: every zoo model by name: which class, which sizes, how long and how fast it trains.
- :func:`train`, :func:`first_steps`, :func:`held_out_loss`: training, the first losses a re-run must
  match, and the loss a card reports.
- :func:`load`, :func:`card`, :func:`save`: the shipped weights and cards; :func:`logits_and_weights`:
  a zoo model's logits and every layer's attention weights, whichever class it is.

Taught in the chapter "A language model and its heads"; CONTRIBUTING.md, "The zoo", says how to add a model.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _validate as check
from .device import one_cpu_thread
from .language_model import CharTokenizer, LanguageModel, windows
from .llm import DecoderConfig, DecoderLM
from .mla import MLAConfig, MLADecoderLM

__all__ = ["python_source", "Recipe", "RECIPES", "build", "train", "first_steps", "held_out_loss", "load",
           "card", "trained", "save", "zoo_bytes", "ZOO_BUDGET_BYTES", "logits_and_weights", "output_gates"]

CORPUS = "data/python_stdlib.txt.gz"
SEPARATOR = "\x1e"  # between files in the shipped snapshot (scripts/make_python_source.py)
HELD_OUT_EVERY = 10  # every tenth file is held out
ZOO_DIR = "data/zoo"
#: What the zoo's weights and cards may take in the package, all models together (issue 32: "tens of MB at most";
#: 24 MiB until chapter 17's MQA and MLA models, 32 MiB until chapter 16's ladder: 35 models of about 1.6 MB each
#: in float16).
ZOO_BUDGET_BYTES = 60 * 2**20
#: The count-based baseline every card states its margin over: the best interpolated Kneser-Ney table
#: (lessons_src.best_ngram_loss) over these orders and discounts, chosen on the held-out text itself. The
#: loss still falls a little at 64 characters of context (1.2247 at n = 20, 1.2224 at n = 48), so the
#: search runs that far.
NGRAM_SEARCH = {"max_n": 64, "discounts": (0.5, 0.75, 0.9, 0.95, 0.98, 1.0)}
FIRST_STEPS = 5  # the training losses a card keeps step by step, which a re-run must reproduce


def _corpus_bytes() -> bytes:
    return gzip.decompress(resources.files("lessons_src").joinpath(CORPUS).read_bytes())


def corpus_sha256() -> str:
    """The SHA-256 of the corpus's text (the decompressed bytes); each card records the one it was trained on."""
    return hashlib.sha256(_corpus_bytes()).hexdigest()


def python_source() -> tuple[str, str]:
    """The zoo's corpus: ``(train, held_out)``, source files of Python's standard library.

    About 3.3 million characters of Python (187 files of the standard library, chosen in a seeded random
    order, mapped to ASCII: code, comments and docstrings), a snapshot taken from Python 3.11 by
    ``scripts/make_python_source.py`` and shipped with the package, so that every installation reads the
    same bytes. Every tenth file is held out (about 10% of the text), so the held-out loss is measured on
    whole files the model never saw; within each part files are joined by a blank line. Licence: the
    Python Software Foundation's (``data/PSF-LICENSE.txt``). Taught in the chapter "A language model and
    its heads".
    """
    documents = _corpus_bytes().decode("ascii").split(SEPARATOR)
    held = [d for i, d in enumerate(documents) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    kept = [d for i, d in enumerate(documents) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    return "\n\n".join(kept), "\n\n".join(held)


@dataclass(frozen=True)
class Recipe:
    """How one zoo model is built and trained; :func:`train` follows it exactly.

    ``model`` names the class (``"LanguageModel"``, ``"DecoderLM"`` or ``"MLADecoderLM"``) and ``config`` its arguments
    besides the vocabulary size (``max_len`` is ``context``). Training: AdamW (betas 0.9, 0.95, weight
    decay ``weight_decay``), the learning rate rising linearly over ``warmup`` steps to ``lr`` and then
    falling on a cosine to a tenth of it at ``steps``, gradients clipped to norm 1, batches of
    ``batch_size`` windows of ``context`` characters drawn by :func:`lessons_src.windows` from a generator
    seeded with ``seed``, the weights drawn after ``torch.manual_seed(seed)``. Taught in the chapter "A
    language model and its heads".
    """

    name: str
    chapter: str  # the chapter that reads the model, by title
    purpose: str
    model: str
    config: dict = field(default_factory=dict)
    context: int = 128
    batch_size: int = 32
    steps: int = 3000
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.1
    seed: int = 0
    log_every: int = 250

    def learning_rate(self, step: int) -> float:
        """The learning rate of step ``step`` (1-based)."""
        if step <= self.warmup:
            return self.lr * step / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


#: code-llama's block, which code-alibi and code-llama-sink change in one switch each (their cards compare them).
_LLAMA_BLOCK = dict(d_model=128, num_heads=4, num_layers=4, norm="rms", placement="pre", ffn="swiglu",
                    positions="rope", bias=False)
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe(name="code-lm", chapter="A language model and its heads",
           purpose="the chapter's model (pre-LN blocks, learned positions) trained past the best n-gram table, "
                   "for its heads",
           model="LanguageModel", config=dict(d_model=128, num_heads=4, num_layers=4), steps=6000),
    Recipe(name="code-llama", chapter="From the original block to a modern LLM block",
           purpose="the same sizes as code-lm in a Llama-style block (pre-RMSNorm, SwiGLU, rotary, no biases)",
           model="DecoderLM", config=dict(_LLAMA_BLOCK), steps=3000),
    Recipe(name="code-alibi", chapter="ALiBi and length extrapolation",
           purpose="code-llama with ALiBi in place of rotary positions, to read beyond its training length",
           model="DecoderLM", config=dict(_LLAMA_BLOCK, positions="alibi"), steps=3000),
    Recipe(name="code-gpt2", chapter="Attention in today's open models",
           purpose="a GPT-2-style block (pre-LayerNorm, tanh GELU, learned positions, biases, tied embeddings) "
                   "at code-lm's sizes and steps, for the real-model section: one of the course's models that "
                   "lessons_src.save_pretrained writes as a Hugging Face checkpoint and that copies as code-lm does",
           model="DecoderLM", config=dict(d_model=128, num_heads=4, num_layers=4, norm="layer", placement="pre",
                                          ffn="gelu_tanh", positions="learned", bias=True, tie_word_embeddings=True),
           steps=6000),
    Recipe(name="code-llama-mqa", chapter="Multi-head latent attention",
           purpose="code-llama with one key/value head shared by its 4 query heads (MQA): a cache of 64 numbers "
                   "per token and layer against code-llama's 256, for chapter 17's comparison at matched cache",
           model="DecoderLM", config=dict(_LLAMA_BLOCK, num_kv_heads=1), steps=3000),
    Recipe(name="code-mla", chapter="Multi-head latent attention",
           purpose="code-llama's sizes with multi-head latent attention cached at MQA's 64 numbers per token and "
                   "layer (a latent of d_c = 48 and a shared rotary key of d_R = 16), against code-llama-mqa",
           model="MLADecoderLM", config=dict(d_model=128, num_heads=4, num_layers=4, kv_lora_rank=48,
                                             qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, eps=1e-5),
           steps=3000),
    Recipe(name="code-llama-sink", chapter="Attention in today's open models",
           purpose="code-llama with a learned sink per head (gpt-oss's sinks), to read where trained heads put the "
                   "weight the sink offers them, seed by seed against code-llama",
           model="DecoderLM", config=dict(_LLAMA_BLOCK, sinks=True), steps=3000),
    Recipe(name="code-llama-gate", chapter="Attention in today's open models",
           purpose="code-llama with a gated output (Qwen3-Next's: each head's output times a sigmoid of the layer's "
                   "input, channel by channel), to read how far trained heads close their gates, seed by seed "
                   "against code-llama and code-llama-sink",
           model="DecoderLM", config=dict(_LLAMA_BLOCK, attn_output_gate=True), steps=3000),
)}
#: Chapter 16's ladder at the zoo's size and recipe: each rung is the one before with one more switch of
#: DecoderConfig, from the 2017 block to code-2017-rope (code-llama with biases); code-llama (no biases) and
#: code-llama-mqa (one key/value head) are the two rungs after it.
_rung_config = dict(d_model=128, num_heads=4, num_layers=4)  # the 2017 block: DecoderConfig's defaults
for _name, _switch, _purpose in (
        ("code-2017", {}, "the 2017 block (post-LayerNorm, ReLU, sinusoidal positions added to the embeddings, "
                          "biases) at code-llama's sizes and steps: the first rung of chapter 16's ladder"),
        ("code-2017-pre-ln", dict(placement="pre"),
         "code-2017 with LayerNorm before each sublayer (pre-LN): the ladder's second rung"),
        ("code-2017-rmsnorm", dict(norm="rms"), "code-2017-pre-ln with RMSNorm for LayerNorm: the ladder's third rung"),
        ("code-2017-swiglu", dict(ffn="swiglu"), "code-2017-rmsnorm with a SwiGLU feed-forward: the ladder's fourth rung"),
        ("code-2017-rope", dict(positions="rope"),
         "code-2017-swiglu with rotary embeddings inside attention for sinusoidal vectors added to the embeddings: "
         "the ladder's fifth rung, code-llama with biases")):
    _rung_config = dict(_rung_config, **_switch)  # the rung before, one more switch
    RECIPES[_name] = dataclasses.replace(RECIPES["code-llama"], name=_name, purpose=_purpose, config=_rung_config)
# Seeds 1 and 2 of the models chapters 13, 16, 17 and 18 compare, so that each comparison is read against their spread.
SEEDS = (0, 1, 2)
for _base, _reader in (("code-llama", "chapter 13"), ("code-alibi", "chapter 13"),
                       ("code-llama-sink", "chapter 18"), ("code-llama-gate", "chapter 18"), ("code-llama-mqa", "chapter 17"), ("code-mla", "chapter 17"),
                       *((rung, "chapter 16") for rung in list(RECIPES) if rung.startswith("code-2017"))):
    for _seed in SEEDS[1:]:
        RECIPES[f"{_base}-seed{_seed}"] = dataclasses.replace(
            RECIPES[_base], name=f"{_base}-seed{_seed}", seed=_seed,
            purpose=f"{_base} trained from seed {_seed}: with it and the seed-0 model, the seed spread of "
                    f"what {_reader} reads")


def seeds(name: str) -> list[str]:
    """The zoo names of model ``name`` trained from each of its seeds, seed 0 (``name`` itself) first;
    ``[name]`` for a model trained from one seed. Taught in the chapter "ALiBi and length extrapolation"."""
    _recipe(name, "seeds")
    return [name] + [f"{name}-seed{s}" for s in SEEDS[1:] if f"{name}-seed{s}" in RECIPES]


def build(recipe: Recipe, vocab_size: int) -> nn.Module:
    """The recipe's model with fresh weights (drawn from the global generator; :func:`train` seeds it first).
    Taught in the chapter "A language model and its heads"."""
    if not isinstance(recipe, Recipe):
        raise TypeError(f"build: recipe must be a Recipe, got {type(recipe).__name__}")
    check.positive_int(vocab_size, "vocab_size", "build")
    if recipe.model == "LanguageModel":
        return LanguageModel(vocab_size, max_len=recipe.context, **recipe.config)
    if recipe.model == "DecoderLM":
        return DecoderLM(DecoderConfig(vocab_size=vocab_size, max_len=recipe.context, **recipe.config))
    if recipe.model == "MLADecoderLM":
        return MLADecoderLM(MLAConfig(vocab_size=vocab_size, max_len=recipe.context, **recipe.config))
    raise ValueError(f"build: recipe {recipe.name!r} names model {recipe.model!r}; "
                     "expected 'LanguageModel', 'DecoderLM' or 'MLADecoderLM'")


def same_start(name: str, other: str, seed: int = 0) -> tuple[list[str], int]:
    """Which first weights models ``name`` and ``other`` share when each is built after
    ``torch.manual_seed(seed)``, as :func:`train` builds them: the names of ``name``'s weight tensors that
    ``other`` holds with the same shape and values, and how many tensors ``name`` has. The premise of reading
    two recipes as a pair seed by seed. Leaves the global generator seeded with ``seed`` plus one model's draws.
    Taught in the chapters "ALiBi and length extrapolation" and "Attention in today's open models"."""
    recipes = [_recipe(n, "same_start") for n in (name, other)]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"same_start: seed must be an integer >= 0, got {seed!r}")
    vocab_size = CharTokenizer("".join(python_source())).vocab_size  # the corpus's characters, as train builds
    first = []
    for recipe in recipes:
        torch.manual_seed(seed)
        first.append(build(recipe, vocab_size).state_dict())
    ours, theirs = first
    same = [key for key, value in ours.items()
            if key in theirs and value.shape == theirs[key].shape and torch.equal(value, theirs[key])]
    return same, len(ours)


def _recipe(name: str, where: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"{where}: no zoo model named {name!r}; the zoo has {sorted(RECIPES)}")
    return RECIPES[name]


def _corpus_tokens() -> tuple[CharTokenizer, Tensor, Tensor]:
    train_text, held_text = python_source()
    tokenizer = CharTokenizer(train_text + held_text)
    return tokenizer, tokenizer.encode(train_text), tokenizer.encode(held_text)


@torch.no_grad()
def held_out_loss(model: nn.Module, held_out: Tensor, context: int, max_windows: int | None = None,
                  batch_size: int = 64) -> float:
    """Mean cross-entropy (nats per character) of ``model`` on ``held_out`` cut into consecutive windows
    of ``context`` characters (the first ``max_windows`` of them, or all): each window's first character
    is predicted from nothing before it, so the number is a little worse than the model reading the text
    with its full context. Taught in the chapter "A language model and its heads"."""
    check.positive_int(context, "context", "held_out_loss")
    if not isinstance(held_out, Tensor) or held_out.dim() != 1 or held_out.numel() <= context:
        raise ValueError(f"held_out_loss: held_out must be 1-D token ids longer than context={context}, got "
                         f"{getattr(held_out, 'shape', type(held_out).__name__)}")
    n = (held_out.numel() - 1) // context
    if max_windows is not None:
        n = min(n, max_windows)
    inputs = held_out[: n * context].view(n, context)
    targets = held_out[1 : n * context + 1].view(n, context)
    was_training = model.training
    model.eval()
    total = 0.0
    for start in range(0, n, batch_size):
        logits = model(inputs[start : start + batch_size])
        total += F.cross_entropy(logits.flatten(0, 1), targets[start : start + batch_size].flatten(),
                                 reduction="sum").item()
    model.train(was_training)
    return total / targets.numel()


def train(name: str, steps: int | None = None,
          progress: Callable[[dict], None] | None = None) -> tuple[nn.Module, list[dict]]:
    """Train the zoo model ``name`` from its recipe: ``(model, log)``, on one CPU thread (or the GPU).

    ``steps`` stops early (the learning-rate schedule stays the recipe's). ``log`` has one entry per
    ``log_every`` steps: the step, the mean training loss over those steps, and the held-out loss on the
    first 64 held-out windows (:func:`held_out_loss`); ``progress`` is called with each entry. The first
    entry is step 0 with the training losses of steps 1 to 5 one by one (``"first"``), which a re-run must
    match (:func:`first_steps`). Taught in the chapter "A language model and its heads".
    """
    recipe = _recipe(name, "train")
    steps = recipe.steps if steps is None else steps
    check.positive_int(steps, "steps", "train")
    tokenizer, train_tokens, held = _corpus_tokens()
    torch.manual_seed(recipe.seed)
    model = build(recipe, tokenizer.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.95),
                                  weight_decay=recipe.weight_decay)
    generator = torch.Generator().manual_seed(recipe.seed)
    log: list[dict] = [{"step": 0, "first": []}]
    running: list[float] = []
    with one_cpu_thread():
        for step in range(1, steps + 1):
            for group in optimizer.param_groups:
                group["lr"] = recipe.learning_rate(step)
            inputs, targets = windows(train_tokens, recipe.context, recipe.batch_size, generator)
            loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            running.append(loss.item())
            if step <= FIRST_STEPS:
                log[0]["first"].append(round(loss.item(), 6))
                if step == min(FIRST_STEPS, steps) and progress is not None:
                    progress(log[0])
            if step % recipe.log_every == 0 or step == steps:
                entry = {"step": step, "train": round(sum(running) / len(running), 4),
                         "held_out_64": round(held_out_loss(model, held, recipe.context, max_windows=64), 4)}
                running = []
                log.append(entry)
                if progress is not None:
                    progress(entry)
    return model.eval(), log


def first_steps(name: str) -> list[float]:
    """The training losses of a zoo model's first 5 steps, recomputed now from its recipe (a few seconds);
    the unit tests compare them with the card's. Taught in the chapter "A language model and its heads"."""
    _recipe(name, "first_steps")
    _, log = train(name, steps=FIRST_STEPS)
    return log[0]["first"]


def _zoo_file(name: str, suffix: str):
    return resources.files("lessons_src").joinpath(f"{ZOO_DIR}/{name}{suffix}")


def trained(name: str) -> bool:
    """Whether the package ships zoo model ``name`` (its weights and card): a recipe may wait to be trained by
    ``scripts/train_zoo.py``. Taught in the chapter "A language model and its heads"."""
    _recipe(name, "trained")
    return _zoo_file(name, ".json").is_file() and _zoo_file(name, ".safetensors").is_file()


def card(name: str) -> dict:
    """The card of the shipped zoo model ``name``: its recipe, training log, held-out loss, the best
    n-gram table's on the same text, the corpus hash, the versions and machine that trained it.
    Taught in the chapter "A language model and its heads"."""
    _recipe(name, "card")
    path = _zoo_file(name, ".json")
    if not path.is_file():
        raise FileNotFoundError(f"card: zoo model {name!r} has a recipe but is not trained yet; "
                                f"run: python scripts/train_zoo.py {name}")
    return json.loads(path.read_text(encoding="utf-8"))


def load(name: str) -> tuple[nn.Module, CharTokenizer, dict]:
    """The shipped zoo model ``name``: ``(model, tokenizer, card)``, the model in eval mode on the CPU,
    float32 (stored as float16). Loads offline, in well under a second. Taught in the chapter "A language
    model and its heads"."""
    from safetensors.torch import load_file

    info = card(name)
    recipe = Recipe(**info["recipe"])
    tokenizer = CharTokenizer("".join(info["vocabulary"]))
    model = build(recipe, tokenizer.vocab_size)
    with resources.as_file(_zoo_file(name, ".safetensors")) as path:
        state = {k: v.float() for k, v in load_file(str(path)).items()}
    model.load_state_dict(state)  # strict: every weight of the model is in the file
    return model.eval(), tokenizer, info


def save(name: str, model: nn.Module, log: list[dict], ngram: dict, seconds: float, folder: Path) -> dict:
    """Write ``folder/name.safetensors`` (float16) and ``folder/name.json`` (the card); return the card.
    The card's held-out loss is measured on the stored (float16) weights over the whole held-out text.
    Used by ``scripts/train_zoo.py``. Taught in the chapter "A language model and its heads"."""
    from safetensors.torch import save_file

    recipe = _recipe(name, "save")
    from . import __version__

    tokenizer, _, held = _corpus_tokens()
    state = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in model.state_dict().items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / f"{name}.safetensors"))
    stored = build(recipe, tokenizer.vocab_size)
    stored.load_state_dict({k: v.float() for k, v in state.items()})
    with one_cpu_thread():
        loss = held_out_loss(stored, held, recipe.context)
    info = {
        "name": name,
        "recipe": dataclasses.asdict(recipe),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocabulary": tokenizer.chars,
        "held_out_loss": round(loss, 4),
        "ngram": ngram,
        "margin": round(ngram["loss"] - loss, 4),
        "log": log,
        "corpus": {"file": CORPUS, "sha256": corpus_sha256(), "held_out_characters": held.numel()},
        "trained_with": {"lessons_src": __version__, "torch": torch.__version__, "python": platform.python_version(),
                         "machine": platform.machine(), "device": str(next(model.parameters()).device),
                         "seconds": round(seconds)},
    }
    (folder / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return info


@torch.no_grad()
def logits_and_weights(model: nn.Module, tokens: Tensor) -> tuple[Tensor, list[Tensor]]:
    """``(logits (B, L, |V|), [one (B, H, L, L) per layer])`` for a :class:`lessons_src.LanguageModel` or a
    :class:`lessons_src.DecoderLM` (whose weights are recomputed from each layer's input, as the model
    explorer does, and checked against the layer's output). Taught in the chapter "Induction heads"."""
    from .explorer import _decoder_attention_hook

    check.tokens(tokens, "logits_and_weights")
    if isinstance(model, LanguageModel):
        return model(tokens, return_weights=True)
    if not isinstance(model, DecoderLM):
        raise TypeError(f"logits_and_weights: model must be a LanguageModel or a DecoderLM, got {type(model).__name__}")
    weights: list[Tensor] = []
    hooks = [layer.self_attn.register_forward_hook(_decoder_attention_hook(weights)) for layer in model.layers]
    try:
        logits = model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    return logits, weights


@torch.no_grad()
def output_gates(model: DecoderLM, tokens: Tensor) -> list[Tensor]:
    """The output gate's values ``sigmoid(x W_G)``, one ``(B, H, L, d_k)`` per layer, for a
    :class:`lessons_src.DecoderLM` with ``attn_output_gate=True`` (Qwen3-Next's gate: each channel of each
    head's output is multiplied by its value; 0 shuts it, 1 lets it through). Taught in the chapter
    "Attention in today's open models"."""
    check.tokens(tokens, "output_gates")
    if not isinstance(model, DecoderLM) or not model.config.attn_output_gate:
        raise ValueError("output_gates: model must be a DecoderLM with attn_output_gate=True, got "
                         + (f"{type(model).__name__}" if not isinstance(model, DecoderLM) else "attn_output_gate=False"))
    gates: list[Tensor] = []

    def keep(module, inputs):  # inputs[0]: what the layer gives its attention (x, after the norm in a pre-norm block)
        B, L, _ = inputs[0].shape
        gate = module._project(inputs[0], 0)[3]  # (B, L, H d_k), before the sigmoid
        gates.append(torch.sigmoid(gate).view(B, L, module.config.num_heads, -1).transpose(1, 2))

    hooks = [layer.self_attn.register_forward_pre_hook(keep) for layer in model.layers]
    try:
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    return gates


def zoo_bytes() -> int:
    """What the shipped zoo takes in the package: the bytes of every file under ``data/zoo``.
    Taught in the chapter "A language model and its heads"."""
    folder = resources.files("lessons_src").joinpath(ZOO_DIR)
    return sum(f.stat().st_size for f in Path(str(folder)).iterdir() if f.is_file()) if folder.is_dir() else 0
