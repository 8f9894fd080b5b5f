"""Exercise checks that name the learner's mistake: one module per chapter.

Every check returns a :class:`CheckResult` (truthy when it passed; ``str()`` is the feedback)
and never raises because of the learner's code; with ``LESSONS_SRC_STRICT=1`` a failing check
raises ``AssertionError``. See ``_result.py``.
"""

from ._result import CheckResult, strict_mode
from .attention import check_scaled_dot_product_attention
from .decoder import check_decoder_attention
from .efficient import check_sliding_window_mask
from .encoder import check_pre_ln_encoder
from .gqa import check_attend_with_cache, check_expand_kv
from .layer_norm import check_warmup_lr
from .masking import check_masks
from .multihead import check_multi_head_attention
from .rope import check_apply_rope
from .scaling import check_attention_weights
from .training import check_shift_attention

__all__ = [
    "CheckResult",
    "strict_mode",
    "check_scaled_dot_product_attention",
    "check_masks",
    "check_multi_head_attention",
    "check_pre_ln_encoder",
    "check_apply_rope",
    "check_sliding_window_mask",
    "check_expand_kv",
    "check_attend_with_cache",
    "check_attention_weights",
    "check_warmup_lr",
    "check_decoder_attention",
    "check_shift_attention",
]
