"""The language model and its helpers: the model against PyTorch's own encoder layers run with a
causal mask, sampling against its closed form, and the head scores on weights whose answer is known."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from lessons_src import EncoderBlock
from lessons_src.language_model import (
    CharTokenizer,
    LanguageModel,
    _kneser_ney,
    _kneser_ney_tables,
    _ngram_losses,
    best_ngram_loss,
    bigram_loss,
    course_text,
    generate,
    induction_score,
    next_token_probs,
    ngram_loss,
    previous_token_score,
    repeated_tokens,
    windows,
)

TOL = {"atol": 1e-5, "rtol": 1e-5}


def test_course_text_ships_with_the_package_and_is_plain_ascii():
    text = course_text()
    assert len(text) > 100_000 and text.isascii()
    assert "Attention" in text and "```" not in text and "$$" not in text


def test_tokenizer_round_trip_and_unknown_characters():
    tok = CharTokenizer("hello world")
    assert tok.vocab_size == 8 and tok.decode(tok.encode("low drew")) == "low drew"
    assert tok.encode("he").dtype == torch.long
    with pytest.raises(ValueError, match=r"not in the vocabulary: \['z'\]"):
        tok.encode("zoo")
    with pytest.raises(ValueError, match="non-empty str"):
        CharTokenizer("")


def _randomize(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_model_is_pytorchs_pre_ln_encoder_layers_with_a_causal_mask(seed):
    vocab, D, H, L = 11, 16, 4, 9
    model = LanguageModel(vocab, d_model=D, num_heads=H, num_layers=2, max_len=12, d_ff=24).eval()
    _randomize(model, seed)
    layers = [nn.TransformerEncoderLayer(D, H, 24, dropout=0.0, norm_first=True, batch_first=True).eval()
              for _ in range(2)]
    for i, layer in enumerate(layers):
        _randomize(layer, seed + 10 + i)
        model.blocks[i] = EncoderBlock.from_torch(layer)
    tokens = torch.randint(0, vocab, (3, L), generator=torch.Generator().manual_seed(seed))
    x = model.embed(tokens) + model.positions.embedding.weight[:L]
    causal = nn.Transformer.generate_square_subsequent_mask(L)  # PyTorch's: -inf above the diagonal
    for layer in layers:
        x = layer(x, src_mask=causal, is_causal=True)
    expected = model.read_out(model.norm(x))
    assert_close(model(tokens), expected, **TOL)


@pytest.mark.parametrize("attention_only", [False, True])
def test_a_token_never_sees_the_future(attention_only):
    torch.manual_seed(0)
    model = LanguageModel(13, d_model=16, num_heads=2, num_layers=2, max_len=10, attention_only=attention_only)
    tokens = torch.randint(0, 13, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 13
    assert_close(model(tokens)[:, :6], model(changed)[:, :6])
    assert not torch.allclose(model(tokens)[:, 6:], model(changed)[:, 6:])


def test_returned_weights_are_causal_rows_per_layer_and_head():
    torch.manual_seed(1)
    model = LanguageModel(9, d_model=12, num_heads=3, num_layers=2, max_len=8)
    logits, weights = model(torch.randint(0, 9, (2, 8)), return_weights=True)
    assert logits.shape == (2, 8, 9) and len(weights) == 2
    for w in weights:
        assert w.shape == (2, 3, 8, 8)
        assert_close(w.sum(-1), torch.ones(2, 3, 8))
        assert (w.triu(1) == 0).all()
    assert model._forward_hooks == {} and all(not b.self_attn._forward_hooks for b in model.blocks)


def test_bad_inputs_are_named():
    model = LanguageModel(5, d_model=8, num_heads=2, num_layers=1, max_len=4)
    with pytest.raises(ValueError, match="5 tokens, more than max_len=4"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"int64 tensor \(B, L\), got torch.float32 \(1, 3\)"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="d_model=8 is not divisible by num_heads=3"):
        LanguageModel(5, d_model=8, num_heads=3)


def test_next_token_probs_is_a_tempered_softmax_with_top_k():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0], [0.0, 3.0, 3.0, 1.0]])
    assert_close(next_token_probs(logits, 0.5), torch.softmax(logits / 0.5, dim=-1))
    top2 = next_token_probs(logits, 1.0, top_k=2)
    expected = torch.softmax(logits.masked_fill(torch.tensor([[False, False, True, True], [True, False, False, True]]),
                                                float("-inf")), dim=-1)
    assert_close(top2, expected)
    assert next_token_probs(logits, 1.0, top_k=1)[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert_close(next_token_probs(logits, 1.0, top_k=1)[1], torch.tensor([0.0, 0.5, 0.5, 0.0]))  # a tie keeps both
    assert_close(next_token_probs(logits, 1e-4)[0], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    for bad in (0, -1.0, True, "1"):
        with pytest.raises(ValueError, match="temperature must be a number > 0"):
            next_token_probs(logits, bad)
    with pytest.raises(ValueError, match="top_k must be a positive int"):
        next_token_probs(logits, 1.0, top_k=0)



def test_top_p_keeps_the_smallest_set_that_reaches_p():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()  # probabilities 0.5, 0.3, 0.15, 0.05
    # 0.5 alone falls short of 0.6; 0.5 + 0.3 = 0.8 reaches it: keep two, renormalised to 5/8 and 3/8
    assert_close(next_token_probs(logits, top_p=0.6), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    assert_close(next_token_probs(logits, top_p=0.4), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert_close(next_token_probs(logits, top_p=0.81), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)
    assert_close(next_token_probs(logits, top_p=1.0), torch.tensor([0.5, 0.3, 0.15, 0.05]))
    # the temperature first: at tau = 2 the probabilities go as their square roots, and 0.6 needs two
    roots = torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt()
    assert (roots[0] / roots.sum()) < 0.6 < (roots[:2].sum() / roots.sum()) < 0.999  # the hand count below holds
    assert_close(next_token_probs(logits, 2.0, top_p=0.6), torch.cat([roots[:2] / roots[:2].sum(), torch.zeros(2)]))
    # top-k first, then top-p on what top-k left: 0.625 alone reaches 0.6
    assert_close(next_token_probs(logits, top_k=2, top_p=0.6), torch.tensor([1.0, 0.0, 0.0, 0.0]))


def test_top_p_keeps_ties_and_works_on_rows():
    logits = torch.tensor([[1.0, 1.0, 0.0, -1.0], [0.0, 2.0, -3.0, 0.0]])
    kept = next_token_probs(logits, top_p=0.1) > 0  # the likeliest alone reaches 0.1: its ties stay
    assert kept.tolist() == [[True, True, False, False], [False, True, False, False]]
    assert_close(next_token_probs(logits, top_p=0.1)[0], torch.tensor([0.5, 0.5, 0.0, 0.0]))
    p = torch.softmax(logits[1], dim=-1)  # 2.0 has p ~ 0.78; with 0.85 the two tied zeros both join
    assert p[1] < 0.85 < p[1] + p[0]
    assert_close(next_token_probs(logits, top_p=0.85)[1], torch.softmax(logits[1].masked_fill(
        torch.tensor([False, False, True, False]), float("-inf")), dim=-1))
    batch = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    assert_close(next_token_probs(batch, 0.7, 4, 0.8),
                 torch.stack([torch.stack([next_token_probs(row, 0.7, 4, 0.8) for row in rows]) for rows in batch]))
    for bad in (0, 0.0, 1.5, -0.2, float("nan"), True, "0.9"):
        with pytest.raises(ValueError, match=r"top_p must be a number in \(0, 1\]"):
            next_token_probs(logits, top_p=bad)

def test_generate_with_top_1_is_greedy_and_crops_to_max_len():
    torch.manual_seed(2)
    model = LanguageModel(7, d_model=8, num_heads=2, num_layers=1, max_len=5).eval()
    prompt = torch.tensor([1, 2, 3, 4, 5, 6])  # longer than max_len: the model sees the last 5
    out = generate(model, prompt, 4, top_k=1, generator=torch.Generator().manual_seed(0))
    tokens = prompt.clone()
    for _ in range(4):
        tokens = torch.cat([tokens, model(tokens[-5:][None])[0, -1].argmax().reshape(1)])
    assert out.tolist() == tokens[6:].tolist()
    # a tiny top_p keeps only the likeliest token: greedy too
    assert generate(model, prompt, 4, top_p=1e-6, generator=torch.Generator().manual_seed(1)).tolist() == out.tolist()


def test_repeated_tokens_repeat():
    x = repeated_tokens(3, 5, 10, torch.Generator().manual_seed(0))
    assert x.shape == (3, 10) and x.dtype == torch.long and torch.equal(x[:, :5], x[:, 5:])


def test_scores_on_weights_with_a_known_answer():
    T = 4
    previous = torch.zeros(1, 2, 2 * T, 2 * T)
    previous[0, 0, 0, 0] = 1.0
    for i in range(1, 2 * T):
        previous[0, 0, i, i - 1] = 1.0  # head 0: always the previous token
    previous[0, 1] = torch.eye(2 * T)  # head 1: always itself
    assert_close(previous_token_score(previous), torch.tensor([1.0, 0.0]))
    induction = torch.zeros(1, 1, 2 * T, 2 * T)
    for i in range(2 * T):
        induction[0, 0, i, i - T + 1 if i >= T else i] = 1.0
    assert_close(induction_score(induction, T), torch.tensor([1.0]))
    assert_close(induction_score(previous, T), torch.tensor([1.0 if T == 2 else 0.0, 0.0]))
    uniform = torch.tril(torch.ones(2 * T, 2 * T))
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None]
    expected = torch.tensor([sum(1 / (i + 1) for i in range(T, 2 * T)) / T])
    assert_close(induction_score(uniform, T), expected)
    with pytest.raises(ValueError, match="expected 2 \\* half_len = 6"):
        induction_score(induction, 3)
    with pytest.raises(ValueError, match=r"\(B, H, L, L\)"):
        previous_token_score(torch.zeros(2, 3))


def test_windows_are_source_slices_with_targets_one_token_later():
    source = torch.arange(100)
    inputs, targets = windows(source, context=7, batch_size=5, generator=torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (5, 7) and inputs.dtype == torch.long
    starts = inputs[:, 0]
    assert torch.equal(inputs, starts[:, None] + torch.arange(7))  # contiguous slices of the source
    assert torch.equal(targets, inputs + 1)  # the next token of each position
    assert int(targets.max()) <= 99  # never past the end
    again, _ = windows(source, 7, 5, torch.Generator().manual_seed(0))
    assert torch.equal(again, inputs)  # one seed, one batch


@pytest.mark.parametrize(("source", "context", "batch_size", "words"), [
    (torch.arange(100).float(), 7, 5, "1-D int64"),
    (torch.arange(100).view(10, 10), 7, 5, "1-D int64"),
    (torch.arange(8), 7, 5, "too few"),
    (torch.arange(100), 0, 5, "context"),
    (torch.arange(100), 7, -1, "batch_size"),
])
def test_windows_refuses_bad_input_by_name(source, context, batch_size, words):
    with pytest.raises(ValueError, match=words):
        windows(source, context, batch_size)


def test_bigram_loss_is_the_count_table_cross_entropy():
    train = torch.tensor([0, 1, 0, 1, 0, 2])  # after 0: 1, 1, 2; after 1: 0, 0; after 2: nothing
    held_out = torch.tensor([0, 1, 0])
    # add-one smoothing, |V| = 3: p(1 | 0) = (2 + 1) / (3 + 3), p(0 | 1) = (2 + 1) / (2 + 3)
    expected = -(math.log(3 / 6) + math.log(3 / 5)) / 2
    assert bigram_loss(train, held_out, 3) == pytest.approx(expected, rel=1e-12)
    # no smoothing to speak of: the maximum-likelihood table, and a uniform table's loss is log |V|
    assert bigram_loss(train, held_out, 3, smoothing=1e-9) == pytest.approx(-(math.log(2 / 3) + math.log(1.0)) / 2, abs=1e-6)
    assert bigram_loss(torch.tensor([0, 0]), torch.tensor([1, 2, 1]), 4, smoothing=1e9) == pytest.approx(math.log(4), rel=1e-6)


def test_bigram_loss_names_bad_input():
    with pytest.raises(ValueError, match="held_out holds ids outside 0..2"):
        bigram_loss(torch.tensor([0, 1]), torch.tensor([0, 3]), 3)
    with pytest.raises(ValueError, match="train must be a 1-D int64"):
        bigram_loss(torch.tensor([[0, 1]]), torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match="smoothing must be a number > 0"):
        bigram_loss(torch.tensor([0, 1]), torch.tensor([0, 1]), 3, smoothing=0)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("discount", [0.5, 0.9])
def test_every_ngram_row_is_a_distribution(n, discount):
    train = torch.randint(0, 5, (300,), generator=torch.Generator().manual_seed(n))
    contexts = [train[10:10 + n - 1].tolist(), [4] * (n - 1), train[50:50 + n - 2].tolist(), [], [3, 3, 3, 3, 3]]
    for context in contexts:
        probability = _kneser_ney(_kneser_ney_tables(train.tolist(), n), 5, discount)
        probs = [probability(tuple(context), c) for c in range(5)]
        assert all(p > 0 for p in probs) and sum(probs) == pytest.approx(1.0, abs=1e-9), (context, probs)


def test_the_counted_tables_equal_the_definition_at_every_order_and_discount():
    """ngram_loss and best_ngram_loss count with tensors (_ngram_losses); _kneser_ney reads the definition
    token by token. Short texts, small vocabularies and orders longer than the held-out text included: a
    held-out token near the start reads all the tokens before it, fewer than n - 1."""
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        vocab_size = 2 + seed % 4
        train = torch.randint(0, vocab_size, (10 + 5 * seed,), generator=g)
        held = torch.randint(0, vocab_size, (3 + seed,), generator=g)
        counted = _ngram_losses(train, held, vocab_size, 6, (0.5, 1.0))
        for (n, discount), loss in counted.items():
            by_definition = _kneser_ney(_kneser_ney_tables(train.tolist(), n), vocab_size, discount)
            held_ids = held.tolist()
            expected = -sum(math.log(by_definition(tuple(held_ids[max(0, i - n + 1):i]), c))
                            for i, c in enumerate(held_ids)) / len(held_ids)
            assert loss == pytest.approx(expected, rel=1e-12), (seed, n, discount)


def test_the_ngram_table_by_hand_and_against_the_bigram_table():
    train = torch.tensor([0, 1, 0, 1, 0, 2])
    # n = 1, raw counts 3, 2, 1 (N = 6, T = 3): p(0) = (3 - D)/6 + D * 3/6 * 1/3 = 1/2 with D = 0.5.
    assert ngram_loss(train, torch.tensor([0, 0]), 3, 1, 0.5) == pytest.approx(math.log(2), rel=1e-12)
    # Below the top order the counts are continuations: 0, 1 and 2 each follow one distinct token, so
    # p_1(c) = (1 - D)/3 + D * 3/3 * 1/3 = 1/3 for every c.
    # Order 2 after 0: N(0 .) = 3 (1, 1, 2), T = 2: p(1 | 0) = (2 - D)/3 + D * 2/3 * p_1(1), p_1(1) = 1/3.
    p_1_given_0 = (2 - 0.5) / 3 + 0.5 * 2 / 3 * (1 / 3)
    held = torch.tensor([0, 1])  # p(0) at the start (no context), then p(1 | 0)
    assert ngram_loss(train, held, 3, 2, 0.5) == pytest.approx(-(math.log(1 / 3) + math.log(p_1_given_0)) / 2, rel=1e-12)
    # On text the longer contexts pay: the best table beats the bigram table by a wide margin.
    tokenizer = CharTokenizer(course_text())
    data = tokenizer.encode(course_text()[:40_000])
    train_text, held_text = data[:36_000], data[36_000:]
    loss, n, discount = best_ngram_loss(train_text, held_text, tokenizer.vocab_size, max_n=5, discounts=(0.75,))
    assert n > 2 and loss < bigram_loss(train_text, held_text, tokenizer.vocab_size) - 0.3
    assert loss == ngram_loss(train_text, held_text, tokenizer.vocab_size, n, 0.75)


def test_ngram_loss_names_bad_input():
    with pytest.raises(ValueError, match="held_out holds ids outside 0..2"):
        ngram_loss(torch.tensor([0, 1]), torch.tensor([0, 3]), 3, 2)
    with pytest.raises(ValueError, match="discount must be a number in"):
        ngram_loss(torch.tensor([0, 1]), torch.tensor([0, 1]), 3, 2, discount=1.5)
    with pytest.raises(ValueError, match="n must be a positive int"):
        ngram_loss(torch.tensor([0, 1]), torch.tensor([0, 1]), 3, 0)
