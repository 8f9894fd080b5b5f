"""The named steps of every check's reference (``lessons_src/checks/_steps.py``) and the search over them.

Every check module lists ``STEPPED``: ``(cases, reference, steps)``, the reference written as the chapter's
steps; on every case it must equal the check's reference and take at least two named steps. The search
names a learner's mistake as a change to one step (or two), says "probably" when the change explains only
some cases, and finds nothing for a reference without steps.
"""

import importlib
import math
import pkgutil

import pytest
import torch

import lessons_src.checks as checks
from lessons_src.checks._framework import Case, Session, _same, run_check
from lessons_src.checks._steps import explain_error, record, search, step

MODULES = [importlib.import_module(f"lessons_src.checks.{m.name}") for m in pkgutil.iter_modules(checks.__path__)
           if not m.name.startswith("_")]
STEPPED = [(m.__name__.rsplit(".", 1)[1], i, entry) for m in MODULES for i, entry in enumerate(getattr(m, "STEPPED", []))]


def test_every_check_module_writes_its_reference_as_steps():
    missing = [m.__name__ for m in MODULES if not getattr(m, "STEPPED", None)]
    assert not missing, f"check modules without STEPPED (their references as named steps): {missing}"


@pytest.mark.parametrize("module, index, entry", STEPPED, ids=[f"{m}-{i}" for m, i, _ in STEPPED])
def test_the_steps_equal_the_reference_on_every_case(module, index, entry):
    cases, reference, stepped = entry
    for case in cases():
        expected = reference(*case.args.values(), **case.kwargs)
        result, calls, _ = record(stepped, case.args, case.kwargs)
        assert _same(result, expected, 1e-5), f"{module}: the steps differ from the reference on {case.description}"
        names = {c.name for c in calls}
        assert len(names) >= 2, f"{module}: {case.description} takes {len(names)} named step(s): {names}"


# -- the search on a small reference of its own ------------------------------------------------------------


def _mean_attention(x, w):
    """The mean over the queries of a softmax of x @ w: three steps."""
    scores = step("scores", torch.matmul, x, w.transpose(-2, -1), axes=("query", "key"))
    weights = step("softmax over the keys", torch.softmax, scores, dim=-1, axes=("query", "key"))
    return step("mean over the queries", torch.mean, weights, dim=-2, axes=("query", "key"))


def _cases():
    g = torch.Generator().manual_seed(0)
    return [Case(f"case {n}", {"x": torch.randn(n, 4, generator=g), "w": torch.randn(n + 2, 4, generator=g)},
                 info={"d": 4}) for n in (3, 5)]


def _check(fn):
    session = Session("check_mean_attention")
    return run_check(session, fn, _cases(), _mean_attention, ("means",))


def test_a_sum_for_a_mean_is_named_with_the_count():
    failure = _check(lambda x, w: torch.softmax(x @ w.T, dim=-1).sum(dim=-2))
    first = failure.summary
    assert "at step 'mean over the queries': yours is a sum where the step takes a mean" in first, first
    assert "3 = the number of queries" in first, first
    assert "probably" not in first, first


def test_another_axis_and_a_transposed_operand_are_named():
    failure = _check(lambda x, w: torch.softmax(x @ w.T, dim=-2).mean(dim=-2))
    assert "at step 'softmax over the keys': it is taken over the queries (dim -2) instead of the keys (dim -1)" \
        in failure.summary, failure.summary
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    case = Case("square", {"x": x, "w": w})
    got = torch.softmax(x @ w, dim=-1).mean(dim=-2)
    found = search(_mean_attention, case, got, _mean_attention(x, w), 1e-5)
    assert found is not None and "`w` is used without its transpose" in found.says(), found


def test_two_changes_at_once_are_found_when_one_alone_does_not_match():
    failure = _check(lambda x, w: torch.softmax(x @ w.T, dim=-2).sum(dim=-2))
    assert "at steps 'softmax over the keys' and 'mean over the queries'" in failure.summary, failure.summary


