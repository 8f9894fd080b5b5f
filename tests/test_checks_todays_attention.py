"""Exercise 18's check (a softmax with a learned sink): its learners for the table (``checks_learners.py``),
right ones written differently and the usual slips, each of which the check must name."""

import torch
from checks_learners import REFERENCES, add

from lessons_src.checks import check_softmax_with_sink

CHECK = "check_softmax_with_sink"


def reference(scores, sinks):
    sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:3], 1)  # (B, H, L_q, 1)
    return torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]


REFERENCES[CHECK] = (reference,)


@add(CHECK)
def with_logsumexp_in_float64(scores, sinks):
    s = scores.double()
    sink = sinks.double().view(1, -1, 1, 1).expand(*s.shape[:3], 1)
    lse = torch.logsumexp(torch.cat([s, sink], -1), dim=-1, keepdim=True)
    return (s - lse).exp().to(scores.dtype)


@add(CHECK)
def with_the_maximum_by_hand(scores, sinks):
    sink = sinks[None, :, None, None]
    m = torch.maximum(scores.amax(-1, keepdim=True), sink)  # (B, H, L_q, 1): finite thanks to the sink
    e = (scores - m).exp()
    return e / ((sink - m).exp() + e.sum(-1, keepdim=True))


@add(CHECK)
def sink_first_then_drop_it(scores, sinks):
    sink = sinks.reshape(1, -1, 1, 1).expand(scores.shape[0], -1, scores.shape[2], 1)
    return torch.softmax(torch.cat([sink, scores], dim=-1), dim=-1)[..., 1:]


@add(CHECK, mistake="the sink takes no weight")
def plain_softmax(scores, sinks):
    return scores.softmax(-1)


@add(CHECK, mistake="the sink's column is returned")
def keeps_the_sink(scores, sinks):
    sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
    return torch.cat([scores, sink], dim=-1).softmax(dim=-1)


@add(CHECK, mistake="the last column dropped")
def drops_the_wrong_column(scores, sinks):
    sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
    return torch.cat([sink, scores], dim=-1).softmax(dim=-1)[..., :-1]


@add(CHECK, mistake="the sink takes no weight")
def renormalised(scores, sinks):
    w = reference(scores, sinks)
    return w / w.sum(-1, keepdim=True)


@add(CHECK, mistake="but not from the sink")
def sink_not_shifted(scores, sinks):
    m = scores.amax(-1, keepdim=True).clamp_min(-1e30)
    e = (scores - m).exp()
    return e / (sinks.view(1, -1, 1, 1).exp() + e.sum(-1, keepdim=True))


@add(CHECK, mistake="the raw sink logit")
def raw_logit(scores, sinks):
    m = scores.amax(-1, keepdim=True).clamp_min(-1e30)
    e = (scores - m).exp()
    return e / (sinks.view(1, -1, 1, 1) + e.sum(-1, keepdim=True))


@add(CHECK, mistake="overflow")
def no_maximum(scores, sinks):
    e = scores.exp()
    return e / (sinks.view(1, -1, 1, 1).exp() + e.sum(-1, keepdim=True))


@add(CHECK, mistake="the sink takes no weight")
def sink_added_to_scores(scores, sinks):
    return (scores + sinks.view(1, -1, 1, 1)).softmax(-1)


@add(CHECK, mistake="over the queries")
def over_the_queries(scores, sinks):
    sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:2], 1, scores.shape[3])
    return torch.cat([scores, sink], dim=-2).softmax(dim=-2)[..., :-1, :]


@add(CHECK, mistake="float64")
def in_float64(scores, sinks):
    return reference(scores.double(), sinks.double())


def test_the_reference_is_the_package_function_and_the_check_passes_it():
    from lessons_src import softmax_with_sink

    scores, sinks = torch.randn(2, 3, 4, 5), torch.randn(3)
    torch.testing.assert_close(reference(scores, sinks), softmax_with_sink(scores, sinks))
    assert check_softmax_with_sink(reference)


@add(CHECK, mistake="the rows are renormalised after it")
def renormalised_after_the_sink(scores, sinks):
    """A blind learner's form: the sink in the denominator, then every row divided by its sum again."""
    e = torch.exp(scores - scores.amax(-1, keepdim=True).clamp_min(-1e30))
    weights = e / (torch.exp(sinks.view(1, -1, 1, 1) - scores.amax(-1, keepdim=True).clamp_min(-1e30))
                   + e.sum(-1, keepdim=True))
    return weights / weights.sum(-1, keepdim=True).clamp_min(1e-30)


@add(CHECK, mistake="the raw sink logit is added to the denominator")
def raw_logit_without_a_maximum(scores, sinks):
    e = torch.exp(scores)
    return e / (sinks.view(1, -1, 1, 1) + e.sum(-1, keepdim=True))
