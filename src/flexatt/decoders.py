"""One-layer LSTM decoder with attention, Bahdanau style (docs/method.md, Model).

At step t (1-based), with previous state h_{t-1} and feedback embedding i_t = E[y_{t-1}]:

1. a_t, c_t = attention(query = h_{t-1}, feedback = i_t)           (``attention/``)
2. h_t = LSTM([i_t; c_t], h_{t-1})                                 (:meth:`RecurrentDecoder.lstm`)
3. o_t = tanh(W_o [h_t; c_t; i_t] + b_o),  logits_t = W_s o_t     (readout, paper: 600 units)

``forward`` runs teacher forcing over a whole target with the very same recurrence
(attention + LSTM) that ``step`` (greedy / beam search) uses; since the readout does not feed
back into the recurrence, it is applied once to all steps (one large matrix product instead
of T small ones). Dropout is applied to the feedback
embeddings i_t and to o_t before W_s.

Mixed precision (``trainer.precision: bf16-mixed``, which runs the training and validation steps
under ``torch.autocast``): the readout follows the autocast (its two products, above all W_s
over every target token, are most of a training step's arithmetic, and bf16 products are
faster on CPUs with AVX512-BF16 or AMX: benchmarks/README.md); the recurrence does not
(:func:`full_precision`): its products are small, the casts would cost more than they save, and
p_t, g_t and the windows stay exact float32 quantities. The logits are returned in float32 either way.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flexatt.attention import Attention, AttentionCache, AttentionState, AttentionStats
from flexatt.encoders import EncoderOutput
from flexatt.tau import INF


def full_precision(device_type: str):
    """A context that turns an enclosing ``torch.autocast`` off for ``device_type`` ("cpu",
    "cuda"), or does nothing when none is on (the common case costs one flag check)."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


class DecoderState(NamedTuple):
    """All recurrent state of the decoder between two steps, one row per hypothesis; beam search
    selects the rows of the surviving hypotheses with :meth:`index_select` at every step."""

    hidden: Tensor  # batch x H           h_{t-1}
    cell: Tensor  # batch x H             LSTM cell
    attention: AttentionState  # p_{t-1}, c̃_{t-1}, steps taken

    def index_select(self, index: Tensor) -> "DecoderState":
        return DecoderState(
            self.hidden.index_select(0, index),
            self.cell.index_select(0, index),
            self.attention.index_select(index),
        )


class LSTMWeights(NamedTuple):
    """The decoder LSTM's parameters split for :meth:`RecurrentDecoder.lstm`."""

    feedback: Tensor  # 4H x E        W_ie
    context: Tensor  # 2H x 4H        W_icᵀ
    hidden: Tensor  # H x 4H          W_hhᵀ
    bias: Tensor  # 4H                b_ih + b_hh


