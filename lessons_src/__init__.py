"""lessons_src: the tested code behind the course "Attention from first principles".

Each module holds one concept and names the chapter that teaches it:

- ``attention``: scaled dot-product attention (chapter "Attention from scratch")
- ``masks``: causal, padding and sliding-window masks, True = may attend (chapter "Masking")
- ``multihead``: split/merge heads, multi-head attention, PyTorch's mask conventions (chapter
  "Multi-head attention")
- ``data``, ``training``: toy tasks and a training loop (chapter "Training attention"), the warm-up
  (chapter "Layer norm placement")
- ``positional``: sinusoidal and learned positions (chapter "The transformer encoder block")
- ``encoder``: layer norm, feed-forward, encoder and decoder blocks (chapters "The transformer encoder
  block" and "Decoder blocks and cross-attention")
- ``efficient``: linear attention and PyTorch's fused kernels (chapter "Efficient attention")
- ``tiled``: the online softmax and attention computed tile by tile, FlashAttention's algorithm
  (chapter "Tiled attention and the online softmax")
- ``gqa``: grouped-query attention and the KV cache (chapter "Grouped-query attention and the KV cache")
- ``rotary``: rotary position embeddings (chapter "Rotary position embeddings")
- ``llm``: RMSNorm, SwiGLU and a decoder block and model with a switch for every change from the 2017
  block to a Llama-style one (chapter "From the original block to a modern LLM block"), and the switches of
  today's open models: QK-norm, soft-capping, sinks, sliding/global layers, gated outputs (chapter
  "Attention in today's open models")
- ``mla``: multi-head latent attention (DeepSeek), its latent cache and the absorbed decode (chapter
  "Multi-head latent attention")
- ``alibi``: attention with linear biases, ALiBi (chapter "ALiBi and length extrapolation")
- ``language_model``: a small decoder-only model, sampling, and the scores of previous-token and
  induction heads (chapters "A language model and its heads" and "Induction heads")
- ``experiments``: small experiments built so that the mechanism decides them (the trigger task), and
  the rule that reads a comparison over seeds (chapter "Attention in today's open models")
- ``device``: device and seeding helpers, used by every chapter
- ``_validate``: the input checks every public function and ``forward`` makes once, at its boundary
- ``plotting``, ``widgets``: heatmaps, and sliders that work live and on the static site
- ``explorer``: a trained model the reader types into, live in a kernel and in the browser of the static
  site (chapter "A language model and its heads")
- ``figures``: each chapter's slider figure, one module per chapter, named after it
- ``profiling``: time and peak memory of a call, on a CPU or a GPU (chapter "Efficient attention")
- ``checks``: exercise checks that name the learner's mistake
- ``pretrained``: Hugging Face checkpoints (Llama, SmolLM2, Mistral, Qwen 2.5, Qwen3, GPT-2) read into the
  course's ``DecoderLM``, and course models written in their format (chapter "From the original block to a
  modern LLM block")
- ``zoo``: the course's trained models, their corpus (Python's standard library), recipes, weights and cards
  (chapter "A language model and its heads")
"""

from . import zoo  # lessons_src.zoo.load(name): the trained models
from .alibi import alibi_bias, alibi_slopes
from .attention import scaled_dot_product_attention
from .data import reversal_batch, shift_batch
from .device import default_device, one_cpu_thread, run_in_parallel, seed_everything
from .efficient import elu_feature_map, fused_attention, linear_attention
from .encoder import (
    DecoderBlock,
    Encoder,
    EncoderBlock,
    EncoderConfig,
    EncoderModel,
    FeedForward,
    count_parameters,
    layer_norm,
)
from .experiments import (
    SeedComparison,
    compare_seeds,
    compare_unpaired,
    position_only_loss,
    reach_loss,
    train_trigger,
    trigger_batch,
    trigger_tokenizer,
)
from .explorer import ModelExplorer
from .gqa import CausalSelfAttention, GroupedQueryAttention, KVCache, kv_cache_bytes
from .language_model import (
    CharTokenizer,
    LanguageModel,
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
from .llm import (
    MLP,
    Attention,
    DecoderConfig,
    DecoderLayer,
    DecoderLM,
    RMSNorm,
    SlidingKVCache,
    SwiGLU,
    cache_bytes,
    rename_hf_llama,
    softmax_with_sink,
    swiglu_width,
)
from .masks import causal_mask, padding_mask, sliding_window_mask
from .mla import (
    LatentCache,
    MLAConfig,
    MLADecoderLayer,
    MLADecoderLM,
    MultiHeadLatentAttention,
    absorbed_scores,
    mla_cache_elements,
    rename_hf_deepseek,
)
from .multihead import MultiHeadAttention, attn_mask_to_mask, key_padding_mask_to_mask, merge_heads, split_heads
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, sinusoidal_positional_encoding
from .pretrained import config_from_hf, from_pretrained, save_pretrained
from .rotary import apply_rope, rope_frequencies, rope_layout_permutation
from .tiled import online_softmax_steps, online_softmax_update, tiled_attention
from .training import TrainResult, antidiagonal_mass, diagonal_mass, train_attention, warmup_factor

__version__ = "0.1.0"

__all__ = [
    "zoo",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "default_device",
    "seed_everything",
    "one_cpu_thread",
    "run_in_parallel",
    "split_heads",
    "merge_heads",
    "MultiHeadAttention",
    "key_padding_mask_to_mask",
    "attn_mask_to_mask",
    "sinusoidal_positional_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "layer_norm",
    "FeedForward",
    "EncoderBlock",
    "Encoder",
    "EncoderConfig",
    "EncoderModel",
    "DecoderBlock",
    "count_parameters",
    "GroupedQueryAttention",
    "CausalSelfAttention",
    "KVCache",
    "kv_cache_bytes",
    "rope_frequencies",
    "apply_rope",
    "rope_layout_permutation",
    "RMSNorm",
    "SwiGLU",
    "swiglu_width",
    "DecoderConfig",
    "Attention",
    "MLP",
    "DecoderLayer",
    "DecoderLM",
    "rename_hf_llama",
    "MLAConfig",
    "LatentCache",
    "MultiHeadLatentAttention",
    "MLADecoderLayer",
    "MLADecoderLM",
    "absorbed_scores",
    "mla_cache_elements",
    "rename_hf_deepseek",
    "config_from_hf",
    "from_pretrained",
    "save_pretrained",
    "SlidingKVCache",
    "cache_bytes",
    "softmax_with_sink",
    "alibi_slopes",
    "alibi_bias",
    "course_text",
    "CharTokenizer",
    "LanguageModel",
    "next_token_probs",
    "generate",
    "repeated_tokens",
    "windows",
    "bigram_loss",
    "ngram_loss",
    "best_ngram_loss",
    "previous_token_score",
    "induction_score",
    "sliding_window_mask",
    "elu_feature_map",
    "linear_attention",
    "fused_attention",
    "online_softmax_update",
    "online_softmax_steps",
    "tiled_attention",
    "reversal_batch",
    "shift_batch",
    "train_attention",
    "TrainResult",
    "antidiagonal_mass",
    "diagonal_mass",
    "warmup_factor",
    "ModelExplorer",
    "SeedComparison",
    "compare_seeds",
    "compare_unpaired",
    "position_only_loss",
    "reach_loss",
    "train_trigger",
    "trigger_batch",
    "trigger_tokenizer",
    "__version__",
]
