"""Exercise checks that name the learner's mistake: one module per chapter, named after it.

Every check returns a :class:`CheckResult` (truthy when it passed; ``str()`` is the feedback,
whose first line names the mistake) and never raises or hangs because of the learner's code;
with ``LESSONS_SRC_STRICT=1`` a failing check raises ``AssertionError``. The checks are built on
``_framework.py`` (time-limited learner calls, one judge, tables of cases and mistakes),
``_steps.py`` (each reference as the chapter's named steps, and the search over small changes to them
that names a mistake no table lists) and ``_result.py`` (the result and the device rules).
"""

from ._result import CheckResult, strict_mode
from .alibi import check_alibi_bias
from .attention_from_scratch import check_scaled_dot_product_attention
from .decoder_and_cross_attention import check_decoder_attention
from .efficient_attention import check_sink_window_mask, check_sliding_window_mask
from .encoder_block import check_pre_ln_encoder
from .grouped_query_and_kv_cache import check_attend_with_cache, check_expand_kv
from .induction_heads import check_prefix_matching_score
from .language_model import check_next_token_probs
from .latent_attention import check_absorbed_scores
from .layer_norm_placement import check_warmup_lr
from .masking import check_document_causal_mask, check_masks
from .modern_block import check_rms_norm, check_swiglu
from .multi_head_attention import check_head_contributions
from .rotary_embeddings import check_apply_rope, check_rotary_decode_step
from .scaling import check_attention_weights
from .tiled_attention import check_online_softmax_update
from .todays_attention import check_softmax_with_sink
from .training_attention import check_shift_attention

__all__ = [
    "CheckResult",
    "strict_mode",
    "check_scaled_dot_product_attention",
    "check_masks",
    "check_document_causal_mask",
    "check_head_contributions",
    "check_pre_ln_encoder",
    "check_apply_rope",
    "check_rotary_decode_step",
    "check_sliding_window_mask",
    "check_sink_window_mask",
    "check_expand_kv",
    "check_attend_with_cache",
    "check_attention_weights",
    "check_warmup_lr",
    "check_decoder_attention",
    "check_shift_attention",
    "check_online_softmax_update",
    "check_alibi_bias",
    "check_next_token_probs",
    "check_prefix_matching_score",
    "check_rms_norm",
    "check_swiglu",
    "check_absorbed_scores",
    "check_softmax_with_sink",
]
