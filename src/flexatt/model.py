"""The attentional encoder-decoder, its config validation and its losses.

Greedy decoding with the step API::

    cache, state = model.encode(src, src_len)                 # batch rows
    y = torch.full((batch,), bos_id)
    for _ in range(max_len):
        logits, state, weights, stats = model.decode_step(y, state, cache, tau=tau)
        y = logits.argmax(-1)                                  # stats.window: positions scored

Beam search (:func:`flexatt.decoding.beam_search`) keeps one row per live hypothesis: it decodes
on ``cache.by_row()`` (a :class:`flexatt.attention.RowMap`) and after each step selects the rows
of the surviving hypotheses with ``cache.index_select(origin)`` and ``state.index_select(origin)``
(``origin``: the row of each new hypothesis' parent), an index of N longs for the cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch
from torch import Tensor, nn

import flexatt.variants  # noqa: F401  (registers the variants of src/flexatt/variants/)
from flexatt import schema
from flexatt.attention import (
    AttentionCache,
    AttentionSizes,
    AttentionStats,
    attention_types,
    build_attention,
)
from flexatt.decoders import DecoderState, RecurrentDecoder, full_precision
from flexatt.encoders import RecurrentEncoder
from flexatt.errors import ConfigError
from flexatt.tau import INF

#: model config keys and their defaults (``conf/model/default.yaml``; :class:`flexatt.schema.Model`)
DEFAULTS: dict[str, Any] = schema.Model().model_dump()


class Seq2Seq(nn.Module):
    """Bidirectional-LSTM encoder + attentional LSTM decoder (docs/method.md, Model)."""

    def __init__(
        self,
        encoder: RecurrentEncoder,
        decoder: RecurrentDecoder,
        pad_id: int = 0,
        config: Optional[dict] = None,
    ):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.pad_id = pad_id
        self.config = dict(config or {})

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[AttentionCache, DecoderState]:
        """Encode a batch and prepare decoding.

        :param src: batch x src_len ids, :param src_len: batch lengths
        :return: the attention cache (keys computed once per sentence) and the state
            before step 1 (h_0, c_0, p_0 = 1, c̃_0 = mean h̄)

        Under autocast (bf16-mixed training) the encoder and the key cache stay in float32,
        like the decoder's recurrence (see :mod:`flexatt.decoders`).
        """
        with full_precision(src.device.type):
            return self.decoder.init_state(self.encoder(src, src_len))

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, cache: AttentionCache,
                    tau: float = INF) -> tuple[Tensor, DecoderState, Tensor, AttentionStats]:
        """One decoding step, the decoder's (:meth:`RecurrentDecoder.step`): prev_tokens (batch)
        -> logits batch x V, new state, attention weights batch x S, stats (``stats.window``:
        positions scored per row)."""
        return self.decoder.step(prev_tokens, state, cache, tau)

    def forward(
        self, src: Tensor, src_len: Tensor, tgt_in: Tensor, tau: float = INF
    ) -> tuple[Tensor, dict]:
        """Teacher-forced forward: logits batch x T x V and the decoder's aux traces."""
        cache, state = self.encode(src, src_len)
        return self.decoder(tgt_in, cache, state, tau)


# --------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------
def validate_model(cfg: Mapping | schema.Model) -> schema.Model:
    """A model config (dict, OmegaConf DictConfig or :class:`flexatt.schema.Model`) as a
    :class:`flexatt.schema.Model`, with defaults filled, whose ``attention`` is registered.

    Raises:
        ConfigError: naming the ``model.<key>`` that fails and what it allows.
    """
    model = cfg if isinstance(cfg, schema.Model) else schema.validate_group(schema.Model, cfg, "model")
    require_registered(model)
    return model


def validate_config(cfg: Mapping | schema.Model) -> dict[str, Any]:
    """:func:`validate_model` as a dict (the form checkpoints store)."""
    return validate_model(cfg).model_dump()


