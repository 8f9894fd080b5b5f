"""Encoder and decoder blocks against PyTorch's layers, plus causality and masking properties."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from lessons_src.encoder import DecoderBlock, Encoder, EncoderBlock, FeedForward, count_parameters, layer_norm
from lessons_src.masks import causal_mask, padding_mask

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _randomize(module: nn.Module, seed: int) -> None:
    """Noise in every parameter: PyTorch's zero biases, unit LayerNorms and deep-copied (identical)
    layers would otherwise hide a lost bias, a skipped norm or layers copied in the wrong order."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3 + (1.0 if p.dim() == 1 else 0.0) * 0.2)


@pytest.mark.parametrize("shape", [(7,), (3, 16), (2, 5, 32), (2, 3, 4, 8)])
@pytest.mark.parametrize("seed", [0, 1])
def test_layer_norm_matches_torch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = 3 * torch.randn(shape, generator=g, dtype=torch.float64) + 1  # far from unit scale
    norm = nn.LayerNorm(shape[-1], dtype=torch.float64)
    _randomize(norm, seed)  # gamma and beta away from 1 and 0
    ours = x.clone().requires_grad_(True)
    theirs = x.clone().requires_grad_(True)
    out = layer_norm(ours, norm.weight, norm.bias)
    assert_close(out, norm(theirs), **TOL)
    assert_close(out, F.layer_norm(x, (shape[-1],), norm.weight, norm.bias, eps=1e-5), **TOL)
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    out.backward(grad)
    norm(theirs).backward(grad)
    assert_close(ours.grad, theirs.grad, **TOL)
    assert_close(layer_norm(x, norm.weight, norm.bias, eps=0.1), F.layer_norm(x, (shape[-1],), norm.weight, norm.bias, eps=0.1), **TOL)


def test_layer_norm_errors():
    with pytest.raises(ValueError, match=r"layer_norm: bias must be \(D,\) = \(8,\) for x \(2, 8\), got \(4,\)"):
        layer_norm(torch.randn(2, 8), torch.ones(8), torch.zeros(4))


def _torch_layer(D=16, H=4, d_ff=32, norm_first=False, activation="relu", seed=0, **kw):
    layer = nn.TransformerEncoderLayer(
        D, H, d_ff, dropout=0.1, activation=activation, norm_first=norm_first, batch_first=True, **kw
    )
    _randomize(layer, seed)
    return layer.eval()


