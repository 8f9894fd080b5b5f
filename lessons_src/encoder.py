"""The transformer block: attention and a feed-forward net, each wrapped in residual + LayerNorm.

Taught in the chapter "The transformer encoder block" (``FeedForward``, ``EncoderBlock``,
``Encoder``) and in the chapter "Decoder blocks and cross-attention" (``DecoderBlock``). Each block
mirrors PyTorch's layer attribute for attribute, and ``from_torch`` copies a PyTorch layer's
weights so a chapter can check its block against ``nn.TransformerEncoderLayer``.
Masks are the course's: boolean, **True = may attend**.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _validate as check
from .masks import causal_mask
from .multihead import MultiHeadAttention

__all__ = ["layer_norm", "FeedForward", "EncoderBlock", "Encoder", "DecoderBlock", "count_parameters", "EncoderConfig",
           "EncoderModel"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU}


def _make_activation(activation: str, where: str) -> nn.Module:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{where}: activation must be 'relu' or 'gelu', got {activation!r}")
    return _ACTIVATIONS[activation]()


def _activation_name(activation: str | Callable[[Tensor], Tensor], where: str) -> str:
    """Name PyTorch's stored activation (a string, F.relu/F.gelu or nn.ReLU/nn.GELU) as ours."""
    if activation in ("relu", "gelu"):
        return activation  # type: ignore[return-value]
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    # nn.GELU(approximate="tanh") is a different function; only the exact GELU is ours.
    if activation is F.gelu or (isinstance(activation, nn.GELU) and activation.approximate == "none"):
        return "gelu"
    raise ValueError(f"{where}: activation must be relu or (exact) gelu, got {activation!r}")


def _check_norms(layer: nn.Module, names: tuple[str, ...], where: str) -> float:
    """Return the LayerNorms' shared eps, refusing layers whose norms disagree."""
    eps = {getattr(layer, n).eps for n in names}
    if len(eps) != 1:
        raise ValueError(f"{where}: the layer's norms have different eps values {sorted(eps)}")
    return eps.pop()


def _check_block_input(x: Tensor, mask: Tensor | None, attention: MultiHeadAttention, where: str) -> None:
    """x ``(B, L, D)`` for a stack of self-attention blocks, and a mask for its ``(B, H, L, L)`` scores."""
    check.sequence(x, "x", attention.d_model, where, weight=attention.w_q.weight)
    if mask is not None:
        B, L, _ = x.shape
        check.mask(mask, (B, attention.num_heads, L, L), x.device, where, per_sequence=True)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last dim, written out: ``γ ⊙ (x - μ) / √(σ² + ε) + β``, ``(..., D) -> (..., D)``.

    μ and σ² are each vector's mean and *biased* variance (divided by D, as ``nn.LayerNorm``
    does); ``weight`` γ and ``bias`` β are ``(D,)``. The blocks use ``nn.LayerNorm``, which
    computes the same. Taught in the chapter "The transformer encoder block".
    """
    where = "layer_norm"
    if not isinstance(x, Tensor) or x.dim() < 1:
        raise ValueError(f"{where}: x must be a tensor (..., D), got {getattr(x, 'shape', type(x).__name__)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if not isinstance(t, Tensor) or tuple(t.shape) != (x.size(-1),):
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{where}: {name} must be (D,) = ({x.size(-1)},) for x {tuple(x.shape)}, got {shape}")
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1): divides by D, as nn.LayerNorm does
    return weight * (x - mean) / torch.sqrt(var + eps) + bias  # (..., D)


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters in ``module`` (only those with ``requires_grad`` if ``trainable_only``).

    Taught in the chapter "The transformer encoder block".
    """
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


class FeedForward(nn.Module):
    """Position-wise feed-forward net: ``(B, L, D) -> (B, L, d_ff) -> (B, L, D)``.

    ``linear2(dropout(activation(linear1(x))))``, the same at every position; names as in
    PyTorch's ``TransformerEncoderLayer``. Taught in the chapter "The transformer encoder block".
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", bias: bool = True
    ) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.activation = _make_activation(activation, "FeedForward")
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, L, D) -> (B, L, D)``."""
        hidden = self.dropout(self.activation(self.linear1(x)))  # (B, L, d_ff)
        return self.linear2(hidden)  # (B, L, D)


