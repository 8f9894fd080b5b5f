"""Small experiments built so that the mechanism decides them, and the rule that reads them over seeds.

- :func:`trigger_batch`: the trigger task. A first token, then ``length`` random letters; in each
  sequence, with probability one half, one letter is replaced by a trigger. At every position the answer is 1 if the trigger has
  appeared so far, else 0. A head that looks for the trigger solves it; a head that cannot see far
  enough back cannot.
- :func:`train_trigger`: one small :class:`lessons_src.DecoderLM` per variant, every variant on the same
  batches from the same seed, so that differences between them are paired seed by seed (the same initial
  draw where the variants' weights have the same shapes; a wider weight, such as a gate's ``q_proj``, makes
  every weight drawn after it another draw).
- :func:`answer_loss`, :func:`position_only_loss`, :func:`reach_loss`: the loss of a model, of the best
  answer that reads only the position, and of the best answer that sees only the last keys a stack of
  sliding windows can reach (the ideal model with that reach).
- :func:`compare_seeds`: a paired difference over seeds read with a paired t-test; a difference it does
  not show is "not shown at this scale".

Taught in the chapter "Attention in today's open models".
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _validate as check
from .device import one_cpu_thread
from .language_model import CharTokenizer
from .llm import HF_LLAMA_SWITCHES, DecoderConfig, DecoderLM

__all__ = ["BOS", "TRIGGER", "TRIGGER_VOCAB", "TRIGGER_CHARS", "trigger_tokenizer", "trigger_batch", "answer_loss", "position_only_loss", "reach_loss",
           "train_trigger", "SeedComparison", "compare_seeds", "compare_unpaired", "student_t_critical", "sign_test"]

BOS, TRIGGER = 0, 1
TRIGGER_VOCAB = 10  # BOS, the trigger, letters 2-9
#: The trigger task's tokens as characters, so a reader can type a sequence: ``^`` is BOS, ``!`` the trigger,
#: ``a``-``h`` the letters 2-9.
TRIGGER_CHARS = "^!abcdefgh"
_FIRSTS = ("bos", "letter")


def trigger_batch(n: int, length: int = 16, generator: torch.Generator | None = None,
                  first: str = "bos") -> tuple[Tensor, Tensor]:
    """``n`` sequences of the trigger task: ``(tokens, answers)``, each int64 ``(n, 1 + length)``.

    ``first="bos"``: every sequence starts with the same token ``BOS`` (as real text starts with one);
    ``first="letter"``: with a random letter, the control in which the first position holds nothing a
    head could find by its content. The trigger never sits at position 0. ``answers[b, i]`` is 1 from the
    trigger on. Taught in the chapter "Attention in today's open models".
    """
    where = "trigger_batch"
    check.positive_int(n, "n", where)
    check.positive_int(length, "length", where)
    if first not in _FIRSTS:
        raise ValueError(f"{where}: first must be one of {_FIRSTS}, got {first!r}")
    letters = torch.randint(2, TRIGGER_VOCAB, (n, 1 + length), generator=generator)  # (n, 1 + length)
    if first == "bos":
        letters[:, 0] = BOS
    has_trigger = torch.rand(n, generator=generator) < 0.5  # (n,)
    at = torch.randint(1, 1 + length, (n,), generator=generator)  # (n,): positions 1 .. length
    letters[has_trigger, at[has_trigger]] = TRIGGER
    return letters, (letters == TRIGGER).long().cummax(dim=1).values  # 1 from the trigger on


def trigger_tokenizer() -> CharTokenizer:
    """The trigger task's tokens as the characters of :data:`TRIGGER_CHARS` (id ``i`` is its ``i``-th
    character), for :class:`lessons_src.ModelExplorer`. Taught in the chapter "Attention in today's open models"."""
    return CharTokenizer.from_chars(TRIGGER_CHARS)


def answer_loss(model: DecoderLM, tokens: Tensor, answers: Tensor) -> Tensor:
    """Cross-entropy of the model's answer (its logits 0 and 1 at every position), mean over positions.

    ``tokens`` and ``answers`` as :func:`trigger_batch` makes them. Taught in the chapter "Attention in today's
    open models".
    """
    return F.cross_entropy(model(tokens)[..., :2].flatten(0, 1), answers.flatten())


def _best_answer_loss(answers: Tensor, groups: Tensor) -> float:
    # The loss of answering each group (an int label per entry) with the share of 1s in that group.
    answers, groups = answers.flatten().double(), groups.flatten()
    share = torch.zeros(int(groups.max()) + 1, dtype=torch.float64).index_add_(0, groups, answers)
    count = torch.zeros_like(share).index_add_(0, groups, torch.ones_like(answers))
    p = (share / count.clamp(min=1))[groups].clamp(1e-9, 1 - 1e-9)
    return F.binary_cross_entropy(p, answers).item()


def position_only_loss(answers: Tensor) -> float:
    """The loss of the best answer that reads the position but no token: the share of 1s at each position
    of ``answers (n, L)`` (computed on the batch itself, so no model can beat it by knowing the batch).

    Taught in the chapter "Attention in today's open models".
    """
    positions = torch.arange(answers.size(1)).expand_as(answers)  # (n, L)
    return _best_answer_loss(answers, positions)


def reach_loss(tokens: Tensor, answers: Tensor, reach: int, knows_position: bool = True) -> float:
    """The loss of the ideal model that sees only keys ``i - reach .. i`` at position ``i`` (and the position).

    Where the trigger lies in that reach the answer is certain; elsewhere the best answer is the share of
    1s among the sequences whose trigger is not in the reach at that position. A stack of ``N`` sliding
    layers of window ``w`` reaches ``N (w - 1)`` keys back, so no such stack can do better: a lower bound.
    With ``knows_position=False`` the ideal model knows its position only while key 0 is in its reach (it
    can count the keys back to it); further on, every position whose reach holds no trigger gets the same
    answer, the share of 1s over all of them: the bound for a stack that cannot tell its absolute position
    (rotary positions, no absolute ones), at least as high as the first. ``tokens`` and ``answers`` are int
    ``(n, L)`` as :func:`trigger_batch` makes them. Taught in the chapter "Attention in today's open models".
    """
    check.positive_int(reach, "reach", "reach_loss")
    if not isinstance(knows_position, bool):
        raise TypeError(f"reach_loss: knows_position must be True or False, got {knows_position!r}")
    n, L = tokens.shape
    hits = F.pad((tokens == TRIGGER).long(), (reach, 0)).unfold(1, reach + 1, 1).amax(-1)  # (n, L): trigger seen
    positions = torch.arange(L).expand(n, L)
    if not knows_position:  # beyond the reach of key 0, all positions look alike
        positions = positions.clamp(max=reach + 1)
    groups = torch.where(hits.bool(), L + positions, positions)  # seen: certain; not seen: by position
    return _best_answer_loss(answers, groups)


def train_trigger(variants: dict[str, dict], seed: int, lr: float, steps: int, *, length: int = 16,
                  first: str = "bos", d_model: int = 16, num_heads: int = 2, num_layers: int = 1,
                  batch_size: int = 32, test: tuple[Tensor, Tensor] | None = None,
                  ) -> tuple[dict[str, DecoderLM], dict[str, float], dict[str, list[float]]]:
    """Train one Llama-style :class:`DecoderLM` per variant (its switches of :class:`DecoderConfig`).

    Every variant sees the same batches (drawn from ``seed``) and starts from ``torch.manual_seed(seed)``
    (the same initial draw where the shapes agree; after a wider weight, another draw), with AdamW at ``lr`` for ``steps`` steps, so the differences between
    variants are paired seed by seed. Returns the models (in eval mode), each one's loss on ``test``
    (default: 512 sequences from seed 1000) and each one's loss on its training batch at every step, in
    order (the spikes a high learning rate gives on the way: a run can spike and then settle). A run that
    diverges reports its losses as they are (``nan`` or large). Taught in the chapter "Attention in today's
    open models".
    """
    where = "train_trigger"
    for name, value in (("steps", steps), ("length", length), ("batch_size", batch_size)):
        check.positive_int(value, name, where)
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not 0 < lr < math.inf:
        raise ValueError(f"{where}: lr must be a finite number > 0, got {lr!r}")
    if test is None:
        test = trigger_batch(512, length, torch.Generator().manual_seed(1000), first)
    batches = torch.Generator().manual_seed(seed)
    models, optimizers, curves = {}, {}, {}
    for name, switches in variants.items():
        torch.manual_seed(seed)
        models[name] = DecoderLM(DecoderConfig(vocab_size=TRIGGER_VOCAB, d_model=d_model, num_heads=num_heads,
                                               num_layers=num_layers, max_len=1 + length,
                                               **{**HF_LLAMA_SWITCHES, **switches}))
        optimizers[name] = torch.optim.AdamW(models[name].parameters(), lr=lr, foreach=True)
        curves[name] = []
    with one_cpu_thread():
        for _ in range(steps):
            x, y = trigger_batch(batch_size, length, batches, first)
            for name, model in models.items():
                loss = answer_loss(model, x, y)
                curves[name].append(loss.item())
                optimizers[name].zero_grad()
                loss.backward()
                optimizers[name].step()
        with torch.no_grad():
            losses = {name: answer_loss(model.eval(), *test).item() for name, model in models.items()}
    return models, losses, curves


# Two-sided 5% critical values of Student's t, by degrees of freedom (seeds - 1); 1.96 beyond 30.
_T_CRITICAL = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
               10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
               18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042}


def _table_row(degrees: int) -> int | None:
    """The row of the table that ``degrees`` reads: the next smaller entry (stricter); None beyond 30 (the normal)."""
    return None if degrees > 30 else max(d for d in _T_CRITICAL if d <= degrees)


def _t_critical(degrees: int) -> float:
    row = _table_row(degrees)
    return 1.96 if row is None else _T_CRITICAL[row]


def _error_text(standard_error: float) -> str:
    """A standard error to three places, or four under 0.0005 (so that a small spread does not print as none)."""
    return f"{standard_error:.4f}" if 0 < standard_error < 0.0005 else f"{standard_error:.3f}"


def student_t_critical(degrees: float) -> float:
    """The two-sided 5% critical value of Student's t at ``degrees`` degrees of freedom, any real number > 0 (such
    as Welch's 3.6): the ``x`` with ``P(|T| > x) = 0.05``, by bisection on the distribution function, which
    Simpson's rule integrates from the density. The tests read the table's entry at the degrees rounded down
    (stricter); this gives the exact value beside it. Agrees with the table to its three decimals. Taught in the
    chapter "Attention in today's open models"."""
    if isinstance(degrees, bool) or not isinstance(degrees, (int, float)) or not 0 < degrees < math.inf:
        raise ValueError(f"student_t_critical: degrees must be a finite number > 0, got {degrees!r}")
    log_scale = math.lgamma((degrees + 1) / 2) - math.lgamma(degrees / 2) - 0.5 * math.log(degrees * math.pi)

    def tail_beyond(x: float, intervals: int = 2000) -> float:  # P(T > x) = 1/2 - the density's integral on [0, x]
        h = x / intervals
        density = [math.exp(log_scale - (degrees + 1) / 2 * math.log1p((i * h) ** 2 / degrees))
                   for i in range(intervals + 1)]
        integral = h / 3 * (density[0] + density[-1] + 4 * sum(density[1:-1:2]) + 2 * sum(density[2:-1:2]))
        return 0.5 - integral

    low, high = 0.0, 1.0
    while tail_beyond(high) > 0.025:  # widen until the 2.5% point is inside
        low, high = high, 2 * high
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if tail_beyond(middle) > 0.025 else (low, middle)
    return (low + high) / 2


def sign_test(a: list[float], b: list[float]) -> float:
    """The exact two-sided sign test of ``b - a``, paired seed by seed: the chance, with no real difference, of
    signs at least as lopsided as these among the seeds where the two differ (ties dropped), ``min(1, 2 P(X <= k))``
    for ``X ~ Binomial(n, 1/2)`` and ``k`` the rarer sign's count. It reads only the signs, so one seed's large
    difference cannot carry it; on 0/1 outcomes (solved or not) it is McNemar's exact test. 1.0 when no seed
    differs. Taught in the chapter "Attention in today's open models".
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"sign_test: a and b need one value per seed, the same seeds: got {len(a)} and {len(b)}")
    if not all(math.isfinite(float(v)) for v in [*a, *b]):
        raise ValueError("sign_test: every value must be finite")
    ups = sum(float(y) > float(x) for x, y in zip(a, b))
    downs = sum(float(y) < float(x) for x, y in zip(a, b))
    n = ups + downs
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(ups, downs) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class SeedComparison:
    """``b - a`` seed by seed, with its standard error and the verdict of :func:`compare_seeds`; printed as one line.

    Taught in the chapter "Attention in today's open models" (and used in "Multi-head latent attention").
    """

    differences: tuple[float, ...]
    mean: float
    standard_error: float
    shown: bool
    degrees: float = math.nan  # Welch's degrees of freedom for :func:`compare_unpaired`; nan for the paired test
    paired: bool = True  # False: :func:`compare_unpaired` (Welch's t on each variant's own spread)

    @property
    def smallest_shown(self) -> float:
        """The smallest mean difference (in size) this test reads as shown at this spread of the seeds: the
        t critical value times the standard error; a smaller real difference would more likely than not pass
        unseen. With no spread the paired test's exact :func:`sign_test` decides (0 from 6 seeds one way:
        any difference; infinity below, or where no seed differs) and the unpaired test cannot run (infinity); nan where no test can run (fewer than 3
        seeds, or a value that is not finite). :func:`compare_seeds` and :func:`compare_unpaired` read a
        difference as shown exactly when it is larger than this."""
        if math.isnan(self.standard_error):
            return math.nan
        if not self.paired:
            return _t_critical(int(self.degrees)) * self.standard_error if self.standard_error > 0 else math.inf
        if self.standard_error == 0:
            return 0.0 if sign_test([0.0] * len(self.differences), list(self.differences)) < 0.05 else math.inf
        return _t_critical(len(self.differences) - 1) * self.standard_error

    def __str__(self) -> str:
        verdict = "shown" if self.shown else "not shown at this scale"
        if self.paired:
            return (f"{self.mean:+.3f} ± {_error_text(self.standard_error)} (seed by seed "
                    f"{', '.join(f'{d:+.3f}' for d in self.differences)}): {verdict}")
        if math.isnan(self.standard_error):
            return f"{self.mean:+.3f} (unpaired; Welch's t needs 3 finite values each): {verdict}"
        if self.standard_error == 0:
            return f"{self.mean:+.3f} ± 0.000 (unpaired; no spread in either variant, no t to read): {verdict}"
        row = _table_row(int(self.degrees))
        return (f"{self.mean:+.3f} ± {_error_text(self.standard_error)} (unpaired, Welch's t "
                f"{self.mean / self.standard_error:+.2f} against {self.smallest_shown / self.standard_error:.2f}, "
                f"{self.degrees:.2f} degrees of freedom, read at {'the normal' if row is None else row}): {verdict}")


