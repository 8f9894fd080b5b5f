"""Exercise 16's check (RMSNorm): its learners for the table (``checks_learners.py``), right ones written
differently and the usual slips, each of which the check must name."""

import torch
import torch.nn.functional as F
from checks_learners import REFERENCES, add
from torch import nn

from lessons_src import SwiGLU
from lessons_src.checks import check_rms_norm, check_swiglu

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


# -- part 2: SwiGLU ------------------------------------------------------------------------------------

SWIGLU = "check_swiglu"


def swiglu_reference(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


REFERENCES[SWIGLU] = (swiglu_reference,)


@add(SWIGLU)
def swiglu_by_linear(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


@add(SWIGLU)
def swiglu_fused_gate_up(x, w_gate, w_up, w_down):
    # Some checkpoints store gate and up as one (2 * hidden, D) matrix: split the result in two.
    gate, up = (x @ torch.cat([w_gate, w_up]).T).chunk(2, dim=-1)
    return (gate * torch.sigmoid(gate) * up) @ w_down.T


@add(SWIGLU)
def swiglu_through_the_module(x, w_gate, w_up, w_down):
    module = SwiGLU(x.size(-1), w_gate.size(0))
    with torch.no_grad():
        for linear, w in ((module.gate_proj, w_gate), (module.up_proj, w_up), (module.down_proj, w_down)):
            linear.weight.copy_(w)
        return module(x)


@add(SWIGLU, mistake="the gate and up projections are swapped")
def gate_up_swapped(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_up.T) * (x @ w_gate.T)) @ w_down.T


@add(SWIGLU, mistake="SiLU is applied to the product")
def silu_on_product(x, w_gate, w_up, w_down):
    return F.silu((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


@add(SWIGLU, mistake="after the down projection")
def silu_after_down(x, w_gate, w_up, w_down):
    return F.silu(((x @ w_gate.T) * (x @ w_up.T)) @ w_down.T)


@add(SWIGLU, mistake="SiLU is applied to both branches")
def silu_on_both(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * F.silu(x @ w_up.T)) @ w_down.T


@add(SWIGLU, mistake="ReLU instead of SiLU")
def reglu(x, w_gate, w_up, w_down):
    return (F.relu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


@add(SWIGLU, mistake="GELU instead of SiLU")
def geglu(x, w_gate, w_up, w_down):
    return (F.gelu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


@add(SWIGLU, mistake="sigmoid instead of SiLU")
def glu(x, w_gate, w_up, w_down):
    return (torch.sigmoid(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


@add(SWIGLU, mistake="the up branch is missing")
def no_gate(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate.T) @ w_down.T


@add(SWIGLU, mistake="added, not multiplied")
def branches_added(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) + (x @ w_up.T)) @ w_down.T


@add(SWIGLU, mistake="a weight is used without its transpose")
def not_transposed(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


@add(SWIGLU, mistake="the down projection is missing")
def hidden_returned(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate.T) * (x @ w_up.T)  # the down projection forgotten: (..., hidden)


def test_swiglu_reference_equals_the_module():
    assert check_swiglu(swiglu_through_the_module)
