"""A pre-norm Transformer encoder–decoder whose cross-attention is global, a fixed window
(local-m) or flexible: the papers' window on every decoder layer (docs/method.md, Transformer).

Shapes: ``B`` sentences, ``S`` source positions (``S_i`` real ones), ``T`` target steps, ``d``
the model size, ``h`` heads of ``d_h = d / h``, ``L`` decoder layers. Positions are 1-based, as in
:mod:`flexatt.attention`.

Decoder layer l at step t, from its input x (pre-norm; x has read y_{<t} through masked
self-attention)::

    x  = x + SelfAttention(LN₁(x))                     causal; cached keys/values when decoding
    y  = LN₂(x)
    x  = x + CrossAttention(y)                         below
    x  = x + FFN(LN₃(x))

Cross-attention of layer l, every head h, source position s (:class:`CrossAttention`)::

    logits_{t,s}^{l,h} = q_t^{l,h} · k_s^{l,h} / √d_h − g_t^l (s − p_t^l)² / (2σ²)    (flexible)
    g_t^l = sigmoid(v_gᵀ tanh(W_g y_t) + b_g)                                       strength
    p_t^l = S_i · sigmoid(v_pᵀ tanh(W_p y_t))                         centre "query" (local-p style)
    p_t^l = Σ_s ā_t^{l−1}(s) · s          centre "below": the layer below's head-averaged weights
                                            at the same step (layer 1: "query")

the same penalty for every head of the layer, so one window per layer and step. At a finite τ
only the positions with penalty < τ are scored (the window of :mod:`flexatt.attention.flexible`,
s ∈ (p − σ√(2τ/g), p + σ√(2τ/g)) ∩ [1, S_i], the position nearest p always): their keys and
values are gathered and nothing else is computed. Local-m scores p_t ± D with p_t = t
(``local_m``) or p_t = t / ρ (``local_mr``, ρ the corpus's target/source length ratio); global
every real position. Training stays parallel over t: no centre depends on the previous step.

The window a step reports is the positions scored per cross-attention layer, averaged over the L
layers (each layer's count is in the traces' ``layers``).

Hand-written attention because the window and the centre need the weights:
``torch.nn.functional.scaled_dot_product_attention`` returns none; it computes the
self-attention, whose weights nothing reads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flexatt.attention import AttentionStats
from flexatt.attention.flexible import span_radius, window_bounds
from flexatt.tau import INF

NEG_INF = float("-inf")
CROSS_KINDS = ("global", "flexible", "local_m", "local_mr")
CENTRES = ("query", "below")


@dataclass(frozen=True)
class TransformerConfig:
    """The network's sizes and its cross-attention (``cross``: one of :data:`CROSS_KINDS`;
    ``centre``: flexible's centre, one of :data:`CENTRES`; ``align_layer``: the decoder layer whose
    head-averaged cross-attention a step returns as its alignment, Python-indexed: −2 the
    penultimate, as Garg et al. 2019 find aligns best)."""

    d_model: int = 256
    heads: int = 4
    enc_layers: int = 3
    dec_layers: int = 3
    ff_size: int = 1024
    dropout: float = 0.1
    cross: str = "global"
    centre: str = "query"
    sigma: float = 1.5
    local_D: int = 10
    length_ratio: float = 1.0
    att_size: int = 128
    max_len: int = 512
    align_layer: int = -2
    share_embeddings: bool = False

    def __post_init__(self):
        if self.cross not in CROSS_KINDS:
            raise ValueError(f"cross must be one of {', '.join(CROSS_KINDS)} (got {self.cross!r})")
        if self.centre not in CENTRES:
            raise ValueError(f"centre must be one of {', '.join(CENTRES)} (got {self.centre!r})")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})")
        if not -self.dec_layers <= self.align_layer < self.dec_layers:
            raise ValueError(f"align_layer must index one of the {self.dec_layers} decoder layers "
                             f"(got {self.align_layer})")


def sinusoids(length: int, d: int) -> Tensor:
    """The sinusoidal position encodings of Vaswani et al. (2017, §3.5): length x d."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    rate = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(length, d)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: d // 2])
    return table