def _read(comparison: SeedComparison) -> SeedComparison:
    """The comparison with its verdict: shown exactly when its mean is further from 0 than ``smallest_shown``."""
    return dataclasses.replace(comparison, shown=abs(comparison.mean) > comparison.smallest_shown)


def compare_seeds(a: list[float], b: list[float]) -> SeedComparison:
    """Read ``b - a`` (one value per seed, the same seeds in the same order, paired) with a paired t-test.

    The differences ``b_s - a_s`` are paired: both variants saw the same batches from the same seed (and the
    same initial draw, where their weights have the same shapes; where they do not, see
    :func:`compare_unpaired`).
    Their mean counts as *shown* when there are at least 3 seeds, every value is finite, and the mean is
    further from 0 than the two-sided 5% critical value of Student's t (``seeds - 1`` degrees of freedom)
    times its standard error ``sd / sqrt(seeds)``; otherwise it is "not shown at this scale" (it may still
    be there, at more seeds or a larger scale). ``a`` and ``b`` may be 0/1 outcomes (solved or not): the
    same test then compares the share of seeds each variant solved. Where every difference is the same
    (no spread, e.g. 3 of 3 solved against 0 of 3), the t-test cannot read it and the exact sign test
    decides instead: shown from 6 seeds all one way (2 / 2^6 < 0.05), never at 3 to 5. Taught in the chapter "Attention in
    today's open models" (and used in "Multi-head latent attention").
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"compare_seeds: a and b need one value per seed, the same seeds: got {len(a)} and {len(b)}")
    differences = tuple(float(y) - float(x) for x, y in zip(a, b))
    mean = statistics.mean(differences)
    finite = all(math.isfinite(d) for d in differences)
    if len(differences) < 3 or not finite:
        return SeedComparison(differences, mean, math.nan, False)
    # With no spread (every seed differs by the same amount, as 0/1 outcomes can), smallest_shown is the exact
    # two-sided sign test's: n seeds all one way have probability 2 / 2^n by chance.
    standard_error = statistics.stdev(differences) / math.sqrt(len(differences))
    return _read(SeedComparison(differences, mean, standard_error, False))


def compare_unpaired(a: list[float], b: list[float]) -> SeedComparison:
    """Read ``mean(b) - mean(a)`` against each variant's own spread over its seeds, without pairing them:
    Welch's t-test at the 5% level (two-sided). For variants whose seeds share their batches but not all
    their first weights (their shapes differ), the paired test of :func:`compare_seeds` stays valid (less
    shared noise only makes it less sensitive); the pages read such pairs both ways and count a difference
    as shown only when both tests show it, a stricter convention. The standard error is ``sqrt(var_a / n_a + var_b / n_b)``,
    the degrees of freedom Welch-Satterthwaite's, rounded down to the table's next entry (stricter). Shown
    needs at least 3 seeds each, finite values and some spread. ``differences`` holds ``b_s - a_s`` seed by
    seed for printing. Taught in the chapter "Attention in today's open models" (and used in "Multi-head
    latent attention").
    """
    if len(a) < 1 or len(b) < 1:
        raise ValueError(f"compare_unpaired: a and b need one value per seed each: got {len(a)} and {len(b)}")
    a, b = [float(x) for x in a], [float(y) for y in b]
    differences = tuple(y - x for x, y in zip(a, b))
    mean = statistics.mean(b) - statistics.mean(a)
    if min(len(a), len(b)) < 3 or not all(math.isfinite(v) for v in a + b):
        return SeedComparison(differences, mean, math.nan, False, paired=False)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    standard_error = math.sqrt(va + vb)
    if standard_error == 0:  # no spread in either variant: no test (smallest_shown is infinite)
        return SeedComparison(differences, mean, 0.0, False, degrees=float(len(a) + len(b) - 2), paired=False)
    degrees = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return _read(SeedComparison(differences, mean, standard_error, False, degrees=degrees, paired=False))
