"""The check of exercise 6 (pre-LN encoder): correct answers written differently pass; each known mistake is named."""

import functools

import pytest
import torch
import torch.nn.functional as F
from checks_learners import REFERENCES, add_fns

from lessons_src.checks.encoder_block import check_pre_ln_encoder

# -- correct implementations, written differently --------------------------------------------------


def block_reference_style(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    h = norm2(x)
    return x + ff.linear2(torch.relu(ff.linear1(h)))


def encoder_reference_style(x, layers, norm, mask=None):
    for layer in layers:
        x = block_reference_style(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(x)


def block_functional_style(x, attention, ff, norm1, norm2, mask=None):
    def sublayer(x, fn, norm):
        h = F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)
        return x + fn(h)

    x = sublayer(x, lambda h: attention(query=h, key=h, value=h, mask=mask)[0], norm1)
    return sublayer(x, ff, norm2)  # FeedForward's own forward: linear1, ReLU, linear2


def encoder_functional_style(x, layers, norm, mask=None):
    x = functools.reduce(
        lambda h, layer: block_functional_style(h, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask=mask),
        layers,
        x,
    )
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


def encoder_library_blocks(x, layers, norm, mask=None):
    for layer in layers:
        x = layer(x, mask)  # the course's EncoderBlock with norm_first=True
    return norm(x)


# -- block mistakes, each named ----------------------------------------------------------------------


def _ffn(ff, h, activation=torch.relu):
    return ff.linear2(activation(ff.linear1(h)))


def post_ln(x, attention, ff, norm1, norm2, mask=None):
    x = norm1(x + attention(x, x, x, mask)[0])
    return norm2(x + _ffn(ff, x))


def norm_on_sum(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = norm1(x + attention(h, h, h, mask)[0])
    return norm2(x + _ffn(ff, norm2(x)))


def norm_on_output(x, attention, ff, norm1, norm2, mask=None):
    x = x + norm1(attention(x, x, x, mask)[0])
    return x + norm2(_ffn(ff, x))


def no_attention_residual(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = attention(h, h, h, mask)[0]
    return x + _ffn(ff, norm2(x))


def no_ff_residual(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    return _ffn(ff, norm2(x))


def no_residuals(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = attention(h, h, h, mask)[0]
    return _ffn(ff, norm2(x))


def no_activation(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    return x + ff.linear2(ff.linear1(norm2(x)))


def gelu_activation(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    x = x + attention(h, h, h, mask)[0]
    return x + _ffn(ff, norm2(x), F.gelu)


def forgets_feed_forward(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    return x + attention(h, h, h, mask)[0]


def residual_of_normed_input(x, attention, ff, norm1, norm2, mask=None):
    x = norm1(x)
    x = x + attention(x, x, x, mask)[0]
    x = norm2(x)
    return x + _ffn(ff, x)


def swapped_norms(x, attention, ff, norm1, norm2, mask=None):
    return block_reference_style(x, attention, ff, norm2, norm1, mask)


def one_norm_for_both(x, attention, ff, norm1, norm2, mask=None):
    return block_reference_style(x, attention, ff, norm1, norm1, mask)


def only_queries_normalised(x, attention, ff, norm1, norm2, mask=None):
    x = x + attention(norm1(x), x, x, mask)[0]
    return x + _ffn(ff, norm2(x))


def stale_input_to_ff(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    return x + attention(h, h, h, mask)[0] + _ffn(ff, norm2(x))


def ignores_mask(x, attention, ff, norm1, norm2, mask=None):
    return block_reference_style(x, attention, ff, norm1, norm2, None)


def inverts_mask(x, attention, ff, norm1, norm2, mask=None):
    return block_reference_style(x, attention, ff, norm1, norm2, None if mask is None else ~mask)


def no_mask_parameter(x, attention, ff, norm1, norm2):
    return block_reference_style(x, attention, ff, norm1, norm2)


def returns_weights_too(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    out, weights = attention(h, h, h, mask)
    x = x + out
    return x + _ffn(ff, norm2(x)), weights


def adds_the_tuple(x, attention, ff, norm1, norm2, mask=None):
    h = norm1(x)
    return x + attention(h, h, h, mask)


def returns_none(x, attention, ff, norm1, norm2, mask=None):
    block_reference_style(x, attention, ff, norm1, norm2, mask)


def returns_one_position(x, attention, ff, norm1, norm2, mask=None):
    return block_reference_style(x, attention, ff, norm1, norm2, mask)[:, 0]


def block_stub(x, attention, ff, norm1, norm2, mask=None):
    raise NotImplementedError


def encoder_stub(x, layers, norm, mask=None):
    raise NotImplementedError


BLOCK_MISTAKES = [
    (post_ln, "in both sublayers, the norm comes after the residual sum"),
    (post_ln, "post-LN, not pre-LN"),
    (norm_on_sum, "in both sublayers, the residual sum is normalised as well"),
    (norm_on_output, "applied to the sublayer's output"),
    (no_attention_residual, "in the attention sublayer, the residual connection is missing"),
    (no_ff_residual, "in the feed-forward sublayer, the residual connection is missing"),
    (no_residuals, "in both sublayers, the residual connection is missing"),
    (no_activation, "the feed-forward has no activation"),
    (gelu_activation, "GELU"),
    (forgets_feed_forward, "in the feed-forward sublayer, nothing is computed"),
    (residual_of_normed_input, "the residual adds the normalised input"),
    (swapped_norms, "norm1 and norm2 are swapped"),
    (one_norm_for_both, "norm1 is used before both sublayers"),
    (only_queries_normalised, "only the queries are normalised"),
    (stale_input_to_ff, "reads norm2 of the block's input"),
    (ignores_mask, "the mask is not passed to the attention"),
    (inverts_mask, "the mask is inverted"),
    (no_mask_parameter, "pre_ln_block has no `mask` parameter"),
    (returns_weights_too, "expected one tensor"),
    (adds_the_tuple, "is used as a tensor"),
    (returns_none, "returned None"),
    (returns_one_position, "expected (2, 5, 16)"),
    (block_stub, "not implemented yet"),
]


# -- stack mistakes, each named (with a correct block) ------------------------------------------------


def _run(x, layers, mask):
    for layer in layers:
        x = block_reference_style(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return x


def no_final_norm(x, layers, norm, mask=None):
    return _run(x, layers, mask)


def norm_after_every_layer(x, layers, norm, mask=None):
    for layer in layers:
        x = norm(block_reference_style(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask))
    return x


def norm_on_input(x, layers, norm, mask=None):
    return _run(norm(x), layers, mask)


def not_chained(x, layers, norm, mask=None):
    for layer in layers:
        out = block_reference_style(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return norm(out)


def return_inside_loop(x, layers, norm, mask=None):
    for layer in layers:
        x = block_reference_style(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
        return norm(x)


def reversed_layers(x, layers, norm, mask=None):
    return norm(_run(x, list(layers)[::-1], mask))


def mask_not_passed_on(x, layers, norm, mask=None):
    return norm(_run(x, layers, None))


def encoder_without_mask(x, layers, norm):
    return norm(_run(x, layers, None))


def post_ln_blocks_in_the_stack(x, layers, norm, mask=None):
    for layer in layers:
        x = post_ln(x, layer.self_attn, layer.ff, layer.norm1, layer.norm2, mask)
    return x


ENCODER_MISTAKES = [
    (no_final_norm, "the final LayerNorm is missing (the last step of a pre-LN encoder)"),
    (norm_after_every_layer, "the final norm is applied after every layer"),
    (norm_on_input, "applied to the input, before the layers"),
    (not_chained, "only the last layer counts"),
    (return_inside_loop, "only the first layer runs"),
    (reversed_layers, "reverse order"),
    (mask_not_passed_on, "the mask is not passed to the layers"),
    (post_ln_blocks_in_the_stack, "the output differs from the reference"),
    (encoder_without_mask, "pre_ln_encoder has no `mask` parameter"),
    (encoder_stub, "not implemented yet"),
]


def test_final_norm_hint_explains_why():
    hint = check_pre_ln_encoder(block_reference_style, no_final_norm).hint
    assert "un-normalised" in hint and "return norm(x)" in hint


def test_unrecognised_mistake_still_gets_feedback():
    def off_by_a_bit(x, attention, ff, norm1, norm2, mask=None):
        return block_reference_style(x, attention, ff, norm1, norm2, mask) + 0.01

    result = check_pre_ln_encoder(off_by_a_bit, encoder_reference_style)
    assert not result and "differs from the reference" in str(result) and "largest difference" in str(result)


def test_changing_x_in_place_is_named():
    def zeroes_x(x, attention, ff, norm1, norm2, mask=None):
        out = block_reference_style(x, attention, ff, norm1, norm2, mask)
        x.zero_()
        return out

    result = check_pre_ln_encoder(zeroes_x, encoder_reference_style)
    assert not result and "changed its argument `x` in place" in str(result).splitlines()[0]


def test_stub_is_not_implemented_and_strict_mode_raises(monkeypatch):
    assert "not implemented yet" in str(check_pre_ln_encoder(block_stub, encoder_stub))
    monkeypatch.setenv("LESSONS_SRC_STRICT", "1")
    with pytest.raises(AssertionError, match="not implemented yet"):
        check_pre_ln_encoder(block_stub, encoder_stub)
    with pytest.raises(AssertionError, match="post-LN"):
        check_pre_ln_encoder(post_ln, encoder_reference_style)
    assert check_pre_ln_encoder(block_reference_style, encoder_reference_style)  # a pass does not raise


CHECK = "check_pre_ln_encoder"

# == the learner table (checks_learners.py) ==========================================================

REFERENCES[CHECK] = (block_reference_style, encoder_reference_style)
add_fns(CHECK, (block_functional_style, encoder_functional_style))
add_fns(CHECK, (block_reference_style, encoder_library_blocks))
for _i, (_fn, _named) in enumerate(BLOCK_MISTAKES):
    add_fns(CHECK, (_fn, encoder_reference_style), _named, f"block-{_fn.__name__}-{_i}")
for _fn, _named in ENCODER_MISTAKES:
    add_fns(CHECK, (block_reference_style, _fn), _named, f"encoder-{_fn.__name__}")


def _block_with_ff(ff_fn):
    def pre_ln_block(x, attention, ff, norm1, norm2, mask=None):
        h = norm1(x)
        x = x + attention(h, h, h, mask)[0]
        return x + ff_fn(ff, norm2(x))

    return pre_ln_block


add_fns(CHECK, (_block_with_ff(lambda ff, h: torch.relu(ff.linear2(ff.linear1(h)))), encoder_reference_style),
        "ReLU comes after linear2", "block-relu_after_linear2")
add_fns(CHECK, (_block_with_ff(lambda ff, h: torch.relu(ff.linear2(torch.relu(ff.linear1(h))))),
                encoder_reference_style), "second ReLU after linear2", "block-relu_twice")
add_fns(CHECK, (_block_with_ff(lambda ff, h: F.dropout(ff(h), 0.1, training=True)), encoder_reference_style),
        "dropout is on", "block-dropout_on")


def feed_forward_first(x, attention, ff, norm1, norm2, mask=None):
    x = x + ff(norm2(x))
    h = norm1(x)
    return x + attention(h, h, h, mask)[0]


add_fns(CHECK, (feed_forward_first, encoder_reference_style), "feed-forward sublayer runs before the attention")
