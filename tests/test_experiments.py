"""The trigger task, its baselines, the paired trainer, and the rule that reads a comparison over seeds."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch
import torch.nn.functional as F

from lessons_src import DecoderConfig, DecoderLM
from lessons_src.experiments import (
    BOS,
    HF_LLAMA_SWITCHES,
    TRIGGER,
    TRIGGER_VOCAB,
    answer_loss,
    compare_seeds,
    compare_unpaired,
    position_only_loss,
    reach_loss,
    sign_test,
    student_t_critical,
    train_trigger,
    trigger_batch,
)


def _batch(first: str = "bos", n: int = 2000, length: int = 16):
    return trigger_batch(n, length, torch.Generator().manual_seed(0), first)


@pytest.mark.parametrize("first", ["bos", "letter"])
def test_the_trigger_task_answers_whether_the_trigger_has_appeared(first):
    tokens, answers = _batch(first)
    assert tokens.shape == answers.shape == (2000, 17) and tokens.dtype == answers.dtype == torch.long
    triggers = (tokens == TRIGGER).sum(1)
    assert set(triggers.tolist()) == {0, 1}, "one trigger or none in each sequence"
    assert 0.45 < triggers.float().mean() < 0.55, "a trigger in about half the sequences"
    assert not (tokens[:, 0] == TRIGGER).any(), "never a trigger at position 0"
    for row, answer in zip(tokens[:50], answers[:50]):
        seen = [int(TRIGGER in row[: i + 1].tolist()) for i in range(17)]
        assert answer.tolist() == seen
    if first == "bos":
        assert (tokens[:, 0] == BOS).all()
    else:  # the control: a random letter first, so position 0 holds nothing a head could find by content
        assert ((tokens[:, 0] >= 2) & (tokens[:, 0] <= 9)).all() and len(set(tokens[:, 0].tolist())) == 8


def test_the_baselines_are_the_best_answers_of_their_kind():
    tokens, answers = _batch()
    by_position = position_only_loss(answers)
    share = answers.double().mean(0).clamp(1e-9, 1 - 1e-9)  # (17,): the best constant answer at each position
    expected = F.binary_cross_entropy(share.expand(answers.shape), answers.double()).item()
    assert by_position == pytest.approx(expected, abs=1e-9)
    assert 0.4 < by_position < math.log(2)
    # Seeing further can only help; seeing the whole sequence answers every position with certainty.
    losses = [reach_loss(tokens, answers, reach) for reach in (1, 3, 6, 12, 16)]
    assert all(a > b for a, b in zip(losses, losses[1:])) and losses[0] < by_position
    assert losses[-1] < 1e-6


def test_the_reach_baseline_is_the_loss_of_the_ideal_windowed_answer():
    tokens, answers = _batch(n=400)
    reach = 4
    # Build the ideal answer directly: certain where the trigger lies in the last `reach` + 1 keys, else the
    # share of 1s at that position among the sequences whose trigger is not in the reach.
    n, L = tokens.shape
    seen = torch.zeros(n, L, dtype=torch.bool)
    for i in range(L):
        seen[:, i] = (tokens[:, max(0, i - reach): i + 1] == TRIGGER).any(1)
    p = torch.empty(n, L, dtype=torch.float64)
    for i in range(L):
        p[seen[:, i], i] = 1.0
        blind = ~seen[:, i]
        p[blind, i] = answers[blind, i].double().mean() if blind.any() else 0.0
    expected = F.binary_cross_entropy(p.clamp(1e-9, 1 - 1e-9), answers.double()).item()
    assert reach_loss(tokens, answers, reach) == pytest.approx(expected, abs=1e-9)
    # Without its position: once key 0 is out of reach (i > reach), every blind position gets one answer.
    far = torch.arange(L) > reach
    pooled = answers[:, far][~seen[:, far]].double().mean()
    p[:, far] = torch.where(seen[:, far], 1.0, pooled)
    expected_blind = F.binary_cross_entropy(p.clamp(1e-9, 1 - 1e-9), answers.double()).item()
    assert reach_loss(tokens, answers, reach, knows_position=False) == pytest.approx(expected_blind, abs=1e-9)
    assert expected_blind > expected, "not knowing the position can only cost"
    with pytest.raises(TypeError, match="knows_position must be True or False"):
        reach_loss(tokens, answers, reach, knows_position="no")


def test_the_trainer_pairs_its_variants_and_a_mechanism_decides_the_task():
    tokens, answers = trigger_batch(256, 24, torch.Generator().manual_seed(1000))
    variants = {"global": {}, "same again": {}, "sliding": dict(sliding_window=4)}
    models, losses, curves = train_trigger(variants, 0, 0.03, 60, length=24, num_layers=2, test=(tokens, answers))
    # The same switches from the same seed on the same batches: the same model, bit for bit.
    for a, b in zip(models["global"].parameters(), models["same again"].parameters()):
        assert torch.equal(a, b)
    assert losses["global"] == losses["same again"] and curves["global"] == curves["same again"]
    # Two sliding layers of width 4 see 6 keys back: never better than the ideal model with that reach.
    assert losses["sliding"] > reach_loss(tokens, answers, 6) - 0.01
    assert losses["global"] < reach_loss(tokens, answers, 6)
    with torch.no_grad():
        assert answer_loss(models["global"], tokens, answers).item() == pytest.approx(losses["global"])
    # The curve starts at the untrained model's loss on the first training batch, and ends lower.
    torch.manual_seed(0)
    untrained = DecoderLM(DecoderConfig(vocab_size=TRIGGER_VOCAB, d_model=16, num_heads=2, num_layers=2, max_len=25,
                                        **HF_LLAMA_SWITCHES))
    first_batch = trigger_batch(32, 24, torch.Generator().manual_seed(0))
    with torch.no_grad():
        first_loss = answer_loss(untrained, *first_batch).item()
    assert all(len(curves[name]) == 60 for name in variants), "one training loss per step"
    assert curves["global"][0] == pytest.approx(first_loss), "the first step's loss is the untrained model's on batch 1"
    assert all(curves[name][-1] < curves[name][0] for name in variants), "these runs all learn"


def test_the_trainers_curve_keeps_a_blow_up():
    _, losses, curves = train_trigger({"plain": {}}, 0, 1e30, 3)
    last = curves["plain"][-1]
    assert math.isnan(last) or last > 1e3, f"a learning rate of 1e30 must blow up: {curves}"


def test_compare_seeds_is_a_paired_t_test_at_five_percent():
    shown = compare_seeds([1.00, 1.01, 1.02], [0.50, 0.52, 0.49])
    assert shown.shown and shown.mean == pytest.approx(-0.5067, abs=1e-4)
    assert shown.standard_error == pytest.approx(statistics.stdev([-0.5, -0.49, -0.53]) / math.sqrt(3))
    assert "shown" in str(shown) and "not shown" not in str(shown)
    # Paired: the seeds differ a lot from each other, the differences hardly at all (the old range rule missed it).
    assert compare_seeds([0.0, 0.3, 0.6], [0.1, 0.41, 0.69]).shown
    # At the edge: t = mean / SE against 4.303 for 3 seeds (2 degrees of freedom).
    differences = [0.1, 0.2, 0.3]
    t = statistics.mean(differences) / (statistics.stdev(differences) / math.sqrt(3))  # 3.46: below 4.303
    assert t < 4.303 and not compare_seeds([0, 0, 0], differences).shown
    assert compare_seeds([0, 0, 0, 0], [0.1, 0.2, 0.3, 0.25]).shown  # t = 4.9 > 3.182 with 4 seeds
    # Beyond the seeds' values on average, but one seed goes the other way (the lucky-seed case).
    lucky = compare_seeds([0.56, 0.54, 0.57, 0.10], [0.01, 0.02, 0.00, 0.53])
    assert not lucky.shown and "not shown at this scale" in str(lucky)
    # Outcomes: solved (1) or not (0) per seed, compared as shares.
    assert compare_seeds([0] * 8, [1, 1, 1, 0, 1, 1, 1, 1]).shown
    assert not compare_seeds([0, 0, 0, 0], [1, 0, 1, 0]).shown
    # Two seeds never show anything; nor does a run that diverged.
    assert not compare_seeds([1.0, 1.0], [0.0, 0.0]).shown
    assert not compare_seeds([1.0, 1.0, 1.0], [0.0, 0.0, math.nan]).shown
    # No spread (every seed differs by the same amount, as 0/1 outcomes can): the exact sign test decides,
    # 3 of 3 one way has probability 2/8 by chance, 6 of 6 has 2/64.
    assert not compare_seeds([1.0, 1.0, 1.0], [0.0, 0.0, 0.0]).shown
    assert not compare_seeds([0] * 5, [1] * 5).shown and compare_seeds([0] * 6, [1] * 6).shown
    assert not compare_seeds([0.5] * 8, [0.5] * 8).shown


def test_compare_unpaired_is_welchs_t_test_on_each_variants_own_spread():
    a, b = [1.194, 1.197, 1.198], [1.185, 1.191, 1.190]  # code-llama and code-llama-gate, held-out loss
    unpaired = compare_unpaired(a, b)
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 3
    assert unpaired.standard_error == pytest.approx(math.sqrt(va + vb))
    assert unpaired.degrees == pytest.approx((va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2))
    t = unpaired.mean / unpaired.standard_error  # -3.6 at 3.6 degrees of freedom: against 3.182 (3, stricter)
    assert unpaired.shown == (abs(t) > 3.182) and unpaired.smallest_shown == pytest.approx(3.182 * unpaired.standard_error)
    assert "unpaired, Welch's t" in str(unpaired)
    assert f"{unpaired.degrees:.2f} degrees of freedom, read at 3)" in str(unpaired)  # the row the verdict used
    many = compare_unpaired([1.0, 1.1, 1.2] * 12, [1.05, 1.3, 1.2] * 12)  # about 67 degrees: the normal's 1.96
    assert "read at the normal)" in str(many) and many.smallest_shown == pytest.approx(1.96 * many.standard_error)
    tight = compare_seeds([1.0, 1.1, 1.2], [1.0381, 1.1385, 1.2374])  # a standard error that rounds to 0.000
    assert "± 0.0003 (seed by seed" in str(tight)
    # Seeds that scatter as much as the difference: the paired test shows it (the differences agree), Welch's not.
    plain, other = [1.00, 1.02, 1.04], [1.011, 1.029, 1.052]
    assert compare_seeds(plain, other).shown and not compare_unpaired(plain, other).shown
    # A clear gap with little spread is shown unpaired too; fewer than 3 seeds, or a nan, never.
    assert compare_unpaired([1.0, 1.01, 1.02], [1.5, 1.52, 1.49]).shown
    assert not compare_unpaired([1.0, 1.0], [2.0, 2.0]).shown and not compare_unpaired([1, 2, 3], [1, 2, math.nan]).shown
    assert not compare_unpaired([1.0] * 3, [2.0] * 3).shown  # no spread: no test
    # Where no test can run it still says it is the unpaired reading, and why it shows nothing.
    few, flat = compare_unpaired([1.0, 1.0], [2.0, 2.0]), compare_unpaired([1.0] * 3, [2.0] * 3)
    assert not few.paired and "unpaired; Welch's t needs 3 finite values each" in str(few) and math.isnan(few.smallest_shown)
    assert "unpaired; no spread" in str(flat) and flat.smallest_shown == math.inf
    with pytest.raises(ValueError, match="compare_unpaired: a and b need one value per seed"):
        compare_unpaired([], [1.0])


def test_smallest_shown_is_the_edge_of_the_verdict():
    """The smallest mean difference a comparison reads as shown at its spread: just above it is shown,
    just below it is not, with the same spread."""
    edge = compare_seeds([0, 0, 0], [0.1, 0.2, 0.3]).smallest_shown
    assert edge == pytest.approx(4.303 * 0.1 / math.sqrt(3))
    assert compare_seeds([0, 0, 0], [edge - 0.1 + 0.001 + d for d in (0.0, 0.1, 0.2)]).shown
    assert not compare_seeds([0, 0, 0], [edge - 0.1 - 0.001 + d for d in (0.0, 0.1, 0.2)]).shown
    assert compare_seeds([0, 0, 0, 0], [0.1, 0.2, 0.3, 0.25]).smallest_shown == pytest.approx(
        3.182 * statistics.stdev([0.1, 0.2, 0.3, 0.25]) / 2)
    assert compare_seeds([1.0] * 3, [0.0] * 3).smallest_shown == math.inf  # no spread, 3 seeds: never shown
    assert compare_seeds([1.0] * 6, [0.0] * 6).smallest_shown == 0.0  # 6 seeds one way: the sign test shows it
    assert compare_seeds([1.0] * 6, [1.0] * 6).smallest_shown == math.inf  # no seed differs: nothing to show
    assert math.isnan(compare_seeds([1.0, 1.0], [0.0, 0.0]).smallest_shown)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: trigger_batch(0), "n must be a positive int"),
        (lambda: trigger_batch(4, first="eos"), "first must be one of"),
        (lambda: reach_loss(*_batch(n=8), 0), "reach must be a positive int"),
        (lambda: train_trigger({"plain": {}}, 0, 0.0, 5), "lr must be a finite number > 0"),
        (lambda: train_trigger({"plain": {}}, 0, 0.1, 0), "steps must be a positive int"),
        (lambda: compare_seeds([1.0, 2.0], [1.0]), "one value per seed"),
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_every_verdict_is_its_mean_against_smallest_shown():
    generator = random.Random(0)
    for _ in range(300):
        n = generator.choice([3, 4, 6, 8])
        a = [generator.gauss(1, 0.05) for _ in range(n)]
        b = [x + generator.gauss(0.03, 0.05) for x in a]
        for comparison in (compare_seeds(a, b), compare_unpaired(a, b)):
            assert comparison.shown == (abs(comparison.mean) > comparison.smallest_shown), str(comparison)


def test_student_t_critical_is_the_exact_two_sided_five_percent_point():
    # The published table (three decimals) at whole degrees of freedom, and the normal's 1.960 far out.
    for degrees, value in {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 10: 2.228, 30: 2.042}.items():
        assert student_t_critical(degrees) == pytest.approx(value, abs=6e-4), degrees
    assert student_t_critical(1e6) == pytest.approx(1.960, abs=1e-3)
    # Between whole degrees it lies between their values: Welch's 3.6 falls between 3 and 4.
    assert 2.776 < student_t_critical(3.6) < 3.182
    for bad in (0, -1.0, math.inf, math.nan, True, "3"):
        with pytest.raises(ValueError, match="degrees must be a finite number > 0"):
            student_t_critical(bad)


def test_sign_test_is_the_exact_binomial_tail_on_the_seeds_that_differ():
    assert sign_test([0] * 5, [1] * 5) == pytest.approx(0.0625), "5 of 5 one way: 2 / 2^5"
    assert sign_test([0] * 7, [1] * 7) == pytest.approx(2 / 2 ** 7)
    six_of_twelve = [1.0] * 6 + [0.0] * 6
    assert sign_test([0.0] * 12, six_of_twelve) == pytest.approx(2 / 2 ** 6), "ties (0 against 0) are dropped"
    assert sign_test([0.5] * 12, [0.9] * 6 + [0.1] * 6) == 1.0, "six up, six down: no evidence"
    expected = 2 * sum(math.comb(12, i) for i in range(6)) / 2 ** 12  # 7 up, 5 down
    assert sign_test([0.0] * 12, [1.0] * 7 + [-1.0] * 5) == pytest.approx(expected)
    assert sign_test([1.0, 2.0], [1.0, 2.0]) == 1.0, "no seed differs"
    # The same verdict whichever way round, and blind to the size of a difference.
    assert sign_test([1, 2, 3], [2, 3, 4]) == sign_test([2, 3, 4], [1, 2, 3]) == sign_test([1, 2, 3], [9, 9, 9])
    with pytest.raises(ValueError, match="one value per seed"):
        sign_test([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        sign_test([1.0], [math.nan])
