"""Bidirectional LSTM encoder (Bahdanau et al. 2014; Flexible Attention 2017 §5.1)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class EncoderOutput(NamedTuple):
    """What the decoder needs from the encoder."""

    states: Tensor  # batch x src_len x 2H   h̄_1..h̄_S (zeros at padding)
    mask: Tensor  # batch x src_len          bool, True at real positions
    summary: Tensor  # batch x 2H            mean of h̄ over real positions
    hidden: Tensor  # batch x H              initial decoder state h_0
    cell: Tensor  # batch x H                initial decoder cell c_0


class RecurrentEncoder(nn.Module):
    """Embeddings -> dropout -> bidirectional LSTM over the real positions of each row (on a
    CPU with the two directions run apart, :meth:`_directions_apart`; elsewhere over packed
    sequences; a batch without padding, e.g. one sentence, directly).

    Initial decoder state (the papers do not fix it; this is our choice):
    h_0 = tanh(W_init · m + b_init) with m = (1/S_i) Σ_{s<=S_i} h̄_s the mean of the encoder
    states over the real positions, and c_0 = 0. ``m`` is also returned as ``summary``: SACT
    initialises its previous context c̃_0 from it (see ``attention.SACTAttention``).
    """

    def __init__(
        self,
        vocab_size: int,
        emb_size: int,
        hidden_size: int,
        dec_hidden_size: int,
        dropout: float = 0.0,
        pad_id: int = 0,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.hidden_size = hidden_size
        self.embed = nn.Embedding(vocab_size, emb_size, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.LSTM(emb_size, hidden_size, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden_size, dec_hidden_size)

    @property
    def output_size(self) -> int:
        return 2 * self.hidden_size

    def forward(self, src: Tensor, src_len: Tensor) -> EncoderOutput:
        """
        :param src: batch x src_len token ids (padded with ``pad_id``)
        :param src_len: batch real lengths (>= 1)
        """
        max_len = src.size(1)
        emb = self.dropout(self.embed(src))  # batch x S x E
        lengths = src_len.detach().cpu()
        if bool((lengths == max_len).all()):  # no padding (e.g. one sentence): nothing to pack
            states, _ = self.rnn(emb)  # batch x S x 2H
        elif emb.device.type == "cpu":
            states = self._directions_apart(emb, lengths)
        else:  # cuDNN runs packed sequences well
            packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            states, _ = pad_packed_sequence(out, batch_first=True, total_length=max_len)  # batch x S x 2H
        return self.output(states, src_len)

    def output(self, states: Tensor, src_len: Tensor) -> EncoderOutput:
        """The :class:`EncoderOutput` of the LSTM states (batch x S x 2H, zeros at padding):
        the mask, the mean m of h̄ over the real positions, h_0 = tanh(W_init · m + b_init),
        c_0 = 0. (``flexatt.decoding.kernel`` runs the LSTM in the kernel and calls this too.)"""
        positions = torch.arange(states.size(1), device=states.device)
        mask = positions.unsqueeze(0) < src_len.to(states.device).unsqueeze(1)  # batch x S
        summary = states.sum(1) / src_len.to(states.dtype).to(states.device).unsqueeze(1)  # batch x 2H
        hidden = torch.tanh(self.bridge(summary))  # batch x H
        cell = torch.zeros_like(hidden)
        return EncoderOutput(states, mask, summary, hidden, cell)

    def _directions_apart(self, emb: Tensor, lengths: Tensor) -> Tensor:
        """``self.rnn`` over a padded batch (lengths: batch, on the CPU) without packing: the
        forward direction runs over the padded batch as it is (its states at real positions never
        see the padding that follows them); the backward direction runs forward over each row
        reversed within its length, and its states are reversed back. Padding positions are zero,
        as after ``pad_packed_sequence``. The same equations and parameters as the packed call;
        on a CPU each direction is then one oneDNN call over the whole batch instead of
        PyTorch's packed-sequence loop, in training too (the backward included; speed:
        benchmarks/README.md).

        :param emb: batch x S x E. :return: batch x S x 2H.
        """
        rnn = self.rnn
        batch, max_len, _ = emb.shape
        steps = torch.arange(max_len).unsqueeze(0)  # 1 x S
        real = steps < lengths.unsqueeze(1)  # batch x S
        # slot s of a row reversed within its length: len - 1 - s inside, s on the padding (an involution)
        rev = torch.where(real, lengths.unsqueeze(1) - 1 - steps, steps).to(emb.device)
        h0 = emb.new_zeros(1, batch, rnn.hidden_size)
        outputs = []
        for suffix, inp in (("", emb), ("_reverse", emb.gather(1, rev.unsqueeze(-1).expand_as(emb)))):
            params = [getattr(rnn, f"{name}_l0{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            out = torch._VF.lstm(inp, (h0, h0), params, True, 1, 0.0, self.training, False, True)[0]  # batch x S x H
            outputs.append(out)
        outputs[1] = outputs[1].gather(1, rev.unsqueeze(-1).expand_as(outputs[1]))
        return torch.cat(outputs, -1) * real.to(emb.device).unsqueeze(-1).to(emb.dtype)