def require_registered(cfg: Mapping | schema.Model) -> Mapping | schema.Model:
    """``cfg`` (a validated model config) if its ``attention`` is a variant built in or registered
    by :mod:`flexatt.variants` (the schema cannot know the registry).

    Raises:
        ConfigError: naming ``model.attention`` and the variants there are.
    """
    name = cfg.attention if isinstance(cfg, schema.Model) else cfg["attention"]
    if name not in attention_types():
        raise ConfigError("model.attention", f"must be one of {', '.join(attention_types())} "
                          f"(got {name!r})")
    return cfg


def joint_vocabulary(vocab_digests: Mapping[str, str] | None) -> bool:
    """Whether the source and target SentencePiece models are one (``tokenize.joint``), from the
    digests a checkpoint records (``{"src": sha, "tgt": sha}``; none recorded: not known to be)."""
    return bool(vocab_digests) and vocab_digests.get("src") is not None \
        and vocab_digests.get("src") == vocab_digests.get("tgt")


def build_model(cfg: Mapping | schema.Model, src_vocab: int, tgt_vocab: int, pad_id: int = 0,
                joint_vocab: bool = False) -> nn.Module:
    """Build a :class:`Seq2Seq` from the validated model config (a :class:`flexatt.schema.Model`;
    a mapping is validated first, keys: see :data:`DEFAULTS`); with ``arch`` transformer, a
    :class:`flexatt.transformer.TransformerSeq2Seq` (the same step API), whose source embeddings
    are its target embeddings (and output layer) where the vocabulary is joint (``joint_vocab``,
    :func:`joint_vocabulary`; Press & Wolf 2017, as Vaswani et al. 2017 share them). The RNN keeps
    its own."""
    m = validate_model(cfg)
    if m.arch == "transformer":
        from flexatt.transformer import TransformerSeq2Seq, config_of

        return TransformerSeq2Seq(config_of(m, share_embeddings=joint_vocab), src_vocab, tgt_vocab, pad_id,
                                  m.model_dump())
    hidden, ctx = m.hidden_size, 2 * m.hidden_size
    encoder = RecurrentEncoder(src_vocab, m.emb_size, hidden, hidden, m.dropout, pad_id)
    attention = build_attention(m, AttentionSizes.of(m))  # query h_{t-1}: H, keys h̄: 2H = ctx, feedback: E
    decoder = RecurrentDecoder(
        tgt_vocab,
        m.emb_size,
        hidden,
        ctx,
        m.readout_size,
        attention,
        m.dropout,
        pad_id,
    )
    return Seq2Seq(encoder, decoder, pad_id, m.model_dump())


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


# --------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------
def sequence_nll(logits: Tensor, tgt_out: Tensor, mask: Tensor) -> Tensor:
    """Training cross-entropy: Σ_i -log p(y⁽ⁱ⁾|x⁽ⁱ⁾) / B, i.e. the token NLL summed over the
    real target positions of each sentence and averaged over the B sentences of the batch
    (the first term of eq. 9 of Flexible Attention 2017, per sentence).

    :param logits: batch x T x V, :param tgt_out: batch x T, :param mask: batch x T bool
    """
    return sequence_loss(logits, tgt_out, mask)[1]


def sequence_loss(logits: Tensor, tgt_out: Tensor, mask: Tensor, smoothing: float = 0.0) -> tuple[Tensor, Tensor]:
    """The training loss and the NLL, each summed over the real target positions of each sentence
    and averaged over the B sentences of the batch (:func:`sequence_nll`). The loss is the
    cross-entropy against the label-smoothed target (Szegedy et al. 2016, §7; Vaswani et al. 2017,
    §5.4): (1 - ε) of the reference token and ε spread uniformly over the V tokens (the reference
    included, as ``F.cross_entropy(label_smoothing=ε)``), i.e. per position
    (1 - ε)·(-log p_y) + ε·(1/V)·Σ_v -log p_v; with ε = 0 the loss is the NLL.

    :param logits: batch x T x V, :param tgt_out: batch x T, :param mask: batch x T bool,
    :param smoothing: ε in [0, 1). Returns ``(loss, nll)``, two scalars; only the loss carries a
    gradient where ε > 0."""
    batch, steps, vocab = logits.shape
    # over the flattened (batch*T) x V logits, contiguous rows (see :class:`_TokenNLL`)
    loss, nll = _TokenNLL.apply(logits.reshape(-1, vocab), tgt_out.reshape(-1), float(smoothing))
    weight = mask.to(loss.dtype)
    loss = (loss.view(batch, steps) * weight).sum() / batch
    return loss, ((nll.view(batch, steps) * weight).sum() / batch if smoothing else loss)