class RecurrentDecoder(nn.Module):
    """Bahdanau-style attentional LSTM decoder.

    :param attention: any :class:`flexatt.attention.Attention` (query size = ``hidden_size``,
        key/context size = ``ctx_size``, feedback size = ``emb_size``).
    """

    def __init__(
        self,
        vocab_size: int,
        emb_size: int,
        hidden_size: int,
        ctx_size: int,
        readout_size: int,
        attention: Attention,
        dropout: float = 0.0,
        pad_id: int = 0,
    ):
        super().__init__()
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.embed = nn.Embedding(vocab_size, emb_size, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.attention = attention
        self.rnn = nn.LSTMCell(emb_size + ctx_size, hidden_size)
        self.W_o = nn.Linear(hidden_size + ctx_size + emb_size, readout_size)
        self.W_s = nn.Linear(readout_size, vocab_size)

    def init_state(self, enc: EncoderOutput) -> tuple[AttentionCache, DecoderState]:
        """Cache the attention keys and build the state before step 1 (p_0 = 1,
        c̃_0 = mean h̄, h_0/c_0 from the encoder)."""
        cache = self.attention.precompute(enc.states, enc.mask)
        att_state = self.attention.init_state(cache, enc.summary)
        return cache, DecoderState(enc.hidden, enc.cell, att_state)

    def lstm_weights(self) -> "LSTMWeights":
        """``self.rnn``'s parameters with the input projection split by input,
        W_ih [i_t; c_t] = W_ie i_t + W_ic c_t. Teacher forcing splits them once per batch, not
        once per step (the backward of a slice fills a zero tensor of the whole W_ih)."""
        n_emb = self.embed.embedding_dim
        w_ih = self.rnn.weight_ih  # 4H x (E + 2H)
        return LSTMWeights(w_ih[:, :n_emb], w_ih[:, n_emb:].t(), self.rnn.weight_hh.t(),
                           self.rnn.bias_ih + self.rnn.bias_hh)

    @staticmethod
    def input_gates(i: Tensor, w: "LSTMWeights") -> Tensor:
        """The feedback half of the LSTM's input projection: W_ie i_t + b_ih + b_hh, for any
        leading shape (... x E -> ... x 4H). It does not depend on the recurrence, so teacher
        forcing computes it for every step in one product."""
        return F.linear(i, w.feedback, w.bias)

    @staticmethod
    def lstm(gates_i: Tensor, context: Tensor, hidden: Tensor, cell: Tensor,
             w: "LSTMWeights") -> tuple[Tensor, Tensor]:
        """h_t, c_t = LSTM([i_t; c_t], (h_{t-1}, c_{t-1})): the equations of ``torch.nn.LSTMCell``
        (gates i, f, g, o) with its parameters, from the feedback half of the input projection
        (:meth:`input_gates`, ``gates_i`` batch x 4H). context: batch x 2H, hidden / cell:
        batch x H."""
        gates = torch.addmm(gates_i, context, w.context).addmm_(hidden, w.hidden)  # batch x 4H
        in_gate, forget_gate, cell_gate, out_gate = gates.chunk(4, dim=1)
        cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(in_gate) * torch.tanh(cell_gate)
        return torch.sigmoid(out_gate) * torch.tanh(cell), cell

    def _recur(
        self, i_t: Tensor, gates_i: Tensor, state: DecoderState, cache: AttentionCache,
        tau: float, w: "LSTMWeights",
    ) -> tuple[Tensor, DecoderState, Tensor, AttentionStats]:
        """Attention and the LSTM for one step, from an (already dropped-out) feedback
        embedding i_t: batch x E and its input gates (:meth:`input_gates`, batch x 4H).
        Returns the context c_t (batch x 2H), the new state (holding h_t), the weights a_t
        (batch x S) and the stats."""
        context, weights, att_state, stats = self.attention(
            state.hidden, i_t, cache, state.attention, tau
        )  # batch x 2H, batch x S
        h_t, c_t = self.lstm(gates_i, context, state.hidden, state.cell, w)
        return context, DecoderState(h_t, c_t, att_state), weights, stats

    def readout(self, h: Tensor, context: Tensor, i: Tensor) -> Tensor:
        """o_t = tanh(W_o [h_t; c_t; i_t] + b_o), logits = W_s o_t, for any leading shape
        (one step: batch x ..., or every step of teacher forcing at once: batch x T x ...)."""
        o = torch.tanh(self.W_o(torch.cat([h, context, i], dim=-1)))  # ... x readout
        return self.W_s(self.dropout(o)).float()  # ... x V (float32 also under autocast)

    def step(
        self,
        prev_tokens: Tensor,
        state: DecoderState,
        cache: AttentionCache,
        tau: float = INF,
    ) -> tuple[Tensor, DecoderState, Tensor, AttentionStats]:
        """One decoding step.

        :param prev_tokens: batch, y_{t-1} (BOS at t = 1)
        :return: logits batch x V, new state, attention weights batch x S, stats
        """
        with full_precision(prev_tokens.device.type):
            i_t = self.dropout(self.embed(prev_tokens))  # batch x E
            w = self.lstm_weights()
            context, state, weights, stats = self._recur(i_t, self.input_gates(i_t, w), state, cache, tau, w)
        return self.readout(state.hidden, context, i_t), state, weights, stats

    def forward(
        self,
        tgt_in: Tensor,
        cache: AttentionCache,
        state: DecoderState,
        tau: float = INF,
    ) -> tuple[Tensor, dict]:
        """Teacher-forced decoding of a whole target.

        :param tgt_in: batch x T, y_0 (BOS) .. y_{T-1}
        :return: logits batch x T x V and aux traces: ``attention`` batch x T x S,
            ``window`` batch x T (long), ``position`` batch x T (p_t), ``span_lo`` /
            ``span_hi`` batch x T (1-based), ``g`` batch x T and ``temperature`` batch x T
            (``None`` for variants without them), ``state`` the final DecoderState.
            Steps at target padding are computed too; mask them in the loss.
        """
        with full_precision(tgt_in.device.type):
            emb = self.dropout(self.embed(tgt_in))  # batch x T x E
            w = self.lstm_weights()
            gates_i = self.input_gates(emb, w)  # batch x T x 4H, all steps in one product
            hiddens, contexts, weights, stats = [], [], [], []
            # unbind, not emb[:, t]: the backward of T selects would fill T zero tensors of emb's size
            for emb_t, gates_t in zip(emb.unbind(1), gates_i.unbind(1)):
                context_t, state, weight_t, stat_t = self._recur(emb_t, gates_t, state, cache, tau, w)
                hiddens.append(state.hidden)
                contexts.append(context_t)
                weights.append(weight_t)
                stats.append(stat_t)
        # the readout does not feed back into the recurrence: one batched call for all steps,
        # under the caller's autocast if there is one
        logits = self.readout(torch.stack(hiddens, 1), torch.stack(contexts, 1), emb)
        aux = {"attention": torch.stack(weights, 1), "state": state}
        for name in AttentionStats._fields:
            values = [getattr(s, name) for s in stats]
            aux[name] = None if values[0] is None else torch.stack(values, 1)
        return logits, aux