class EncoderBlock(nn.Module):
    """One encoder layer: self-attention then feed-forward, each with residual + LayerNorm.

    Post-LN (``norm_first=False``, the original paper): ``x = norm(x + sublayer(x))``;
    pre-LN (``norm_first=True``): ``x = x + sublayer(norm(x))``. Shapes ``(B, L, D) -> (B, L, D)``.
    Taught in the chapter "The transformer encoder block".
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _sa(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask, check_inputs=False)[0])  # (B, L, D)

    def _ff(self, x: Tensor) -> Tensor:
        return self.dropout2(self.ff(x))  # (B, L, D)

    def forward(self, x: Tensor, mask: Tensor | None = None, check_inputs: bool = True) -> Tensor:
        """``(B, L, D) -> (B, L, D)``.

        ``mask`` is boolean, True = may attend, read as by :class:`MultiHeadAttention`: ``(L, L)``,
        ``(B, L, L)`` (one per sequence), or anything broadcastable to ``(B, H, L, L)``, e.g.
        padding ``padding_mask(lengths)[:, None, None, :]`` ``(B, 1, 1, L)``. The block checks
        ``x`` and ``mask`` here, once (``check_inputs=False`` skips that, for a stack that has).
        """
        if check_inputs:
            _check_block_input(x, mask, self.self_attn, "EncoderBlock")
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask)
            x = x + self._ff(self.norm2(x))
        else:
            x = self.norm1(x + self._sa(x, mask))
            x = self.norm2(x + self._ff(x))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """An :class:`EncoderBlock` with the weights and settings of a PyTorch encoder layer.

        Reads ``norm_first``, the activation (string, ``F.relu``/``F.gelu`` or module), eps,
        ``d_ff``, dropout and ``bias`` from ``layer``. The copy is always batch first: with a
        ``batch_first=False`` layer, feed it ``x.transpose(0, 1)``. Taught in the chapter "The transformer encoder block".
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise ValueError(
                f"EncoderBlock.from_torch: expected nn.TransformerEncoderLayer, got {type(layer).__name__}"
            )
        weight = layer.linear1.weight
        new = cls(
            d_model=layer.linear1.in_features,
            num_heads=layer.self_attn.num_heads,
            d_ff=layer.linear1.out_features,
            dropout=layer.dropout.p,
            norm_first=layer.norm_first,
            activation=_activation_name(layer.activation, "EncoderBlock.from_torch"),
            layer_norm_eps=_check_norms(layer, ("norm1", "norm2"), "EncoderBlock.from_torch"),
            bias=layer.linear1.bias is not None,
        ).to(device=weight.device, dtype=weight.dtype)
        new.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
        new.ff.linear1.load_state_dict(layer.linear1.state_dict())
        new.ff.linear2.load_state_dict(layer.linear2.state_dict())
        new.norm1.load_state_dict(layer.norm1.state_dict())
        new.norm2.load_state_dict(layer.norm2.state_dict())
        new.train(layer.training)
        return new