class _TokenNLL(torch.autograd.Function):
    """Per row, the label-smoothed cross-entropy (1 - ε)·(-log softmax(logits)_y) + ε·mean_v
    (-log softmax(logits)_v) and the NLL -log softmax(logits)_y (``F.cross_entropy`` with
    ``reduction="none"`` and ``label_smoothing`` ε, and without), with a backward that writes
    softmax(logits) - (1 - ε)·onehot(y) - ε/V (times the incoming gradient) into one new buffer,
    from the saved log-probabilities. The output layer dominates a training step, and autograd
    through log-softmax and NLL fills and copies two more (batch*T) x V tensors.
    ``N x V``, ``N``, ε -> ``N``, ``N``.

    The forward is one ``log_softmax`` pass (no separate max / subtract / exp / sum passes of a
    logsumexp), and its output is what the backward needs. The NLL output is for reporting, with
    no gradient (where ε = 0 the loss is the NLL)."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
        logp = torch.log_softmax(logits, dim=-1)  # N x V
        ctx.save_for_backward(logp, target)
        ctx.smoothing = smoothing
        nll = logp.gather(1, target.unsqueeze(1)).squeeze(1).neg()
        loss = (1.0 - smoothing) * nll - smoothing * logp.mean(1) if smoothing else nll.clone()
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor, _: Tensor | None) -> tuple[Tensor, None, None]:
        logp, target = ctx.saved_tensors
        eps = ctx.smoothing
        out = torch.exp(logp).mul_(grad.unsqueeze(1))  # N x V: softmax · grad
        if eps:
            out.sub_(grad.unsqueeze(1) * (eps / logp.shape[1]))
        return out.scatter_add_(1, target.unsqueeze(1), -(1.0 - eps) * grad.unsqueeze(1)), None, None


def mean_strength(g: Tensor, mask: Tensor) -> Tensor:
    """(1/T_i) Σ_{t<=T_i} g_t⁽ⁱ⁾ per sentence (T_i = real target length): batch x T -> batch."""
    m = mask.to(g.dtype)
    return (g * m).sum(1) / m.sum(1).clamp_min(1.0)


def finetune_loss(logits: Tensor, tgt_out: Tensor, g: Tensor, mask: Tensor, beta: float,
                  smoothing: float = 0.0) -> Tensor:
    """Fine-tuning objective of Flexible Attention (2017 eq. 9; 2016 eq. 9):

        J = Σ_i [ -log p(y⁽ⁱ⁾|x⁽ⁱ⁾) - β (1/T_i) Σ_{t=1..T_i} g_t⁽ⁱ⁾ ],

    divided by the batch size B, where T_i is the number of real (unmasked) target
    positions of sentence i. The CE term is exactly :func:`sequence_nll` (per-sentence sum,
    batch mean) — use the same function for training so that β keeps the paper's balance
    between a sentence's NLL and its mean penalty strength.

    :param logits: batch x T x V, :param tgt_out: batch x T, :param g: batch x T (``aux["g"]``),
    :param mask: batch x T bool (True at real target positions), :param beta: β,
    :param smoothing: ε of the cross-entropy term (:func:`sequence_loss`; 0: the papers' NLL)
    """
    return sequence_loss(logits, tgt_out, mask, smoothing)[0] - beta * mean_strength(g, mask).mean()