def test_feed_forward_is_the_formula():
    torch.manual_seed(0)
    ff = FeedForward(6, 10, activation="gelu")
    x = torch.randn(2, 3, 6)
    expected = F.gelu(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T + ff.linear2.bias
    assert_close(ff(x), expected, **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", F.gelu, nn.ReLU()])
@pytest.mark.parametrize("seed", [0, 1])
def test_encoder_block_matches_torch(norm_first, activation, seed):
    layer = _torch_layer(norm_first=norm_first, activation=activation, seed=seed)
    ours = EncoderBlock.from_torch(layer)
    assert not ours.training and ours.norm_first == norm_first
    x = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(seed + 10))
    assert_close(ours(x), layer(x), **TOL)  # grad enabled: PyTorch's plain Python path
    with torch.no_grad():
        assert_close(ours(x), layer(x), **TOL)  # eval + no_grad: PyTorch's fused fast path


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_with_padding_matches_torch(norm_first):
    layer = _torch_layer(norm_first=norm_first, seed=2)
    ours = EncoderBlock.from_torch(layer)
    x = torch.randn(3, 6, 16, generator=torch.Generator().manual_seed(3))
    keep = padding_mask([6, 4, 1])  # (B, L), True = real token
    mask = keep[:, None, None, :]  # (B, 1, 1, L), ours: True = may attend
    # A single TransformerEncoderLayer (torch 2.13, CPU), slow or fast path, computes padded
    # *query* positions like any other (they attend to the real keys), so all positions match.
    # The zeros at padded positions come from nn.TransformerEncoder's nested tensors (below).
    assert_close(ours(x, mask), layer(x, src_key_padding_mask=~keep), **TOL)
    with torch.no_grad():
        assert_close(ours(x, mask), layer(x, src_key_padding_mask=~keep), **TOL)
    # and the real positions do not depend on what sits in the padding
    noisy = x.clone()
    noisy[~keep] = torch.randn(int((~keep).sum()), 16)
    assert_close(ours(noisy, mask)[keep], ours(x, mask)[keep], **TOL)
    assert not torch.allclose(ours(noisy)[keep], ours(x)[keep])  # without the mask they would


def test_encoder_block_from_torch_variants():
    # bias=False layers (no bias in linears, attention or LayerNorms), custom eps
    layer = _torch_layer(seed=4, bias=False, layer_norm_eps=1e-3)
    ours = EncoderBlock.from_torch(layer)
    assert ours.ff.linear1.bias is None and ours.norm1.bias is None and ours.norm1.eps == 1e-3
    x = torch.randn(2, 5, 16)
    assert_close(ours(x), layer(x), **TOL)
    # batch_first=False: same weights, the copy wants (B, L, D)
    seq_first = nn.TransformerEncoderLayer(16, 4, 32, batch_first=False)
    _randomize(seq_first, 5)
    seq_first.eval()
    assert_close(EncoderBlock.from_torch(seq_first)(x), seq_first(x.transpose(0, 1)).transpose(0, 1), **TOL)


def test_encoder_block_gradients_reach_every_parameter():
    torch.manual_seed(6)
    for norm_first in (False, True):
        block = EncoderBlock(12, 3, 24, norm_first=norm_first, activation="gelu")
        x = torch.randn(2, 5, 12, requires_grad=True)
        out = block(x, padding_mask([5, 3])[:, None, None, :])
        (out * torch.randn_like(out)).sum().backward()
        for name, p in block.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert x.grad.abs().sum() > 0


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_matches_torch(norm_first):
    D, H, d_ff, num_layers = 16, 4, 32, 3
    layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.1, norm_first=norm_first, batch_first=True)
    final_norm = nn.LayerNorm(D) if norm_first else None  # pre-LN stacks end with one LayerNorm
    x = torch.randn(3, 6, D, generator=torch.Generator().manual_seed(7))
    keep = padding_mask([6, 3, 5])
    for nested in (False, True):
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ... norm_first was True"
            warnings.simplefilter("ignore", UserWarning)
            ref = nn.TransformerEncoder(layer, num_layers, norm=final_norm, enable_nested_tensor=nested)
        _randomize(ref, 8)
        ref.eval()
        ours = Encoder.from_torch(ref)
        assert len(ours.layers) == num_layers and (ours.norm is None) == (not norm_first)
        assert_close(ours(x), ref(x), **TOL)
        with torch.no_grad(), warnings.catch_warnings():  # nested tensors are a "prototype" feature
            warnings.simplefilter("ignore", UserWarning)
            expected = ref(x, src_key_padding_mask=~keep)
            got = ours(x, keep[:, None, None, :])
        if nested and not norm_first:
            # Eval + no_grad + a padding mask + nested tensors enabled (post-LN only; PyTorch turns
            # them off for norm_first): PyTorch packs the real tokens into a nested tensor and pads
            # the result back with zeros. The real positions agree; padded ones are 0 there.
            assert_close(got[keep], expected[keep], **TOL)
            assert (expected[~keep] == 0).all()
        else:
            assert_close(got, expected, **TOL)


def test_encoder_structure_and_parameter_count():
    D, H, d_ff = 16, 4, 40
    post, pre = Encoder(2, D, H, d_ff), Encoder(2, D, H, d_ff, norm_first=True)
    assert post.norm is None and isinstance(pre.norm, nn.LayerNorm)
    block = 4 * (D * D + D) + (D * d_ff + d_ff) + (d_ff * D + D) + 2 * 2 * D
    assert count_parameters(EncoderBlock(D, H, d_ff)) == block
    assert count_parameters(EncoderBlock(D, H, d_ff)) == count_parameters(nn.TransformerEncoderLayer(D, H, d_ff))
    assert count_parameters(post) == 2 * block and count_parameters(pre) == 2 * block + 2 * D
    pre.norm.weight.requires_grad_(False)
    assert count_parameters(pre, trainable_only=True) == 2 * block + D