def test_a_change_that_explains_some_cases_is_probably_and_one_of_many_is_nothing():
    def sometimes(x, w):  # the sum on the cases of 3 and 5 queries, something else on the third
        weights = torch.softmax(x @ w.T, dim=-1)
        return weights.sum(dim=-2) if x.size(0) in (3, 5) else weights.mean(dim=-2) * 1.5
    g = torch.Generator().manual_seed(0)
    cases = [Case(f"case {n}", {"x": torch.randn(n, 4, generator=g), "w": torch.randn(n + 2, 4, generator=g)})
             for n in (3, 5, 6)]
    failure = run_check(Session("check_mean_attention"), sometimes, cases, _mean_attention, ("means",))
    assert failure.summary.startswith("means differs from the reference probably at step 'mean over the queries'"), \
        failure.summary
    assert "explains 2 of the 3 cases" in failure.summary, failure.summary
    once = run_check(Session("check_mean_attention"), lambda x, w: sometimes(x, w) if x.size(0) == 3 else 1.5 * x[0, 0],
                     cases, _mean_attention, ("means",))
    assert "at step" not in once.summary, once.summary  # one case of three: no diagnosis


def test_no_steps_no_search_and_the_old_diagnosis_stays():
    session = Session("check_plain")

    def plain(x, w):
        return torch.softmax(x @ w.T, dim=-1).mean(dim=-2)

    failure = run_check(session, lambda x, w: 2 * plain(x, w), _cases(), plain, ("means",))
    assert "times 2" in failure.summary and "at step" not in failure.summary, failure.summary


def test_a_result_no_change_explains_keeps_the_diagnosis():
    failure = _check(lambda x, w: torch.softmax(x @ w.T, dim=-1).mean(dim=-2) + math.pi / 100)
    assert "at step" not in failure.summary and "plus" in failure.summary, failure.summary


def test_a_product_shape_error_names_the_operand_not_transposed():
    failure = _check(lambda x, w: torch.softmax(x @ w, dim=-1).mean(dim=-2))
    assert failure.summary.startswith("at step 'scores': `w` is used without its transpose:"), failure.summary
    assert "mat1 and mat2 shapes cannot be multiplied" in failure.summary, failure.summary
    g = torch.Generator().manual_seed(2)  # no search left (an exhausted budget): the shapes are read instead
    case = Case("x (3, 4), w (5, 4)", {"x": torch.randn(3, 4, generator=g), "w": torch.randn(5, 4, generator=g)})
    try:
        torch.softmax(case.args["x"] @ case.args["w"], dim=-1)
    except RuntimeError as error:
        read = explain_error(_mean_attention, case, error)
    assert read == ("at step 'scores': `w` is used without its transpose: the product runs over 4 entries, so that "
                    "operand must be (4, 5) in its last two dims"), read


def _window(i, j, window):
    """Key j may be seen from query i: j <= i and i - j < window (two comparisons and an and)."""
    distance = step("distance i - j", torch.sub, i, j)
    causal = step("causal: j <= i", torch.ge, distance, 0)
    near = step("within the window", torch.lt, distance, window)
    return step("both conditions", torch.logical_and, causal, near)


def test_mask_steps_name_a_comparison_and_a_join():
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    case = Case("six positions, window 3", {"i": i, "j": j, "window": 3})
    right = _window(i, j, 3)
    for got, words in (((i - j >= 0) & (i - j <= 3), "at step 'within the window': the comparison is `<=` where "
                                                      "the step has `<`"),
                       ((i - j >= 0) | (i - j < 3), "at step 'both conditions': the two conditions are joined with `|`"),
                       (i - j < 3, "at step 'both conditions': the condition 'causal: j <= i' is left out")):
        found = search(_window, case, got, right, 0.0)
        assert found is not None and words in found.says(), (words, found and found.says())


def test_the_expand_hint_says_repeat_only_where_copies_make_the_shape():
    from lessons_src.checks._framework import describe_error
    hints = []
    for target in (8, 3):
        try:
            torch.zeros(1, 2, 1).expand(2, target, 3)
        except RuntimeError as error:
            hints.append(describe_error(error)[1])
    assert "repeat_interleave(4, dim=1)" in hints[0], hints[0]
    assert "repeat" not in hints[1] and "do not line up" in hints[1], hints[1]
