"""The check of exercise 11 (rotary embeddings): correct answers written differently pass; each known mistake is named."""

import math

import torch
import torch.nn.functional as F
from checks_learners import REFERENCES, add_fns

from lessons_src import apply_rope
from lessons_src.checks.rotary_embeddings import check_apply_rope, check_rotary_decode_step

# -- correct implementations, written differently --------------------------------------------------


def _theta(d, base, dtype=torch.float64):
    return base ** (-torch.arange(0, d, 2, dtype=dtype) / d)  # (d/2,)


def reference_style(x, positions, base=10000.0):
    angles = positions.to(torch.float64)[:, None] * _theta(x.size(-1), base)[None, :]  # (L, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1).flatten(-2)


def complex_style(x, positions, base=10000.0):
    z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], -1, 2).contiguous())  # (..., L, d/2)
    turn = torch.polar(torch.ones(len(positions), x.size(-1) // 2, dtype=torch.float64),
                       torch.outer(positions.to(torch.float64), _theta(x.size(-1), base)))
    return torch.view_as_real(z * turn).flatten(-2).to(x.dtype)


def matrix_style(x, positions, base=10000.0):
    """One block-diagonal rotation matrix per position, applied with einsum."""
    d = x.size(-1)
    angles = torch.outer(positions.double(), _theta(d, base))  # (L, d/2)
    rotations = torch.zeros(len(positions), d, d, dtype=torch.float64)
    for i in range(d // 2):
        c, s = angles[:, i].cos(), angles[:, i].sin()
        rotations[:, 2 * i, 2 * i], rotations[:, 2 * i, 2 * i + 1] = c, -s
        rotations[:, 2 * i + 1, 2 * i], rotations[:, 2 * i + 1, 2 * i + 1] = s, c
    return torch.einsum("lij,...lj->...li", rotations, x.double()).to(x.dtype)


def float32_angles_style(x, positions, base=10000.0):
    """Angles in float32, as many implementations do: fine for these positions."""
    inv_freq = 1.0 / (base ** (torch.arange(0, x.size(-1), 2).float() / x.size(-1)))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * freqs.cos().to(x.dtype) - x[..., 1::2] * freqs.sin().to(x.dtype)
    out[..., 1::2] = x[..., 0::2] * freqs.sin().to(x.dtype) + x[..., 1::2] * freqs.cos().to(x.dtype)
    return out


# -- known mistakes, each named ----------------------------------------------------------------------


def _rotate(x, angles, sign=1.0):
    cos, sin = angles.cos().to(x.dtype), sign * angles.sin().to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1).flatten(-2)


def rotate_half(x, positions, base=10000.0):
    angles = torch.outer(positions.double(), _theta(x.size(-1), base))
    cos, sin = angles.cos().to(x.dtype).repeat(1, 2), angles.sin().to(x.dtype).repeat(1, 2)
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


def not_interleaved_back(x, positions, base=10000.0):
    angles = torch.outer(positions.double(), _theta(x.size(-1), base))
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.cat((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)


def exponent_i_over_d(x, positions, base=10000.0):
    theta = base ** (-torch.arange(x.size(-1) // 2, dtype=torch.float64) / x.size(-1))
    return _rotate(x, torch.outer(positions.double(), theta))


def exponent_4i_over_d(x, positions, base=10000.0):
    theta = base ** (-torch.arange(0, x.size(-1), 2, dtype=torch.float64) / (x.size(-1) // 2))
    return _rotate(x, torch.outer(positions.double(), theta))


def positive_exponent(x, positions, base=10000.0):
    theta = base ** (torch.arange(0, x.size(-1), 2, dtype=torch.float64) / x.size(-1))
    return _rotate(x, torch.outer(positions.double(), theta))


def minus_theta(x, positions, base=10000.0):
    return _rotate(x, torch.outer(positions.double(), _theta(x.size(-1), base)), sign=-1.0)


def swapped_cos_sin(x, positions, base=10000.0):
    angles = torch.outer(positions.double(), _theta(x.size(-1), base))
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((x_even * sin - x_odd * cos, x_even * cos + x_odd * sin), dim=-1).flatten(-2)


def same_rotation_everywhere(x, positions, base=10000.0):
    theta = _theta(x.size(-1), base)
    return _rotate(x, theta.expand(len(positions), -1))


def no_rotation(x, positions, base=10000.0):
    return x.clone()


def uses_arange(x, positions, base=10000.0):
    return reference_style(x, torch.arange(x.size(-2)), base)


def ignores_base(x, positions, base=10000.0):
    return reference_style(x, positions, 10000.0)


def cos_only(x, positions, base=10000.0):
    angles = torch.outer(positions.double(), _theta(x.size(-1), base))
    cos = angles.cos().to(x.dtype)
    return torch.stack((x[..., 0::2] * cos, x[..., 1::2] * cos), dim=-1).flatten(-2)


def degrees_not_radians(x, positions, base=10000.0):
    return _rotate(x, torch.deg2rad(torch.outer(positions.double(), _theta(x.size(-1), base))))


def returns_float32(x, positions, base=10000.0):
    return reference_style(x, positions, base).float()


def returns_one_coordinate(x, positions, base=10000.0):
    return reference_style(x, positions, base)[..., 0::2]


def returns_tuple(x, positions, base=10000.0):
    return reference_style(x, positions, base), positions


def returns_float64(x, positions, base=10000.0):
    """Right values, computed and returned in float64 for a float32 input. On a case whose positions
    are 0 .. L-1 they equal the "positions ignored" mistake's, which must not be named."""
    return reference_style(x.double(), positions, base)


def returns_none(x, positions, base=10000.0):
    reference_style(x, positions, base)


def no_base_parameter(x, positions):
    return reference_style(x, positions)


def stub(x, positions, base=10000.0):
    raise NotImplementedError


MISTAKES = [
    (rotate_half, "you rotated the halves, pairing x_p with x_(p + d_k/2)"),
    (not_interleaved_back, "returned as [all first coordinates, all second coordinates]"),
    (exponent_i_over_d, "the frequency exponent is p/d_k instead of 2p/d_k"),
    (exponent_4i_over_d, "the frequency exponent is 4p/d_k"),
    (positive_exponent, "the frequency exponent has the wrong sign"),
    (minus_theta, "the rotation goes the wrong way (by -iθ): a sign error"),
    (swapped_cos_sin, "cos and sin are swapped"),
    (same_rotation_everywhere, "positions are not applied: every position gets the same rotation"),
    (no_rotation, "x is returned unrotated"),
    (uses_arange, "the positions argument is ignored: you used 0 .. L-1"),
    (ignores_base, "the base argument is ignored"),
    (cos_only, "the norms are not preserved"),
    (degrees_not_radians, "≈ π/180: degrees"),
    (returns_float32, "has dtype torch.float32, expected torch.float64"),
    (returns_float64, "has dtype torch.float64, expected torch.float32"),  # not "positions ignored"
    (returns_one_coordinate, "one coordinate per pair"),
    (returns_tuple, "expected one tensor"),
    (returns_none, "returned None"),
    (no_base_parameter, "does not take the exercise's parameters"),
    (stub, "not implemented yet"),
]


def test_rotate_half_hint_names_the_convention():
    hint = check_apply_rope(rotate_half).hint
    assert "interleaved" in hint and "0::2" in hint


def test_nan_is_feedback():
    def nan_output(x, positions, base=10000.0):
        return reference_style(x, positions, base) * float("nan")

    result = check_apply_rope(nan_output)
    assert not result and "NaN" in str(result)


CHECK = "check_apply_rope"

# == the learner table (checks_learners.py) ==========================================================

REFERENCES[CHECK] = (reference_style,)
for _fn in (complex_style, matrix_style, float32_angles_style):
    add_fns(CHECK, (_fn,))
for _fn, _named in MISTAKES:
    add_fns(CHECK, (_fn,), _named)


# == part 2: a decoding step with a KV cache =========================================================

DECODE = "check_rotary_decode_step"


def decode_reference(q, k, v, key_cache, value_cache, cos, sin):
    position = key_cache.size(-2)  # n tokens cached at 0 .. n-1: the new one is at n
    q, k = apply_rope(q, cos, sin, position), apply_rope(k, cos, sin, position)
    key_cache, value_cache = torch.cat([key_cache, k], dim=-2), torch.cat([value_cache, v], dim=-2)
    weights = torch.softmax(q @ key_cache.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    return weights @ value_cache, key_cache, value_cache


REFERENCES[DECODE] = (decode_reference,)


def decode_by_hand(q, k, v, key_cache, value_cache, cos, sin):
    # The rotation written out: pair (x_2i, x_2i+1) turns by the angle in row T of cos/sin.
    t = key_cache.size(-2)
    c, s = cos[t].to(q.dtype), sin[t].to(q.dtype)  # (d/2,)

    def rotate(x):
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)

    keys = torch.cat([key_cache, rotate(k)], dim=-2)
    values = torch.cat([value_cache, v], dim=-2)
    return F.scaled_dot_product_attention(rotate(q), keys, values), keys, values


def decode_with_position_tensor(q, k, v, key_cache, value_cache, cos, sin):
    positions = torch.full((1,), key_cache.shape[2])  # a tensor of positions, not an int
    q, k = (apply_rope(t, cos, sin, positions) for t in (q, k))
    keys, values = torch.cat((key_cache, k), 2), torch.cat((value_cache, v), 2)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, keys) * q.size(-1) ** -0.5
    return scores.softmax(-1) @ values, keys, values


def _step(position, rotate=("q", "k"), layout="interleaved", rerotate=False, prepend=False, cache_plain=False,
          scale=True, keep_caches=False):
    def rotary_decode_step(q, k, v, key_cache, value_cache, cos, sin):
        p = position(key_cache.size(-2))
        turned = {name: apply_rope(t, cos, sin, p, layout=layout) if name in rotate else t
                  for name, t in (("q", q), ("k", k), ("v", v))}
        cached = apply_rope(key_cache, cos, sin, layout=layout) if rerotate else key_cache
        pair = (turned["k"], cached) if prepend else (cached, turned["k"])
        keys = torch.cat(pair, dim=-2)
        values = torch.cat((turned["v"], value_cache) if prepend else (value_cache, turned["v"]), dim=-2)
        scores = turned["q"] @ keys.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale else 1.0)
        output = torch.softmax(scores, dim=-1) @ values
        if cache_plain:
            keys = torch.cat((key_cache, k), dim=-2)
        if keep_caches:
            return output, key_cache, value_cache
        return output, keys, values

    return rotary_decode_step


DECODE_WRONG = [
    (_step(lambda t: 0), "the positions restart at 0"),
    (_step(lambda t: t + 1), "position n + 1"),
    (_step(lambda t: t - 1), "position n - 1"),
    (_step(lambda t: t, rotate=("q", "k", "v")), "the value is rotated too"),
    (_step(lambda t: t, rerotate=True), "rotated a second time"),
    (_step(lambda t: t, rotate=("k",)), "the query is not rotated"),
    (_step(lambda t: t, rotate=("q",)), "the new key is not rotated"),
    (_step(lambda t: t, layout="half"), "layouts are mixed"),
    (_step(lambda t: t, prepend=True), "at the start of the caches"),
    (_step(lambda t: t, cache_plain=True), "the new key unrotated"),
    (_step(lambda t: t, scale=False), "not scaled"),
    (_step(lambda t: t, keep_caches=True), "returned without the new token"),
]

def position_from_the_head_axis(q, k, v, key_cache, value_cache, cos, sin):
    position = key_cache.size(1)  # the heads, not the cached tokens: must not pass for n - 1 or n + 1
    q, k = apply_rope(q, cos, sin, position), apply_rope(k, cos, sin, position)
    key_cache, value_cache = torch.cat([key_cache, k], dim=-2), torch.cat([value_cache, v], dim=-2)
    weights = torch.softmax(q @ key_cache.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    return weights @ value_cache, key_cache, value_cache


add_fns(DECODE, (position_from_the_head_axis,), "at step 'n = key_cache.size(-2), the number of cached tokens': it is taken over the heads (dim -3)", "decode-head-axis")
add_fns(DECODE, (decode_by_hand,))
add_fns(DECODE, (decode_with_position_tensor,))
for _fn, _named in DECODE_WRONG:
    add_fns(DECODE, (_fn,), _named, f"decode-{_named}")


def test_a_decoding_step_that_forgets_its_cache_between_calls_fails_on_the_sequence():
    state = {}

    def stateful(q, k, v, key_cache, value_cache, cos, sin):  # right on single steps, wrong when chained
        out = decode_reference(q, k, v, key_cache, value_cache, cos, sin)
        state["calls"] = state.get("calls", 0) + 1
        return out if state["calls"] <= 5 else (out[0], out[1][..., :0, :], out[2][..., :0, :])

    assert not check_rotary_decode_step(stateful)