class Encoder(nn.Module):
    """A stack of ``num_layers`` :class:`EncoderBlock` s, plus a final LayerNorm when pre-LN.

    Pre-LN blocks leave their output un-normalised, so ``norm_first=True`` adds ``norm``;
    post-LN blocks end in a LayerNorm already (``norm`` is None). ``(B, L, D) -> (B, L, D)``.
    Taught in the chapter "The transformer encoder block".
    """

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        check.positive_int(num_layers, "num_layers", "Encoder")
        self.layers = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps, bias)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias) if norm_first else None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``(B, L, D) -> (B, L, D)``; ``mask`` as in :meth:`EncoderBlock.forward` (True = may attend)."""
        _check_block_input(x, mask, self.layers[0].self_attn, "Encoder")
        for layer in self.layers:
            x = layer(x, mask, check_inputs=False)  # (B, L, D): checked once, above
        if self.norm is not None:
            x = self.norm(x)
        return x

    @classmethod
    def from_torch(cls, enc: nn.TransformerEncoder) -> Encoder:
        """An :class:`Encoder` with the weights of a PyTorch ``nn.TransformerEncoder``.

        Each layer goes through :meth:`EncoderBlock.from_torch`; ``norm`` copies ``enc.norm``
        (a LayerNorm or None, whatever ``norm_first`` is). Taught in the chapter "The transformer encoder block".
        """
        if not isinstance(enc, nn.TransformerEncoder):
            raise ValueError(f"Encoder.from_torch: expected nn.TransformerEncoder, got {type(enc).__name__}")
        norm = enc.norm
        if norm is not None and not (isinstance(norm, nn.LayerNorm) and norm.elementwise_affine):
            raise ValueError(f"Encoder.from_torch: the final norm must be an affine nn.LayerNorm or None, got {norm!r}")
        layers = [EncoderBlock.from_torch(layer) for layer in enc.layers]
        first = layers[0]
        # Built with a final norm exactly when enc has one; then the copied layers are swapped in.
        new = cls(
            len(layers),
            first.d_model,
            first.self_attn.num_heads,
            first.ff.linear1.out_features,
            norm_first=norm is not None,
            layer_norm_eps=norm.eps if norm is not None else 1e-5,
            bias=norm is None or norm.bias is not None,
        )
        new.layers = nn.ModuleList(layers)
        if norm is not None:
            new.norm.to(device=norm.weight.device, dtype=norm.weight.dtype)
            new.norm.load_state_dict(norm.state_dict())
        new.train(enc.training)
        return new


class DecoderBlock(nn.Module):
    """One decoder layer: causal self-attention, cross-attention over ``memory``, feed-forward.

    Each sublayer has residual + LayerNorm, post-LN or pre-LN as in :class:`EncoderBlock`;
    attribute names mirror ``nn.TransformerDecoderLayer`` (``cross_attn`` is its
    ``multihead_attn``). Shapes: x ``(B, L, D)``, memory ``(B, Lm, D)`` -> ``(B, L, D)``.
    Taught in the chapter "Decoder blocks and cross-attention".
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, bias=bias)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _sa(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask, check_inputs=False)[0])  # (B, L, D)

    def _ca(self, x: Tensor, memory: Tensor, mask: Tensor | None) -> Tensor:
        return self.dropout2(self.cross_attn(x, memory, memory, mask, check_inputs=False)[0])  # (B, L, D)

    def _ff(self, x: Tensor) -> Tensor:
        return self.dropout3(self.ff(x))  # (B, L, D)

    def forward(
        self, x: Tensor, memory: Tensor, self_mask: Tensor | None = None, memory_mask: Tensor | None = None
    ) -> Tensor:
        """``x (B, L, D), memory (B, Lm, D) -> (B, L, D)``; position t sees x[:t+1] and all of memory.

        The causal mask is applied here; ``self_mask`` (e.g. target padding ``(B, 1, 1, L)``) is
        AND-ed with it. ``memory_mask`` masks the memory, e.g. source padding ``(B, 1, 1, Lm)``.
        Both are boolean, True = may attend, and read as by :class:`MultiHeadAttention` (a 3-D
        mask is one per sequence); the block checks every input here, once.
        """
        where = "DecoderBlock"
        check.sequence(x, "x", self.d_model, where, weight=self.self_attn.w_q.weight)
        check.sequence(memory, "memory", self.d_model, where, weight=self.self_attn.w_q.weight)
        check.same_batch(where, x=x, memory=memory)
        B, L, _ = x.shape
        Lm = memory.size(1)
        for name, m, Lk in (("self_mask", self_mask, L), ("memory_mask", memory_mask, Lm)):
            if m is not None:
                check.mask(m, (B, self.num_heads, L, Lk), x.device, where, name=name, per_sequence=True)
        mask = causal_mask(L, device=x.device)  # (L, L)
        if self_mask is not None:
            if self_mask.dim() == 3:
                self_mask = self_mask[:, None]  # (B, 1, L, L): one mask per sequence
            mask = mask & self_mask  # broadcast, at most (B, H, L, L)

        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask)
            x = x + self._ca(self.norm2(x), memory, memory_mask)
            x = x + self._ff(self.norm3(x))
        else:
            x = self.norm1(x + self._sa(x, mask))
            x = self.norm2(x + self._ca(x, memory, memory_mask))
            x = self.norm3(x + self._ff(x))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderBlock:
        """A :class:`DecoderBlock` with the weights of a PyTorch ``nn.TransformerDecoderLayer``.

        Our block always applies the causal mask, so it equals the PyTorch layer called with a
        causal ``tgt_mask``. Always batch first (see :meth:`EncoderBlock.from_torch`).
        Taught in the chapter "Decoder blocks and cross-attention".
        """
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise ValueError(
                f"DecoderBlock.from_torch: expected nn.TransformerDecoderLayer, got {type(layer).__name__}"
            )
        weight = layer.linear1.weight
        new = cls(
            d_model=layer.linear1.in_features,
            num_heads=layer.self_attn.num_heads,
            d_ff=layer.linear1.out_features,
            dropout=layer.dropout.p,
            norm_first=layer.norm_first,
            activation=_activation_name(layer.activation, "DecoderBlock.from_torch"),
            layer_norm_eps=_check_norms(layer, ("norm1", "norm2", "norm3"), "DecoderBlock.from_torch"),
            bias=layer.linear1.bias is not None,
        ).to(device=weight.device, dtype=weight.dtype)
        new.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
        new.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
        new.ff.linear1.load_state_dict(layer.linear1.state_dict())
        new.ff.linear2.load_state_dict(layer.linear2.state_dict())
        for name in ("norm1", "norm2", "norm3"):
            getattr(new, name).load_state_dict(getattr(layer, name).state_dict())
        new.train(layer.training)
        return new


