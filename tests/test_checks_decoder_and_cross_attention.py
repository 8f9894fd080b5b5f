"""The decoder-attention check (exercise 8): correct wirings written differently pass; each mistake is named."""

import torch
from checks_learners import REFERENCES, add

from lessons_src import causal_mask, padding_mask
from lessons_src.checks.decoder_and_cross_attention import check_decoder_attention

CHECK = "check_decoder_attention"

# -- correct implementations, written differently ---------------------------------------------------


def with_library_masks(x, memory, source_lengths, self_attn, cross_attn):
    Lt, Ls = x.size(1), memory.size(1)
    self_out, _ = self_attn(x, x, x, causal_mask(Lt, device=x.device))
    memory_mask = padding_mask(source_lengths, max_len=Ls).to(x.device)[:, None, None, :]  # (B, 1, 1, Ls)
    cross_out, _ = cross_attn(x, memory, memory, memory_mask)
    return self_out, cross_out


def with_hand_made_masks(x, memory, source_lengths, self_attn, cross_attn):
    B, Lt, _ = x.shape
    Ls = memory.size(1)
    positions = torch.arange(Lt)
    causal = positions[None, :] <= positions[:, None]  # (Lt, Lt): key <= query
    real = torch.arange(Ls)[None, :] < torch.tensor(source_lengths)[:, None]  # (B, Ls)
    cross_out = cross_attn(x, memory, memory, mask=real.view(B, 1, 1, Ls))[0]  # the other order, keyword mask
    self_out = self_attn(query=x, key=x, value=x, mask=causal)[0]
    return [self_out, cross_out]


def with_full_size_masks(x, memory, source_lengths, self_attn, cross_attn):
    B, Lt, _ = x.shape
    Ls = memory.size(1)
    H = self_attn.num_heads
    causal = torch.ones(Lt, Lt, dtype=torch.bool).tril().expand(B, H, Lt, Lt)
    real = padding_mask(torch.tensor(source_lengths), Ls)[:, None, None, :].expand(B, H, Lt, Ls)
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, memory, real)[0]


REFERENCES[CHECK] = (with_library_masks,)
add(CHECK)(with_hand_made_masks)
add(CHECK)(with_full_size_masks)


def test_learner_rng_is_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_decoder_attention(with_library_masks)
    assert torch.equal(torch.rand(3), expected)


# -- known mistakes, each named ----------------------------------------------------------------------


def _masks(x, memory, source_lengths):
    Lt, Ls = x.size(1), memory.size(1)
    return causal_mask(Lt), padding_mask(source_lengths, max_len=Ls)  # (Lt, Lt), (B, Ls)


def queries_from_encoder(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(memory, memory, memory, real[:, None, None, :])[0]


def queries_from_encoder_keys_from_decoder(x, memory, source_lengths, self_attn, cross_attn):
    causal, _ = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(memory, x, x)[0]


def keys_from_decoder(x, memory, source_lengths, self_attn, cross_attn):
    causal, _ = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(x, x, x)[0]


def values_from_decoder(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, x, real[:, None, None, :])[0]


def causal_on_cross(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    Lt, Ls = x.size(1), memory.size(1)
    triangle = torch.ones(Lt, Ls, dtype=torch.bool).tril()
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, memory, real[:, None, None, :] & triangle)[0]


def causal_mask_reused_on_cross(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, memory, causal)[0]


def padding_on_wrong_axis(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, memory, real[:, None, :, None])[0]


def padding_without_new_axes(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, memory, real)[0]


def padding_inverted(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, memory, ~real[:, None, None, :])[0]


def padding_missing(x, memory, source_lengths, self_attn, cross_attn):
    causal, _ = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], cross_attn(x, memory, memory)[0]


def no_causal_mask(x, memory, source_lengths, self_attn, cross_attn):
    _, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x)[0], cross_attn(x, memory, memory, real[:, None, None, :])[0]


def causal_transposed(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal.T)[0], cross_attn(x, memory, memory, real[:, None, None, :])[0]


def causal_inverted(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, ~causal)[0], cross_attn(x, memory, memory, real[:, None, None, :])[0]


def causal_hides_diagonal(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal.tril(-1))[0], cross_attn(x, memory, memory, real[:, None, None, :])[0]


def self_attends_to_memory(x, memory, source_lengths, self_attn, cross_attn):
    _, real = _masks(x, memory, source_lengths)
    return self_attn(x, memory, memory, real[:, None, None, :])[0], cross_attn(x, memory, memory, real[:, None, None, :])[0]