def test_encoder_errors():
    with pytest.raises(ValueError, match="'swish'"):
        EncoderBlock(8, 2, 16, activation="swish")
    with pytest.raises(ValueError, match=r"d_model=10 .*num_heads=4"):
        Encoder(2, 10, 4, 16)
    with pytest.raises(ValueError, match=r"last dim is 6 but d_model=8"):
        EncoderBlock(8, 2, 16)(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"3-D .*\(3, 8\)"):
        EncoderBlock(8, 2, 16, norm_first=True)(torch.randn(3, 8))
    with pytest.raises(ValueError, match=r"Encoder: mask of shape \(4, 4\) does not broadcast .*\(2, 2, 3, 3\)"):
        Encoder(2, 8, 2, 16)(torch.randn(2, 3, 8), mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"Encoder: x is torch.float64 on cpu but the weights are torch.float32"):
        Encoder(2, 8, 2, 16, norm_first=True)(torch.randn(2, 3, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="approximate='tanh'"):
        EncoderBlock.from_torch(nn.TransformerEncoderLayer(8, 2, 16, activation=nn.GELU(approximate="tanh")))


# --- decoder -----------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_block_matches_torch(norm_first, activation):
    D, H, d_ff, L, Lm = 16, 4, 32, 6, 5
    layer = nn.TransformerDecoderLayer(
        D, H, d_ff, dropout=0.1, activation=activation, norm_first=norm_first, batch_first=True
    )
    _randomize(layer, 9)
    layer.eval()
    ours = DecoderBlock.from_torch(layer)
    g = torch.Generator().manual_seed(10)
    x, memory = torch.randn(3, L, D, generator=g), torch.randn(3, Lm, D, generator=g)
    tgt_keep, mem_keep = padding_mask([6, 4, 2]), padding_mask([5, 5, 2])
    expected = layer(
        x,
        memory,
        tgt_mask=~causal_mask(L),  # PyTorch: True = ignore
        tgt_key_padding_mask=~tgt_keep,
        memory_key_padding_mask=~mem_keep,
    )
    got = ours(x, memory, self_mask=tgt_keep[:, None, None, :], memory_mask=mem_keep[:, None, None, :])
    assert_close(got, expected, **TOL)
    assert_close(ours(x, memory), layer(x, memory, tgt_mask=~causal_mask(L)), **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_decoder_block_is_causal(norm_first, seed):
    torch.manual_seed(seed)
    block = DecoderBlock(12, 3, 24, norm_first=norm_first).eval()
    L = 7
    g = torch.Generator().manual_seed(seed + 20)
    x, memory = torch.randn(2, L, 12, generator=g), torch.randn(2, 4, 12, generator=g)
    out = block(x, memory)
    for t in range(L):
        later = x.clone()
        later[:, t + 1 :] = torch.randn(2, L - t - 1, 12, generator=g)
        assert_close(block(later, memory)[:, : t + 1], out[:, : t + 1], **TOL)  # the future is invisible
        now = x.clone()
        now[:, t] += 1.0
        changed = (block(now, memory) - out).abs().amax(dim=(0, 2))  # (L,)
        assert changed[t] > 1e-3, f"changing position {t} did not change output {t}"
        assert (changed[:t] <= 1e-5).all()
    other_memory = memory + torch.randn(memory.shape, generator=g)
    assert ((block(x, other_memory) - out).abs().amax(dim=(0, 2)) > 1e-3).all()  # every position reads memory


@pytest.mark.parametrize("norm_first", [False, True])
def test_3d_masks_are_one_per_sequence_like_torch(norm_first):
    """(B, L, L) and (B, L, Lm) masks, one per sequence; PyTorch spells them (B * H, ., .), True = ignore."""
    B, D, H, d_ff, L, Lm = 2, 8, 2, 16, 5, 4
    layer = nn.TransformerDecoderLayer(D, H, d_ff, dropout=0.0, norm_first=norm_first, batch_first=True)
    _randomize(layer, 23)
    layer.eval()
    ours = DecoderBlock.from_torch(layer)
    g = torch.Generator().manual_seed(24)
    x, memory = torch.randn(B, L, D, generator=g), torch.randn(B, Lm, D, generator=g)
    self_keep = torch.rand(B, L, L, generator=g) < 0.7
    self_keep[..., 0] = True  # every query keeps key 0 (which the causal mask allows too)
    memory_keep = torch.rand(B, L, Lm, generator=g) < 0.6
    memory_keep[..., 0] = True
    expected = layer(
        x,
        memory,
        tgt_mask=~(self_keep & causal_mask(L)).repeat_interleave(H, dim=0),  # (B * H, L, L)
        memory_mask=~memory_keep.repeat_interleave(H, dim=0),  # (B * H, L, Lm)
    )
    assert_close(ours(x, memory, self_mask=self_keep, memory_mask=memory_keep), expected, **TOL)

    encoder_layer = _torch_layer(D, H, d_ff, norm_first=norm_first, seed=25)
    block = EncoderBlock.from_torch(encoder_layer)
    expected = encoder_layer(x, src_mask=~self_keep.repeat_interleave(H, dim=0))
    assert_close(block(x, self_keep), expected, **TOL)


def test_decoder_block_masks_are_anded_and_memory_padding_hides():
    torch.manual_seed(21)
    block = DecoderBlock(8, 2, 16).eval()
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 6, 8)
    # a self_mask that allows everything leaves the causal mask in charge
    assert_close(block(x, memory, self_mask=torch.ones(5, 5, dtype=torch.bool)), block(x, memory), **TOL)
    # target padding: keys past each length are hidden in addition to the future
    keep = padding_mask([5, 3])
    out = block(x, memory, self_mask=keep[:, None, None, :])
    noisy = x.clone()
    noisy[1, 3:] += 5.0
    assert_close(block(noisy, memory, self_mask=keep[:, None, None, :])[1, :3], out[1, :3], **TOL)
    # memory padding hides the padded memory positions
    mem_keep = padding_mask([6, 2])[:, None, None, :]
    out = block(x, memory, memory_mask=mem_keep)
    noisy_memory = memory.clone()
    noisy_memory[1, 2:] += 5.0
    assert_close(block(x, noisy_memory, memory_mask=mem_keep), out, **TOL)


def test_decoder_block_gradients_and_errors():
    torch.manual_seed(22)
    block = DecoderBlock(8, 2, 16, norm_first=True)
    out = block(torch.randn(2, 4, 8), torch.randn(2, 3, 8))
    (out * torch.randn_like(out)).sum().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    x = torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match=r"memory's last dim is 6 but d_model=8"):
        block(x, torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"batch sizes differ: x B=2, memory B=3"):
        block(x, torch.randn(3, 3, 8))
    with pytest.raises(ValueError, match=r"DecoderBlock: self_mask of shape \(3, 4, 4\), read as .* \(2, 2, 4, 4\)"):
        block(x, torch.randn(2, 3, 8), self_mask=torch.ones(3, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"DecoderBlock: self_mask must be boolean .*torch.float32"):
        block(x, torch.randn(2, 3, 8), self_mask=torch.ones(4, 4))
    with pytest.raises(ValueError, match=r"DecoderBlock: memory_mask of shape \(2, 1, 1, 4\) does not broadcast .*\(2, 2, 4, 3\)"):
        block(x, torch.randn(2, 3, 8), memory_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"x is torch.float64 on cpu but the weights are torch.float32 on cpu"):
        block(x.double(), torch.randn(2, 3, 8))


def test_one_forward_checks_each_input_once(monkeypatch):
    """The block checks x, memory and the masks at its boundary; the sublayers and the attention below
    them check nothing again (they are called with check_inputs=False)."""
    from lessons_src import _validate

    calls = []
    for name in ("mask", "sequence", "attention_inputs"):
        real = getattr(_validate, name)
        monkeypatch.setattr(_validate, name, lambda *a, _real=real, _name=name, **kw: calls.append(_name) or _real(*a, **kw))
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 3, 8)
    keep = padding_mask([4, 2])[:, None, None, :]
    DecoderBlock(8, 2, 16)(x, memory, self_mask=keep, memory_mask=padding_mask([3, 1])[:, None, None, :])
    assert sorted(calls) == ["mask", "mask", "sequence", "sequence"]  # self_mask, memory_mask; x, memory
    calls.clear()
    Encoder(3, 8, 2, 16)(x, mask=keep)
    assert sorted(calls) == ["mask", "sequence"]  # once for the stack of 3 layers