def _heads(x: Tensor, heads: int) -> Tensor:
    """B x T x d -> B x h x T x d_h."""
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)


def _merge(x: Tensor) -> Tensor:
    """B x h x T x d_h -> B x T x d."""
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


class SelfAttention(nn.Module):
    """Multi-head self-attention through ``scaled_dot_product_attention``; with ``past`` (the
    keys and values of the earlier steps, B x h x t x d_h each) it attends to them and returns
    them with this call's appended (incremental decoding)."""

    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None, causal: bool = False,
                past: Optional[tuple[Tensor, Tensor]] = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x B x T x d; ``mask`` B x S bool (True at real keys) -> B x T x d and (keys, values)."""
        q, k, v = (_heads(z, self.heads) for z in self.qkv(x).chunk(3, dim=-1))
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
            causal = False  # one new step attends to every earlier one
        attn_mask = None if mask is None else mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.out(_merge(out)), (k, v)


class Memory(NamedTuple):
    """One cross-attention layer's keys and values of the source, computed once per sentence."""

    keys: Tensor  # B x h x S x d_h
    values: Tensor  # B x h x S x d_h

    def index_select(self, index: Tensor) -> "Memory":
        return Memory(self.keys.index_select(0, index), self.values.index_select(0, index))


class CrossAttention(nn.Module):
    """One decoder layer's cross-attention: ``kind`` global, flexible or a fixed window (the
    module's docstring has the equations)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.kind, self.heads, self.sigma, self.D = cfg.cross, cfg.heads, cfg.sigma, cfg.local_D
        # ρ of local_mr, set from the training corpus (:meth:`TransformerSeq2Seq.set_length_ratio`), saved with the weights
        self.register_buffer("length_ratio", torch.tensor(float(cfg.length_ratio)))
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)
        self.dropout = nn.Dropout(cfg.dropout)
        if self.kind == "flexible":
            self.W_g = nn.Linear(d, cfg.att_size)
            self.v_g = nn.Linear(cfg.att_size, 1)
            self.W_p = nn.Linear(d, cfg.att_size)  # the centre predicted from the query
            self.v_p = nn.Linear(cfg.att_size, 1, bias=False)

    def memory(self, enc: Tensor) -> Memory:
        """enc B x S x d (the encoder's normed output) -> this layer's keys and values."""
        k, v = self.kv(enc).chunk(2, dim=-1)
        return Memory(_heads(k, self.heads), _heads(v, self.heads))

    # -- equations -----------------------------------------------------------------------
    def strength(self, y: Tensor) -> Tensor:
        """g_t^l = sigmoid(v_gᵀ tanh(W_g y_t) + b_g): B x T x d -> B x T."""
        return torch.sigmoid(self.v_g(torch.tanh(self.W_g(y)))).squeeze(-1)

    def predicted_centre(self, y: Tensor, lengths: Tensor) -> Tensor:
        """p_t^l = S_i · sigmoid(v_pᵀ tanh(W_p y_t)) (local-p's centre, Luong et al. 2015 eq. 9):
        B x T x d -> B x T, in (0, S_i)."""
        return lengths.to(y.dtype).unsqueeze(1) * torch.sigmoid(self.v_p(torch.tanh(self.W_p(y)))).squeeze(-1)

    def penalty(self, positions: Tensor, centre: Tensor, g: Tensor) -> Tensor:
        """g_t (s − p_t)² / (2σ²): positions (1-based) broadcastable to centre/g B x T x 1."""
        return g * (positions.to(g.dtype) - centre).pow(2) / (2.0 * self.sigma ** 2)

    def span(self, centre: Tensor, g: Optional[Tensor], tau: float, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The window (1-based inclusive bounds, B x T long): flexible's positions with penalty
        < τ, widened to the position nearest the centre (the RNN's rule,
        :func:`flexatt.attention.flexible.window_bounds`); a fixed window's centre ± D; both
        within [1, S_i]."""
        length = lengths.to(centre.dtype).unsqueeze(1)  # B x 1
        if g is not None:
            return window_bounds(centre, span_radius(self.sigma, g, tau), length)
        nearest = torch.minimum(torch.round(centre).clamp_min(1.0), length)  # local-m: p_t ± D
        lo = torch.minimum((nearest - self.D).clamp_min(1.0), nearest)
        hi = torch.maximum(torch.minimum(nearest + self.D, length), nearest)
        return lo.long(), hi.long()

    def centre_and_strength(self, y: Tensor, steps: Tensor, lengths: Tensor,
                            below: Optional[Tensor]) -> tuple[Optional[Tensor], Optional[Tensor]]:
        """(p_t, g_t), each B x T or ``None``: ``steps`` B x T (t, 1-based); ``below`` the layer
        below's centre (flexible with centre "below", above layer 1)."""
        if self.kind == "global":
            return None, None
        if self.kind in ("local_m", "local_mr"):
            t = steps.to(y.dtype)
            return (t if self.kind == "local_m" else t / self.length_ratio.to(t.dtype)), None
        centre = below if below is not None else self.predicted_centre(y, lengths)
        return centre, self.strength(y)

    # -- forward -------------------------------------------------------------------------
    def windowed(self, tau: float) -> bool:
        """Whether this layer scores a window at ``tau`` (a fixed window always, flexible at a
        finite τ) rather than every real position."""
        return self.kind in ("local_m", "local_mr") or (self.kind == "flexible" and not math.isinf(tau))

    def forward(self, y: Tensor, memory: Memory, mask: Tensor, steps: Tensor, tau: float = INF,
                below: Optional[Tensor] = None, rows: Optional[Tensor] = None) -> tuple[Tensor, Tensor, dict]:
        """y B x T x d (LN₂ of the layer's input), ``mask`` B x S (True at real positions),
        ``steps`` B x T (t) -> output B x T x d, head-averaged weights B x T x S (zeros outside the
        window and at padding), and per step (B x T): ``window`` (positions scored, counted from
        the index list that was scored), ``span_lo``, ``span_hi``, ``position`` (Σ_s ā(s)·s) and
        ``g`` (``None`` unless flexible). ``rows`` (B long, where :meth:`windowed`): ``memory``
        holds one row per sentence and ``rows`` the sentence of each of the B rows, whose windows
        are gathered from it (decoding: no copy of the keys and values per hypothesis)."""
        lengths = mask.sum(1)
        q = _heads(self.q(y), self.heads)  # B x h x T x d_h
        centre, g = self.centre_and_strength(y, steps, lengths, below)
        if self.windowed(tau):
            out, weights, count, lo, hi = self._windowed(q, memory, lengths, centre, g, tau, rows)
        else:
            if rows is not None:
                raise ValueError("a layer that scores every position reads one memory row per decoding row")
            out, weights = self._dense(q, memory, mask, centre, g)
            count = lengths.unsqueeze(1).expand(-1, y.size(1))
            lo, hi = torch.ones_like(count), count
        positions = torch.arange(1, mask.size(1) + 1, device=y.device, dtype=weights.dtype)
        stats = {"window": count, "span_lo": lo, "span_hi": hi, "position": (weights * positions).sum(-1), "g": g}
        return self.out(_merge(out)), weights, stats

    def _dense(self, q: Tensor, memory: Memory, mask: Tensor, centre: Optional[Tensor],
               g: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        """Every real position scored (global, or flexible at τ = ∞ with its penalty)."""
        logits = q @ memory.keys.transpose(-1, -2) / math.sqrt(q.size(-1))  # B x h x T x S
        if g is not None:
            positions = torch.arange(1, mask.size(1) + 1, device=q.device)
            logits = logits - self.penalty(positions, centre.unsqueeze(-1), g.unsqueeze(-1)).unsqueeze(1)
        a = torch.softmax(logits.masked_fill(~mask[:, None, None, :], NEG_INF), dim=-1)
        return self.dropout(a) @ memory.values, a.mean(1)

    def _windowed(self, q: Tensor, memory: Memory, lengths: Tensor, centre: Tensor, g: Optional[Tensor],
                  tau: float, rows: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Only the window's positions scored: their keys and values gathered per (row, step)
        pair, one dot product per gathered position and head; ``rows``: the memory row of each
        row (None: its own)."""
        b, h, t, dh = q.shape
        src_len = memory.keys.size(2)
        lo, hi = self.span(centre, g, tau, lengths)  # B x T
        width = hi - lo + 1
        slot = torch.arange(int(width.max()), device=q.device)
        in_window = slot < width.unsqueeze(-1)  # B x T x W
        sent, step, col = in_window.nonzero(as_tuple=True)  # P each: the (row, step, slot) scored
        index = lo[sent, step] + col - 1  # P (0-based source position)
        source = sent if rows is None else rows[sent]  # P: the memory row each is gathered from
        # the gathers as row copies out of (rows x positions) x h x d_h (a view of the keys' and
        # values' layout as the projection wrote them: B x S x h x d_h), several times faster than
        # indexing the two dimensions; the same numbers
        at = source * src_len + index  # P
        keys = memory.keys.permute(0, 2, 1, 3).reshape(-1, h, dh).index_select(0, at)  # P x h x d_h
        values = memory.values.permute(0, 2, 1, 3).reshape(-1, h, dh).index_select(0, at)  # P x h x d_h
        row_step = sent * t + step  # P
        queries = q.permute(0, 2, 1, 3).reshape(-1, h, dh).index_select(0, row_step)  # P x h x d_h
        flat = (queries * keys).sum(-1) / math.sqrt(dh)  # P x h
        if g is not None:
            flat = flat - self.penalty(index + 1, centre[sent, step], g[sent, step]).unsqueeze(-1)
        w = slot.numel()
        scores = flat.new_full((b, t, w, h), NEG_INF).index_put((sent, step, col), flat)
        a = torch.softmax(scores, dim=2)  # B x T x W x h, exact zeros outside each window
        scored = row_step * w + col  # P: each one's (row, step, slot) in a
        # Σ over each (row, step)'s positions, in their order: index_add_ over the flat (row, step)
        # index (several times faster than index_put(accumulate=True) over two index lists)
        context = flat.new_zeros(b * t, h, dh).index_add_(
            0, row_step, self.dropout(a).reshape(-1, h).index_select(0, scored).unsqueeze(-1) * values
        ).view(b, t, h, dh)  # B x T x h x d_h
        # each (row, step, position) once: written, not added
        weights = a.new_zeros(b, t, src_len).index_put(
            (sent, step, index), a.reshape(-1, h).index_select(0, scored).mean(-1))
        count = torch.bincount(row_step, minlength=b * t).view(b, t)  # positions scored per (row, step)
        return context.transpose(1, 2), weights, count, lo, hi


class FeedForward(nn.Sequential):
    """FFN(x) = W₂ dropout(ReLU(W₁ x)) (Vaswani et al. 2017, eq. 2)."""

    def __init__(self, d: int, ff: int, dropout: float):
        super().__init__(nn.Linear(d, ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff, d))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attention = SelfAttention(cfg.d_model, cfg.heads, cfg.dropout)
        self.ff = FeedForward(cfg.d_model, cfg.ff_size, cfg.dropout)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = x + self.dropout(self.attention(self.norm1(x), mask)[0])
        return x + self.dropout(self.ff(self.norm2(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.attention = SelfAttention(cfg.d_model, cfg.heads, cfg.dropout)
        self.cross = CrossAttention(cfg)
        self.ff = FeedForward(cfg.d_model, cfg.ff_size, cfg.dropout)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, memory: Memory, mask: Tensor, steps: Tensor, tau: float,
                below: Optional[Tensor], past: Optional[tuple[Tensor, Tensor]] = None, rows: Optional[Tensor] = None):
        """-> the layer's output, its self-attention keys/values, its cross-attention weights and
        stats (``rows``: :meth:`CrossAttention.forward`'s)."""
        attended, kv = self.attention(self.norm1(x), causal=past is None, past=past)
        x = x + self.dropout(attended)
        crossed, weights, stats = self.cross(self.norm2(x), memory, mask, steps, tau, below, rows)
        x = x + self.dropout(crossed)
        return x + self.dropout(self.ff(self.norm3(x))), kv, weights, stats


class TransformerCache(NamedTuple):
    """Per sentence: every decoder layer's source keys/values (:class:`Memory`), the mask and
    lengths. The searches read it through :meth:`by_row` (:class:`TransformerRows`)."""

    memories: tuple[Memory, ...]
    mask: Tensor  # B x S bool
    lengths: Tensor  # B long

    @property
    def src_len(self) -> int:
        return self.mask.size(1)

    def index_select(self, index: Tensor) -> "TransformerCache":
        return TransformerCache(tuple(m.index_select(index) for m in self.memories),
                                self.mask.index_select(0, index), self.lengths.index_select(0, index))

    def read(self, layer: int, windowed: bool) -> tuple[Memory, None]:
        """Layer ``layer``'s memory, one row per row (:meth:`TransformerRows.read`)."""
        return self.memories[layer], None

    def by_row(self) -> "TransformerRows":
        """One decoding row per sentence, as a row map."""
        return TransformerRows(self, torch.arange(self.lengths.size(0), device=self.lengths.device))


class TransformerRows:
    """The cache of a batch of sentences (``base``) read by N decoding rows (``rows``: N long, the
    sentence of each row), as :class:`flexatt.attention.RowMap` is for the RNN: a reorder of the
    rows (beam expansion, a sentence ending) composes the map instead of copying every layer's
    keys and values once per hypothesis. A layer that scores a window gathers its positions from
    ``base`` through ``rows`` (:meth:`CrossAttention.forward`); one that scores every position
    reads the rows' own copy (:meth:`read`, made once per map, on first use); the numbers are
    those of a copy per row either way."""

    __slots__ = ("base", "rows", "_per_row", "_mask")

    def __init__(self, base: TransformerCache, rows: Tensor):
        self.base, self.rows = base, rows
        self._per_row: Optional[TransformerCache] = None
        self._mask: Optional[Tensor] = None

    def index_select(self, index: Tensor) -> "TransformerRows":
        """The rows ``index`` (long N'), in that order: the map composed, nothing copied."""
        return TransformerRows(self.base, self.rows.index_select(0, index))

    @property
    def src_len(self) -> int:
        return self.base.src_len

    def _identity(self) -> bool:
        n = self.base.lengths.size(0)
        return self.rows.numel() == n and torch.equal(self.rows, torch.arange(n, device=self.rows.device))

    @property
    def mask(self) -> Tensor:
        """N x S, the rows' mask."""
        if self._mask is None:
            self._mask = self.base.mask if self._identity() else self.base.mask.index_select(0, self.rows)
        return self._mask

    def read(self, layer: int, windowed: bool) -> tuple[Memory, Optional[Tensor]]:
        """Layer ``layer``'s memory and the sentence of each row in it: for a layer that scores a
        window, the sentences' own and ``rows``; else one row per decoding row (a copy of every
        layer's, made once per map) and None."""
        if windowed:
            return self.base.memories[layer], self.rows
        if self._per_row is None:
            self._per_row = self.base if self._identity() else self.base.index_select(self.rows)
        return self._per_row.memories[layer], None


class TransformerState(NamedTuple):
    """The decoder's self-attention keys and values of the steps taken (per layer, N x h x t x d_h)
    and t, one row per hypothesis."""

    keys: tuple[Tensor, ...]
    values: tuple[Tensor, ...]
    step: Tensor  # N long: steps taken

    def index_select(self, index: Tensor) -> "TransformerState":
        return TransformerState(tuple(k.index_select(0, index) for k in self.keys),
                                tuple(v.index_select(0, index) for v in self.values), self.step.index_select(0, index))


def config_of(model, share_embeddings: bool = False) -> TransformerConfig:
    """The :class:`TransformerConfig` of a validated ``model`` config (:class:`flexatt.schema.Model`
    with ``arch`` transformer): ``hidden_size`` is d, ``layers`` the encoder's and the decoder's,
    ``attention`` the cross-attention; ``share_embeddings`` where the vocabulary is joint (the
    vocabulary is data, not a model setting: :func:`flexatt.model.build_model`)."""
    return TransformerConfig(d_model=model.hidden_size, heads=model.heads, enc_layers=model.layers,
                             dec_layers=model.layers, ff_size=model.ff_size, dropout=model.dropout,
                             cross=model.attention, centre=model.centre, sigma=model.sigma, local_D=model.local_D,
                             att_size=model.att_size, max_len=max(model.max_src_len, 512),
                             align_layer=model.align_layer, share_embeddings=share_embeddings)


class TransformerSeq2Seq(nn.Module):
    """Encoder, decoder and the step API of :class:`flexatt.model.Seq2Seq` (``encode``,
    ``decode_step``, ``forward``), so that the searches of :mod:`flexatt.decoding` decode it."""

    def __init__(self, cfg: TransformerConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0,
                 config: Optional[dict] = None):
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        d = cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, d, padding_idx=pad_id)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else nn.Embedding(tgt_vocab, d, padding_idx=pad_id)
        nn.init.normal_(self.tgt_embed.weight, std=d ** -0.5)
        if not cfg.share_embeddings:
            nn.init.normal_(self.src_embed.weight, std=d ** -0.5)
        self.register_buffer("positions", sinusoids(cfg.max_len, d), persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        self.enc_norm, self.dec_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.dropout = nn.Dropout(cfg.dropout)
        #: what rebuilds it (a checkpoint's ``model_cfg``): the validated model config where it was built from one
        self.config = dict(config) if config is not None else {"arch": "transformer", **asdict(cfg)}

    def set_length_ratio(self, rho: float) -> bool:
        """Set ρ of local_mr cross-attention (every layer); ``False`` (nothing set) for another."""
        if self.cfg.cross != "local_mr":
            return False
        for layer in self.decoder:
            layer.cross.length_ratio.fill_(rho)
        return True

    def _embed(self, embed: nn.Embedding, ids: Tensor, first: int | Tensor = 0) -> Tensor:
        """√d · E[ids] + the sinusoid of each position (``first``: the position of column 0)."""
        steps = torch.arange(ids.size(1), device=ids.device) + (first.unsqueeze(1) if torch.is_tensor(first) else first)
        return self.dropout(embed(ids) * math.sqrt(self.cfg.d_model) + self.positions[steps])

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[TransformerCache, TransformerState]:
        """src B x S ids, src_len B -> every layer's keys/values of the source and the empty state."""
        mask = torch.arange(src.size(1), device=src.device).unsqueeze(0) < src_len.unsqueeze(1)
        x = self._embed(self.src_embed, src)
        for layer in self.encoder:
            x = layer(x, mask)
        enc = self.enc_norm(x)
        cache = TransformerCache(tuple(layer.cross.memory(enc) for layer in self.decoder), mask, src_len)
        empty = enc.new_zeros(src.size(0), self.cfg.heads, 0, self.cfg.d_model // self.cfg.heads)
        n = len(self.decoder)
        return cache, TransformerState((empty,) * n, (empty,) * n, torch.zeros_like(src_len))

    def _decode(self, x: Tensor, cache: TransformerCache | TransformerRows, steps: Tensor, tau: float,
                past: Optional[TransformerState]) -> tuple[Tensor, list, list, list]:
        """``cache``: one row per row of ``x`` (teacher forcing), or a row map (decoding): a
        layer that scores a window reads the sentences' memory through the map, any other the
        rows' copy of it."""
        below = None
        kvs, weights, stats = [], [], []
        for i, layer in enumerate(self.decoder):
            layer_past = None if past is None else (past.keys[i], past.values[i])
            memory, rows = cache.read(i, layer.cross.windowed(tau))
            x, kv, w, s = layer(x, memory, cache.mask, steps, tau, below, layer_past, rows)
            below = s["position"] if self.cfg.centre == "below" else None
            kvs.append(kv)
            weights.append(w)
            stats.append(s)
        return self.dec_norm(x) @ self.tgt_embed.weight.t(), kvs, weights, stats

    def _stats(self, weights: list, stats: list) -> tuple[Tensor, dict]:
        """The alignment layer's weights and the step's traces: the window, the positions scored
        per layer averaged over the layers (float64), and each layer's (``layer_window``, the
        layers last), the alignment layer's span and centre, g_t averaged over the layers."""
        align = self.cfg.align_layer
        windows = torch.stack([s["window"] for s in stats])  # L x ...: positions scored per layer
        out = {"window": windows.sum(0).double() / len(stats), "layer_window": windows.movedim(0, -1),
               "span_lo": stats[align]["span_lo"],
               "span_hi": stats[align]["span_hi"], "position": stats[align]["position"],
               "g": None if stats[0]["g"] is None else torch.stack([s["g"] for s in stats]).mean(0),
               "temperature": None}
        return weights[align], out

    def decode_step(self, prev_tokens: Tensor, state: TransformerState, cache: TransformerCache | TransformerRows,
                    tau: float = INF) -> tuple[Tensor, TransformerState, Tensor, AttentionStats]:
        """prev_tokens N (y_{t−1}) -> logits N x V (float32), the state with this step's
        self-attention keys/values, the alignment layer's weights N x S and the stats."""
        steps = (state.step + 1).unsqueeze(1)  # N x 1 (t)
        x = self._embed(self.tgt_embed, prev_tokens.unsqueeze(1), state.step)
        logits, kvs, weights, stats = self._decode(x, cache, steps, tau, state)
        new = TransformerState(tuple(k for k, _ in kvs), tuple(v for _, v in kvs), state.step + 1)
        w, s = self._stats(weights, stats)
        return logits[:, 0].float(), new, w[:, 0], AttentionStats(**{k: None if v is None else v[:, 0]
                                                                      for k, v in s.items()})

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor, tau: float = INF) -> tuple[Tensor, dict]:
        """Teacher forcing, every step at once: logits B x T x V and the traces ``attention``
        B x T x S (the alignment layer's), ``window``, ``span_lo``, ``span_hi``, ``position``, ``g``
        (B x T; ``g`` averaged over the layers, ``None`` unless flexible), ``layers`` (every
        layer's stats)."""
        cache, _ = self.encode(src, src_len)
        steps = torch.arange(1, tgt_in.size(1) + 1, device=tgt_in.device).unsqueeze(0).expand(tgt_in.size(0), -1)
        logits, _, weights, stats = self._decode(self._embed(self.tgt_embed, tgt_in), cache, steps, tau, None)
        w, s = self._stats(weights, stats)
        return logits.float(), {"attention": w, **s, "layers": stats}