def modules_swapped(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return cross_attn(x, x, x, causal)[0], self_attn(x, memory, memory, real[:, None, None, :])[0]


def self_attn_twice(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal)[0], self_attn(x, memory, memory, real[:, None, None, :])[0]


def cross_reads_self_out(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    self_out = self_attn(x, x, x, causal)[0]
    return self_out, cross_attn(self_out, memory, memory, real[:, None, None, :])[0]


def swapped_outputs(x, memory, source_lengths, self_attn, cross_attn):
    self_out, cross_out = with_library_masks(x, memory, source_lengths, self_attn, cross_attn)
    return cross_out, self_out


def returns_weights_too(x, memory, source_lengths, self_attn, cross_attn):
    causal, real = _masks(x, memory, source_lengths)
    return self_attn(x, x, x, causal), cross_attn(x, memory, memory, real[:, None, None, :])


def returns_one(x, memory, source_lengths, self_attn, cross_attn):
    return with_library_masks(x, memory, source_lengths, self_attn, cross_attn)[1]


def adds_residual(x, memory, source_lengths, self_attn, cross_attn):
    self_out, cross_out = with_library_masks(x, memory, source_lengths, self_attn, cross_attn)
    return self_out + x, cross_out + x


def stub(x, memory, source_lengths, self_attn, cross_attn):
    raise NotImplementedError


def raises_runtime_error(x, memory, source_lengths, self_attn, cross_attn):
    raise RuntimeError("boom")


add(CHECK, "queries are taken from the encoder's memory")(queries_from_encoder)
add(CHECK, "queries are taken from the encoder's memory")(queries_from_encoder_keys_from_decoder)
add(CHECK, "keys and values come from the decoder")(keys_from_decoder)
add(CHECK, "both must be the memory")(values_from_decoder)
add(CHECK, "a causal mask is applied to cross-attention")(causal_on_cross)
add(CHECK, "cross-attention gets a causal mask instead of the padding mask")(causal_mask_reused_on_cross)
add(CHECK, "padding is applied on the wrong axis")(padding_on_wrong_axis)
add(CHECK, "without the head and query axes")(padding_without_new_axes)
add(CHECK, "padding mask is inverted")(padding_inverted)
add(CHECK, "padding is not masked")(padding_missing)
add(CHECK, "self-attention has no causal mask")(no_causal_mask)
add(CHECK, "causal mask is transposed")(causal_transposed)
add(CHECK, "causal mask is inverted")(causal_inverted)
add(CHECK, "hides the diagonal")(causal_hides_diagonal)
add(CHECK, "self-attention attends over the memory")(self_attends_to_memory)
add(CHECK, "modules are swapped")(modules_swapped)
add(CHECK, "self_attn is called twice")(self_attn_twice)
add(CHECK, "queries are self-attention's output")(cross_reads_self_out)
add(CHECK, "swapped")(swapped_outputs)
add(CHECK, "is a tuple")(returns_weights_too)
add(CHECK, "expected a tuple (self_out, cross_out)")(returns_one)
add(CHECK, "self_out differs from the reference")(adds_residual)
add(CHECK, "not implemented yet")(stub)
add(CHECK, "RuntimeError: boom")(raises_runtime_error)


def _padding_without_max_len(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1)))
    cross_out, _ = cross_attn(x, memory, memory, padding_mask(source_lengths)[:, None, None, :])
    return self_out, cross_out


add(CHECK, "without `max_len`", "padding_without_max_len")(_padding_without_max_len)


@add(CHECK, "padding mask has dtype torch.float32, expected torch.bool")
def float_padding_mask(x, memory, source_lengths, self_attn, cross_attn):
    self_out, _ = self_attn(x, x, x, causal_mask(x.size(1)))
    mask = padding_mask(source_lengths, memory.size(1)).float()[:, None, None, :]
    return self_out, cross_attn(x, memory, memory, mask)[0]


@add(CHECK, "self-attention's mask has dtype torch.float32")
def additive_causal_mask(x, memory, source_lengths, self_attn, cross_attn):
    Lt = x.size(1)
    additive = torch.zeros(Lt, Lt).masked_fill(~causal_mask(Lt), float("-inf"))  # PyTorch's additive style
    self_out, _ = self_attn(x, x, x, additive)
    return self_out, with_library_masks(x, memory, source_lengths, self_attn, cross_attn)[1]


def test_causal_mask_on_cross_named_when_shapes_differ():
    """With Lt != Ls, reusing the (Lt, Lt) causal mask raises inside the module; the check still names it."""

    def causal_reused(x, memory, source_lengths, self_attn, cross_attn):
        if x.size(1) == memory.size(1):
            return with_library_masks(x, memory, source_lengths, self_attn, cross_attn)
        return causal_mask_reused_on_cross(x, memory, source_lengths, self_attn, cross_attn)

    result = check_decoder_attention(causal_reused)
    assert not result and "causal mask of shape" in str(result) and "case 2/3" in str(result), str(result)


