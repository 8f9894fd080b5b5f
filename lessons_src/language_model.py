"""A small decoder-only language model built from the course's blocks, sampling from it, and the
scores that find previous-token and induction heads.

- :class:`CharTokenizer` and :func:`course_text`: characters as tokens, and the text the model reads
  (the prose of the course's own chapters, shipped with the package: nothing is downloaded);
- :class:`LanguageModel`: token and learned position embeddings, pre-LN encoder blocks
  (:class:`lessons_src.EncoderBlock`) run with a causal mask, a final LayerNorm and a read-out to
  the vocabulary; ``attention_only=True`` gives the attention-only model of the induction-head
  experiments (each layer ``x + attention(x)``, no feed-forward);
- :func:`bigram_loss`: the count-based baseline every trained model's loss is read against;
- :func:`next_token_probs` and :func:`generate`: sampling with a temperature, top-k and top-p;
- :func:`repeated_tokens`, :func:`previous_token_score`, :func:`induction_score`: the data and the
  measurements of the induction-head experiment.

Taught in the chapters "A language model and its heads" and "Induction heads".
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

import torch
from torch import Tensor, nn

from . import _validate as check
from .encoder import EncoderBlock
from .masks import causal_mask
from .multihead import MultiHeadAttention
from .positional import LearnedPositionalEmbedding

__all__ = ["course_text", "CharTokenizer", "windows", "bigram_loss", "ngram_loss", "best_ngram_loss", "LanguageModel",
           "next_token_probs", "generate",
           "repeated_tokens", "previous_token_score", "induction_score"]


def course_text() -> str:
    """The prose of the course's chapters 1-11 (about 120 KiB of English), shipped in the package.

    Written by this project (MIT licence); made by ``scripts/make_corpus.py``. Taught in the chapter
    "A language model and its heads".
    """
    return resources.files("lessons_src").joinpath("data/course_text.txt").read_text(encoding="utf-8")


class CharTokenizer:
    """Characters as tokens: the sorted distinct characters of ``text``, one id each.

    Taught in the chapter "A language model and its heads".
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError(f"CharTokenizer: text must be a non-empty str, got {type(text).__name__}")
        self.chars = sorted(set(text))
        self.ids = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_chars(cls, chars: str) -> CharTokenizer:
        """A tokenizer whose ids follow ``chars`` as given (id ``i`` is ``chars[i]``), not sorted: for a
        model trained on ids that stand for characters of one's choosing (the trigger task of the chapter
        "Attention in today's open models")."""
        if not isinstance(chars, str) or not chars or len(set(chars)) != len(chars):
            raise ValueError(f"CharTokenizer.from_chars: chars must be a non-empty str of distinct characters, "
                             f"got {chars!r}")
        tokenizer = cls(chars)
        tokenizer.chars = list(chars)
        tokenizer.ids = {c: i for i, c in enumerate(chars)}
        return tokenizer

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        """``text`` -> int64 ``(len(text),)``; a character outside the vocabulary is a ValueError."""
        unknown = sorted(set(text) - set(self.ids))
        if unknown:
            raise ValueError(f"CharTokenizer.encode: characters not in the vocabulary: {unknown}")
        return torch.tensor([self.ids[c] for c in text], dtype=torch.long)

    def decode(self, tokens: Tensor) -> str:
        """int ``(L,)`` -> the text."""
        return "".join(self.chars[i] for i in tokens.tolist())