@dataclass(frozen=True)
class EncoderConfig:
    """The sizes of a BERT-style :class:`EncoderModel`; checked when made. ``type_vocab_size``: how many
    segments the token-type embedding tells apart (BERT's sentence A and B). Taught in the chapter "The
    transformer encoder block"."""

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    d_ff: int = 256
    max_len: int = 128
    type_vocab_size: int = 2
    eps: float = 1e-12
    activation: str = "gelu"
    pooler: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_len", "type_vocab_size"):
            check.positive_int(getattr(self, name), name, "EncoderConfig")
        check.divisible(self.d_model, "d_model", self.num_heads, "num_heads", "EncoderConfig")
        _make_activation(self.activation, "EncoderConfig")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not self.eps > 0:
            raise ValueError(f"EncoderConfig: eps must be a number > 0, got {self.eps!r}")


class EncoderModel(nn.Module):
    """A BERT-style encoder: ``tokens (B, L) -> hidden states (B, L, D)``, built from this chapter's blocks.

    The embeddings of the tokens, their positions (learned) and their segments (``token_type_ids``, 0 by
    default) are summed and normalised (``embed_norm``), then ``num_layers`` post-LN :class:`EncoderBlock` s
    with GELU (BERT's layer is exactly this block). ``attention_mask (B, L)``: 1 for a token, 0 for padding,
    as Hugging Face's tokenizers give it; padded keys get no weight. ``forward(..., return_weights=True)``
    also returns each layer's attention weights ``(B, H, L, L)``. ``pooler`` (BERT's dense layer with tanh on
    the first token), when the config asks for it, is applied by :meth:`pooled`. A ``BertModel`` checkpoint
    loads with :func:`lessons_src.from_pretrained`. Taught in the chapter "The transformer encoder block".
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        if not isinstance(config, EncoderConfig):
            raise ValueError(f"EncoderModel: config must be an EncoderConfig, got {type(config).__name__}")
        c = self.config = config
        self.embed_tokens = nn.Embedding(c.vocab_size, c.d_model)
        self.embed_positions = nn.Embedding(c.max_len, c.d_model)
        self.embed_types = nn.Embedding(c.type_vocab_size, c.d_model)
        self.embed_norm = nn.LayerNorm(c.d_model, eps=c.eps)
        self.layers = nn.ModuleList(EncoderBlock(c.d_model, c.num_heads, c.d_ff, activation=c.activation,
                                                 layer_norm_eps=c.eps) for _ in range(c.num_layers))
        self.pooler = nn.Linear(c.d_model, c.d_model) if c.pooler else None

    def forward(self, tokens: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """``tokens (B, L)`` -> the last hidden state ``(B, L, D)``, or with ``return_weights=True``
        ``(hidden, [one (B, H, L, L) per layer])``. ``attention_mask (B, L)``: 1 for a token, 0 for padding
        (None: no padding); ``token_type_ids (B, L)``: each token's segment (None: all 0)."""
        c = self.config
        check.tokens(tokens, "EncoderModel")
        B, L = tokens.shape
        if L > c.max_len:
            raise ValueError(f"EncoderModel: {L} tokens, more than max_len={c.max_len}")
        if int(tokens.max()) >= c.vocab_size:
            raise ValueError(f"EncoderModel: token id {int(tokens.max())} is outside the vocabulary of {c.vocab_size}")
        for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if t is not None and (not isinstance(t, Tensor) or t.shape != tokens.shape):
                raise ValueError(f"EncoderModel: {name} must be (B, L) = {tuple(tokens.shape)}, got "
                                 f"{tuple(getattr(t, 'shape', ()))}")
        types = torch.zeros_like(tokens) if token_type_ids is None else token_type_ids
        x = self.embed_tokens(tokens) + self.embed_positions.weight[:L] + self.embed_types(types)  # (B, L, D)
        x = self.embed_norm(x)
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L): keys
        weights = []
        for layer in self.layers:
            if return_weights:
                weights.append(layer.self_attn(x, x, x, mask, check_inputs=False)[1])  # (B, H, L, L)
            x = layer(x, mask, check_inputs=False)
        return (x, weights) if return_weights else x

    def pooled(self, hidden: Tensor) -> Tensor:
        """BERT's pooled output ``(B, D)``: ``tanh(pooler(hidden[:, 0]))``, the first token's state."""
        if self.pooler is None:
            raise ValueError("EncoderModel.pooled: this model has no pooler (EncoderConfig(pooler=True) adds one)")
        return torch.tanh(self.pooler(hidden[:, 0]))
