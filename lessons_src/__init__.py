"""lessons_src: the tested code behind the course "Attention from first principles".

Each module holds one concept and names the chapter that teaches it:

- ``attention``: scaled dot-product attention (chapter "Attention from scratch")
- ``masks``: causal and padding masks, True = may attend (chapter "Masking")
- ``multihead``: multi-head attention and PyTorch's mask conventions (chapter "Multi-head attention")
- ``positional``: sinusoidal and learned positions (chapter "The encoder block")
- ``encoder``: feed-forward, encoder and decoder blocks (chapters "The encoder block", "Variants")
- ``variants``: grouped-query, rotary, sliding-window, linear and fused attention, KV cache (chapter "Variants")
- ``data``, ``training``: toy tasks and a training loop (chapter "Training attention")
- ``plotting``, ``widgets``: heatmaps, and sliders that work live and on the static site
- ``checks``: exercise checks that name the learner's mistake
"""

from .attention import scaled_dot_product_attention
from .data import reversal_batch, shift_batch
from .device import default_device, one_cpu_thread, seed_everything
from .encoder import DecoderBlock, Encoder, EncoderBlock, FeedForward, count_parameters
from .masks import causal_mask, padding_mask
from .multihead import MultiHeadAttention, attn_mask_to_mask, key_padding_mask_to_mask
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, sinusoidal_positional_encoding
from .training import TrainResult, antidiagonal_mass, diagonal_mass, train_attention
from .variants import (
    CausalSelfAttention,
    GroupedQueryAttention,
    KVCache,
    apply_rope,
    fused_attention,
    kv_cache_bytes,
    linear_attention,
    rope_frequencies,
    sliding_window_mask,
)

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "default_device",
    "seed_everything",
    "one_cpu_thread",
    "MultiHeadAttention",
    "key_padding_mask_to_mask",
    "attn_mask_to_mask",
    "sinusoidal_positional_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "FeedForward",
    "EncoderBlock",
    "Encoder",
    "DecoderBlock",
    "count_parameters",
    "GroupedQueryAttention",
    "CausalSelfAttention",
    "KVCache",
    "kv_cache_bytes",
    "rope_frequencies",
    "apply_rope",
    "sliding_window_mask",
    "linear_attention",
    "fused_attention",
    "reversal_batch",
    "shift_batch",
    "train_attention",
    "TrainResult",
    "antidiagonal_mass",
    "diagonal_mass",
    "__version__",
]
