"""The chapters' slider figures: one module per chapter, named after it, one function per figure.

Each function takes what its chapter computed (or the data it shows) and returns an
``lessons_src.widgets.InteractiveFigure``; the sums behind the pictures are small pure functions
next to it, tested in ``tests/test_figures.py``. A chapter shows the idea and one call, e.g.::

    from lessons_src.figures import masking
    masking.mask_explorer(mask_and_weights, seq_lens, paddings)

- ``attention_from_scratch.steer_query``: one 2-D query steered over four keys
- ``scaling.score_explorer``: the scores' spread and the weights by d_k, scaled or not
- ``masking.mask_explorer``: a padded sentence's mask and weights, causal or not
- ``multi_head_attention.head_explorer``: one layer cut into H heads, one head at a time
- ``training_attention.emergence_explorer``: the anti-diagonal appearing during training
- ``encoder_block.table_explorer``: the sinusoidal table, a row and a column at a time
- ``layer_norm_placement.depth_explorer``: gradient norms per layer, post-LN and pre-LN
- ``decoder_and_cross_attention.cross_attention_explorer``: cross-attention during training
- ``efficient_attention.window_explorer``: memory and time by window and length
- ``grouped_query_and_kv_cache.sharing_explorer``: KV heads shared by query heads, cache sizes
- ``rotary_embeddings.rope_explorer``: a rotated query and key, and their score by distance
- ``tiled_attention.tile_explorer``: the online softmax converging, block of keys after block
- ``alibi.bias_explorer``: ALiBi's bias of each head, as a matrix and by distance
- ``language_model.temperature_explorer``: the next character's distribution and a sample, by
  temperature and top-k
- ``induction_heads.induction_explorer``: an induction head forming during training
- ``modern_block.ladder_explorer``: from the 2017 block to a Llama-style one, step by step
- ``modern_block.shift_explorer``: one head's scores as every position shifts, rotary inside
  attention against sinusoidal vectors added to the input
- ``todays_attention.cap_and_sink_explorer``: one query's scores through a soft cap and a learned sink

Not a chapter's module, so not in ``__all__``: ``diagrams``, the static block diagrams of multi-head
attention, the post-LN and pre-LN encoder blocks, the decoder block, and the 2017 block beside a
Llama-style one, each a plain ``Figure``
with its alt text next to it (``diagrams.MULTI_HEAD_ATTENTION_ALT``, ...)::

    from lessons_src.figures import diagrams
    diagrams.encoder_blocks()
"""

__all__ = [
    "attention_from_scratch",
    "scaling",
    "masking",
    "multi_head_attention",
    "training_attention",
    "encoder_block",
    "layer_norm_placement",
    "decoder_and_cross_attention",
    "efficient_attention",
    "grouped_query_and_kv_cache",
    "rotary_embeddings",
    "tiled_attention",
    "alibi",
    "language_model",
    "induction_heads",
    "modern_block",
    "todays_attention",
]
