"""Exercise 16's check (RMSNorm): its learners for the table (``checks_learners.py``), right ones written
differently and the usual slips, each of which the check must name."""

import torch
from checks_learners import REFERENCES, add
from torch import nn

from lessons_src.checks import check_rms_norm

CHECK = "check_rms_norm"


def reference(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


REFERENCES[CHECK] = (reference,)


@add(CHECK)
def with_rsqrt_in_float64(x, weight, eps=1e-6):
    x64 = x.double()
    return (x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + eps) * weight.double()).to(x.dtype)


@add(CHECK)
def through_torch(x, weight, eps=1e-6):
    norm = nn.RMSNorm(x.size(-1), eps=eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm(x).detach()


@add(CHECK)
def with_vector_norm(x, weight, eps=1e-6):
    d = x.size(-1)
    return x / torch.sqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2 / d + eps) * weight


@add(CHECK, mistake="that is LayerNorm")
def centred(x, weight, eps=1e-6):
    y = x - x.mean(-1, keepdim=True)
    return y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + eps) * weight


@add(CHECK, mistake="standard deviation")
def by_std(x, weight, eps=1e-6):
    return x / (x.std(-1, keepdim=True) + eps) * weight


@add(CHECK, mistake="eps is added outside the square root")
def eps_outside(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight


@add(CHECK, mistake="summed, not averaged")
def summed(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * weight


@add(CHECK, mistake="the square root is missing")
def no_root(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps) * weight


@add(CHECK, mistake="the weight is not applied")
def no_weight(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@add(CHECK, mistake="the wrong dim")
def over_rows(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * weight


@add(CHECK, mistake="has shape")
def no_keepdim(x, weight, eps=1e-6):
    return (x.pow(2).mean(-1) + eps).sqrt() * weight.sum()


def test_the_reference_and_the_module_pass():
    assert check_rms_norm(reference)