def windows(source: Tensor, context: int, batch_size: int,
            generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """A batch for next-token training: ``(inputs, targets)``, each int64 ``(batch_size, context)``.

    ``batch_size`` windows of ``context`` tokens start at random places of the 1-D token tensor
    ``source`` (drawn from ``generator``); the targets are the same windows shifted by one token, so
    ``targets[b, t]`` is the token that follows ``inputs[b, : t + 1]``. Taught in the chapter "A
    language model and its heads".
    """
    check.positive_int(context, "context", "windows")
    check.positive_int(batch_size, "batch_size", "windows")
    if not isinstance(source, Tensor) or source.dim() != 1 or source.dtype != torch.long:
        raise ValueError(f"windows: source must be a 1-D int64 tensor of token ids, got "
                         f"{getattr(source, 'dtype', type(source).__name__)} {tuple(getattr(source, 'shape', ()))}")
    if len(source) < context + 2:
        raise ValueError(f"windows: source has {len(source)} tokens, too few for windows of context={context} "
                         f"and their targets (at least context + 2 = {context + 2})")
    starts = torch.randint(0, len(source) - context - 1, (batch_size,), generator=generator).tolist()
    return (torch.stack([source[s:s + context] for s in starts]),  # (B, context)
            torch.stack([source[s + 1:s + context + 1] for s in starts]))  # (B, context), one token later


def _check_tokens(tokens: Tensor, name: str, vocab_size: int, where: str) -> None:
    if not isinstance(tokens, Tensor) or tokens.dim() != 1 or tokens.dtype != torch.long or len(tokens) < 2:
        raise ValueError(f"{where}: {name} must be a 1-D int64 tensor of at least 2 token ids, got "
                         f"{getattr(tokens, 'dtype', type(tokens).__name__)} {tuple(getattr(tokens, 'shape', ()))}")
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise ValueError(f"{where}: {name} holds ids outside 0..{vocab_size - 1} "
                         f"(min {tokens.min().item()}, max {tokens.max().item()})")


def bigram_loss(train: Tensor, held_out: Tensor, vocab_size: int, smoothing: float = 1.0) -> float:
    """Held-out cross-entropy (nats per token) of a bigram table counted on ``train``: the baseline.

    ``p(b | a) = (count(a, b) + smoothing) / (count(a) + smoothing · vocab_size)`` from the 1-D
    int64 token tensors; the loss is the mean of ``-log p(b | a)`` over ``held_out``'s consecutive
    pairs. It is not the best a model that reads only the previous token can do: that is the same
    table counted on ``held_out`` itself with ``smoothing`` near 0 (an oracle), and a model must go
    below *that* to show it uses more context. Taught in the chapter "A language model and its heads".
    """
    check.positive_int(vocab_size, "vocab_size", "bigram_loss")
    for name, tokens in (("train", train), ("held_out", held_out)):
        _check_tokens(tokens, name, vocab_size, "bigram_loss")
    if not isinstance(smoothing, (int, float)) or isinstance(smoothing, bool) or not smoothing > 0:
        raise ValueError(f"bigram_loss: smoothing must be a number > 0, got {smoothing!r}")
    pairs = train[:-1] * vocab_size + train[1:]  # (N - 1,) one id per (a, b)
    counts = torch.bincount(pairs, minlength=vocab_size**2).view(vocab_size, vocab_size).double()  # (|V|, |V|)
    probs = (counts + smoothing) / (counts.sum(dim=1, keepdim=True) + smoothing * vocab_size)  # rows sum to 1
    return -probs[held_out[:-1], held_out[1:]].log().mean().item()



def _kneser_ney_tables(train_ids: list[int], n: int) -> tuple[list[dict], list[dict], list[dict]]:
    """``(counts, totals, kinds)`` by order ``k = 1 .. n`` of the interpolated Kneser-Ney table on ``train_ids``:
    ``counts[k]`` of k-token sequences (continuation counts below the top order), ``totals[k][h] = N(h)``
    and ``kinds[k][h] = T(h)``. The discount enters only when a probability is read."""
    counts: list[dict[tuple[int, ...], int]] = [{} for _ in range(n + 1)]
    for k in range(1, n + 1):
        table = counts[k]
        for i in range(len(train_ids) - k + 1):
            gram = tuple(train_ids[i:i + k])
            table[gram] = table.get(gram, 0) + 1
    for k in range(1, n):  # lower orders: the number of distinct tokens seen before each sequence
        continuations: dict[tuple[int, ...], int] = {}
        for gram in counts[k + 1]:
            continuations[gram[1:]] = continuations.get(gram[1:], 0) + 1
        counts[k] = continuations
    totals: list[dict[tuple[int, ...], int]] = [{} for _ in range(n + 1)]
    kinds: list[dict[tuple[int, ...], int]] = [{} for _ in range(n + 1)]
    for k in range(1, n + 1):
        for gram, count in counts[k].items():
            totals[k][gram[:-1]] = totals[k].get(gram[:-1], 0) + count
            kinds[k][gram[:-1]] = kinds[k].get(gram[:-1], 0) + 1
    return counts, totals, kinds


def _kneser_ney(tables: tuple[list[dict], list[dict], list[dict]], vocab_size: int,
                discount: float) -> Callable[[tuple[int, ...], int], float]:
    """``probability(context, token)`` of the table ``tables`` (from :func:`_kneser_ney_tables`) at ``discount``;
    only the last ``n - 1`` tokens of ``context`` are read."""
    counts, totals, kinds = tables
    n = len(counts) - 1

    def probability(context: tuple[int, ...], token: int) -> float:
        context = context[max(0, len(context) - (n - 1)):] if n > 1 else ()
        p = 1.0 / vocab_size
        for k in range(1, len(context) + 2):  # from the unigram up to the longest context available
            h = context[len(context) - (k - 1):] if k > 1 else ()
            total = totals[k].get(h, 0)
            if total:
                p = max(counts[k].get(h + (token,), 0) - discount, 0) / total + discount * kinds[k][h] / total * p
        return p

    return probability


def _check_ngram_inputs(train: Tensor, held_out: Tensor, vocab_size: int, where: str) -> None:
    check.positive_int(vocab_size, "vocab_size", where)
    for name, tokens in (("train", train), ("held_out", held_out)):
        _check_tokens(tokens, name, vocab_size, where)


def _check_discount(discount: object, where: str) -> None:
    if isinstance(discount, bool) or not isinstance(discount, (int, float)) or not 0 < discount <= 1:
        raise ValueError(f"{where}: discount must be a number in (0, 1], got {discount!r}")


def ngram_loss(train: Tensor, held_out: Tensor, vocab_size: int, n: int, discount: float = 0.75) -> float:
    """Held-out cross-entropy (nats per token) of an interpolated Kneser-Ney n-gram table counted on ``train``.

    The count-based baseline a trained model is read against: the table predicts each token from the
    ``n - 1`` before it, ``p(c | h) = max(N(h c) - D, 0) / N(h) + D · T(h) / N(h) · p(c | h')`` with ``h'``
    the context one token shorter, ``T(h)`` the number of distinct tokens seen after ``h`` and ``D`` the
    ``discount``; the lower orders count continuations (in how many contexts a sequence occurs) instead of
    occurrences, and the lowest falls back to uniform over ``vocab_size``. Every row sums to one. A held-out
    token's context is the tokens before it in ``held_out`` (fewer at its start). Taught in the chapter
    "A language model and its heads"; :func:`best_ngram_loss` picks ``n`` and ``D``.
    """
    _check_ngram_inputs(train, held_out, vocab_size, "ngram_loss")
    check.positive_int(n, "n", "ngram_loss")
    _check_discount(discount, "ngram_loss")
    return _ngram_losses(train, held_out, vocab_size, n, (discount,))[(n, discount)]


def best_ngram_loss(train: Tensor, held_out: Tensor, vocab_size: int, max_n: int = 8,
                    discounts: tuple[float, ...] = (0.5, 0.75, 0.9)) -> tuple[float, int, float]:
    """The lowest held-out loss of :func:`ngram_loss` over ``n = 1 .. max_n`` and ``discounts``: ``(loss, n, D)``.

    Chosen on the held-out text itself, so a model that beats it has beaten every table of this kind on
    that grid; where the best sits at the grid's edge (the largest ``n`` or discount), a wider grid may do
    better, so widen it until the loss stops moving (``lessons_src.zoo.NGRAM_SEARCH`` goes to n = 64). All
    orders and discounts are read in one pass over the orders. Taught in the chapter "A language model and
    its heads".
    """
    _check_ngram_inputs(train, held_out, vocab_size, "best_ngram_loss")
    check.positive_int(max_n, "max_n", "best_ngram_loss")
    if not discounts:
        raise ValueError("best_ngram_loss: discounts must name at least one discount")
    for discount in discounts:
        _check_discount(discount, "best_ngram_loss")
    losses = _ngram_losses(train, held_out, vocab_size, max_n, tuple(discounts))
    return min((loss, n, d) for (n, d), loss in losses.items())


def _first_positions(ids: Tensor, count: int) -> Tensor:
    # (count,): the first position of each id in ids (len(ids) for an id that does not occur)
    first = torch.full((count,), ids.numel(), dtype=torch.long)
    return first.scatter_reduce(0, ids, torch.arange(ids.numel()), reduce="amin")


def _ngram_losses(train: Tensor, held_out: Tensor, vocab_size: int, max_n: int,
                  discounts: tuple[float, ...]) -> dict[tuple[int, float], float]:
    """``{(n, D): ngram_loss(train, held_out, vocab_size, n, D)}`` for every ``n <= max_n`` and ``D`` in one pass.

    The same table as :func:`_kneser_ney_tables` and :func:`_kneser_ney` (the tests compare them), counted
    with tensors: each k-gram of ``train + held_out`` gets an id (the id of its first k - 1 tokens and its
    last token, numbered by ``torch.unique``), counts are ``bincount`` s of ids, and every held-out token
    is read at once, order after order. The order-n table reads orders below n as continuation counts and
    order n as counts, so one pass over the orders gives every n's loss."""
    text = torch.cat([train, held_out]).long()
    n_train, n_held = train.numel(), held_out.numel()
    at = torch.arange(n_held) + n_train  # (M,): each held-out token's place in text
    ids = [None, text]  # ids[k]: (len(text) - k + 1,) the id of the k-gram starting at each place
    p_lower = {d: torch.full((n_held,), 1.0 / vocab_size, dtype=torch.float64) for d in discounts}
    losses: dict[tuple[int, float], float] = {}
    width = text.numel() + vocab_size  # more than any id: (id of the first k - 1 tokens, last token) -> one number
    for k in range(1, max_n + 1):
        if k < max_n:
            ids.append(torch.unique(ids[k][:-1] * width + text[k:], return_inverse=True)[1])
        count = int(ids[k].max()) + 1
        raw = torch.bincount(ids[k][: max(n_train - k + 1, 0)], minlength=count).double()  # k-grams wholly in train
        if k < max_n:  # continuation counts: how many distinct tokens come before each k-gram in train
            in_train = ids[k + 1][: max(n_train - k, 0)]
            seen = _first_positions(in_train, int(ids[k + 1].max()) + 1)
            seen = seen[seen < in_train.numel()]  # one train place of each distinct (k + 1)-gram
            continuation = torch.bincount(ids[k][seen + 1], minlength=count).double()
        readable = at >= n_train + k - 1  # held-out tokens with k - 1 tokens before them in held_out
        start = (at - k + 1).clamp(min=0)
        gram = ids[k][start]
        if k > 1:  # the id of each k-gram's first k - 1 tokens, and of each held-out token's context
            context, held_context = ids[k - 1][_first_positions(ids[k], count)], ids[k - 1][start]
            n_contexts = int(ids[k - 1].max()) + 1
        else:
            context, held_context, n_contexts = torch.zeros(count, dtype=torch.long), torch.zeros(n_held, dtype=torch.long), 1
        read = {}  # "top" (counts) and "lower" (continuation counts): what each held-out token reads, any discount
        for kind, counts in [("top", raw)] + ([("lower", continuation)] if k < max_n else []):
            totals = torch.zeros(n_contexts, dtype=torch.float64).index_add_(0, context, counts)
            kinds = torch.zeros(n_contexts, dtype=torch.float64).index_add_(0, context, (counts > 0).double())
            total = totals[held_context]
            use = readable & (total > 0)
            read[kind] = (use, counts[gram], torch.where(use, total, torch.ones_like(total)), kinds[held_context])
        for d in discounts:
            for kind, (use, c, total, t) in read.items():
                p = torch.where(use, (c - d).clamp(min=0) / total + d * t / total * p_lower[d], p_lower[d])
                if kind == "top":
                    losses[(k, d)] = -p.log().mean().item()
                else:
                    p_lower[d] = p
    return losses


class _AttentionOnlyBlock(nn.Module):
    """``x + attention(x)``: no feed-forward, no norm (the induction-head experiments' layer)."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)

    def forward(self, x: Tensor, mask: Tensor, check_inputs: bool = False) -> Tensor:
        return x + self.self_attn(x, x, x, mask, check_inputs=False)[0]


class LanguageModel(nn.Module):
    """A decoder-only transformer: ``tokens (B, L) -> logits (B, L, vocab_size)``.

    Embeddings (tokens plus learned positions, up to ``max_len``), ``num_layers`` pre-LN
    :class:`lessons_src.EncoderBlock` s run with a causal mask (a GPT block is an encoder block
    whose tokens see only the past), a final LayerNorm, and a linear read-out. With
    ``attention_only=True`` each layer is ``x + attention(x)`` and there is no final norm.
    ``forward(tokens, return_weights=True)`` also returns each layer's attention weights
    ``(B, H, L, L)``. Taught in the chapter "A language model and its heads".
    """

    def __init__(self, vocab_size: int, d_model: int = 64, num_heads: int = 4, num_layers: int = 2,
                 max_len: int = 128, d_ff: int | None = None, attention_only: bool = False) -> None:
        super().__init__()
        where = "LanguageModel"
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("num_heads", num_heads),
                            ("num_layers", num_layers), ("max_len", max_len)):
            check.positive_int(value, name, where)
        check.divisible(d_model, "d_model", num_heads, "num_heads", where)
        self.max_len, self.attention_only = max_len, attention_only
        self.embed = nn.Embedding(vocab_size, d_model)
        self.positions = LearnedPositionalEmbedding(max_len, d_model)
        if attention_only:
            self.blocks = nn.ModuleList(_AttentionOnlyBlock(d_model, num_heads) for _ in range(num_layers))
            self.norm = nn.Identity()
        else:
            self.blocks = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff or 4 * d_model, norm_first=True)
                                        for _ in range(num_layers))
            self.norm = nn.LayerNorm(d_model)
        self.read_out = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Tensor, return_weights: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        check.tokens(tokens, "LanguageModel")
        length = tokens.size(1)
        if length > self.max_len:
            raise ValueError(f"LanguageModel: {length} tokens, more than max_len={self.max_len}; "
                             "crop the context to its last max_len tokens")
        weights: list[Tensor] = []
        hooks = [block.self_attn.register_forward_hook(lambda _m, _i, out: weights.append(out[1]))
                 for block in self.blocks] if return_weights else []
        try:
            x = self.positions(self.embed(tokens))  # (B, L, D)
            mask = causal_mask(length, device=tokens.device)  # (L, L): each token sees itself and the past
            for block in self.blocks:
                x = block(x, mask, check_inputs=False)
            logits = self.read_out(self.norm(x))  # (B, L, |V|)
        finally:
            for hook in hooks:
                hook.remove()
        return (logits, weights) if return_weights else logits


def next_token_probs(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> Tensor:
    """``softmax(logits / temperature)`` over the last dim, keeping only the ``top_k`` largest logits
    and then the smallest set of tokens whose probability reaches ``top_p``.

    ``logits (..., |V|)`` -> probabilities ``(..., |V|)``, one row per distribution. A low
    temperature sharpens the distribution towards the most likely token, a high one flattens it.
    Every token outside the kept set gets probability exactly 0, and the kept ones are renormalised:

    - top-k keeps the logits >= the k-th largest of the row: ties with the k-th are all kept (they
      are equally likely; dropping one would be arbitrary), so a row may keep more than k tokens;
    - top-p (nucleus sampling, Holtzman et al. 2020) sorts the tokens by probability, largest first,
      and keeps the shortest prefix whose probabilities add up to at least ``top_p`` (``0 < top_p <= 1``;
      1 keeps every token); tokens tied with the last one kept are kept too, by the same rule as
      top-k. It acts on the distribution left by the temperature and top-k, in that order.

    Taught in the chapter "A language model and its heads".
    """
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"next_token_probs: temperature must be a number > 0, got {temperature!r}")
    if top_p is not None and (not isinstance(top_p, (int, float)) or isinstance(top_p, bool)
                              or not 0 < top_p <= 1):
        raise ValueError(f"next_token_probs: top_p must be a number in (0, 1], got {top_p!r}")
    scaled = logits / temperature  # (..., |V|)
    if top_k is not None:
        check.positive_int(top_k, "top_k", "next_token_probs")
        kth = torch.topk(scaled, min(top_k, scaled.size(-1)), dim=-1).values[..., -1:]  # (..., 1)
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)  # (..., |V|)
    if top_p is None or top_p >= 1:
        return probs
    ranked = probs.sort(dim=-1, descending=True).values  # (..., |V|), largest first
    before = ranked.cumsum(dim=-1) - ranked  # (..., |V|): the probability of the tokens ranked above
    kept = (before < top_p).sum(dim=-1, keepdim=True)  # (..., 1): the prefix that reaches top_p, >= 1
    smallest = ranked.gather(-1, kept - 1)  # (..., 1): the least likely token kept
    return torch.softmax(scaled.masked_fill(probs < smallest, float("-inf")), dim=-1)


@torch.no_grad()
def generate(model: LanguageModel, prompt: Tensor, num_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, generator: torch.Generator | None = None,
             top_p: float | None = None) -> Tensor:
    """Sample ``num_tokens`` tokens after ``prompt`` (int64 ``(L,)``), one at a time; returns them ``(num_tokens,)``.

    Each step feeds the last ``model.max_len`` tokens and samples from :func:`next_token_probs`
    with ``temperature``, ``top_k`` and ``top_p``. Taught in the chapter "A language model and its heads".
    """
    check.positive_int(num_tokens, "num_tokens", "generate")
    tokens = prompt.clone()
    for _ in range(num_tokens):
        logits = model(tokens[-model.max_len:][None])[0, -1]  # (|V|,)
        probs = next_token_probs(logits, temperature, top_k, top_p)
        token = torch.multinomial(probs, 1, generator=generator)
        tokens = torch.cat([tokens, token])
    return tokens[len(prompt):]


def repeated_tokens(batch_size: int, half_len: int, vocab_size: int,
                    generator: torch.Generator | None = None) -> Tensor:
    """Random tokens that repeat: int64 ``(B, 2 · half_len)``, the second half a copy of the first.

    The second half is predictable only by finding where the current token appeared before and
    copying the token that followed it: what an induction head does. Taught in the chapter
    "Induction heads".
    """
    for name, value in (("batch_size", batch_size), ("half_len", half_len), ("vocab_size", vocab_size)):
        check.positive_int(value, name, "repeated_tokens")
    first = torch.randint(0, vocab_size, (batch_size, half_len), generator=generator)
    return torch.cat([first, first], dim=1)


def _check_weights(weights: Tensor, where: str) -> None:
    if not isinstance(weights, Tensor) or weights.dim() != 4 or weights.size(-1) != weights.size(-2):
        raise ValueError(f"{where}: weights must be (B, H, L, L), got {tuple(getattr(weights, 'shape', ()))}")


def previous_token_score(weights: Tensor) -> Tensor:
    """Each head's mean weight on the previous token: ``weights (B, H, L, L) -> (H,)``, over queries 1.. L-1.

    1 for a head that always looks exactly one token back. Taught in the chapter "A language model
    and its heads".
    """
    _check_weights(weights, "previous_token_score")
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # w[b, h, i, i-1]


def induction_score(weights: Tensor, half_len: int) -> Tensor:
    """Each head's mean weight, over the second half of a repeated sequence, on the token *after*
    the previous occurrence of the current one: ``weights (B, H, 2T, 2T) -> (H,)``.

    Query ``i >= T`` holds the same token as ``i - T``; an induction head attends to ``i - T + 1``,
    the token that came next last time. 1 for a perfect induction head. Taught in the chapter
    "Induction heads".
    """
    _check_weights(weights, "induction_score")
    check.positive_int(half_len, "half_len", "induction_score")
    if weights.size(-1) != 2 * half_len:
        raise ValueError(f"induction_score: weights cover {weights.size(-1)} tokens, expected 2 * half_len = "
                         f"{2 * half_len}")
    stripe = weights.diagonal(offset=-(half_len - 1), dim1=-2, dim2=-1)  # w[b, h, i, i - T + 1], i = T-1 ..
    return stripe[..., 1:].mean(dim=(0, -1))  # queries T .. 2T-1
